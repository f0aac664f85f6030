"""Odds ratios per cue from a mixed-effects logistic model: the clinical
journals' model, beside the conditional logit and the GEE
of :func:`medaudit.stats.regression.cue_regression`.

    logit P(correct_qc) = α + β_cue(c) [+ γ_model] + σ·z_q[m]        z ~ N(0, 1)

one random intercept per question, one fixed effect per cue against the
reference condition. exp(β) is a *conditional* (question-specific) odds
ratio, the quantity the conditional logit estimates without modelling the
question's intercept; the GEE's exp(β) is the *marginal*
(population-averaged) one, nearer 1 by about 1/√(1 + 0.346 σ²) (Zeger,
Liang & Albert 1988, the logistic-normal approximation). The three answer
one question on the same answers; tests/test_mixed.py checks that they
agree so on the released answers.

**Fit.** Maximum likelihood with the random intercept integrated out by
adaptive Gauss–Hermite quadrature (as R's ``lme4::glmer(nAGQ = Q)``; Q = 1
is the Laplace approximation): per question the mode ẑ_q of its integrand
and the curvature there (Newton steps, vectorised over questions), then Q
nodes centred and scaled on them. The log-likelihood is maximised over
(α, β, log σ) by scipy's BFGS; the covariance of the estimates is the
inverse of the numerical Hessian of the log-likelihood at the maximum
(statsmodels ``approx_hess``). Wald interval and z test per cue.

statsmodels' ``BinomialBayesMixedGLM`` was tried first (the issue names
it): its ``fit_map`` maximises the *joint* posterior of the fixed and the
random effects, which shrinks σ and with it every β toward the GEE's (on
MedGemma-4B's released option answers: Id+Ctx log-OR −0.74 against the
conditional logit's −1.50, σ 3.1), and on GPT-5.2, right on most questions
under every cue, it did not converge (σ → 0, 150 s). Hence the marginal
likelihood here.

**Pooled models.** When several models are pooled (``pooled`` names the
model column) each model gets a fixed intercept (γ_model), not a random
one (three or four models give a variance no estimate worth the name), and
the random intercept is per question *within* model (model × question):
a question hard for one model need not be hard for another. On seed 003's
released option answers a random intercept shared by the three models
(crossed with the model) gave Id a log odds ratio of −0.33 against −0.69
for the conditional logit matched on model × question (SE 0.27): the
shared intercept cannot absorb the models' different hard questions and
the estimate drifts toward the marginal one. Nested, the two agree
(tests/test_mixed.py).

A cue that separates (its or the reference's outcome the same on every row,
:func:`medaudit.stats.regression.cue_regression`'s rule for the GEE) gets no estimate.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import optimize
from scipy.special import expit, log_expit
from statsmodels.tools.numdiff import approx_hess

from medaudit.stats.regression import cue_levels, wald_columns

NAGQ = 9   # quadrature nodes per question (lme4's nAGQ); 1 = Laplace


def _cluster_loglik(theta: np.ndarray, X: np.ndarray, y: np.ndarray, q: np.ndarray, n_q: int,
                    nodes: np.ndarray, weights: np.ndarray, warm: dict | None = None) -> float:
    """Σ_q log ∫ Π_{j∈q} Bernoulli(y_j | expit(x_j b + σ z)) φ(z) dz, by
    adaptive Gauss–Hermite quadrature (module docstring). ``warm``: a dict
    holding the last modes (``"z"``, on the σ·z scale), so that the
    Newton steps of the next evaluation start near them."""
    b, sigma = theta[:-1], np.exp(theta[-1])
    eta0 = X @ b

    def g(zz):                                            # log of each question's integrand, up to a constant
        eta = eta0 + sigma * zz[q]
        return np.bincount(q, weights=y * log_expit(eta) + (1 - y) * log_expit(-eta), minlength=n_q) - 0.5 * zz ** 2

    z = warm["u"] / sigma if warm is not None and "u" in warm else np.zeros(n_q)
    gz = g(z)
    for _ in range(100):                                  # damped Newton for the mode (g is concave)
        p = expit(eta0 + sigma * z[q])
        grad = sigma * np.bincount(q, weights=y - p, minlength=n_q) - z
        hess = sigma ** 2 * np.bincount(q, weights=p * (1 - p), minlength=n_q) + 1.0
        step = grad / hess
        for _ in range(40):                               # halve a step that does not climb
            new = g(z + step)
            worse = new < gz - 1e-12
            if not worse.any():
                break
            step = np.where(worse, step / 2, step)
        z, gz = z + step, g(z + step)
        if np.max(np.abs(step)) < 1e-9:
            break
    if warm is not None:
        warm["u"] = sigma * z
    p = expit(eta0 + sigma * z[q])
    h = sigma ** 2 * np.bincount(q, weights=p * (1 - p), minlength=n_q) + 1.0
    scale = np.sqrt(2.0 / h)
    terms = []
    for t in nodes:
        zk = z + scale * t
        eta = eta0 + sigma * zk[q]
        ll = np.bincount(q, weights=y * log_expit(eta) + (1 - y) * log_expit(-eta), minlength=n_q)
        terms.append(ll - 0.5 * zk ** 2 + t ** 2)
    terms = np.array(terms)                               # nodes × questions
    top = terms.max(axis=0)
    total = top + np.log(weights @ np.exp(terms - top)) + np.log(scale) - 0.5 * np.log(2 * np.pi)
    return float(total.sum())


def fit_random_intercept_logit(y, X, groups, n_agq: int = NAGQ) -> dict:
    """ML fit of ``logit P(y) = X b + σ z_group``: params (b), cov (of b),
    sigma, sigma_se (delta method on log σ), loglik, converged."""
    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float)
    q, _ = pd.factorize(pd.Series(groups))
    n_q = int(q.max()) + 1
    nodes, weights = np.polynomial.hermite.hermgauss(n_agq)

    warm: dict = {}

    def nll(theta):
        return -_cluster_loglik(theta, X, y, q, n_q, nodes, weights, warm)

    start = np.zeros(X.shape[1] + 1)
    start[0] = np.log((y.mean() + 0.01) / (1.01 - y.mean()))
    res = optimize.minimize(nll, start, method="BFGS", options={"gtol": 1e-6, "maxiter": 500})
    H = approx_hess(res.x, nll)
    try:
        cov = np.linalg.inv(H)
    except np.linalg.LinAlgError:
        cov = np.full(H.shape, np.nan)
    ok = bool(res.success or np.max(np.abs(res.jac)) < 1e-3) and np.all(np.diag(cov) > 0)
    sigma = float(np.exp(res.x[-1]))
    return {"params": res.x[:-1], "cov": cov[:-1, :-1], "sigma": sigma,
            "sigma_se": sigma * float(np.sqrt(cov[-1, -1])) if cov[-1, -1] > 0 else np.nan,
            "loglik": -float(res.fun), "converged": ok}


def cue_glmm(df: pd.DataFrame, outcome: str, cue: str = "cue", group: str = "item_id",
             reference=None, pooled: str | None = None, level: float = 0.95, n_agq: int = NAGQ) -> pd.DataFrame:
    """``outcome ~ cue [+ model] + (1 | group)``: one odds ratio per cue
    against ``reference`` (default: the first cue seen). ``df``: one row per
    question × cue (× model when ``pooled`` names the model column).
    Columns, as :func:`medaudit.stats.regression.cue_regression`'s: cue, coef, se,
    odds_ratio, or_lo, or_hi, p, p_holm, p_bh, n_obs, n_groups (questions;
    model × question when pooled), method ("glmm"), converged, reference,
    separation, and sd_question (σ, the between-question SD of the
    log-odds) with its SE."""
    cols = [outcome, cue, group] + ([pooled] if pooled else [])
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"cue_glmm: no column(s) {missing}; has {list(df.columns)}")
    d = df[cols].dropna()
    if d.empty:
        raise ValueError(f"cue_glmm: no rows with {', '.join(cols)}")
    y = d[outcome].to_numpy(dtype=float)
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError(f"cue_glmm: {outcome!r} must be 0 or 1")
    reference, others = cue_levels(d[cue], reference, "cue_glmm")
    k = len(others)
    cols_x = [np.ones(len(d))] + [(d[cue] == c).to_numpy(dtype=float) for c in others]
    if pooled:
        cols_x += [(d[pooled] == m).to_numpy(dtype=float) for m in list(pd.unique(d[pooled]))[1:]]
    X = np.column_stack(cols_x)

    def constant(c):
        v = y[(d[cue] == c).to_numpy()]
        return v.min() == v.max()

    sep = np.array([constant(c) or constant(reference) for c in others], dtype=bool)
    strata = (d[pooled].astype(str) + "\x1f" + d[group].astype(str)).to_numpy() if pooled else d[group].to_numpy()
    fit = fit_random_intercept_logit(y, X, strata, n_agq)
    b, se = fit["params"][1:k + 1].copy(), np.sqrt(np.clip(np.diag(fit["cov"])[1:k + 1], 0, None))
    b[sep], se[sep] = np.nan, np.nan
    return pd.DataFrame({"cue": others, **wald_columns(b, se, level),
                         "n_obs": len(y), "n_groups": int(pd.Series(strata).nunique()), "method": "glmm",
                         "converged": fit["converged"] & ~sep, "reference": reference, "separation": sep,
                         "sd_question": fit["sigma"], "sd_question_se": fit["sigma_se"]})
