"""Paired and clustered errors in the studies' delta tables: clustered SE and MDE beside the
seeds' own statistics in notebook 07 (cultural) and 08 (FairMedQA), the
regression across cues and Stuart–Maxwell, each against statsmodels or a
hand computation on fixed data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from statsmodels.discrete.conditional_models import ConditionalLogit
from statsmodels.stats.contingency_tables import SquareTable

from medaudit.studies import cultural as C
from medaudit.studies.fairmedqa import metrics as fq_metrics
from medaudit.stats import intervals as I
from medaudit.stats import scoring as Sc
from medaudit.stats import sandwich
from medaudit.stats import paired as S
from medaudit.stats import testpower as T
from statsmodels.stats.power import TTestPower

TOL = 1e-9
IC, ME, SE = "indigenous_canadian", "middle_eastern_muslim", "southeast_asian"


@pytest.fixture(scope="module")
def cfg() -> C.CulturalConfig:
    return C.load_config()


def _cultural_qt(cfg, n: int = 50, seed: int = 4) -> pd.DataFrame:
    """Answers A-D per question and condition; a question's 'ability' is
    shared by its conditions, so the three cultures' rows are correlated."""
    rng = np.random.default_rng(seed)
    ability = rng.normal(0.8, 1.2, n)
    rows = []
    for c in cfg.conditions():
        shift = 0.0 if c in ("original", "neutral") else -0.5
        for i in range(n):
            right = rng.random() < 1 / (1 + np.exp(-(ability[i] + shift)))
            ans = "A" if right else rng.choice(list("BCD"))
            rows.append({"model": "m", "prompt_format": "mcq", "item_id": f"q{i}", "condition": c,
                         "parsed_answer": ans, "gold": "A"})
    return Sc.question_table(pd.DataFrame(rows))


def test_delta_avg_errors_cluster_by_question_as_statsmodels(cfg):
    qt = _cultural_qt(cfg)
    t = C.delta_avg_errors(qt, cfg).set_index(["cue", "reference"])
    w = qt.pivot(index="item_id", columns="condition", values="correct")
    for cue in cfg.cue_names:
        cols = [f"{c}:{cue}" for c in (IC, ME, SE)]
        d = np.concatenate([(w[c] - w["original"]).to_numpy() for c in cols])
        q = np.tile(w.index.to_numpy(), 3)
        X = np.ones((d.size, 1))
        naive = sm.OLS(d, X).fit()
        clus = sm.OLS(d, X).fit(cov_type="cluster", cov_kwds={"groups": pd.factorize(q)[0]}, use_t=True)
        r = t.loc[(cue, "original")]
        assert (r["questions"], r["rows"]) == (50, 150)
        assert r["delta"] == pytest.approx(100 * naive.params[0], abs=TOL)
        # eq. 2 on complete data: the mean of the three cultures' accuracies minus the original's
        acc = 100 * w.mean()
        assert r["delta"] == pytest.approx(acc[cols].mean() - acc["original"], abs=TOL)
        assert r["se_naive"] == pytest.approx(100 * naive.bse[0], abs=TOL)
        assert r["se_cluster"] == pytest.approx(100 * clus.bse[0], abs=TOL)
        # the printed interval and test are the covering ones (the t interval is inside the interval)
        ci = I.paired_interval(np.tile(w["original"].to_numpy(), 3), np.concatenate([w[c].to_numpy() for c in cols]), q)
        assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((100 * ci["lo"], 100 * ci["hi"]), abs=TOL)
        assert r["ci_lo"] <= 100 * clus.conf_int()[0][0] + 1e-9 and r["ci_hi"] >= 100 * clus.conf_int()[0][1] - 1e-9
        assert r["p"] == pytest.approx(ci["p_score"])          # the interval's own score test
        assert r["verdict"] in ("difference shown", "inconclusive", "equivalence shown within ±3")
        # the MDE of the t test run on C − 1 df (statsmodels' t power), not of a z test
        d_cohen = TTestPower().solve_power(nobs=50, alpha=0.05, power=0.8, alternative="two-sided")
        assert r["mde"] == pytest.approx(100 * d_cohen * np.sqrt(50) * clus.bse[0], rel=1e-6)
    # the three cultures of one question are correlated: clustering widens the error
    assert (t["se_cluster"] > t["se_naive"]).all()


def test_idctx_delta_carries_paired_se_and_mde(cfg):
    qt = _cultural_qt(cfg)
    b = C.idctx_delta(qt, cfg).set_index("culture")
    w = qt.pivot(index="item_id", columns="condition", values="correct")
    for c in (IC, ME, SE):
        ya, yb = w["original"].to_numpy(), w[f"{c}:id+ctx"].to_numpy()
        e = S.paired_delta(ya, yb)
        nb, nc = int(((ya == 1) & (yb == 0)).sum()), int(((ya == 0) & (yb == 1)).sum())
        r = b.loc[c]
        assert (r["b"], r["c"]) == (nb, nc)
        assert r["se_paired"] == pytest.approx(100 * e["se_paired"], abs=TOL)
        assert r["se_cluster"] == pytest.approx(r["se_paired"], abs=TOL)        # one row per question
        assert r["mde"] == pytest.approx(100 * T.mcnemar_mde(50, (nb + nc) / 50, test="exact"), abs=TOL)


def test_flip_rates_carry_stuart_maxwell(cfg):
    qt = _cultural_qt(cfg)
    f = C.flip_rates(qt, cfg).set_index("condition")
    ans = qt.pivot(index="item_id", columns="condition", values="parsed_answer")
    for cond in (f"{IC}:id", "neutral"):
        tab = pd.crosstab(pd.Categorical(ans["original"], list("ABCD")),
                          pd.Categorical(ans[cond], list("ABCD")), dropna=False).to_numpy(float)
        want = SquareTable(tab, shift_zeros=False).homogeneity()
        assert f.loc[cond, "stuart_maxwell"] == pytest.approx(want.statistic, abs=TOL)
        assert f.loc[cond, "sm_p"] == pytest.approx(want.pvalue, abs=TOL)


def test_cue_regressions_correctness_and_flips(cfg):
    qt = _cultural_qt(cfg, n=80)
    r = C.cue_regressions(qt, cfg)
    corr = r[r["outcome"] == "correct"].set_index("cue")
    assert set(corr.index) == set(cfg.cue_names) and (corr["reference"] == "original").all()
    # by hand: ConditionalLogit on original + every cultural condition, cue dummies
    d = qt[qt["condition"].isin(["original", *cfg.cultural_conditions()])].copy()
    d["cue"] = ["original" if c == "original" else cfg.split(c)[1] for c in d["condition"]]
    cues = list(pd.unique(d.loc[d["cue"] != "original", "cue"]))
    X = np.column_stack([(d["cue"] == c).to_numpy(float) for c in cues])
    fit = ConditionalLogit(d["correct"].to_numpy(), X, groups=pd.factorize(d["item_id"])[0]).fit(disp=0, maxiter=200)
    np.testing.assert_allclose(corr.loc[cues, "coef"], fit.params, atol=TOL)
    # three cultures' variants of a cue per question: the SE clustered by question (test_sandwich checks it by hand)
    cov, n_sets = sandwich.conditional_logit_cluster_cov(fit.model, fit.params)
    np.testing.assert_allclose(corr.loc[cues, "se"], np.sqrt(np.diag(cov)), rtol=1e-3)
    assert (corr["se_type"] == "clustered by item_id (CR1)").all() and (corr["df"] == n_sets - 1).all()
    assert (corr["odds_ratio"] < 1).all()                    # every cue lowers the odds of a right answer
    fl = r[r["outcome"] == "flip"]
    assert set(fl["cue"]) == set(cfg.cue_names) and (fl["reference"] == "neutral").all()
    # the flip outcome: answer differs from the original's
    ans = qt.pivot(index="item_id", columns="condition", values="parsed_answer")
    assert fl["n_obs"].iloc[0] == ans.shape[0] * (1 + len(cfg.cultural_conditions()))


def _fqt(answers: dict, gold: dict) -> pd.DataFrame:
    rows = []
    for cond, d in answers.items():
        for item, a in d.items():
            rows.append({"model": "m", "item_id": item, "condition": cond, "parsed_answer": a, "gold": gold[item],
                         "parsed": a is not None, "correct": float(a == gold[item]) if a is not None else np.nan})
    return pd.DataFrame(rows)


def test_pair_table_mde_and_paired_errors_by_hand():
    ids = [f"i{k}" for k in range(20)]
    gold = dict.fromkeys(ids, "A")
    white = {i: "A" if k < 15 else "B" for k, i in enumerate(ids)}
    black = {i: "A" if 3 <= k < 16 else "C" for k, i in enumerate(ids)}   # 3 lost, 1 gained
    black["i19"] = None
    t = fq_metrics.pair_table(_fqt({"race:White": white, "race:Black": black}, gold),
                              [("race:White", "race:Black")]).iloc[0]
    assert t["n"] == 19 and (t["mcnemar_b"], t["mcnemar_c"]) == (3, 1)
    ya = np.array([1.0 if k < 15 else 0.0 for k in range(19)])
    yb = np.array([1.0 if 3 <= k < 16 else 0.0 for k in range(19)])
    assert t["delta"] == pytest.approx(100 * (yb - ya).mean(), abs=TOL)
    assert t["se_paired"] == pytest.approx(100 * (yb - ya).std(ddof=1) / np.sqrt(19), abs=TOL)
    assert t["se_cluster"] == pytest.approx(t["se_paired"], abs=TOL)
    assert t["rho"] == pytest.approx(np.corrcoef(ya, yb)[0, 1], abs=TOL)
    # the exact test the pair ran: 4 discordant vignettes of 19 can never reach power 0.8
    assert t["mcnemar_method"] == "exact" and t["mde"] == np.inf
    assert T.mcnemar_power(19, 4 / 19, 4 / 19, test="exact") < 0.8
    auto = fq_metrics.pair_table(_fqt({"race:White": white, "race:Black": black}, gold), [("race:White", "race:Black")],
                        mcnemar="auto").iloc[0]
    assert auto["mde"] == pytest.approx(100 * T.mcnemar_mde(19, 4 / 19, test="auto"), abs=TOL)


def test_a_cochran_mark_on_n_below_30_comes_with_its_mde(cfg):
    """Tables I/II mark "✓" where Cochran's Q has p ≤ α; on the default
    profile's 8 questions that mark carries n and the MDE of Δ Avg."""
    qt = _cultural_qt(cfg, n=12, seed=1)
    # make id+ctx wrong everywhere the original is right: Q significant on 12 questions
    bad = qt["condition"].str.endswith(":id+ctx")
    qt.loc[bad, "correct"] = 0.0
    qt.loc[qt["condition"] == "original", "correct"] = 1.0
    qt.loc[qt["condition"] == "neutral", "correct"] = 1.0
    # ... but one culture's variant stays right on two questions: the paired differences vary
    qt.loc[(qt["condition"] == f"{IC}:id+ctx") & qt["item_id"].isin(["q0", "q1"]), "correct"] = 1.0
    coch = C.cochran_table(qt, cfg)
    r = coch.set_index(["cue", "reference"]).loc[("id+ctx", "original")]
    assert r["p"] <= 0.05 and r["n"] == 12 and np.isfinite(r["mde"])
    errs = C.delta_avg_errors(qt, cfg).set_index(["cue", "reference"]).loc[("id+ctx", "original")]
    assert r["mde"] == pytest.approx(errs["mde"], abs=TOL)
    tab = C.table_accuracy(Sc.accuracy(qt), coch, config=cfg)
    cell = tab[("Cochran's Q", cfg.cue_label("id+ctx"))].iloc[0]
    assert cell.startswith("✓/✓") and f"vs Orig.: n=12, MDE {r['mde']:.1f} pts" in cell
    # on 30 questions or more the mark stands alone, as the paper prints it
    big = _cultural_qt(cfg, n=40, seed=1)
    big.loc[big["condition"].str.endswith(":id+ctx"), "correct"] = 0.0
    big.loc[big["condition"].isin(["original", "neutral"]), "correct"] = 1.0
    tb = C.table_accuracy(Sc.accuracy(big), C.cochran_table(big, cfg), config=cfg)
    assert tb[("Cochran's Q", cfg.cue_label("id+ctx"))].iloc[0] == "✓/✓"


def test_a_mark_with_every_paired_difference_equal_has_no_mde(cfg):
    """Every question right under the original and wrong
    under all three cultures' id+ctx variants: se_cluster is 0, and the old
    "MDE 0.0 pts" beside the mark claimed the six questions detect anything.
    No standard error, no MDE: "n/a"."""
    qt = _cultural_qt(cfg, n=6, seed=1)
    qt.loc[qt["condition"].str.endswith(":id+ctx"), "correct"] = 0.0
    qt.loc[qt["condition"].isin(["original", "neutral"]), "correct"] = 1.0
    errs = C.delta_avg_errors(qt, cfg).set_index(["cue", "reference"]).loc[("id+ctx", "original")]
    assert errs["delta"] == -100 and errs["se_cluster"] == 0 and np.isnan(errs["mde"])
    coch = C.cochran_table(qt, cfg)
    assert np.isnan(coch.set_index(["cue", "reference"]).loc[("id+ctx", "original"), "mde"])
    cell = C.table_accuracy(Sc.accuracy(qt), coch, config=cfg)[("Cochran's Q", cfg.cue_label("id+ctx"))].iloc[0]
    assert "vs Orig.: n=6, MDE n/a" in cell and "MDE 0.0" not in cell
