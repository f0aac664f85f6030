"""Benchmarks that print ratios measured in one run on the same machine
(speed targets live here, not in timed tests).

    python -m medaudit.bench mcq [--items 4] [--k 10] [--model qwen2.5-coder-1.5b]
    python -m medaudit.bench hf [--items 6] [--k 4] [--model smollm2-135m] [--device cpu] [--dtype float32]
    python -m medaudit.bench gpu [--shape qwen2.5-7b|tiny] [--items 20] [--k 10]   (medaudit.bench.gpu)
    python -m medaudit.bench notebook [--profile gpubench] [-y YAML]               (medaudit.bench.notebook)
    python -m medaudit.bench planted [--sizes 296,2364] [--k 10]                   (medaudit.bench.planted)

``mcq``: our multiple-choice path (K option-shuffled samples per question,
the shared stem evaluated once and only each sample's suffix after it)
against the naive way (one independent generate call per sample, the cache
cleared before each, so every prompt is evaluated in full), on the same
questions and seeds. Both evaluate a prompt as stem then suffix, so the texts
must come out identical: the speed-up changes nothing in the results. It also reports how many prompt tokens each way
evaluates against the floor — one full prompt evaluation per question plus K
evaluations of the part that moves (options and instruction) — and peak RAM.

``hf``: the transformers backend on the same MCQ prompts (greedy), one
request at a time against batched generation (texts must be identical), and
exact letter scoring one prompt at a time, batched, and batched with each
question's stem shared; the letter distributions of each way against one at
a time, and how often generation and scoring disagree on the same prompts
(the parsed greedy answer against the most probable letter; a prompt the
model does not open with "[" is scored anyway here, min_bracket_prob 0, and
counted), on the plain prompts and again after one worked example answered
"[D]" (a small model follows the format only then); and free-text answers
(short prompts, 4 x max_tokens generated) one at a time against batched.
``--device cuda --dtype bfloat16 --model /path/to/checkpoint`` on a GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time

from medaudit.prep import data, perturb
from medaudit import paths
from medaudit.llm import GenParams, Request, mcq, runs
from medaudit.llm.llamacpp import LlamaCppBackend
from medaudit.bench.timing import timed


def _evaluated_tokens(backend: LlamaCppBackend, samples: list[runs.Sample], reuse: bool) -> tuple[int, int]:
    """(prompt tokens evaluated in this order, the floor): with ``reuse`` a
    sample re-evaluates only what follows the stem when the previous prompt
    had the same stem (what the backend does); the floor is one full prompt
    per question plus, for each further sample, what follows the stem."""
    evaluated, floor, prev, seen = 0, 0, [], set()
    for s in samples:
        toks, stem, _ = backend.tokens(s.request)
        start = stem if reuse and prev[:stem] == toks[:stem] else 0
        evaluated += len(toks) - start
        q = (s.item_id, s.condition)
        floor += len(toks) if q not in seen else len(toks) - stem
        seen.add(q)
        prev = toks
    return evaluated, floor


def bench_mcq(n_items: int = 4, k: int = 10, model: str = "qwen2.5-coder-1.5b", threads: int = 2) -> dict:
    """Time ``n_items`` questions × K samples through the llama.cpp backend two ways:
    our order (shared stems evaluated once, :func:`medaudit.llm.runs.prefix_order`) against the
    naive one (every prompt in full); returns the timings, speed-up, prompt tokens of each way
    against the floor, peak RAM and how many texts came out identical."""
    items = data.load_medqa(paths.raw(*data.MEDQA4)).records
    pool = items[items["question"].str.len().between(600, 1200)].head(n_items)
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    variants = perturb.make_variants(pool, cs, ["base"])
    backend = LlamaCppBackend(model, n_threads=threads)
    gen = GenParams(0.7, 0.9, 16)
    samples = mcq.plan(variants, pool, model=model, backend=backend.kind, model_id=backend.model_id,
                       k=k, seed=1, gen=gen)
    ours_order = runs.prefix_order(samples)

    backend.reset()
    t = time.perf_counter()
    naive = backend.complete([s.request for s in samples], progress=False, reuse_prefix=False)
    t_naive = time.perf_counter() - t

    backend.reset()
    t = time.perf_counter()
    ours = backend.complete([s.request for s in ours_order], progress=False)
    t_ours = time.perf_counter() - t

    by_key_naive = {s.key: c.text for s, c in zip(samples, naive)}
    same = sum(by_key_naive[s.key] == c.text for s, c in zip(ours_order, ours))
    tok_naive, floor = _evaluated_tokens(backend, samples, reuse=False)
    tok_ours, _ = _evaluated_tokens(backend, ours_order, reuse=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "model": model, "questions": n_items, "K": k, "samples": len(samples), "threads": threads,
        "naive_s": round(t_naive, 2), "ours_s": round(t_ours, 2), "speedup": round(t_naive / t_ours, 2),
        "naive_s_per_sample": round(t_naive / len(samples), 3),
        "ours_s_per_sample": round(t_ours / len(samples), 3),
        "prompt_tokens_naive": tok_naive, "prompt_tokens_ours": tok_ours, "prompt_tokens_floor": floor,
        "ours_over_floor_tokens": round(tok_ours / floor, 2),
        "load_average_1min": round(__import__("os").getloadavg()[0], 2),
        "identical_texts": f"{same}/{len(samples)}",
        "peak_rss_mb": round(peak_mb),
    }


def _max_diff(a: list, b: list) -> float | None:
    """The largest difference between two runs' letter log-probs (None: no
    completion of either has them)."""
    d = [abs(x.letter_logprobs[L] - y.letter_logprobs[L]) for x, y in zip(a, b)
         if x.letter_logprobs and y.letter_logprobs for L in x.letter_logprobs]
    return float(f"{max(d):.2e}") if d else None


def bench_hf(n_items: int = 6, k: int = 4, model: str = "smollm2-135m", device: str = "cpu",
             dtype: str = "float32", threads: int | None = 1, max_tokens: int = 16,
             batch_size: int | None = None) -> dict:
    """Time the transformers backend on the same multiple-choice prompts: one
    request at a time against batched generation, exact letter scoring (one at a time, batched,
    stem shared) and free-text answers; returns the timings, the agreement of each way with one
    at a time, and how often generation and scoring disagree (with and without a worked example)."""
    import os

    from medaudit.llm.hf import TransformersBackend
    from medaudit.parse import parse_bracket_letter

    items = data.load_medqa(paths.raw(*data.MEDQA4)).records
    pool = items[items["question"].str.len().between(600, 1200)].head(n_items)
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    variants = perturb.make_variants(pool, cs, ["base"])
    backend = TransformersBackend(model, device=device, dtype=dtype, threads=threads, batch_size=batch_size)
    samples = runs.prefix_order(mcq.plan(variants, pool, model=model, backend=backend.kind,
                                        model_id=backend.model_id, k=k, seed=1, gen=GenParams(0.0, 1.0, max_tokens)))
    reqs = [s.request for s in samples]
    n = len(reqs)
    timed(backend, reqs[:1], batch_size=1)          # warm-up: torch's first pass is slow, time none of it
    one, t_one = timed(backend, reqs, batch_size=1)
    batched, t_batched = timed(backend, reqs, batch_size=batch_size)
    score = dict(mcq_mode="score", min_bracket_prob=0.0)
    s_one, t_s_one = timed(backend, reqs, batch_size=1, share_stem=False, **score)
    s_batched, t_s_batched = timed(backend, reqs, batch_size=batch_size, share_stem=False, **score)
    s_stem, t_s_stem = timed(backend, reqs, batch_size=batch_size, share_stem=True, **score)

    # the same prompts after one worked example answered "[D]" (a small
    # model follows the format only then): generation against scoring
    ex = items[items["answer_idx"].eq("D") & ~items["item_id"].isin(pool["item_id"])].iloc[0]
    shot = tuple((m["role"], m["content"]) for m in mcq.build_messages("mcq", ex["question"], ex["options"], "ABCD")
                 + [{"role": "assistant", "content": "[D]"}])
    shot_reqs = [dataclasses.replace(r, messages=shot + r.messages) for r in reqs]
    shot_gen, _ = timed(backend, shot_reqs, batch_size=batch_size)
    shot_score, _ = timed(backend, shot_reqs, batch_size=batch_size, share_stem=True, **score)

    # free text (open-ended answers: few prompt tokens, many generated)
    free = [Request.chat([{"role": "user", "content": "In two sentences, what is the most likely diagnosis? "
                           + q}], GenParams(0.0, 1.0, 4 * max_tokens, i))
            for i, q in enumerate(pool["question"].str.split(". ").str[0])]
    free_one, t_free_one = timed(backend, free, batch_size=1)
    free_batched, t_free_batched = timed(backend, free, batch_size=batch_size)

    def disagreement(gen: list, scored: list) -> tuple[str, str]:
        parsed = [parse_bracket_letter(c.text, "ABCD")[0] for c in gen]
        best = [max(c.letter_logprobs, key=c.letter_logprobs.get) for c in scored]
        both = [(p, b) for p, b in zip(parsed, best) if p is not None]
        return f"{len(both)}/{len(gen)}", f"{sum(p != b for p, b in both)}/{len(both)}"

    p_open = [c.settings["p_open_bracket"] for c in s_stem]
    p_open_shot = [c.settings["p_open_bracket"] for c in shot_score]
    on = str(device)
    if on.startswith("cuda"):
        import torch

        on = f"{on} ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "model": model, "device": on, "dtype": dtype, "threads": threads, "questions": n_items, "K": k,
        "samples": n, "max_tokens": max_tokens,
        "batch_size": batch_size
        or f"auto ({backend.rows_per_batch(len(backend.prompt_ids(reqs[-1])), max_tokens, max_tokens)})",
        "generate_one_s_per_sample": round(t_one / n, 4),
        "generate_batched_s_per_sample": round(t_batched / n, 4),
        "score_one_s_per_sample": round(t_s_one / n, 4),
        "score_batched_s_per_sample": round(t_s_batched / n, 4),
        "score_batched_stem_shared_s_per_sample": round(t_s_stem / n, 4),
        "batched_vs_one_generate": round(t_one / t_batched, 2),
        "score_batched_vs_one_score": round(t_s_one / t_s_batched, 2),
        "stem_shared_vs_not": round(t_s_batched / t_s_stem, 2),
        "score_stem_shared_vs_generate_one": round(t_one / t_s_stem, 2),
        "score_stem_shared_vs_generate_batched": round(t_batched / t_s_stem, 2),
        "identical_greedy_texts": f"{sum(a.text == b.text for a, b in zip(one, batched))}/{n}",
        "letter_logprobs_max_diff_generate_batched_vs_one": _max_diff(one, batched),
        "letter_logprobs_max_diff_score_batched_vs_one": _max_diff(s_one, s_batched),
        "letter_logprobs_max_diff_score_stem_vs_one": _max_diff(s_one, s_stem),
        "free_text_prompts": f"{len(free)} ({4 * max_tokens} tokens)",
        "free_text_one_s_per_prompt": round(t_free_one / len(free), 4),
        "free_text_batched_s_per_prompt": round(t_free_batched / len(free), 4),
        "free_text_batched_vs_one": round(t_free_one / t_free_batched, 2),
        "free_text_identical_greedy_texts":
            f"{sum(a.text == b.text for a, b in zip(free_one, free_batched))}/{len(free)}",
        "zero_shot_generation_parsed": disagreement(batched, s_stem)[0],
        "zero_shot_generation_vs_scoring_disagree": disagreement(batched, s_stem)[1],
        "zero_shot_p_open_bracket_mean": round(sum(p_open) / n, 4),
        "one_shot_generation_parsed": disagreement(shot_gen, shot_score)[0],
        "one_shot_generation_vs_scoring_disagree": disagreement(shot_gen, shot_score)[1],
        "one_shot_p_open_bracket_mean": round(sum(p_open_shot) / n, 4),
        "one_shot_letter_logprobs_max_diff_generate_vs_score": _max_diff(
            [c for c in shot_gen if c.text.startswith("[")], [s for c, s in zip(shot_gen, shot_score)
                                                              if c.text.startswith("[")]),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.bench``: ``mcq`` or ``hf`` run here and
    print their measurements; ``gpu``, ``notebook`` and ``planted`` hand their arguments to their
    own modules' ``main``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["gpu"]:                      # its own options: medaudit.bench.gpu
        from medaudit.bench.gpu import main as gpu_main
        return gpu_main(argv[1:])
    if argv[:1] == ["notebook"]:                 # its own options: medaudit.bench.notebook
        from medaudit.bench.notebook import main as notebook_main
        return notebook_main(argv[1:])
    if argv[:1] == ["planted"]:                  # its own options: medaudit.bench.planted
        from medaudit.bench.planted import main as planted_main
        return planted_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m medaudit.bench")
    ap.add_argument("which", choices=["mcq", "hf", "gpu", "notebook", "planted"],
                    help="gpu, notebook, planted: python -m medaudit.bench gpu --help (notebook, planted --help)")
    ap.add_argument("--items", type=int, default=None, help="questions (mcq: 4, hf: 6)")
    ap.add_argument("--k", type=int, default=None, help="samples per question (mcq: 10, hf: 4)")
    ap.add_argument("--model", default=None, help="mcq: qwen2.5-coder-1.5b; hf: smollm2-135m (or a checkpoint folder)")
    ap.add_argument("--threads", type=int, default=None,
                    help="mcq: 2; hf: 1 (torch threads wait on each other on a busy machine)")
    ap.add_argument("--device", default="cpu", help="hf only")
    ap.add_argument("--dtype", default="float32", help="hf only")
    ap.add_argument("--max-tokens", type=int, default=16, help="hf only")
    ap.add_argument("--batch-size", type=int, default=None, help="hf only (default: from free memory)")
    a = ap.parse_args(argv)
    if a.which == "hf":
        r = bench_hf(a.items or 6, a.k or 4, a.model or "smollm2-135m", a.device, a.dtype, a.threads or 1,
                     a.max_tokens, a.batch_size)
    else:
        r = bench_mcq(a.items or 4, a.k or 10, a.model or "qwen2.5-coder-1.5b", a.threads or 2)
    width = max(map(len, r))
    for key, v in r.items():
        print(f"{key:<{width}}  {v}")
    if a.which == "hf":
        print(f"\nbatched vs one at a time: {r['batched_vs_one_generate']}x faster, "
              f"{r['identical_greedy_texts']} identical greedy texts; exact letter scoring (stem shared) vs "
              f"one at a time: {r['score_stem_shared_vs_generate_one']}x; same machine, one run")
    else:
        print(f"\nours vs naive: {r['speedup']}x faster on the same machine in one run "
              f"(target >= 3x for K = 10 on the default model)")
    return 0
