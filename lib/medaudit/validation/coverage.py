"""Coverage and size of every interval and test the notebooks print, by
simulation at the sizes our tables have.

    python -m medaudit.validation.coverage                 # the full table, written into docs/statistics.md
    python -m medaudit.validation.coverage --reps 200 --n 8 20 --no-write

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
interval misses Δ on one side). Below :data:`medaudit.stats.intervals.MIN_N` the
cell reads "cannot tell" with the simulated number beside it; the notebooks
read such a cell "too few to tell". The methods are the library's own
functions (:mod:`medaudit.stats.paired`, :mod:`medaudit.stats.intervals`), called per
simulated data set.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import warnings
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sstats

from medaudit.stats import intervals, paired as stats, regression
from medaudit.validation.designs import (DESIGNS, FACTORIAL, SIGMA_U, SIGMA_V, Design, pair_truth, simulate,
                                         simulate_cultures, simulate_cultures_shared, simulate_factorial,
                                         simulate_gap, simulate_options, truth)

NS = (3, 8, 20, 50, 200)
KS = (1, 5)
SETTINGS = ((0.0, 0.0), (1.1, 0.0), (2.2, 0.0), (1.1, -0.5))   # (μ, β): accuracy 0.5, 0.72, 0.85, 0.72 → −9 pts
TARGET_COVERAGE, TARGET_SIZE = 0.93, 0.06
N_BOOT = 500
PARSE_SETTINGS = ((3.0, 0.0), (4.5, 0.0))   # parse rates: about 0.92 and 0.98
NONADD_REPS = 150   # a conditional-logit fit takes 0.1–0.3 s: at most this many data sets per setting
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"
DOC = Path(__file__).resolve().parents[3] / "docs" / "statistics.md"


def _shared_null(rng, n, k, mu=1.1, beta=0.0):
    return simulate_cultures_shared(rng, n, k, mu, beta)


def _boot_means(x: np.ndarray, g: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Resampled means of ``x`` over questions (the project's percentile bootstrap: items resampled, K rows with
    their question)."""
    tot, size = np.bincount(g, weights=x), np.bincount(g)
    idx = stats.resample_indices(tot.size, n_boot, int(rng.integers(2 ** 31)))
    return tot[idx].sum(1) / size[idx].sum(1)


@dataclass(frozen=True)
class Method:
    """One interval or test the notebooks print, as the simulation runs it: its name, kind
    (interval, paired interval, test), where it is printed, whether it is used now, the function
    that computes it, and the data, target and settings it is simulated on."""
    name: str
    kind: str            # "interval" (a proportion), "paired" (an interval of b − a), "test"
    where: str           # where a notebook prints it
    status: str          # "now used" or "replaced"
    run: Callable
    k1_only: bool = False
    gap: bool = False    # simulated as a change in a paired gap (differences in [−2, 2])
    cultures: bool = False   # simulated as 07's reference + three cultures (Δ Avg rows, Cochran's Q)
    sim: Callable | None = None       # its own data (else simulate / simulate_gap / simulate_cultures)
    target: Callable | None = None    # (μ, β) → the true value an interval must hold (else truth())
    settings: tuple | None = None     # its own (μ, β) settings (else SETTINGS)
    max_reps: int | None = None       # a slow fit: at most this many data sets per setting
    designs: bool = False             # also simulated on DESIGNS (as simulate's, the gap's, 07's or the options' rows)
    design_target: Callable | None = None   # Design → the true value there (else accuracy or −drop); None: skip it
    exact: bool = False               # K = 1 by enumeration of every (b, c) (the 0/1-row interval)


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
    return intervals.newcombe_paired(ya, yb, 1 - level)[1:]


def _diff_new(ya, yb, g, rng, level):
    r = intervals.paired_interval(ya, yb, g, level)
    return r["lo"], r["hi"]


def _diff_am(ya, yb, g, rng, level):
    r = intervals.adjusted_interval(ya, yb, g, level)
    return r["lo"], r["hi"]


def _diff_means(ya, yb, g, rng, level):
    """04's accuracy Δ: each question's mean over its rows, one value per question."""
    size = np.bincount(g)
    r = intervals.paired_interval(np.bincount(g, weights=ya) / size, np.bincount(g, weights=yb) / size, None, level)
    return r["lo"], r["hi"]


def _p_score(ya, yb, g, rng):
    return intervals.paired_interval(ya, yb, g)["p_score"]


def _gap_new(ya, yb, g, rng, level):
    r = intervals.paired_interval(ya, yb, g, level, bound=2.0)
    return r["lo"], r["hi"]


def _flip(ya, yb, g, rng, level):
    r = intervals.proportion_interval((ya != yb).astype(float), g, level)
    return r["lo"], r["hi"]


def _hflip(ya, yb, g, rng, level):
    right = ya == 1
    if not right.any():                      # no question right under a: the table prints no rate
        return None
    r = intervals.proportion_interval((yb[right] == 0).astype(float), g[right], level)
    return r["lo"], r["hi"]


def _discordant(ya, yb):
    a, b = ya.astype(bool), yb.astype(bool)
    return int((a & ~b).sum()), int((~a & b).sum())


def _or_wald(ya, yb, g, rng, level):
    """07's cue regression with two conditions and one answer per question:
    the conditional logit's estimate is log(c/b), its SE √(1/b + 1/c)
    (tests/test_stats checks :func:`medaudit.stats.regression.cue_regression` against
    it); withheld (separation) where b or c is 0, as the table does."""
    b, c = _discordant(ya, yb)
    if not (b and c):
        return None
    z = sstats.norm.ppf(0.5 + level / 2)   # regression.wald_columns' interval (called directly it runs a gc per call)
    return float(np.log(c / b) - z * np.sqrt(1 / b + 1 / c)), float(np.log(c / b) + z * np.sqrt(1 / b + 1 / c))


def _clogit(ya, yb, g):
    """07's cue regression on :func:`simulate_cultures`' rows: correctness ~
    cue (the reference, and the three cultures' variants of the cue) with the
    question as the matched set, by :func:`medaudit.stats.regression.cue_regression`
    itself (the conditional logit, its SE clustered by question with a t on
    G − 1 df, as the table prints it); its row, or None where the table
    withholds it (separation: every question that changed changed one way,
    or none changed; fewer than two informative questions)."""
    n = int(g.max()) + 1
    df = pd.DataFrame({"y": np.r_[ya[:n], yb], "cue": ["reference"] * n + ["cue"] * yb.size,
                       "item_id": np.r_[np.arange(n), g]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = regression.cue_regression(df, "y", reference="reference").iloc[0]
    return r if np.isfinite(r["se"]) else None


@functools.lru_cache(maxsize=None)
def clogit_truth(mu: float, beta: float, shared: bool = False) -> float:
    """The value 07's conditional logit estimates under :func:`simulate_cultures`
    (``shared``: :func:`simulate_cultures_shared`): 0 where β = 0 (the
    reference and the variants have the same distribution), else its fit on
    20,000 simulated questions (a fixed seed; SE about 0.02)."""
    if beta == 0:
        return 0.0
    sim = simulate_cultures_shared if shared else simulate_cultures
    ya, yb, g = sim(np.random.default_rng(20261127), 20_000, 1, mu, beta)
    return float(_clogit(ya, yb, g)["coef"])


def _clogit_truth_shared(mu: float, beta: float) -> float:
    return clogit_truth(mu, beta, True)


def _or_clogit(ya, yb, g, rng, level):
    r = _clogit(ya, yb, g)
    return None if r is None else (float(np.log(r["or_lo"])), float(np.log(r["or_hi"])))


def _p_stuart_maxwell(ya, yb, g, rng):
    with warnings.catch_warnings():            # statsmodels warns of a singular covariance; the p is then NaN
        warnings.simplefilter("ignore")
        return stats.stuart_maxwell(ya, yb)["p"]


def _p_nonadditivity(y, _, g, rng):
    n = y.shape[0]
    qt = pd.DataFrame({"item_id": np.tile(g, 4), "condition": np.repeat(FACTORIAL, n),
                       "single_correct": y.T.ravel()})
    from medaudit.studies import calibration

    return calibration.nonadditivity_test(qt)["joint"]["p"]


def _p_relabel(ya, yb, g, rng):
    n = int(g.max()) + 1
    return intervals.relabel_p(np.column_stack([ya[:n], yb.reshape(3, n).T]), n_perm=2000,
                               seed=int(rng.integers(2 ** 31)))


def _p_cochran(ya, yb, g, rng):
    from medaudit.stats.paired import cochran_q

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


def _log_or_design(d: Design) -> float | None:
    """The log odds ratio a design holds: 0 with no change; none one way
    (no answer turns right, so every data set separates and the table
    withholds the estimate: nothing to cover)."""
    return 0.0 if d.drop == 0 else None


METHODS = (
    Method("proportion: percentile bootstrap", "interval", "07 Fig. 3 (accuracy per condition)", "replaced",
           _prop_boot),
    Method("proportion: Wilson", "interval", "(for comparison)", "not used", _prop_wilson, k1_only=True),
    Method("proportion: Clopper-Pearson / Korn-Graubard", "interval",
           "07 Fig. 3, 04 accuracy, 06 BL/%dlg/%Δ", "now used", _prop_cp, designs=True),
    Method("Δ: percentile bootstrap", "paired", "04 accuracy Δ (04_accuracy_mde), 07 Fig. 5", "replaced", _diff_boot),
    Method("Δ: clustered t (C − 1 df)", "paired", "07 Δ Avg, arm flips; 08 Δgap; 03 arm table", "replaced", _diff_t),
    Method("Δ: Newcombe paired, Clopper-Pearson margins", "paired", "06 ΔBL (one verdict per dialog)", "now used",
           _diff_newcombe, k1_only=True),
    Method("Δ: Agresti-Min adjusted ∪ clustered t", "paired",
           "0/1 rows before; now question means and other scores (04 confidence/Brier, 08 Δgap)", "replaced",
           _diff_am, designs=True),
    Method("Δ (0/1 rows): Tango score, continuity ½, question design effect", "paired",
           "every paired Δ of 0/1 answers: 03 arm table, 04, 07, 08 pairs", "now used", _diff_new, designs=True),
    Method("Δ (0/1 rows, one per question): the same, exact enumeration", "paired",
           "every paired Δ of 0/1 answers at K = 1", "now used", _diff_new, k1_only=True, designs=True, exact=True),
    Method("Δ of question means: Agresti-Min adjusted ∪ clustered t", "paired",
           "04 accuracy Δ (a question's mean over its K answers)", "now used", _diff_means, designs=True),
    Method("Δgap: Agresti-Min adjusted ∪ clustered t (bound 2)", "paired", "08 Δgap, 03 Δ change (arm vs plain)",
           "now used", _gap_new, gap=True, designs=True),
    Method("Δgap test: sign-flip", "test", "08 Δgap, 03 Δ change (arm vs plain)", "now used", _p_signflip, gap=True,
           designs=True),
    Method("Δ Avg: Tango score with the question design effect", "paired", "07 Δ Avg (3 cultures per question)",
           "now used", _diff_new, k1_only=True, cultures=True, designs=True),
    Method("Δ Avg: Agresti-Min adjusted ∪ clustered t", "paired", "07 Δ Avg (before)", "replaced",
           _diff_am, k1_only=True, cultures=True),
    Method("Δ Avg: clustered t (C − 1 df)", "paired", "07 Δ Avg (before)", "replaced", _diff_t, k1_only=True,
           cultures=True),
    Method("Δ Avg test: sign-flip of question sums", "test", "(for comparison: not exact here)", "not used",
           _p_signflip, k1_only=True, cultures=True),
    Method("Δ Avg test: relabelling (exact)", "test", "07 Δ Avg (before)", "replaced", _p_relabel,
           k1_only=True, cultures=True),
    Method("Δ Avg test: the interval's score test", "test", "07 Δ Avg (3 cultures per question)", "now used",
           _p_score, k1_only=True, cultures=True, designs=True),
    Method("test: Cochran's Q (χ², k − 1 df)", "test", "07 Tables I–II marks, 07_cochran_q", "now used", _p_cochran,
           k1_only=True, cultures=True, designs=True),
    Method("test: McNemar exact", "test", "08 pairs, 04 accuracy (< 25 discordant)", "now used", _p_mcnemar_exact,
           k1_only=True, designs=True),
    Method("test: McNemar auto (χ² cc from 25)", "test", "04 accuracy", "now used", _p_mcnemar_auto, k1_only=True,
           designs=True),
    Method("test: bootstrap p", "test", "04 confidence/Brier stars, 07 Fig. 5", "replaced", _p_boot),
    Method("test: clustered t p", "test", "07 Δ Avg, arm flips; 08 Δgap; 03 arm table", "replaced", _p_t),
    Method("test: sign-flip (exact randomisation)", "test",
           "04 confidence/Brier, 07 Fig. 5, arm flips, 03 Δ flip", "now used", _p_signflip, designs=True),
    Method("flip rate: Clopper-Pearson / Korn-Graubard", "interval", "07 flips (07_flips_stuart_maxwell), arm flips",
           "now used", _flip, target=lambda mu, b: pair_truth(mu, b)["flip"], designs=True,
           design_target=lambda d: sum(d.pair_rates())),
    Method("harmful-flip rate: Clopper-Pearson / Korn-Graubard", "interval",
           "07 flips (07_flips_stuart_maxwell), arm flips", "now used", _hflip,
           target=lambda mu, b: pair_truth(mu, b)["harmful"], designs=True,
           design_target=lambda d: d.pair_rates()[0] / d.accuracy()),
    Method("parse rate: Clopper-Pearson / Korn-Graubard (near 100 %)", "interval",
           "03, 07, 08 parse rates; 04 accuracy_parsing", "now used", _prop_cp, settings=PARSE_SETTINGS, designs=True),
    Method("log odds ratio: conditional logit Wald (two conditions)", "paired",
           "07 cue regression (withheld at separation)", "now used", _or_wald, k1_only=True,
           target=lambda mu, b: pair_truth(mu, b)["log_or"], designs=True, design_target=_log_or_design),
    Method("log odds ratio: conditional logit, question-clustered SE, 3 cultures per question", "paired",
           "07 cue regression (withheld at separation)", "now used", _or_clogit, k1_only=True, cultures=True,
           target=clogit_truth, max_reps=NONADD_REPS, designs=True, design_target=_log_or_design),
    Method("log odds ratio: the same, the cue effect shared by the 3 cultures", "paired",
           "07 cue regression (withheld at separation)", "now used", _or_clogit, k1_only=True,
           sim=simulate_cultures_shared, target=_clogit_truth_shared, max_reps=NONADD_REPS),
    Method("test: Stuart-Maxwell (χ²)", "test", "07 flips (answers among options)", "now used", _p_stuart_maxwell,
           k1_only=True, sim=simulate_options, designs=True),
    Method("test: non-additivity (conditional logit Wald χ²)", "test", "04 non-additivity", "now used",
           _p_nonadditivity, k1_only=True, sim=simulate_factorial, max_reps=NONADD_REPS),
    Method("TOST: one-sided miss of the 95 % interval", "tost", "every 04/07/08 verdict", "now used", _diff_new,
           designs=True),
    Method("TOST (K = 1, exact): one-sided miss of the 95 % interval", "tost", "every 04/07/08 verdict at K = 1",
           "now used", _diff_new, k1_only=True, designs=True, exact=True),
)


def _exact_pairs(n: int, pb: float, pc: float, tail: float = 1e-11):
    """Every (b, c) of n one-row pairs with its probability (b ~ right under a
    only, c ~ right under b only; trinomial), tails below ``tail`` left out."""
    psi = pb + pc
    m = np.arange(int(sstats.binom.ppf(tail, n, psi)), min(n, int(sstats.binom.isf(tail, n, psi)) + 1) + 1)
    b = np.concatenate([mm - np.arange(mm + 1) for mm in m]).astype(float)
    c = np.concatenate([np.arange(mm + 1) for mm in m]).astype(float)
    logp = sstats.binom.logpmf(b + c, n, psi)
    if pc == 0:
        keep = c == 0
        b, c, logp = b[keep], c[keep], logp[keep]
    else:
        logp = logp + sstats.binom.logpmf(c, b + c, pc / psi)
    return b, c, np.exp(logp)


def _exact_rate(method: "Method", n: int, pb: float, pc: float) -> float:
    """Coverage (paired) or the worse one-sided miss (tost) of the 0/1-row interval
    with one row per question, by enumeration (:func:`medaudit.stats.intervals.tango_interval`
    is what :func:`medaudit.stats.intervals.paired_interval` computes there)."""
    b, c, pr = _exact_pairs(n, pb, pc)
    lo, hi = intervals.tango_interval(b, c, n)
    t = pc - pb
    if method.kind == "tost":
        return float(max(pr[lo > t + 1e-12].sum(), pr[hi < t - 1e-12].sum()))
    return float(pr[(lo - 1e-12 <= t) & (t <= hi + 1e-12)].sum())


def _pair_rates(mu: float, beta: float) -> tuple[float, float]:
    """(P(right under a only), P(right under b only)) of one pair under :func:`simulate`."""
    r = pair_truth(mu, beta)
    only_a = r["harmful"] * truth(mu)[0]
    return only_a, r["flip"] - only_a


def cell_rates(method: "Method", n: int, k: int, reps: int, seed: int = 0,
               designs: bool = True) -> list[tuple[str, float]]:
    """(design, rate) for every setting and design a cell is the worst of:
    coverage (interval, paired, as a share), size (test) or the worse one-sided
    miss (tost) at n questions × k answers. The method's (μ, β) settings
    (:data:`SETTINGS` or its own), and where the method reads
    :func:`simulate`'s rows, each of :data:`DESIGNS` (tests: those with no
    change); a Δ Avg method also the three cultures sharing the cue effect
    with no change. ``exact`` methods enumerate every (b, c) (K = 1). An
    interval a table withholds (``run`` returns None: separation, no row to
    rate) is left out of its coverage; a test with no p (NaN) does not
    reject. ``designs`` False: the settings alone (a quick check)."""
    if method.k1_only and k > 1:
        return []
    reps = min(reps, method.max_reps or reps)
    runs = []                                       # (label, simulate(rng) -> rows, target)
    for s, (mu, beta) in enumerate(method.settings or SETTINGS):
        if method.kind == "test" and beta != 0:
            continue
        p_true, d_true = truth(mu, beta)
        target = (method.target(mu, beta) if method.target else p_true if method.kind == "interval" else d_true)
        sim = method.sim or (simulate_gap if method.gap else simulate_cultures if method.cultures else simulate)
        label = f"μ {mu:g}, β {beta:g}"
        if method.exact:
            runs.append((label, None, _pair_rates(mu, beta)))
        else:
            runs.append((label, (lambda rng, sim=sim, mu=mu, beta=beta: sim(rng, n, k, mu, beta)), target))
    if method.designs and designs:
        for d in DESIGNS:
            if method.kind == "test" and d.drop != 0:
                continue
            if method.exact:
                runs.append((d.name, None, d.pair_rates()))
                continue
            target = (method.design_target(d) if method.design_target else
                      d.accuracy() if method.kind == "interval" else -d.drop)
            if target is None:                  # no value to hold there (a log odds ratio of a one-way change)
                continue
            draw = (d.simulate_gap if method.gap else d.simulate_cultures if method.cultures
                    else d.simulate_options if method.sim is simulate_options else d.simulate)
            runs.append((d.name, (lambda rng, draw=draw: draw(rng, n, k)), target))
    if designs and method.cultures and method.sim is None and method.kind in ("test", "paired"):
        runs.append(("3 cultures sharing the cue effect, no change",
                     lambda rng: simulate_cultures_shared(rng, n, k, 1.1, 0.0), 0.0))
    out = []
    for i, (label, draw, target) in enumerate(runs):
        if method.exact:
            out.append((label, _exact_rate(method, n, *target)))
            continue
        rng = np.random.default_rng([seed, n, k, i])
        hits = []
        for _ in range(reps):
            ya, yb, g = draw(rng)
            if method.kind == "test":
                hits.append(bool(method.run(ya, yb, g, rng) <= 0.05))
            elif method.kind == "tost":
                lo, hi = method.run(ya, yb, g, rng, 0.95)
                hits.append((hi < target, lo > target))
            else:
                ci = method.run(ya, yb, g, rng, 0.95)
                if ci is not None:
                    hits.append(bool(ci[0] - 1e-12 <= target <= ci[1] + 1e-12))
        if hits:
            out.append((label, float(np.mean(hits, axis=0).max())))     # tost: the worse of the two sides
    return out


def worst(method: "Method", rates: list[tuple[str, float]]) -> tuple[str, float]:
    """The worst (design, rate) of :func:`cell_rates`: lowest coverage, highest size or miss."""
    if not rates:
        return "", float("nan")
    pick = min if method.kind in ("interval", "paired") else max
    return pick(rates, key=lambda x: x[1])


def run_cell(method: "Method", n: int, k: int, reps: int, seed: int = 0, designs: bool = True) -> float:
    """The worst rate of :func:`cell_rates` over the method's settings and designs."""
    return worst(method, cell_rates(method, n, k, reps, seed, designs))[1]


def pooled(method: "Method", first: list[tuple[str, float]], again: list[tuple[str, float]], reps: int,
           recheck: int) -> tuple[str, float]:
    """The worst (design, rate) after pooling a rerun on ``recheck`` × the data
    sets with the first run, design by design (each rate weighted by its data
    sets): a rerun alone deciding marked a method whose true coverage is 92 %
    as holding a quarter of the time."""
    r1 = min(reps, method.max_reps or reps)
    r2 = min(reps * recheck, (method.max_reps or reps) * recheck)
    again = dict(again)
    return worst(method, [(k, (v * r1 + again[k] * r2) / (r1 + r2)) for k, v in first if k in again])


def _row(i: int, k: int, reps: int, ns: Sequence[int], seed: int, recheck: int = 0) -> dict:
    """A table row: the worst rate per n and, under ``"<n> design"``, the design
    that gave it. ``recheck``: a cell at n ≥ MIN_N that misses its target is
    run again on ``recheck`` times the data sets with another seed (a cell is
    the worst of several settings, each with its Monte Carlo error, so a
    method that holds can miss by chance); both runs are pooled design by
    design (:func:`pooled`), the pooled rate, under ``"<n> recheck"``,
    decides the cell's mark, and first and pooled are printed. Exact cells
    are never rerun."""
    m = _JOB["methods"][i]
    measure = {"interval": "coverage", "paired": "coverage", "test": "size", "tost": "one-sided miss"}[m.kind]
    out = {"method": m.name, "K": k, "status": m.status, "where printed": m.where, "measure": measure,
           "exact": m.exact}
    for n in ns:
        first = cell_rates(m, n, k, reps, seed)
        out[f"{n} design"], out[n] = worst(m, first)
        if (recheck and not m.exact and n >= intervals.MIN_N and np.isfinite(out[n])
                and not meets(measure, out[n])):
            again = cell_rates(m, n, k, reps * recheck, seed + 1)
            out[f"{n} design"], out[f"{n} recheck"] = pooled(m, first, again, reps, recheck)
    return out


def table(reps: int = 1000, ns: Sequence[int] = NS, ks: Sequence[int] = KS, seed: int = 0,
          methods: Sequence[Method] = METHODS, jobs: int = 1, recheck: int = 0) -> pd.DataFrame:
    """One row per method and K, one column per n: the worst rate over the
    settings. ``jobs`` > 1: the rows in that many processes (each cell has
    its own seeded generator, so the table is the same)."""
    todo = [(i, k, reps, tuple(ns), seed, recheck) for i, m in enumerate(methods) for k in ks
            if not (m.k1_only and k > 1)]
    _JOB["methods"] = list(methods)            # a forked worker reads them here (a lambda does not pickle)
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return pd.DataFrame(pool.starmap(_row, todo, chunksize=1))
    return pd.DataFrame([_row(*t) for t in todo])


_JOB: dict = {}


def meets(measure: str, rate: float) -> bool:
    """Coverage ≥ 93 %, size ≤ 6 %, one-sided miss of the 95 % interval ≤ 6 %."""
    return rate >= TARGET_COVERAGE if measure == "coverage" else rate <= TARGET_SIZE


def cell(n: int, measure: str, rate: float, recheck: float | None = None) -> str:
    """A table cell: the rate in %, marked ✗ where it misses the target; below
    :data:`medaudit.stats.intervals.MIN_N` "cannot tell" with the number beside it.
    ``recheck`` (the first run pooled with a rerun on more data sets):
    "first → pooled", the pooled rate deciding the mark."""
    if not np.isfinite(rate):
        return "n/a"
    txt = f"{100 * rate:.1f}"
    if n < intervals.MIN_N:
        return f"cannot tell ({txt})"
    if recheck is not None and np.isfinite(recheck):
        txt, rate = f"{txt} → {100 * recheck:.1f} pooled", recheck
    return txt if meets(measure, rate) else f"{txt} ✗"


def worst_design(r: dict, ns: Sequence[int]) -> str:
    """The design of the row's worst cell at n ≥ MIN_N (farthest on the wrong side of its target)."""
    cells = [(n, r.get(f"{n} recheck") if np.isfinite(r.get(f"{n} recheck", np.nan)) else r[n]) for n in ns
             if n >= intervals.MIN_N and np.isfinite(r.get(n, np.nan))]
    if not cells:
        return ""
    cov = r["measure"] == "coverage"
    n, _ = min(cells, key=lambda x: x[1]) if cov else max(cells, key=lambda x: x[1])
    return f"{r.get(f'{n} design', '')} (n = {n})"


def markdown(t: pd.DataFrame, reps: int, seed: int, seconds: float | None = None, jobs: int = 1,
             fit_reps: int | None = None, recheck: int = 0) -> str:
    """The coverage table as it goes into ``docs/statistics.md``: a paragraph on how it
    was made (the command, data sets per cell, Monte Carlo SE, settings, designs, targets) and
    one row per method and K with each n's cell and the worst design."""
    ns = [c for c in t.columns if isinstance(c, (int, np.integer))]
    head = ["method", "K", "measure", "status", "where printed", *[f"n={n}" for n in ns], "worst design"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in t.to_dict("records"):
        k = f"{r['K']} exact" if r.get("exact") else str(r["K"])
        lines.append("| " + " | ".join([r["method"], k, r["measure"], r["status"], r["where printed"],
                                        *[cell(n, r["measure"], r[n], r.get(f"{n} recheck")) for n in ns],
                                        worst_design(r, ns)]) + " |")
    settings = ", ".join(f"(μ {mu:g}, β {b:g}: accuracy {truth(mu)[0]:.2f}, Δ {100 * truth(mu, b)[1]:+.1f} pts)"
                         for mu, b in SETTINGS)
    took = f"; it took {seconds / 60:.0f} min on {jobs} process{'es' if jobs > 1 else ''}" if seconds else ""
    shown = set(t["method"])                  # the fit-reps clause only where a row of this table fits a model
    slow = sorted({fit_reps or m.max_reps for m in METHODS
                   if m.max_reps and (fit_reps or m.max_reps) < reps and m.name in shown})
    capped = (f"; the rows that fit a conditional logit per data set at most {slow[0]}, SE ≈ "
              f"{100 * np.sqrt(0.95 * 0.05 / slow[0]):.1f}" if slow else "")
    return (f"Written by `python -m medaudit.validation.coverage --reps {reps} --seed {seed}"
            f"{f' --jobs {jobs}' if jobs > 1 else ''}{f' --fit-reps {fit_reps}' if fit_reps else ''}"
            f"{f' --recheck {recheck}' if recheck else ''}`{took} "
            f"({reps} data sets per setting and cell; Monte Carlo SE of a 95 % coverage ≈ "
            f"{100 * np.sqrt(0.95 * 0.05 / reps):.1f} points{capped}). Worst over the settings {settings}; "
            f"question effects u ~ N(0, {SIGMA_U:g}²), cue-by-question v ~ N(0, {SIGMA_V:g}²) on the logit scale. "
            f"Coverage of 95 % intervals (target ≥ {100 * TARGET_COVERAGE:.0f} %), size of 5 % tests under no "
            f"effect (target ≤ {100 * TARGET_SIZE:.0f} %), one-sided miss of the 95 % interval (bounds the TOST's "
            f"size at Δ = ±δ; target ≤ {100 * TARGET_SIZE:.0f} %). ✗: misses the target; n < {intervals.MIN_N}: "
            f"cannot tell."
            + f" Besides the settings, the designs bias makes: {'; '.join(d.name for d in DESIGNS)} (the "
              "accuracy near the ceiling from a Beta mixture; one way: b only turns right answers wrong), and "
              "for 07's Δ Avg the three cultures sharing the cue effect; 'worst design' names the design of the "
              "row's worst cell. K '1 exact': every (b, c) enumerated, no Monte Carlo error."
            + (f" A cell that missed was run again on {recheck}× the data sets with seed {seed + 1}, the two runs "
               f"pooled design by design: 'first → pooled', the pooled rate deciding the mark." if recheck else "")
            + "\n\n" + "\n".join(lines) + "\n")


def merge(old: str, new: str, note: str) -> str:
    """The coverage block ``old`` with the table rows of ``new`` (a
    :func:`markdown` of some methods: ``--only``) in place of the rows of
    the same method and K, new rows after the others, rows of methods no
    longer in :data:`METHODS` dropped, and ``note`` (which rows came from
    which command) added under the first header line."""
    def rows(text):
        return {tuple(c.strip() for c in ln.split("|")[1:3]): ln for ln in text.splitlines()
                if ln.startswith("| ") and not ln.startswith("| method |")}
    fresh, known = rows(new), {m.name for m in METHODS}
    lines, done = [], set()
    for ln in old.splitlines():
        if ln.startswith("| ") and not ln.startswith("| method |"):
            key = tuple(c.strip() for c in ln.split("|")[1:3])
            if key[0] not in known:
                continue
            ln, _ = fresh.get(key, ln), done.add(key)
        lines.append(ln)
    last = max(i for i, ln in enumerate(lines) if ln.startswith("|"))
    lines[last + 1:last + 1] = [ln for k, ln in fresh.items() if k not in done]
    lines.insert(1, "")
    lines.insert(2, note)
    return "\n".join(lines) + "\n"


def block(doc: Path = DOC) -> str:
    """The text between the coverage markers of ``doc``."""
    src = doc.read_text(encoding="utf-8")
    return src.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the block between the coverage markers of ``doc``."""
    src = doc.read_text(encoding="utf-8")
    if START not in src or END not in src:
        raise ValueError(f"{doc}: no {START} … {END} block to write the coverage table into")
    new = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: f"{START}\n{text}{END}", src, flags=re.S)
    doc.write_text(new, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of ``python -m medaudit.validation.coverage``: simulate the
    table (or ``--only`` some methods' rows) and print it; unless ``--no-write``, write it into
    ``docs/statistics.md``."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.validation.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="data sets per setting and cell (default 1000)")
    ap.add_argument("--n", type=int, nargs="+", default=list(NS), help="questions per data set")
    ap.add_argument("--k", type=int, nargs="+", default=list(KS), help="answers per question and condition")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes (the table is the same for any number)")
    ap.add_argument("--only", nargs="+", default=[], metavar="NAME",
                    help="only the methods whose name contains one of these; their rows replace or join "
                         "those of the table in docs/statistics.md")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/statistics.md alone")
    ap.add_argument("--recheck", type=int, default=0, metavar="F",
                    help="run a cell (n ≥ 8) that misses its target again on F times the data sets, another seed")
    ap.add_argument("--fit-reps", type=int, default=None,
                    help=f"data sets per setting for the rows that fit a model per data set (default {NONADD_REPS})")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    methods = [dataclasses.replace(m, max_reps=args.fit_reps) if m.max_reps and args.fit_reps else m
               for m in METHODS if not args.only or any(o in m.name for o in args.only)]
    t = table(args.reps, args.n, args.k, args.seed, methods=methods, jobs=args.jobs, recheck=args.recheck)
    text = markdown(t, args.reps, args.seed, time.monotonic() - t0, args.jobs, args.fit_reps, args.recheck)
    if args.only:                              # these rows into the table already written
        head = text.split("\n\n", 1)[0].replace("Written by", "Rows " + ", ".join(f"'{m.name}'" for m in methods)
                                                 + " written by", 1)
        head = head.replace("`python -m medaudit.validation.coverage", "`python -m medaudit.validation.coverage --only "
                            + " ".join(repr(o) for o in args.only), 1)
        text = merge(block(), text, head)
    print(text)
    if not args.no_write:
        write_doc(text)
        print(f"written into {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
