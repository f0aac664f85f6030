"""The batched transformers backend and its exact letter scoring, on the real
SmolLM2-135M GGUF (loaded offline, one torch thread; no mocks).

What must hold: batched and one-at-a-time runs give the same
greedy texts and the same letter distributions; a sample's text does not
depend on the other requests of its batch; scoring mode's letter
distribution is the model's own (a direct forward pass) and its store keys
are not generation mode's; a killed batched run keeps its finished batches.
Short prompts and few tokens keep the file to a couple of minutes on 2 cores.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"          # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from medaudit.llm import mcq, runs
from medaudit.llm.base import GenParams, Request
from medaudit.llm.store import ResponseStore
from medaudit.bench.timing import configured
from support.killed_run import killed_run_plan

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
LETTERS = ("A", "B", "C", "D")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def backend(hf_tiny):
    """conftest's session-wide transformers backend (SmolLM2-135M, one thread)."""
    assert MODEL == "smollm2-135m"
    return hf_tiny


@pytest.fixture(scope="module")
def short_items(medqa4) -> pd.DataFrame:
    """The shortest questions (short prompts: fast tests)."""
    return medqa4.loc[medqa4["question"].str.len().sort_values().index[:4]]


@pytest.fixture(scope="module")
def one_shot(medqa4) -> list[dict]:
    """A short worked example answered "[D]": with it this small model
    opens its answer with a bracket (without it, almost never)."""
    ex = medqa4[(medqa4["answer_idx"] == "D")].sort_values("question", key=lambda q: q.str.len()).iloc[0]
    return mcq.build_messages("mcq", ex["question"], ex["options"], "ABCD") + [
        {"role": "assistant", "content": "[D]"}]


def mcq_request(item, params: GenParams, shots=(), perm: str = "ABCD") -> Request:
    return Request.chat(list(shots) + mcq.build_messages("mcq", item.question, item.options, perm), params,
                        answer_letters=LETTERS)


def free_request(text: str, params: GenParams) -> Request:
    return Request.chat([{"role": "user", "content": text}], params)


def close(a: dict | None, b: dict | None, tol: float = 1e-4) -> bool:
    if a is None or b is None:
        return a is b
    return set(a) == set(b) and all(abs(a[k] - b[k]) <= tol for k in a)


@pytest.mark.parametrize("decode,step", [("generate", "eager"), ("prefix", "eager"), ("prefix", "static")])
def test_batched_greedy_equals_one_at_a_time(backend, short_items, one_shot, decode, step):
    it = list(short_items.itertuples())
    reqs = [mcq_request(it[0], GenParams(0.0, 1.0, 6, 1), one_shot),
            mcq_request(it[1], GenParams(0.0, 1.0, 6, 2), one_shot, perm="BADC"),
            mcq_request(it[2], GenParams(0.0, 1.0, 6, 3)),
            free_request("Name one symptom of anaemia.", GenParams(0.0, 1.0, 6, 4))]
    with configured(backend, batch_size=1, decode="generate"):
        alone = backend.complete(reqs, progress=False)
    order = []
    with configured(backend, batch_size=4, decode=decode, step=step):
        batched = backend.complete(reqs, progress=False, on_result=lambda i, c: order.append(i))
    assert sorted(order) == [0, 1, 2, 3]
    for a, b in zip(alone, batched):
        assert (a.text, a.tokens_out, a.finish_reason, a.tokens_in) == (b.text, b.tokens_out, b.finish_reason,
                                                                        b.tokens_in)
        assert close(a.letter_logprobs, b.letter_logprobs), (a.letter_logprobs, b.letter_logprobs)
    assert any(c.letter_logprobs for c in batched), [c.text for c in batched]   # an answer position was compared
    assert len({len(backend.prompt_ids(r)) for r in reqs}) == 4                 # left padding was exercised


@pytest.mark.parametrize("decode,step", [("generate", "eager"), ("prefix", "static")])   # eager = static: test_prefix
def test_a_sample_does_not_depend_on_its_batch(backend, decode, step):
    p = lambda seed: GenParams(0.9, 0.95, 8, seed)  # noqa: E731
    mine = [free_request("Name one symptom of anaemia.", p(s)) for s in (11, 12, 13)] + [
        free_request("In one sentence: what does the liver do?", p(14))]
    others = [free_request("List two antibiotics.", p(21)),
              free_request("A 40-year-old man has chest pain after running up stairs. What is the most likely "
                           "cause, in a few words?", p(22))]
    runs = []
    for batch_size, reqs in [(1, mine), (4, mine), (2, mine[::-1]), (6, others[:1] + mine + others[1:]),
                             (3, [mine[2], others[0], mine[0], others[1], mine[3], mine[1]])]:
        with configured(backend, batch_size=batch_size, decode=decode, step=step):
            out = backend.complete(reqs, progress=False)
        runs.append({r.params.seed: c.text for r, c in zip(reqs, out) if r in mine})
    assert all(run == runs[0] for run in runs), runs
    assert len({runs[0][s] for s in (11, 12, 13)}) > 1, runs[0]   # the seed, not the batch, sets the sample
    if decode == "prefix":      # the project's own sampler: its draws are not torch.multinomial's
        return

    # and it is the draw transformers' own sampling makes for the request alone
    req = mine[0]
    ids = backend.prompt_ids(req)
    torch.manual_seed(req.params.seed)
    g = backend._GenerationConfig(max_new_tokens=8, do_sample=True, temperature=0.9, top_p=0.95, top_k=0,
                                  pad_token_id=backend.pad_id, eos_token_id=sorted(backend.eos_ids))
    with torch.inference_mode():
        seq = backend.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     generation_config=g)
    assert backend.tokenizer.decode(seq[0, len(ids):], skip_special_tokens=True).strip() == runs[0][11]


@pytest.fixture(scope="module")
def scoring_samples(backend, short_items, one_shot) -> list[runs.Sample]:
    """Two questions x 3 option orders (one-shot prompts with their stem
    marked, as mcq.plan builds them), sampled at temperature 0.7."""
    items = short_items.iloc[:2]
    variants = items[["item_id", "question"]].assign(condition="base")
    with configured(backend, mcq_mode="score"):
        samples = mcq.plan(variants, items, model=MODEL, backend=backend.kind, model_id=backend.model_id, k=3,
                           seed=5, gen=GenParams(0.7, 0.9, 6))
        for s in samples:
            s.request = dataclasses.replace(s.request, messages=tuple((m["role"], m["content"]) for m in one_shot)
                                            + s.request.messages)
            s.key = mcq.request_key(backend.kind, backend.model_id, s.request, item_id=s.item_id,
                                    condition=s.condition, prompt_format=s.prompt_format, k=s.k, perm=s.perm)
    assert len({s.perm for s in samples}) >= 4
    return samples


def test_letter_scoring_is_exact_and_independent_of_batching(backend, scoring_samples):
    from medaudit.llm.hf import draw_letter

    reqs = [s.request for s in scoring_samples]
    runs = {}
    for name, kw in {"alone": dict(batch_size=1, share_stem=False), "batched": dict(batch_size=None, share_stem=False),
                     "stem shared": dict(batch_size=None, share_stem=True),
                     "stem shared, 2 per batch": dict(batch_size=2, share_stem=True)}.items():
        with configured(backend, mcq_mode="score", min_bracket_prob=0.0, **kw):
            runs[name] = backend.complete(reqs, progress=False)
    ref = runs["alone"]
    for name, out in runs.items():
        for a, b in zip(ref, out):
            assert b.finish_reason == "scored" and b.settings["mode"] == "letter_scoring", name
            assert close(a.letter_logprobs, b.letter_logprobs), (name, a.letter_logprobs, b.letter_logprobs)
            assert abs(a.settings["p_open_bracket"] - b.settings["p_open_bracket"]) < 1e-4
            assert a.text == b.text, name
    for r, c in zip(reqs, ref):
        letter = c.text[1]
        assert c.text == f"[{letter}]" and c.answer_logprob == c.letter_logprobs[letter]
        assert letter == LETTERS[draw_letter([c.letter_logprobs[L] for L in LETTERS], 0.7, 0.9, r.params.seed)]
        assert c.settings["temperature"] == 0.7 and c.tokens_in == len(backend.prompt_ids(r))

    # exact: the full-vocabulary log-softmax after prompt + "[" (SmolLM2 writes
    # "[B" as "[" then "B"), and the bracket's own probability before it
    _, _, plain = backend._letter_ids(LETTERS)
    for r, c in list(zip(reqs, ref))[:2]:
        ids = backend.prompt_ids(r) + [backend.open_id]
        with torch.inference_mode():
            logits = backend.model(torch.tensor([ids])).logits[0, -2:].double()
        at, first = torch.log_softmax(logits[1], -1), torch.log_softmax(logits[0], -1)
        for L in LETTERS:
            assert c.letter_logprobs[L] == pytest.approx(float(at[plain[L]]), abs=1e-4)
        assert c.settings["p_open_bracket"] == pytest.approx(float(first[backend.open_id].exp()), abs=1e-4)

    # temperature 0: the most probable letter
    greedy = [dataclasses.replace(r, params=GenParams(0.0, 0.9, 6, r.params.seed)) for r in reqs[:3]]
    with configured(backend, mcq_mode="score", min_bracket_prob=0.0):
        for c in backend.complete(greedy, progress=False):
            assert c.text[1] == max(c.letter_logprobs, key=c.letter_logprobs.get)


def test_generation_mode_gives_the_same_distribution_where_it_opens_with_the_bracket(backend, scoring_samples):
    """Generation mode reads the letters at the position after the "[" it
    generated; scoring mode at the position after the "[" it appended:
    where a greedy answer opens with "[", the two are the same numbers."""
    reqs = [dataclasses.replace(s.request, params=GenParams(0.0, 1.0, 3, 0)) for s in scoring_samples[::2]]
    with configured(backend, mcq_mode="score", min_bracket_prob=0.0):
        scored = backend.complete(reqs, progress=False)
    generated = backend.complete(reqs, progress=False)
    compared = 0
    for g, s in zip(generated, scored):
        if g.text.startswith("["):
            assert close(g.letter_logprobs, s.letter_logprobs), (g.letter_logprobs, s.letter_logprobs)
            compared += 1
    assert compared, [g.text for g in generated]


def test_scoring_mode_generates_prompts_the_model_does_not_open_with_a_bracket(backend, short_items):
    """Zero-shot, this model opens with "[" about 1% of the time: below
    min_bracket_prob the request is generated, so its (malformed) answer is
    counted as a parse failure instead of being scored."""
    reqs = [mcq_request(short_items.iloc[0], GenParams(0.0, 1.0, 5, 3)),
            free_request("Name one symptom of anaemia.", GenParams(0.0, 1.0, 5, 4))]
    with configured(backend, mcq_mode="score", min_bracket_prob=0.5):
        scored_mode = backend.complete(reqs, progress=False)
    generated = backend.complete(reqs, progress=False)
    for s, g in zip(scored_mode, generated):
        assert (s.text, s.finish_reason) == (g.text, g.finish_reason) and s.finish_reason != "scored"
    assert scored_mode[0].settings["mode"] == "generate" and scored_mode[0].settings["p_open_bracket"] < 0.5
    assert scored_mode[1].settings is None                                   # free text: plain generation


def test_scoring_mode_has_its_own_store_keys(backend, scoring_samples, tmp_path):
    score_keys = {s.key for s in scoring_samples}
    assert backend.kind == "transformers"
    gen_keys = {mcq.request_key(backend.kind, backend.model_id, s.request, item_id=s.item_id,
                                condition=s.condition, prompt_format=s.prompt_format, k=s.k, perm=s.perm)
                for s in scoring_samples}
    assert len(score_keys) == len(gen_keys) == len(scoring_samples) and not score_keys & gen_keys

    with ResponseStore(tmp_path / "r.sqlite") as store, configured(backend, mcq_mode="score", min_bracket_prob=0.0):
        report = runs.run(backend, store, scoring_samples, model="smol", progress=False)
        assert report.counts() == {"planned": 6, "cached": 0, "generated": 6, "failed": 0, "too_long": 0,
                                   "not_sent": 0}
        rows = store.frame()
        assert set(rows["backend"]) == {"transformers-score"} and set(rows["parse_status"]) == {"ok"}
        assert all(json.loads(s)["mode"] == "letter_scoring" for s in rows["settings"])
        for r in rows.itertuples():                 # distributions stored in the original letters
            assert r.parsed_answer in r.letter_logprobs and set(r.letter_logprobs) == set(LETTERS)
            assert r.letter_logprobs[r.parsed_answer] == pytest.approx(r.answer_logprob)
        assert runs.run(backend, store, scoring_samples, model="smol", progress=False)["cached"] == 6
        assert store.has(gen_keys) == set()


KILLED_RUN = textwrap.dedent('''
    import os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import pandas as pd
    from medaudit.llm import mcq, runs
    from medaudit.llm.base import GenParams
    from medaudit.llm.hf import TransformersBackend
    from medaudit.llm.store import ResponseStore
    sys.path.insert(0, sys.argv[2])
    from killed_run import killed_run_plan
    be = TransformersBackend("smollm2-135m", threads=1, batch_size=2)
    print("loaded", flush=True)
    with ResponseStore(sys.argv[1]) as store:
        runs.run(be, store, killed_run_plan(be), model="smol", progress=False)
    print("finished", flush=True)
''')


def test_a_killed_batched_run_keeps_its_finished_batches(backend, tmp_path):
    db = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(db), str(ROOT / "tests" / "support")],
                            env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "loaded"
        deadline = time.monotonic() + 600
        n = 0
        while n < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
            if db.exists():
                with ResponseStore(db) as s:
                    n = s.count()
        os.kill(proc.pid, signal.SIGKILL)        # no clean-up: a batch still being generated is lost
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    with ResponseStore(db) as store:
        kept = store.frame()
        assert 2 <= len(kept) < 8            # the first batch (two rows), stored before the run ended

        with configured(backend, batch_size=2):
            plan = killed_run_plan(backend)
            report = runs.run(backend, store, plan, model="smol", progress=False)
        assert (report["cached"], report["generated"]) == (len(kept), 8 - len(kept))
        final = store.by_keys(s.key for s in plan).set_index("key")["response_text"]
    assert len(final) == 8
    with configured(backend, batch_size=8):     # a run never killed, in one batch: the same eight texts
        fresh = backend.complete([s.request for s in plan], progress=False)
    assert [final[s.key] for s in plan] == [c.text for c in fresh]
