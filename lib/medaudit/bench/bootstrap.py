"""Benchmark: the vectorised paired bootstrap against a naive loop, measured
in one run on the same machine (a script, not a timed test).

    python -m medaudit.bench.bootstrap [--boot 1000] [--models 9] [--conditions 9]
                                       [--items 2364] [--naive-boot 20] [--question-table]

Synthetic data of the paper's size: per model and condition, 2,364 questions
whose confidence comes from K = 10 simulated answers (so it takes the few
distinct values real semantic-entropy confidence takes) and whose correctness
tracks it. Both ways compute the same thing — accuracy, majority accuracy,
confidence, Brier, ECE (10 bins) and AUROC of every model × condition under
every resample — from the same resample indices:

* vectorised: :func:`medaudit.stats.paired.bootstrap_metrics` (all resamples at once
  as weighted sums), then, end to end, :func:`medaudit.stats.paired.paired_bootstrap`
  from a question table (every condition against base, McNemar included);
* naive: a Python loop over resamples and series that indexes the resampled
  items and calls ``sklearn.metrics.brier_score_loss``, ``roc_auc_score`` and
  a numpy ECE each time. It is timed on ``--naive-boot`` resamples and
  extrapolated linearly to ``--boot`` (each resample costs the same); the
  output says so. A *lean* naive loop (numpy Brier and ECE, rank-sum AUROC,
  no scikit-learn validation overhead) is timed the same way as a tougher
  baseline. All three are checked to agree on those resamples.

``--question-table`` also times :func:`medaudit.stats.uncertainty.questions`
on a synthetic responses table of models × conditions × items × 10 samples.
"""
from __future__ import annotations

import argparse
import os
import string
import time

import numpy as np
import pandas as pd
from scipy.stats import rankdata
from sklearn.metrics import brier_score_loss, roc_auc_score

from medaudit.stats import metrics, paired as stats, uncertainty


def synthetic_questions(n_models: int, n_conditions: int, n_items: int, k: int = 10,
                             seed: int = 0) -> pd.DataFrame:
    """A question table (model, prompt_format, item_id, condition, confidence,
    majority_correct, single_correct) with K-sample confidences."""
    rng = np.random.default_rng(seed)
    conds = ["base"] + [f"c{j}" for j in range(1, n_conditions)]
    ease = rng.normal(0, 1.5, n_items)
    parts = []
    for m in range(n_models):
        skill = rng.normal(0.5, 0.5)
        for ci, cond in enumerate(conds):
            logit = skill + ease - 0.05 * ci
            p_gold = 1 / (1 + np.exp(-logit))
            rest = (1 - p_gold)[:, None] * rng.dirichlet(np.ones(3), n_items)
            probs = np.column_stack([p_gold, rest])
            counts = np.array([rng.multinomial(k, p) for p in probs])
            _, conf = uncertainty.confidence_from_counts(counts, 4)
            maj, _ = uncertainty.majority_vote(counts, rng.random(counts.shape))
            single = (rng.random(n_items) < counts[:, 0] / k).astype(float)
            parts.append(pd.DataFrame({"model": f"model{m}", "prompt_format": "mcq",
                                       "item_id": [f"q{i:04d}" for i in range(n_items)], "condition": cond,
                                       "confidence": conf, "majority_correct": (maj == 0).astype(float),
                                       "single_correct": single}))
    return pd.concat(parts, ignore_index=True)


def _loop(idx: np.ndarray, conf: np.ndarray, corr: np.ndarray, acc: np.ndarray, valid: np.ndarray,
          brier, auroc) -> dict[str, np.ndarray]:
    """The loop the vectorised engine replaces: per resample, per series,
    index the resampled items and recompute each metric."""
    out = {m: np.full((idx.shape[0], conf.shape[0]), np.nan) for m in stats.METRICS}
    for b, ii in enumerate(idx):
        for s in range(conf.shape[0]):
            v = valid[s, ii]
            c, y, a = conf[s, ii][v], corr[s, ii][v], acc[s, ii][v]
            out["accuracy"][b, s] = a.mean()
            out["majority_accuracy"][b, s] = y.mean()
            out["confidence"][b, s] = c.mean()
            out["brier"][b, s] = brier(y, c)
            out["ece"][b, s] = metrics.ece(c, y)
            out["auroc"][b, s] = auroc(c, y)
    return out


def _sklearn_auroc(c: np.ndarray, y: np.ndarray) -> float:
    return roc_auc_score(y, c) if 0 < y.sum() < y.size else np.nan


def _auroc_ranks(c: np.ndarray, y: np.ndarray) -> float:
    """AUROC by the Mann–Whitney rank sum (ties get mid-ranks)."""
    pos = y > 0.5
    n1, n0 = pos.sum(), (~pos).sum()
    if n1 == 0 or n0 == 0:
        return np.nan
    r = rankdata(c)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def naive_bootstrap(idx, conf, corr, acc, valid) -> dict[str, np.ndarray]:
    """The naive loop with scikit-learn's Brier and AUROC."""
    return _loop(idx, conf, corr, acc, valid, brier_score_loss, _sklearn_auroc)


def lean_naive_bootstrap(idx, conf, corr, acc, valid) -> dict[str, np.ndarray]:
    """The same loop without scikit-learn's input validation: numpy Brier,
    rank-sum AUROC — a tougher baseline than :func:`naive_bootstrap`."""
    return _loop(idx, conf, corr, acc, valid, lambda y, c: np.mean((c - y) ** 2), _auroc_ranks)


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
        return ", ".join(f"{i['internal_api']}:{i['num_threads']}" for i in threadpool_info()) or "unknown"
    except Exception:  # pragma: no cover - optional
        return "unknown"


def synthetic_responses(n_models: int, n_conditions: int, n_items: int, k: int = 10, seed: int = 0):
    """(responses, items) long tables of the store's shape, with ~3 % unparsed
    samples and letter log-probs."""
    rng = np.random.default_rng(seed)
    items = pd.DataFrame({"item_id": [f"q{i:04d}" for i in range(n_items)],
                          "answer_idx": rng.choice(list("ABCD"), n_items)})
    G = n_models * n_conditions * n_items
    q = rng.dirichlet(np.full(4, 0.6), G)
    ans = (rng.random((G, k))[:, :, None] > np.cumsum(q, 1)[:, None, :3]).sum(2)
    letters = np.array(list("ABCD"), dtype=object)
    pa = letters[ans]
    pa[rng.random((G, k)) < 0.03] = None
    key = pd.MultiIndex.from_product([[f"m{i}" for i in range(n_models)],
                                      ["base"] + [f"c{j}" for j in range(1, n_conditions)],
                                      items["item_id"]], names=["model", "condition", "item_id"]).to_frame(index=False)
    df = key.loc[key.index.repeat(k)].reset_index(drop=True)
    df["prompt_format"] = "mcq"
    df["sample"] = np.tile(np.arange(k), G)
    df["parsed_answer"] = pa.ravel()
    lq = np.log(q)
    df["answer_logprob"] = np.take_along_axis(np.repeat(lq, k, 0), ans.reshape(-1, 1), 1).ravel()
    df["letter_logprobs"] = [dict(zip(string.ascii_uppercase, r)) for r in np.repeat(lq, k, 0).tolist()]
    return df, items


def main(argv: list[str] | None = None) -> None:
    """The command line of ``python -m medaudit.bench.bootstrap``: time the vectorised
    paired bootstrap (best of ``--repeat``) against the naive loop on synthetic data of the
    paper's size, check they agree, and print both timings and their ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--models", type=int, default=9)
    ap.add_argument("--conditions", type=int, default=9)
    ap.add_argument("--items", type=int, default=2364)
    ap.add_argument("--naive-boot", type=int, default=20, help="resamples the naive loop is timed on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="vectorised timings: best of this many")
    ap.add_argument("--question-table", action="store_true")
    a = ap.parse_args(argv)

    print(f"machine: {os.cpu_count()} CPU(s) visible; BLAS threads {_blas_threads()}")
    print(f"data: {a.models} models × {a.conditions} conditions × {a.items} items, "
          f"{a.boot} resamples (seed {a.seed})")
    qt = synthetic_questions(a.models, a.conditions, a.items, seed=a.seed)
    lay = stats.layout(qt)
    idx = stats.resample_indices(len(lay.items), a.boot, a.seed)
    args = (lay.conf, lay.correct, lay.acc, lay.valid)
    S = lay.valid.shape[0]

    best = np.inf
    for _ in range(a.repeat):
        t = time.perf_counter()
        vec = stats.bootstrap_metrics(stats.resample_counts(idx, len(lay.items)), *args)
        best = min(best, time.perf_counter() - t)
    t_e2e = np.inf
    for _ in range(a.repeat):
        t = time.perf_counter()
        table = stats.paired_bootstrap(qt, idx=idx)
        t_e2e = min(t_e2e, time.perf_counter() - t)

    nb = min(a.naive_boot, a.boot)
    t = time.perf_counter()
    nai = naive_bootstrap(idx[:nb], *args)
    t_naive_sub = time.perf_counter() - t
    t_naive = t_naive_sub * a.boot / nb
    t = time.perf_counter()
    lean = lean_naive_bootstrap(idx[:nb], *args)
    t_lean = (time.perf_counter() - t) * a.boot / nb
    diff = max(float(np.nanmax(np.abs(vec[m][:nb] - ref[m]))) for ref in (nai, lean) for m in stats.METRICS)

    print(f"series: {S} (model × condition), metrics: {', '.join(stats.METRICS)}")
    print(f"vectorised engine, {a.boot} resamples × {S} series: {best:.3f} s (best of {a.repeat})")
    print(f"vectorised end to end (paired_bootstrap from the question table: layout, "
          f"{len(table) // len(stats.METRICS)} paired comparisons, CIs, p-values, McNemar): "
          f"{t_e2e:.3f} s (best of {a.repeat})")
    print(f"naive loop: {t_naive_sub:.2f} s for {nb} resamples, extrapolated linearly to {a.boot}: "
          f"{t_naive:.1f} s")
    print(f"lean naive loop (numpy Brier/ECE, rank-sum AUROC, no scikit-learn), same {nb} resamples "
          f"extrapolated to {a.boot}: {t_lean:.1f} s")
    print(f"speed-up (naive / vectorised engine): {t_naive / best:.0f}×; "
          f"(naive / vectorised end to end): {t_naive / t_e2e:.0f}×; "
          f"(lean naive / vectorised engine): {t_lean / best:.0f}×")
    print(f"agreement on the {nb} shared resamples: max |difference| = {diff:.2e}")

    if a.question_table:
        resp, items = synthetic_responses(a.models, a.conditions, a.items, seed=a.seed)
        t = time.perf_counter()
        q = uncertainty.questions(resp, items, seed=a.seed)
        print(f"questions: {len(resp):,} responses → {len(q):,} questions in "
              f"{time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
