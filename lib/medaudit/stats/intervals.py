"""Intervals and paired tests that hold at the sizes our tables have.

A table of this project prints a proportion or a paired difference on 3 to
2,000 questions, each asked once (K = 1) or K times, or several rows per
question (07's three cultures). The methods here are those the coverage
simulation (:mod:`medaudit.validation.coverage`, ``python -m medaudit.validation.coverage``; the
table in docs/statistics.md) shows to cover at every n from :data:`MIN_N`
questions on, with K = 1 and K = 5 and question random effects:

* **A single proportion** (accuracy per condition, flip rate, harmful-flip
  rate, parse rate): :func:`proportion_interval`. One row per question:
  Clopper–Pearson (statsmodels ``proportion_confint(method="beta")``), which
  never covers less than its level. Several rows per question (K samples,
  cultures): Clopper–Pearson on the effective sample size n / deff, the
  design effect deff from the question means and a t on C − 1 df (Korn and
  Graubard 1998, "Confidence intervals for proportions with small expected
  number of positive counts estimated from survey data"), with two
  pseudo-questions of the mean size (one all wrong, one all right, ½ each)
  in the design effect: near 100 % a sample without a hard question has a
  design effect near 1 and its rows counted as independent (50 questions ×
  5 with two wrong rows gave [97.06, 99.91] %, excluding a true 96.9 %);
  with them [93.58, 100.00] %.
* **A paired difference of 0/1 answers** (correctness, a flip):
  :func:`paired_interval` takes Tango's (1998, *Stat Med* 17:891, "Equivalence
  test and confidence interval for the difference in proportions for the
  paired-sample design") score interval with a continuity correction of ½
  (:func:`tango_interval`) on the discordant counts and rows divided by the
  questions' design effect (:func:`design_effect`, with pseudo-questions;
  1 with one row per question). Identity bias usually moves answers one way
  (a cue that only costs: b but never c), where the adjusted interval below
  covered 86.9–87.8 % (exact enumeration); the corrected score interval
  covers at least 95.1 % over n = 8–2,000, one way and both ways, each side
  missing at most 3.4 % (tests/test_one_way.py).
* **A paired difference of other scores** in [0, 1] (a question's mean over
  K samples, confidence, Brier) or a gap difference (``bound`` 2):
  :func:`adjusted_interval`. Agresti and Min's adjustment for matched
  proportions (2005, "Simple improved confidence intervals for comparing
  matched proportions": ½ added to each cell of the 2 × 2 table, i.e. half a
  pseudo-question at +1, half at −1 and one at 0) carried to question-level
  differences, with the standard error clustered by question
  (:func:`medaudit.stats.paired.paired_delta`'s C/(C − 1) form) and a t on C − 1
  df, C the real questions, united with the plain clustered t interval
  (:func:`medaudit.stats.paired.paired_delta`), which misses on either side no
  more often than either of the two (the adjustment pulls towards 0, the
  side a test of equivalence must not miss).
* **Paired 0/1 outcomes, margins first**: :func:`newcombe_paired`
  (Newcombe's method 10 with Clopper–Pearson margins, 06's ΔBL).
* **A paired test**: :func:`signflip_p`, the randomisation test that flips
  the sign of each question's summed difference (exchangeable conditions
  within a question under "no effect"); exact, so it holds its level at every
  n (by enumeration, or by convolution where the question sums lie on a
  common grid). With one 0/1 row per question it is the exact McNemar test
  (checked against statsmodels), and with three questions its smallest p is
  0.25: no star on three questions.

Below :data:`MIN_N` questions the simulation cannot vouch for any interval's
coverage, so a table says "too few to tell" (:func:`can_tell`).
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats as sstats
from statsmodels.stats.proportion import proportion_confint

from medaudit.stats import paired as stats

MIN_N = 8             # the smallest number of questions the coverage simulation vouches for
PSEUDO = 0.5          # Agresti–Min: ½ added to each cell of the paired 2 × 2 table
EXACT_UP_TO = 16      # sign-flip p by full enumeration up to this many non-zero clusters
N_PERM = 20_000       # else this many seeded random sign flips
TOO_FEW = "too few to tell"
METHOD = "Agresti-Min adjusted ∪ clustered t"
SCORE_METHOD = "Tango score, continuity-corrected, design effect with pseudo-questions"
CC = 0.5              # the continuity correction of the score interval (tango_interval)


def can_tell(n) -> bool:
    """Does a table cell on ``n`` questions get a reading (n ≥ :data:`MIN_N`)?"""
    return bool(pd.notna(n) and n >= MIN_N)


def _groups(n: int, clusters) -> np.ndarray:
    g = np.arange(n) if clusters is None else np.asarray(clusters)
    if g.shape != (n,):
        raise ValueError("clusters must give one label per row")
    return pd.factorize(pd.Series(g))[0]


def proportion_interval(y, clusters=None, level: float = 0.95) -> dict:
    """A proportion with its interval: Clopper–Pearson with one row per
    cluster, Korn–Graubard (Clopper–Pearson on the effective n, t on C − 1
    df) with several. ``y``: 0/1 (NaN left out). Returns n, n_clusters,
    estimate, lo, hi, method."""
    y = np.asarray(y, dtype=float)
    g = _groups(y.size, clusters)
    ok = np.isfinite(y)
    y, g = y[ok], g[ok]
    n = int(y.size)
    out = {"n": n, "n_clusters": int(np.unique(g).size), "estimate": np.nan, "lo": np.nan, "hi": np.nan,
           "method": "Clopper-Pearson"}
    if n == 0:
        return out
    k, C = float(y.sum()), out["n_clusters"]
    p = k / n
    out["estimate"] = p
    if C == n:
        lo, hi = proportion_confint(int(round(k)), n, alpha=1 - level, method="beta")
        return {**out, "lo": float(lo), "hi": float(hi)}
    out["method"] = "Korn-Graubard"
    if C < 2:
        return out
    gid = pd.factorize(pd.Series(g))[0]
    tot, size = np.bincount(gid, weights=y), np.bincount(gid).astype(float)
    m = size.mean()                       # two pseudo-questions of the mean size, all wrong and all right, ½ each
    w = np.r_[np.ones(C), PSEUDO, PSEUDO]
    tot, size = np.r_[tot, 0.0, m], np.r_[size, m, m]
    rows, c_eff = (w * size).sum(), w.sum()
    pp = (w * tot).sum() / rows
    var = c_eff / (c_eff - 1) * (w * (tot - pp * size) ** 2).sum() / rows ** 2   # clustered variance of p
    srs = pp * (1 - pp) / rows
    deff = var / srs if srs > 0 and var > 0 else 1.0
    q = 0.5 + level / 2
    n_eff = min(n / deff, n) * (sstats.norm.ppf(q) / sstats.t.ppf(q, C - 1)) ** 2
    k_eff = p * n_eff
    lo = sstats.beta.ppf(1 - q, k_eff, n_eff - k_eff + 1) if k_eff > 0 else 0.0
    hi = sstats.beta.ppf(q, k_eff + 1, n_eff - k_eff) if k_eff < n_eff else 1.0
    return {**out, "lo": float(lo), "hi": float(hi)}


def _tango_z(b, c, n, d0, cc: float = CC):
    """Tango's (1998) score statistic for H0: p_c − p_b = d0 in a paired
    2 × 2 table (b: right under a only, c: right under b only, n pairs;
    counts may be fractional, as after a design effect), with the numerator
    |c − b − n·d0| reduced by the continuity correction ``cc``. The
    variance n(2p̃_b + d0(1 − d0)) is taken at p̃_b, the maximum-likelihood
    p_b under H0 (the root of Tango's quadratic, eq. 3 of the paper)."""
    A = 2.0 * n
    B = -(b + c) + d0 * (2.0 * n + b - c)
    C = -b * d0 * (1.0 - d0)
    pb = (-B + np.sqrt(np.maximum(B * B - 4.0 * A * C, 0.0))) / (2.0 * A)
    pb = np.clip(pb, np.maximum(0.0, -d0), (1.0 - d0) / 2.0)
    v = n * (2.0 * pb + d0 * (1.0 - d0))
    num = c - b - n * d0
    num = np.sign(num) * np.maximum(np.abs(num) - cc, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, num / np.sqrt(np.where(v > 0, v, 1.0)), np.where(num == 0, 0.0, np.sign(num) * np.inf))


def tango_interval(b, c, n, level: float = 0.95, cc: float = CC, steps: int = 56):
    """(lo, hi) of p_c − p_b: every d0 whose continuity-corrected Tango
    score statistic (:func:`_tango_z`) stays within ±z, found by bisection
    (vectorised: ``b``, ``c``, ``n`` may be arrays, fractional after a
    design effect). The correction ½ is this project's choice, made by
    exact enumeration (tests/test_one_way.py; docs/statistics.md): plain
    Tango covered 92.98 % at worst over n = 8–2,000 with one-way drops
    (only b, never c), the corrected form 95.1 %."""
    z = sstats.norm.ppf(0.5 + level / 2)
    if np.ndim(b) == np.ndim(c) == np.ndim(n) == 0:           # one interval: Brent's root on each side
        return _tango_scalar(float(b), float(c), float(n), z, cc)
    b, c, n = (np.asarray(x, dtype=float) for x in np.broadcast_arrays(b, c, n))
    d = np.where(n > 0, (c - b) / np.where(n > 0, n, 1.0), 0.0)
    lo_out, lo_in = np.full(b.shape, -1.0), d.copy()
    hi_in, hi_out = d.copy(), np.full(b.shape, 1.0)
    for _ in range(steps):
        m = (lo_out + lo_in) / 2
        ok = _tango_z(b, c, n, m, cc) <= z
        lo_in, lo_out = np.where(ok, m, lo_in), np.where(ok, lo_out, m)
        m = (hi_in + hi_out) / 2
        ok = _tango_z(b, c, n, m, cc) >= -z
        hi_in, hi_out = np.where(ok, m, hi_in), np.where(ok, hi_out, m)
    return lo_in, hi_in


def _tango_scalar(b: float, c: float, n: float, z: float, cc: float) -> tuple[float, float]:
    """:func:`tango_interval` for one table, by Brent's method on each side (the
    statistic is monotone in d0 on either side of the estimate)."""
    from scipy.optimize import brentq

    d = (c - b) / n if n > 0 else 0.0

    def f(d0):
        return float(_tango_z(b, c, n, d0, cc))

    lo = -1.0 if f(-1.0) <= z else brentq(lambda x: f(x) - z, -1.0, d, xtol=1e-14)
    hi = 1.0 if f(1.0) >= -z else brentq(lambda x: f(x) + z, d, 1.0, xtol=1e-14)
    return lo, hi


def tango_p(b, c, cc: float = CC) -> float:
    """Two-sided p of the score test of p_c = p_b that :func:`tango_interval`
    inverts, at d0 = 0: McNemar's statistic with the same continuity
    correction, (|c − b| − cc)₊ / √(b + c) (counts may be fractional, after
    a design effect). 1 with no discordant pair."""
    if b + c <= 0:
        return 1.0
    zs = max(abs(c - b) - cc, 0.0) / np.sqrt(b + c)
    return float(2 * sstats.norm.sf(zs))


def design_effect(d, clusters=None, bound: float = 1.0) -> float:
    """The design effect of the sum of paired differences ``d`` (rows in
    [−bound, bound]) clustered by question, with Agresti–Min-like
    pseudo-questions: one of the mean question size with every row at
    −bound and one with every row at +bound, each weighted ½, join the
    questions before the clustered variance (C/(C − 1) form) is divided by
    the rows' own variance. Without them a sample whose hard questions did
    not come up (a cue that moves few questions a lot, accuracy near 1)
    reads as if its rows were independent; with them a sample with no
    discordant row gets the design effect of one question's rows moving
    together. At least 1; exactly 1 where every question has one row."""
    d = np.asarray(d, dtype=float)
    g = _groups(d.size, clusters)
    size = np.bincount(g).astype(float)
    if d.size == 0 or np.all(size == 1):
        return 1.0
    tot = np.bincount(g, weights=d)
    m = size.mean()
    w = np.r_[np.ones(size.size), PSEUDO, PSEUDO]
    tot, size = np.r_[tot, -bound * m, bound * m], np.r_[size, m, m]
    rows = (w * size).sum()
    mean = (w * tot).sum() / rows
    c_eff = w.sum()
    between = c_eff / (c_eff - 1) * (w * (tot - mean * size) ** 2).sum()
    within = ((d - mean) ** 2).sum() + PSEUDO * m * ((-bound - mean) ** 2 + (bound - mean) ** 2)
    return float(max(1.0, between / within)) if within > 0 else 1.0


def _complete(y_a, y_b, clusters=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y_a, y_b, cluster labels) of the rows where both scores are numbers."""
    a, b = np.asarray(y_a, dtype=float), np.asarray(y_b, dtype=float)
    g = _groups(a.size, clusters)
    ok = np.isfinite(a) & np.isfinite(b)
    return a[ok], b[ok], g[ok]


def _binary(*ys) -> bool:
    return all(np.isin(y[np.isfinite(y)], (0.0, 1.0)).all() for y in ys)


def paired_interval(y_a, y_b, clusters=None, level: float = 0.95, bound: float = 1.0) -> dict:
    """``mean(y_b − y_a)`` with its interval. 0/1 rows (correctness, a flip):
    Tango's score interval with a continuity correction of ½
    (:func:`tango_interval`) on the discordant counts b, c and the rows n,
    each divided by the design effect of the questions
    (:func:`design_effect`; 1 with one row per question, where exact
    enumeration vouches for it). Other scores (a question's mean over K
    samples, confidence, a paired gap with ``bound`` 2): the adjusted,
    clustered interval of the module docstring (the union of the
    Agresti–Min-adjusted and the plain clustered t intervals). ``bound``:
    the largest possible |y_b − y_a| (1 for scores in [0, 1]; 2 for a
    change in a paired gap, as 08's Δgap and 03's Δ change). Returns the point estimate
    ``delta`` (unadjusted, :func:`medaudit.stats.paired.paired_delta`), n,
    n_clusters, lo, hi, se (the adjusted clustered SE; NaN for the score
    interval), deff (the score interval's design effect), p_score (its
    test of Δ = 0, :func:`tango_p`; NaN for other scores), method."""
    e = stats.paired_delta(y_a, y_b, clusters, level)
    out = {"delta": e["delta"], "n": e["n"], "n_clusters": e["n_clusters"], "lo": np.nan, "hi": np.nan,
           "se": np.nan, "deff": np.nan, "p_score": np.nan, "method": METHOD}
    a, b, g = _complete(y_a, y_b, clusters)
    d = b - a
    C = e["n_clusters"]
    if C < 2:
        return out
    if np.abs(d).max() > bound + 1e-12:
        raise ValueError(f"paired_interval: a difference of {np.abs(d).max():g} exceeds the bound {bound:g} "
                         "(scores must lie in [0, 1], or pass the bound of a difference of differences)")
    if bound == 1.0 and _binary(a, b):
        deff = design_effect(d, g)
        nb, nc, n = float((d < 0).sum()) / deff, float((d > 0).sum()) / deff, d.size / deff
        lo, hi = tango_interval(nb, nc, n, level)
        return {**out, "lo": float(lo), "hi": float(hi), "deff": deff, "p_score": tango_p(nb, nc),
                "method": SCORE_METHOD}
    return {**out, **adjusted_interval(y_a, y_b, clusters, level, bound, e)}


def adjusted_interval(y_a, y_b, clusters=None, level: float = 0.95, bound: float = 1.0, e: dict | None = None) -> dict:
    """lo, hi, se of the module docstring's adjusted, clustered interval of
    ``mean(y_b − y_a)``: Agresti–Min's pseudo-questions (½ at +bound, ½ at
    −bound, one at 0) with the clustered SE and a t on C − 1 df, united with
    the plain clustered t interval. :func:`paired_interval` uses it for
    scores that are not 0/1; on 0/1 rows it is what that function printed
    before the score interval (the coverage table keeps it as "replaced").
    ``e``: :func:`medaudit.stats.paired.paired_delta` of the same data, if at hand."""
    e = e or stats.paired_delta(y_a, y_b, clusters, level)
    a, b, g = _complete(y_a, y_b, clusters)
    d = b - a
    C = e["n_clusters"]
    if C < 2:
        return {"lo": np.nan, "hi": np.nan, "se": np.nan}
    gid = pd.factorize(pd.Series(g))[0]
    tot, size = np.bincount(gid, weights=d), np.bincount(gid).astype(float)
    m = size.mean()                                   # a pseudo-question has the mean cluster size
    w = np.r_[np.ones(C), PSEUDO, PSEUDO, 2 * PSEUDO]
    tot = np.r_[tot, bound * m, -bound * m, 0.0]
    size = np.r_[size, m, m, m]
    d_adj = (w * tot).sum() / (w * size).sum()
    c_eff = w.sum()
    se = float(np.sqrt(c_eff / (c_eff - 1) * (w * (tot - d_adj * size) ** 2).sum()) / (w * size).sum())
    t = sstats.t.ppf(0.5 + level / 2, C - 1)
    lo, hi = d_adj - t * se, d_adj + t * se
    if np.isfinite(e["ci_cluster_lo"]):          # the union with the plain clustered t interval (see above)
        lo, hi = min(lo, e["ci_cluster_lo"]), max(hi, e["ci_cluster_hi"])
    return {"lo": float(max(lo, -bound)), "hi": float(min(hi, bound)), "se": se}


def newcombe_paired(x, y, alpha: float = 0.05, margins: str = "beta") -> tuple[float, float, float]:
    """(mean(y) − mean(x), lo, hi) for paired 0/1 outcomes: Newcombe's
    (1998, *Stat Med* 17:2635) method-10 construction (each margin's
    interval combined with the paired correlation φ, the MOVER), with
    Clopper–Pearson margins by default (``margins="wilson"``: Newcombe's
    own). Exact coverage by enumerating every table, 45 parameter points:
    Wilson margins 94.2 % on average but 90.6 % at worst at n = 8 and 90.3 %
    at n = 20; Clopper–Pearson margins 96.9 % on average, 92.8 % at worst at
    n = 8, 93.8 % at n = 20 (tests/test_soap_inference.py). 06's ΔBL
    (:mod:`medaudit.studies.soap.inference`) prints it; the coverage simulation
    runs it beside :func:`paired_interval`."""
    x, y = np.asarray(x, dtype=int), np.asarray(y, dtype=int)
    n = len(x)
    if n == 0:
        return np.nan, np.nan, np.nan
    a, b = int(((x == 1) & (y == 1)).sum()), int(((x == 0) & (y == 1)).sum())
    c, d = int(((x == 1) & (y == 0)).sum()), int(((x == 0) & (y == 0)).sum())
    p1, p2 = (a + b) / n, (a + c) / n                      # y's rate, x's rate
    l1, u1 = proportion_confint(a + b, n, alpha, method=margins)
    l2, u2 = proportion_confint(a + c, n, alpha, method=margins)
    den = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / np.sqrt(den) if den > 0 else 0.0
    delta = np.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    eps = np.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    est = p1 - p2
    return est, max(est - delta, -1.0), min(est + eps, 1.0)


def _grid(t: np.ndarray, max_scale: int = 2520, max_total: int = 2_000_000) -> np.ndarray | None:
    """``|t|`` as integers on the coarsest common grid (t·s for the smallest s
    ≤ ``max_scale`` that makes every value whole: 1 for sums of 0/1
    differences, K for question means over K samples), or None where no such
    grid exists or the sums are too large for the convolution."""
    a = np.abs(t)
    for s in range(1, max_scale + 1):
        x = a * s
        r = np.rint(x)
        if np.allclose(x, r, rtol=0, atol=1e-7):
            return r.astype(np.int64) if r.sum() <= max_total else None
    return None


def signflip_null(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact distribution of Σ ±a_c over all 2^C equally likely sign
    patterns, for whole numbers a_c ≥ 0: (values, probabilities), by
    convolving one cluster at a time (C·Σa steps; no sampling)."""
    total = int(a.sum())
    pr = np.zeros(2 * total + 1)
    pr[total] = 1.0
    for x in a.tolist():
        if x:
            pr = 0.5 * (np.roll(pr, x) + np.roll(pr, -x))    # the support never wraps: |sum| ≤ total
    return np.arange(-total, total + 1), pr


def signflip_p(y_a, y_b, clusters=None, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Two-sided randomisation p of "the conditions are exchangeable within
    a question": the share of sign flips of the clusters' summed differences
    T_c whose |Σ ± T_c| reaches the observed one. Exact: by the binomial
    when every non-zero |T_c| is equal (one 0/1 row per question: the exact
    McNemar test), by enumeration up to :data:`EXACT_UP_TO` non-zero
    clusters, by convolution (:func:`signflip_null`) where the T_c lie on a
    common grid (sums of 0/1 or gap differences, means over K samples: any
    number of clusters); only scores with no common grid (confidence) fall
    back to ``n_perm`` seeded flips (p = (1 + #)/(1 + n_perm), Monte Carlo
    SE ≈ √(p(1 − p)/n_perm); :func:`signflip_is_exact` says which).
    NaN with no row; 1 with no non-zero difference."""
    t = _cluster_sums(y_a, y_b, clusters)
    if t is None:
        return float("nan")
    if t.size == 0:
        return 1.0
    obs = abs(t.sum()) - 1e-9 * np.abs(t).sum()
    if np.allclose(np.abs(t), abs(t[0])):
        pos = int((t > 0).sum())
        k = min(pos, t.size - pos)
        return float(min(1.0, 2 * sstats.binom.cdf(k, t.size, 0.5)))
    if t.size <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=t.size)))
        return float((np.abs(signs @ t) >= obs).mean())
    a = _grid(t)
    if a is not None:
        vals, pr = signflip_null(a)
        s = a.sum() / np.abs(t).sum()                              # the grid's scale
        return float(min(1.0, pr[np.abs(vals) >= s * obs - 1e-6].sum()))
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(n_perm, t.size))
    return float((1 + (np.abs(signs @ t) >= obs).sum()) / (1 + n_perm))


def _cluster_sums(y_a, y_b, clusters=None) -> np.ndarray | None:
    """The non-zero per-cluster sums of y_b − y_a (None with no complete row)."""
    a, b, g = _complete(y_a, y_b, clusters)
    if not a.size:
        return None
    gid = pd.factorize(pd.Series(g))[0]
    t = np.bincount(gid, weights=b - a)
    return t[np.abs(t) > 1e-12]


def signflip_is_exact(y_a, y_b, clusters=None) -> bool:
    """Is :func:`signflip_p` of these data exact (True) or a Monte Carlo estimate (False)?"""
    t = _cluster_sums(y_a, y_b, clusters)
    return bool(t is None or t.size <= EXACT_UP_TO or np.allclose(np.abs(t), abs(t[0]) if t.size else 0)
                or _grid(t) is not None)


def relabel_p(x, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Two-sided randomisation p of "the reference does not differ from its
    variants" for one reference and m variants per question (07's Δ Avg:
    the original and three cultures' variants). ``x``: questions × (1 + m),
    column 0 the reference (rows with a NaN left out). Statistic: the sum
    over questions of (variants' sum − m · reference) = Δ Avg × m × C.
    Under "the 1 + m conditions are exchangeable within a question" any of
    them is equally likely to be the reference, so each question's term
    takes one of its 1 + m values S − (1 + m) · x_j with equal chance: exact,
    by enumeration up to (1 + m)^C ≤ 2^16 patterns, else ``n_perm`` seeded
    draws (p = (1 + #)/(1 + n_perm)). The sign flip of each question's sum
    (:func:`signflip_p`) is not exact here: S − 3 · x_ref is not symmetric."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x).any(axis=1)]
    if not x.size:
        return float("nan")
    k = x.shape[1]
    terms = x.sum(axis=1, keepdims=True) - k * x            # question × which condition plays the reference
    terms = terms[~np.all(terms == terms[:, :1], axis=1)]   # questions whose term cannot change add nothing
    obs = abs(x.sum() - k * x[:, 0].sum()) - 1e-9
    if not terms.size:
        return 1.0
    c = terms.shape[0]
    if k ** c <= 2 ** 16:
        tot = np.zeros(1)
        for row in terms:                                     # every pattern, one question at a time
            tot = (tot[:, None] + row[None, :]).ravel()
        return float((np.abs(tot) >= obs).mean())
    pick = np.random.default_rng(seed).integers(0, k, size=(n_perm, c))
    tot = terms[np.arange(c), pick].sum(axis=1)
    return float((1 + (np.abs(tot) >= obs).sum()) / (1 + n_perm))
