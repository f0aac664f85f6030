"""The response store and the K-sample protocol against the known failure
modes of peer tools:

(a) K samples collapsing onto one cache entry (K requests, one row);
(b) cache keys that ignore a setting (a changed temperature, model or
    prompt silently served from the cache) or that change when nothing did;
(c) a run killed part-way leaving duplicates, holes or a corrupt file, or
    a resumed run giving other texts than an uninterrupted one;
(d) two writers at once failing with "database is locked" or losing rows.

The model tests use the real tiny model (smollm2-135m) on one thread.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from medaudit.prep import perturb
from medaudit.llm import Completion, GenParams, Request, ResponseStore, mcq, runs, request_key
from support.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support"
MODEL = "smollm2-135m"


def _support(name: str):
    spec = importlib.util.spec_from_file_location(f"support_{name}", SUPPORT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


child = _support("mcq_child")


def ok_counts(planned: int, cached: int, generated: int) -> dict:
    """The counts of a run in which nothing failed, was too long or left unsent."""
    return {"planned": planned, "cached": cached, "generated": generated, "failed": 0, "too_long": 0, "not_sent": 0}


@pytest.fixture(scope="module")
def items(medqa4) -> pd.DataFrame:
    return medqa4.head(3)


@pytest.fixture(scope="module")
def variants(items, conditions) -> pd.DataFrame:
    v = perturb.make_variants(items, conditions, conditions=["base", "+homo"])
    assert v["ok"].all()
    return v


@pytest.fixture(scope="module")
def backend():
    return child.load_backend()


def _hashed_letter(r, i, be):
    h = hashlib.sha256(repr((r.messages, r.params)).encode()).digest()
    return Completion(text=f"The answer is [{'ABCD'[h[0] % 4]}]", tokens_in=10, tokens_out=5)


def FakeBackend(model_id: str = "fake-1") -> ScriptedBackend:
    """A deterministic stand-in whose ``sent`` counts what it is asked (for
    the cache tests that need many runs; the real model is used where text
    matters)."""
    return ScriptedBackend(_hashed_letter, kind="fake", model_id=model_id)


def _plan(variants, items, **kw):
    args = dict(model="m", backend="fake", model_id="fake-1", k=5, seed=7,
                gen=GenParams(temperature=0.7, top_p=0.9, max_tokens=16), prompt_format="mcq",
                shuffle=True)
    args.update(kw)
    return mcq.plan(variants, items, **args)


# --------------------------------------------------------------------------
# (a) K samples are K rows


@pytest.mark.parametrize("shuffle,temperature", [(True, 0.7), (False, 0.0)])
def test_k_samples_plan_k_distinct_keys(variants, items, shuffle, temperature):
    """Even with identical messages (no shuffling) and greedy decoding, the
    5 samples of a question keep 5 keys: k is part of the key."""
    samples = _plan(variants, items, shuffle=shuffle, gen=GenParams(temperature, 0.9, 16))
    assert len(samples) == 5 * len(variants)
    by_q = {}
    for s in samples:
        by_q.setdefault((s.item_id, s.condition), []).append(s)
    assert len(by_q) == len(variants)
    for q, ss in by_q.items():
        assert sorted(s.k for s in ss) == [0, 1, 2, 3, 4], q
        assert len({s.key for s in ss}) == 5, q
        assert len({s.request.params.seed for s in ss}) == 5, q   # each sample its own seed
        if not shuffle:
            assert len({s.request.messages for s in ss}) == 1, q
    assert len({s.key for s in samples}) == len(samples)


@pytest.mark.parametrize("shuffle,temperature", [(True, 0.8), (False, 0.0)])
def test_k_samples_stored_as_k_rows_real_model(tmp_path, backend, variants, items, shuffle, temperature):
    v = variants.head(1)
    samples = mcq.plan(v, items, model=MODEL, backend=backend.kind, model_id=backend.model_id, k=5,
                       seed=3, gen=GenParams(temperature, 0.95, 8), shuffle=shuffle)
    with ResponseStore(tmp_path / "r.sqlite") as store:
        first = runs.run(backend, store, samples, model=MODEL, progress=False)
        assert first.counts() == ok_counts(5, 0, 5)
        df = store.frame()
        assert len(df) == 5 and df["key"].nunique() == 5
        assert sorted(df["sample"]) == [0, 1, 2, 3, 4]
        assert set(df["key"]) == {s.key for s in samples}
        assert (df["source"] == "generated").all() and (df["model_id"] == backend.model_id).all()
        # the same plan again: nothing generated, everything from the store
        again = runs.run(backend, store, mcq.plan(v, items, model=MODEL, backend=backend.kind,
                                                 model_id=backend.model_id, k=5, seed=3,
                                                 gen=GenParams(temperature, 0.95, 8), shuffle=shuffle),
                        model=MODEL, progress=False)
        assert again.counts() == ok_counts(5, 5, 0)
        assert store.count() == 5


# --------------------------------------------------------------------------
# (b) what changes the key, and what does not


def _req(content="Q?\nA. x\nB. y\nC. z\nD. w", role="user", **params):
    g = dict(temperature=0.7, top_p=0.9, max_tokens=16, seed=123)
    g.update(params)
    return Request.chat([{"role": role, "content": content}], GenParams(**g), answer_letters=tuple("ABCD"),
                        stem_chars=2)


META = dict(item_id="medqa4-0000", condition="base", prompt_format="mcq", k=0, perm="ABCD")


def _key(req=None, backend="llamacpp", model_id="sha-a", **meta):
    return request_key(backend, model_id, req or _req(), **{**META, **meta})


def test_request_key_same_inputs_same_key():
    assert _key() == _key(_req(), "llamacpp", "sha-a", **META)      # rebuilt, equal objects
    # stem_chars only says where the shared prefix ends; it cannot change the text
    assert _key(replace(_req(), stem_chars=None)) == _key()


@pytest.mark.parametrize("what,changed", [
    ("temperature", lambda: _key(_req(temperature=0.8))),
    ("temperature 0", lambda: _key(_req(temperature=0.0))),
    ("top_p", lambda: _key(_req(top_p=0.95))),
    ("max_tokens", lambda: _key(_req(max_tokens=17))),
    ("seed", lambda: _key(_req(seed=124))),
    ("model_id", lambda: _key(model_id="sha-b")),
    ("backend", lambda: _key(backend="openai")),
    ("message text", lambda: _key(_req(content="Q?\nA. x\nB. y\nC. z\nD. w "))),
    ("message role", lambda: _key(_req(role="system"))),
    ("sample k", lambda: _key(k=1)),
    ("permutation", lambda: _key(perm="BACD")),
    ("condition", lambda: _key(condition="+homo")),
    ("item", lambda: _key(item_id="medqa4-0001")),
    ("prompt format", lambda: _key(prompt_format="mcq_explain")),
    ("answer letters", lambda: _key(replace(_req(), answer_letters=tuple("ABCDE")))),
])
def test_request_key_changes_with_every_input(what, changed):
    assert changed() != _key(), f"changing the {what} left the key as it was"


def test_request_key_pinned():
    """The key of a fixed request: a change of the key format would make
    every stored response a cache miss and store each sample twice."""
    assert _key() == "574f76a389e76f44b072f680748e2e36b7a6ceaa9b75b081ec9a29ff8dfc9251"
    assert _key() == hashlib.sha256(json.dumps(
        {"backend": "llamacpp", "model": "sha-a", "messages": [["user", "Q?\nA. x\nB. y\nC. z\nD. w"]],
         "params": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "seed": 123},
         "answer_letters": list("ABCD"), "meta": META},
        sort_keys=True, ensure_ascii=False).encode()).hexdigest()


VARIATIONS = {
    "temperature": dict(gen=GenParams(temperature=0.8, top_p=0.9, max_tokens=16)),
    "top_p": dict(gen=GenParams(temperature=0.7, top_p=0.95, max_tokens=16)),
    "max_tokens": dict(gen=GenParams(temperature=0.7, top_p=0.9, max_tokens=32)),
    "seed": dict(seed=8),
    "model_id": dict(model_id="fake-2"),
    "prompt": dict(prompt_format="mcq_explain"),
}


@pytest.mark.parametrize("what", list(VARIATIONS))
def test_run_misses_cache_when_anything_changes(tmp_path, variants, items, what):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        base = _plan(variants, items)
        n = len(base)
        assert runs.run(FakeBackend(), store, base, model="m", progress=False)["generated"] == n
        # the same inputs, planned again: every sample a cache hit, nothing asked
        fb = FakeBackend()
        assert runs.run(fb, store, _plan(variants, items), model="m", progress=False).counts() == \
            ok_counts(n, n, 0)
        assert fb.sent == 0
        kw = VARIATIONS[what]
        fb = FakeBackend(kw.get("model_id", "fake-1"))
        changed = _plan(variants, items, **kw)
        assert runs.run(fb, store, changed, model="m", progress=False).counts() == \
            ok_counts(n, 0, n), what
        assert fb.sent == n and store.count() == 2 * n


def test_run_misses_cache_for_changed_question_text(tmp_path, variants, items):
    """One changed vignette: only its 5 samples are drawn again."""
    with ResponseStore(tmp_path / "r.sqlite") as store:
        runs.run(FakeBackend(), store, _plan(variants, items), model="m", progress=False)
        v2 = variants.copy()
        v2.loc[0, "question"] = v2.loc[0, "question"].replace(" ", "  ", 1)
        counts = runs.run(FakeBackend(), store, _plan(v2, items), model="m", progress=False)
        assert counts.counts() == ok_counts(5 * len(variants), 5 * (len(variants) - 1), 5)


def test_seed_alone_changes_key(variants, items):
    """Without shuffling the messages do not depend on the seed; the
    per-sample sampling seed still does, and so does the key."""
    a = _plan(variants, items, shuffle=False, seed=7)
    b = _plan(variants, items, shuffle=False, seed=8)
    assert [s.request.messages for s in a] == [s.request.messages for s in b]
    assert all(x.key != y.key for x, y in zip(a, b))


def test_permutation_and_k_change_key(tmp_path, variants, items):
    """Shuffled vs not: every sample whose permutation differs is new; the
    others (permutation ABCD by chance) are legitimately the same request.
    Raising K from 3 to 5 draws only samples 3 and 4."""
    with ResponseStore(tmp_path / "r.sqlite") as store:
        plain = _plan(variants, items, shuffle=False)
        runs.run(FakeBackend(), store, plain, model="m", progress=False)
        shuffled = _plan(variants, items, shuffle=True)
        differ = sum(s.perm != "ABCD" for s in shuffled)
        assert differ > len(shuffled) // 2
        c = runs.run(FakeBackend(), store, shuffled, model="m", progress=False)
        assert c["generated"] == differ and c["cached"] == len(shuffled) - differ

    with ResponseStore(tmp_path / "k.sqlite") as store:
        k3 = _plan(variants, items, k=3)
        runs.run(FakeBackend(), store, k3, model="m", progress=False)
        k5 = _plan(variants, items, k=5)
        assert {s.key for s in k3} <= {s.key for s in k5}
        c = runs.run(FakeBackend(), store, k5, model="m", progress=False)
        assert c.counts() == ok_counts(5 * len(variants), 3 * len(variants), 2 * len(variants))


# --------------------------------------------------------------------------
# (c) kill safety


def _rows(path: Path, cols: str = "key") -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT {cols} FROM responses").fetchall()
    except sqlite3.OperationalError:      # killed before the table existed
        return []
    finally:
        con.close()


def _integrity(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _spawn(args: list[str], err: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=open(err, "ab"), text=True)


COMPARED = "response_text, parsed_answer, parse_status, answer_logprob, letter_logprobs, tokens_in, tokens_out"


def test_kill_and_resume_equals_uninterrupted_run(tmp_path):
    """SIGKILL at random moments (seeded), rerun until done: no duplicate,
    no hole, an intact file, and exactly the rows an uninterrupted run gives.
    The child's backend is scripted (a reply by a hash of the request, a
    tenth of a second each): the property is the store's, under a real
    process killed for real."""
    planned = {s.key for s in child.build_samples(child.SCRIPTED[1], child.SCRIPTED[0])}
    assert len(planned) == 40
    script = str(SUPPORT / "mcq_child.py")
    killed_db, ref_db = tmp_path / "killed.sqlite", tmp_path / "ref.sqlite"
    err = tmp_path / "stderr.txt"

    ref = _spawn([script, str(ref_db), "--scripted"], err)      # the uninterrupted run, meanwhile
    rng = random.Random(20240611)
    kills, log = [], []
    for attempt in range(20):
        p = _spawn([script, str(killed_db), "--scripted"], err)
        ready = p.stdout.readline().split()
        assert ready[:1] == ["READY"], f"child failed to start: {err.read_text()[-3000:]}"
        if len(kills) < 5:
            # wait for the first new row (model warm-up takes seconds on a busy
            # machine), then kill at a random moment of the generation
            started = int(ready[2])
            deadline = time.time() + 300
            while p.poll() is None and len(_rows(killed_db)) <= started:
                assert time.time() < deadline, f"no row in 300 s: {err.read_text()[-3000:]}"
                time.sleep(0.02)
            delay = rng.uniform(0.2, 1.5)
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                p.stdout.close()
                n = len(_rows(killed_db))
                kills.append(n)
                log.append(f"attempt {attempt}: started with {started} rows, killed {delay:.2f}s after "
                           f"its first new row, with {n} rows")
                continue
        # not communicate(timeout=...): it reads the pipe's descriptor and misses what readline() above
        # already buffered, and a child with nothing left to do writes READY and DONE at once (CI, loaded)
        p.wait(timeout=600)
        out = p.stdout.read()
        p.stdout.close()
        assert p.returncode == 0, f"{out}\n{err.read_text()[-3000:]}"
        done = json.loads(out.split("DONE", 1)[1])
        # the resumed run asked only for what was missing
        assert done == ok_counts(40, int(ready[2]), 40 - int(ready[2])), log
        break
    else:
        pytest.fail(f"the run never completed: {log}")
    print("\n".join(log))                     # shown with pytest -s
    # a kill may land after the last row and before the child exits (the resumed run then asks for nothing):
    # progress and nothing lost either way; at least three kills must have landed mid-run
    assert sum(k < 40 for k in kills) >= 3, f"too few kills landed mid-run: {log}"
    assert 0 < kills[0] and kills == sorted(kills) and kills[-1] <= 40, log

    out, _ = ref.communicate(timeout=600)
    assert ref.returncode == 0, err.read_text()[-3000:]

    assert _integrity(killed_db) == "ok"
    keys = [k for (k,) in _rows(killed_db)]
    assert len(keys) == len(set(keys)) == 40
    assert set(keys) == planned
    ident = _rows(killed_db, "item_id, condition, prompt_format, sample")
    assert len(set(ident)) == 40, "a sample is stored twice under two keys"

    got = {r[0]: r[1:] for r in _rows(killed_db, f"key, {COMPARED}")}
    want = {r[0]: r[1:] for r in _rows(ref_db, f"key, {COMPARED}")}
    assert set(want) == planned
    differ = {k: (want[k], got[k]) for k in planned if want[k] != got[k]}
    assert not differ, (f"{len(differ)} of 40 samples differ between the killed-and-resumed run and the "
                        f"uninterrupted one ({COMPARED}): {differ}; kills: {log}")


def test_killed_writer_leaves_whole_transactions(tmp_path):
    """A writer killed mid-stream: the file is intact and every two-row
    transaction is either wholly there or wholly absent."""
    db, err = tmp_path / "pairs.sqlite", tmp_path / "stderr.txt"
    script = str(SUPPORT / "store_writer.py")
    rng = random.Random(7)
    for w in range(4):
        p = _spawn([script, str(db), f"k{w}", "--pairs", "1000000"], err)
        assert p.stdout.readline().strip() == "READY", err.read_text()[-3000:]
        time.sleep(rng.uniform(0.05, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        assert p.returncode == -signal.SIGKILL
    assert _integrity(db) == "ok"
    keys = {k for (k,) in _rows(db)}
    assert keys, "no writer got to write anything"
    stems = {k.rsplit("-", 1)[0] for k in keys}
    assert keys == {f"{s}-{x}" for s in stems for x in "ab"}, "a transaction was half written"
    # and the store still opens and writes
    with ResponseStore(db) as s:
        n = s.count()
        s.put({**_support("store_writer").row("after-kill", "x", 0)})
        assert s.count() == n + 1


# --------------------------------------------------------------------------
# (d) two writers at once


def test_two_processes_write_at_once(tmp_path):
    db, err = tmp_path / "shared.sqlite", tmp_path / "stderr.txt"
    script = str(SUPPORT / "store_writer.py")
    n_own, n_shared = 2000, 200
    start_at = time.time() + 3.0      # both create the file and start writing together
    procs = [_spawn([script, str(db), str(w), str(n_own), str(n_shared), str(start_at)], err)
             for w in (1, 2)]
    spans = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, f"{out}\n{err.read_text()[-3000:]}"
        done = out.split("DONE", 1)[1].split()
        assert int(done[0]) == n_own + n_shared
        spans.append((float(done[1]), float(done[2])))
    stderr = err.read_text() if err.exists() else ""
    assert "locked" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, f"the writers did not overlap in time: {spans}"

    assert _integrity(db) == "ok"
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 2 * n_own + n_shared
        assert con.execute("SELECT COUNT(DISTINCT key) FROM responses").fetchone()[0] == 2 * n_own + n_shared
        assert con.execute("SELECT COUNT(*) FROM responses WHERE key LIKE 'shared-%'").fetchone()[0] == n_shared
    finally:
        con.close()


def test_free_text_goes_through_the_same_store(tmp_path):
    """Open-ended answers (no options) are planned, drawn with the real model,
    stored once per sample and left unparsed; a rerun draws nothing."""
    import pandas as pd

    from medaudit.llm.llamacpp import LlamaCppBackend

    be = LlamaCppBackend("smollm2-135m", n_threads=1)
    prompts = pd.DataFrame({"item_id": ["q1", "q2"], "condition": ["base", "+homo"],
                            "messages": [[{"role": "user", "content": "Name one cause of chest pain."}],
                                         [{"role": "user", "content": "Name one cause of a cough."}]]})
    plan = runs.plan_free(prompts, backend=be.kind, model_id=be.model_id, k=2, seed=3,
                         gen=GenParams(0.7, 0.9, 12), prompt_format="open")
    assert len({s.key for s in plan}) == 4
    with ResponseStore(tmp_path / "free.sqlite") as store:
        assert runs.run(be, store, plan, model="smollm2", progress=False)["generated"] == 4
        assert runs.run(be, store, plan, model="smollm2", progress=False)["generated"] == 0
        df = store.frame()
    assert len(df) == 4 and df["parsed_answer"].isna().all() and df["parse_status"].isna().all()
    assert (df["response_text"].str.len() > 0).all() and set(df["prompt_format"]) == {"open"}


def test_current_reads_one_run_per_model(tmp_path):
    """A rerun with another temperature leaves the old answers in the store;
    the analyses read the notebook's own plan when given, else the newest
    run, per model and prompt format; imported answers stay."""
    from medaudit.llm.store import ResponseStore, current

    def row(key, model, t, temp, item="i1", fmt="mcq", k=0, source="generated"):
        return {"key": key, "source": source, "backend": "llamacpp" if source == "generated" else "import",
                "model": model, "model_id": "x", "item_id": item, "condition": "base", "prompt_format": fmt,
                "sample": k, "temperature": temp, "top_p": 0.9, "max_tokens": 16, "response_text": key,
                "created_at": t}

    with ResponseStore(tmp_path / "s.sqlite") as s:
        s.put_many([row("a-old-0", "a", 1.0, 0.7), row("a-old-1", "a", 1.0, 0.7, k=1),
                    row("a-new-0", "a", 2.0, 0.0), row("a-new-1", "a", 2.0, 0.0, item="i2"),
                    row("a-expl", "a", 1.5, 0.7, fmt="mcq_explain"),
                    row("b-imp", "b", 0.5, None, source="imported")])
        f = s.frame()
    got = set(current(f)["key"])
    # a/mcq: only the newest run (temperature 0), both its items; a/mcq_explain and b untouched
    assert got == {"a-new-0", "a-new-1", "a-expl", "b-imp"}
    assert set(current(f, prefer_keys=["a-old-0", "a-old-1"])["key"]) == {"a-old-0", "a-old-1", "a-expl", "b-imp"}
    assert current(f.iloc[:0]).empty


def test_where_in_asks_in_chunks_and_keeps_the_condition(tmp_path):
    """More values than one SQL statement may bind (500 a chunk), a condition
    beside them, and a column the store does not have refused."""
    with ResponseStore(tmp_path / "s.sqlite") as store:
        store.put_many([{"key": f"k{i}", "source": "imported" if i % 3 else "generated", "model": "m",
                         "item_id": f"q{i}", "condition": "c", "prompt_format": "cultural_judge", "sample": 0,
                         "judged_key": f"a{i}"} for i in range(1200)])
        got = store.where_in("judged_key", [f"a{i}" for i in range(1199, -1, -1)] + ["a5"],
                             "source = 'imported' AND prompt_format = ?", ("cultural_judge",))
        assert len(got) == 800 and set(got["source"]) == {"imported"} and got["key"].is_unique
        assert sorted(store.by_keys(["k7", "nope", "k1100"])["key"]) == ["k1100", "k7"]
        assert store.where_in("judged_key", []).empty
        with pytest.raises(ValueError, match="no column 'judged'"):
            store.where_in("judged", ["a1"])


def test_a_frame_of_some_conditions_is_the_whole_frame_filtered_in_the_same_order(tmp_path):
    """store.frame(conditions=...) (07 and 08 read only their own conditions
    of a store that also holds 03's answers) is the whole frame's rows of
    those conditions, in the order they were stored."""
    from medaudit.llm.store import ResponseStore

    store = ResponseStore(tmp_path / "s.sqlite")
    conds = ["base", "+homo", "original", "race:Black", "neutral"]
    rng = random.Random(1)
    for i in range(60):
        store.put({"key": f"k{rng.random()}", "source": "generated", "model": "m", "item_id": f"i{i % 7}",
                   "condition": rng.choice(conds), "prompt_format": "mcq", "sample": i})
    whole = store.frame()
    want = ["original", "race:Black", "neutral"]
    part = store.frame(conditions=want + ["original"])
    assert len(part) and part["key"].tolist() == whole.loc[whole["condition"].isin(want), "key"].tolist()
    assert store.frame("WHERE sample < 30", conditions=["base"])["key"].tolist() == \
        whole.loc[(whole["sample"] < 30) & (whole["condition"] == "base"), "key"].tolist()
