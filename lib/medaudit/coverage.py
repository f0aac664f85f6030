"""Coverage and size of every interval and test the notebooks print, by
simulation at the sizes our tables have.

    python -m medaudit.coverage                 # the full table, written into docs/statistics.md
    python -m medaudit.coverage --reps 200 --n 8 20 --no-write

The data: n questions (3, 8, 20, 50, 200), each answered K times (1 or 5)
under two conditions a and b. Question i has a random effect u_i ~ N(0, 1)
on the logit scale shared by both conditions and a condition-specific
v_ai, v_bi ~ N(0, 0.5²) (so questions differ in difficulty and a cue moves
some questions more than others); the K answers are Bernoulli(expit(μ + u_i
+ v_ai)) and Bernoulli(expit(μ + β + u_i + v_bi)). The target of a
proportion is the population accuracy E[expit(μ + Z)], of a paired
difference E[expit(μ + β + Z)] − E[expit(μ + Z)], Z ~ N(0, 1.25), by
Gauss–Hermite quadrature. The settings (:data:`SETTINGS`) span base accuracy
0.5 to 0.9 and a true change of 0 or about −9 points.

A cell is the worst over the settings: the lowest coverage of a 95 %
interval, the highest rejection rate of a 5 % test under no effect (β = 0),
and for the TOST the highest one-sided miss of the 95 % interval (which
bounds the TOST's size at Δ = ±δ: it declares equivalence only when the
interval misses Δ on one side). Below :data:`medaudit.intervals.MIN_N` the
cell reads "cannot tell" with the simulated number beside it; the notebooks
read such a cell "too few to tell". The methods are the library's own
functions (:mod:`medaudit.stats`, :mod:`medaudit.intervals`), called per
simulated data set.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy.special import expit

from . import intervals, stats

NS = (3, 8, 20, 50, 200)
KS = (1, 5)
SIGMA_U, SIGMA_V = 1.0, 0.5
SETTINGS = ((0.0, 0.0), (1.1, 0.0), (2.2, 0.0), (1.1, -0.5))   # (μ, β): accuracy 0.5, 0.72, 0.85, 0.72 → −9 pts
TARGET_COVERAGE, TARGET_SIZE = 0.93, 0.06
N_BOOT = 500
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"
DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"


def truth(mu: float, beta: float = 0.0) -> tuple[float, float]:
    """(E expit(μ + Z), E expit(μ + β + Z) − E expit(μ + Z)), Z ~ N(0, σ_u² + σ_v²)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    s = np.sqrt(SIGMA_U ** 2 + SIGMA_V ** 2)
    w = w / w.sum()
    pa, pb = float((w * expit(mu + s * x)).sum()), float((w * expit(mu + beta + s * x)).sum())
    return pa, pb - pa


def simulate(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """(y_a, y_b, clusters): n·k rows, the k answers of a question adjacent."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    pa = expit(mu + u + rng.normal(0, SIGMA_V, (n, 1)))
    pb = expit(mu + beta + u + rng.normal(0, SIGMA_V, (n, 1)))
    ya = (rng.random((n, k)) < pa).astype(float).ravel()
    yb = (rng.random((n, k)) < pb).astype(float).ravel()
    return ya, yb, np.repeat(np.arange(n), k)


def simulate_gap(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """A change in a paired gap (08's Δgap, 07's and 03's change of a cue's
    effect under an arm): four answers per question and sample, the plain
    prompt under a and b (b shifted by β) and the arm under a and b (no
    shift); y_a = the plain gap a − b, y_b = the arm's, each in [−1, 1], so
    mean(y_b − y_a) estimates the same Δ as :func:`simulate`."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    y = [(rng.random((n, k)) < expit(mu + s + u + rng.normal(0, SIGMA_V, (n, 1)))).astype(float).ravel()
         for s in (0.0, beta, 0.0, 0.0)]
    return y[0] - y[1], y[2] - y[3], np.repeat(np.arange(n), k)


def simulate_cultures(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """07's design: per question one answer under the reference and one
    under each of three cultures' variants (each shifted by β). Returns the
    Δ Avg rows (y_a: the reference repeated, y_b: the three variants,
    clusters: the question), as :func:`medaudit.cultural.delta_avg_errors`
    builds them; ``k`` is not used (one answer per question and condition)."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    y = (rng.random((n, 4)) < expit(mu + np.r_[0.0, beta, beta, beta] + u
                                     + rng.normal(0, SIGMA_V, (n, 4)))).astype(float)
    return np.tile(y[:, 0], 3), y[:, 1:].T.ravel(), np.tile(np.arange(n), 3)


def _boot_means(x: np.ndarray, g: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Resampled means of ``x`` over questions (the project's percentile bootstrap: items resampled, K rows with
    their question)."""
    tot, size = np.bincount(g, weights=x), np.bincount(g)
    idx = stats.resample_indices(tot.size, n_boot, int(rng.integers(2 ** 31)))
    return tot[idx].sum(1) / size[idx].sum(1)


@dataclass(frozen=True)
class Method:
    name: str
    kind: str            # "interval" (a proportion), "paired" (an interval of b − a), "test"
    where: str           # where a notebook prints it
    status: str          # "now used" or "replaced"
    run: Callable
    k1_only: bool = False
    gap: bool = False    # simulated as a change in a paired gap (differences in [−2, 2])
    cultures: bool = False   # simulated as 07's reference + three cultures (Δ Avg rows, Cochran's Q)


def _prop_boot(ya, yb, g, rng, level):
    return stats.percentile_ci(_boot_means(ya, g, rng, N_BOOT), level)


def _prop_cp(ya, yb, g, rng, level):
    r = intervals.proportion_interval(ya, g, level)
    return r["lo"], r["hi"]


def _prop_wilson(ya, yb, g, rng, level):
    from statsmodels.stats.proportion import proportion_confint

    return proportion_confint(int(ya.sum()), ya.size, alpha=1 - level, method="wilson")


def _diff_boot(ya, yb, g, rng, level):
    return stats.percentile_ci(_boot_means(yb - ya, g, rng, N_BOOT), level)


def _diff_t(ya, yb, g, rng, level):
    e = stats.paired_delta(ya, yb, g, level)
    return e["ci_cluster_lo"], e["ci_cluster_hi"]


def _diff_newcombe(ya, yb, g, rng, level):
    a, b = ya.astype(bool), yb.astype(bool)
    return intervals.newcombe_paired(int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()),
                                     int((~a & ~b).sum()), level)


def _diff_new(ya, yb, g, rng, level):
    r = intervals.paired_interval(ya, yb, g, level)
    return r["lo"], r["hi"]


def _gap_new(ya, yb, g, rng, level):
    r = intervals.paired_interval(ya, yb, g, level, bound=2.0)
    return r["lo"], r["hi"]


def _p_relabel(ya, yb, g, rng):
    n = int(g.max()) + 1
    return intervals.relabel_p(np.column_stack([ya[:n], yb.reshape(3, n).T]), n_perm=2000,
                               seed=int(rng.integers(2 ** 31)))


def _p_cochran(ya, yb, g, rng):
    from .cultural import cochran_q

    n = int(g.max()) + 1
    return cochran_q(np.column_stack([ya[:n], yb.reshape(3, n).T]))["p"]


def _p_mcnemar_exact(ya, yb, g, rng):
    return stats.mcnemar_test(ya, yb, exact_below=10 ** 9)["pvalue"]


def _p_mcnemar_auto(ya, yb, g, rng):
    return stats.mcnemar_test(ya, yb)["pvalue"]


def _p_boot(ya, yb, g, rng):
    return stats.bootstrap_pvalue(_boot_means(yb - ya, g, rng, N_BOOT))


def _p_t(ya, yb, g, rng):
    return stats.cluster_p(stats.paired_delta(ya, yb, g))


def _p_signflip(ya, yb, g, rng):
    return intervals.signflip_p(ya, yb, g, n_perm=2000, seed=int(rng.integers(2 ** 31)))


METHODS = (
    Method("proportion: percentile bootstrap", "interval", "07 Fig. 3 (accuracy per condition)", "replaced",
           _prop_boot),
    Method("proportion: Wilson", "interval", "(for comparison)", "not used", _prop_wilson, k1_only=True),
    Method("proportion: Clopper-Pearson / Korn-Graubard", "interval",
           "07 Fig. 3 (accuracy per condition)", "now used", _prop_cp),
    Method("Δ: percentile bootstrap", "paired", "04 accuracy Δ (04_accuracy_mde), 07 Fig. 5", "replaced", _diff_boot),
    Method("Δ: clustered t (C − 1 df)", "paired", "07 Δ Avg, arm flips; 08 Δgap", "replaced", _diff_t),
    Method("Δ: Newcombe paired score", "paired", "(for comparison)", "not used", _diff_newcombe, k1_only=True),
    Method("Δ: Agresti-Min adjusted ∪ clustered t", "paired", "every paired Δ interval of 04, 07, 08", "now used",
           _diff_new),
    Method("Δgap: Agresti-Min adjusted ∪ clustered t (bound 2)", "paired", "08 Δgap (arm vs plain)", "now used",
           _gap_new, gap=True),
    Method("Δgap test: sign-flip", "test", "08 Δgap (arm vs plain)", "now used", _p_signflip, gap=True),
    Method("Δ Avg: Agresti-Min adjusted ∪ clustered t", "paired", "07 Δ Avg (3 cultures per question)", "now used",
           _diff_new, k1_only=True, cultures=True),
    Method("Δ Avg: clustered t (C − 1 df)", "paired", "07 Δ Avg (before)", "replaced", _diff_t, k1_only=True,
           cultures=True),
    Method("Δ Avg test: sign-flip of question sums", "test", "(for comparison: not exact here)", "not used",
           _p_signflip, k1_only=True, cultures=True),
    Method("Δ Avg test: relabelling (exact)", "test", "07 Δ Avg (3 cultures per question)", "now used", _p_relabel,
           k1_only=True, cultures=True),
    Method("test: Cochran's Q (χ², k − 1 df)", "test", "07 Tables I–II marks, 07_cochran_q", "now used", _p_cochran,
           k1_only=True, cultures=True),
    Method("test: McNemar exact", "test", "08 pairs, 04 accuracy (< 25 discordant)", "now used", _p_mcnemar_exact,
           k1_only=True),
    Method("test: McNemar auto (χ² cc from 25)", "test", "04 accuracy", "now used", _p_mcnemar_auto, k1_only=True),
    Method("test: bootstrap p", "test", "04 confidence/Brier stars, 07 Fig. 5", "replaced", _p_boot),
    Method("test: clustered t p", "test", "07 Δ Avg, arm flips; 08 Δgap", "replaced", _p_t),
    Method("test: sign-flip (exact randomisation)", "test",
           "04 confidence/Brier, 07 Fig. 5, arm flips", "now used", _p_signflip),
    Method("TOST: one-sided miss of the 95 % interval", "tost", "every 04/07/08 verdict", "now used", _diff_new),
)


def run_cell(method: Method, n: int, k: int, reps: int, seed: int = 0) -> float:
    """The worst coverage (interval, paired, as a share), size (test) or
    one-sided miss (tost) over :data:`SETTINGS` at n questions × k answers."""
    if method.k1_only and k > 1:
        return float("nan")
    worst = []
    for s, (mu, beta) in enumerate(SETTINGS):
        if method.kind == "test" and beta != 0:
            continue
        rng = np.random.default_rng([seed, n, k, s])
        p_true, d_true = truth(mu, beta)
        hits = []
        for _ in range(reps):
            sim = simulate_gap if method.gap else simulate_cultures if method.cultures else simulate
            ya, yb, g = sim(rng, n, k, mu, beta)
            if method.kind == "test":
                hits.append(method.run(ya, yb, g, rng) <= 0.05)
            elif method.kind == "tost":
                lo, hi = method.run(ya, yb, g, rng, 0.95)
                hits.append((hi < d_true, lo > d_true))
            else:
                target = p_true if method.kind == "interval" else d_true
                lo, hi = method.run(ya, yb, g, rng, 0.95)
                hits.append(bool(lo - 1e-12 <= target <= hi + 1e-12))
        rate = float(np.mean(hits, axis=0).max())     # tost: the worse of the two sides
        worst.append(rate)
    return min(worst) if method.kind in ("interval", "paired") else max(worst)


def table(reps: int = 1000, ns: Sequence[int] = NS, ks: Sequence[int] = KS, seed: int = 0,
          methods: Sequence[Method] = METHODS) -> pd.DataFrame:
    """One row per method and K, one column per n: the worst rate over the settings."""
    rows = []
    for m in methods:
        for k in ks:
            if m.k1_only and k > 1:
                continue
            rows.append({"method": m.name, "K": k, "status": m.status, "where printed": m.where,
                         "measure": {"interval": "coverage", "paired": "coverage", "test": "size",
                                     "tost": "one-sided miss"}[m.kind],
                         **{n: run_cell(m, n, k, reps, seed) for n in ns}})
    return pd.DataFrame(rows)


def meets(measure: str, rate: float) -> bool:
    """Coverage ≥ 93 %, size ≤ 6 %, one-sided miss of the 95 % interval ≤ 6 %."""
    return rate >= TARGET_COVERAGE if measure == "coverage" else rate <= TARGET_SIZE


def cell(n: int, measure: str, rate: float) -> str:
    """A table cell: the rate in %, marked ✗ where it misses the target; below
    :data:`medaudit.intervals.MIN_N` "cannot tell" with the number beside it."""
    if not np.isfinite(rate):
        return "n/a"
    txt = f"{100 * rate:.1f}"
    if n < intervals.MIN_N:
        return f"cannot tell ({txt})"
    return txt if meets(measure, rate) else f"{txt} ✗"


def markdown(t: pd.DataFrame, reps: int, seed: int) -> str:
    ns = [c for c in t.columns if isinstance(c, (int, np.integer))]
    head = ["method", "K", "measure", "status", "where printed", *[f"n={n}" for n in ns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in t.to_dict("records"):
        lines.append("| " + " | ".join([r["method"], str(r["K"]), r["measure"], r["status"], r["where printed"],
                                        *[cell(n, r["measure"], r[n]) for n in ns]]) + " |")
    settings = ", ".join(f"(μ {mu:g}, β {b:g}: accuracy {truth(mu)[0]:.2f}, Δ {100 * truth(mu, b)[1]:+.1f} pts)"
                         for mu, b in SETTINGS)
    return (f"Written by `python -m medaudit.coverage --reps {reps} --seed {seed}` "
            f"({reps} data sets per setting and cell; Monte Carlo SE of a 95 % coverage ≈ "
            f"{100 * np.sqrt(0.95 * 0.05 / reps):.1f} points). Worst over the settings {settings}; "
            f"question effects u ~ N(0, {SIGMA_U:g}²), cue-by-question v ~ N(0, {SIGMA_V:g}²) on the logit scale. "
            f"Coverage of 95 % intervals (target ≥ {100 * TARGET_COVERAGE:.0f} %), size of 5 % tests under no "
            f"effect (target ≤ {100 * TARGET_SIZE:.0f} %), one-sided miss of the 95 % interval (bounds the TOST's "
            f"size at Δ = ±δ; target ≤ {100 * TARGET_SIZE:.0f} %). ✗: misses the target; n < {intervals.MIN_N}: "
            f"cannot tell.\n\n" + "\n".join(lines) + "\n")


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the block between the coverage markers of ``doc``."""
    src = doc.read_text(encoding="utf-8")
    if START not in src or END not in src:
        raise ValueError(f"{doc}: no {START} … {END} block to write the coverage table into")
    new = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: f"{START}\n{text}{END}", src, flags=re.S)
    doc.write_text(new, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m medaudit.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="data sets per setting and cell (default 1000)")
    ap.add_argument("--n", type=int, nargs="+", default=list(NS), help="questions per data set")
    ap.add_argument("--k", type=int, nargs="+", default=list(KS), help="answers per question and condition")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/statistics.md alone")
    args = ap.parse_args(argv)
    t = table(args.reps, args.n, args.k, args.seed)
    text = markdown(t, args.reps, args.seed)
    print(text)
    if not args.no_write:
        write_doc(text)
        print(f"written into {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
