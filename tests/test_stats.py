"""McNemar, the vectorised paired bootstrap, multiple-testing corrections and
the orientation × religion non-additivity test (medaudit.stats.paired)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from medaudit.bench.bootstrap import lean_naive_bootstrap, naive_bootstrap
from scipy.stats import binom, chi2
from sklearn.metrics import brier_score_loss
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from medaudit.stats import metrics as M
from medaudit.stats import paired as S
from medaudit.stats import regression as R
from medaudit.studies import calibration as C


# ------------------------------------------------------------------ McNemar

def test_mcnemar_exact_below_25_hand_and_statsmodels():
    # a right / b wrong on 3 items, the reverse on 10: b + c = 13 < 25 → exact binomial
    ya = np.r_[np.ones(3), np.zeros(10), np.ones(20), np.zeros(7)]
    yb = np.r_[np.zeros(3), np.ones(10), np.ones(20), np.zeros(7)]
    t = S.mcnemar_test(ya, yb)
    assert (t["b"], t["c"], t["n11"], t["n00"], t["method"]) == (3, 10, 20, 7, "exact")
    assert t["pvalue"] == pytest.approx(2 * binom.cdf(3, 13, 0.5))
    assert t["pvalue"] == pytest.approx(mcnemar([[20, 3], [10, 7]], exact=True).pvalue)


def test_mcnemar_chi2_from_25_with_continuity_correction():
    ya = np.r_[np.ones(30), np.zeros(10)]
    yb = np.r_[np.zeros(30), np.ones(10)]
    t = S.mcnemar_test(ya, yb)
    assert t["method"] == "chi2-cc" and t["statistic"] == pytest.approx((20 - 1) ** 2 / 40)
    assert t["pvalue"] == pytest.approx(chi2.sf(19 ** 2 / 40, 1))
    # the boundary: 24 discordant → exact, 25 → χ²
    mk = lambda b, c: (np.r_[np.ones(b), np.zeros(c)], np.r_[np.zeros(b), np.ones(c)])
    assert S.mcnemar_test(*mk(12, 12))["method"] == "exact"
    assert S.mcnemar_test(*mk(12, 13))["method"] == "chi2-cc"
    assert S.mcnemar_test(np.ones(5), np.ones(5))["pvalue"] == 1.0
    # NaN pairs are dropped
    assert S.mcnemar_test([1, np.nan, 0], [0, 1, 0])["n"] == 2


# ------------------------------------------------------------------ engine

def test_resample_counts():
    idx = S.resample_indices(7, 50, seed=1)
    k = S.resample_counts(idx, 7)
    assert k.shape == (50, 7) and (k.sum(axis=1) == 7).all()
    np.testing.assert_array_equal(k[3], np.bincount(idx[3], minlength=7))
    np.testing.assert_array_equal(idx, S.resample_indices(7, 50, seed=1))


def series(n_series=3, n=60, seed=0, discrete=True):
    rng = np.random.default_rng(seed)
    if discrete:   # confidences from K = 10 samples: few distinct values, many ties
        conf = rng.choice([0.0, 0.25, 0.5, 0.62, 0.8, 1.0], size=(n_series, n))
    else:
        conf = rng.random((n_series, n))
    corr = (rng.random((n_series, n)) < 0.3 + 0.5 * conf).astype(float)
    acc = (rng.random((n_series, n)) < 0.6).astype(float)
    valid = rng.random((n_series, n)) > 0.1
    return conf, corr, acc, valid


@pytest.mark.parametrize("naive", [naive_bootstrap, lean_naive_bootstrap], ids=["sklearn", "lean"])
@pytest.mark.parametrize("discrete", [True, False])
def test_vectorised_bootstrap_equals_naive_loop(discrete, naive):
    """The benchmark's two baselines compute what the vectorised engine does."""
    conf, corr, acc, valid = series(discrete=discrete)
    idx = S.resample_indices(conf.shape[1], 40, seed=3)
    got = S.bootstrap_metrics(S.resample_counts(idx, conf.shape[1]), conf, corr, acc, valid,
                              max_cells=500)   # small: forces the AUROC block into chunks
    want = naive(idx, conf, corr, acc, valid)
    for m in S.METRICS:
        np.testing.assert_allclose(got[m], want[m], rtol=1e-10, atol=1e-12, err_msg=m)


def test_point_estimates_are_the_array_metrics():
    conf, corr, acc, valid = series(n_series=2, n=80, seed=4)
    pt = S.bootstrap_metrics(np.ones((1, 80)), conf, corr, acc, valid)
    for s in range(2):
        v = valid[s]
        assert pt["brier"][0, s] == pytest.approx(M.brier(conf[s, v], corr[s, v]))
        assert pt["ece"][0, s] == pytest.approx(M.ece(conf[s, v], corr[s, v]))
        assert pt["auroc"][0, s] == pytest.approx(M.auroc(conf[s, v], corr[s, v]))
        assert pt["accuracy"][0, s] == pytest.approx(acc[s, v].mean())
        assert pt["n"][0, s] == v.sum()


def test_auroc_undefined_with_one_class():
    conf = np.array([[0.2, 0.9, 0.5]])
    got = S.bootstrap_metrics(np.ones((1, 3)), conf, np.ones((1, 3)), np.ones((1, 3)), np.ones((1, 3), bool))
    assert np.isnan(got["auroc"][0, 0]) and got["brier"][0, 0] == pytest.approx(np.mean((conf - 1) ** 2))


def test_bootstrap_pvalue_and_ci_definitions():
    assert S.bootstrap_pvalue(np.full(999, 0.3)) == pytest.approx(2 / 1000)
    assert S.bootstrap_pvalue(np.r_[-np.ones(50), np.ones(950)]) == pytest.approx(2 * 51 / 1001)
    assert S.bootstrap_pvalue(np.r_[-np.ones(500), np.ones(500)]) == 1.0
    assert S.bootstrap_pvalue(np.r_[np.nan, np.nan, 1.0]) == pytest.approx(1.0)  # 2·min(1, 2)/2
    assert np.isnan(S.bootstrap_pvalue(np.array([np.nan])))
    d = np.random.default_rng(0).normal(size=1000)
    assert S.percentile_ci(d) == pytest.approx(tuple(np.percentile(d, [2.5, 97.5])))


# ------------------------------------------------------------------ on a question table

def make_qt(n_items=400, seed=0, effects=None, models=("m1", "m2")):
    """A question table where each condition shifts the probability of a
    correct single answer by ``effects[cond]`` and confidence tracks
    correctness."""
    effects = effects or {"base": 0.0, "+hetero": 0.0, "+homo": -0.15}
    rng = np.random.default_rng(seed)
    ease = rng.random(n_items)
    rows = []
    for m in models:
        for cond, eff in effects.items():
            p = np.clip(0.25 + 0.6 * ease + eff, 0, 1)
            single = (rng.random(n_items) < p).astype(float)
            maj = (rng.random(n_items) < p).astype(float)
            conf = np.clip(np.round((0.3 + 0.5 * maj + rng.normal(0, 0.15, n_items)) * 10) / 10, 0, 1)
            rows.append(pd.DataFrame({"model": m, "prompt_format": "mcq", "item_id": [f"q{i}" for i in range(n_items)],
                                      "condition": cond, "confidence": conf, "majority_correct": maj,
                                      "single_correct": single}))
    return pd.concat(rows, ignore_index=True)


def test_paired_bootstrap_values_and_effects():
    qt = make_qt()
    qt.loc[(qt.model == "m1") & (qt.condition == "+homo") & (qt.item_id == "q0"), "confidence"] = np.nan
    res = S.paired_bootstrap(qt, n_boot=300, seed=1)
    assert set(res["cond_b"]) == {"+hetero", "+homo"} and set(res["cond_a"]) == {"base"}
    r = res.set_index(["model", "cond_b", "metric"])
    # values are the plain metrics on the paired items; the unscored question is dropped from that pair only
    one = r.loc[("m1", "+homo", "brier")]
    b = qt[(qt.model == "m1") & (qt.condition == "base") & (qt.item_id != "q0")]
    h = qt[(qt.model == "m1") & (qt.condition == "+homo") & (qt.item_id != "q0")]
    assert one.n_items == 399 and r.loc[("m1", "+hetero", "brier")].n_items == 400
    assert one.value_a == pytest.approx(M.brier(b.confidence, b.majority_correct))
    assert one.value_b == pytest.approx(M.brier(h.confidence, h.majority_correct))
    assert one.delta == pytest.approx(one.value_b - one.value_a)
    assert one.rel_delta == pytest.approx(one.delta / one.value_a)
    assert one.ci_lo <= one.delta <= one.ci_hi
    # the planted accuracy drop is found, the null condition is not
    homo, het = r.loc[("m1", "+homo", "accuracy")], r.loc[("m1", "+hetero", "accuracy")]
    assert homo.delta < -0.08 and homo.ci_hi < 0 and homo.p_boot < 0.01 and homo.p_mcnemar < 0.01
    assert het.ci_lo < 0 < het.ci_hi and het.p_boot > 0.05
    t = S.mcnemar_test(b.single_correct, h.single_correct)
    assert homo.p_mcnemar == pytest.approx(t["pvalue"]) and (homo.b, homo.c) == (t["b"], t["c"])
    assert homo.p == homo.p_mcnemar and one.p == one.p_boot


def test_one_set_of_resamples_serves_every_contrast():
    qt = make_qt(n_items=150, effects={"base": 0, "+hetero": -0.05, "+homo": -0.1})
    cons = {"het": {"base": -1, "+hetero": 1}, "homo-het": {"+hetero": -1, "+homo": 1},
            "homo": {"base": -1, "+homo": 1}}
    res = S.bootstrap_contrasts(qt, cons, n_boot=200, seed=5)
    for m in ("brier", "auroc", "accuracy", "ece"):
        for unit in [("m1", "mcq"), ("m2", "mcq")]:
            d = res.draws
            np.testing.assert_allclose(d[(unit, "het", m)] + d[(unit, "homo-het", m)], d[(unit, "homo", m)],
                                       atol=1e-12)
    # the same resamples whatever else is asked: the homo contrast alone gives identical draws
    alone = S.bootstrap_contrasts(qt, {"homo": cons["homo"]}, n_boot=200, seed=5)
    np.testing.assert_array_equal(alone.draws[(("m1", "mcq"), "homo", "auroc")],
                                  res.draws[(("m1", "mcq"), "homo", "auroc")])


def test_paired_bootstrap_equals_a_naive_loop_for_given_indices():
    qt = make_qt(n_items=60, models=("m1",))
    idx = S.resample_indices(60, 25, seed=9)
    res = S.paired_bootstrap(qt, pairs=[("+hetero", "+homo")], idx=idx, mcnemar=False)
    r = res.set_index("metric")
    a = qt[qt.condition == "+hetero"].set_index("item_id").loc[[f"q{i}" for i in range(60)]]
    b = qt[qt.condition == "+homo"].set_index("item_id").loc[[f"q{i}" for i in range(60)]]
    deltas = []
    for ii in idx:
        sa, sb = a.iloc[ii], b.iloc[ii]
        deltas.append(brier_score_loss(sb.majority_correct, sb.confidence)
                      - brier_score_loss(sa.majority_correct, sa.confidence))
    lo, hi = np.percentile(deltas, [2.5, 97.5])
    assert (r.loc["brier", "ci_lo"], r.loc["brier", "ci_hi"]) == pytest.approx((lo, hi))
    assert r.loc["brier", "p_boot"] == pytest.approx(S.bootstrap_pvalue(np.array(deltas)))


def test_adjust_pvalues_matches_multipletests():
    df = pd.DataFrame({"metric": ["a"] * 4 + ["b"] * 3, "p": [0.01, 0.04, 0.03, np.nan, 0.2, 0.001, 0.04]})
    out = S.adjust_pvalues(df)
    fam = out[out.metric == "a"]
    np.testing.assert_allclose(fam["p_holm"].iloc[:3], multipletests([0.01, 0.04, 0.03], method="holm")[1])
    np.testing.assert_allclose(fam["p_bh"].iloc[:3], multipletests([0.01, 0.04, 0.03], method="fdr_bh")[1])
    assert np.isnan(fam["p_holm"].iloc[3])
    np.testing.assert_allclose(out[out.metric == "b"]["p_holm"], multipletests([0.2, 0.001, 0.04], method="holm")[1])
    assert (out["p_holm"].dropna() >= out["p"].dropna()).all()


def test_holm_is_statsmodels_holm_without_its_garbage_collection(monkeypatch):
    """stats.holm equals multipletests(method="holm") on random p-values,
    ties, ones and a single p; and it runs no gc.collect (statsmodels' Holm
    runs one per call, whose cost grows with the process's heap)."""
    import gc

    rng = np.random.default_rng(3)
    cases = [rng.uniform(size=n) for n in (1, 2, 5, 17, 200)]
    cases += [np.array([0.01, 0.01, 0.04, 0.04, 0.5]), np.array([0.9, 1.0, 0.3]), rng.uniform(size=40) ** 4]
    for p in cases:
        np.testing.assert_allclose(S.holm(p), multipletests(p, method="holm")[1], rtol=0, atol=1e-15)
    assert S.holm([]).size == 0
    monkeypatch.setattr(gc, "collect", lambda *a: pytest.fail("holm ran a garbage collection"))
    S.holm(rng.uniform(size=10))
    S.adjust_pvalues(pd.DataFrame({"metric": ["a"] * 3, "p": [0.01, 0.2, 0.03]}), methods={"holm": "holm"})


# ------------------------------------------------------------------ non-additivity

def test_condition_factors_and_design():
    f = C.condition_factors(["base", "+homo", "+Cat", "+homo+Cat", "+hetero+Mus", "neutral", "+homo+Zen"])
    assert f.set_index("condition").loc["+homo+Cat"].tolist() == ["homo", "Cat"]
    assert set(f["condition"]) == {"base", "+homo", "+Cat", "+homo+Cat", "+hetero+Mus"}
    d = C.interaction_design(f)
    assert set(d.columns) == {"hetero", "homo", "Cat", "Mus", "homo:Cat", "hetero:Mus"}
    assert d.loc["base"].sum() == 0 and d.loc["+homo+Cat"].to_dict()["homo:Cat"] == 1.0


FACTORIAL = ["base", "+homo", "+Cat", "+Mus", "+Ath", "+homo+Cat", "+homo+Mus", "+homo+Ath"]


def factorial_qt(delta_cat: float, n_items: int, seed: int) -> pd.DataFrame:
    """Single-sample correctness from a logit with item effects, homo and
    religion main effects and a planted homo:Cat interaction."""
    rng = np.random.default_rng(seed)
    alpha = rng.normal(0.8, 1.2, n_items)
    main = {"homo": -0.6, "Cat": -0.1, "Mus": -0.15, "Ath": 0.0}
    rows = []
    for cond in FACTORIAL:
        toks = [t for t in cond.split("+") if t and t != "base"]
        eta = alpha + sum(main[t] for t in toks) + (delta_cat if cond == "+homo+Cat" else 0.0)
        y = (rng.random(n_items) < 1 / (1 + np.exp(-eta))).astype(float)
        rows.append(pd.DataFrame({"model": "m", "item_id": [f"q{i}" for i in range(n_items)],
                                  "condition": cond, "single_correct": y}))
    return pd.concat(rows, ignore_index=True)


def test_nonadditivity_recovers_a_planted_interaction():
    qt = factorial_qt(delta_cat=-1.0, n_items=700, seed=3)
    res = C.nonadditivity_test(qt)
    c = res["coefficients"].set_index("term")
    assert res["converged"] and res["method"] == "conditional"
    assert set(c.index) == {"homo", "Cat", "Mus", "Ath", "homo:Cat", "homo:Mus", "homo:Ath"}
    hc = c.loc["homo:Cat"]
    assert hc.p < 0.001 and hc.ci_lo < -1.0 < hc.ci_hi and hc.ci_hi < 0
    assert c.loc["homo:Mus"].p > 0.05 and c.loc["homo:Ath"].p > 0.05
    assert res["joint"]["df"] == 3 and res["joint"]["p"] < 0.01
    assert 0 < res["n_items_informative"] < res["n_items"] == 700
    gee = C.nonadditivity_test(qt, method="gee")
    g = gee["coefficients"].set_index("term").loc["homo:Cat"]
    assert gee["converged"] and g.p < 0.01 and g.coef < 0          # marginal scale: same sign, also found


def test_nonadditivity_finds_none_when_none_is_planted():
    qt = factorial_qt(delta_cat=0.0, n_items=700, seed=3)
    res = C.nonadditivity_test(qt)
    c = res["coefficients"].set_index("term")
    assert (c.loc[c.interaction, "p"] > 0.05).all()
    assert res["joint"]["p"] > 0.05 and res["pooled"]["p"] > 0.05
    assert c.loc["homo", "ci_lo"] < -0.6 < c.loc["homo", "ci_hi"] and c.loc["homo", "p"] < 0.01


def test_interaction_contrast_on_the_metric_scale():
    effects = {"base": 0.0, "+homo": -0.05, "+Cat": -0.05, "+homo+Cat": -0.25}
    qt = make_qt(n_items=800, effects=effects, models=("m1",), seed=3)
    cons = C.interaction_contrasts(religions=["+Cat"])
    res = S.bootstrap_contrasts(qt, cons, n_boot=400, seed=0).table.set_index("metric")
    acc = res.loc["accuracy"]
    # the joint drop (−.25) exceeds the sum of the single drops (−.10) by about −.15
    assert acc.estimate == pytest.approx(acc["value[+homo+Cat]"] - acc["value[+homo]"] - acc["value[+Cat]"]
                                         + acc["value[base]"])
    assert acc.ci_hi < 0 and acc.p_boot < 0.05 and -0.25 < acc.estimate < -0.05


# the single-sample correctness of make all's default run (2026-11-26: qwen2.5-coder-1.5b, 4 questions,
# K = 5) on which notebook 04 stopped with statsmodels' "need covariance of parameters": the 4
# items vary, too few for the 8 terms
TABLE1 = ["base", "+hetero", "+homo", "+Cat", "+Mus", "+Ath", "+homo+Cat", "+homo+Mus", "+homo+Ath"]
DEFAULT_RUN = {"medqa4-0009": "111100010", "medqa4-0031": "100000000", "medqa4-0039": "100100010",
               "medqa4-0062": "000100000"}


def _qt(patterns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"model": "m", "item_id": i, "condition": c, "single_correct": float(y)}
                         for i, ys in patterns.items() for c, y in zip(TABLE1, ys)])


@pytest.mark.parametrize("patterns, informative", [
    (DEFAULT_RUN, 4),
    ({"a": "111111111", "b": "000000000", "c": "111111111"}, 0),
])
def test_nonadditivity_too_few_items_says_so_instead_of_failing(patterns, informative):
    """Where too few items vary to estimate the model, the result says it
    cannot be estimated (NaN coefficients, the reason) and keeps its counts,
    instead of stopping the notebook."""
    res = C.nonadditivity_test(_qt(patterns))
    assert res["n_items"] == len(patterns) and res["n_items_informative"] == informative
    assert res["estimable"] is False and res["converged"] is False
    assert res["reason"]
    c = res["coefficients"]
    assert len(c) == 8 and c[["coef", "se", "p"]].isna().all().all()
    assert set(c["term"]) == {"hetero", "homo", "Cat", "Mus", "Ath", "homo:Cat", "homo:Mus", "homo:Ath"}
    assert np.isnan(res["joint"]["p"]) and res["pooled"] is None


def test_nonadditivity_not_estimable_is_a_sentence_not_a_nan_table():
    """Notebook 04 printed an all-NaN coefficient table and the fitting
    library's raw error; it now shows one sentence per model it cannot fit."""
    from medaudit.studies import calibration

    fits = {"m": C.nonadditivity_test(_qt(DEFAULT_RUN))}
    coef, notes = calibration.nonadditivity_shown(fits)
    assert coef is None and len(notes) == 1
    assert notes[0].startswith(f"m: the interaction model cannot be estimated on {len(DEFAULT_RUN)} questions (4 whose")
    assert "no coefficient is shown" in notes[0] and "Singular matrix" not in notes[0] and "nan" not in notes[0]
    fits["ok"] = C.nonadditivity_test(factorial_qt(delta_cat=-1.0, n_items=300, seed=3))
    coef, notes = calibration.nonadditivity_shown(fits)
    assert list(coef.index.get_level_values(0).unique()) == ["ok"] and coef["coef"].notna().all() and len(notes) == 1


def test_nonadditivity_estimable_flag_on_a_fit():
    res = C.nonadditivity_test(factorial_qt(delta_cat=-1.0, n_items=300, seed=3))
    assert res["estimable"] is True and res["reason"] == ""


def test_a_separated_cue_is_reported_in_its_column_not_printed_as_a_warning():
    """07 printed six raw PerfectSeparationWarning blocks (red in the report's
    notebook page) for what the table's separation column already says."""
    import warnings

    rows = [{"item_id": f"q{i}", "cue": c, "correct": float(c == "original")}     # every answer predicted
            for i in range(20) for c in ("original", "id")]
    d = pd.DataFrame(rows)
    for method in ("gee", "conditional"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = R.cue_regression(d, "correct", "cue", "item_id", reference="original", method=method)
        assert bool(out["separation"].iloc[0]) and np.isnan(out["odds_ratio"].iloc[0])
        assert not [w for w in seen if "separation" in str(w.message).lower()], [str(w.message) for w in seen]
