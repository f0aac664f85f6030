"""Section 3 of the cultural-cue study (seed 003): accuracy per condition after the seed's drop of
incomplete outputs, Δ Avg (eq. 2), Cochran's Q, flip and harmful flip (eqs. 3-4), accuracy with
Clopper-Pearson intervals (Fig. 3), Id+Ctx - Original with an interval that covers, the exact McNemar
test and a verdict (Fig. 5), and the component analysis (Fig. 4).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.stats import equivalence as _equivalence
from medaudit.stats import intervals as _intervals
from medaudit.stats import paired as _stats
from medaudit.stats.paired import cochran_q
from medaudit.stats import regression as _regression
from medaudit.stats.scoring import units_of
from medaudit.stats.testpower import mcnemar_mde, mde_from_se
from .config import BASELINES, CulturalConfig, NEUTRAL, ORIGINAL


# ==========================================================================
# 3. metrics


def delta_avg(acc: pd.DataFrame, config: CulturalConfig, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Eq. 2 per unit and cue: ``mean_acc`` (over cultures), ``delta_orig =
    mean_acc − Acc_original``, ``delta_neutral = mean_acc − Acc_neutral``,
    in percentage points, from an accuracy table (condition, accuracy in %).
    ``n_cultures`` tells how many cultures entered the mean."""
    u = units_of(acc, units)
    out = []
    for key, g in acc.groupby(u, sort=False) if u else [((), acc)]:
        key = key if isinstance(key, tuple) else (key,)
        a = g.set_index("condition")["accuracy"]
        for cue in config.cue_names:
            vals = [a[f"{c}:{cue}"] for c in config.culture_names if f"{c}:{cue}" in a.index]
            m = float(np.mean(vals)) if vals else np.nan
            out.append({**dict(zip(u, key)), "cue": cue, "n_cultures": len(vals), "mean_acc": m,
                        "acc_original": a.get(ORIGINAL, np.nan), "acc_neutral": a.get(NEUTRAL, np.nan),
                        "delta_orig": m - a.get(ORIGINAL, np.nan), "delta_neutral": m - a.get(NEUTRAL, np.nan)})
    return pd.DataFrame(out, columns=[*u, "cue", "n_cultures", "mean_acc", "acc_original", "acc_neutral",
                                      "delta_orig", "delta_neutral"])


def _grid(qt: pd.DataFrame, conditions: Sequence[str], value: str = "correct") -> pd.DataFrame:
    """item × condition table of ``value`` for one unit (complete cases only)."""
    w = qt[qt["condition"].isin(conditions)].pivot(index="item_id", columns="condition", values=value)
    w = w.reindex(columns=list(conditions))
    return w.dropna()


def _cue_grids(qt: pd.DataFrame, config: CulturalConfig, references: Sequence[str], u: list[str]):
    """(unit key, cue, reference, conditions, grid) for every unit, cue and reference: the
    reference and the three cultures' variants of the cue, one row per question scored in all
    (:func:`_grid`), as Cochran's Q and Δ Avg both read them."""
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        for cue in config.cue_names:
            for ref in references:
                conds = [ref] + [f"{c}:{cue}" for c in config.culture_names]
                yield key, cue, ref, conds, _grid(g, conds)


def cochran_table(qt: pd.DataFrame, config: CulturalConfig, references: Sequence[str] = BASELINES,
                  units: Sequence[str] | None = None) -> pd.DataFrame:
    """Cochran's Q per unit, cue and reference baseline, as Tables I–II's
    last column group reads: for cue t and reference r the k = 4 conditions
    are r and the three cultures' t-variants (e.g. original,
    indigenous_canadian:id, middle_eastern_muslim:id, southeast_asian:id),
    on the questions scored in all four. Columns: unit columns, cue,
    reference, n, k, q, df, p, and mde: the smallest Δ Avg (pp)
    these n questions detect with power 0.8 at α = 0.05 under the t test of
    Δ Avg on C − 1 df, its SE clustered by question (:func:`delta_avg_errors`;
    NaN where that SE is 0: every paired difference equal)."""
    u = units_of(qt, units)
    out = []
    for key, cue, ref, conds, w in _cue_grids(qt, config, references, u):
        r = cochran_q(w.to_numpy()) if len(w) else {"q": np.nan, "df": len(conds) - 1, "p": np.nan,
                                                   "n": 0, "k": len(conds)}
        e = _stats.paired_delta(np.tile(w[ref].to_numpy(), len(conds) - 1),
                                np.concatenate([w[c].to_numpy() for c in conds[1:]]),
                                np.tile(w.index.to_numpy(), len(conds) - 1))
        out.append({**dict(zip(u, key)), "cue": cue, "reference": ref, **r,
                    "mde": 100 * mde_from_se(e["se_cluster"], df=e["n_clusters"] - 1)})
    # no question scored (a model whose every answer was dropped): the same columns, no rows
    return (pd.DataFrame(out) if out
            else pd.DataFrame(columns=[*u, "cue", "reference", "q", "df", "p", "n", "k", "mde"]))


def flip_rates(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
               units: Sequence[str] | None = None) -> pd.DataFrame:
    """Eqs. 3–4 per unit and condition s (neutral and every cultural one).

    * Flip (eq. 3): share of questions whose answer under s differs from the
      answer under the ORIGINAL question, ``Σ 1[ŷ(x_s) ≠ ŷ(x_0)] / N_s``,
      right or wrong alike (a change between two wrong options counts).
    * Harmful flip (eq. 4): among the questions answered CORRECTLY under the
      original, the share answered incorrectly under s:
      ``Σ 1[ŷ(x_0) = y]·1[ŷ(x_s) ≠ y] / Σ 1[ŷ(x_0) = y]``. The denominator is
      the originally-correct questions, not N_s (Table V's values are
      multiples of 1/97 for LLaMA, 97 = 65.99 % of 147).

    N_s: questions with a parsed answer under both the reference and s.
    Columns: unit columns, condition, culture, cue, n, flips, flip (%),
    flip_lo, flip_hi, n_ref_correct, harmful, hflip (%), hflip_lo,
    hflip_hi, and the Stuart–Maxwell test of the answers' marginal
    homogeneity (do the answers shift among the options, not only
    right/wrong; :func:`stats.stuart_maxwell`): stuart_maxwell, sm_df, sm_p.

    Each rate has its 95 % Clopper–Pearson interval in %
    (:func:`rate_interval`, one answer per question; N is ``n`` for the
    flip rate, ``n_ref_correct`` for the harmful one); the coverage
    simulation checks both intervals and the Stuart–Maxwell test's size
    (docs/statistics.md).
    """
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        p = g[g["parsed"]]
        ans = p.pivot(index="item_id", columns="condition", values="parsed_answer")
        cor = p.pivot(index="item_id", columns="condition", values="correct")
        if reference not in ans.columns:
            continue
        for cond in [NEUTRAL, *config.cultural_conditions()]:
            if cond == reference or cond not in ans.columns:
                continue
            both = ans[reference].notna() & ans[cond].notna()
            a0, a1 = ans.loc[both, reference], ans.loc[both, cond]
            c0, c1 = cor.loc[both, reference] == 1, cor.loc[both, cond] == 1
            n, flips = int(both.sum()), int((a0 != a1).sum())
            n0, harm = int(c0.sum()), int((c0 & ~c1).sum())
            culture, cue = config.split(cond)
            sm = _stats.stuart_maxwell(a0, a1)
            out.append({**dict(zip(u, key)), "condition": cond, "culture": culture, "cue": cue,
                        "n": n, "flips": flips, "flip": 100 * flips / n if n else np.nan,
                        **dict(zip(("flip_lo", "flip_hi"), rate_interval((a0 != a1).to_numpy(float)))),
                        "n_ref_correct": n0, "harmful": harm, "hflip": 100 * harm / n0 if n0 else np.nan,
                        **dict(zip(("hflip_lo", "hflip_hi"), rate_interval((~c1[c0]).to_numpy(float)))),
                        "stuart_maxwell": sm["statistic"], "sm_df": sm["df"], "sm_p": sm["p"]})
    return pd.DataFrame(out, columns=[*u, "condition", "culture", "cue", "n", "flips", "flip", "flip_lo", "flip_hi",
                                      "n_ref_correct", "harmful", "hflip", "hflip_lo", "hflip_hi", "stuart_maxwell",
                                      "sm_df", "sm_p"])


def rate_interval(y, clusters=None) -> tuple[float, float]:
    """(lo, hi): the 95 % interval of a rate in % over 0/1 rows ``y``
    (:func:`medaudit.stats.intervals.proportion_interval`: Clopper–Pearson,
    clustered by question where a question has several rows); NaN with no
    row."""
    r = _intervals.proportion_interval(np.asarray(y, dtype=float), clusters)
    return 100 * r["lo"], 100 * r["hi"]


MARGIN = 3.0   # points: the default δ of 07's verdicts (profile key cultural_margin; docs/statistics.md)


def idctx_delta(qt: pd.DataFrame, config: CulturalConfig, cue: str = "id+ctx", reference: str = ORIGINAL,
                margin: float = MARGIN, level: float = 0.95, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 5: accuracy of ``<culture>:<cue>`` minus ``reference``, in
    percentage points, per unit and culture, on the questions scored under
    the reference and all three cultures' ``cue`` variants.

    The seed's percentile bootstrap covered 47–74 % at n = 3 and
    77–90 % at n = 8, and its test rejected a true null too often; the
    interval is now :func:`medaudit.stats.intervals.paired_interval` and the test
    the exact McNemar test (:func:`medaudit.stats.intervals.signflip_p` on one 0/1
    row per question), both holding from 8 questions on (docs/statistics.md).
    Columns: unit columns, culture, condition, n, estimate, ci_lo, ci_hi, p,
    significant (p ≤ 0.05 on at least :data:`medaudit.stats.intervals.MIN_N`
    questions), margin, verdict (:func:`medaudit.stats.equivalence.verdict`), and
    (:func:`stats.paired_delta`, pp) se_paired, se_cluster (by
    question; one row per question here, so equal), rho, b, c (questions
    right only under the reference / only under the variant) and mde, the
    smallest |Δ| these n questions detect with power 0.8 at α = 0.05 under
    the exact McNemar test (exact power at the observed discordance
    (b + c)/n, :func:`medaudit.stats.testpower.mcnemar_mde`; ``inf``: none
    detectable).
    """
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        conds = [reference] + [f"{c}:{cue}" for c in config.culture_names]
        w = _grid(g, conds)
        if not len(w):
            continue
        base = w[reference].to_numpy()
        for c, cond in zip(config.culture_names, conds[1:]):
            y = w[cond].to_numpy()
            e = _stats.paired_delta(base, y, w.index.to_numpy())
            ci = _intervals.paired_interval(base, y, w.index.to_numpy(), level)
            p = _intervals.signflip_p(base, y, w.index.to_numpy())
            lo, hi = 100 * ci["lo"], 100 * ci["hi"]
            b, cc = int(((base == 1) & (y == 0)).sum()), int(((base == 0) & (y == 1)).sum())
            out.append({**dict(zip(u, key)), "culture": c, "condition": cond, "n": len(w),
                        "estimate": 100 * e["delta"], "ci_lo": lo, "ci_hi": hi, "p": p,
                        "significant": bool(p <= 0.05 and _intervals.can_tell(len(w))), "margin": margin,
                        "verdict": _equivalence.verdict(p, lo, hi, margin, len(w)),
                        "se_paired": 100 * e["se_paired"], "se_cluster": 100 * e["se_cluster"], "rho": e["rho"],
                        "b": b, "c": cc, "mde": 100 * mcnemar_mde(len(w), (b + cc) / len(w), test="exact")})
    return pd.DataFrame(out, columns=[*u, "culture", "condition", "n", "estimate", "ci_lo", "ci_hi", "p",
                                      "significant", "margin", "verdict", "se_paired", "se_cluster", "rho", "b", "c",
                                      "mde"])


def delta_avg_errors(qt: pd.DataFrame, config: CulturalConfig, references: Sequence[str] = BASELINES,
                     units: Sequence[str] | None = None, level: float = 0.95, margin: float = MARGIN) -> pd.DataFrame:
    """Eq. 2's Δ Avg (the cue's accuracy averaged over the cultures minus
    the reference's) with the error a reviewer asks for: the
    three cultures' variants of ONE question are not three independent
    questions. Per unit, cue and reference, one row per question × culture,
    d = correct(culture:cue) − correct(reference), on the questions scored
    under the reference and all three cultures; ``delta`` is mean d (pp,
    Δ Avg on those questions); ``se_naive`` treats the rows as independent
    (n = 3 × questions, df n − 1), ``se_cluster`` clusters them by question
    (:func:`stats.paired_delta`: C/(C − 1), df C − 1) and ``design_effect``;
    ``mde``: the Δ that a t test on it detects with power 0.8 at α = 0.05
    (pp; noncentral t on C − 1 df, :func:`medaudit.stats.testpower.mde_from_se`;
    NaN where se_cluster is 0). ``ci_lo`` / ``ci_hi`` the interval
    that covers at these n (:func:`medaudit.stats.intervals.paired_interval`:
    the score interval on the discordant rows with the question design
    effect), ``p`` that interval's own score test of Δ Avg = 0
    (``p_score``): the three cultures' variants carry the same cue phrase
    and move together, and the relabelling test that treats the four
    conditions as exchangeable (:func:`medaudit.stats.intervals.relabel_p`)
    rejected a true Δ Avg = 0 in 7–15.5 % of simulated data sets where they
    shared the cue effect (docs/statistics.md),
    ``margin`` and ``verdict`` (:func:`medaudit.stats.equivalence.verdict`)."""
    u = units_of(qt, units)
    out = []
    for key, cue, ref, conds, w in _cue_grids(qt, config, references, u):
        if not len(w):
            continue
        ya = np.tile(w[ref].to_numpy(), len(conds) - 1)
        yb = np.concatenate([w[c].to_numpy() for c in conds[1:]])
        q = np.tile(w.index.to_numpy(), len(conds) - 1)
        e = _stats.paired_delta(ya, yb, q, level)
        ci = _intervals.paired_interval(ya, yb, q, level)
        p = ci["p_score"]
        lo, hi = 100 * ci["lo"], 100 * ci["hi"]
        out.append({**dict(zip(u, key)), "cue": cue, "reference": ref, "questions": e["n_clusters"],
                    "rows": e["n"], "delta": 100 * e["delta"], "se_naive": 100 * e["se_paired"],
                    "se_cluster": 100 * e["se_cluster"], "design_effect": e["design_effect"],
                    "ci_lo": lo, "ci_hi": hi, "p": p,
                    "mde": 100 * mde_from_se(e["se_cluster"], df=e["n_clusters"] - 1), "margin": margin,
                    "verdict": _equivalence.verdict(p, lo, hi, margin, e["n_clusters"])})
    cols = [*u, "cue", "reference", "questions", "rows", "delta", "se_naive", "se_cluster", "design_effect",
            "ci_lo", "ci_hi", "p", "mde", "margin", "verdict"]
    return pd.DataFrame(out, columns=cols)


def cue_regressions(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
                    units: Sequence[str] | None = None, method: str = "conditional") -> pd.DataFrame:
    """One regression across cues per unit, the question as the matched set
    (:func:`medaudit.stats.regression.cue_regression`, conditional logit = the
    regression form of McNemar): ``correct ~ cue`` on the reference and
    every cultural condition (the three cultures of a cue pooled; odds
    ratio of each cue against the reference), and ``flip ~ cue`` (the
    answer differs from the reference's) on neutral and the cultural
    conditions, neutral being the reference there. Holm and BH across the
    cues of one unit and outcome. Columns: unit columns, outcome, cue, and
    those of :func:`medaudit.stats.regression.cue_regression`."""
    u = units_of(qt, units)
    parts = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        p = g[g["parsed"]].copy()
        p["cue"] = [reference if c == reference else (NEUTRAL if c == NEUTRAL else config.split(c)[1])
                    for c in p["condition"]]
        p = p[p["cue"].notna()]
        ref_ans = p[p["condition"] == reference].set_index("item_id")["parsed_answer"]
        p["flip"] = np.where(p["item_id"].isin(ref_ans.index),
                             (p["parsed_answer"] != p["item_id"].map(ref_ans)).astype(float), np.nan)
        for outcome, rows, ref in (("correct", p[p["cue"] != NEUTRAL], reference),
                                   ("flip", p[p["cue"] != reference], NEUTRAL)):
            if rows["cue"].nunique() < 2 or ref not in set(rows["cue"]):
                continue
            r = _regression.cue_regression(rows, outcome, "cue", "item_id", reference=ref, method=method)
            parts.append(r.assign(**dict(zip(u, key)), outcome=outcome))
    if not parts:
        return pd.DataFrame(columns=[*u, "outcome", "cue"])
    out = pd.concat(parts, ignore_index=True)
    return out[[*u, "outcome", *[c for c in out.columns if c not in (*u, "outcome")]]]


def cue_models(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
               units: Sequence[str] | None = None, pooled: bool = True) -> pd.DataFrame:
    """Correctness ~ cue (vs ``reference``; the three cultures of a cue
    pooled, the question as the unit that repeats) by three models side by
    side: the conditional logit and the GEE of
    :func:`medaudit.stats.regression.cue_regression` and the mixed-effects logit with a random
    intercept per question (:func:`medaudit.stats.mixed.cue_glmm`), one row per
    unit and cue: the odds ratio with its 95% interval under each, p of
    the GLMM with Holm across the cues, σ (the between-question SD of the
    log-odds), n_obs and n_groups. ``pooled``: one more row set per
    prompt format and form with the models pooled (model intercepts fixed,
    a question intercept per model)."""
    from medaudit.stats import mixed

    u = units_of(qt, units)
    p = qt[qt["parsed"]].copy()
    p["cue"] = [c if c in (reference, NEUTRAL) else config.split(c)[1] for c in p["condition"]]
    p = p[p["cue"].notna() & (p["cue"] != NEUTRAL)]
    sets = [(dict(zip(u, k if isinstance(k, tuple) else (k,))), g, None) for k, g in p.groupby(u, sort=False)]
    rest = [c for c in u if c != "model"]
    if pooled and "model" in u and p["model"].nunique() > 1:
        for k, g in p.groupby(rest, sort=False) if rest else [((), p)]:
            k = k if isinstance(k, tuple) else (k,)
            if g["model"].nunique() > 1:
                sets.append(({"model": "pooled: " + ", ".join(pd.unique(g["model"])), **dict(zip(rest, k))},
                             g, "model"))
    out = []
    for key, g, pool in sets:
        if g["cue"].nunique() < 2 or reference not in set(g["cue"]):
            continue
        strata = g.assign(item_id=g["model"] + "|" + g["item_id"]) if pool else g
        fits = {"clogit": _regression.cue_regression(strata, "correct", "cue", "item_id", reference=reference),
                "gee": _regression.cue_regression(strata, "correct", "cue", "item_id", reference=reference,
                                                  method="gee"),
                "glmm": mixed.cue_glmm(g, "correct", "cue", "item_id", reference=reference, pooled=pool)}
        f = {k: v.set_index("cue") for k, v in fits.items()}
        for cue in f["glmm"].index:
            row = {**key, "cue": cue}
            for k, v in f.items():
                row[f"OR {k}"] = v.loc[cue, "odds_ratio"]
                row[f"{k} lo"], row[f"{k} hi"] = v.loc[cue, "or_lo"], v.loc[cue, "or_hi"]
            gl = f["glmm"].loc[cue]
            out.append({**row, "p glmm": gl["p"], "p glmm Holm": gl["p_holm"], "σ question": gl["sd_question"],
                        "n_obs": int(gl["n_obs"]), "n_groups": int(gl["n_groups"]),
                        "separation": bool(gl["separation"])})
    return pd.DataFrame(out)


def accuracy_intervals(qt: pd.DataFrame, level: float = 0.95, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 3: accuracy (%) per unit and condition, on the questions scored
    in every condition of the unit, with its Clopper–Pearson interval
    (:func:`medaudit.stats.intervals.proportion_interval`; the seed's
    percentile bootstrap covered 33 % at worst on 8 questions and gave
    [100, 100] for eight right answers). Columns: unit columns, condition,
    n, accuracy, ci_lo, ci_hi, method."""
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        conds = list(dict.fromkeys(g["condition"]))
        w = _grid(g, conds)
        if not len(w):
            continue
        for cond in conds:
            r = _intervals.proportion_interval(w[cond].to_numpy(), level=level)
            out.append({**dict(zip(u, key)), "condition": cond, "n": len(w), "accuracy": 100 * r["estimate"],
                        "ci_lo": 100 * r["lo"], "ci_hi": 100 * r["hi"], "method": r["method"]})
    return pd.DataFrame(out, columns=[*u, "condition", "n", "accuracy", "ci_lo", "ci_hi", "method"])


def component_table(acc: pd.DataFrame, config: CulturalConfig, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 4: Δ accuracy vs Original (pp, averaged over cultures) for Id,
    Ctx and Id+Ctx; rows units, columns the cues' long labels."""
    d = delta_avg(acc, config, units)
    u = units_of(d, units)
    d["component"] = [config.cue_label(c, long=True) for c in d["cue"]]
    w = d.pivot_table(index=u, columns="component", values="delta_orig", sort=False)
    return w.reindex(columns=[config.cue_label(c, long=True) for c in config.cue_names])
