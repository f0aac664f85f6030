"""Trust: every answer comes from the model that was asked, every failure is
named, nothing already computed is lost.

Each test reproduces a defect found by using the compendium as a new user
would (see the docs/troubleshooting.md, "When something goes wrong"): two servers that call
their model by the same name shared every cached answer; a failing API left a
bare AssertionError and a count of "generated" answers that were never
stored; a prompt too long for the context aborted the whole run; a full disk
said "cannot rollback"; imported and generated answers under one model name
hid each other; the importer accepted ids and conditions no notebook reads.
Real stores, real files, the real tiny model and real servers on 127.0.0.1.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest

from medaudit.prep import data, perturb
from medaudit.llm import Completion, GenParams, ResponseStore, mcq, runs, models
from medaudit.llm.base import BackendStopped
from medaudit.llm.importer import ResponseImportError, import_responses
from medaudit.llm.store import StoreWriteError
from support.llama_server import llama_server
from support.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m"


def Scripted(fail=(), stop_after: int | None = None, model_id: str = "scripted-1", learn_at=None):
    """A backend that answers "[A]", fails the requests whose index is in
    ``fail`` with a server-style error, can stop like a backend that sees
    the same 401 over and over, and can learn at ``learn_at`` something that
    changes its identity."""
    def reply(r, i, be):
        if i == stop_after:
            raise BackendStopped(f"HTTP 401 on {i} requests in a row: 'Incorrect API key provided'")
        if i == learn_at:
            be.model_id = be.model_id + " [reasoning]"
        return (Completion(text="", error="HTTP 500: upstream exploded", error_kind="http_500")
                if i in fail else Completion(text="[A]", finish_reason="stop"))

    return ScriptedBackend(reply, model_id=model_id)


@pytest.fixture(scope="module")
def plan_frames(medqa4):
    items = medqa4.head(3).assign(item_id=[f"medqa4-{i:04d}" for i in range(3)])
    variants = items[["item_id", "question"]].assign(condition="base")
    return variants, items


def _plan(plan_frames, backend, k=3, temperature=0.7):
    variants, items = plan_frames
    return mcq.plan(variants, items, model="m", backend=backend.kind, model_id=backend.model_id, k=k, seed=1,
                    gen=GenParams(temperature, 0.9, 8))


# -- counts are true, failures named ------------------------------------------

def test_failed_requests_are_counted_not_reported_as_generated(tmp_path, plan_frames):
    be = Scripted(fail={1, 4})
    samples = _plan(plan_frames, be)
    with ResponseStore(tmp_path / "r.sqlite") as store:
        rep = runs.run(be, store, samples, model="m", progress=False)
        assert store.count() == 7
    assert rep.counts() == {"planned": 9, "cached": 0, "generated": 7, "failed": 2, "too_long": 0, "not_sent": 0}
    f = rep.failures.iloc[0]
    assert (f["kind"], f["count"]) == ("http_500", 2) and "upstream exploded" in f["error"]
    assert f["first"].startswith("medqa4-000") and "k=" in f["first"]
    with pytest.raises(runs.IncompleteRun, match=r"2 of 9 planned requests were not answered[\s\S]*HTTP 500"):
        rep.check()
    assert "failed 2" in repr(rep) and "upstream exploded" in repr(rep)


def test_a_stopped_backend_keeps_what_it_finished_and_says_why(tmp_path, plan_frames):
    be = Scripted(stop_after=4)
    samples = _plan(plan_frames, be)
    with ResponseStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(BackendStopped) as e:
            runs.run(be, store, samples, model="m", progress=False)
        assert store.count() == 4                     # answered before the stop: kept
    msg = str(e.value)
    assert "401" in msg and "Incorrect API key" in msg and "5 not sent" in msg


def test_a_backend_that_changes_identity_mid_run_stores_under_the_new_identity(tmp_path, plan_frames):
    be = Scripted(learn_at=3)
    samples = _plan(plan_frames, be)
    planned = [s.key for s in samples]
    with ResponseStore(tmp_path / "r.sqlite") as store:
        runs.run(be, store, samples, model="m", progress=False)
        rows = store.by_keys(s.key for s in samples)
        assert len(rows) == 9                               # every sample findable by its (updated) key
        assert (rows["model_id"] == "scripted-1 [reasoning]").sum() == 6
        assert sum(s.key != k for s, k in zip(samples, planned)) == 6


def test_answers_under_other_settings_are_not_reused_and_the_report_says_which(tmp_path, plan_frames):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        runs.run(Scripted(), store, _plan(plan_frames, Scripted()), model="m", progress=False)
        rep = runs.run(Scripted(), store, _plan(plan_frames, Scripted(), temperature=0.5), model="m", progress=False)
        assert rep.generated == 9 and rep.other_settings == {"temperature": 9}
        other = Scripted(model_id="scripted-2")
        rep = runs.run(other, store, _plan(plan_frames, other, temperature=0.5), model="m", progress=False)
        assert rep.generated == 9 and rep.other_settings == {"model_id": 9}
        assert "model_id 9" in repr(rep)


def test_the_other_settings_check_reads_only_the_planned_questions_rows(tmp_path):
    """Why stored answers are not reused is read for the planned samples' own questions, not
    from every row the model has in the store: a stage that runs one request at a time (05's
    entailment pairs) would otherwise read the whole store per request, a cost that grows with
    the store."""
    prompts = pd.DataFrame([{"item_id": "q1", "condition": "base", "messages": [{"role": "user", "content": "hi"}]}])
    plan = lambda t: runs.plan_free(prompts, backend="scripted", model_id="s", k=1, seed=1,  # noqa: E731
                                    gen=GenParams(t, 1.0, 8), prompt_format="open")
    with ResponseStore(tmp_path / "r.sqlite") as store:
        for i in range(3000):      # the model's other questions, answered before
            store.put({"key": f"k{i}", "source": "generated", "model": "m", "item_id": f"other{i}",
                       "condition": "base", "prompt_format": "open", "sample": 0, "backend": "scripted",
                       "model_id": "s", "temperature": 0.0, "top_p": 1.0, "max_tokens": 8})
        old = plan(0.0)[0]
        store.put({"key": old.key, "source": "generated", "model": "m", "item_id": "q1", "condition": "base",
                   "prompt_format": "open", "sample": 0, "backend": "scripted", "model_id": "s",
                   "temperature": 0.0, "top_p": 1.0, "max_tokens": 8})
        read, query = [], store.query

        def counting(sql, params=()):
            rows = query(sql, params)
            read.extend(rows)
            return rows

        store.query = counting
        got = runs._other_settings(store, "m", "scripted", "s", plan(0.5))
        assert got == {"temperature": 1}
        assert len(read) <= 1, f"{len(read)} rows read for one planned sample"


# -- the store ----------------------------------------------------------------

def test_a_full_disk_says_so_and_names_the_store(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResponseStore(path) as store:
        store.put({"key": "k0", "source": "generated", "model": "m", "item_id": "i", "condition": "c",
                   "prompt_format": "mcq", "sample": 0})
        n_pages = store.query("PRAGMA page_count")[0][0]
        store.query(f"PRAGMA max_page_count = {n_pages}")     # the file cannot grow: SQLITE_FULL
        big = [{"key": f"k{i}", "source": "generated", "model": "m", "item_id": "i", "condition": "c",
                "prompt_format": "mcq", "sample": i, "response_text": "x" * 5000} for i in range(1, 50)]
        with pytest.raises(StoreWriteError, match="disk is full") as e:
            store.put_many(big)
        assert str(path.resolve()) in str(e.value) and "rollback" not in str(e.value)
        assert store.count() == 1                                    # what was stored before is kept


def test_an_older_store_gains_the_new_columns_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE responses ("key" TEXT PRIMARY KEY, "source" TEXT NOT NULL, "model" TEXT NOT NULL, '
                '"item_id" TEXT NOT NULL, "condition" TEXT NOT NULL, "prompt_format" TEXT NOT NULL, '
                '"sample" INTEGER NOT NULL, "response_text" TEXT, "letter_logprobs" TEXT, "created_at" REAL)')
    con.execute("INSERT INTO responses VALUES ('k', 'generated', 'm', 'i', 'c', 'mcq', 0, '[A]', NULL, 1.0)")
    con.commit()
    con.close()
    with ResponseStore(path) as store:
        f = store.frame()
        assert len(f) == 1 and {"finish_reason", "served_model", "settings", "model_id"} <= set(f.columns)


def test_finish_reason_and_sent_settings_are_stored(tmp_path, plan_frames):
    be = ScriptedBackend(lambda r, i, be: Completion(
        text="[B]", finish_reason="length" if i == 0 else "stop", served_model="gpt-5-x",
        settings={"max_completion_tokens": 1032}), model_id="scripted-1")
    with ResponseStore(tmp_path / "r.sqlite") as store:
        runs.run(be, store, _plan(plan_frames, be, k=1), model="m", progress=False)
        f = store.frame()
    assert sorted(f["finish_reason"]) == ["length", "stop", "stop"]
    assert (f["served_model"] == "gpt-5-x").all() and f["temperature"].isna().all()
    assert (f["max_tokens"] == 1032).all() and json.loads(f["settings"].iloc[0]) == {"max_completion_tokens": 1032}
    rates = mcq.parse_rates(f.assign(parse_status="ok"))
    assert len(rates) == 1


# -- imported and generated answers never hide each other --------------------

def _export(tmp_path: Path, model: str, item_id="medqa4-0000", condition="base") -> Path:
    p = tmp_path / "answers.jsonl"
    p.write_text(json.dumps({"model": model, "item_id": item_id, "condition": condition, "prompt_format": "mcq",
                             "sample": 0, "response_text": "[C]"}) + "\n")
    return p


def test_imported_and_generated_answers_never_share_a_model_name(tmp_path, plan_frames):
    be = Scripted()
    with ResponseStore(tmp_path / "r.sqlite") as store:
        runs.run(be, store, _plan(plan_frames, be), model="m", progress=False)
        with pytest.raises(ResponseImportError, match=r"'m' already names 9 generated 'mcq' answers"):
            import_responses(_export(tmp_path, "m"), store)
        assert import_responses(_export(tmp_path, "m (imported)"), store)["stored"] == 1
        with pytest.raises(ValueError, match=r"holds 1 imported answers under the model name 'm \(imported\)'"):
            runs.run(be, store, _plan(plan_frames, be), model="m (imported)", progress=False)
        assert store.count() == 10


# -- the importer's command line ----------------------------------------------

def _cli(*args, root: Path) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "MEDAUDIT_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "medaudit.llm.importer", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_importer_refuses_unknown_profiles_items_and_conditions(sandbox, medqa4, conditions):
    items = medqa4.head(2).assign(item_id=["medqa4-0000", "medqa4-0001"])
    data.save_frame(perturb.make_variants(items, conditions, ["base", "+homo"]), "trial", "variants")

    r = _cli(_export(sandbox, "x"), "--profile", "defualt", root=sandbox)
    assert r.returncode == 2 and "no profile 'defualt'" in r.stderr and "default" in r.stderr
    assert not (sandbox / "outputs" / "defualt").exists()          # no empty store made for a typo

    shutil.copy(sandbox / "params" / "smoke.yaml", sandbox / "params" / "trial.yaml")
    r = _cli(_export(sandbox, "x", item_id="medqa4-9999"), "--profile", "trial", root=sandbox)
    assert r.returncode == 2 and "'medqa4-9999'" in r.stderr and "--external" in r.stderr
    r = _cli(_export(sandbox, "x", condition="+homosexual"), "--profile", "trial", root=sandbox)
    assert r.returncode == 2 and "'+homosexual'" in r.stderr and "did you mean '+homo'" in r.stderr
    assert not (sandbox / "outputs" / "trial" / "data" / "responses.sqlite").exists()

    r = _cli(_export(sandbox, "x", item_id="amqa-0042"), "--profile", "trial", "--external", root=sandbox)
    assert r.returncode == 0, r.stderr
    r = _cli(_export(sandbox, "x", item_id="medqa4-0001", condition="+homo"), "--profile", "trial", root=sandbox)
    assert r.returncode == 0 and json.loads(r.stdout)["stored"] == 1


# -- a prompt too long for the context is skipped and named; the run goes on --

@pytest.mark.slow
def test_a_prompt_too_long_is_skipped_and_named_and_the_run_goes_on(tmp_path, plan_frames):
    from medaudit.llm.llamacpp import LlamaCppBackend

    be = LlamaCppBackend(MODEL, n_ctx=512, n_threads=1)
    variants, items = plan_frames
    long = variants.copy()
    long.loc[1, "question"] = "The patient describes the pain at length. " * 120 + long.loc[1, "question"]
    samples = mcq.plan(long, items, model="tiny", backend=be.kind, model_id=be.model_id, k=1, seed=1,
                       gen=GenParams(0.0, 1.0, 8))
    with ResponseStore(tmp_path / "r.sqlite") as store:
        rep = runs.run(be, store, samples, model="tiny", progress=False)
        assert store.count() == 2
    assert (rep.generated, rep.too_long, rep.failed) == (2, 1, 0)
    sk = rep.skipped.iloc[0]
    assert sk["item_id"] == "medqa4-0001" and "does not fit" in sk["error"] and "n_ctx 512" in sk["error"]
    rep.check()                                        # a skipped prompt is reported, not an error


def test_a_local_file_is_known_by_its_content_not_its_name(tmp_path):
    from medaudit.llm.llamacpp import LlamaCppBackend

    src = models.model_path(MODEL)
    (tmp_path / "a").mkdir()
    shutil.copy(src, tmp_path / "a" / "model.gguf")
    be = LlamaCppBackend(MODEL, path=str(tmp_path / "a" / "model.gguf"), n_ctx=256, n_threads=1)
    assert be.model_id == models.model_sha256(MODEL) != "model.gguf"


# -- end to end: two servers that both call their model "default" -------------

@pytest.mark.slow
def test_two_servers_named_alike_never_share_answers_through_notebook_03(sandbox, medqa4, conditions):
    items = medqa4.head(2).assign(item_id=["medqa4-0000", "medqa4-0001"], subset="main")
    v = perturb.check_variants(items, perturb.make_variants(items, conditions, ["base", "+homo"], ["standalone"]))
    data.save_frame(items, "e2e", "items")
    data.save_frame(items.head(0), "e2e", "psych_items")
    data.save_frame(v.merge(items[["item_id", "subset"]], on="item_id"), "e2e", "variants")

    path, counts = models.model_path(MODEL), []
    with llama_server(path, sandbox / "a.log", alias="default", n_threads=1) as url_a, \
            llama_server(path, sandbox / "b.log", alias="default", n_threads=1) as url_b:
        urls = [url_a, url_b]
        for u in urls:
            out = sandbox / "outputs" / "e2e" / "notebooks" / f"03_{len(counts)}.ipynb"
            out.parent.mkdir(parents=True, exist_ok=True)
            subject = {"name": "default", "backend": "openai", "model": "default",
                       "options": {"base_url": u, "concurrency": 2}}
            pm.execute_notebook(str(ROOT / "notebooks" / "03_inference.ipynb"), str(out), cwd=str(ROOT / "notebooks"),
                                parameters={"profile": "e2e", "subject": subject, "infer_items": 2,
                                            "infer_conditions": ["base", "+homo"], "k_samples": 2, "max_tokens": 8,
                                            "mitigation_strategies": ["none"],      # the plain prompt only
                                            # only the two servers' answers
                                            "recorded_answers": [], "recorded_runs": []},
                                progress_bar=False)
            cell = next(c for c in json.loads(out.read_text())["cells"] if "counts = runs.run" in "".join(c["source"]))
            counts.append("".join("".join(o.get("data", {}).get("text/plain", "")) for o in cell["outputs"]))
    assert "cached 0; generated 8" in counts[0] and "cached 0; generated 8" in counts[1], counts
    with ResponseStore(sandbox / "outputs" / "e2e" / "data" / "responses.sqlite") as store:
        ids = store.frame()["model_id"]
    assert ids.nunique() == 2 and all(urls[i].split("//")[1] in ids.iloc[0] + ids.iloc[-1] for i in range(2))
