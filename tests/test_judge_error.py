"""Judge error carried through: prediction-powered
correction with human labels, checked against ``ppi-python`` and by a
constructed judge whose errors differ by group; the sensitivity band
without labels."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from medaudit.stats import judge_error as J

P_A, P_B = J.TRUE_RATES         # the people's rates: the true disparity B − A is −10 points


def _world(rng, n_questions: int, label_share: float, sens=J.JUDGE_SENS, spec=J.JUDGE_SPEC):
    return J.constructed_audit(rng, n_questions, label_share, sens, spec)


def _run(df):
    return J.ppi_contrasts(df, {"B - A": {"B": 1, "A": -1}}).set_index("what")


def test_a_judge_erring_by_group_makes_the_raw_disparity_wrong_and_the_correction_recovers_it():
    """The constructed judge: as good as the seed's in A (95/95), poor in B
    (sensitivity 0.80, specificity 0.60). The judge's rates are A 0.59, B
    0.60: it reports no disparity (+1 point) where people see −10. With
    30% of rows labelled, the corrected interval covers −10 in ≥ 93% of
    400 audits of 300 questions; the raw interval in under a quarter."""
    rng = np.random.default_rng(49)
    truth = P_B - P_A
    cover = raw_cover = 0
    est, raw = [], []
    R = 400
    for _ in range(R):
        r = _run(_world(rng, 300, 0.3)).loc["B - A"]
        cover += r["lo"] <= truth <= r["hi"]
        raw_cover += r["raw_lo"] <= truth <= r["raw_hi"]
        est.append(r["corrected"])
        raw.append(r["raw"])
    assert abs(np.mean(est) - truth) < 0.01                 # unbiased
    assert np.mean(raw) == pytest.approx(0.01, abs=0.01)    # the judge's own rates: no gap at all
    assert cover / R >= 0.93, cover / R
    assert raw_cover / R < 0.25, raw_cover / R
    one = _run(_world(np.random.default_rng(1), 300, 0.3)).loc["B - A"]
    assert one["raw"] > -0.05 and one["corrected"] < -0.05  # the raw says "no gap"; the corrected finds it


@pytest.mark.slow   # 25 s: 2,000 simulated audits (docs/statistics.md has the table)
@pytest.mark.parametrize("n_questions,share", [(120, 0.5), (1000, 0.06)])
def test_corrected_rates_and_disparity_cover_across_sizes(n_questions, share):
    """Coverage of each group's corrected rate and of the disparity stays
    ≥ 93% with 60 labels per group, few or many questions (1,000 audits each)."""
    rng = np.random.default_rng(n_questions)
    truth = {"A": P_A, "B": P_B, "B - A": P_B - P_A}
    hits = {k: 0 for k in truth}
    R = 1000
    for _ in range(R):
        r = _run(_world(rng, n_questions, share))
        for k, t in truth.items():
            hits[k] += r.loc[k, "lo"] <= t <= r.loc[k, "hi"]
    assert min(h / R for h in hits.values()) >= 0.93, hits


def test_equals_ppi_python_classic_ppi_on_one_group():
    """One group, one row per cluster, labelled rows apart from the
    unlabelled ones as ppi-python takes them: our corrected rate is
    ``ppi_mean_pointestimate(lam=1)`` and our interval ``ppi_mean_ci(lam=1)``
    up to z vs t and the package's treatment of the labelled rows' own
    predictions (it averages Ŷ over the unlabelled rows only)."""
    ppi_py = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(7)
    n, N = 400, 4000
    y = (rng.random(n + N) < 0.3).astype(float)
    yhat = np.where(y == 1, rng.random(n + N) < 0.85, rng.random(n + N) < 0.1).astype(float)
    Y, Yhat, Yhat_u = y[:n], yhat[:n], yhat[n:]
    # ours with the package's estimator: Ŷ averaged over the unlabelled rows, the rectifier over the labelled
    point = float(np.asarray(ppi_py.ppi_mean_pointestimate(Y, Yhat, Yhat_u, lam=1)).ravel()[0])
    lo, hi = (float(np.asarray(v).ravel()[0]) for v in ppi_py.ppi_mean_ci(Y, Yhat, Yhat_u, alpha=0.05, lam=1))
    ours_point = Yhat_u.mean() + (Y - Yhat).mean()
    assert ours_point == pytest.approx(point, abs=1e-12)
    # our estimator on all rows (labelled rows' predictions counted too) is within a fraction of an SE of it
    df = pd.DataFrame({"group": "g", "cluster": np.arange(n + N), "judge": yhat,
                       "human": np.concatenate([Y, np.full(N, np.nan)])})
    r = J.ppi_contrasts(df).iloc[0]
    se_pkg = (hi - lo) / 2 / sstats.norm.ppf(0.975)
    assert r["corrected"] == pytest.approx(point, abs=0.5 * se_pkg)
    assert r["se"] == pytest.approx(se_pkg, rel=0.05)
    assert r["hi"] - r["lo"] == pytest.approx(hi - lo, rel=0.06)


def test_a_perfect_judge_needs_no_correction_and_labels_only_widen_nothing():
    rng = np.random.default_rng(3)
    df = _world(rng, 200, 0.3, sens=(1, 1), spec=(1, 1))
    r = _run(df)
    assert np.allclose(r["corrected"], r["raw"])
    assert np.allclose(r["se"], r["raw_se"])


def test_a_group_without_labels_is_not_corrected_from_other_groups():
    df = _world(np.random.default_rng(5), 100, 0.3)
    df.loc[df["group"] == "B", "human"] = np.nan
    r = _run(df)
    assert np.isfinite(r.loc["A", "corrected"])
    assert np.isnan(r.loc["B", "corrected"]) and np.isnan(r.loc["B - A", "corrected"])


def test_bad_input_names_the_field():
    df = pd.DataFrame({"group": ["a"], "cluster": [1], "judge": [2], "human": [1]})
    with pytest.raises(ValueError, match="field 'judge'"):
        J.ppi_contrasts(df)
    with pytest.raises(ValueError, match="not among"):
        J.ppi_contrasts(df.assign(judge=1), {"x": {"b": 1}})


def test_join_labels_keys_and_orphans():
    v = pd.DataFrame({"model": "m", "item_id": ["q1", "q2"], "condition": "base", "sample": [0, 0],
                      "verdict": ["CORRECT", "INCORRECT"]})
    h = pd.DataFrame({"model": "m", "item_id": ["q2"], "condition": "base", "sample": [0], "label": ["CORRECT"]})
    j = J.join_labels(v, h)
    assert j["judge"].tolist() == [1.0, 0.0] and np.isnan(j["human"].iloc[0]) and j["human"].iloc[1] == 1.0
    with pytest.raises(ValueError, match="match no judge verdict"):
        J.join_labels(v, h.assign(item_id="q9"))


# --------------------------------------------------------------------------
# no labels: the band


def test_band_bounds_every_judge_within_the_disagreement_rate():
    """The band is the exact identified set: for a judge that disagrees
    with people on at most e of each group's verdicts, the true difference
    lies within spread·e of the judge's, and a judge reaching the edge
    exists. Checked on random confusion matrices."""
    rng = np.random.default_rng(11)
    e = 0.11
    for _ in range(2000):
        p = rng.random(2)
        fpr, fnr = rng.random(2) * e, rng.random(2) * e
        tot = fpr * (1 - p) + fnr * p
        obs = p * (1 - fnr) + (1 - p) * fpr
        assert np.all(tot <= e + 1e-12)
        assert abs((obs[1] - obs[0]) - (p[1] - p[0])) <= 2 * e + 1e-12
    # the edge: false positives only in one group, false negatives only in the other
    p = np.array([0.5, 0.5])
    obs = np.array([p[0] + e, p[1] - e])               # fpr = e/(1−p) in group 0, fnr = e/p in group 1
    assert (obs[0] - obs[1]) - (p[0] - p[1]) == pytest.approx(2 * e)


def test_band_tipping_point_and_verdict():
    b = J.error_band(0.30, 0.26, 0.34, e_seed=0.11)
    assert b["tipping_error"] == pytest.approx(0.13) and b["survives"]
    assert b["band_lo"] == pytest.approx(0.26 - 0.22)
    b = J.error_band(0.10, 0.04, 0.16, e_seed=0.11)
    assert b["tipping_error"] == pytest.approx(0.02) and not b["survives"]
    assert J.error_band(0.0, -0.1, 0.1, e_seed=0.05)["tipping_error"] == 0
    assert J.error_band(-0.3, -0.4, -0.2, e_seed=0.05, spread=3)["tipping_error"] == pytest.approx(0.2 / 3)
    assert J.error_band(0.05, 0.01, 0.2, e_seed=0.09, spread=2, bounds=(0, 1))["band_lo"] == 0   # a share: not below 0
    assert J.error_band(0.078, 0.0, 0.1, e_seed=0.11)["even_corrected"] == pytest.approx(0.1)


def test_seed_figures_and_kappa_conversion():
    assert J.seed_disagreement("openended") == pytest.approx(0.11)
    assert J.seed_disagreement("soap_incidence") == pytest.approx(0.09)
    # κ 0.76 at a YES share of 0.5: p_e 0.5, p_o 0.88
    assert J.seed_disagreement("cultural_judge") == pytest.approx(0.12)
    assert J.disagreement_from_kappa(0.76, 0.2) == pytest.approx(0.24 * (1 - 0.68))
    with pytest.raises(KeyError, match="no seed figure"):
        J.seed_disagreement("nope")


# --------------------------------------------------------------------------
# the notebooks' inputs


def test_openended_units_take_the_label_of_sample_0s_judged_answer():
    """05: a label names the answer the judge read (the cluster's judged
    sample); it labels sample 0's verdict when sample 0 is in that cluster."""
    from medaudit.studies import openended as O

    lab = pd.DataFrame({"model": "m", "item_id": ["q1", "q1", "q2"], "condition": "base", "sample": [0, 1, 0],
                        "cluster": [0, 0, 0], "judged_sample": [1, 1, 0],
                        "verdict": ["INCORRECT", "INCORRECT", "CORRECT"]})
    human = pd.DataFrame({"model": ["m"], "item_id": ["q1"], "condition": ["base"], "sample": [1],
                          "label": ["CORRECT"]})
    u = O.judged_units(lab, human).set_index("item_id")
    assert u.loc["q1", "judge"] == 0.0 and u.loc["q1", "human"] == 1.0
    assert u.loc["q2", "judge"] == 1.0 and np.isnan(u.loc["q2", "human"])
    assert len(u) == 2


def test_judge_table_bands_the_raw_contrast_and_corrects_with_labels():
    df = _world(np.random.default_rng(8), 300, 0.3)
    t = J.judge_table(df.assign(model="m"), {"B - A": {"B": 1, "A": -1}, "C - A": {"C": 1, "A": -1}}, 0.11)
    assert set(t["what"]) == {"A", "B", "B - A"}                     # a contrast naming an absent group is left out
    r = t.set_index("what").loc["B - A"]
    raw = J.ppi_contrasts(df, {"x": {"B": 1, "A": -1}}).set_index("what").loc["x"]
    assert r["raw"] == pytest.approx(100 * raw["raw"]) and r["corrected"] == pytest.approx(100 * raw["corrected"])
    assert r["band lo"] == pytest.approx(max(100 * raw["raw_lo"] - 22, -100))
    assert np.isnan(t.set_index("what").loc["A", "raw_lo"])          # a rate's interval is its own table's
