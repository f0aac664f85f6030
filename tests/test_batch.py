"""medaudit.engines.batch: batch files (export/import), shards and store merging.

The requests are the smoke profile's notebook-03 stage (its three MedQA
items, conditions base/+hetero/+homo, made as notebook 02 makes them), planned
by the very code the notebook runs (mcq.plan, runs.run). Tests that need
answers get them from an OpenAI-compatible server on 127.0.0.1 whose
replies are a function of the request (tests/support/fake_openai.py,
``by_request``): the property is the bookkeeping of batches, shards and
merges, which must agree exactly between two runs.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from medaudit.engines import batch
from medaudit.llm import mcq, runs
from medaudit.llm.openai_backend import OpenAIBackend
from medaudit.llm.store import ResponseStore
from support.fake_openai import FakeOpenAI, by_request
from support.smoke import MODEL, SMOKE_CONDITIONS, smoke_plan

@pytest.fixture()
def fake():
    with FakeOpenAI(model=MODEL) as f:
        yield f


@pytest.fixture()
def collected(tmp_path, monkeypatch, fake, medqa4, conditions):
    """The smoke 03 stage collected (27 requests), as `export` collects it."""
    backend = OpenAIBackend(MODEL, base_url=fake.base_url)
    samples = smoke_plan(backend, medqa4, conditions)
    folder = tmp_path / "batch"
    monkeypatch.setenv(batch.ENV_COLLECT, str(folder))
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(batch.BatchCollected, match="27 pending requests"):
            runs.run(backend, store, samples, model=MODEL, progress=False)
        assert store.count() == 0
    monkeypatch.delenv(batch.ENV_COLLECT)
    assert fake.chat_requests == 0                     # collecting sends nothing
    return backend, samples, folder


# -- collect and the batch file ----------------------------------------------

def test_collect_writes_every_pending_request_under_its_store_key(collected):
    backend, samples, folder = collected
    manifest = batch.read_manifest(folder)
    assert list(manifest) == [s.key for s in runs.prefix_order(samples)]
    for s in samples:
        e = manifest[s.key]
        assert batch.expected_key(e) == s.key
        assert (e.sample.item_id, e.sample.condition, e.sample.k, e.sample.perm) == (s.item_id, s.condition, s.k,
                                                                                      s.perm)
        assert e.sample.request == s.request
        assert e.backend == "openai" and e.model_id == backend.model_id and e.model == MODEL


def test_only_requests_the_store_lacks_are_collected(tmp_path, monkeypatch, fake, medqa4, conditions):
    backend = OpenAIBackend(MODEL, base_url=fake.base_url)
    samples = smoke_plan(backend, medqa4, conditions, n_items=1)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        runs.run(backend, store, samples[:4], model=MODEL, progress=False)      # 4 answered by the fake server
        monkeypatch.setenv(batch.ENV_COLLECT, str(tmp_path / "b"))
        with pytest.raises(batch.BatchCollected, match="5 pending"):
            runs.run(backend, store, samples, model=MODEL, progress=False)
        # nothing pending: the stage goes on as without the mode
        monkeypatch.setenv(batch.ENV_COLLECT, str(tmp_path / "c"))
        assert runs.run(backend, store, samples[:4], model=MODEL, progress=False).cached == 4
    assert set(batch.read_manifest(tmp_path / "b")) == {s.key for s in samples[4:]}
    assert not (tmp_path / "c").exists()


def test_batch_body_is_exactly_what_the_backend_sends(collected, fake):
    backend, samples, folder = collected
    files = batch.write_batches(batch.read_manifest(folder).values(), folder)
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    first = next(s for s in samples if s.key == lines[0]["custom_id"])
    backend.complete([first.request], progress=False)
    assert fake.bodies[-1] == lines[0]["body"]
    assert lines[0]["body"]["logprobs"] is True and lines[0]["body"]["seed"] == first.request.params.seed
    assert all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" for x in lines)
    assert [x["custom_id"] for x in lines] == list(batch.read_manifest(folder))


def test_batch_files_are_chunked_by_requests_and_bytes(collected):
    _, _, folder = collected
    entries = list(batch.read_manifest(folder).values())
    by_n = batch.write_batches(entries, folder / "n", max_requests=10)
    assert [len(f.read_text().splitlines()) for f in by_n] == [10, 10, 7]
    size = max(len(batch.batch_line(e.sample.key, e.body)) + 1 for e in entries)
    by_b = batch.write_batches(entries, folder / "b", max_bytes=3 * size)
    assert all(f.stat().st_size <= 3 * size for f in by_b) and len(by_b) >= 9
    assert sum(len(f.read_text().splitlines()) for f in by_b) == 27
    with pytest.raises(batch.BatchError, match="over the 100-byte file limit"):
        batch.write_batches(entries, folder / "x", max_bytes=100)


# -- import: golden result lines in the Batch API's format ---------------------

def _body(text, model=MODEL, finish="stop"):
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 3, "total_tokens": 303}}


def _ok(key, text, **kw):
    return {"id": "batch_req_1", "custom_id": key, "error": None,
            "response": {"status_code": 200, "request_id": "r1", "body": _body(text, **kw)}}


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_import_any_order_partial_repeated_and_failures(collected, tmp_path):
    _, samples, folder = collected
    keys = list(batch.read_manifest(folder))
    by_key = {s.key: s for s in samples}
    part2 = _write(tmp_path / "b.jsonl", [_ok(k, "[C]") for k in keys[10:20]])
    part1 = _write(tmp_path / "a.jsonl", [_ok(k, "[A] because") for k in keys[:10]])
    errors = _write(tmp_path / "e.jsonl", [
        {"id": "x", "custom_id": keys[20], "error": None, "response": {"status_code": 500, "request_id": "r",
         "body": {"error": {"message": "The server had an error", "type": "server_error"}}}},
        {"id": "y", "custom_id": keys[21], "response": None,
         "error": {"code": "batch_expired", "message": "could not be executed before the window expired"}}])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        rep = batch.import_results(folder, [part2, errors, part1], store)
        assert (rep.lines, rep.stored, rep.already, rep.failed, rep.missing) == (22, 20, 0, 2, 5)
        assert rep.failures == {"http_500": 1, "batch_expired": 1}
        resub = [json.loads(x)["custom_id"] for f in sorted(rep.resubmit.glob("*.jsonl"))
                 for x in f.read_text().splitlines()]
        assert set(resub) == set(keys[20:])
        fails = [json.loads(x) for x in (folder / "failures.jsonl").read_text().splitlines()]
        assert {f["custom_id"]: f["kind"] for f in fails} == {keys[20]: "http_500", keys[21]: "batch_expired"}
        # rows: keyed as planned, the shown letter mapped back through the permutation
        df = store.frame().set_index("key")
        s = by_key[keys[0]]
        assert df.loc[keys[0], "parsed_answer"] == s.perm[0] and df.loc[keys[0], "parse_status"] == "ok"
        assert df.loc[keys[10], "parsed_answer"] == by_key[keys[10]].perm[2]
        assert (df["source"] == "generated").all() and (df["model"] == MODEL).all()
        before = store.frame()
        # the same files again, and a repeated line: idempotent, counted
        again = batch.import_results(folder, [part1, part2, part1], store)
        assert (again.stored, again.already, again.different) == (0, 30, 0)
        pd.testing.assert_frame_equal(store.frame(), before)
        # a later file with the rest: nothing left to resubmit
        rest = _write(tmp_path / "c.jsonl", [_ok(k, "[B]") for k in keys[20:]])
        last = batch.import_results(folder, [rest], store)
        assert (last.stored, last.failed, last.missing, last.resubmit) == (7, 0, 0, None)
        assert store.count() == 27


def test_import_refuses_unknown_or_changed_requests_by_name(collected, tmp_path):
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    store = ResponseStore(tmp_path / "s.sqlite")
    stray = _write(tmp_path / "x.jsonl", [_ok(keys[0], "[A]"), _ok("f" * 64, "[B]")])
    with pytest.raises(batch.BatchError, match=r"line 2: custom_id 'f{64}' is not a request of this export"):
        batch.import_results(folder, [stray], store)
    assert store.count() == 0                              # refused: nothing written
    # a manifest whose entry no longer hashes to its key (a setting changed after export)
    lines = (folder / batch.MANIFEST).read_text().splitlines()
    d = json.loads(lines[3])
    d["params"]["temperature"] = 0.0
    lines[3] = json.dumps(d)
    (folder / batch.MANIFEST).write_text("\n".join(lines) + "\n")
    ok = _write(tmp_path / "ok.jsonl", [_ok(keys[0], "[A]")])
    want = re.escape(f"{d['key']} ({d['item_id']} / {d['condition']} / mcq k=") + ".*no longer hashes"
    with pytest.raises(batch.BatchError, match=want):
        batch.import_results(folder, [ok], store)
    assert store.count() == 0


def _fingerprint_manifest(folder, fingerprint: str) -> list[dict]:
    """The export's manifest rewritten as if made under ``fingerprint``; its lines."""
    lines = [json.loads(x) for x in (folder / batch.MANIFEST).read_text().splitlines()]
    for d in lines:
        d["fingerprint"] = fingerprint
    (folder / batch.MANIFEST).write_text("".join(json.dumps(d) + "\n" for d in lines))
    return lines


def test_import_refuses_a_profile_fingerprint_that_changed(collected, tmp_path):
    _, _, folder = collected
    lines = _fingerprint_manifest(folder, "a" * 64)
    ok = _write(tmp_path / "ok.jsonl", [_ok(lines[0]["key"], "[A]")])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(batch.BatchError, match="exported under another profile"):
            batch.import_results(folder, [ok], store, fingerprint="b" * 64)
        assert batch.import_results(folder, [ok], store, fingerprint="a" * 64).stored == 1


def test_import_refuses_an_answer_from_another_model(collected, tmp_path):
    _, _, folder = collected
    key = next(iter(batch.read_manifest(folder)))
    other = _write(tmp_path / "o.jsonl", [_ok(key, "[A]", model="gpt-4o-mini")])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(batch.BatchError, match="answered by model 'gpt-4o-mini'"):
            batch.import_results(folder, [other], store)
        assert store.count() == 0


def test_import_without_content_is_a_failure_not_an_answer(collected, tmp_path):
    _, _, folder = collected
    key = next(iter(batch.read_manifest(folder)))
    empty = _ok(key, None)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        rep = batch.import_results(folder, [_write(tmp_path / "e.jsonl", [empty])], store)
        assert (rep.stored, rep.failed, rep.failures) == (0, 1, {"no_content": 1})


# -- shards and merge ---------------------------------------------------------

def test_shards_split_keys_deterministically_and_completely(collected):
    _, samples, _ = collected
    keys = [s.key for s in samples]
    parts = [{k for k in keys if batch.in_shard(k, i, 3)} for i in range(3)]
    assert set.union(*parts) == set(keys) and sum(map(len, parts)) == len(keys)
    assert all(parts)                                           # 27 keys: every shard gets some
    with pytest.raises(batch.BatchError):
        batch.shard_spec("3/3")


def _row_frame(store):
    df = store.frame().drop(columns=["created_at", "latency_s"])
    return df.sort_values("key").reset_index(drop=True)


def test_merge_refuses_two_replies_for_one_key_and_counts_duplicates(collected, tmp_path):
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    for name, text, ks in (("a", "[A]", keys[:5]), ("b", "[A]", keys[3:8]), ("c", "[D]", keys[7:9])):
        with ResponseStore(tmp_path / f"{name}.sqlite") as s:
            batch.import_results(folder, [_write(tmp_path / f"{name}.jsonl", [_ok(k, text) for k in ks])], s)
    rep = batch.merge(tmp_path / "m.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    assert (rep.rows, rep.added, rep.duplicates) == (10, 8, 2)
    with pytest.raises(batch.BatchError, match=f"(?s)1 keys hold two different replies.*{keys[7]}"):
        batch.merge(tmp_path / "m.sqlite", [tmp_path / "c.sqlite"])
    with ResponseStore(tmp_path / "m.sqlite") as m:
        assert m.count() == 8                                   # refused: nothing of c merged


def test_three_shards_merged_equal_the_one_process_store(tmp_path, monkeypatch, medqa4, conditions):
    """Three nodes, each answering its shard (chosen from the environment, as
    ``python -m medaudit.engines.batch shard`` sets it), merged: the one-process
    store, row for row. The server is deterministic (a reply by a hash of the
    request), so the two runs must agree exactly."""
    with FakeOpenAI(model=MODEL, content=by_request) as server:
        _three_shards(tmp_path, monkeypatch, server.base_url, medqa4, conditions)


def _three_shards(tmp_path, monkeypatch, url, medqa4, conditions):
    backend = OpenAIBackend(MODEL, base_url=url, concurrency=1, timeout_s=120)
    samples = smoke_plan(backend, medqa4, conditions, k=1)          # 9 requests of the smoke stage
    with ResponseStore(tmp_path / "one.sqlite") as one:
        runs.run(backend, one, samples, model=MODEL, progress=False).check()
        expected = _row_frame(one)
    shards, sizes = [], []
    for i in range(3):
        monkeypatch.setenv(batch.ENV_SHARD, f"{i}/3")
        path = tmp_path / f"shard{i}.sqlite"
        with ResponseStore(path) as s:
            with pytest.raises(batch.ShardDone, match=f"shard {i}/3: sent"):
                runs.run(backend, s, samples, model=MODEL, progress=False)
            assert set(s.frame()["key"]) == {x.key for x in samples if batch.in_shard(x.key, i, 3)}
            sizes.append(len(s.frame()))
        shards.append(path)
    monkeypatch.delenv(batch.ENV_SHARD)
    rep = batch.merge(tmp_path / "merged.sqlite", shards)
    assert (rep.added, rep.duplicates) == (9, 0)
    with ResponseStore(tmp_path / "merged.sqlite") as m:
        pd.testing.assert_frame_equal(_row_frame(m), expected)
        # the analysis reads the merged store; the stage finds everything stored
        assert runs.run(backend, m, samples, model=MODEL, progress=False).cached == 9
        assert mcq.parse_rates(m.by_keys(s.key for s in samples)).to_csv() == mcq.parse_rates(
            expected).to_csv()
    # merging a shard again: duplicates, counted, nothing changes. The keys carry the fake server's port,
    # so which shard holds how many of the 9 changes from run to run (one is empty in ~8 % of runs): take
    # the fullest
    fullest = max(range(3), key=sizes.__getitem__)
    again = batch.merge(tmp_path / "merged.sqlite", shards[fullest:fullest + 1])
    assert again.added == 0 and again.duplicates == sizes[fullest] > 0


# -- command line -------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "medaudit.engines.batch", *args], capture_output=True, text=True)


def test_cli_help_and_unknown_flags():
    r = _cli("--help")
    assert r.returncode == 0 and "export" in r.stdout and "merge" in r.stdout
    r = _cli("merge", "--bogus", "a", "b")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    r = _cli("export", "--profile", "smoke", "--notebook", "99", "--out", "x")
    assert r.returncode == 2 and "no notebooks match" in r.stderr


def test_cli_merge(collected, tmp_path):
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    with ResponseStore(tmp_path / "a.sqlite") as s:
        batch.import_results(folder, [_write(tmp_path / "a.jsonl", [_ok(k, "[A]") for k in keys[:3]])], s)
    r = _cli("merge", str(tmp_path / "m.sqlite"), str(tmp_path / "a.sqlite"), str(tmp_path / "a.sqlite"))
    assert r.returncode == 0, r.stderr
    assert "added 3, duplicates 3" in r.stdout


# -- the export command on a notebook -----------------------------------------

PLAN_CELL = '''
from medaudit import paths
from medaudit.prep import data, perturb
from medaudit.llm import GenParams, ResponseStore, get_backend, mcq, runs
import pandas as pd
med = data.load_medqa(paths.raw(*data.MEDQA4)).records
cs = perturb.load_conditions(paths.params("conditions.yaml"))
rows = med.loc[[309, 326]]
items = pd.DataFrame({"item_id": [f"medqa4-{r:04d}" for r in rows["row"]], "options": list(rows["options"])})
variants = pd.DataFrame([{"item_id": i, "condition": c, "question": perturb.make_variant(q, cs, c)[0]}
                         for i, q in zip(items["item_id"], rows["question"]) for c in infer_conditions])
backend = get_backend(subject["backend"], subject["model"], **subject.get("options", {}))
store = ResponseStore(paths.outputs(profile, "data", "responses.sqlite"))
samples = mcq.plan(variants, items, model=subject["name"], backend=backend.kind, model_id=backend.model_id,
                   k=k_samples, seed=seed, gen=GenParams(temperature, top_p, max_tokens))
runs.run(backend, store, samples, model=subject["name"]).check()
'''


def test_export_command_runs_the_notebook_and_writes_its_pending_requests(sandbox, tmp_path, fake):
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nseed = 1\nsubject = {}\ninfer_conditions = []\n'
                                       'k_samples = 1\ntemperature = 0.7\ntop_p = 0.9\nmax_tokens = 16\n')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(PLAN_CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "03_tiny.ipynb"
    nbformat.write(nb, path)
    subject = (f"{{subject: {{name: {MODEL}, backend: openai, model: {MODEL}, "
               f"options: {{base_url: '{fake.base_url}'}}}}}}")
    out = tmp_path / "batch"
    r = subprocess.run([sys.executable, "-m", "medaudit.engines.batch", "export", "--profile", "smoke", "--notebook",
                        str(path), "--out", str(out), "-y", subject, "-p", "k_samples", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "12 requests in 1 batch files" in r.stdout        # 2 items x 3 conditions (smoke 03's) x K=2
    assert fake.chat_requests == 0
    lines = [json.loads(x) for x in (out / "batch-0001.jsonl").read_text().splitlines()]
    manifest = batch.read_manifest(out)
    assert [x["custom_id"] for x in lines] == list(manifest)
    assert {e.sample.condition for e in manifest.values()} == set(SMOKE_CONDITIONS)
    assert all(x["body"]["model"] == MODEL and x["body"]["max_tokens"] == 16 for x in lines)
    # the keys are the ones the notebook's own plan gives under the profile's parameters (seed, settings)
    from medaudit.prep import data, perturb
    from medaudit import paths
    rows = data.load_medqa(paths.raw(*data.MEDQA4)).records
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    plan = smoke_plan(OpenAIBackend(MODEL, base_url=fake.base_url), rows, cs, k=2, n_items=2)
    assert set(manifest) == {s.key for s in plan}


# -- all or nothing, and reports that say what happened ---------

def test_an_answer_from_another_model_after_good_lines_stores_nothing(collected, tmp_path):
    """The 20 good lines before a line answered by another model were stored
    before the refusal: an import is all or nothing, and the refusal says how
    many lines would go in without the refused one."""
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    lines = [_ok(k, "[A]") for k in keys[:20]] + [_ok(keys[20], "[B]", model="gpt-4o-mini")]
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(batch.BatchError) as e:
            batch.import_results(folder, [_write(tmp_path / "o.jsonl", lines)], store)
        assert store.count() == 0
        msg = str(e.value)
        assert "answered by model 'gpt-4o-mini'" in msg and "o.jsonl line 21" in msg
        assert "nothing was imported" in msg and "the other 20 lines" in msg


def test_a_garbled_line_names_itself_and_what_removing_it_lets_in(collected, tmp_path):
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    f = tmp_path / "g.jsonl"
    good = [json.dumps(_ok(k, "[A]")) for k in keys[:26]]
    f.write_text("\n".join(good[:13] + ['{"custom_id": "x", "resp'] + good[13:]) + "\n")
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(batch.BatchError) as e:
            batch.import_results(folder, [f], store)
        assert store.count() == 0
        msg = str(e.value)
        assert "g.jsonl line 14: not JSON" in msg and "nothing was imported" in msg
        assert "the other 26 lines" in msg


def test_a_failed_lines_reason_in_error_is_kept_and_the_report_names_failures_file(collected, tmp_path):
    """vLLM's run-batch writes a failed line as a non-200 response with an
    empty body and the reason in ``error``: the reason is kept, and the
    report names failures.jsonl."""
    _, _, folder = collected
    key = next(iter(batch.read_manifest(folder)))
    line = {"id": "vllm-1", "custom_id": key,
            "response": {"status_code": 400, "request_id": "vllm-batch-1", "body": {}},
            "error": {"message": "max_tokens must be at least 1, got 0", "code": None}}
    with ResponseStore(tmp_path / "s.sqlite") as store:
        rep = batch.import_results(folder, [_write(tmp_path / "v.jsonl", [line])], store)
    fails = [json.loads(x) for x in (folder / "failures.jsonl").read_text().splitlines()]
    assert fails[0]["kind"] == "http_400" and "max_tokens must be at least 1" in fails[0]["error"]
    assert str(folder / "failures.jsonl") in repr(rep)


# -- merge and the import command -----------------------------------

def test_a_refused_merge_leaves_no_target_and_compares_more_than_the_text(collected, tmp_path):
    """A refused merge into a new file leaves no empty store behind; two rows
    of one key with the same text but another parsed answer or log-prob are
    two replies, not a duplicate."""
    _, _, folder = collected
    keys = list(batch.read_manifest(folder))
    for name, text in (("a", "[A]"), ("b", "[D]")):
        with ResponseStore(tmp_path / f"{name}.sqlite") as s:
            batch.import_results(folder, [_write(tmp_path / f"{name}.jsonl", [_ok(keys[0], text)])], s)
    with pytest.raises(batch.BatchError, match="two different replies"):
        batch.merge(tmp_path / "new.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    assert not (tmp_path / "new.sqlite").exists()
    # the same text, another parsed answer (a store edited, or another parser version)
    import sqlite3
    import shutil
    shutil.copy(tmp_path / "a.sqlite", tmp_path / "c.sqlite")
    with sqlite3.connect(tmp_path / "c.sqlite") as con:
        con.execute("UPDATE responses SET parsed_answer = 'Z', answer_logprob = -9.0")
    with pytest.raises(batch.BatchError, match=f"(?s)two different replies.*{keys[0]}"):
        batch.merge(tmp_path / "m2.sqlite", [tmp_path / "a.sqlite", tmp_path / "c.sqlite"])


def test_import_command_needs_the_notebook_to_check_the_parameters(collected, tmp_path):
    """`import` without --notebook checked no profile fingerprint: an export
    made under other parameters went in unchecked. It now names what to pass
    (or --no-check to import without the check)."""
    _, _, folder = collected
    lines = _fingerprint_manifest(folder, "a" * 64)
    ok = _write(tmp_path / "ok.jsonl", [_ok(lines[0]["key"], "[A]")])
    store = tmp_path / "s.sqlite"
    r = _cli("import", "--profile", "smoke", "--store", str(store), "--out", str(folder), str(ok))
    assert r.returncode == 2 and "--notebook" in r.stderr and "--no-check" in r.stderr
    assert not store.exists() or ResponseStore(store).count() == 0
    r = _cli("import", "--profile", "smoke", "--store", str(store), "--out", str(folder), "--no-check", str(ok))
    assert r.returncode == 0, r.stderr
    assert "stored 1" in r.stdout


# -- the exported body carries every sampling setting the backend applies ----

def _local(kind="llamacpp"):
    from types import SimpleNamespace

    return SimpleNamespace(kind=kind, model_id="sha256-of-the-file", model_name="qwen2.5-coder-1.5b")


def _req(**kw):
    from medaudit.llm.base import GenParams, Request

    return Request.chat([{"role": "user", "content": "Which test first? [A] ECG [B] CT"}],
                        GenParams(0.7, 0.9, 16, 5, **kw), answer_letters=("A", "B"))


def test_a_local_backends_body_names_its_engine_or_is_refused():
    """The llamacpp backend samples with top-k off, min-p 0 and no repeat
    penalty; an engine answering the batch applies its own defaults
    (llama_cpp.server: top-k 40, min-p 0.05, repeat penalty 1.1) to whatever
    the body leaves out. So the body names every setting, in the engine's
    own field names, and an export without an engine is refused."""
    from medaudit.llm import dispatch

    with pytest.raises(dispatch.EngineError, match="--engine"):
        dispatch.body_for(_local(), _req())
    body, sent = dispatch.body_for(_local(), _req(), engine="llama.cpp")
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"], body["repeat_penalty"]) == \
        (0.7, 0.9, 0, 0.0, 1.0)
    assert sent["engine"] == "llama.cpp" and sent["top_k"] == 0 and sent["temperature"] == 0.7
    body, _ = dispatch.body_for(_local(), _req(top_k=20, repetition_penalty=1.1), engine="llama.cpp")
    assert (body["top_k"], body["repeat_penalty"]) == (20, 1.1)
    body, sent = dispatch.body_for(_local("transformers"), _req(top_k=20), engine="vllm")
    assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (20, 0.0, 1.0) and "repeat_penalty" not in body
    assert dispatch.body_for(_local("transformers"), _req(), engine="vllm")[0]["top_k"] == -1
    # a repetition penalty the engine applies differently (llama.cpp: the last 64 tokens; transformers
    # and vLLM: prompt and reply) cannot be reproduced: refused
    with pytest.raises(dispatch.EngineError, match="repetition penalty"):
        dispatch.body_for(_local("llamacpp"), _req(repetition_penalty=1.1), engine="vllm")
    with pytest.raises(dispatch.EngineError, match="repetition penalty"):
        dispatch.body_for(_local("transformers"), _req(repetition_penalty=1.1), engine="llama.cpp")
    with pytest.raises(dispatch.EngineError, match="engine 'sglang'"):
        dispatch.body_for(_local(), _req(), engine="sglang")
    for kind in ("transformers-score", "transformers-score-prefix"):      # the prefix decoder's names too
        with pytest.raises(dispatch.EngineError, match="letter scoring"):
            dispatch.body_for(_local(kind), _req(), engine="vllm")
    with pytest.raises(dispatch.EngineError, match="repetition penalty"):
        dispatch.body_for(_local("transformers-prefix"), _req(repetition_penalty=1.1), engine="llama.cpp")
    assert dispatch.body_for(_local("transformers-prefix"), _req(repetition_penalty=1.1),
                             engine="vllm")[0]["repetition_penalty"] == 1.1
    with pytest.raises(dispatch.EngineError, match="stop_at_answer"):     # no engine has that rule
        dispatch.body_for(_local("transformers-prefix-stop"), _req(), engine="vllm")


def test_the_manifest_records_the_engine_and_the_row_says_what_was_sent(tmp_path):
    """A collected local-backend request carries the engine's body and, as
    the settings sent, the engine and every sampling setting; an import
    stores them with the row, under the backend's key."""
    from medaudit.llm import dispatch
    from medaudit.llm.runs import Sample

    req = _req()
    s = Sample("q1", "base", "mcq", 0, "AB", req)
    s.key = batch.request_key("llamacpp", "sha256-of-the-file", req, item_id="q1", condition="base",
                              prompt_format="mcq", k=0, perm="AB")
    dispatch.write_manifest(tmp_path, _local(), [s], model="qwen", engine="llama.cpp")
    e = batch.read_manifest(tmp_path)[s.key]
    assert e.body["repeat_penalty"] == 1.0 and e.settings["engine"] == "llama.cpp"
    with ResponseStore(tmp_path / "s.sqlite") as store:
        rep = batch.import_results(tmp_path,
                                   [_write(tmp_path / "r.jsonl", [_ok(s.key, "[B]", model="qwen2.5-coder-1.5b")])],
                                   store)
        assert rep.stored == 1
        row = store.frame().iloc[0]
    assert row["backend"] == "llamacpp" and row["temperature"] == 0.7 and row["top_p"] == 0.9
    assert json.loads(row["settings"])["engine"] == "llama.cpp"


# -- a planted model through the batch ----------------------------------------

def test_a_planted_models_batch_carries_the_labels_it_answers_from(tmp_path, monkeypatch, medqa4, conditions):
    """A planted model (validation only) answers from the planner's labels,
    which no model reads and which are not sent. Its batch needs no engine:
    the manifest keeps the labels beside each body, not in it (the key and
    the body are those without them); ``answer`` answers it in this process
    and ``import`` stores it; the store is then a direct run's, reply for
    reply."""
    from medaudit.llm.planted import PlantedBackend

    backend = PlantedBackend("planted:ceiling")
    samples = smoke_plan(backend, medqa4, conditions)
    assert all(dict(s.request.labels)["item_id"] == s.item_id for s in samples)
    folder = tmp_path / "batch"
    monkeypatch.setenv(batch.ENV_COLLECT, str(folder))
    with ResponseStore(tmp_path / "batched.sqlite") as store:
        with pytest.raises(batch.BatchCollected, match="27 pending requests"):
            runs.run(backend, store, samples, model="planted-ceiling", progress=False)
    monkeypatch.delenv(batch.ENV_COLLECT)
    entries = batch.read_manifest(folder)
    assert set(entries) == {s.key for s in samples}
    for s in samples:
        e = entries[s.key]
        assert e.sample.request.labels == s.request.labels and batch.expected_key(e) == s.key
        sent = json.dumps(e.body)
        assert s.item_id not in sent and '"gold"' not in sent and "labels" not in sent
        assert e.body["model"] == backend.model_id and e.settings is None
    for f in batch.write_batches(list(entries.values()), folder):     # what would go to an engine
        for line in f.read_text(encoding="utf-8").splitlines():
            assert set(json.loads(line)) == {"custom_id", "method", "url", "body"} and '"gold"' not in line
    # the command line: answer (the planted model named by the manifest's model id), then import
    out = tmp_path / "results.jsonl"
    assert batch.main(["answer", "--out", str(folder), str(out)]) == 0
    # Ray's rounds answer the same lines with the same function on each node (medaudit.engines.ray_run)
    from medaudit.engines import ray_run

    manifest_lines = (folder / batch.MANIFEST).read_text(encoding="utf-8").splitlines()
    assert ray_run.answer_planted_batch({"entry": manifest_lines})["line"] == out.read_text().splitlines()
    with ResponseStore(tmp_path / "batched.sqlite") as store:
        rep = batch.import_results(folder, [out], store)
        assert (rep.stored, rep.failed, rep.missing) == (27, 0, 0)
        batched = _row_frame(store)
    with ResponseStore(tmp_path / "direct.sqlite") as store:
        runs.run(backend, store, samples, model="planted-ceiling", progress=False).check()
        direct = _row_frame(store)
    assert batched["key"].tolist() == direct["key"].tolist()
    assert batched["response_text"].tolist() == direct["response_text"].tolist()
    assert batched["parsed_answer"].tolist() == direct["parsed_answer"].tolist()
    assert (direct["response_text"].str.len() > 0).all()


def test_answer_refuses_a_batch_that_is_not_one_planted_models(collected, tmp_path):
    """``answer`` serves a planted model only: a manifest of another model's
    requests is sent to an engine, and the refusal says so by name."""
    _, _, folder = collected
    r = _cli("answer", "--out", str(folder), str(tmp_path / "r.jsonl"))
    assert r.returncode == 2 and "planted" in r.stderr and MODEL in r.stderr
    assert not (tmp_path / "r.jsonl").exists()
