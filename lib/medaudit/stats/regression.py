"""Logit models of per-question correctness across conditions: one regression across cues with
the question as the matched set (:func:`cue_regression`: conditional logit, its SE clustered by the
matched set, :mod:`medaudit.stats.sandwich`; or GEE), a check for separation, and the Wald columns
and tests every such model reports. Seed 000's orientation × religion model
(:func:`medaudit.studies.calibration.nonadditivity_test`) fits with :func:`fit_logit`.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sstats

from medaudit.stats import sandwich
from medaudit.stats.paired import adjusted_p


def fit_logit(y: np.ndarray, X: np.ndarray, groups: np.ndarray, method: str):
    """(fitted results, converged?, max |score| at the estimate)."""
    from statsmodels.tools.sm_exceptions import HessianInversionWarning, ModelWarning, PerfectSeparationWarning

    with warnings.catch_warnings():   # separation is found and reported by the callers (_separated), not printed
        warnings.simplefilter("ignore", PerfectSeparationWarning)
        return _fit_logit_quiet(y, X, groups, method, ModelWarning, HessianInversionWarning)


def _fit_logit_quiet(y, X, groups, method, ModelWarning, HessianInversionWarning):
    import statsmodels.api as sm
    from statsmodels.discrete.conditional_models import ConditionalLogit

    if method == "conditional":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModelWarning)
            model = ConditionalLogit(y, X, groups=groups)
        with warnings.catch_warnings():   # a failed inversion raises next; nonadditivity_test reports it
            warnings.simplefilter("ignore", HessianInversionWarning)
            fit = model.fit(disp=0, maxiter=200)
        # statsmodels' BFGS stops at a mean-per-observation gradient of 1e-5;
        # call it converged below ten times that
        score = float(np.max(np.abs(model.score(np.asarray(fit.params))))) / max(1, len(y))
        return fit, bool(score < 1e-4), score
    if method == "gee":
        exog = np.column_stack([np.ones(len(y)), X])
        fit = sm.GEE(y, exog, groups=groups, family=sm.families.Binomial(),
                     cov_struct=sm.cov_struct.Exchangeable()).fit(maxiter=200)
        return fit, bool(fit.converged), np.nan
    raise ValueError("method must be 'conditional' or 'gee'")


def wald_test(b: np.ndarray, v: np.ndarray) -> dict:
    """The Wald χ² that every coefficient ``b`` (covariance ``v``) is 0: chi2, df, p."""
    if not b.size:
        return {"chi2": np.nan, "df": 0, "p": np.nan}
    chi2 = float(b @ np.linalg.solve(v, b))
    return {"chi2": chi2, "df": int(b.size), "p": float(sstats.chi2.sf(chi2, b.size))}


def linear_contrast(b: np.ndarray, v: np.ndarray, w: np.ndarray, z: float) -> dict:
    """The contrast ``w @ b`` with its standard error, its interval at ``z`` and its Wald p."""
    est, se = float(w @ b), float(np.sqrt(w @ v @ w))
    return {"coef": est, "se": se, "ci_lo": est - z * se, "ci_hi": est + z * se,
            "p": float(2 * sstats.norm.sf(abs(est / se)))}


def cue_levels(cues: pd.Series, reference, who: str) -> tuple[object, list]:
    """The reference cue (the first one seen when None) and the other cues in order of first
    appearance; a reference that is not among the cues is an error naming ``who`` and the cues."""
    levels = list(pd.unique(cues))
    reference = levels[0] if reference is None else reference
    if reference not in levels:
        raise ValueError(f"{who}: reference {reference!r} is not among the cues {levels}")
    return reference, [c for c in levels if c != reference]


def cue_regression(df: pd.DataFrame, outcome: str, cue: str = "cue", group: str = "item_id",
                   reference: str | None = None, method: str = "conditional", level: float = 0.95,
                   se: str = "auto") -> pd.DataFrame:
    """``outcome ~ cue`` with the question as the matched set: one odds
    ratio per cue against ``reference`` (default: the first cue seen), with
    its Wald CI and p, Holm and BH across the cues.

    ``method="conditional"``: statsmodels ``ConditionalLogit`` (groups =
    ``group``), the regression form of McNemar's test: with two conditions
    its odds ratio is c/b, the ratio of the discordant pairs. ``"gee"``: a
    logit GEE with exchangeable correlation within the question (robust
    SEs; marginal odds ratios). ``df``: one row per question × cue (for
    several models, call it per model; a cue may have several rows per
    question, as 07's three cultures' variants of a cue: the conditional
    logit's SE is then clustered by ``group``, :mod:`medaudit.stats.sandwich`,
    with a t on G − 1 df; ``se="model"`` keeps the model-based SE, as the
    mixed model's is). Columns: cue, coef, se, odds_ratio, or_lo, or_hi,
    p, p_holm, p_bh, se_type (model, clustered by ``group`` (CR1), robust
    (GEE)), df (of the t; NaN: z), n_obs, n_groups, n_groups_informative,
    method, converged, reference, separation (a cue whose data
    separate, right on every question or every changed question changed
    one way, has no finite estimate; its coef, SE, interval and p are NaN
    and ``converged`` False, instead of the optimiser's last step read as
    p ≈ 0)."""
    d = df[[outcome, cue, group]].dropna()
    if d.empty:
        raise ValueError(f"cue_regression: no rows with {outcome}, {cue} and {group}")
    reference, others = cue_levels(d[cue], reference, "cue_regression")
    X = np.column_stack([(d[cue] == c).to_numpy(dtype=float) for c in others])
    y = d[outcome].to_numpy(dtype=float)
    groups = pd.factorize(d[group])[0]
    k = len(others)
    # a cue answered more than once in a matched set (07: three cultures' variants per question): the answers
    # may share more than the question effect, so the SE is clustered by the matched set (sandwich.py)
    if se not in ("auto", "model"):
        raise ValueError(f"cue_regression: se must be 'auto' or 'model', not {se!r}")
    clustered = method == "conditional" and se == "auto" and bool(d.groupby([group, cue]).size().max() > 1)
    df_t = None
    try:
        fit, conv, _ = fit_logit(y, X, groups, method)
        params, cov = np.asarray(fit.params)[-k:], np.asarray(fit.cov_params())[-k:, -k:]
        if clustered:
            cov, n_sets = sandwich.conditional_logit_cluster_cov(fit.model, fit.params)
            df_t = n_sets - 1
    except (np.linalg.LinAlgError, ValueError):   # no informative question, or a singular information matrix
        params, cov, conv = np.full(k, np.nan), np.full((k, k), np.nan), False
    sep = _separated(d, outcome, cue, group, reference, others, method)
    if sep.any():                     # the estimate runs off to ±∞: no coefficient, SE or p to report
        params, cov = params.copy(), cov.copy()
        params[sep] = np.nan
        cov[sep, :] = np.nan
        cov[:, sep] = np.nan
    per = pd.Series(y).groupby(groups).agg(["min", "max"])
    out = pd.DataFrame({"cue": others, **wald_columns(params, np.sqrt(np.diag(cov)), level, df=df_t),
                        "se_type": f"clustered by {group} (CR1)" if clustered else "model" if method != "gee"
                        else "robust (GEE)", "df": np.nan if df_t is None else float(df_t),
                        "n_obs": len(y), "n_groups": int(per.shape[0]),
                        "n_groups_informative": int((per["min"] != per["max"]).sum()),
                        "method": method, "converged": conv & ~sep & np.isfinite(np.diag(cov)), "reference": reference,
                        "separation": sep})
    return out


def wald_columns(coef: np.ndarray, se: np.ndarray, level: float = 0.95, df: float | None = None) -> dict:
    """The per-cue columns of a logit fit from its coefficients and SEs:
    coef, se, odds_ratio with its Wald interval (or_lo, or_hi at ``level``),
    the two-sided z-test p (a t on ``df`` degrees of freedom where given: a
    clustered SE from few clusters), and p adjusted by Holm and by
    Benjamini–Hochberg across the cues with a finite p (NaN elsewhere)."""
    ref = sstats.norm if df is None else sstats.t(df)
    z = ref.ppf(0.5 + level / 2)
    p = 2 * ref.sf(np.abs(coef / se))
    ok = np.isfinite(p)
    adj = {m: np.full(len(coef), np.nan) for m in ("holm", "fdr_bh")}
    for m in adj:
        if ok.sum() == 1:             # one p: Holm and BH leave it as it is
            adj[m][ok] = p[ok]
        elif ok.any():
            adj[m][ok] = adjusted_p(p[ok], m)
    return {"coef": coef, "se": se, "odds_ratio": np.exp(coef), "or_lo": np.exp(coef - z * se),
            "or_hi": np.exp(coef + z * se), "p": p, "p_holm": adj["holm"], "p_bh": adj["fdr_bh"]}


def _separated(d: pd.DataFrame, outcome: str, cue: str, group: str, reference, others: list,
               method: str) -> np.ndarray:
    """Per cue of ``others``: does the likelihood have no finite maximum
    (separation; Albert & Anderson 1984)? GEE (intercept + cue dummies):
    the cue's or the reference's outcome is the same on every row.
    Conditional logit (matched on ``group``): every matched set where the
    cue and the reference differ differs the same way (McNemar's b or c is
    0 with the other > 0). The fit then reports a finite coefficient with a
    tiny SE and p ≈ 0, an artefact of where the optimiser stopped."""
    y = d[outcome].astype(float)
    ref = y[d[cue] == reference]
    out = []
    for c in others:
        yc = y[d[cue] == c]
        if method == "gee":
            out.append(bool(yc.nunique() == 1 or ref.nunique() == 1))
            continue
        w = yc.groupby(d.loc[yc.index, group]).mean()
        r = ref.groupby(d.loc[ref.index, group]).mean()
        diff = (w - r).dropna()
        diff = diff[diff != 0]
        out.append(bool(len(diff) and ((diff > 0).all() or (diff < 0).all())))
    return np.array(out, dtype=bool)
