"""Power, sample size and MDE of the test each table runs,
checked against statsmodels' own test decisions enumerated by brute force,
against simulation, and against statsmodels' t-test power."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sstats
from scipy.optimize import brentq
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.power import TTestPower

from medaudit.stats import testpower as T

ALPHA, TARGET = 0.05, 0.8


def _rejects(b: int, c: int, test: str) -> bool:
    """statsmodels' McNemar at α = 0.05, in the form ``test`` names."""
    if b + c == 0:
        return False
    exact = test == "exact" or (test == "auto" and b + c < 25)
    r = sm_mcnemar([[0, b], [c, 0]], exact=exact, correction=test != "z")
    return r.pvalue <= ALPHA


def _brute_power(n: int, delta: float, psi: float, test: str) -> float:
    """Σ over every (b, c) of the multinomial(n; p10, p01, 1 − ψ) pmf × the
    statsmodels decision: no shortcut through critical values."""
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    total = 0.0
    for b in range(n + 1):
        for c in range(n - b + 1):
            if _rejects(b, c, test):
                total += sstats.multinomial.pmf([b, c, n - b - c], n, [p10, p01, 1 - psi])
    return total


@pytest.mark.parametrize("test", T.TESTS)
def test_critical_counts_are_statsmodels_decisions(test):
    m = T.critical_counts(70, test=test)
    for d in range(0, 71):
        for b in range(d + 1):
            assert _rejects(b, d - b, test) == (min(b, d - b) <= m[d]), (test, d, b, m[d])


@pytest.mark.parametrize("test", T.TESTS)
@pytest.mark.parametrize("n,delta,psi", [(8, 1.0, 1.0), (8, 0.5, 0.75), (12, 0.2, 0.4), (27, 0.15, 0.3),
                                         (30, 0.1, 0.1)])
def test_enumerated_power_equals_brute_force(test, n, delta, psi):
    assert T.mcnemar_power(n, delta, psi, test=test) == pytest.approx(_brute_power(n, delta, psi, test), abs=1e-10)


def test_no_test_can_reject_three_pairs():
    """``mcnemar_power(3, 1, 1)`` was 1.0 where no outcome of 3
    pairs is significant under the exact test (2·½³ = 0.25)."""
    assert T.mcnemar_power(3, 1.0, 1.0, test="exact") == 0.0
    assert T.mcnemar_mde(3, 1.0, test="exact") == np.inf


# every (δ, ψ) of the grid, with the planned n from 6 pairs up to the thousands
GRID = [(d, p) for p in (0.05, 0.1, 0.2, 0.4, 0.7, 1.0) for d in (0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0) if d <= p]


@pytest.mark.parametrize("test", ["exact", "auto", "chi2-cc", "z"])
def test_planned_n_reaches_the_power_of_the_test_it_plans_for(test):
    """The planned n reaches the target under that test, within 2 points
    of it wherever one more pair moves the power by less than that, and
    n − 1 does not reach it; the MDE at that n is the inverse of the power."""
    ns = []
    for delta, psi in GRID:
        n = T.mcnemar_n(delta, psi, test=test)
        ns.append(n)
        pw, below = T.mcnemar_power(n, delta, psi, test=test), T.mcnemar_power(n - 1, delta, psi, test=test)
        assert pw >= TARGET > below, (delta, psi, n, pw, below)
        assert pw - TARGET <= max(0.02, pw - below), (delta, psi, n, pw)
        mde = T.mcnemar_mde(n, psi, test=test)
        assert mde <= delta + 1e-9
        assert T.mcnemar_power(n, mde, psi, test=test) == pytest.approx(TARGET, abs=1e-8)
    assert min(ns) < 30 and max(ns) > 1000


def test_planned_n_in_simulation():
    """Cross-check by simulation: statsmodels' exact test on paired samples
    of the planned size."""
    rng = np.random.default_rng(5)
    for delta, psi in ((0.2, 0.4), (0.05, 0.2)):
        n = T.mcnemar_n(delta, psi, test="exact")
        counts = rng.multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], size=1500)
        hits = np.mean([_rejects(int(b), int(c), "exact") for b, c, _ in counts])
        assert abs(hits - T.mcnemar_power(n, delta, psi, test="exact")) < 0.035


def test_the_mde_quoted_for_eight_discordant_pairs_is_the_exact_tests():
    """"-100.00*† (n=8, MDE 84.98)" inverted the z test;
    the exact test has power 0.54 there and needs 94.5 points. At ψ = 0.75
    no effect reaches 0.8 on eight pairs."""
    want = brentq(lambda d: _brute_power(8, d, 1.0, "exact") - TARGET, 0.5, 1.0, xtol=1e-12)
    assert T.mcnemar_mde(8, 1.0, test="exact") == pytest.approx(want, abs=1e-9)
    assert round(100 * want, 1) == 94.5
    assert _brute_power(8, 0.8498, 1.0, "exact") == pytest.approx(0.54, abs=0.01)
    assert T.mcnemar_mde(8, 0.75, test="exact") == np.inf
    assert _brute_power(8, 0.75, 0.75, "exact") < TARGET


def test_connor_is_the_z_tests_large_sample_form():
    n = T.connor_n(0.05, 0.2)
    za, zb = sstats.norm.isf(0.025), sstats.norm.ppf(0.8)
    assert n == pytest.approx((za * np.sqrt(0.2) + zb * np.sqrt(0.2 - 0.0025)) ** 2 / 0.0025, abs=1e-9)
    assert abs(T.mcnemar_power(int(np.ceil(n)), 0.05, 0.2, test="z") - TARGET) < 0.01


def test_t_and_z_mde_invert_their_power():
    """t on df degrees of freedom where the test uses t (07's Δ Avg on C − 1
    df): statsmodels' one-sample t power gives the same effect."""
    for c in (3, 8, 30):
        se = 0.04
        d_cohen = TTestPower().solve_power(nobs=c, alpha=ALPHA, power=TARGET, alternative="two-sided")
        assert T.mde_from_se(se, df=c - 1) == pytest.approx(d_cohen * np.sqrt(c) * se, rel=1e-6)
    z = T.mde_from_se(0.01)
    assert T.se_power(z, 0.01) == pytest.approx(TARGET, abs=1e-9)
    assert z == pytest.approx((sstats.norm.isf(0.025) + sstats.norm.ppf(0.8)) * 0.01, rel=1e-5)
    # normal quantiles understate the t test's MDE: ×1.16 at 8 clusters, ×2.0 at 3 (noncentral t)
    assert T.mde_from_se(0.01, df=7) / z == pytest.approx(1.16, abs=0.01)
    assert T.mde_from_se(0.01, df=2) / z == pytest.approx(2.02, abs=0.01)
    for se in (0.0, np.nan, None):
        assert np.isnan(T.mde_from_se(se))


def test_miller_mean_formulas_by_hand():
    w = T.omega2(0.04, 0.05, 0.03, within_a=0.2, within_b=0.22, k=10)
    assert w == pytest.approx(0.04 + 0.05 - 0.06 + 0.042, abs=1e-12)
    za, zb = sstats.norm.isf(0.025), sstats.norm.ppf(0.8)
    assert T.mean_n(0.02, w) == pytest.approx((za + zb) ** 2 * w / 0.02 ** 2, abs=1e-9)
    assert T.mean_mde(T.mean_n(0.02, w), w) == pytest.approx(0.02, abs=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown McNemar test 'fisher'"):
        T.mcnemar_power(10, 0.1, 0.2, test="fisher")
    with pytest.raises(ValueError, match="psi"):
        T.mcnemar_n(0.4, 0.3)
    assert np.isnan(T.mcnemar_mde(8, 0.0)) and np.isnan(T.mcnemar_mde(0, 0.5))
