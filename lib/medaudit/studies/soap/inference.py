"""Tests and intervals for the SOAP-note audit's incidence metrics (seed 002
§4.1), paired over the dialogs, with the judge's error
carried through (:mod:`medaudit.stats.judge_error`).

Per model, dataset, context, speaker and axis, every dialog of the cell
(N, :func:`medaudit.studies.soap.incidence_metrics`' denominator: a dialog whose
augmentation failed has no note and counts as no YES under every group, an
unread verdict as no YES) is one cluster with one verdict per group:
the baseline (BL) and G counterfactual groups. So every comparison is
paired within the dialog, and dialogs are the only unit that repeats.

- **BL(%)**: a proportion of N dialogs, Clopper–Pearson interval (never
  below its level, at any N).
- **ΔBL** of each group (its incidence − BL): Newcombe's interval for a
  difference of paired proportions (Newcombe 1998, *Stat Med* 17:2635,
  method 10: each margin's limits combined with the paired correlation φ),
  with Clopper–Pearson limits for the margins where Newcombe uses Wilson's
  (his falls to 90% coverage at some points from n = 8 on; this one stays
  near 93% and averages 97%: :func:`medaudit.stats.intervals.newcombe_paired`),
  and the exact McNemar test (:func:`medaudit.stats.paired.mcnemar_test`).
  **max ΔBL** is a maximum over G groups: its interval is
  [max_g lo_g, max_g hi_g] of the G intervals at level 1 − α/G
  (Bonferroni), which holds the true maximum whenever all G hold their
  difference; its p the Bonferroni-adjusted smallest McNemar p.
- **ΔCF**, the range of incidence over the counterfactuals, the same way
  over the G(G−1)/2 pairs: R = max |d_gh| lies in [max(0, max_gh
  max(lo_gh, −hi_gh)), max_gh max(hi_gh, −lo_gh)].
- **%dlg**, the share of dialogs whose counterfactual verdicts are not all
  equal: Clopper–Pearson. Under greedy decoding a dialog can only differ
  through the appended answer or through the judge; the judge column says
  how much of %dlg a judge disagreeing with people on e of its verdicts
  could make alone (G verdicts per dialog: up to G·e of the dialogs), at
  the seed's e (91% agreement with scribes, A.1), and whether %dlg's
  lower limit stays above it.

Every contrast carries :func:`medaudit.stats.judge_error.error_band` at the
seed's disagreement rate: ΔBL and ΔCF are differences of two rates (spread
2), %dlg spreads over G verdicts. With human labels on notes
(:func:`corrected_incidence`) the rates and ΔBL are corrected by
prediction-powered inference instead.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from medaudit.stats import judge_error
from .config import BASELINE, YES, SoapConfig
from medaudit.stats.intervals import newcombe_paired
from medaudit.stats.paired import mcnemar_test

ALPHA = 0.05


def _wide(g: pd.DataFrame, groups: list[str], n_failed: int) -> pd.DataFrame:
    """Dialogs × groups of 0/1 (unread: 0), failed augmentations as rows of 0."""
    y = g.assign(pos=(g["incidence"] == YES).astype(int))
    w = y.pivot_table(index="unit", columns="group", values="pos", aggfunc="max").reindex(columns=groups).fillna(0)
    if n_failed:
        w = pd.concat([w, pd.DataFrame(0, index=[f"(not augmented {i})" for i in range(n_failed)], columns=groups)])
    return w.astype(int)


def _failed(aug: pd.DataFrame | None) -> dict:
    if aug is None or not len(aug):
        return {}
    f = aug if "aug_axis" in aug.columns else aug.assign(aug_axis="")
    f = f[~f["ok"].astype(bool)]
    return f.groupby(["dataset", "context", "speaker", "aug_axis"]).size().to_dict()


def incidence_inference(verdicts: pd.DataFrame, config: SoapConfig, aug: pd.DataFrame | None = None,
                        alpha: float = ALPHA, e_seed: float | None = None) -> pd.DataFrame:
    """One row per cell and metric (BL, ΔBL:<group>, max ΔBL, ΔCF, %dlg):
    estimate, lo, hi (in %, points for differences), p (NaN for BL and
    %dlg), test, N (dialogs), and the judge band (:func:`judge_error.band_columns`
    at ``e_seed``, default the seed's incidence judge, 9%)."""
    e = judge_error.seed_disagreement("soap_incidence") if e_seed is None else e_seed
    keys = ["model", "dataset", "context", "speaker", "axis"]
    failed = _failed(aug)
    rows = []
    for key, g in verdicts.groupby(keys, sort=False):
        ax = key[4]
        cfs = [v for v in config.values(ax) if v in set(g["group"])]
        n_failed = int(failed.get((key[1], key[2], key[3], config.aug_axis(key[2], ax)), 0))
        w = _wide(g, [BASELINE, *cfs], n_failed)
        N = len(w)
        base = dict(zip(keys, key))

        def add(metric, est, lo, hi, p, test, spread, floor=-1.0):
            band = judge_error.band_columns(judge_error.error_band(est / 100, lo / 100, hi / 100, e, spread,
                                                                   bounds=(floor, 1.0))) if spread else {}
            rows.append({**base, "metric": metric, "N": N, "estimate": est, "lo": lo, "hi": hi, "p": p,
                         "test": test, **band})

        k = int(w[BASELINE].sum())
        lo, hi = proportion_confint(k, N, alpha, method="beta") if N else (np.nan, np.nan)
        add("BL", 100 * k / N if N else np.nan, 100 * lo, 100 * hi, np.nan, "Clopper-Pearson", 0)
        G = len(cfs)
        if not G or not N:
            continue
        simul = []
        for cf in cfs:
            est, lo, hi = newcombe_paired(w[BASELINE], w[cf], alpha)
            p = mcnemar_test(w[BASELINE], w[cf], exact_below=10 ** 9)["pvalue"]
            add(f"ΔBL:{config.short(ax).get(cf, cf)}", 100 * est, 100 * lo, 100 * hi, p,
                "Newcombe paired; exact McNemar", 2)
            _, slo, shi = newcombe_paired(w[BASELINE], w[cf], alpha / G)
            simul.append((est, slo, shi, p))
        s = np.array(simul)
        add("max ΔBL", 100 * s[:, 0].max(), 100 * s[:, 1].max(), 100 * s[:, 2].max(), min(1.0, G * s[:, 3].min()),
            f"Bonferroni over {G}", 2)
        if G > 1:
            pairs = list(combinations(cfs, 2))
            lows, highs, ps = [], [], []
            for g1, g2 in pairs:
                _, lo, hi = newcombe_paired(w[g1], w[g2], alpha / len(pairs))
                lows.append(max(lo, -hi))
                highs.append(max(hi, -lo))
                ps.append(mcnemar_test(w[g1], w[g2], exact_below=10 ** 9)["pvalue"])
            rates = w[cfs].mean()
            add("ΔCF", 100 * (rates.max() - rates.min()), 100 * max(0.0, max(lows)), 100 * max(highs),
                min(1.0, len(pairs) * min(ps)), f"Bonferroni over {len(pairs)} pairs", 2, floor=0.0)
        diverge = int((w[cfs].nunique(axis=1) > 1).sum())
        lo, hi = proportion_confint(diverge, N, alpha, method="beta")
        add("%dlg", 100 * diverge / N, 100 * lo, 100 * hi, np.nan, "Clopper-Pearson", G, floor=0.0)
    return pd.DataFrame(rows)


def corrected_incidence(verdicts: pd.DataFrame, human: pd.DataFrame, config: SoapConfig,
                        level: float = 1 - ALPHA) -> pd.DataFrame:
    """Per cell, each group's incidence and each ΔBL corrected by the human
    labels (:func:`medaudit.stats.judge_error.ppi_contrasts`, clustered by
    dialog), in %. ``human``: :func:`medaudit.prep.labels.load_human_labels`
    (YES / NO) of the notebook's template, keyed like
    :func:`medaudit.studies.soap.judge_labels`. A group without labels (the
    template labels baseline notes, as the seed's scribes did) has no
    corrected value: correcting a disparity needs labels on the
    counterfactual notes too."""
    v = verdicts.assign(item_id=verdicts["model"] + "|" + verdicts["unit"],
                        condition=verdicts["axis"] + ":" + verdicts["group"], sample=0,
                        verdict=verdicts["incidence"])
    j = judge_error.join_labels(v, human, yes=YES)
    keys = ["model", "dataset", "context", "speaker", "axis"]
    out = []
    for key, g in j.groupby(keys, sort=False):
        cfs = [c for c in config.values(key[4]) if c in set(g["group"])]
        r = judge_error.ppi_contrasts(g.assign(judge=g["judge"].fillna(0.0)),
                                      {f"ΔBL:{c}": {c: 1, BASELINE: -1} for c in cfs},
                                      group="group", cluster="unit", level=level, where="soap incidence")
        out.append(r.assign(**dict(zip(keys, key))))
    if not out:
        return pd.DataFrame()
    r = pd.concat(out, ignore_index=True)
    for c in ("raw", "raw_lo", "raw_hi", "corrected", "lo", "hi", "se", "raw_se", "rectifier"):
        r[c] = 100 * r[c]
    return r[[*keys, *[c for c in r.columns if c not in keys]]]
