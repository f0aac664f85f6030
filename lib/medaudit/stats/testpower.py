"""Power, sample size and minimum detectable effect of the test a table
actually runs.

A paired binary comparison (right/wrong under two conditions on the same
items) is tested in this project by McNemar's test in one of its forms:

* ``"exact"``: the two-sided binomial test of b given b + c (statsmodels
  ``mcnemar(exact=True)``: p = min(1, 2·P(Bin(b + c, ½) ≤ min(b, c)))):
  FairMedQA's pairs (08, ``fairmedqa_mcnemar: exact``);
* ``"chi2-cc"``: the continuity-corrected χ², (|b − c| − 1)² / (b + c) on
  1 df (statsmodels ``mcnemar(exact=False, correction=True)``);
* ``"auto"``: exact when b + c < ``exact_below`` (25), else chi2-cc
  (:func:`medaudit.stats.paired.mcnemar_test`): seed 000's accuracy cells (04),
  FairMedQA under ``fairmedqa_mcnemar: auto``;
* ``"z"``: the uncorrected score test, (b − c)² / (b + c) on 1 df — the
  test Connor's (1987) closed form is the large-sample power of; used for
  the paired-bootstrap interval of seed 003's Fig. 5 (07), whose
  large-sample form it is.

Power is computed by exact enumeration, not by a normal approximation: the
number of discordant pairs D is Binomial(n, ψ) and, given D = d, the pairs
that favour the first condition are Binomial(d, π) with π = (ψ + δ)/(2ψ)
(δ = p10 − p01, ψ = p10 + p01). For each d the test rejects when
min(b, c) ≤ m*(d) (:func:`critical_counts`), so

    power(n, δ, ψ) = Σ_d P(D = d) · [P(B ≤ m*(d)) + P(B ≥ d − m*(d))].

That is O(n) binomial terms per (n, δ, ψ): cheap for n in the thousands.
The sample size is the smallest n whose power reaches the target
(:func:`mcnemar_n`); the MDE is the smallest |δ| whose power at n reaches
it (:func:`mcnemar_mde`), ``inf`` ("none detectable at n") when even
δ = ψ — every discordant pair one way — does not.

Standard-error tests (the clustered t test of seed 003's Δ Avg on C − 1
degrees of freedom; the bootstrap tests of confidence and Brier, taken as
z): :func:`se_power` and :func:`mde_from_se` invert the power of the test
with the quantiles it uses (noncentral t with ``df``, normal without), and
give NaN where the standard error is 0 (every paired difference equal:
nothing to scale an effect by).

Miller's (2024) K-sample means (:func:`omega2`, :func:`mean_n`,
:func:`mean_mde`) and Connor's closed form (:func:`connor_n`) are kept for
the planner's means section and as a starting point.

Numbers only (numpy, scipy): no pandas, no project module.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats as sstats
from scipy.optimize import brentq

ALPHA = 0.05
POWER = 0.8
EXACT_BELOW = 25
TESTS = ("exact", "chi2-cc", "auto", "z")
N_MAX = 10_000_000

# what each test is called in a table's mde_method column
LABELS = {"exact": "exact McNemar", "chi2-cc": "McNemar χ² (continuity-corrected)",
          "auto": f"McNemar (exact below {EXACT_BELOW} discordant pairs, else χ² corrected)",
          "z": "McNemar z (uncorrected)"}


def _check(alpha: float, power: float | None = None) -> None:
    if not 0 < alpha < 1 or (power is not None and not 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), not {alpha}, {power}")


def _test(test: str) -> str:
    if test not in TESTS:
        raise ValueError(f"unknown McNemar test {test!r}: one of {', '.join(TESTS)}")
    return test


# --------------------------------------------------------------------------
# McNemar by exact enumeration


@lru_cache(maxsize=64)
def _critical(d_max: int, alpha: float, test: str, exact_below: int) -> np.ndarray:
    d = np.arange(d_max + 1, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        if test in ("exact", "auto"):
            # largest m with 2·P(Bin(d, ½) ≤ m) ≤ α: ppf gives the smallest m with cdf ≥ α/2
            m = sstats.binom.ppf(alpha / 2, d, 0.5)
            m = np.where(2 * sstats.binom.cdf(m, d, 0.5) <= alpha, m, m - 1)
            exact = m
        crit = sstats.chi2.isf(alpha, 1)
        if test in ("chi2-cc", "auto"):
            # (d − 2m − 1)² / d ≥ χ²: m ≤ (d − 1 − √(d·χ²)) / 2
            cc = np.floor((d - 1 - np.sqrt(d * crit)) / 2)
        if test == "z":
            out = np.floor((d - np.sqrt(d * crit)) / 2)
        elif test == "exact":
            out = exact
        elif test == "chi2-cc":
            out = cc
        else:
            out = np.where(d < exact_below, exact, cc)
    out = np.where(d > 0, np.nan_to_num(out, nan=-1.0), -1.0)
    return np.maximum(out, -1.0).astype(np.int64)


def critical_counts(d_max: int, alpha: float = ALPHA, test: str = "auto",
                    exact_below: int = EXACT_BELOW) -> np.ndarray:
    """m*(d) for d = 0 … ``d_max`` discordant pairs: the test rejects exactly
    when min(b, c) ≤ m*(d); −1 where no split of d pairs is significant."""
    _check(alpha)
    size = 1 << max(6, int(d_max).bit_length())      # cached in powers of two
    return _critical(size, float(alpha), _test(test), int(exact_below))[: int(d_max) + 1]


def mcnemar_power(n: int, delta: float, psi: float, alpha: float = ALPHA, test: str = "auto",
                  exact_below: int = EXACT_BELOW) -> float:
    """Power of the two-sided McNemar ``test`` at ``n`` pairs, discordant
    share ``psi`` and difference ``delta`` = p10 − p01, by exact
    enumeration (module docstring). 0 where no outcome of n pairs can be
    significant (e.g. n = 3 under the exact test)."""
    n = int(n)
    d_ = abs(float(delta))
    if not 0 <= d_ <= psi <= 1:
        raise ValueError(f"McNemar power needs 0 <= |delta| <= psi <= 1 (delta {delta}, psi {psi})")
    if n < 1 or psi == 0:
        return 0.0
    m = critical_counts(n, alpha, test, exact_below)
    d = np.arange(n + 1)
    pi = (psi + d_) / (2 * psi)
    ok = m >= 0
    rej = np.zeros(n + 1)
    rej[ok] = sstats.binom.cdf(m[ok], d[ok], pi) + sstats.binom.sf(d[ok] - m[ok] - 1, d[ok], pi)
    return float(np.clip(np.dot(sstats.binom.pmf(d, n, psi), rej), 0.0, 1.0))


def connor_n(delta: float, psi: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Connor's (1987) closed form for the uncorrected test, not rounded:
    ``n = [z_{α/2}·√ψ + z_β·√(ψ − δ²)]² / δ²`` (Biometrics 43:207-211)."""
    _check(alpha, power)
    d = abs(float(delta))
    if not 0 < d <= psi <= 1:
        raise ValueError(f"McNemar sample size needs 0 < |delta| <= psi <= 1 (delta {delta}, psi {psi})")
    za, zb = sstats.norm.isf(alpha / 2), sstats.norm.ppf(power)
    return float((za * np.sqrt(psi) + zb * np.sqrt(psi - d * d)) ** 2 / d ** 2)


def mcnemar_n(delta: float, psi: float, alpha: float = ALPHA, power: float = POWER, test: str = "auto",
              exact_below: int = EXACT_BELOW) -> int:
    """The smallest n whose exact power (:func:`mcnemar_power`) reaches
    ``power``: bracketed from Connor's closed form, then bisected on the
    enumerated power. The exact tests' power is not quite monotone in n
    (it saw-tooths by fractions of a point); the n returned has power ≥
    the target and n − 1 has less."""
    _check(alpha, power)
    d = abs(float(delta))
    if not 0 < d <= psi <= 1:
        raise ValueError(f"McNemar sample size needs 0 < |delta| <= psi <= 1 (delta {delta}, psi {psi})")

    def reaches(n: int) -> bool:
        return mcnemar_power(n, d, psi, alpha, test, exact_below) >= power

    hi = max(2, math.ceil(connor_n(d, psi, alpha, power)))
    while not reaches(hi):
        if hi > N_MAX:
            raise ValueError(f"McNemar sample size: more than {N_MAX:,} pairs (delta {delta}, psi {psi})")
        hi = math.ceil(hi * 1.25) + 1
    lo = hi // 2
    while lo >= 1 and reaches(lo):
        hi, lo = lo, lo // 2
    while hi - lo > 1:                      # reaches(hi), not reaches(lo) (lo = 0: nothing)
        mid = (lo + hi) // 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi


def mcnemar_mde(n: int, psi: float, alpha: float = ALPHA, power: float = POWER, test: str = "auto",
                exact_below: int = EXACT_BELOW) -> float:
    """The smallest |p10 − p01| that ``n`` pairs detect with ``power`` under
    ``test`` at discordance ``psi``: the inverse in δ of
    :func:`mcnemar_power`. NaN when ``psi`` is 0 or n < 1 (no discordance:
    nothing to invert); ``inf`` when even δ = ψ does not reach ``power``
    ("none detectable at n")."""
    _check(alpha, power)
    if not (n >= 1 and 0 < psi <= 1):
        return float("nan")
    n = int(n)
    if mcnemar_power(n, psi, psi, alpha, test, exact_below) < power:
        return float("inf")
    return float(brentq(lambda x: mcnemar_power(n, x, psi, alpha, test, exact_below) - power,
                        0.0, psi, xtol=1e-12, rtol=1e-12))


# --------------------------------------------------------------------------
# tests on a standard error: z, or t on df degrees of freedom


def se_power(effect: float, se: float, alpha: float = ALPHA, df: float | None = None) -> float:
    """Two-sided power of the test of ``effect`` / ``se``: normal, or with
    ``df`` the t test (noncentral t with noncentrality effect / se)."""
    _check(alpha)
    lam = abs(float(effect)) / float(se)
    if df is None or not np.isfinite(df):
        c = sstats.norm.isf(alpha / 2)
        return float(sstats.norm.sf(c - lam) + sstats.norm.cdf(-c - lam))
    c = sstats.t.isf(alpha / 2, df)
    return float(sstats.nct.sf(c, df, lam) + sstats.nct.cdf(-c, df, lam))


def mde_from_se(se: float, alpha: float = ALPHA, power: float = POWER, df: float | None = None) -> float:
    """The effect an estimate with standard error ``se`` detects with
    ``power``: the inverse of :func:`se_power` (normal quantiles, or t on
    ``df`` degrees of freedom where the test uses t). NaN when ``se`` is 0,
    missing or not finite (every paired difference equal), or ``df`` < 1."""
    _check(alpha, power)
    if se is None or not np.isfinite(se) or se <= 0 or (df is not None and not df >= 1):
        return float("nan")
    hi = 2.0 * (sstats.norm.isf(alpha / 2) + sstats.norm.ppf(power))
    while se_power(hi, 1.0, alpha, df) < power:
        hi *= 2
    lam = brentq(lambda x: se_power(x, 1.0, alpha, df) - power, 0.0, hi, xtol=1e-12, rtol=1e-12)
    return float(lam * se)


# --------------------------------------------------------------------------
# K-sample means (Miller 2024)


def omega2(var_a: float, var_b: float, cov_ab: float, within_a: float = 0.0, within_b: float = 0.0,
           k: float = 1.0) -> float:
    """Miller (2024, §"Power analysis"): the variance of one question's
    paired difference when each score is the mean of ``k`` samples,
    ``ω² = Var(x_A) + Var(x_B) − 2·Cov(x_A, x_B) + (E[σ²_A] + E[σ²_B]) / K``,
    with Var/Cov of the questions' true scores and E[σ²] the mean
    within-question (sampling) variance."""
    return float(var_a + var_b - 2 * cov_ab + (within_a + within_b) / k)


def mean_n(delta: float, omega2_: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Questions needed (not rounded) to detect a mean paired difference
    ``delta`` (Miller 2024): ``n = (z_{α/2} + z_β)² · ω² / δ²``."""
    _check(alpha, power)
    if delta == 0:
        raise ValueError("delta must be non-zero")
    return float((sstats.norm.isf(alpha / 2) + sstats.norm.ppf(power)) ** 2 * omega2_ / delta ** 2)


def mean_mde(n: float, omega2_: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Miller's (2024) minimum detectable effect at ``n`` questions:
    ``(z_{α/2} + z_β) · √(ω² / n)``."""
    _check(alpha, power)
    za, zb = sstats.norm.isf(alpha / 2), sstats.norm.ppf(power)
    return float((za + zb) * np.sqrt(omega2_ / n)) if n > 0 else float("nan")
