"""Benchmarks that print ratios measured in one run on the same machine
(speed targets live here, not in timed tests).

    python -m medaudit.bench mcq [--items 4] [--k 10] [--model qwen2.5-coder-1.5b]

``mcq``: our multiple-choice path (K option-shuffled samples per question,
the shared stem evaluated once and only each sample's suffix after it)
against the naive way (one independent generate call per sample, the cache
cleared before each, so every prompt is evaluated in full), on the same
questions and seeds. Both evaluate a prompt as stem then suffix, so the texts
must come out identical: the speed-up changes nothing in the results. It also reports how many prompt tokens each way
evaluates against the floor — one full prompt evaluation per question plus K
evaluations of the part that moves (options and instruction) — and peak RAM.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

from . import data, paths, perturb
from .llm import GenParams, mcq
from .llm.llamacpp import LlamaCppBackend


def _evaluated_tokens(backend: LlamaCppBackend, samples: list[mcq.Sample], reuse: bool) -> tuple[int, int]:
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
    items = data.load_medqa(paths.raw(*data.MEDQA4)).records
    pool = items[items["question"].str.len().between(600, 1200)].head(n_items)
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    variants = perturb.make_variants(pool, cs, ["base"])
    backend = LlamaCppBackend(model, n_threads=threads)
    gen = GenParams(0.7, 0.9, 16)
    samples = mcq.plan(variants, pool, model=model, backend=backend.kind, model_id=backend.model_id,
                       k=k, seed=1, gen=gen)
    ours_order = mcq.prefix_order(samples)

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m medaudit.bench")
    ap.add_argument("which", choices=["mcq"])
    ap.add_argument("--items", type=int, default=4)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    r = bench_mcq(a.items, a.k, a.model, a.threads)
    width = max(map(len, r))
    for key, v in r.items():
        print(f"{key:<{width}}  {v}")
    print(f"\nours vs naive: {r['speedup']}x faster on the same machine in one run "
          f"(target >= 3x for K = 10 on the default model)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
