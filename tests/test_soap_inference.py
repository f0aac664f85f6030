"""Notebook 06's tests and intervals: BL, ΔBL, max ΔBL,
ΔCF and %dlg paired over dialogs, their coverage by exact enumeration,
the judge band, and the correction by human labels."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import multinomial
from statsmodels.stats.proportion import proportion_confint

from medaudit.studies import soap
from medaudit.studies.soap import inference as SI


@pytest.fixture(scope="module")
def cfg():
    return soap.load_config()


def _verdicts(table: dict[str, list[int]], axis: str = "race", context: str = "toxicity") -> pd.DataFrame:
    """``table``: group → one 0/1 verdict per dialog."""
    rows = []
    for grp, ys in table.items():
        for i, y in enumerate(ys):
            rows.append({"model": "m", "dataset": "mts_dialog", "context": context, "speaker": "patient",
                         "axis": axis, "unit": f"d{i}", "group": grp, "incidence": soap.YES if y else soap.NO})
    return pd.DataFrame(rows)


def _tables(n):
    for a in range(n + 1):
        for b in range(n + 1 - a):
            for c in range(n + 1 - a - b):
                yield a, b, c, n - a - b - c


def _exact_coverage(n, pi, margins="beta"):
    truth = (pi[0] + pi[1]) - (pi[0] + pi[2])
    tot = 0.0
    for a, b, c, d in _tables(n):
        x = np.array([1] * a + [0] * b + [1] * c + [0] * d)
        y = np.array([1] * a + [1] * b + [0] * c + [0] * d)
        _, lo, hi = SI.newcombe_paired(x, y, margins=margins)
        tot += (lo <= truth <= hi) * multinomial.pmf([a, b, c, d], n, pi)
    return tot


def test_paired_interval_covers_at_n8_by_exact_enumeration():
    """Every table of 8 dialogs enumerated, 12 parameter points (random
    and the corners a SOAP cell meets: rare incidence, rare discordance).
    Clopper–Pearson margins: ≥ 92.5% at every point, ≥ 95% on average
    (the 45-point figures are in newcombe_paired's docstring); Newcombe's
    own Wilson margins fall below 92% at some of the same points."""
    rng = np.random.default_rng(0)
    points = [rng.dirichlet([1, 1, 1, 1]) for _ in range(8)]
    points += [np.array(p) for p in ([0.05, 0.0, 0.0, 0.95], [0.0, 0.05, 0.0, 0.95], [0.1, 0.05, 0.05, 0.8],
                                     [0.5, 0.1, 0.1, 0.3])]
    cov = [_exact_coverage(8, p) for p in points]
    assert min(cov) >= 0.925 and np.mean(cov) >= 0.95, np.round(cov, 4)
    wil = [_exact_coverage(8, p, "wilson") for p in points[:8]]
    assert min(wil) < 0.92


def test_newcombe_by_hand():
    """Method 10 on a table worked by hand: a = 12 (both), b = 5 (y only),
    c = 1 (x only), d = 2 (neither), n = 20; Wilson margins."""
    x = np.array([1] * 12 + [0] * 5 + [1] * 1 + [0] * 2)
    y = np.array([1] * 12 + [1] * 5 + [0] * 1 + [0] * 2)
    est, lo, hi = SI.newcombe_paired(x, y, margins="wilson")
    p1, p2 = 17 / 20, 13 / 20
    l1, u1 = proportion_confint(17, 20, 0.05, method="wilson")
    l2, u2 = proportion_confint(13, 20, 0.05, method="wilson")
    phi = (12 * 2 - 5 * 1) / np.sqrt(17 * 3 * 13 * 7)
    assert est == pytest.approx(0.2)
    assert lo == pytest.approx(0.2 - np.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    assert hi == pytest.approx(0.2 + np.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    assert lo < 0.2 < hi and SI.newcombe_paired(x, x)[0] == 0


def test_incidence_inference_numbers(cfg):
    # 10 dialogs; BL 2/10; Black 7/10 (all BL-positive dialogs positive too); White 2/10 = BL
    bl = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    black = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    white = [1, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    v = _verdicts({"BL": bl, "Black": black, "White": white})
    r = SI.incidence_inference(v, cfg).set_index("metric")
    assert (r["N"] == 10).all()
    lo, hi = proportion_confint(2, 10, 0.05, method="beta")
    assert r.loc["BL", "estimate"] == pytest.approx(20) and r.loc["BL", "lo"] == pytest.approx(100 * lo)
    assert r.loc["ΔBL:B", "estimate"] == pytest.approx(50)
    assert r.loc["ΔBL:B", "p"] == pytest.approx(2 * 0.5 ** 5)              # exact McNemar: 5 discordant, one way
    assert r.loc["ΔBL:W", "estimate"] == pytest.approx(0)
    # max ΔBL: Black's, interval at α/2, p Bonferroni ×2
    assert r.loc["max ΔBL", "estimate"] == pytest.approx(50)
    assert r.loc["max ΔBL", "p"] == pytest.approx(min(1, 2 * 2 * 0.5 ** 5))
    assert r.loc["max ΔBL", "lo"] < r.loc["ΔBL:B", "lo"]
    assert r.loc["ΔCF", "estimate"] == pytest.approx(50)
    # %dlg: Black and White differ on dialogs 2, 4, 5, 6 → 4 of 10... and dialog 1 (1 vs 0): 5 of 10
    assert r.loc["%dlg", "estimate"] == pytest.approx(50)
    lo, hi = proportion_confint(5, 10, 0.05, method="beta")
    assert r.loc["%dlg", ["lo", "hi"]].tolist() == pytest.approx([100 * lo, 100 * hi])
    # the judge band: %dlg over G = 2 verdicts at the scribes' 9%: up to 18% of dialogs from the judge alone
    assert r.loc["%dlg", "judge e (seed)"] == pytest.approx(9)
    assert r.loc["%dlg", "band lo"] == pytest.approx(max(100 * lo - 18, 0))
    assert r.loc["%dlg", "survives judge error"] == ("yes" if 100 * lo > 18 else "no")


def test_failed_augmentations_stay_in_n_as_no_yes(cfg):
    v = _verdicts({"BL": [1, 0], "Female": [1, 1], "Male": [0, 0]}, axis="gender", context="exaggerating_symptoms")
    aug = pd.DataFrame({"dataset": "mts_dialog", "context": "exaggerating_symptoms", "speaker": "patient",
                        "ok": [True, True, False], "aug_axis": ""})
    r = SI.incidence_inference(v, cfg, aug).set_index("metric")
    assert (r["N"] == 3).all() and r.loc["BL", "estimate"] == pytest.approx(100 / 3)
    m = soap.incidence_metrics(v, cfg, aug).iloc[0]
    assert r.loc["BL", "estimate"] == pytest.approx(m["BL"])
    assert r.loc["%dlg", "estimate"] == pytest.approx(m["pct_dlg"])
    assert r.loc["ΔCF", "estimate"] == pytest.approx(m["dCF"])


def test_corrected_incidence_uses_the_labels_per_group(cfg):
    bl = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    v = _verdicts({"BL": bl, "Female": bl, "Male": bl}, axis="gender", context="exaggerating_symptoms")
    # people say two of the judge's NO on baseline notes are YES
    h = pd.DataFrame({"model": "m", "item_id": [f"m|d{i}" for i in range(10)], "condition": "gender:BL",
                      "sample": 0, "label": ["YES", "YES", "YES", "YES"] + ["NO"] * 6})
    r = SI.corrected_incidence(v, h, cfg).set_index("what")
    assert r.loc["BL", "raw"] == pytest.approx(20) and r.loc["BL", "corrected"] == pytest.approx(40)
    assert np.isnan(r.loc["Female", "corrected"]) and np.isnan(r.loc["ΔBL:Female", "corrected"])
    with pytest.raises(ValueError, match="match no judge verdict"):
        SI.corrected_incidence(v, h.iloc[:1].assign(item_id="m|zz"), cfg)
