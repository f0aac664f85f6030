"""The printed claims where a cue only hurts: one-way changes (b but never
c), accuracy near the ceiling, few strong flippers, the three cultures'
variants sharing the cue effect. K = 1 by exact enumeration over every
(b, c) table, so no Monte Carlo error; K > 1 by seeded simulation.

Designs and targets from docs/statistics.md: a 95 % interval covers at
least 93 %; "equivalence shown within ±δ" at a true |Δ| = δ at most 5 %
(the 95 % interval's one-sided miss bounds it); "difference shown" at
Δ = 0 at most 6 %."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sstats

from medaudit.stats import equivalence as E
from medaudit.stats import intervals as I


def _rows(b: int, c: int, n: int):
    """y_a, y_b of n questions: b right under a only, c right under b only, the rest right under both."""
    ya = np.r_[np.ones(b), np.zeros(c), np.ones(n - b - c)]
    yb = np.r_[np.zeros(b), np.ones(c), np.ones(n - b - c)]
    return ya, yb


def _one_way(n: int, drop: float):
    """(coverage, P(lo > truth), P(hi < truth)) of paired_interval when a cue only costs: b ~ Bin(n, drop), c = 0."""
    cov = miss_lo = miss_hi = 0.0
    for b in range(n + 1):
        pr = sstats.binom.pmf(b, n, drop)
        if pr < 1e-13:
            continue
        r = I.paired_interval(*_rows(b, 0, n))
        cov += pr * (r["lo"] - 1e-12 <= -drop <= r["hi"] + 1e-12)
        miss_lo += pr * (r["lo"] > -drop + 1e-12)
        miss_hi += pr * (r["hi"] < -drop - 1e-12)
    return cov, miss_lo, miss_hi


@pytest.mark.parametrize("n,drop", [(20, 0.10), (50, 0.04), (50, 0.08), (100, 0.02), (100, 0.04), (200, 0.02)])
def test_paired_interval_covers_a_one_way_drop_exactly(n, drop):
    """The Agresti–Min ∪ t interval covered 87.8 % (n = 20, −10 points), 86.9 % (n = 50, −4) and 91.6 %
    (n = 50, −8): with no discordant pair it was ±9.74 points at n = 20 whatever the truth."""
    cov, *_ = _one_way(n, drop)
    assert cov >= 0.93


@pytest.mark.parametrize("n,delta", [(100, 0.02), (200, 0.02), (80, 0.03)])
def test_equivalence_at_the_margin_is_rarely_shown_one_way(n, delta):
    """P(equivalence shown within ±δ | Δ = −δ, one way) was 13.3 % (n = 100, δ = 2), 8.9 % (n = 200) and
    8.7 % (n = 80, δ = 3): the verdict's interval lies inside the margin only if its lower end misses."""
    _, miss_lo, _ = _one_way(n, delta)
    assert miss_lo <= 0.05


def test_the_binary_interval_is_the_score_interval_on_the_counts():
    """paired_interval on 0/1 rows with one row per question is tango_interval(b, c, n): the enumeration
    over counts below speaks for it."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(8, 300))
        b = int(rng.integers(0, n // 3 + 1))
        c = int(rng.integers(0, n - b + 1) // 3)
        r = I.paired_interval(*_rows(b, c, n))
        lo, hi = I.tango_interval(b, c, n)
        assert (r["lo"], r["hi"]) == pytest.approx((float(lo), float(hi)), abs=1e-12)
        assert r["deff"] == 1.0 and r["method"] == I.SCORE_METHOD


def _two_way(n: int, pb: float, pc: float, tail: float = 1e-11):
    """Exact (coverage, worse one-sided miss) of the score interval over every (b, c) with probability."""
    psi = pb + pc
    m = np.arange(int(sstats.binom.ppf(tail, n, psi)), min(n, int(sstats.binom.isf(tail, n, psi)) + 1) + 1)
    b, c = [], []
    for mm in m:
        cs = np.arange(mm + 1)
        b.append(mm - cs)
        c.append(cs)
    b, c = np.concatenate(b).astype(float), np.concatenate(c).astype(float)
    pr = np.exp(sstats.binom.logpmf(b + c, n, psi) + sstats.binom.logpmf(c, b + c, pc / psi))
    lo, hi = I.tango_interval(b, c, n)
    t = pc - pb
    return (pr[(lo - 1e-12 <= t) & (t <= hi + 1e-12)].sum(),
            max(pr[lo > t + 1e-12].sum(), pr[hi < t - 1e-12].sum()))


@pytest.mark.slow   # 30 designs × 5 sizes enumerated: about 40 s on 2 loaded cores
@pytest.mark.parametrize("n", [8, 20, 50, 150, 400])
def test_the_score_interval_holds_on_a_grid_of_two_way_changes(n):
    """Changes both ways and one way, discordance 1–40 %: coverage ≥ 93 % and each side's miss ≤ 5 %
    (so "equivalence shown" at |Δ| = δ stays ≤ 5 % whatever δ)."""
    for pb in (0.01, 0.03, 0.05, 0.10, 0.20, 0.30):
        for pc in (0.0, 0.01, 0.03, 0.10, 0.20):
            if pc > pb:
                continue
            cov, side = _two_way(n, pb, pc)
            assert cov >= 0.93 and side <= 0.05, (n, pb, pc, cov, side)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1000, 2000])
def test_equivalence_at_the_margin_stays_rare_up_to_2000_questions(n):
    """|Δ| = δ (2 and 3 points), one way and both ways: P(equivalence shown) ≤ the worse side's miss ≤ 5 %."""
    for delta in (0.02, 0.03):
        for pc in (0.0, 0.02, 0.05):
            cov, side = _two_way(n, delta + pc, pc)
            assert side <= 0.05 and cov >= 0.93, (n, delta, pc, cov, side)


def test_a_clustered_proportion_near_one_covers_without_a_hard_question_in_the_sample():
    """Korn–Graubard counted 250 rows as independent when no question was hard: 50 questions × 5 with two
    wrong rows gave [0.9706, 0.9991], which excludes a true 0.969."""
    y = np.ones(250)
    y[[0, 5]] = 0
    r = I.proportion_interval(y, np.repeat(np.arange(50), 5))
    assert r["lo"] < 0.969 < r["hi"]


def _ceiling(rng, n: int, mean: float) -> np.ndarray:
    """Per-question accuracy from a Beta mixture: most questions near 1 (Beta(40, 0.4)), the rest Beta(2, 1.5)."""
    hi_mean, lo_mean = 40 / 40.4, 2 / 3.5
    near_one = rng.random(n) < (mean - lo_mean) / (hi_mean - lo_mean)
    return np.where(near_one, rng.beta(40, 0.4, n), rng.beta(2, 1.5, n))


@pytest.mark.slow   # 300 simulated data sets
def test_a_few_strong_flippers_at_the_ceiling_are_covered_with_k5():
    """Accuracy 0.97, K = 5, a drop of 5 points made by a few questions that flip 4 answers in 5: a sample
    whose flippers did not come up must still give an interval that reaches −5 (the row design effect of
    such a sample is 1)."""
    rng = np.random.default_rng(11)
    n, k, drop, hits = 50, 5, 0.05, []
    for _ in range(300):
        p = _ceiling(rng, n, 0.97)
        f = np.where(rng.random(n) < drop / (0.8 * 0.97), 0.8, 0.0)
        g = np.repeat(np.arange(n), k)
        ya = (rng.random(g.size) < p[g]).astype(float)
        yb = ya * (rng.random(g.size) >= f[g])
        r = I.paired_interval(ya, yb, g)
        hits.append(r["lo"] <= -drop <= r["hi"])
    assert np.mean(hits) >= 0.93


@pytest.mark.slow   # 600 simulated data sets
def test_the_delta_avg_test_holds_its_level_when_the_cultures_share_the_cue_effect():
    """07's Δ Avg: the three cultures' variants of a question carry the same cue phrase, so they move
    together; relabelling (which treats the four conditions as exchangeable) rejected a true Δ Avg = 0 in
    7–15.5 %. The interval's own score test, with the question design effect, holds."""
    from scipy.special import expit

    rng = np.random.default_rng(5)
    n, rej = 50, []
    for _ in range(600):
        u = rng.normal(0, 1, (n, 1))
        v = np.column_stack([rng.normal(0, 1.0, (n, 1)), np.repeat(rng.normal(0, 1.0, (n, 1)), 3, axis=1)])
        y = (rng.random((n, 4)) < expit(1.1 + u + v)).astype(float)
        ya, yb, q = np.tile(y[:, 0], 3), y[:, 1:].T.ravel(), np.tile(np.arange(n), 3)
        rej.append(I.paired_interval(ya, yb, q)["p_score"] <= 0.05)
    assert np.mean(rej) <= 0.06 + 2 * np.sqrt(0.05 * 0.95 / 600)


def test_a_test_that_rejects_beside_an_interval_holding_zero_never_reads_equivalence():
    """equivalence.verdict(0.03, −1.0, 0.5, 3, 50) read "equivalence shown within ±3": docs/statistics.md says
    a test/interval disagreement reads inconclusive."""
    assert E.verdict(0.03, -1.0, 0.5, 3, 50) == E.INCONCLUSIVE
    assert E.reason(0.03, -1.0, 0.5, 3, 50) == "disagree"


@pytest.mark.slow   # a search over n, each n enumerated
def test_the_planner_gives_the_questions_equivalence_needs_exactly():
    """At ψ = 0.10 and δ = 3 the score interval shows equivalence with power 0.8 from 1,233 questions (exact
    enumeration; the normal formula's guess is 1,168); with no answer changing, from 156 (δ = 3)."""
    n = E.equivalence_n(0.10, 3)
    assert E.equivalence_power(n, 0.10, 3) >= 0.8 > E.equivalence_power(n - 1, 0.10, 3)
    assert n == 1233
    assert E.equivalence_n(0.0, 3) == 156 and E.equivalence_n(0.0, 2) == 236
    # at the margin itself, equivalence is shown rarely (the verdict's size)
    assert E.equivalence_power(n, 0.10, 3, delta=3.0) <= 0.05
