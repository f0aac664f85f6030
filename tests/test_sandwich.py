"""The question-clustered covariance of 07's conditional logit, checked by hand."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats
from scipy.special import comb

from medaudit.stats import sandwich, regression as stats


def _hand(df: pd.DataFrame, beta: float) -> tuple[float, float, int]:
    """(model-based variance, CR1 clustered variance, G) of the one-cue
    conditional logit at ``beta``, from the conditional distribution of the
    number k of right answers under the cue in a matched set of m1 cue rows
    and m0 reference rows with s right in all: P(k) ∝ C(m1, k)·C(m0, s − k)·e^{βk}.
    Score of the set: k_obs − E[k]; its information: Var[k]."""
    scores, info = [], 0.0
    for _, g in df.groupby("item_id"):
        y, x = g["y"].to_numpy(), (g["cue"] == "b").to_numpy()
        s, m1, m0 = int(y.sum()), int(x.sum()), int((~x).sum())
        if s in (0, len(y)):
            continue
        ks = np.arange(max(0, s - m0), min(m1, s) + 1)
        w = comb(m1, ks) * comb(m0, s - ks) * np.exp(beta * ks)
        p = w / w.sum()
        mean = float((ks * p).sum())
        scores.append(float(y[x].sum()) - mean)
        info += float((ks ** 2 * p).sum()) - mean ** 2
    G = len(scores)
    return 1 / info, float(np.sum(np.square(scores))) / info ** 2 * G / (G - 1), G


def _pooled(rng: np.random.Generator, n: int, shared: bool) -> pd.DataFrame:
    """07's pooled design: per question a reference answer and three answers
    under one cue (three cultures); ``shared``: the three share a cue-by-question
    effect (the same cue phrase), so they are correlated given the question."""
    u = rng.normal(0, 1, (n, 1))
    v = rng.normal(0, 1.5, (n, 1)) if shared else rng.normal(0, 1.5, (n, 3))
    y = np.column_stack([rng.random((n, 1)) < 1 / (1 + np.exp(-(1 + u))),
                         rng.random((n, 3)) < 1 / (1 + np.exp(-(1 - 0.5 + u + v)))]).astype(float)
    return pd.DataFrame({"y": y.ravel(), "cue": ["a", "b", "b", "b"] * n,
                         "item_id": np.repeat([f"q{i}" for i in range(n)], 4)})


def test_two_conditions_the_sandwich_is_the_model_variance_times_g_over_g_minus_1():
    rng = np.random.default_rng(5)
    ya, yb = (rng.random(60) < 0.7).astype(float), (rng.random(60) < 0.55).astype(float)
    df = pd.DataFrame({"y": np.r_[ya, yb], "cue": ["a"] * 60 + ["b"] * 60, "item_id": np.r_[range(60), range(60)]})
    from statsmodels.discrete.conditional_models import ConditionalLogit

    x = (df["cue"] == "b").to_numpy(float)[:, None]
    fit = ConditionalLogit(df["y"].to_numpy(), x, groups=df["item_id"].to_numpy()).fit(disp=0)
    cov, G = sandwich.conditional_logit_cluster_cov(fit.model, fit.params)
    b, c = int((ya > yb).sum()), int((yb > ya).sum())
    assert G == b + c
    assert cov[0, 0] == pytest.approx((1 / b + 1 / c) * G / (G - 1), rel=1e-4)
    # one answer per question and cue: cue_regression keeps the model's SE (McNemar's form)
    r = stats.cue_regression(df, "y", reference="a").iloc[0]
    assert r["se_type"] == "model" and r["se"] == pytest.approx(np.sqrt(1 / b + 1 / c), rel=2e-3)


def test_three_answers_under_a_cue_per_question_get_the_question_clustered_se_and_t():
    df = _pooled(np.random.default_rng(11), 40, shared=True)
    r = stats.cue_regression(df, "y", reference="a").iloc[0]
    model_var, cl_var, G = _hand(df, r["coef"])
    assert r["se_type"] == "clustered by item_id (CR1)" and r["df"] == G - 1
    assert r["se"] == pytest.approx(np.sqrt(cl_var), rel=1e-3)
    assert r["se"] > np.sqrt(model_var)                 # the shared effect: the model's SE is too small here
    t = sstats.t.ppf(0.975, G - 1)
    assert (r["or_lo"], r["or_hi"]) == pytest.approx(np.exp(r["coef"] + np.array([-t, t]) * r["se"]), rel=1e-6)
    assert r["p"] == pytest.approx(2 * sstats.t.sf(abs(r["coef"] / r["se"]), G - 1), rel=1e-6)


def test_a_single_informative_question_has_no_clustered_se():
    df = pd.DataFrame({"y": [1, 0, 1, 0, 1, 1, 1, 1], "cue": ["a", "b", "b", "b"] * 2,
                       "item_id": ["q0"] * 4 + ["q1"] * 4})
    r = stats.cue_regression(df, "y", reference="a").iloc[0]
    assert np.isnan(r["se"]) and np.isnan(r["p"]) and not r["converged"]
