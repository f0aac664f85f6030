"""The three-way verdict of a contrast (medaudit.stats.equivalence)."""
from __future__ import annotations

import numpy as np

from medaudit.stats import equivalence as E


def test_verdicts():
    assert E.verdict(0.01, -9, -1, 3, 50) == "difference shown"
    assert E.verdict(0.40, -2.5, 2.0, 3, 50) == "equivalence shown within ±3"
    assert E.verdict(0.40, -8.0, 2.0, 3, 50) == "inconclusive"
    assert E.verdict(0.001, -9, -1, 3, 5) == "too few to tell"
    # the boundary belongs to "not shown": an interval touching δ does not exclude it
    assert E.verdict(0.40, -3.0, 1.0, 3, 50) == "inconclusive"


def test_no_difference_on_few_questions_is_inconclusive_not_equivalence():
    """Ten questions, no answer changed: no test rejects, and yet the data allow a 20-point change."""
    a = b = np.r_[np.ones(6), np.zeros(4)]
    v = E.paired_verdict(a, b, margin=3)
    assert v["p_test"] == 1.0 and v["verdict"] == "inconclusive" and v["ci_hi"] > 15


def test_many_unchanged_questions_show_equivalence():
    a = np.r_[np.ones(700), np.zeros(300)]
    b = a.copy()
    b[:5], b[700:705] = 0, 1            # five changes each way on 1,000 questions
    v = E.paired_verdict(a, b, margin=3)
    assert v["verdict"] == "equivalence shown within ±3" and -3 < v["ci_lo"] < 0 < v["ci_hi"] < 3


def test_a_clear_drop_is_a_difference():
    a = np.ones(40)
    b = np.r_[np.zeros(15), np.ones(25)]
    assert E.paired_verdict(a, b, margin=3)["verdict"] == "difference shown"


def test_a_test_that_rejects_beside_an_interval_holding_zero_is_inconclusive():
    """07_delta_avg_errors printed "difference shown" beside its own interval of −8.51 to +0.17
    (relabelling p 0.032): the reader is shown a difference the printed interval does not exclude.
    A difference is shown only where the test rejects and the interval excludes 0."""
    assert E.verdict(0.032, -8.51, 0.17, 3, 150) == "inconclusive"
    assert E.verdict(0.032, -8.51, -0.17, 3, 150) == "difference shown"
    assert E.verdict(0.032, 0.2, 8.0, 3, 150) == "difference shown"
    # no interval to read (a table without one): the test alone decides
    assert E.verdict(0.032, np.nan, np.nan, 3, 150) == "difference shown"
