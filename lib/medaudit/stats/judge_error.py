"""The LLM judge's own error, carried into every judge-based rate and
disparity.

A judge-based rate (open-ended accuracy in 05, a context's incidence in 06,
culture-referential explanations in 07) is the share of YES among an LLM's
verdicts. The judge errs, and where it errs differently for different
groups a disparity it reports can be made or hidden by the judge alone.
Two answers, one for each situation:

1. **Human labels on a subset** (the CSV of :mod:`medaudit.prep.labels`):
   :func:`ppi_contrasts`, prediction-powered inference (Angelopoulos et
   al. 2023, *Science* 382:669). Per group g, over its N_g judged rows and
   the n_g of them a person labelled,

       θ̂_g = mean_{all g}(Ŷ) + mean_{labelled g}(Y − Ŷ)

   (the judge's rate plus the mean correction the labels show, the
   "rectifier"); unbiased for the people's rate whenever the labelled rows
   are a random subset of the group's rows, however the judge errs, and
   per group, so a judge that errs more in one group is corrected there.
   A contrast Σ_g w_g θ̂_g (a disparity: θ_b − θ_a) gets a standard error
   clustered by the unit that truly repeats (question, dialog): per
   cluster c the influence Σ_g w_g [Σ_{i∈c,g}(Ŷ_i − m_g)/N_g +
   Σ_{j∈c,labelled g}(R_j − r̄_g)/n_g], SE² = C/(C−1) Σ_c ψ_c² (the
   ratio-estimator linearisation of the same cluster-robust SE as
   :func:`medaudit.stats.paired.paired_delta`; the labelled term carries its own
   n_g/(n_g − 1) as well, since n_g is far below C), so the labels' own uncertainty
   (1/n_g) and the pairing of the groups on the same questions are both in
   it; interval and test on t with C_L − 1 degrees of freedom, C_L the
   clusters holding a label of the contrast's groups. With one row per
   cluster and one group it is ``ppi_py.ppi_mean_ci`` with ``lam=1``
   (tests/test_judge_error.py checks it against the package).
2. **No labels**: :func:`error_band`, a sensitivity band over the judge's
   disagreement rate e with people, from 0 to the rate the seeds report
   (:data:`SEED_AGREEMENT`). A judge that disagrees with people on a share
   e of a group's verdicts moves that group's rate by at most e, and every
   shift within ±e is possible (false positives alone, or false negatives
   alone), so a contrast of rates built from ``spread`` verdicts per unit
   (2 for a difference of two groups' rates, G for a %dlg over G
   counterfactual notes) moves by at most spread · e. The band widens the
   contrast's sampling interval by that much; the **tipping error** is the
   e at which the widened interval first touches 0, and the disparity
   *survives* the seed's judge when the tipping error is above the seed's
   disagreement rate. Worst case by design: the judge may err one way in
   one group and the other way in the other (the issue's judge whose
   errors differ by group). A judge that errs alike in every group only
   shrinks a difference of rates, by (1 − fpr − fnr) (× 0.78 at seed 000's
   11% with fpr = fnr): ``even_corrected`` undoes that shrinkage.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sstats

# The judge–human agreement each seed reports, and where. ``disagreement``
# is 1 − agreement: the share of verdicts on which judge and people differ,
# the e of :func:`error_band`.
SEED_AGREEMENT: dict[str, dict] = {
    "openended": {"agreement": 0.89, "kappa": 0.78, "n": 82, "disagreement": 0.11,
                  "source": "seed 000 §3 'Task Conversion' and App. B.6: GPT-5-mini judge vs an intensive-care "
                            "clinician on 82 responses, 89% raw agreement, Cohen's κ = 0.78"},
    "soap_incidence": {"agreement": 0.91, "kappa": 0.53, "n": 72, "disagreement": 0.09,
                       "source": "seed 002 App. A.1: GPT-4o incidence judge vs medical scribes on 72 notes, "
                                 "91% agreement, κ = 0.53"},
    "soap_disparity": {"agreement": 0.60, "kappa": 0.53, "n": 30, "disagreement": 0.40,
                       "source": "seed 002 App. A.1: language-disparity judge vs author annotations on 30 dialogs, "
                                 "60% agreement (κ = 0.53) on the decision"},
    "cultural_judge": {"agreement": None, "kappa": 0.76, "n": 50, "disagreement": None,
                       "source": "seed 003 §III.B: two human annotators on 50 explanations, κ = 0.76 (between "
                                 "the annotators; the seed reports no judge–human figure)"},
}


def disagreement_from_kappa(kappa: float, prevalence: float) -> float:
    """The raw disagreement 1 − p_o that Cohen's κ implies when both raters
    say YES at rate ``prevalence`` (p_e = p² + (1 − p)², p_o = p_e +
    κ(1 − p_e)). Seed 003 reports only κ (between two people): this turns
    it into the e of :func:`error_band` at the run's own YES share."""
    if not 0 <= prevalence <= 1 or not -1 <= kappa <= 1:
        raise ValueError(f"disagreement_from_kappa: kappa {kappa} or prevalence {prevalence} out of range")
    pe = prevalence ** 2 + (1 - prevalence) ** 2
    return float((1 - kappa) * (1 - pe))


def seed_disagreement(study: str, prevalence: float | None = None) -> float:
    """e for ``study`` (a key of :data:`SEED_AGREEMENT`): 1 − the seed's
    agreement, or, where the seed gives κ only, :func:`disagreement_from_kappa`
    at ``prevalence`` (the run's YES share; 0.5, the largest, when None)."""
    if study not in SEED_AGREEMENT:
        raise KeyError(f"seed_disagreement: no seed figure for {study!r}; known: {sorted(SEED_AGREEMENT)}")
    s = SEED_AGREEMENT[study]
    if s["disagreement"] is not None:
        return float(s["disagreement"])
    return disagreement_from_kappa(s["kappa"], 0.5 if prevalence is None or not np.isfinite(prevalence)
                                   else prevalence)


# --------------------------------------------------------------------------
# 1. with human labels: prediction-powered inference, clustered


def _binary(s: pd.Series, name: str, where: str) -> np.ndarray:
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    bad = np.isfinite(v) & ~np.isin(v, (0.0, 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{where}: row {s.index[i]!r}, field {name!r}: {s.iloc[i]!r} is not 0 or 1")
    return v


def ppi_contrasts(df: pd.DataFrame, contrasts: Mapping[str, Mapping[str, float]] | None = None, *,
                  group: str = "group", judge: str = "judge", human: str = "human", cluster: str = "cluster",
                  level: float = 0.95, where: str = "ppi_contrasts") -> pd.DataFrame:
    """Judge-based rates per group and contrasts of them, raw and corrected
    by the human labels (module docstring, 1).

    ``df``: one row per judged unit (a sample, a note): ``group``,
    ``cluster`` (the unit that repeats across groups: question, dialog),
    ``judge`` (the verdict, 1 = YES, 0 = NO; NaN: unread, left out) and
    ``human`` (the person's label, NaN where none). ``contrasts``: name →
    {group: weight} (a disparity b − a is {b: 1, a: −1}); every group's
    own rate is returned as well. Columns: what (the group or the
    contrast), kind (rate | contrast), n (judged rows), n_labelled,
    clusters, raw (the judge's rate or contrast), raw_se, raw_lo, raw_hi
    (clustered, t on C − 1 df), corrected, se, lo, hi, p (H0: 0; for a
    rate NaN), df, rectifier (corrected − raw). Where the SE is 0 (every
    cluster alike) the interval is NaN, never one of zero width. A group without a label
    has corrected NaN: its judge cannot be corrected from other groups'
    labels without assuming it errs alike (which is what a disparity
    audit cannot assume)."""
    if judge not in df or group not in df or cluster not in df:
        raise ValueError(f"{where}: needs columns {group!r}, {cluster!r}, {judge!r}; has {list(df.columns)}")
    d = pd.DataFrame({group: df[group].to_numpy(), cluster: df[cluster].to_numpy(),
                      "_y": _binary(df[judge], judge, where),
                      "_h": _binary(df[human], human, where) if human in df else np.nan})
    d = d[np.isfinite(d["_y"].to_numpy())]
    groups = list(pd.unique(d[group]))
    items = [(str(g), {g: 1.0}, "rate") for g in groups]
    for name, w in (contrasts or {}).items():
        missing = [g for g in w if g not in groups]
        if missing:
            raise ValueError(f"{where}: contrast {name!r} names group(s) {missing} not among {groups}")
        items.append((name, dict(w), "contrast"))
    cid = pd.factorize(d[cluster])[0]
    C = int(cid.max()) + 1 if len(cid) else 0
    q = 0.5 + level / 2
    raw_psi, cor_psi, stats_ = {}, {}, {}
    gcode = pd.Categorical(d[group], categories=groups).codes
    masks = {g: gcode == i for i, g in enumerate(groups)}
    Y, H = d["_y"].to_numpy(), d["_h"].to_numpy()
    for g in groups:
        m = masks[g]
        y, h = Y[m], H[m]
        lab = np.isfinite(h)
        N, n = int(m.sum()), int(lab.sum())
        mean_y = float(y.mean())
        raw = np.bincount(cid[m], weights=(y - mean_y) / N, minlength=C)
        rect, cor = np.nan, np.full(C, np.nan)
        if n:
            r = h[lab] - y[lab]
            rect = float(r.mean())
            small = np.sqrt(n / (n - 1)) if n > 1 else np.nan     # the labels' own n/(n − 1)
            cor = raw + small * np.bincount(cid[m][lab], weights=(r - rect) / n, minlength=C)
        labelled_clusters = set(cid[m][lab].tolist())
        stats_[g] = (N, n, mean_y, rect, labelled_clusters)
        raw_psi[g], cor_psi[g] = raw, cor
    rows = []
    for name, w, kind in items:
        N = sum(stats_[g][0] for g in w)
        n_lab = sum(stats_[g][1] for g in w)
        raw_est = sum(c * stats_[g][2] for g, c in w.items())
        cor_est = sum(c * (stats_[g][2] + stats_[g][3]) for g, c in w.items())
        rp = sum(c * raw_psi[g] for g, c in w.items())
        cp = sum(c * cor_psi[g] for g, c in w.items())
        used = np.zeros(C, dtype=bool)
        for g in w:
            used[cid[masks[g]]] = True
        Cu = int(used.sum())
        CL = len(set().union(*(stats_[g][4] for g in w)))
        raw_se = float(np.sqrt(Cu / (Cu - 1) * (rp[used] ** 2).sum())) if Cu > 1 else np.nan
        se = float(np.sqrt(Cu / (Cu - 1) * (cp[used] ** 2).sum())) if Cu > 1 and np.isfinite(cor_est) else np.nan
        tr = sstats.t.ppf(q, Cu - 1) if Cu > 1 else np.nan
        dfc = max(min(CL, Cu) - 1, 0)
        tc = sstats.t.ppf(q, dfc) if dfc > 0 else np.nan
        p = (float(2 * sstats.t.sf(abs(cor_est) / se, dfc)) if kind == "contrast" and dfc > 0 and se > 0
             else np.nan)
        floor = sum(min(c, 0.0) for c in w.values())      # the contrast's range: [0, 1] for a rate, [−1, 1] for a
        ceil = sum(max(c, 0.0) for c in w.values())       # difference of two; intervals are cut to it
        if not raw_se > 0:                  # every cluster the same: no interval, never one of zero width
            tr = np.nan
        if not se > 0:
            tc, p = np.nan, np.nan
        rows.append({"what": name, "kind": kind, "n": N, "n_labelled": n_lab, "clusters": Cu, "raw": raw_est,
                     "raw_se": raw_se, "raw_lo": max(raw_est - tr * raw_se, floor),
                     "raw_hi": min(raw_est + tr * raw_se, ceil), "corrected": cor_est, "se": se,
                     "lo": max(cor_est - tc * se, floor), "hi": min(cor_est + tc * se, ceil), "p": p,
                     "df": dfc, "rectifier": cor_est - raw_est})
    return pd.DataFrame(rows)


def join_labels(verdicts: pd.DataFrame, human: pd.DataFrame, keys: Sequence[str] = ("model", "item_id", "condition",
                                                                                       "sample"),
                verdict: str = "verdict", label: str = "label", yes: str = "CORRECT") -> pd.DataFrame:
    """The judge's verdicts with the people's labels where given (read by
    :func:`medaudit.prep.labels.load_human_labels`), both as 1 (``yes``) / 0 /
    NaN in ``judge`` and ``human``. A labelled row that matches no verdict
    is an error naming it (a label for an answer the judge never saw)."""
    keys = list(keys)
    h = human[keys + [label]].copy()
    v = verdicts.copy()
    for k in keys:
        h[k], v[k] = h[k].astype(str), v[k].astype(str)
    if h.duplicated(keys).any():
        dup = h[h.duplicated(keys)].iloc[0]
        raise ValueError(f"human labels: {dict(dup[keys])} is labelled twice")
    m = v.merge(h, on=keys, how="left", suffixes=("", "_human"), indicator=True)
    orphan = h.merge(v[keys], on=keys, how="left", indicator=True)
    orphan = orphan[orphan["_merge"] == "left_only"]
    if len(orphan):
        raise ValueError(f"human labels: {len(orphan)} labelled row(s) match no judge verdict, e.g. "
                         f"{dict(orphan.iloc[0][keys])}")
    lab_col = f"{label}_human" if label == verdict else label
    m["judge"] = np.where(m[verdict].isna(), np.nan, (m[verdict] == yes).astype(float))
    m["human"] = np.where(m[lab_col].isna(), np.nan, (m[lab_col] == yes).astype(float))
    return m.drop(columns=["_merge"])


# --------------------------------------------------------------------------
# 2. without labels: the band over the judge's error rate


def error_band(estimate: float, lo: float, hi: float, e_seed: float, spread: float = 2.0,
               steps: Sequence[float] = (0.0, 0.5, 1.0), bounds: tuple[float, float] = (-1.0, 1.0)) -> dict:
    """Does a judge-based contrast survive the judge's error (module
    docstring, 2)?

    ``estimate``, ``lo``, ``hi``: the contrast and its sampling interval
    on the judge's verdicts (a share, not points); ``e_seed``: the
    disagreement rate the seed reports; ``spread``: the verdicts per unit
    the contrast is built from (2 for a difference of two rates, G for a
    %dlg over G notes, 1 for one rate against 0). Returns tipping_error
    (the e at which lo − spread·e or hi + spread·e reaches 0; 0 when the
    interval already holds 0), survives (tipping_error > e_seed), band_lo /
    band_hi (the interval widened by spread · e_seed), and one lo/hi pair per
    fraction of e_seed in ``steps`` (``lo@0.5`` …); even_corrected: the
    difference of two rates had the judge erred alike in both groups with
    fpr = fnr = e_seed (disagreement e_seed at any prevalence), which
    shows (1 − 2·e_seed) of the true difference: estimate / (1 − 2·e_seed).
    The widened limits are cut to ``bounds``, the quantity's own range
    ([−1, 1] for a difference, [0, 1] for a share or a range)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        tip = float("nan")
    elif lo > 0:
        tip = lo / spread
    elif hi < 0:
        tip = -hi / spread
    else:
        tip = 0.0
    out = {"e_seed": e_seed, "spread": spread, "tipping_error": tip,
           "survives": bool(np.isfinite(tip) and tip > e_seed),
           "band_lo": max(lo - spread * e_seed, bounds[0]), "band_hi": min(hi + spread * e_seed, bounds[1]),
           "even_corrected": estimate / (1 - 2 * e_seed) if e_seed < 0.5 else float("nan")}
    for s in steps:
        out[f"lo@{s:g}"] = max(lo - spread * s * e_seed, bounds[0])
        out[f"hi@{s:g}"] = min(hi + spread * s * e_seed, bounds[1])
    return out


def band_columns(b: dict, scale: float = 100.0) -> dict:
    """:func:`error_band` as a table's columns in points: the seed's e,
    the tipping error, the widened interval and the verdict."""
    return {"judge e (seed)": scale * b["e_seed"], "tipping e": scale * b["tipping_error"],
            "band lo": scale * b["band_lo"], "band hi": scale * b["band_hi"],
            "survives judge error": "yes" if b["survives"] else "no"}


# --------------------------------------------------------------------------
# the table the notebooks show


def judge_table(df: pd.DataFrame, contrasts: Mapping[str, Mapping[str, float]], e_seed: float, *,
                by: Sequence[str] = ("model",), group: str = "group", cluster: str = "cluster",
                level: float = 0.95, where: str = "judge_table") -> pd.DataFrame:
    """Per ``by`` cell: each group's judge-based rate and each contrast,
    raw (the judge's) and corrected by the human labels where ``df`` has
    any (:func:`ppi_contrasts`; NaN without), in %/points, with the band
    over the judge's disagreement rate up to ``e_seed`` on the raw contrast
    (:func:`error_band`, spread 2: a difference of two rates). Contrasts
    whose groups a cell lacks are left out of it. The judge's raw rates
    carry no interval here (a proportion's interval is its own table's:
    Wilson or Clopper–Pearson); contrasts carry the
    clustered t interval of :func:`ppi_contrasts`."""
    out = []
    cells = df.groupby(list(by), sort=False) if by else [((), df)]
    for key, g in cells:
        key = key if isinstance(key, tuple) else (key,)
        present = set(g[group])
        cs = {n: w for n, w in contrasts.items() if set(w) <= present}
        r = ppi_contrasts(g, cs, group=group, cluster=cluster, level=level, where=where)
        bands = [band_columns(error_band(x, lo, hi, e_seed, 2.0)) if k == "contrast" else {}
                 for x, lo, hi, k in zip(r["raw"], r["raw_lo"], r["raw_hi"], r["kind"])]
        r = pd.concat([r, pd.DataFrame(bands, index=r.index)], axis=1)
        r.loc[r["kind"] == "rate", ["raw_lo", "raw_hi"]] = np.nan   # a rate's own interval is its table's
        for c in ("raw", "raw_lo", "raw_hi", "corrected", "lo", "hi"):
            r[c] = 100 * r[c]
        out.append(r.assign(**dict(zip(by, key))))
    if not out:
        return pd.DataFrame()
    r = pd.concat(out, ignore_index=True)
    keep = ["what", "kind", "n", "n_labelled", "clusters", "raw", "raw_lo", "raw_hi", "corrected", "lo", "hi", "p",
            "judge e (seed)", "tipping e", "band lo", "band hi", "survives judge error"]
    return r[[*by, *[c for c in keep if c in r.columns]]]


# --------------------------------------------------------------------------
# the constructed judge whose errors differ by group (docs/statistics.md's coverage table)

TRUE_RATES = (0.60, 0.50)      # people's rates in groups A and B: the disparity B − A is −10 points
JUDGE_SENS, JUDGE_SPEC = (0.95, 0.80), (0.95, 0.60)


def constructed_audit(rng: np.random.Generator, n_questions: int, label_share: float, sens=JUDGE_SENS,
                      spec=JUDGE_SPEC, rates=TRUE_RATES, sigma: float = 0.8) -> pd.DataFrame:
    """One simulated audit: every question under groups A and B, the
    people's verdict from a probit with a question effect shared by both
    groups (σ on the probit scale; marginal rates exactly ``rates``), the
    judge's with sensitivity / specificity per group, a person's label on a
    random ``label_share`` of the rows. Columns: group, cluster, judge, human."""
    u = rng.normal(size=n_questions)
    rows = []
    for g, p, se, sp in zip("AB", rates, sens, spec):
        a = sstats.norm.ppf(p) * np.sqrt(1 + sigma ** 2)
        y = (rng.random(n_questions) < sstats.norm.cdf(a + sigma * u)).astype(float)
        j = np.where(y == 1, rng.random(n_questions) < se, rng.random(n_questions) > sp).astype(float)
        lab = rng.random(n_questions) < label_share
        rows.append(pd.DataFrame({"group": g, "cluster": np.arange(n_questions), "judge": j,
                                  "human": np.where(lab, y, np.nan)}))
    return pd.concat(rows, ignore_index=True)


def coverage(n_questions: int, label_share: float, audits: int = 1500, seed: int = 0) -> dict:
    """Share of :func:`constructed_audit` runs whose corrected 95% interval
    holds the truth, for A, B and B − A, and the raw one for B − A."""
    rng = np.random.default_rng(seed)
    truth = {"A": TRUE_RATES[0], "B": TRUE_RATES[1], "B - A": TRUE_RATES[1] - TRUE_RATES[0]}
    hits = {k: 0 for k in truth} | {"raw B - A": 0}
    for _ in range(audits):
        r = ppi_contrasts(constructed_audit(rng, n_questions, label_share), {"B - A": {"B": 1, "A": -1}}
                          ).set_index("what")
        for k, t in truth.items():
            hits[k] += bool(r.loc[k, "lo"] <= t <= r.loc[k, "hi"])
        hits["raw B - A"] += bool(r.loc["B - A", "raw_lo"] <= truth["B - A"] <= r.loc["B - A", "raw_hi"])
    return {k: v / audits for k, v in hits.items()}


def main(argv=None) -> int:
    """``python -m medaudit.stats.judge_error [--audits N]``: docs/statistics.md's
    coverage table of the corrected interval on the constructed judge."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--audits", type=int, default=1500)
    a = ap.parse_args(argv)
    rows = []
    for nq, share in ((1000, 0.03), (100, 0.3), (1000, 0.06), (120, 0.5)):
        c = coverage(nq, share, a.audits, seed=nq + int(100 * share))
        rows.append({"questions": nq, "labels per group": round(nq * share),
                     **{k: f"{100 * v:.1f}%" for k, v in c.items()}})
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
