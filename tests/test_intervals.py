"""Intervals and paired tests that hold at small n (medaudit.stats.intervals),
checked against statsmodels and hand computations."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sstats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from medaudit.stats import intervals as I
from medaudit.stats import paired as S


def test_one_row_per_question_is_clopper_pearson_of_statsmodels():
    y = np.r_[np.ones(6), np.zeros(2)]
    r = I.proportion_interval(y)
    assert r["method"] == "Clopper-Pearson" and r["estimate"] == 0.75
    assert (r["lo"], r["hi"]) == pytest.approx(proportion_confint(6, 8, method="beta"))
    # all right: the interval is not a point (a bootstrap of eight 1s is [1, 1])
    r = I.proportion_interval(np.ones(8))
    assert r["hi"] == 1 and r["lo"] == pytest.approx(0.025 ** (1 / 8)) and r["lo"] < 0.7


def test_clustered_rows_are_korn_graubard_and_wider_when_questions_differ():
    y = np.r_[np.ones(5), np.zeros(5), np.ones(5), np.zeros(5)]        # four questions, all or nothing
    g = np.repeat(np.arange(4), 5)
    r = I.proportion_interval(y, g)
    cp = proportion_confint(10, 20, method="beta")
    assert r["method"] == "Korn-Graubard" and r["n_clusters"] == 4
    assert r["lo"] < cp[0] and r["hi"] > cp[1]
    # hand: deff = clustered variance / binomial variance, both with two pseudo-questions of 5 rows (all wrong,
    # all right, weight ½: still p = ½), n_eff with the t(C−1) correction
    var = 5 / 4 * (4 * 2.5 ** 2 + 2 * 0.5 * 2.5 ** 2) / 25 ** 2
    n_eff = 20 / (var / (0.25 / 25)) * (sstats.norm.ppf(0.975) / sstats.t.ppf(0.975, 3)) ** 2
    assert r["lo"] == pytest.approx(sstats.beta.ppf(0.025, 0.5 * n_eff, 0.5 * n_eff + 1))


def test_signflip_on_binary_rows_is_exact_mcnemar():
    rng = np.random.default_rng(3)
    for n in (3, 8, 15, 40):
        a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
        t = S.mcnemar_test(a, b, exact_below=10 ** 9)
        tab = [[t["n11"], t["b"]], [t["c"], t["n00"]]]
        want = mcnemar(tab, exact=True).pvalue if t["b"] + t["c"] else 1.0
        assert I.signflip_p(a, b) == pytest.approx(want)
    # three questions can never give a star: the smallest p is 2 / 2³
    assert I.signflip_p([0, 0, 0], [1, 1, 1]) == pytest.approx(0.25)


def test_signflip_enumerates_clustered_differences():
    d = np.array([0.2, 0.4, 0.6, 0.2, 0.8])
    p = I.signflip_p(np.zeros(5), d)
    # hand: of the 32 sign patterns only all-plus and all-minus reach |2.2|
    assert p == pytest.approx(2 / 32)
    # rows of one question are summed before flipping
    assert I.signflip_p(np.zeros(4), [0.5, 0.5, 1, 1], [0, 0, 1, 1]) == pytest.approx(0.5)


def test_binary_rows_get_tangos_score_interval_by_hand():
    """b = 2 (a only), c = 7 (b only), 11 concordant: at each end of the interval the continuity-corrected
    score statistic (|c − b − n·d0| − ½)/√(n(2p̃_b + d0(1 − d0))), p̃_b Tango's constrained MLE, is ±1.96."""
    a = np.r_[np.ones(2), np.zeros(7), np.ones(6), np.zeros(5)]
    b = np.r_[np.zeros(2), np.ones(7), np.ones(6), np.zeros(5)]
    r = I.paired_interval(a, b, level=0.95)
    n, nb, nc = 20, 2, 7

    def z(d0):
        A, B, C = 2 * n, -(nb + nc) + d0 * (2 * n + nb - nc), -nb * d0 * (1 - d0)
        pb = (-B + np.sqrt(B * B - 4 * A * C)) / (2 * A)
        num = nc - nb - n * d0
        return np.sign(num) * (abs(num) - 0.5) / np.sqrt(n * (2 * pb + d0 * (1 - d0)))

    assert r["method"] == I.SCORE_METHOD and r["delta"] == pytest.approx(0.25)
    assert z(r["lo"]) == pytest.approx(sstats.norm.ppf(0.975), abs=1e-6)
    assert z(r["hi"]) == pytest.approx(-sstats.norm.ppf(0.975), abs=1e-6)
    # its own test at 0 is McNemar's with the same correction
    assert r["p_score"] == pytest.approx(2 * sstats.norm.sf((7 - 2 - 0.5) / np.sqrt(9)))


def test_question_means_keep_the_adjusted_clustered_interval():
    # scores that are not 0/1 (a question's mean over its K samples): Agresti & Min's ½ per cell carried
    # to question-level differences, the clustered C/(C−1) form on n + 2 pseudo-questions
    a = np.r_[np.ones(2), np.zeros(7), np.ones(6), np.zeros(5)] * 0.8
    b = np.r_[np.zeros(2), np.ones(7), np.ones(6), np.zeros(5)] * 0.8
    r = I.paired_interval(a, b, level=0.95)
    d = 0.8 * np.r_[-np.ones(2), np.ones(7), np.zeros(11)]
    w = np.r_[np.ones(20), 0.5, 0.5, 1.0]
    dd = np.r_[d, 1.0, -1.0, 0.0]
    d_adj = (w * dd).sum() / w.sum()
    se = np.sqrt(w.sum() / (w.sum() - 1) * (w * (dd - d_adj) ** 2).sum()) / w.sum()
    assert r["method"] == I.METHOD and r["se"] == pytest.approx(se)


def test_paired_interval_never_has_zero_width():
    # every difference 0, or every one +1: the clustered t interval is a point there
    for a, b in ((np.ones(8), np.ones(8)), (np.zeros(8), np.ones(8))):
        e = S.paired_delta(a, b)
        assert e["ci_cluster_lo"] == e["ci_cluster_hi"]
        r = I.paired_interval(a, b)
        assert r["hi"] - r["lo"] > 0.2 and r["lo"] <= r["delta"] <= r["hi"]


def test_paired_interval_rejects_scores_outside_0_1():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        I.paired_interval([0, 0, 0], [2, 0, 1])


def _pairs(n11, n10, n01, n00):
    """Paired 0/1 rows (x, y) of a 2 × 2 table: n10 x only, n01 y only."""
    x = np.r_[np.ones(n11), np.ones(n10), np.zeros(n01), np.zeros(n00)]
    y = np.r_[np.ones(n11), np.zeros(n10), np.ones(n01), np.zeros(n00)]
    return x, y


def test_newcombe_paired_with_no_correlation_is_statsmodels_newcombe():
    # φ = 0 (n11·n00 = n10·n01): with Wilson margins the paired interval is Newcombe's hybrid score interval
    # for two samples; the default (06's ΔBL) takes Clopper–Pearson margins, wider
    x, y = _pairs(4, 2, 6, 3)
    est, lo, hi = I.newcombe_paired(x, y, margins="wilson")
    assert (lo, hi) == pytest.approx(confint_proportions_2indep(10, 15, 6, 15, method="newcomb"))
    _, lo_cp, hi_cp = I.newcombe_paired(x, y)
    assert lo_cp < lo and hi_cp > hi and est == pytest.approx(4 / 15)


def test_one_newcombe_paired_serves_06_and_the_simulation():
    from medaudit.validation import coverage
    from medaudit.studies.soap import inference as soap_inference
    assert soap_inference.newcombe_paired is I.newcombe_paired
    x, y = _pairs(3, 1, 4, 2)
    assert coverage._diff_newcombe(x, y, None, None, 0.95) == pytest.approx(I.newcombe_paired(x, y)[1:])


def test_can_tell_from_eight_questions():
    assert not I.can_tell(7) and I.can_tell(8) and not I.can_tell(float("nan"))


def test_relabel_p_enumerates_which_condition_is_the_reference():
    # two questions: the reference right, the three variants wrong, on both
    x = np.array([[1, 0, 0, 0], [1, 0, 0, 0]], float)
    # per question the term S − 4·x_j is −3 (x_j = 1 the reference) or +1 (a variant): |sum| ≥ 6 only for (−3, −3)
    assert I.relabel_p(x) == pytest.approx(1 / 16)
    # nothing can change: p 1; with two conditions it is the sign-flip test
    assert I.relabel_p(np.ones((5, 4))) == 1.0
    rng = np.random.default_rng(2)
    two = rng.integers(0, 2, (9, 2)).astype(float)
    assert I.relabel_p(two) == pytest.approx(I.signflip_p(two[:, 0], two[:, 1]))


def test_parse_rates_carry_their_n_and_an_interval_clustered_by_item():
    """03/07/08's parse rates were printed without an interval.
    Two items × two conditions × three samples; item q2 fails every sample
    under +homo: 9 of 12 samples parsed, 3 of 4 questions."""
    import pandas as pd

    from medaudit.llm import mcq

    rows = [{"model": "m", "prompt_format": "mcq", "item_id": q, "condition": c, "sample": k,
             "parse_status": "unparsed" if (q, c) == ("q2", "+homo") else "ok", "raw": "x"}
            for q in ("q1", "q2") for c in ("base", "+homo") for k in range(3)]
    r = mcq.parse_rates(pd.DataFrame(rows), threshold=2).iloc[0]
    assert (r["samples"], r["questions"], r["samples parsed (%)"]) == (12, 4, 75.0)
    # two items: the samples are clustered by item (Korn–Graubard), wider than 12 independent samples
    ci = I.proportion_interval(np.r_[np.ones(6), np.ones(3), np.zeros(3)], np.repeat(["q1", "q2"], 6))
    assert (r["samples parsed lo"], r["samples parsed hi"]) == pytest.approx(
        (round(100 * ci["lo"], 1), round(100 * ci["hi"], 1)))
    assert r["samples parsed lo"] < 100 * proportion_confint(9, 12, method="beta")[0]
    by = mcq.parse_rates_by_condition(pd.DataFrame(rows))
    assert by.loc["m", "base"].startswith("100.0 [") and by.loc["m", "base"].endswith("n=6")


def test_signflip_is_exact_beyond_sixteen_clusters_by_convolution():
    """08_arm_bias called its gap p exact but sampled above 16 non-zero vignettes (20,000 random flips):
    Qwen ses printed 0.13 where enumeration gives 0.1239. Sums on a common grid (0/1 or gap differences,
    means over K) now get the exact null by convolution, equal to enumerating all 2^C sign patterns."""
    import itertools

    rng = np.random.default_rng(12)
    for scale in (1, 4):                                   # gap differences; means over K = 4 samples
        t = rng.integers(-2, 3, 40).astype(float)
        t = t[t != 0][:18] / scale
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=t.size)))
        want = float((np.abs(signs @ t) >= abs(t.sum()) - 1e-9 * np.abs(t).sum()).mean())
        assert t.size > I.EXACT_UP_TO
        assert I.signflip_p(np.zeros(t.size), t) == pytest.approx(want, abs=1e-12)
        assert I.signflip_is_exact(np.zeros(t.size), t)
    # scores with no common grid (confidence) stay Monte Carlo, and say so
    assert not I.signflip_is_exact(np.zeros(30), rng.random(30))
