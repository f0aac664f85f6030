"""Batches across questions with shared stems (medaudit.llm.prefix),
on the CPU with the GPU benchmark's tiny random Qwen2 shape in float32 and
the embedded model's real tokenizer, over the study's real prompts
(sampled texts, whose draws a flat random distribution makes fragile, are
compared on the real SmolLM2 in test_hf_batched).

What must hold: letter scoring batched across questions gives every
letter's log-prob of the full prompt evaluated alone (a direct forward pass,
not our code) within 1e-4, in any batch composition and order, with or
without shared stems, tokenised in one go or slice by slice; the seed-003 one-token format (a prompt whose next
token is read) likewise; ``decode: prefix`` gives each sample the same
tokens whatever its batch, greedy decoding the tokens of transformers'
``generate``; the sampler draws from the warped distribution with per-row
uniforms; batches respect their memory test and hold every row once; a
row stops at its end of turn and, with ``stop_at_answer``, at the bracket
closing its answer.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import dataclasses
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from medaudit.bench import gpu as bench_gpu
from medaudit.llm import GenParams, models, prefix
from medaudit.llm.hf import TransformersBackend
from medaudit.bench.timing import timed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    """The tiny random Qwen2 (2 layers, hidden 64, float32) around the
    embedded Qwen2.5 tokenizer, as a transformers backend on one thread."""
    try:
        models.model_path(bench_gpu.TOKENIZER_MODEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    tok = bench_gpu.embedded_tokenizer()
    model = bench_gpu.random_model(bench_gpu.shape_config("tiny", tok), "cpu", "float32", seed=3)
    return TransformersBackend.from_loaded(model, tok, name="tiny", model_id="random:tiny:seed3", threads=1)


@pytest.fixture(scope="module")
def samples(tiny):
    """The paper design's samples of 3 items x 9 conditions x K = 4 (108
    requests, 27 questions; several share an option order)."""
    return bench_gpu.study_samples(3, 4, tiny)


def full_prompt_logprobs(backend, ids: list[int]):
    """The full-vocabulary log-softmax after ``ids``, one prompt alone."""
    with torch.inference_mode():
        return torch.log_softmax(backend.model(torch.tensor([ids])).logits[0, -1].double(), -1)


def shuffled(xs: list, seed: int) -> tuple[list, list[int]]:
    order = list(range(len(xs)))
    random.Random(seed).shuffle(order)
    return [xs[i] for i in order], order


def test_letter_scoring_across_questions_is_the_full_prompt_alone(tiny, samples):
    reqs = [s.request for s in samples]
    append, ids_at = tiny.score_form(reqs[0].answer_letters)
    ref = [full_prompt_logprobs(tiny, tiny.prompt_ids(r) + ([tiny.open_id] if append else [])) for r in reqs]
    for seed, kw in enumerate([dict(batch_size=None), dict(batch_size=1), dict(batch_size=3),
                               dict(batch_size=7, share_stem=False), dict(batch_size=None, share_stem=False),
                               dict(batch_size=None, chunk_tokens=700), dict(batch_size=9, chunk_tokens=250),
                               # tokenised slice by slice as on a GPU, a slice's last batch waiting for the next
                               dict(batch_size=None, score_slice=10), dict(batch_size=6, score_slice=17,
                                                                           chunk_tokens=250)]):
        batch, order = shuffled(reqs, seed)
        out, _ = timed(tiny, batch, mcq_mode="score", min_bracket_prob=0.0, **kw)
        for c, i in zip(out, order):
            assert c.finish_reason == "scored", kw
            for L, tid in ids_at.items():
                assert abs(c.letter_logprobs[L] - float(ref[i][tid])) <= 1e-4, (kw, i, L)


def test_one_token_format_across_questions(tiny, samples):
    """Seed 003's option prompting reads the one token after the prompt:
    the last-position distribution of a cross-question batch is the prompt
    alone's (the rows here are the prompts themselves, no "[" appended)."""
    seqs = [tuple(tiny.prompt_ids(s.request)) for s in samples]
    stems = {seq: tiny.stem_len(s.request, list(seq)) for seq, s in zip(seqs, samples)}
    groups = prefix.make_groups(((seq, seq) for seq in seqs), lambda seq, _: stems[seq], min_tail=1)
    assert len(groups) == 27 and sum(len(g.tails) for g in groups) == len(set(seqs)) < len(seqs)
    batches = prefix.plan(groups, lambda g, r, s, t: r <= 16, 16)
    assert len(batches) > 1
    letters = [tiny.tokenizer.encode(L, add_special_tokens=False)[0] for L in "ABCD"]
    for batch in batches:
        with torch.inference_mode():
            logits, state = prefix.prefill(tiny.model, batch, tiny.pad_id, keep=1)
        assert state is None
        got = torch.log_softmax(logits[:, -1].double(), -1)
        for row, seq in zip(got, (k for g in batch for k in g.keys)):
            ref = full_prompt_logprobs(tiny, list(seq))
            assert torch.allclose(row[letters], ref[letters], atol=1e-4)


def test_plan_keeps_every_row_once_within_its_memory_test():
    rows = [(f"q{q}k{k}", tuple([q] * 5 + [100 + k] * (1 + k % 3))) for q in range(12) for k in range(6)]
    rows += [(f"q{q}k{k}", seq) for (q, k), seq in zip([(0, 0), (1, 1)], [rows[0][1], rows[7][1]])]  # seen keys
    groups = prefix.make_groups(rows, lambda key, seq: 5, min_tail=1)
    assert len(groups) == 12 and sum(len(g.tails) for g in groups) == 72
    seen_tests = []

    def fits(g, r, s, t):
        seen_tests.append((g, r, s, t))
        return r * (s + t) <= 40

    batches = prefix.plan(groups, fits, max_rows=4)
    keys = [k for b in batches for g in b for k in g.keys]
    assert sorted(keys) == sorted({k for k, _ in rows}) and len(keys) == 72
    for b in batches:
        r = sum(len(g.tails) for g in b)
        s, t = max(len(g.stem) for g in b), max(len(x) for g in b for x in g.tails)
        assert r <= 4 and (r * (s + t) <= 40 or len(b) == 1)
        for g in b:
            assert all(seq == g.stem + tail for seq, tail in
                       ((dict(rows)[k], tail) for k, tail in zip(g.keys, g.tails)))
    # a tail keeps min_tail tokens: the stem is cut short where it would not
    short = prefix.make_groups([("a", (1, 2, 3))], lambda k, s: 3, min_tail=2)
    assert short[0].stem == (1,) and short[0].tails == [(2, 3)]


def test_prefix_decoding_has_its_own_store_name(tiny):
    """Texts drawn by the project's sampler never share keys with
    transformers' own (batch independence of its draws: test_hf_batched,
    on a real model whose distributions are not flat)."""
    assert tiny.kind == "transformers"                  # on a CPU the default decoder is generate
    on = TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t", decode="prefix")
    assert on.kind == "transformers-prefix"
    assert TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t",
                                           device="cuda").decode == "prefix"   # the default on a GPU
    with pytest.raises(ValueError, match="decode 'fast'"):
        TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t", decode="fast")


def test_prefix_greedy_is_transformers_generate(tiny, samples):
    reqs = [dataclasses.replace(s.request, params=GenParams(0.0, 1.0, 5, s.request.params.seed))
            for s in samples[::9]]
    a, _ = timed(tiny, reqs, decode="generate", batch_size=1)
    b, _ = timed(tiny, reqs, decode="prefix")
    assert [x.text for x in a] == [y.text for y in b]
    for x, y in zip(a, b):
        assert x.tokens_out == y.tokens_out and x.finish_reason == y.finish_reason
        assert (x.letter_logprobs is None) == (y.letter_logprobs is None)
        if x.letter_logprobs:
            assert all(abs(x.letter_logprobs[L] - y.letter_logprobs[L]) < 1e-4 for L in x.letter_logprobs)


def test_sampler_draws_from_the_warped_distribution_with_each_rows_own_uniforms():
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 50, generator=g) * 2
    warped = TopPLogitsWarper(0.8)(None, TemperatureLogitsWarper(0.7)(None, logits.clone()))
    p = torch.softmax(warped, -1)[0]
    n = 4000
    s = prefix.Sampler(0.7, 0.8, list(range(n)), 1, "cpu")
    drawn = s(logits.expand(n, -1), 0)
    counts = torch.bincount(drawn, minlength=50).double()
    assert counts[p == 0].sum() == 0                               # cut tokens never drawn
    kept = p > 0
    chi2 = float((((counts - n * p) ** 2)[kept] / (n * p[kept])).sum())
    assert chi2 < 2 * int(kept.sum()) + 30                         # far below what a wrong rule gives
    # a row's draw depends on its seed and step, not on its neighbours
    t = prefix.Sampler(0.7, 0.8, [5, 17, 5], 3, "cpu")
    lone = prefix.Sampler(0.7, 0.8, [17], 3, "cpu")
    x = torch.randn(3, 50, generator=g)
    for step in range(3):
        both = t(x, step)
        assert both[0] == prefix.Sampler(0.7, 0.8, [5], 3, "cpu")(x[:1], step)[0]
        assert both[1] == lone(x[1:2], step)[0]
    assert prefix.Sampler(0.0, 1.0, [1, 2], 1, "cpu")(x[:2], 0).tolist() == x[:2].argmax(-1).tolist()


def test_a_row_stops_at_the_bracket_closing_its_answer(tiny):
    enc = lambda t: tiny.tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    brackets = tiny._bracket_ids()
    eos = min(tiny.eos_ids)
    ans = enc("[B] because") + enc(" [C] too")
    gen, why = tiny._stopped(ans, brackets)
    assert tiny.tokenizer.decode(gen) == "[B]" and why == "stop"
    assert tiny._stopped(enc("no ] yet [A] x"), brackets)[0] == enc("no ] yet [A]")   # a "]" before any "["
    assert tiny._stopped(ans + [eos], None) == (ans, "stop")          # without the rule: the end of turn
    assert tiny._stopped(ans, None) == (ans, "length")
    with pytest.raises(ValueError, match="stop_at_answer: only with decode: prefix"):
        TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t", stop_at_answer=True)
    on = TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t", decode="prefix",
                                         stop_at_answer=True, mcq_mode="score")
    assert on.kind == "transformers-score-prefix-stop"


def test_decode_stops_a_row_in_the_loop(tiny, samples):
    """The loop's own stop: with every token made an end of turn the rows
    stop after their first token, and the loop after ``check_every``."""
    from medaudit.llm.prefix import decode

    seqs = [tuple(tiny.prompt_ids(s.request)) for s in samples[:6]]
    groups = prefix.make_groups(enumerate(seqs), lambda k, s: 0)
    with torch.inference_mode():
        logits, state = prefix.prefill(tiny.model, groups, tiny.pad_id, keep=1, new_slots=20)
        toks, _, stepper = decode(tiny.model, state, logits, prefix.Sampler(0.0, 1.0, [0] * 6, 20, "cpu"), 20,
                                  set(range(len(tiny.tokenizer))), tiny.pad_id, check_every=4, static=True)
    assert toks.shape == (6, 4) and (toks[:, 1:] == tiny.pad_id).all()
    assert stepper.static and not stepper.graph_error


def test_static_steps_are_the_eager_steps(tiny, samples):
    """The fixed-size cache and ready 4D mask (what a CUDA graph records)
    give the same next-token logits as the growing cache, step by step."""
    from medaudit.llm.prefix import Stepper

    seqs = [tuple(tiny.prompt_ids(s.request)) for s in samples[:5]]
    groups = prefix.make_groups(enumerate(seqs), lambda k, s: tiny.stem_len(samples[k].request, list(s)))
    outs = []
    for static in (False, True):
        with torch.inference_mode():
            logits, state = prefix.prefill(tiny.model, groups, tiny.pad_id, keep=1, new_slots=6)
            step, tok, got = Stepper(tiny.model, state, 6, static=static), logits[:, -1].argmax(-1), []
            for j in range(5):
                lg = step(tok, j)
                got.append(lg.clone())
                tok = lg.argmax(-1)
        outs.append(torch.stack(got, 1))
    assert torch.allclose(outs[0], outs[1], atol=1e-4)
    with pytest.raises(ValueError, match="'graph' on a CUDA device only"):
        TransformersBackend.from_loaded(tiny.model, tiny.tokenizer, name="t", model_id="t", step="graph")
