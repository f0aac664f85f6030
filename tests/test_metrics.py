"""Accuracy, Brier, ECE, AUROC, reliability and selective prediction
(medaudit.stats.metrics) against hand-computed values and scikit-learn / scipy."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import mannwhitneyu
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, roc_auc_score

from medaudit.stats import metrics as M


@pytest.fixture(scope="module")
def cy():
    rng = np.random.default_rng(11)
    c = rng.random(500)
    y = (rng.random(500) < c).astype(float)
    return c, y


def test_accuracy_and_brier_hand_and_sklearn(cy):
    assert M.accuracy([1, 0, 1, 1]) == 0.75
    assert np.isnan(M.accuracy([]))
    assert M.brier([0.9, 0.2, 0.5], [1, 0, 0]) == pytest.approx((0.01 + 0.04 + 0.25) / 3)
    c, y = cy
    assert M.brier(c, y) == pytest.approx(brier_score_loss(y, c))
    with pytest.raises(ValueError):
        M.brier([0.1, 0.2], [1])


def test_ece_hand_case():
    # bins 0, 1, 9, 9: |0 − .05| + |1 − .15| + |2 − 1.95| over N = 4
    assert M.ece([0.05, 0.15, 0.95, 1.0], [0, 1, 1, 1]) == pytest.approx((0.05 + 0.85 + 0.05) / 4)
    assert M.ece([0.7] * 10, [1] * 7 + [0] * 3) == pytest.approx(0.0, abs=1e-12)
    assert M.ece([1.0, 1.0], [0, 0]) == 1.0


def test_bin_edges_and_one():
    c = np.array([0.0, 0.1 * 3, 1 - math.log(2) / math.log(4), 0.5, 0.999999, 1.0, 0.95 - 0.05])
    assert M.bin_index(c).tolist() == [0, 3, 5, 5, 9, 9, 9]
    # one ulp below an edge (floating-point error of a value meant to be 0.3 or 0.9) goes up
    assert M.bin_index([np.nextafter(0.3, 0), np.nextafter(0.9, 0), 0.2999]).tolist() == [3, 9, 2]
    r = M.reliability([0.5, 1.0, 1.0, 0.55], [1, 1, 0, 0])
    assert r["n"].tolist() == [0, 0, 0, 0, 0, 2, 0, 0, 0, 2]
    assert r.loc[9, "accuracy"] == 0.5 and r.loc[9, "confidence"] == 1.0 and r.loc[9, "gap"] == -0.5
    assert r["lo"].iloc[0] == 0.0 and r["hi"].iloc[-1] == 1.0 and np.isnan(r.loc[0, "accuracy"])


def test_ece_matches_sklearn_calibration_curve_on_continuous_confidence(cy):
    """sklearn bins the same 10 equal-width intervals (its edges are
    right-closed, ours left-closed: no value of c sits on an edge here)."""
    c, y = cy
    prob_true, prob_pred = calibration_curve(y, c, n_bins=10, strategy="uniform")
    ids = np.searchsorted(np.linspace(0, 1, 11)[1:-1], c)
    n = np.bincount(ids, minlength=10)
    n = n[n > 0]
    assert M.ece(c, y) == pytest.approx(np.sum(n / len(c) * np.abs(prob_true - prob_pred)))
    r = M.reliability(c, y)
    np.testing.assert_allclose(r.dropna()["accuracy"], prob_true)
    np.testing.assert_allclose(r.dropna()["confidence"], prob_pred)


def test_auroc_sklearn_mannwhitney_hand(cy):
    c, y = cy
    assert M.auroc(c, y) == pytest.approx(roc_auc_score(y, c))
    u = mannwhitneyu(c[y == 1], c[y == 0]).statistic
    assert M.auroc(c, y) == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()))
    # hand: pairs (pos, neg) = (.8,.3) win, (.8,.8) tie, (.5,.3) win, (.5,.8) loss → 2.5 / 4
    assert M.auroc([0.8, 0.5, 0.3, 0.8], [1, 1, 0, 0]) == pytest.approx(0.625)
    assert np.isnan(M.auroc([0.1, 0.9], [1, 1]))


def test_risk_coverage_hand_with_ties():
    c = [0.9, 0.9, 0.5, 0.2]
    y = [1, 0, 1, 0]
    rc = M.risk_coverage(c, y)
    assert rc["threshold"].tolist() == [0.9, 0.5, 0.2]
    assert rc["coverage"].tolist() == [0.5, 0.75, 1.0]
    assert rc["risk"].tolist() == pytest.approx([0.5, 1 / 3, 0.5])
    assert rc["accuracy"].iloc[-1] == M.accuracy(y)


def test_aurc_hand_no_ties():
    # risks at k = 1..4: 0, 1/2, 1/3, 2/4
    assert M.aurc([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)
    assert M.aurc([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0]) == pytest.approx((0 + 0 + 1 / 3 + 0.5) / 4)


def _aurc_order(y_sorted) -> float:
    y = np.asarray(y_sorted, float)
    k = np.arange(1, len(y) + 1)
    return float(np.mean(np.cumsum(1 - y) / k))


def test_aurc_is_the_mean_over_all_orders_inside_ties():
    rng = np.random.default_rng(2)
    c = np.array([0.9, 0.9, 0.9, 0.6, 0.6, 0.3, 0.3, 0.3])
    y = rng.integers(0, 2, c.size).astype(float)
    blocks = [np.flatnonzero(c == v) for v in sorted(set(c), reverse=True)]
    vals = [_aurc_order(y[np.concatenate(p)])
            for p in itertools.product(*[list(itertools.permutations(b)) for b in blocks])]
    assert M.aurc(c, y) == pytest.approx(np.mean(vals))
    # without ties it is the plain Geifman area
    c2 = rng.random(30)
    y2 = rng.integers(0, 2, 30).astype(float)
    assert M.aurc(c2, y2) == pytest.approx(_aurc_order(y2[np.argsort(-c2)]))


def test_accuracy_at_coverage():
    c = [0.9, 0.8, 0.7, 0.6]
    y = [1, 1, 0, 0]
    t = M.accuracy_at_coverage(c, y, [0.5, 0.75, 1.0])
    assert t["accuracy"].tolist() == pytest.approx([1.0, 2 / 3, 0.5])
    # a tie straddling the cut: expected accuracy of a random half of the tie
    t2 = M.accuracy_at_coverage([0.5, 0.5, 0.5, 0.5], [1, 1, 0, 0], [0.5])
    assert t2["accuracy"].iloc[0] == pytest.approx(0.5)


def qt_small() -> pd.DataFrame:
    return pd.DataFrame({
        "model": ["m"] * 6 + ["n"] * 2,
        "condition": ["base"] * 3 + ["+homo"] * 3 + ["base"] * 2,
        "confidence": [0.9, 0.4, np.nan, 0.8, 0.6, 0.3, 1.0, 0.2],
        "majority_correct": [1, 0, np.nan, 1, 1, 0, 1, 1],
        "single_correct": [1, 1, np.nan, 0, 1, 0, 1, 0],
    })


def test_metric_table_drops_unscored_and_matches_array_functions():
    t = M.metric_table(qt_small()).set_index(["model", "condition"])
    b = t.loc[("m", "base")]
    assert (b.n, b.n_scored, b.n_unscored) == (3, 2, 1)
    assert b.accuracy == 1.0 and b.majority_accuracy == 0.5
    assert b.confidence == pytest.approx(0.65)
    assert b.brier == pytest.approx(M.brier([0.9, 0.4], [1, 0]))
    assert b.auroc == 1.0
    h = t.loc[("m", "+homo")]
    assert h.ece == pytest.approx(M.ece([0.8, 0.6, 0.3], [1, 1, 0]))
    assert h.aurc == pytest.approx(M.aurc([0.8, 0.6, 0.3], [1, 1, 0]))
    assert np.isnan(t.loc[("n", "base")].auroc)          # one class only
    other = M.metric_table(qt_small().assign(lp=[0.5] * 8), confidence="lp").set_index(["model", "condition"])
    assert other.loc[("m", "base")].brier == pytest.approx(0.25)     # y = 1, 0 against c = 0.5
    assert other.loc[("m", "base")].n_scored == 2


def test_reliability_and_risk_coverage_tables():
    r = M.reliability_table(qt_small())
    assert len(r) == 3 * 10 and list(r.columns[:2]) == ["model", "condition"]
    assert r.groupby(["model", "condition"], sort=False)["n"].sum().tolist() == [2, 3, 2]
    rc = M.risk_coverage_table(qt_small())
    assert rc.groupby(["model", "condition"], sort=False)["coverage"].max().tolist() == [1.0, 1.0, 1.0]
