"""The reading of a contrast: difference shown, equivalence shown, or
inconclusive.

A test that does not reject says nothing about the absence of a difference,
and "none larger than the MDE" is a power statement (at Δ = MDE the test
misses one time in five). Equivalence is a test of its own: two one-sided
tests (TOST, Schuirmann 1987) of H0: Δ ≤ −δ and H0: Δ ≥ +δ, which reject
together exactly when the interval lies inside (−δ, +δ). Here each one-sided
test is at 2.5 %, so the interval is the printed 95 % one
(:func:`medaudit.stats.intervals.paired_interval`) and a reader can check the
verdict from the table. The usual 90 % interval (5 % per side) was rejected:
in the coverage simulation its worse side missed 7–8 % of the time at n = 20
and 50 with one answer per question (binary differences are skewed); the
95 % interval's one-sided miss is what ``python -m medaudit.validation.coverage``
reports in its TOST row.

The verdict of a contrast (:func:`verdict`):

* ``difference shown`` — the test the cell runs rejects at α and the
  printed 95 % interval excludes 0 (where the two disagree — an exact test
  beside a conservative interval can — the reading is ``inconclusive``: a
  reader is never told of a difference the interval beside it does not
  exclude; a table without an interval is read by its test);
* ``equivalence shown within ±δ`` — it does not, and the TOST does;
* ``inconclusive`` — neither: the data allow a difference of ±δ or more;
* ``too few to tell`` — fewer than :data:`medaudit.stats.intervals.MIN_N`
  questions, where the simulation vouches for no interval.

δ, the margin, is in points (a proportion × 100) and declared per study in
the profile (``calibration_margin``, ``cultural_margin``,
``fairmedqa_margin``; their defaults and the seeds' sentences behind them are
in docs/statistics.md).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sstats

from medaudit.stats import intervals, paired as stats
from medaudit.stats.testpower import ALPHA

DIFFERENCE = "difference shown"
INCONCLUSIVE = "inconclusive"


def equivalent(lo: float, hi: float, margin: float) -> bool:
    """TOST, 2.5 % per side: the 95 % interval (same scale as ``margin``) inside (−δ, +δ)."""
    return bool(np.isfinite(lo) and np.isfinite(hi) and -margin < lo and hi < margin)


REASONS = {
    "difference": "the test rejects and the 95 % interval excludes 0",
    "disagree": "the test rejects but the 95 % interval still holds 0",
    "equivalence": "the whole 95 % interval lies inside the margin",
    "beyond margin": "the test does not reject, and the interval reaches past the margin",
    "no margin": "the test does not reject, and no margin is declared",
    "too few": "too few questions for any interval or test",
}


def reason(p: float, lo: float, hi: float, margin: float, n, alpha: float = ALPHA) -> str:
    """Why a contrast reads as it does (:data:`REASONS`' keys): the
    verdict's own reason, from the test (rejects or not), the interval
    (holds 0 or not) and the margin. A test that rejects beside an interval
    that holds 0 is a disagreement (an exact test beside a conservative
    interval can), never equivalence."""
    if not intervals.can_tell(n):
        return "too few"
    rejects = bool(pd.notna(p) and p <= alpha)
    holds_zero = bool(np.isfinite(lo) and np.isfinite(hi) and lo <= 0 <= hi)
    if rejects:
        return "disagree" if holds_zero else "difference"
    has_margin = margin is not None and bool(np.isfinite(margin))
    if has_margin and equivalent(lo, hi, margin):
        return "equivalence"
    return "beyond margin" if has_margin else "no margin"


def verdict(p: float, lo: float, hi: float, margin: float, n, alpha: float = ALPHA) -> str:
    """The three-way reading of one contrast (module docstring), from :func:`reason`."""
    why = reason(p, lo, hi, margin, n, alpha)
    if why == "too few":
        return intervals.TOO_FEW
    if why == "difference":
        return DIFFERENCE
    if why == "equivalence":
        return f"equivalence shown within ±{margin:g}"
    return INCONCLUSIVE


def equivalence_power(n: int, psi: float, margin: float, delta: float = 0.0, alpha: float = ALPHA) -> float:
    """P(equivalence shown within ±``margin`` points) with n questions answered
    once under each condition, discordance ``psi`` (the share of questions
    whose answer changed) and true change ``delta`` (points), by exact
    enumeration of every (b, c) with the score interval the verdict reads
    (:func:`medaudit.stats.intervals.tango_interval`; tails below 1e-11 left out)."""
    pb, pc = (psi - delta / 100) / 2, (psi + delta / 100) / 2
    if pb < 0 or pc < 0:
        raise ValueError(f"equivalence_power: a change of {delta:g} points needs discordance ≥ {abs(delta) / 100:g}")
    psi_ = pb + pc
    lo_m = int(sstats.binom.ppf(1e-11, n, psi_))
    hi_m = min(n, int(sstats.binom.isf(1e-11, n, psi_)) + 1)
    m = np.arange(lo_m, hi_m + 1)
    pi = pc / psi_
    c = np.concatenate([np.arange(int(sstats.binom.ppf(1e-11, mm, pi)), int(sstats.binom.isf(1e-11, mm, pi)) + 2)
                        .clip(0, mm) for mm in m]).astype(float)
    b = np.repeat(m, [int(sstats.binom.isf(1e-11, mm, pi)) + 2 - int(sstats.binom.ppf(1e-11, mm, pi)) for mm in m]) - c
    keep = (b >= 0) & (c >= 0)
    b, c = b[keep], c[keep]
    _, first = np.unique(np.c_[b, c], axis=0, return_index=True)     # the clip may repeat an end
    b, c = b[np.sort(first)], c[np.sort(first)]
    pr = np.exp(sstats.binom.logpmf(b + c, n, psi_) + sstats.binom.logpmf(c, b + c, pc / psi_))
    lo, hi = intervals.tango_interval(b, c, n, 1 - alpha)
    return float(pr[(100 * lo > -margin) & (100 * hi < margin)].sum())


def equivalence_n(psi: float, margin: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """The fewest questions (one answer each per condition) that show
    equivalence within ±``margin`` points with probability ``power`` when the
    true change is 0 and a share ``psi`` of the answers changed
    (:func:`equivalence_power`, exact; the normal guess
    ψ·(z_{1−α/2} + z_{(1+power)/2})²/δ² starts the search)."""
    if psi <= 0:              # no answer changes: the fewest n whose interval at b = c = 0 lies inside
        n = np.arange(intervals.MIN_N, 200_000)
        _, hi = intervals.tango_interval(np.zeros(n.size), np.zeros(n.size), n, 1 - alpha)
        return int(n[np.argmax(100 * hi < margin)])
    za, zp = sstats.norm.ppf(1 - alpha / 2), sstats.norm.ppf((1 + power) / 2)
    guess = max(8, int(psi * (za + zp) ** 2 / (margin / 100) ** 2))
    lo, hi = max(1, guess // 2), guess * 2
    while equivalence_power(hi, psi, margin, 0.0, alpha) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if equivalence_power(mid, psi, margin, 0.0, alpha) >= power else (mid, hi)
    return hi


def questions_for_equivalence(lo: float, hi: float, n, margin: float, alpha: float = ALPHA,
                              power: float = 0.8) -> float:
    """About how many questions would show equivalence within ±``margin``
    with probability ``power`` if the true change were 0, at the spread this
    contrast shows: the 95 % interval's half-width h at n questions shrinks
    as 1/√n, and the TOST at Δ = 0 needs (z_{1−α/2} + z_{(1+power)/2})·h/z_{1−α/2}
    ≤ δ (each side at α/2, as the verdict reads the 95 % interval). For a
    score interval h ≈ z·√(ψ·deff/n), so this is ψ·deff·(z_{1−α/2} +
    z_{(1+power)/2})²/δ², the planner's formula at the observed discordance
    ψ and design effect. NaN without a finite interval or margin."""
    if not (np.isfinite(lo) and np.isfinite(hi) and np.isfinite(margin) and margin > 0 and pd.notna(n) and n > 0):
        return float("nan")
    za = sstats.norm.ppf(1 - alpha / 2)
    zp = sstats.norm.ppf((1 + power) / 2)
    h = (hi - lo) / 2
    return float(np.ceil(n * (h * (za + zp) / (za * margin)) ** 2))


def paired_verdict(y_a, y_b, clusters=None, margin: float = 3.0, p: float | None = None,
                   alpha: float = ALPHA) -> dict:
    """Verdict of ``y_b − y_a`` (scores in [0, 1]; ``margin`` in points):
    ``p`` where the cell runs its own test (McNemar), else the sign-flip
    test (:func:`medaudit.stats.intervals.signflip_p`); the 95 % interval for the
    TOST. Returns (points) ci_lo, ci_hi, margin, verdict, and p_test, the p
    the verdict used."""
    if p is None:
        p = intervals.signflip_p(y_a, y_b, clusters)
    ci = intervals.paired_interval(y_a, y_b, clusters, level=1 - alpha)
    lo, hi = 100 * ci["lo"], 100 * ci["hi"]
    return {"p_test": p, "ci_lo": lo, "ci_hi": hi, "margin": margin,
            "verdict": verdict(p, lo, hi, margin, ci["n_clusters"], alpha)}


def delta_columns(y_a, y_b, clusters, name: str, margin: float, bound: float = 1.0,
                  alpha: float = ALPHA) -> dict:
    """:func:`medaudit.stats.paired.delta_columns` of ``y_b − y_a`` (points: Δ,
    clustered SE, MDE, n) with the p of the sign-flip test
    (:func:`medaudit.stats.intervals.signflip_p`, exact) in place of the clustered
    t test's, the covering 95 % interval ``<name> lo`` / ``<name> hi``
    (:func:`medaudit.stats.intervals.paired_interval`; ``bound`` as there) and
    ``<name> verdict`` at ``margin`` (points)."""
    e = stats.paired_delta(y_a, y_b, clusters)
    out = stats.delta_columns(e, name)
    p = intervals.signflip_p(y_a, y_b, clusters)
    ci = intervals.paired_interval(y_a, y_b, clusters, level=1 - alpha, bound=bound)
    lo, hi = 100 * ci["lo"], 100 * ci["hi"]
    out.update({f"{name} p": p, f"{name} lo": lo, f"{name} hi": hi,
                f"{name} verdict": verdict(p, lo, hi, margin, ci["n_clusters"], alpha)})
    return out


DELTA_SUFFIXES = ("", " SE", " MDE", " p", " n", " lo", " hi", " verdict")


def delta_names(name: str) -> list[str]:
    """The columns :func:`delta_columns` writes for ``name``, in order."""
    return [name + s for s in DELTA_SUFFIXES]
