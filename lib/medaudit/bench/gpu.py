"""GPU benchmark: the 9-condition multiple-choice design on one accelerator,
projected from seconds per sample measured in one run on the same machine.

    python -m medaudit.bench gpu [--shape qwen2.5-7b|tiny] [--items 20] [--k 10] [--device cuda]
                                 [--dtype bfloat16] [--peak-tflops 800] [--max-tokens 16]
                                 [--batch-size N] [--one-at-a-time 100] [--paper-items 2364]
                                 [--free-rows 256] [--free-tokens 128] [--free-one 2] [--hbm-tbps 3.35]
                                 [--tokenizer DIR | --save-tokenizer DIR] [--no-hf-generate]

**The model** has the weights of no one: a ``Qwen2ForCausalLM`` built from a
transformers config written here (:data:`SHAPES`; ``qwen2.5-7b`` is the shape
of Qwen2.5-7B-Instruct's config.json, 7,615,616,512 parameters), with random
weights created directly on the device in the dtype (``from_config`` inside a
``torch.device`` context: the weights are allocated once, no hub, no
checkpoint). Random weights do not change the cost of a forward pass. They do
change *how many tokens a generation runs*: a random model rarely emits its
end-of-turn token, so every generated answer runs to ``max_tokens`` (the
output prints the mean), where a model that answers "[B]" stops after about
four; ``--max-tokens 4`` times that case. ``--shape tiny`` (2 layers, hidden
64) runs the same path on a CPU, for tests: its parameters are mostly its
vocabulary matrices and its time mostly the sampler's top-p sort over the
vocabulary, so its numbers say nothing about a GPU.

**The tokenizer** is the embedded model's (qwen2.5-coder-1.5b, the Qwen2.5
tokenizer), extracted from its verified GGUF file by transformers
(``AutoTokenizer.from_pretrained(folder, gguf_file=...)``). Its ids run to
``len(tokenizer) - 1`` = 151,935: the 7B shape's vocabulary (152,064) holds
them, and the tiny shape's vocabulary *is* ``len(tokenizer)`` (no id is
clamped), so its embedding and output matrices are most of its parameters.

**The prompts** are the study's: the paper profile's selection of MedQA
(params/paper.yaml: its files, selection rules and seed; a seeded sample
of ``--items`` eligible items, the one notebook 01 draws with
``-p n_items N``), the stand-alone variants of Table 1's nine conditions
(:data:`TABLE1`, those of params/conditions.yaml), and :func:`medaudit.llm.mcq.plan`
with the profile's K-sample protocol (option orders reshuffled per sample,
temperature 0.7, top-p 0.9, the profile's seed), K = ``--k``.

**The ways**, each through the transformers backend
(:class:`medaudit.llm.hf.TransformersBackend`, wrapped round the in-memory
model by ``from_loaded``), on the same samples in the study's run order:

* ``generate_one``: one request at a time (``decode: prefix``,
  ``batch_size`` 1), on ``--one-at-a-time`` samples spread evenly over the
  plan;
* ``generate_batched``: batched generation with ``decode: prefix``
  (:mod:`medaudit.llm.prefix`: rows batched across questions, stems once,
  rows from free memory unless ``--batch-size``);
* ``generate_batched_hf``: the same with transformers' ``generate``
  (``decode: generate``), the baseline of the same run
  (``--no-hf-generate`` skips it);
* ``score``: exact letter scoring (``mcq_mode: score``) across questions,
  each stem evaluated once. A random model never opens its answer with "[",
  so ``min_bracket_prob`` is 0 here (every prompt is scored; with the
  default 0.5 all would fall back to generation);
* free text: ``--free-rows`` MedQA stems as open questions, ``--free-tokens``
  new tokens each, sampled, batched (``decode: prefix`` and, for comparison,
  ``generate``) and ``--free-one`` of them one at a time, in generated
  tokens per second and milliseconds a token against the time to read the
  weights once at ``--hbm-tbps``; on a GPU also whether the CUDA-graph steps
  give the same greedy texts as the same steps run one by one;
* ``floor``: 2 × parameters × the prompt tokens that must be evaluated —
  each question's (item × condition) stem once plus each sample's suffix
  after it (its options and instruction; "[" where the tokenizer needs it
  appended) — at ``--peak-tflops`` (800 by default, between the dense bf16
  peaks of the H100 data sheets, 756 for PCIe and 989 for SXM; give your
  device's).
  With ``--profile-score FILE`` letter scoring runs once more under
  ``torch.profiler`` (:func:`profile_way`): its costliest kernels and the
  split of its time, to say where the gap to the floor is.
  Every weight counts, the input embedding included (a look-up, no FLOPs:
  0.545 B of the 7B shape's 7.616 B), and attention's own score FLOPs are
  left out: a round lower bound, not a model of the hardware.

Each way's seconds per sample times the paper design's samples gives its
projected wall time, and each is printed against the floor; the ratios are
measured in one run on one machine (speed targets in this project are
ratios printed by benchmarks, never timed tests).

**The paper design: 212,760 samples.** Seed 000 (Testoni & Calixto 2026)
§2: "We randomly sample 2,364 questions"; Table 1 has nine columns — Base,
+hetero, +homo, +Cat, +Mus, +Ath, +homo+Cat, +homo+Mus, +homo+Ath —
inserted as a stand-alone sentence ("In our main experiments, identity
attributes are inserted as a *stand-alone* sentence"; the embedded form is
B.1's robustness check); "For each question, we draw K = 10 model outputs".
So, per model,

    2,364 items × 9 conditions × 1 method × K = 10 × 1 prompt format = 212,760

(the nine models of Table 1: nine times that). :func:`paper_design` reads K
(``k_samples``), the conditions (Table 1's, all in ``infer_conditions``) and
the prompt format (``prompt_formats``: mcq) from params/paper.yaml; the item
count is the seed's, since the paper profile asks for every eligible item
(``n_items: null``) of whatever MedQA files it is given (``--paper-items``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import resource
import sys
import time

import yaml

from medaudit.prep import data, perturb, selection
from medaudit import paths
from medaudit.llm import GenParams, Request, mcq, runs
from medaudit.llm.random_model import (SHAPES, TOKENIZER_MODEL, embedded_tokenizer, param_count, random_model,
                                       saved_tokenizer, shape_config)
from medaudit.bench.timing import configured, timed

# Table 1 of seed 000, in its column order (params/conditions.yaml names)
TABLE1 = ["base", "+hetero", "+homo", "+Cat", "+Mus", "+Ath", "+homo+Cat", "+homo+Mus", "+homo+Ath"]
SEED000_ITEMS = 2364                  # seed 000 §2: "We randomly sample 2,364 questions"


def paper_design(n_items: int = SEED000_ITEMS) -> dict:
    """The samples of seed 000's Table-1 design per model, and how they are
    counted (module docstring): items × conditions × methods × K × formats."""
    paper = yaml.safe_load(paths.params("paper.yaml").read_text(encoding="utf-8"))
    conditions = [c for c in TABLE1 if c in paper["infer_conditions"]]
    methods = [m for m in paper["infer_methods"] if m == "standalone"]
    formats = [f for f in paper["prompt_formats"] if f == "mcq"]
    k = int(paper["k_samples"])
    n = n_items * len(conditions) * len(methods) * k * len(formats)
    return {"samples": n, "items": n_items, "conditions": conditions, "methods": methods, "k": k,
            "formats": formats,
            "text": (f"{n_items:,} items x {len(conditions)} conditions x {len(methods)} method "
                     f"({'/'.join(methods)}) x K = {k} x {len(formats)} format ({'/'.join(formats)}) = {n:,}")}


def flop_floor_s(params: int, tokens: int, peak_tflops: float) -> float:
    """Seconds to evaluate ``tokens`` tokens at 2 FLOPs per parameter per
    token at ``peak_tflops`` TFLOP/s."""
    return 2.0 * params * tokens / (peak_tflops * 1e12)


def prompt_lengths(backend, samples: list) -> list[tuple[tuple, int, int]]:
    """Per sample: (its question (item, condition), the tokens a letter
    reading evaluates — the prompt, and "[" where scoring appends it —,
    the tokens of its stem)."""
    out = []
    for s in samples:
        ids = backend.prompt_ids(s.request)
        append = backend.score_form(s.request.answer_letters)[0]
        out.append(((s.item_id, s.condition), len(ids) + append, backend.stem_len(s.request, ids)))
    return out


def floor_tokens(lengths: list[tuple[tuple, int, int]]) -> tuple[int, int, int]:
    """(tokens that must be evaluated, stem tokens counted once per question,
    all prompt tokens) from :func:`prompt_lengths`: each question's stem
    once (the shortest of its samples' stems: the part they all share), plus
    each sample's tokens after it."""
    stem: dict[tuple, int] = {}
    for q, _, st in lengths:
        stem[q] = min(stem.get(q, st), st)
    stems = sum(stem.values())
    total = sum(n for _, n, _ in lengths)
    return stems + total - sum(stem[q] for q, _, _ in lengths), stems, total


def study_samples(n_items: int, k: int, backend) -> list:
    """The study's MCQ samples for the first ``n_items`` of the paper
    profile's seeded sample: Table 1's conditions, stand-alone, K = ``k``,
    in the order the runner sends them."""
    paper = yaml.safe_load(paths.params("paper.yaml").read_text(encoding="utf-8"))
    medqa = data.load_medqa_files(paper["medqa_files"]).records
    cfg = selection.load_selection(paths.params(paper["selection_file"]))
    if paper.get("partner_sex") is not None:
        cfg = {**cfg, "partner_sex": paper["partner_sex"]}
    cfg = {**cfg, "psychiatry_subset": paper.get("psychiatry_subset", "broad")}
    _, items, _ = selection.funnel(medqa, cfg, n_sample=n_items, seed=paper["seed"])
    cs = perturb.load_conditions(paths.params(paper["conditions_file"]))
    conditions = [c for c in TABLE1 if c in cs.names()]
    variants = perturb.make_variants(items, cs, conditions, ["standalone"]).assign(subset="main")
    variants = mcq.select_variants(variants, n_items, conditions, ["standalone"], ["main"])
    gen = GenParams(paper["temperature"], paper["top_p"], paper["max_tokens"])
    return runs.prefix_order(mcq.plan(variants, items, model=backend.model_name, backend=backend.kind,
                                      model_id=backend.model_id, k=k, seed=paper["seed"], gen=gen))


def _rows(batch_rows: list[int]) -> str:
    """The rows of the batches a way ran: how many batches, mean and most."""
    if not batch_rows:
        return "none"
    return f"{len(batch_rows)} batches, {sum(batch_rows) / len(batch_rows):.1f} rows mean, {max(batch_rows)} most"


def _fmt_s(x: float) -> str:
    return f"{x:.6g} s ({x / 3600:.3g} h)"


# where a way's device time goes: kernel (CUDA) or operator (CPU) names, attention checked first
# (memory-efficient attention's kernels carry "cutlass" too)
ATTENTION_NAMES = ("flash", "fmha", "attention", "scaled_dot_product", "sdpa")
MATMUL_NAMES = ("gemm", "matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "nvjet", "cublas", "xmma",
                "cutlass", "wgmma")


def kernel_kind(name: str) -> str:
    """attention | matmul | other, from a profiled kernel's or operator's name."""
    n = name.lower()
    if any(a in n for a in ATTENTION_NAMES):
        return "attention"
    return "matmul" if any(m in n for m in MATMUL_NAMES) else "other"


def profile_way(backend, reqs: list, settings: dict, out: str | os.PathLike) -> dict:
    """One more run of a way under ``torch.profiler`` (CPU, and CUDA on a
    GPU): the 40 costliest kernels (operators on a CPU) by their own time
    written to ``out``, and where the time went — busy seconds split into
    attention, matrix products and the rest (:func:`kernel_kind`), the
    host's own preparation (prompts tokenised, stems found: timed apart
    before the run) and, on a GPU, the share of the profiled wall time no
    kernel ran (launches, host work, synchronisation). The profiler slows
    the run; compare the shares, not the wall time, with the timed way."""
    import torch
    from pathlib import Path
    from torch.profiler import ProfilerActivity, profile

    cuda = str(backend.device).startswith("cuda")
    with configured(backend, **settings):     # the way's own host work: its prompts and stems tokenised
        t0 = time.perf_counter()
        ids, _ = backend.tokenize_requests(reqs)
        host_s = time.perf_counter() - t0
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        timed(backend, reqs, **settings)
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    events = prof.key_averages()

    def own_s(e) -> float:
        if cuda:
            return (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)) / 1e6
        return e.self_cpu_time_total / 1e6

    by = {"attention": 0.0, "matmul": 0.0, "other": 0.0}
    for e in events:
        by[kernel_kind(e.key)] += max(own_s(e), 0.0)
    rank = sorted(events, key=own_s, reverse=True)[:40]
    lines = [f"{'s (own)':>10}  {'share':>6}  {'calls':>7}  {'kind':<9}  name"]
    busy = sum(by.values())
    lines += [f"{own_s(e):>10.4f}  {own_s(e) / busy if busy else 0:>6.1%}  {e.count:>7}  "
              f"{kernel_kind(e.key):<9}  {e.key[:120]}"
              for e in rank]
    Path(out).write_text(f"{'CUDA kernels' if cuda else 'CPU operators'} of one profiled run, "
                         f"{len(reqs)} requests, {settings}\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return {"profile_file": str(out), "profile_wall_s": round(wall, 4), "profile_busy_s": round(busy, 4),
            **{f"profile_{k}_s": round(v, 4) for k, v in by.items()},
            "profile_host_prep_s": round(host_s, 4), "profile_prompt_tokens": sum(map(len, ids)),
            "profile_idle_share": f"{max(0.0, 1 - busy / wall):.1%}" if cuda else "n/a (CPU: no device timeline)"}


def _chunk_way(backend, reqs: list, settings: dict, chunk_tokens: int, reference: list) -> str:
    """Letter scoring once more with tails passed in chunks of at most
    ``chunk_tokens`` tokens: seconds per sample ("{floor}" stands for its
    ratio to the floor, filled in by the caller), and its letters against
    ``reference`` (the default chunks' run): how many drawn letters are the
    same and the largest difference of a letter's log-prob."""
    out, t = timed(backend, reqs, **settings, chunk_tokens=chunk_tokens)
    same = sum(a.text == b.text for a, b in zip(out, reference))
    diff = max((abs(a.letter_logprobs[L] - b.letter_logprobs[L]) for a, b in zip(out, reference)
                if a.letter_logprobs and b.letter_logprobs for L in a.letter_logprobs), default=0.0)
    return (f"{t / len(reqs):.6g} s/sample ({{floor}}x floor); {same}/{len(reqs)} letters as the default "
            f"chunks', letter log-probs within {diff:.3g}")


def free_text_requests(n: int, max_tokens: int, seed: int = 0) -> list[Request]:
    """``n`` open-ended questions from the paper profile's MedQA files (the
    question stems, no options), sampled at the paper's temperature and
    top-p, each with its own seed (the open-ended K answers and SOAP notes
    are free text of this kind)."""
    paper = yaml.safe_load(paths.params("paper.yaml").read_text(encoding="utf-8"))
    medqa = data.load_medqa_files(paper["medqa_files"]).records
    qs = medqa["question"].tolist()
    if not qs:
        raise ValueError("no MedQA questions for the free-text way")
    gen = GenParams(paper["temperature"], paper["top_p"], max_tokens)
    return [Request.chat([{"role": "user", "content": qs[i % len(qs)]}],
                         dataclasses.replace(gen, seed=seed + i)) for i in range(n)]


def bench_gpu(shape: str = "qwen2.5-7b", n_items: int = 20, k: int = 10, device: str | None = None,
              dtype: str | None = None, peak_tflops: float = 800.0, max_tokens: int | None = None,
              batch_size: int | None = None, one_at_a_time: int = 100, threads: int | None = None,
              paper_items: int = SEED000_ITEMS, free_rows: int = 256, free_tokens: int = 128, free_one: int = 2,
              hbm_tbps: float = 3.35, tokenizer: str | None = None, hf_generate: bool = True,
              profile_score: str | None = None, score_chunks: list[int] | None = None) -> dict:
    """Build a random-weight model of ``shape`` on ``device`` and time the 9-condition
    multiple-choice design through the transformers backend each way (one at a time, batched
    prefix decoding, transformers' generate, letter scoring, free text); returns seconds per
    sample, the agreement between ways and the projection to ``paper_items`` questions against
    the compute and weight-read floors."""
    import torch

    from medaudit.llm.hf import TransformersBackend

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or ("bfloat16" if str(device).startswith("cuda") else "float32")
    design = paper_design(paper_items)
    tok = embedded_tokenizer() if tokenizer is None else saved_tokenizer(tokenizer)
    cfg = shape_config(shape, tok)
    t0 = time.perf_counter()
    model = random_model(cfg, device, dtype)
    build_s = time.perf_counter() - t0
    params = model.num_parameters()
    backend = TransformersBackend.from_loaded(model, tok, name=f"random-{shape}", model_id=f"random:{shape}:seed0",
                                              device=device, threads=threads, batch_size=batch_size)
    samples = study_samples(n_items, k, backend)
    if max_tokens is not None:
        samples = [dataclasses.replace(s, request=dataclasses.replace(
            s.request, params=dataclasses.replace(s.request.params, max_tokens=max_tokens))) for s in samples]
    reqs = [s.request for s in samples]
    n = len(reqs)
    if not n or one_at_a_time < 1:
        raise ValueError(f"nothing to time: {n} samples, --one-at-a-time {one_at_a_time}")
    step = max(1, math.ceil(n / one_at_a_time))
    one_reqs = reqs[::step]
    prefix = dict(decode="prefix", batch_size=batch_size)
    hf = dict(decode="generate", batch_size=batch_size)
    score = dict(mcq_mode="score", share_stem=True, min_bracket_prob=0.0, decode="prefix", batch_size=batch_size)
    free = free_text_requests(free_rows, free_tokens)
    free_alone = free[:max(0, free_one)]

    # warm-up of every way (torch's and CUDA's first passes, the allocator's and the matrix libraries' first
    # calls at each shape), timed nowhere: the batched ways on every sample, since their shapes are the
    # batches' (a warm-up on a few requests left the first timed letter scoring ~10 % slower than a second)
    timed(backend, reqs[:1], decode="prefix", batch_size=1)
    timed(backend, reqs, **prefix)
    timed(backend, reqs, **score)
    if hf_generate:
        timed(backend, reqs[:4], **hf)
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    rows = {}
    one, t_one = timed(backend, one_reqs, decode="prefix", batch_size=1)
    batched, t_batched = timed(backend, reqs, **prefix)
    rows["generate_batched"] = _rows(backend.batch_rows)
    if hf_generate:
        _, t_hf = timed(backend, reqs, **hf)
        rows["generate_batched_hf"] = _rows(backend.batch_rows)
    scored, t_score = timed(backend, reqs, **score)
    rows["score"] = _rows(backend.batch_rows)
    profiled = profile_way(backend, reqs, score, profile_score) if profile_score else {}
    sweep = {f"score_chunk_{c}": _chunk_way(backend, reqs, score, c, scored) for c in score_chunks or []}
    lengths = prompt_lengths(backend, samples)
    floor_tok, stem_tok, prompt_tok = floor_tokens(lengths)
    # free text: every row of a random model runs to the token limit
    free_out, t_free = timed(backend, free, **prefix)
    rows["free_batched"] = _rows(backend.batch_rows)
    free_hf, t_free_hf = timed(backend, free, **hf) if hf_generate else ([], 0.0)
    alone_out, t_alone = timed(backend, free_alone, decode="prefix", batch_size=1) if free_alone else ([], 0.0)
    # the recorded steps against the same steps run one by one: greedy texts of a few free-text rows
    agree = "not run (no CUDA graph)"
    if backend.step == "graph":
        greedy = [dataclasses.replace(r, params=dataclasses.replace(r.params, temperature=0.0)) for r in free[:16]]
        g_out, _ = timed(backend, greedy, decode="prefix")
        e_out, _ = timed(backend, greedy, decode="prefix", step="static")
        agree = f"{sum(a.text == b.text for a, b in zip(g_out, e_out))}/{len(greedy)} greedy texts the same"

    s_one, s_batched, s_score = t_one / len(one_reqs), t_batched / n, t_score / n
    s_hf = t_hf / n if hf_generate else float("nan")
    s_floor = flop_floor_s(params, floor_tok, peak_tflops) / n
    N = design["samples"]
    on = str(device)
    if on.startswith("cuda"):
        on = f"{on} ({torch.cuda.get_device_name(torch.device(device))})"
        peak_mem = f"{torch.cuda.max_memory_allocated(torch.device(device)) / 2**30:.2f} GiB (GPU)"
    else:
        peak_mem = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (RSS)"
    questions = len({(s.item_id, s.condition) for s in samples})
    free_tok = sum(c.tokens_out for c in free_out)
    free_hf_tok = sum(c.tokens_out for c in free_hf)
    alone_tok = sum(c.tokens_out for c in alone_out)
    weight_ms = params * model.dtype.itemsize / (hbm_tbps * 1e12) * 1e3
    one_ms = 1e3 * t_alone / alone_tok if alone_tok else float("nan")
    return {
        "device": on, "dtype": dtype, "threads": threads or torch.get_num_threads(),
        "shape": (f"{shape}: Qwen2ForCausalLM, hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, "
                  f"{cfg.num_attention_heads} heads, {cfg.num_key_value_heads} kv heads, "
                  f"intermediate {cfg.intermediate_size}, vocab {cfg.vocab_size}, random weights"),
        "params": params, "params_by_formula": param_count(cfg),
        "model_build_s": round(build_s, 2),
        "tokenizer": (f"{TOKENIZER_MODEL} ({'from its GGUF' if tokenizer is None else 'saved from its GGUF'}), "
                      f"{len(tok)} ids, none clamped"),
        "questions": f"{questions} ({len({s.item_id for s in samples})} items x "
                     f"{len({s.condition for s in samples})} conditions)",
        "K": k, "samples": n,
        "max_tokens": reqs[0].params.max_tokens,
        "temperature_top_p": f"{reqs[0].params.temperature} / {reqs[0].params.top_p}",
        "batch_size": batch_size or "auto (from free memory after the model is loaded)",
        "rows_generate_batched": rows["generate_batched"],
        "rows_generate_batched_hf": rows.get("generate_batched_hf", "not run"),
        "rows_score": rows["score"],
        "prompt_tokens_mean": round(prompt_tok / n, 1),
        "stem_tokens_mean_per_question": round(stem_tok / questions, 1),
        "floor_tokens": f"{floor_tok} ({floor_tok / n:.1f} per sample: stems once + suffixes)",
        "generated_tokens_mean_one": round(sum(c.tokens_out for c in one) / len(one), 2),
        "generated_tokens_mean_batched": round(sum(c.tokens_out for c in batched) / n, 2),
        "scored_samples": f"{sum(c.finish_reason == 'scored' for c in scored)}/{n}",
        "generate_one_timed_samples": f"{len(one_reqs)} of {n} (every {step})",
        "generate_one_s_per_sample": f"{s_one:.6g}",
        "generate_batched_s_per_sample": f"{s_batched:.6g}",
        "generate_batched_hf_s_per_sample": f"{s_hf:.6g}",
        "score_s_per_sample": f"{s_score:.6g}",
        "floor_s_per_sample": f"{s_floor:.6g} (at {peak_tflops:g} TFLOP/s)",
        "paper_samples": design["text"],
        "projected_generate_one": _fmt_s(s_one * N),
        "projected_generate_batched": _fmt_s(s_batched * N),
        "projected_generate_batched_hf": _fmt_s(s_hf * N),
        "projected_score": _fmt_s(s_score * N),
        "projected_floor": _fmt_s(s_floor * N),
        "generate_one_vs_floor": f"{s_one / s_floor:.4g}",
        "generate_batched_vs_floor": f"{s_batched / s_floor:.4g}",
        "generate_batched_hf_vs_floor": f"{s_hf / s_floor:.4g}",
        "score_vs_floor": f"{s_score / s_floor:.4g}",
        "batched_vs_one": f"{s_one / s_batched:.4g}",
        "score_vs_batched": f"{s_batched / s_score:.4g}",
        "free_text": (f"{len(free)} MedQA stems as open questions, {free_tokens} new tokens, sampled "
                      f"{free[0].params.temperature} / {free[0].params.top_p}, one seed a row"),
        "rows_free_batched": rows["free_batched"],
        "free_batched_tokens": free_tok,
        "free_batched_tokens_per_s": f"{free_tok / t_free:.6g}",
        "free_batched_hf_tokens_per_s": f"{free_hf_tok / t_free_hf:.6g}" if hf_generate and t_free_hf else "not run",
        "free_one_requests": f"{len(alone_out)} ({alone_tok} tokens)",
        "free_one_ms_per_token": f"{one_ms:.4g}",
        "weight_read_ms_per_token":
            f"{weight_ms:.4g} ({params * model.dtype.itemsize / 1e9:.3g} GB at {hbm_tbps:g} TB/s)",
        "free_one_vs_weight_read": f"{one_ms / weight_ms:.4g}",
        "graph_errors": ("; ".join(sorted(set(backend.graph_errors))) or "none") if backend.step == "graph"
                        else "none (no CUDA graph on a "
                        f"{'GPU with step ' + backend.step if on.startswith('cuda') else 'CPU'})",
        "graph_vs_static": agree,
        "peak_memory": peak_mem,
        "load_average_1min": round(os.getloadavg()[0], 2),
        **{f"score_{k}": v for k, v in profiled.items()},
        **{k: v.replace("{floor}", f"{float(v.split()[0]) / s_floor:.4g}") for k, v in sweep.items()},
    }


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.bench gpu``: run :func:`bench_gpu` with
    the options given (or only save the embedded tokenizer, ``--save-tokenizer``) and print its
    measurements and projection."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.bench gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="qwen2.5-7b", choices=list(SHAPES))
    ap.add_argument("--items", type=int, default=20, help="MedQA items (x 9 conditions x K samples)")
    ap.add_argument("--k", type=int, default=10, help="samples per question (the paper: 10)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--peak-tflops", type=float, default=800.0,
                    help="the device's peak TFLOP/s for the floor (800; H100 dense bf16: PCIe 756, SXM 989)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default: the paper profile's (16)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: from free memory")
    ap.add_argument("--one-at-a-time", type=int, default=100,
                    help="samples timed one request at a time (spread over the plan)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--paper-items", type=int, default=SEED000_ITEMS,
                    help="items of the projected design (seed 000: 2,364)")
    ap.add_argument("--free-rows", type=int, default=256, help="free-text requests generated batched")
    ap.add_argument("--free-tokens", type=int, default=128, help="new tokens per free-text request")
    ap.add_argument("--free-one", type=int, default=2, help="free-text requests timed one at a time")
    ap.add_argument("--hbm-tbps", type=float, default=3.35,
                    help="the device's memory bandwidth, TB/s, for the weight-read bound (H100 SXM: 3.35)")
    ap.add_argument("--tokenizer", default=None, help="a folder saved by --save-tokenizer (default: from the GGUF)")
    ap.add_argument("--save-tokenizer", default=None, metavar="DIR",
                    help="save the embedded tokenizer to DIR (to carry to a GPU machine) and exit")
    ap.add_argument("--no-hf-generate", action="store_true",
                    help="skip the transformers-generate ways (decode: generate), kept for comparison")
    ap.add_argument("--profile-score", default=None, metavar="FILE",
                    help="run letter scoring once more under torch.profiler: its costliest kernels to FILE and the "
                         "split of its time (attention, matrix products, the rest, host preparation, idle share)")
    ap.add_argument("--score-chunks", default=None, metavar="N,N,...",
                    help="time letter scoring again with its tails in chunks of at most N tokens each "
                         "(the default: 16384), letters compared with the default run's")
    a = ap.parse_args(argv)
    if a.save_tokenizer:
        embedded_tokenizer().save_pretrained(a.save_tokenizer)
        print(f"saved the {TOKENIZER_MODEL} tokenizer to {a.save_tokenizer}")
        return 0
    r = bench_gpu(a.shape, a.items, a.k, a.device, a.dtype, a.peak_tflops, a.max_tokens, a.batch_size,
                  a.one_at_a_time, a.threads, a.paper_items, a.free_rows, a.free_tokens, a.free_one, a.hbm_tbps,
                  a.tokenizer, not a.no_hf_generate, a.profile_score,
                  [int(x) for x in a.score_chunks.split(",")] if a.score_chunks else None)
    width = max(map(len, r))
    for key, v in r.items():
        print(f"{key:<{width}}  {v}")
    print(f"\nper sample against the FLOP floor, same machine, one run: one at a time "
          f"{r['generate_one_vs_floor']}x, batched generation {r['generate_batched_vs_floor']}x "
          f"(transformers generate {r['generate_batched_hf_vs_floor']}x), "
          f"letter scoring {r['score_vs_floor']}x; "
          f"the paper design ({r['paper_samples'].rsplit('= ', 1)[-1]} samples) projected: "
          f"{r['projected_generate_one']}, {r['projected_generate_batched']}, {r['projected_score']} "
          f"(floor {r['projected_floor']}); free text {r['free_batched_tokens_per_s']} tokens/s batched "
          f"(transformers generate {r['free_batched_hf_tokens_per_s']}), {r['free_one_ms_per_token']} ms a token "
          f"one at a time ({r['free_one_vs_weight_read']}x the weight-read bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
