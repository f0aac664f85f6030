"""Paired and clustered errors, minimum detectable effects, the
power planner, one regression across cues and Stuart–Maxwell. Each
estimator against statsmodels or a hand computation on fixed data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sstats
from statsmodels.discrete.conditional_models import ConditionalLogit
from statsmodels.stats.contingency_tables import SquareTable

from medaudit.validation import power as P
from medaudit.stats import paired as S
from medaudit.stats import regression as R
from medaudit.report import tables
from medaudit.stats import testpower as T

TOL = 1e-9


def _fixed(seed: int = 7, n_q: int = 40, per: int = 3):
    """Paired scores, ``per`` rows per question (three cultures of one
    question), correlated within the question."""
    rng = np.random.default_rng(seed)
    q = np.repeat(np.arange(n_q), per)
    u = rng.normal(0, 1, n_q)[q]
    a = (rng.normal(0, 1, q.size) + u > 0).astype(float)
    b = (rng.normal(-0.3, 1, q.size) + u + 0.8 * rng.normal(0, 1, n_q)[q] > 0).astype(float)
    return a, b, q


# ------------------------------------------------------------------ paired delta

def test_paired_delta_equals_statsmodels_ols_naive_and_clustered():
    a, b, q = _fixed()
    e = S.paired_delta(a, b, q)
    d = b - a
    X = np.ones((d.size, 1))
    naive = sm.OLS(d, X).fit()
    clus = sm.OLS(d, X).fit(cov_type="cluster", cov_kwds={"groups": q}, use_t=True)
    assert e["delta"] == pytest.approx(naive.params[0], abs=TOL)
    assert e["se_paired"] == pytest.approx(naive.bse[0], abs=TOL)
    lo, hi = naive.conf_int()[0]
    assert (e["ci_lo"], e["ci_hi"]) == pytest.approx((lo, hi), abs=TOL)
    # clustered: statsmodels' CR1 (G/(G−1)) with a t on G − 1 df
    assert e["se_cluster"] == pytest.approx(clus.bse[0], abs=TOL)
    lo, hi = clus.conf_int()[0]
    assert (e["ci_cluster_lo"], e["ci_cluster_hi"]) == pytest.approx((lo, hi), abs=TOL)
    assert e["n"] == 120 and e["n_clusters"] == 40
    # by hand: Σ over clusters of the summed residuals, squared
    r = pd.Series(d - d.mean()).groupby(q).sum().to_numpy()
    assert e["se_cluster"] == pytest.approx(np.sqrt(40 / 39 * (r ** 2).sum()) / 120, abs=TOL)
    assert e["rho"] == pytest.approx(np.corrcoef(a, b)[0, 1], abs=TOL)
    assert e["se_unpaired"] == pytest.approx(np.sqrt(a.var(ddof=1) / 120 + b.var(ddof=1) / 120), abs=TOL)
    # the questions' rows are correlated: the clustered SE is the larger one here
    assert e["se_cluster"] > e["se_paired"] and e["design_effect"] > 1


def test_paired_delta_one_row_per_cluster_and_missing():
    a, b, _ = _fixed(per=1)
    e = S.paired_delta(a, b)
    # with one row per cluster C/(C−1)·Σr²/n² = s²/n exactly
    assert e["se_cluster"] == pytest.approx(e["se_paired"], abs=TOL)
    e2 = S.paired_delta(np.r_[a, np.nan], np.r_[b, 1.0])
    assert e2["n"] == a.size and e2["delta"] == pytest.approx(e["delta"], abs=TOL)
    with pytest.raises(ValueError):
        S.paired_delta([1, 0], [1, 0, 1])


# ------------------------------------------------------------------ variance components

def test_variance_components_by_hand():
    scores = pd.DataFrame({"question": np.repeat(["q1", "q2", "q3"], 4),
                           "value": [1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1]})
    v = S.variance_components(scores)
    m = np.array([0.75, 0.25, 1.0])
    s2 = np.array([0.25, 0.25, 0.0])                       # ddof 1 of 4 samples
    assert v["within"] == pytest.approx(s2.mean(), abs=TOL)
    assert v["var_means"] == pytest.approx(m.var(ddof=1), abs=TOL)
    between = m.var(ddof=1) - (s2 / 4).mean()
    assert v["between"] == pytest.approx(between, abs=TOL)
    assert v["icc"] == pytest.approx(between / (between + s2.mean()), abs=TOL)
    assert v["k_suggested"] == np.ceil(np.sqrt(s2.mean() / between))


# ------------------------------------------------------------------ the planner, simulated

@pytest.mark.parametrize("delta,psi,target,test", [(0.05, 0.15, 0.8, "exact"), (0.10, 0.30, 0.8, "auto"),
                                                  (0.04, 0.10, 0.9, "z"), (0.3, 0.5, 0.8, "exact")])
def test_planned_n_reaches_the_target_power_of_its_test(delta, psi, target, test):
    """The plan is the smallest n whose power under the test the
    notebook runs (exact enumeration, :mod:`medaudit.stats.testpower`) reaches the
    target; Connor's z formula fell 1-5 points short under the exact test."""
    plan = P.plan_mcnemar(delta, psi, alpha=0.05, power=target, test=test)
    assert plan["n"] == T.mcnemar_n(delta, psi, 0.05, target, test)
    assert plan["power_at_n"] >= target > T.mcnemar_power(plan["n"] - 1, delta, psi, 0.05, test)


def test_planned_questions_and_k_reach_the_target_power_in_simulation():
    """K-sample means (Miller): questions with true scores p_i, K samples
    each, a paired z test on the question means."""
    rng = np.random.default_rng(3)
    pa = rng.beta(3, 2, 5000)                               # pilot: true scores of the questions
    pb = np.clip(pa - 0.05 + rng.normal(0, 0.08, pa.size), 0.01, 0.99)
    k = 5
    within = lambda p: (p * (1 - p)).mean()                  # noqa: E731
    w = T.omega2(pa.var(), pb.var(), np.cov(pa, pb)[0, 1], within(pa), within(pb), k)
    delta = float(pb.mean() - pa.mean())
    n = int(np.ceil(T.mean_n(delta, w)))
    sims = np.random.default_rng(4)
    idx = sims.integers(0, pa.size, size=(2000, n))
    sa = sims.binomial(k, pa[idx]) / k
    sb = sims.binomial(k, pb[idx]) / k
    d = sb - sa
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    assert abs((np.abs(z) > sstats.norm.isf(0.025)).mean() - 0.8) <= 0.03


# ------------------------------------------------------------------ regression across cues

def _cue_data(seed=2, n_q=150):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_q):
        base = rng.normal(0.5, 1.5)
        for cue, eff in (("original", 0.0), ("id", -0.4), ("ctx", -0.1), ("id+ctx", -0.8)):
            rows.append({"item_id": f"q{q}", "cue": cue,
                         "correct": float(rng.random() < 1 / (1 + np.exp(-(base + eff))))})
    return pd.DataFrame(rows)


def test_cue_regression_equals_statsmodels_conditional_logit():
    d = _cue_data()
    r = R.cue_regression(d, "correct", "cue", "item_id", reference="original")
    X = np.column_stack([(d["cue"] == c).to_numpy(float) for c in ("id", "ctx", "id+ctx")])
    fit = ConditionalLogit(d["correct"].to_numpy(), X, groups=pd.factorize(d["item_id"])[0]).fit(disp=0, maxiter=200)
    np.testing.assert_allclose(r["coef"], fit.params, atol=TOL)
    np.testing.assert_allclose(r["se"], fit.bse, atol=TOL)
    np.testing.assert_allclose(r["odds_ratio"], np.exp(fit.params), atol=TOL)
    np.testing.assert_allclose(r["p"], fit.pvalues, atol=TOL)
    lo, hi = np.exp(fit.conf_int()).T
    np.testing.assert_allclose(r["or_lo"], lo, atol=TOL)
    np.testing.assert_allclose(r["or_hi"], hi, atol=TOL)
    from statsmodels.stats.multitest import multipletests
    np.testing.assert_allclose(r["p_holm"], multipletests(fit.pvalues, method="holm")[1], atol=TOL)
    np.testing.assert_allclose(r["p_bh"], multipletests(fit.pvalues, method="fdr_bh")[1], atol=TOL)
    assert list(r["cue"]) == ["id", "ctx", "id+ctx"] and r["converged"].all()


def test_cue_regression_of_two_conditions_is_mcnemar_odds_ratio():
    """Matched pairs: the conditional-logit MLE is log(c/b), SE √(1/b + 1/c)."""
    b, c, n11, n00 = 12, 30, 40, 18
    ya = np.r_[np.ones(b), np.zeros(c), np.ones(n11), np.zeros(n00)]
    yb = np.r_[np.zeros(b), np.ones(c), np.ones(n11), np.zeros(n00)]
    n = ya.size
    d = pd.DataFrame({"item_id": np.r_[np.arange(n), np.arange(n)], "cue": ["a"] * n + ["b"] * n,
                      "y": np.r_[ya, yb]})
    r = R.cue_regression(d, "y", "cue", "item_id").iloc[0]
    assert r["odds_ratio"] == pytest.approx(c / b, rel=1e-5)
    assert r["se"] == pytest.approx(np.sqrt(1 / b + 1 / c), rel=1e-4)
    assert r["n_groups_informative"] == b + c
    g = R.cue_regression(d, "y", "cue", "item_id", method="gee").iloc[0]
    assert g["method"] == "gee" and g["odds_ratio"] > 1


# ------------------------------------------------------------------ Stuart–Maxwell

def test_stuart_maxwell_equals_statsmodels_and_mcnemar_on_two_options():
    rng = np.random.default_rng(5)
    a = rng.choice(list("ABCD"), 200, p=[0.4, 0.3, 0.2, 0.1])
    b = np.where(rng.random(200) < 0.7, a, rng.choice(list("ABCD"), 200, p=[0.1, 0.2, 0.3, 0.4]))
    r = S.stuart_maxwell(a, b)
    tab = pd.crosstab(pd.Categorical(a, list("ABCD")), pd.Categorical(b, list("ABCD")), dropna=False).to_numpy(float)
    want = SquareTable(tab, shift_zeros=False).homogeneity()
    assert r["statistic"] == pytest.approx(want.statistic, abs=TOL)
    assert r["p"] == pytest.approx(want.pvalue, abs=TOL) and r["df"] == 3
    # two options: (b − c)² / (b + c), McNemar without continuity correction
    x = ["R"] * 10 + ["W"] * 4 + ["R"] * 20
    y = ["W"] * 10 + ["R"] * 4 + ["R"] * 20
    assert S.stuart_maxwell(x, y)["statistic"] == pytest.approx((10 - 4) ** 2 / 14, abs=TOL)
    assert np.isnan(S.stuart_maxwell(list("AB"), list("AB"))["p"])          # no discordant pair
    # an option no discordant pair involves (C) is dropped: the test on A, B, D
    a, b = list("AAAAABBBBCCD"), list("AAAABBBBBCCA")
    r = S.stuart_maxwell(a, b)
    keep = [i for i, (u, v) in enumerate(zip(a, b)) if u != "C" and v != "C"]
    tab = pd.crosstab(pd.Categorical([a[i] for i in keep], list("ABD")),
                      pd.Categorical([b[i] for i in keep], list("ABD")), dropna=False).to_numpy(float)
    want = SquareTable(tab, shift_zeros=False).homogeneity()
    assert (r["k"], r["df"]) == (3, 2) and np.isfinite(r["statistic"])
    assert r["statistic"] == pytest.approx(want.statistic, abs=TOL)


# ------------------------------------------------------------------ delta tables

def _qt(n_items: int = 8, seed: int = 1) -> pd.DataFrame:
    """A question table on ``n_items`` questions where +homo loses every
    question base gets right (a significant drop on n < 30)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_items):
        for cond, acc in (("base", 1.0), ("+homo", 0.0)):
            rows.append({"model": "m", "item_id": f"q{i}", "condition": cond, "single_correct": acc,
                         "majority_correct": acc, "confidence": float(rng.random())})
    return pd.DataFrame(rows)


def test_paired_bootstrap_rows_carry_clustered_se_and_mde():
    res = S.adjust_pvalues(S.paired_bootstrap(_qt(), n_boot=200, seed=0))
    acc = res[res["metric"] == "accuracy"].iloc[0]
    assert acc["b"] == 8 and acc["c"] == 0
    # the MDE of the test the cell runs (exact McNemar below 25 discordant pairs), 94.5 points,
    # not the z test's 84.98 (the exact test has power 0.54 there)
    assert acc["mde"] == pytest.approx(T.mcnemar_mde(8, 1.0, test="exact"), abs=TOL)
    assert round(100 * acc["mde"], 1) == 94.5
    assert T.mcnemar_power(8, acc["mde"], 1.0, test="exact") == pytest.approx(0.8, abs=1e-8)
    assert acc["se_paired"] == pytest.approx(0.0, abs=TOL) and acc["n_clusters"] == 8
    conf = res[res["metric"] == "confidence"].iloc[0]
    qt = _qt()
    e = S.paired_delta(qt[qt.condition == "base"]["confidence"].to_numpy(),
                       qt[qt.condition == "+homo"]["confidence"].to_numpy())
    assert conf["se_cluster"] == pytest.approx(e["se_cluster"], abs=TOL)
    assert conf["mde"] == pytest.approx(T.mde_from_se(e["se_cluster"]), abs=TOL)
    auroc = res[res["metric"] == "ece"].iloc[0]
    assert auroc["mde_method"] == "z on se_boot"


def test_a_star_on_n_below_30_comes_with_its_mde():
    res = S.adjust_pvalues(S.paired_bootstrap(_qt(), n_boot=200, seed=0))
    t = tables.delta_table(res, "accuracy")
    cell = t["text"].loc["m", "+homo"]
    assert cell.startswith("-100.00*") and cell.endswith("(n=8, MDE 94.50)")
    # every marked cell on n < 30 carries an MDE, whichever metric
    for metric in ("confidence", "brier", "ece"):
        txt = tables.delta_table(res, metric)["text"].loc["m", "+homo"]
        if "*" in txt:
            assert "MDE" in txt


def test_significance_note():
    assert S.significance_note(500, 0.01) == ""
    assert S.significance_note(8, 0.354) == "n=8, MDE 35.4 pts"
    assert S.significance_note(8, np.inf) == "n=8, no effect detectable"
    assert S.significance_note(8, np.nan) == "n=8, MDE n/a"


# ------------------------------------------------------------------ the planner CLI

def test_planner_cli_help_and_unknown_flags(capsys):
    with pytest.raises(SystemExit) as e:
        P.main(["--help"])
    assert e.value.code == 0 and "--delta" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        P.main(["--delta", "5", "--no-such-flag"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        P.main(["--delta", "0"])


def test_planner_cli_with_given_numbers(capsys):
    assert P.main(["--delta", "5", "--discordance", "0.12", "--between", "0.05", "--within", "0.15",
                   "--rho", "0.6", "--k", "10"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if len(line.split()) > 6}
    assert rows["MCQ"][6] == str(T.mcnemar_n(0.05, 0.12, test="auto"))         # 04: exact below 25, else χ² cc
    assert rows["FairMedQA"][6] == str(T.mcnemar_n(0.05, 0.12, test="exact"))  # 08: exact throughout
    w = T.omega2(0.05, 0.05, 0.03, 0.15, 0.15, 10)
    assert f"{int(np.ceil(T.mean_n(0.05, w)))}" in out
    assert f"{100 * T.mcnemar_mde(147, 0.12, test='z'):.1f}" in out   # what seed 003's 147 questions detect


def test_planner_from_released_answers_uses_their_discordance():
    frame, gold = P.released_frame("fairmedqa_amqa")
    pil = P.pilot(frame, gold)
    ref = pil[pil["comparison"] == "reference"]
    assert len(gold) == 801 and (ref["reference"] == "original").all()
    # by hand for one comparison: first-sample answers under original vs race:Black
    f = frame[(frame["model"] == "GPT-4.1") & frame["parsed_answer"].notna()]
    w = f.pivot(index="item_id", columns="condition", values="parsed_answer")[["original", "race:Black"]].dropna()
    g = w.index.map(gold)
    want = ((w["original"] == g) != (w["race:Black"] == g)).mean()
    row = ref[(ref["model"] == "GPT-4.1") & (ref["condition"] == "race:Black")].iloc[0]
    assert row["psi_correct"] == pytest.approx(want, abs=TOL) and row["n"] == len(w)
    # 08 tests the counterfactual pairs (White vs Black ...), so the plan takes their ψ
    w = f.pivot(index="item_id", columns="condition", values="parsed_answer")[["race:White", "race:Black"]].dropna()
    g = w.index.map(gold)
    want = ((w["race:White"] == g) != (w["race:Black"] == g)).mean()
    pairs = pil[pil["comparison"] == "pair"]
    assert {tuple(x) for x in pairs[["reference", "condition"]].to_numpy()} == set(P.fairmedqa_pairs())
    row = pairs[(pairs["model"] == "GPT-4.1") & (pairs["condition"] == "race:Black")].iloc[0]
    assert row["reference"] == "race:White" and row["psi_correct"] == pytest.approx(want, abs=TOL)
    tab = P.binary_table(0.05, 0.05, 0.8, pil)
    fm = tab[tab["design"] == "FairMedQA pairs"].iloc[0]
    psi = np.average(pairs["psi_correct"], weights=pairs["n"])
    assert psi == pytest.approx(0.195, abs=0.001) and fm["pilot ψ"] == round(psi, 4)
    assert fm["needed"] == T.mcnemar_n(0.05, psi, test="exact") and fm["needed"] > 600
    assert fm["MDE at paper n (pts)"] == f"{100 * T.mcnemar_mde(801, psi, test='exact'):.1f}"


def test_pilot_from_questions_variance_by_hand():
    rows = []
    for i, (pb, pc) in enumerate([(0.8, 0.6), (0.4, 0.4), (1.0, 0.6), (0.2, 0.0)]):
        for cond, p, single in (("base", pb, 1.0 if i % 2 == 0 else 0.0), ("+homo", pc, 0.0)):
            rows.append({"model": "m", "item_id": f"q{i}", "condition": cond, "n_samples": 5,
                         "p": {"A": p, "B": 1 - p}, "gold": "A", "single_correct": single})
    pil = P.pilot_from_questions(pd.DataFrame(rows))
    r = pil.iloc[0]
    assert r["psi_correct"] == pytest.approx(0.5, abs=TOL) and r["k"] == 5
    w = np.array([p * (1 - p) * 5 / 4 for p in (0.8, 0.4, 1.0, 0.2, 0.6, 0.4, 0.6, 0.0)]).mean()
    assert r["within"] == pytest.approx(w, abs=TOL)
    ma, mb = np.array([0.8, 0.4, 1.0, 0.2]), np.array([0.6, 0.4, 0.6, 0.0])
    assert r["cov_ab"] == pytest.approx(np.cov(ma, mb, ddof=1)[0, 1], abs=TOL)


def test_planner_loads_no_model_library():
    """The planner is pure pandas / scipy / statsmodels, even when it reads a
    release whose conditions come from the cultural study's definitions."""
    import subprocess
    import sys

    code = ("import sys; from medaudit.validation import power; "
            "power.main(['--delta', '5', '--released', 'cultural_cues_hive']); "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'llama_cpp', 'transformers', 'vllm', 'sentence_transformers')]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "cultural flips" in r.stdout and "answer changes (upper bound)" in r.stdout


def test_a_cue_right_on_every_question_is_reported_as_separation():
    """GEE under separation reported coefficient 34.7, SE
    0.28, p ≈ 0, "converged". A cue whose data separate has no finite
    estimate: no coefficient, no p, separation named."""
    d = _cue_data()
    d.loc[d["cue"] == "ctx", "correct"] = 1.0                # right on every question
    for method in ("gee", "conditional"):
        r = R.cue_regression(d, "correct", reference="original", method=method).set_index("cue")
        assert bool(r.loc["ctx", "separation"]) and not bool(r.loc["ctx", "converged"])
        assert np.isnan(r.loc["ctx", "coef"]) and np.isnan(r.loc["ctx", "p"])
        assert not r.loc[["id", "id+ctx"], "separation"].any()
        assert r.loc[["id", "id+ctx"], "p"].notna().all()


def test_a_pair_mark_carries_the_mde_of_its_own_pair():
    """A ‡ (+homo vs +hetero) showed the MDE of the
    comparison with Base. With the pair's n and MDE it shows its own."""
    res = S.adjust_pvalues(S.paired_bootstrap(_qt(), n_boot=200, seed=0))
    res = res[res["metric"] == "accuracy"]
    pair_p = pd.DataFrame({"+homo": [0.01]}, index=pd.Index(["m"], name="model"))
    pair_n = pd.DataFrame({"+homo": [12]}, index=pair_p.index)
    pair_mde = pd.DataFrame({"+homo": [0.6]}, index=pair_p.index)
    cell = tables.delta_table(res, "accuracy", pair_p=pair_p, pair_n=pair_n,
                              pair_mde=pair_mde)["text"].loc["m", "+homo"]
    assert cell == "-100.00*†‡ (n=8, MDE 94.50; ‡ n=12, MDE 60.00)"
    # a ‡ alone carries only its pair's note
    res2 = res.assign(p=0.5, p_holm=0.5)
    cell = tables.delta_table(res2, "accuracy", pair_p=pair_p, pair_n=pair_n,
                              pair_mde=pair_mde)["text"].loc["m", "+homo"]
    assert cell == "-100.00‡ (‡ n=12, MDE 60.00)"


def test_the_k_plan_says_in_words_when_no_k_can_be_suggested():
    """04 printed "suggested K = … = n/a (no variance across questions in the
    pilot)": a missing number inside a sentence."""
    from medaudit.report import findings

    text = P.means_section(0.05, 0.05, 0.8, None, between=0.0, within=0.1, rho=0.0, k=10)
    assert "no K is suggested: the pilot shows no variance across questions" in text
    assert not findings.unreadable("\n".join(x for x in text.splitlines() if "K =" in x or "no K" in x))
    assert "suggested K = √(1 · within / between) = 2 " in P.means_section(0.05, 0.05, 0.8, None, between=0.05,
                                                                              within=0.1, rho=0.0, k=10)
