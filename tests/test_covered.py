"""Notebook 04's comparisons on the methods that hold at the run's n (calibration.covered):
the seed's bootstrap starred three questions; the exact tests cannot, and the swap test of ECE and
AUROC is a true randomisation test."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from medaudit.studies import calibration
from medaudit.stats import intervals, metrics, paired as stats


def _qt(n: int, seed: int = 0, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        for c, s in (("base", 0.0), ("+homo", shift)):
            conf = float(np.clip(rng.random() + s, 0, 1))
            ok = float(rng.random() < conf)
            rows.append({"model": "m", "prompt_format": "mcq", "item_id": f"q{i}", "condition": c,
                         "confidence": conf, "majority_correct": ok, "single_correct": ok})
    return pd.DataFrame(rows)


def test_three_questions_get_no_star_and_say_so():
    """Every +homo answer wrong, every base answer right, confidence collapsed: the bootstrap p of
    confidence and Brier was ≤ 0.05 on three questions; no exact test can go below 2/2³."""
    qt = _qt(3)
    qt.loc[qt["condition"] == "base", ["confidence", "majority_correct", "single_correct"]] = [0.9, 1.0, 1.0]
    qt.loc[qt["condition"] == "+homo", ["confidence", "majority_correct", "single_correct"]] = [0.1, 0.0, 0.0]
    res, _ = calibration.compare(qt, "base", ["+homo"], 200, 0)
    r = res.set_index("metric")
    assert r.loc["confidence", "p_boot"] <= 0.05                   # the seed's test: a star on 3 questions
    assert (r["p"].dropna() >= 0.25).all() and (r["verdict"] == "too few to tell").all()
    assert r.loc["confidence", "p"] == pytest.approx(0.25)         # the exact sign-flip test
    t = calibration.tables.delta_table(res, "confidence")
    assert t["text"].loc["m", "+homo"] == "-80.00 (n=3, too few to tell)"


def test_item_means_get_the_covering_interval_and_sign_flip_p():
    qt = _qt(30, shift=-0.2)
    res, _ = calibration.compare(qt, "base", ["+homo"], 200, 0, margin=2)
    lay = stats.layout(qt, ["model", "prompt_format"])
    ia, ib = lay.index[(("m", "mcq"), "base")], lay.index[(("m", "mcq"), "+homo")]
    for metric, x in (("confidence", lay.conf), ("brier", (lay.conf - lay.correct) ** 2)):
        r = res.set_index("metric").loc[metric]
        ci = intervals.paired_interval(x[ia], x[ib])
        assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((ci["lo"], ci["hi"]))
        assert r["p"] == pytest.approx(intervals.signflip_p(x[ia], x[ib]))
    acc = res.set_index("metric").loc["accuracy"]
    assert acc["p"] == acc["p_mcnemar"] and acc["margin"] == 2
    assert res.set_index("metric").loc[["ece", "auroc"], "ci_lo"].isna().all()


def test_swap_p_enumerates_every_swap_on_few_items():
    qt = _qt(6, seed=4)
    lay = stats.layout(qt, ["model", "prompt_format"])
    ia, ib = lay.index[(("m", "mcq"), "base")], lay.index[(("m", "mcq"), "+homo")]
    m = lay.valid[ia] & lay.valid[ib]
    p = calibration.swap_p(lay, ia, ib, m, "ece")
    # by hand: every one of the 2⁶ ways to swap the two conditions' answers within items
    ca, ya, cb, yb = lay.conf[ia], lay.correct[ia], lay.conf[ib], lay.correct[ib]
    obs = metrics.ece(cb, yb) - metrics.ece(ca, ya)
    hits = 0
    for s in itertools.product((False, True), repeat=6):
        s = np.array(s)
        d = (metrics.ece(np.where(s, ca, cb), np.where(s, ya, yb))
             - metrics.ece(np.where(s, cb, ca), np.where(s, yb, ya)))
        hits += abs(d) >= abs(obs) - 1e-12
    assert p == pytest.approx(hits / 64)
