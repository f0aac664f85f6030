"""Paired statistics between conditions (seed 000 Table 1, A.3).

* **McNemar** on paired binary outcomes (single-sample correctness of the same
  items under two conditions), via ``statsmodels``: the exact binomial test
  when the discordant pairs ``b + c < 25``, otherwise the χ² statistic with
  continuity correction ``(|b − c| − 1)² / (b + c)``. 25 is the usual rule of
  thumb below which the χ² approximation to the binomial is poor; with no
  discordant pair at all ``p = 1``.
* **Paired bootstrap**, vectorised. Item indices are resampled ONCE
  (``B = 1,000`` resamples of the N items, seeded) and the same resamples
  serve every metric, condition and model, so every delta is paired at the
  item level and deltas of different models are computed on the same
  resampled item sets. A resample is stored as a count matrix ``K`` (B × N:
  how often item i is drawn in resample b); every metric is then a function
  of weighted sums ``K @ x``:

  - accuracy, confidence, Brier: weighted means, one dense matrix product;
  - ECE: per-bin sums of ``y − c`` (the bin of an item never changes under
    resampling), a sparse product, then ``sum_j |S_j| / n``;
  - AUROC: per distinct confidence level, the resampled numbers of correct
    and incorrect items (a sparse product), then the Mann–Whitney count
    ``sum_levels pos · (neg below + ½ neg tied)`` / (pos · neg), identical to
    ``roc_auc_score`` on the resampled arrays.

  Point estimates are the same functions with ``K`` = one row of ones.
  A comparison uses the items scored under *both* conditions (paired
  complete cases); a question with no parsed sample is left out of that
  comparison, not counted wrong.
* **Bootstrap CI and p-value**: 95 % percentile interval of the resampled
  deltas; two-sided p-value ``p = min(1, 2·min(1 + #{δ* ≤ 0},
  1 + #{δ* ≥ 0}) / (B' + 1))`` over the B' resamples where the delta is
  defined (AUROC is undefined in a resample with one class). It is the
  smallest two-sided level at which the percentile interval excludes 0 (the
  +1 keeps it above zero: with B = 1,000 the smallest p is ≈ 0.002), so
  ``p ≤ 0.05`` and "0 outside the 95 % interval" agree up to one resample.
* **Multiple testing**: Holm (family-wise) and Benjamini–Hochberg (FDR)
  adjusted p-values beside the raw ones, within families (by default each
  metric separately, across all models and comparisons in the table).
* **Non-additivity** of orientation × religion: seed 000's model,
  :func:`medaudit.studies.calibration.nonadditivity_test`.
* **What a reviewer asks for**: paired SE and clustered SE by
  the unit that truly repeats (:func:`paired_delta`, Miller 2024), the
  minimum detectable effect at the run's n for the test the table runs
  (:mod:`medaudit.stats.testpower`: exact enumeration of McNemar's power, t or z
  on a standard error; the planner ``python -m medaudit.validation.power``), the variance decomposition across vs
  within questions
  (:func:`variance_components`), one regression across cues with the
  question as the matched set (:func:`medaudit.stats.regression.cue_regression`) and the
  Stuart–Maxwell test of shifts among answer options
  (:func:`stuart_maxwell`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy import stats as sstats
from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar
from statsmodels.stats.multitest import multipletests

from medaudit.stats import testpower
from medaudit.stats.metrics import N_BINS, bin_index
from medaudit.stats.testpower import ALPHA, EXACT_BELOW, POWER, mde_from_se

UNITS = ("model", "prompt_format")
METRICS = ("accuracy", "majority_accuracy", "confidence", "brier", "ece", "auroc")


# --------------------------------------------------------------------------
# McNemar


def mcnemar_test(y_a, y_b, exact_below: int = EXACT_BELOW) -> dict:
    """McNemar test of paired 0/1 outcomes ``y_a``, ``y_b`` (same items).

    Returns n, n11 (both right), b (right under a only), c (right under b
    only), n00, method ("exact" when b + c < ``exact_below``, else
    "chi2-cc"), statistic (min(b, c) for exact, the corrected χ² otherwise)
    and pvalue.
    """
    a = np.asarray(y_a, dtype=float)
    b_ = np.asarray(y_b, dtype=float)
    if a.shape != b_.shape:
        raise ValueError("y_a and y_b differ in shape")
    ok = ~(np.isnan(a) | np.isnan(b_))
    a, b_ = a[ok].astype(bool), b_[ok].astype(bool)
    n11, b, c, n00 = int((a & b_).sum()), int((a & ~b_).sum()), int((~a & b_).sum()), int((~a & ~b_).sum())
    exact = b + c < exact_below
    out = {"n": int(ok.sum()), "n11": n11, "b": b, "c": c, "n00": n00,
           "method": "exact" if exact else "chi2-cc"}
    if b + c == 0:
        return {**out, "statistic": 0.0, "pvalue": 1.0}
    r = _sm_mcnemar([[n11, b], [c, n00]], exact=exact, correction=True)
    return {**out, "statistic": float(r.statistic), "pvalue": float(r.pvalue)}


# --------------------------------------------------------------------------
# bootstrap engine (arrays)


def resample_indices(n_items: int, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """(n_boot, n_items) item indices drawn with replacement, seeded."""
    return np.random.default_rng(seed).integers(0, n_items, size=(n_boot, n_items))


def resample_counts(idx: np.ndarray, n_items: int) -> np.ndarray:
    """(B, N) float matrix: how often each item occurs in each resample."""
    idx = np.asarray(idx)
    rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
    flat = np.bincount(rows * n_items + idx.ravel(), minlength=idx.shape[0] * n_items)
    return flat.reshape(idx.shape[0], n_items).astype(np.float64)


def _sparse_sums(Kt: np.ndarray, item: np.ndarray, col: np.ndarray, val: np.ndarray, n_cols: int) -> np.ndarray:
    """(B, n_cols) = K @ M for the sparse N × n_cols matrix M with entries
    ``val`` at (item, col); ``Kt`` is K transposed (N × B)."""
    m = sp.csr_matrix((val, (col, item)), shape=(n_cols, Kt.shape[0]))
    return np.asarray(m @ Kt).T


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _auroc_from_levels(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """AUROC per row from (B, R) weights of incorrect/correct items at R
    increasing confidence levels (ties count ½)."""
    below = np.cumsum(neg, axis=1) - neg
    u = (pos * (below + 0.5 * neg)).sum(axis=1)
    return _ratio(u, pos.sum(axis=1) * neg.sum(axis=1))


def bootstrap_metrics(counts: np.ndarray, conf: np.ndarray, correct: np.ndarray, acc: np.ndarray,
                      valid: np.ndarray, n_bins: int = N_BINS, max_cells: int = 30_000_000) -> dict[str, np.ndarray]:
    """Every metric of S series under B resamples, without a loop over resamples.

    ``counts`` (B, N): resample counts (:func:`resample_counts`; a (1, N)
    row of ones gives the point estimates). ``conf``, ``correct`` (the
    majority-vote correctness scored against ``conf``), ``acc`` (the
    single-sample correctness), ``valid`` (bool): (S, N), one row per series
    (a model × condition with its item mask). Returns metric name → (B, S):
    n, accuracy, majority_accuracy, confidence, brier, ece, auroc.
    ``max_cells`` bounds the size of the AUROC level-sum block (series are
    processed in chunks when confidences take many distinct values).
    """
    K = np.asarray(counts, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    S, N = valid.shape
    W = valid.astype(np.float64)
    c = np.where(valid, conf, 0.0)
    y = np.where(valid, correct, 0.0)
    a = np.where(valid, acc, 0.0)
    X = np.concatenate([W, W * a, W * y, W * c, W * (c - y) ** 2], axis=0).T
    sums = K @ X
    n, sa, sy, sc, sb = (sums[:, i * S:(i + 1) * S] for i in range(5))
    out = {"n": n, "accuracy": _ratio(sa, n), "majority_accuracy": _ratio(sy, n),
           "confidence": _ratio(sc, n), "brier": _ratio(sb, n)}

    Kt = np.ascontiguousarray(K.T)
    s_idx, i_idx = np.nonzero(valid)
    bins = bin_index(c[s_idx, i_idx], n_bins)
    per_bin = _sparse_sums(Kt, i_idx, s_idx * n_bins + bins, (y - c)[s_idx, i_idx], S * n_bins)
    out["ece"] = _ratio(np.abs(per_bin.reshape(-1, S, n_bins)).sum(axis=2), n)

    out["auroc"] = _bootstrap_auroc(Kt, c, y, valid, max_cells)
    return out


def _bootstrap_auroc(Kt: np.ndarray, c: np.ndarray, y: np.ndarray, valid: np.ndarray,
                     max_cells: int) -> np.ndarray:
    """(B, S) AUROC from per-level sums (see :func:`bootstrap_metrics`)."""
    S, B = valid.shape[0], Kt.shape[1]
    res = np.full((B, S), np.nan)
    plans = []
    for s in range(S):
        items = np.flatnonzero(valid[s])
        levels, inv = np.unique(c[s, items], return_inverse=True)
        plans.append((items, inv, levels.size))
    s = 0
    while s < S:
        chunk, cols = [], 0
        while s < S and (not chunk or (cols + 2 * plans[s][2]) * B <= max_cells):
            chunk.append(s)
            cols += 2 * plans[s][2]
            s += 1
        item, col, off = [], [], 0
        offsets = []
        for j in chunk:
            items, inv, r = plans[j]
            item.append(items)
            col.append(off + 2 * inv + (y[j, items] > 0.5))
            offsets.append((off, r))
            off += 2 * r
        if off == 0:
            continue
        lev = _sparse_sums(Kt, np.concatenate(item), np.concatenate(col),
                           np.ones(sum(len(i) for i in item)), off)
        for j, (o, r) in zip(chunk, offsets):
            block = lev[:, o:o + 2 * r].reshape(B, r, 2)
            res[:, j] = _auroc_from_levels(block[:, :, 0], block[:, :, 1])
    return res


def bootstrap_pvalue(deltas: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "delta = 0" (module docstring)."""
    d = np.asarray(deltas, dtype=float)
    d = d[np.isfinite(d)]
    if not d.size:
        return np.nan
    lo, hi = (d <= 0).sum() + 1, (d >= 0).sum() + 1
    return float(min(1.0, 2 * min(lo, hi) / (d.size + 1)))


def percentile_ci(deltas: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite resampled values."""
    d = np.asarray(deltas, dtype=float)
    d = d[np.isfinite(d)]
    if not d.size:
        return np.nan, np.nan
    q = 100 * (1 - level) / 2
    lo, hi = np.percentile(d, [q, 100 - q])
    return float(lo), float(hi)


# --------------------------------------------------------------------------
# bootstrap on a question table


@dataclass
class Layout:
    """A question table as (series × item) arrays: one series per unit
    (model, prompt_format) and condition."""
    items: pd.Index
    series: pd.DataFrame                  # unit columns + condition, one row per series
    conf: np.ndarray
    correct: np.ndarray
    acc: np.ndarray
    valid: np.ndarray
    index: dict = field(default_factory=dict)   # (unit tuple, condition) -> series row


def layout(qt: pd.DataFrame, units: Sequence[str] = UNITS, confidence: str = "confidence",
           correct: str = "majority_correct", accuracy: str = "single_correct") -> Layout:
    """Arrange a question table by series and item (items over the whole table)."""
    units = [u for u in units if u in qt.columns]
    keys = units + ["condition"]
    grouped = qt.groupby(keys, sort=False, observed=True)
    sid = grouped.ngroup().to_numpy()
    sdf = qt[keys].iloc[np.unique(sid, return_index=True)[1]].reset_index(drop=True)
    iid, items = pd.factorize(qt["item_id"])
    if pd.Series(sid * len(items) + iid).duplicated().any():
        raise ValueError(f"question table has duplicate rows for {keys + ['item_id']}")
    S, N = len(sdf), len(items)

    def grid(col: str) -> np.ndarray:
        g = np.full((S, N), np.nan)
        g[sid, iid] = pd.to_numeric(qt[col]).to_numpy(dtype=float)
        return g

    conf, corr, acc = grid(confidence), grid(correct), grid(accuracy)
    valid = ~(np.isnan(conf) | np.isnan(corr) | np.isnan(acc))
    index = {(tuple(r[:-1]), r[-1]): i for i, r in enumerate(sdf.itertuples(index=False, name=None))}
    return Layout(pd.Index(items), sdf, conf, corr, acc, valid, index)


def _plan(lay: Layout, contrasts: Mapping[str, Mapping[str, float]]):
    """Series (unit, condition, item mask) needed by the contrasts, deduped,
    and per (unit, contrast) the series index of each condition."""
    units = sorted({k[0] for k in lay.index}, key=str)
    rows, masks, seen, todo = [], [], {}, []
    for unit in units:
        for name, weights in contrasts.items():
            ids = [lay.index.get((unit, cond)) for cond in weights]
            if any(i is None for i in ids):
                continue
            mask = np.logical_and.reduce([lay.valid[i] for i in ids])
            key_mask = mask.tobytes()
            comp = {}
            for cond, i in zip(weights, ids):
                key = (i, key_mask)
                if key not in seen:
                    seen[key] = len(rows)
                    rows.append(i)
                    masks.append(mask)
                comp[cond] = seen[key]
            todo.append((unit, name, comp, int(mask.sum())))
    return np.array(rows, dtype=int), np.array(masks, dtype=bool).reshape(len(rows), lay.valid.shape[1]), todo


@dataclass
class BootstrapResult:
    """Per contrast and metric: estimate, CI, p-value; plus the resampled
    contrasts (``draws``: (unit, contrast, metric) -> (B,) array)."""
    table: pd.DataFrame
    draws: dict
    n_boot: int
    seed: int | None


def bootstrap_contrasts(qt: pd.DataFrame, contrasts: Mapping[str, Mapping[str, float]], *,
                        n_boot: int = 1000, seed: int = 0, idx: np.ndarray | None = None,
                        units: Sequence[str] = UNITS, confidence: str = "confidence",
                        correct: str = "majority_correct", accuracy: str = "single_correct",
                        metrics: Sequence[str] = METRICS, n_bins: int = N_BINS,
                        level: float = 0.95) -> BootstrapResult:
    """Linear contrasts of condition-level metrics, paired by item, with one
    set of resamples shared by every unit, contrast and metric.

    ``contrasts``: name → {condition: weight}, e.g. ``{"+homo − base":
    {"base": -1, "+homo": 1}}`` or the interaction ``{"base": 1, "+homo": -1,
    "+Cat": -1, "+homo+Cat": 1}``. Each contrast is evaluated within every
    unit (model, prompt_format) that has all its conditions, on the items
    scored under all of them. ``idx`` (B, N) overrides the seeded resamples
    (N = the distinct item_ids of ``qt`` in order of appearance).
    Returns a table with unit columns, contrast, metric, estimate, ci_lo,
    ci_hi, p_boot, se_boot (the standard deviation of the resampled
    contrasts), n_items, n_boot_finite and one ``value[<condition>]``
    column per condition involved.
    """
    lay = layout(qt, units, confidence, correct, accuracy)
    N = len(lay.items)
    if idx is None:
        idx = resample_indices(N, n_boot, seed)
    idx = np.asarray(idx)
    if idx.ndim != 2 or idx.shape[1] != N:
        raise ValueError(f"idx must be (B, {N})")
    rows, masks, todo = _plan(lay, contrasts)
    if not todo:
        # a partial run (an import of some conditions only): no contrast to estimate is an empty
        # table with its columns, which every caller reports as such (calibration.coverage says why)
        cols = [*lay.series.columns[:-1], "contrast", "metric", "estimate", "ci_lo", "ci_hi", "p_boot", "se_boot",
                "n_items", "n_boot_finite", *sorted({f"value[{c}]" for w in contrasts.values() for c in w})]
        return BootstrapResult(pd.DataFrame(columns=cols), {}, idx.shape[0], seed)
    args = (lay.conf[rows], lay.correct[rows], lay.acc[rows], masks)
    point = bootstrap_metrics(np.ones((1, N)), *args, n_bins=n_bins)
    boot = bootstrap_metrics(resample_counts(idx, N), *args, n_bins=n_bins)

    unit_cols = list(lay.series.columns[:-1])
    out, draws = [], {}
    for unit, name, comp, n_items in todo:
        w = contrasts[name]
        for m in metrics:
            est = sum(wt * point[m][0, comp[cnd]] for cnd, wt in w.items())
            d = sum(wt * boot[m][:, comp[cnd]] for cnd, wt in w.items())
            draws[(unit, name, m)] = d
            lo, hi = percentile_ci(d, level)
            out.append({**dict(zip(unit_cols, unit)), "contrast": name, "metric": m,
                        "estimate": float(est), "ci_lo": lo, "ci_hi": hi, "p_boot": bootstrap_pvalue(d),
                        "se_boot": float(np.nanstd(d, ddof=1)) if np.isfinite(d).sum() > 1 else np.nan,
                        "n_items": n_items, "n_boot_finite": int(np.isfinite(d).sum()),
                        **{f"value[{cnd}]": float(point[m][0, comp[cnd]]) for cnd in w}})
    return BootstrapResult(pd.DataFrame(out), draws, idx.shape[0], seed)


def paired_bootstrap(qt: pd.DataFrame, base: str = "base", conditions: Iterable[str] | None = None, *,
                     pairs: Iterable[tuple[str, str]] | None = None, n_boot: int = 1000, seed: int = 0,
                     idx: np.ndarray | None = None, units: Sequence[str] = UNITS,
                     confidence: str = "confidence", correct: str = "majority_correct",
                     accuracy: str = "single_correct", metrics: Sequence[str] = METRICS,
                     n_bins: int = N_BINS, mcnemar: bool = True, cluster: str = "item_id",
                     alpha: float = ALPHA, power: float = POWER) -> pd.DataFrame:
    """Paired deltas ``cond_b − cond_a`` of every metric, per unit.

    By default every condition against ``base`` (``cond_a = base``); pass
    ``pairs=[("+hetero", "+homo")]`` for any two conditions within a unit.
    All pairs share one set of resamples. Columns: unit columns, cond_a,
    cond_b, metric, value_a, value_b, delta, rel_delta (delta / value_a, the
    "relative % change" of seed 000 Table 1B as a fraction), ci_lo, ci_hi,
    p_boot, n_items, n_boot_finite; with ``mcnemar`` also p_mcnemar,
    mcnemar_method, b, c (for the accuracy rows: single-sample correctness on
    the paired items) and ``p``, the test seed 000 shades by (McNemar for
    accuracy, the bootstrap for the rest).

    Beside them (:func:`add_paired_errors`): se_boot, and for the
    metrics that are item means (accuracy, majority_accuracy, confidence,
    brier) se_paired, se_cluster (clustered by ``cluster``, the unit that
    truly repeats; item_id when each item is its own question), n_clusters,
    rho; for every row ``mde``, the minimum detectable |delta| at the
    row's n, ``alpha`` and ``power`` of the test the row runs (accuracy:
    the exact power of :func:`mcnemar_test` — exact below 25 discordant
    pairs, corrected χ² above — at the observed discordant share (b + c)/n,
    ``inf`` where no effect is detectable; the other item means, tested by
    the bootstrap: the z test on se_cluster; ECE and AUROC: on se_boot; NaN
    where that SE is 0), on the metric's own scale, and ``mde_method``
    (:mod:`medaudit.stats.testpower`).
    """
    if pairs is None:
        conds = list(conditions) if conditions is not None else [c for c in pd.unique(qt["condition"]) if c != base]
        pairs = [(base, c) for c in conds]
    pairs = [tuple(p) for p in pairs]
    contrasts = {f"{b} − {a}": {a: -1.0, b: 1.0} for a, b in pairs}
    res = bootstrap_contrasts(qt, contrasts, n_boot=n_boot, seed=seed, idx=idx, units=units,
                              confidence=confidence, correct=correct, accuracy=accuracy,
                              metrics=metrics, n_bins=n_bins).table
    names = {f"{b} − {a}": (a, b) for a, b in pairs}
    res["cond_a"] = res["contrast"].map(lambda k: names[k][0])
    res["cond_b"] = res["contrast"].map(lambda k: names[k][1])
    res["value_a"] = [r[f"value[{a}]"] for a, r in zip(res["cond_a"], res.to_dict("records"))]
    res["value_b"] = [r[f"value[{b}]"] for b, r in zip(res["cond_b"], res.to_dict("records"))]
    res["delta"] = res["estimate"]
    res["rel_delta"] = _ratio(res["delta"].to_numpy(), res["value_a"].abs().to_numpy())
    unit_cols = [u for u in units if u in qt.columns]
    cols = unit_cols + ["cond_a", "cond_b", "metric", "value_a", "value_b", "delta", "rel_delta",
                        "ci_lo", "ci_hi", "p_boot", "n_items", "n_boot_finite"]
    res = res[cols + ["se_boot"]]
    if mcnemar:
        res = _add_mcnemar(res, qt, unit_cols, confidence, correct, accuracy)
    return add_paired_errors(res, qt, unit_cols, confidence, correct, accuracy, cluster, alpha, power)


def add_paired_errors(res: pd.DataFrame, qt: pd.DataFrame, unit_cols: list[str], confidence: str = "confidence",
                      correct: str = "majority_correct", accuracy: str = "single_correct",
                      cluster: str = "item_id", alpha: float = ALPHA, power: float = POWER) -> pd.DataFrame:
    """se_paired, se_cluster, n_clusters, rho (:func:`paired_delta` on the
    per-item scores of the paired items) for the item-mean metrics, and
    ``mde`` / ``mde_method`` for every row (:func:`paired_bootstrap`)."""
    lay = layout(qt, unit_cols, confidence, correct, accuracy)
    if cluster not in qt.columns:
        raise ValueError(f"paired errors: no column {cluster!r} to cluster by")
    clus = (lay.items.to_numpy() if cluster == "item_id" else
            qt.drop_duplicates("item_id").set_index("item_id")[cluster].reindex(lay.items).to_numpy())
    per_item = {"accuracy": lay.acc, "majority_accuracy": lay.correct, "confidence": lay.conf,
                "brier": (lay.conf - lay.correct) ** 2}
    extra = []
    for r in res.to_dict("records"):
        row = {"se_paired": np.nan, "se_cluster": np.nan, "n_clusters": np.nan, "rho": np.nan,
               "mde": np.nan, "mde_method": None}
        unit = tuple(r[u] for u in unit_cols)
        ia, ib = lay.index.get((unit, r["cond_a"])), lay.index.get((unit, r["cond_b"]))
        if r["metric"] in per_item and ia is not None and ib is not None:
            m = lay.valid[ia] & lay.valid[ib]
            x = per_item[r["metric"]]
            e = paired_delta(x[ia][m], x[ib][m], clus[m])
            row.update(se_paired=e["se_paired"], se_cluster=e["se_cluster"], n_clusters=e["n_clusters"],
                       rho=e["rho"])
        if r["metric"] == "accuracy" and np.isfinite(r.get("b", np.nan)) and r["n_items"]:
            # the test the cell runs: mcnemar_test, exact below EXACT_BELOW discordant pairs
            row.update(mde=testpower.mcnemar_mde(r["n_items"], (r["b"] + r["c"]) / r["n_items"], alpha, power,
                                                 test="auto"),
                       mde_method=f"{testpower.LABELS['auto']}, exact power at the observed discordance")
        elif np.isfinite(row["se_cluster"]):
            row.update(mde=mde_from_se(row["se_cluster"], alpha, power), mde_method="z on se_cluster")
        elif np.isfinite(r.get("se_boot", np.nan)):
            row.update(mde=mde_from_se(r["se_boot"], alpha, power), mde_method="z on se_boot")
        extra.append(row)
    return pd.concat([res.reset_index(drop=True), pd.DataFrame(
        extra, index=range(len(res)), columns=["se_paired", "se_cluster", "n_clusters", "rho", "mde", "mde_method"])],
        axis=1)


def _add_mcnemar(res: pd.DataFrame, qt: pd.DataFrame, unit_cols: list[str], confidence: str,
                 correct: str, accuracy: str) -> pd.DataFrame:
    """McNemar p-values for the accuracy rows, on the same paired items."""
    lay = layout(qt, unit_cols, confidence, correct, accuracy)
    extra = []
    for r in res.itertuples(index=False):
        if r.metric != "accuracy":
            extra.append({"p_mcnemar": np.nan, "mcnemar_method": None, "b": np.nan, "c": np.nan})
            continue
        unit = tuple(getattr(r, u) for u in unit_cols)
        ia, ib = lay.index[(unit, r.cond_a)], lay.index[(unit, r.cond_b)]
        m = lay.valid[ia] & lay.valid[ib]
        t = mcnemar_test(lay.acc[ia][m], lay.acc[ib][m])
        extra.append({"p_mcnemar": t["pvalue"], "mcnemar_method": t["method"], "b": t["b"], "c": t["c"]})
    res = pd.concat([res.reset_index(drop=True),
                     pd.DataFrame(extra, columns=["p_mcnemar", "mcnemar_method", "b", "c"])], axis=1)
    res["p"] = np.where(res["metric"] == "accuracy", res["p_mcnemar"], res["p_boot"])
    return res


# --------------------------------------------------------------------------
# multiple testing


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), as statsmodels'
    ``multipletests(p, method="holm")[1]``: sorted ascending, the i-th
    (0-based) of m multiplied by m − i, made non-decreasing, capped at 1,
    put back in the input order. Not through ``multipletests``: its Holm
    branch runs a full garbage collection per call, whose cost grows with
    everything the process holds (0.27 s a call in notebook 04's process at
    90 questions; 04 corrects a family per metric, 07 and 08 one per cell)."""
    p = np.asarray(p, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="mergesort")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(m, 0, -1)))
    out = np.empty(m)
    out[order] = adj
    return out


def adjusted_p(p: np.ndarray, method: str) -> np.ndarray:
    """Holm (:func:`holm`) or another ``multipletests`` method's adjusted p."""
    return holm(p) if method == "holm" else multipletests(p, method=method)[1]


def adjust_pvalues(df: pd.DataFrame, p_cols: Iterable[str] = ("p",), by: Iterable[str] = ("metric",),
                   methods: Mapping[str, str] = {"holm": "holm", "bh": "fdr_bh"}) -> pd.DataFrame:
    """Add ``<p_col>_holm`` and ``<p_col>_bh`` (``multipletests``) beside each
    p-value column, correcting within each family ``by`` (default: each
    metric across every model and comparison in ``df``). NaN p-values are
    left out of the family and stay NaN."""
    out = df.copy()
    by = list(by)
    groups = ([ix for _, ix in out.groupby(by, sort=False, observed=True).indices.items()] if by
              else [np.arange(len(out))])
    for col in p_cols:
        for suffix in methods:
            out[f"{col}_{suffix}"] = np.nan
        for ix in groups:
            p = out[col].to_numpy(dtype=float)[ix]
            ok = np.isfinite(p)
            if not ok.any():
                continue
            for suffix, method in methods.items():
                adj = np.full(p.shape, np.nan)
                adj[ok] = adjusted_p(p[ok], method)
                out.iloc[ix, out.columns.get_loc(f"{col}_{suffix}")] = adj
    return out


# --------------------------------------------------------------------------
# agreement between label sources and between clusterings


# --------------------------------------------------------------------------
# paired deltas with clustered errors
#
# E. Miller, "Adding Error Bars to Evals: A Statistical Approach to Language
# Model Evaluations" (2024): score each question once (K samples averaged
# within the question first), take the paired difference d_i = s_b,i − s_a,i,
# and when several rows share one unit that truly repeats (one base question
# asked under three cultures, two answer forms, several counterfactual pairs of
# one vignette) cluster the standard error by that unit:
#
#   SE_naive   = sd(d) / √n                          (rows independent; df n − 1)
#   SE_cluster = √( C/(C−1) · Σ_c (Σ_{i∈c} (d_i − d̄))² ) / n     (df C − 1)
#
# C clusters; C/(C−1) is the usual small-sample correction (statsmodels' OLS
# ``cov_type="cluster"`` of d on a constant gives the same number). With one
# row per cluster the two coincide.


def paired_delta(y_a, y_b, clusters=None, level: float = 0.95) -> dict:
    """The paired difference ``mean(y_b − y_a)`` with its errors.

    ``y_a``, ``y_b``: per-row scores under the two conditions (0/1, or a
    question's mean over its K samples); rows where either is NaN are left
    out. ``clusters``: the unit that truly repeats, one label per row (the
    base question / vignette / dialog); default: every row its own cluster.
    Returns n, n_clusters, mean_a, mean_b, delta, sd_a, sd_b, rho (Pearson
    correlation of the paired scores; NaN when either is constant),
    se_unpaired (as if the two sets were independent: √(s_a²/n + s_b²/n)),
    se_paired (sd(d)/√n) with its t interval on n − 1 df (ci_lo, ci_hi),
    se_cluster (module comment) with its t interval on C − 1 df
    (ci_cluster_lo, ci_cluster_hi), and design_effect
    (se_cluster² / se_paired²).
    """
    a = np.asarray(y_a, dtype=float)
    b = np.asarray(y_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("y_a and y_b differ in shape")
    g = np.arange(a.size) if clusters is None else np.asarray(clusters)
    if g.shape != a.shape:
        raise ValueError("clusters must give one label per row")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b, g = a[ok], b[ok], g[ok]
    n = int(a.size)
    nan = float("nan")
    out = {"n": n, "n_clusters": 0, "mean_a": nan, "mean_b": nan, "delta": nan, "sd_a": nan, "sd_b": nan,
           "rho": nan, "se_unpaired": nan, "se_paired": nan, "ci_lo": nan, "ci_hi": nan, "se_cluster": nan,
           "ci_cluster_lo": nan, "ci_cluster_hi": nan, "design_effect": nan}
    if n == 0:
        return out
    d = b - a
    delta = float(d.mean())
    gid = pd.factorize(pd.Series(g))[0]
    C = int(gid.max()) + 1
    out.update(n_clusters=C, mean_a=float(a.mean()), mean_b=float(b.mean()), delta=delta)
    if n < 2:
        return out
    sa, sb = float(a.std(ddof=1)), float(b.std(ddof=1))
    se_p = float(d.std(ddof=1) / np.sqrt(n))
    q = 0.5 + level / 2
    t = sstats.t.ppf(q, n - 1)
    out.update(sd_a=sa, sd_b=sb, rho=float(np.corrcoef(a, b)[0, 1]) if sa > 0 and sb > 0 else nan,
               se_unpaired=float(np.sqrt((sa ** 2 + sb ** 2) / n)), se_paired=se_p,
               ci_lo=delta - t * se_p, ci_hi=delta + t * se_p)
    if C > 1:
        s = np.bincount(gid, weights=d - delta, minlength=C)
        se_c = float(np.sqrt(C / (C - 1) * (s ** 2).sum()) / n)
        tc = sstats.t.ppf(q, C - 1)
        out.update(se_cluster=se_c, ci_cluster_lo=delta - tc * se_c, ci_cluster_hi=delta + tc * se_c,
                   design_effect=(se_c / se_p) ** 2 if se_p > 0 else nan)
    return out


def cluster_p(e: dict) -> float:
    """The two-sided t-test p of a :func:`paired_delta` result on its
    clustered SE (C − 1 degrees of freedom). Where every cluster's
    difference is the same (SE 0): p 1 for no change, 0 for a change; NaN
    with fewer than two clusters."""
    C, se, delta = e["n_clusters"], e["se_cluster"], e["delta"]
    if C < 2 or not np.isfinite(delta):
        return float("nan")
    if not se > 0:
        return float(delta == 0)
    return float(2 * sstats.t.sf(abs(delta) / se, C - 1))


def delta_columns(e: dict, name: str) -> dict:
    """A :func:`paired_delta` result as a table's columns, in points: ``name``
    (100 · delta), ``<name> SE`` (clustered), ``<name> MDE`` (t on C − 1 df,
    α 0.05, power 0.8: :func:`medaudit.stats.testpower.mde_from_se`; NaN with fewer
    than two clusters), ``<name> p`` (:func:`cluster_p`) and ``<name> n``."""
    return {name: 100 * e["delta"], f"{name} SE": 100 * e["se_cluster"],
            f"{name} MDE": 100 * mde_from_se(e["se_cluster"], df=e["n_clusters"] - 1) if e["n_clusters"] > 1
            else np.nan, f"{name} p": cluster_p(e), f"{name} n": e["n"]}


# --------------------------------------------------------------------------
# power of the tests run here: medaudit.stats.testpower


def variance_components(scores: pd.DataFrame, question: str = "question", value: str = "value",
                        cost_ratio: float = 1.0) -> dict:
    """Variance across questions against variance within a question (K
    samples of each question), and the K that balances them.

    ``scores``: one row per sample (question, value). Per question the mean
    m_i and the within-question variance s_i² (ddof 1, questions with one
    sample left out of it). ``var_means`` = Var(m_i); ``within`` = mean
    s_i²; ``between`` = var_means − mean(s_i²/K_i) (the variance of the
    questions' true scores, floored at 0); ``icc`` = between / (between +
    within). ``k_suggested``: the K that minimises the variance of the mean
    for a fixed budget when a question costs ``cost_ratio`` times a sample
    on top of its K samples, ``√(cost_ratio · within / between)`` rounded up
    (two-stage sampling, Cochran 1977 §10.6); more samples per question past
    it buy less than more questions. Also n_questions, k_mean."""
    g = scores.groupby(question, sort=False)[value]
    m, s2, k = g.mean(), g.var(ddof=1), g.count()
    within = float(s2[k > 1].mean()) if (k > 1).any() else float("nan")
    var_means = float(m.var(ddof=1)) if len(m) > 1 else float("nan")
    noise = float((s2[k > 1] / k[k > 1]).mean()) if (k > 1).any() else 0.0
    between = max(var_means - noise, 0.0) if np.isfinite(var_means) else float("nan")
    tot = between + within
    k_s = (float(np.ceil(np.sqrt(cost_ratio * within / between))) if between > 0 and np.isfinite(within)
           else float("inf") if within > 0 else 1.0)
    return {"n_questions": int(len(m)), "k_mean": float(k.mean()), "var_means": var_means, "within": within,
            "between": between, "icc": between / tot if tot > 0 else float("nan"), "k_suggested": max(1.0, k_s)}


def significance_note(n: int, mde: float, scale: float = 100.0, unit: str = "pts", small_n: int = 30,
                      digits: int = 1) -> str:
    """What a mark on ``n`` items means: "" from ``small_n`` up, else
    "n=8, MDE 35.0 pts" (or "n=8, no effect detectable" when the MDE is
    infinite, "n=8, MDE n/a" when there is none to give: an SE of 0, every
    paired difference equal). Shown beside every significance
    mark on fewer than ``small_n`` items."""
    if n >= small_n:
        return ""
    if mde is None or (isinstance(mde, float) and np.isnan(mde)):
        return f"n={int(n)}, MDE n/a"
    if np.isinf(mde):
        return f"n={int(n)}, no effect detectable"
    return f"n={int(n)}, MDE {scale * mde:.{digits}f} {unit}".rstrip()


# --------------------------------------------------------------------------
# one regression across cues; shifts among answer options


def cochran_q(x) -> dict:
    """Cochran's Q for an (n subjects × k conditions) 0/1 matrix.

    ``Q = (k − 1) · (k Σ_j C_j² − T²) / (k T − Σ_i R_i²)`` with C_j the
    column (condition) totals, R_i the row (question) totals and T the
    grand total; under H0 (same success rate in every condition) Q ~ χ² with
    k − 1 df. Rows with a missing value are dropped. When every row is all
    0 or all 1 the denominator is 0 and so is the numerator: there is no
    discordance at all and we return Q = 0, p = 1 (statsmodels returns NaN).
    Returns q, df, p, n, k.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2:
        raise ValueError("x must be a 2-d (subjects × conditions) array")
    x = x[~np.isnan(x).any(axis=1)]
    if not np.isin(x, (0.0, 1.0)).all():
        raise ValueError("x must be 0/1")
    n, k = x.shape
    C, R = x.sum(axis=0), x.sum(axis=1)
    T = R.sum()
    num = (k - 1) * (k * (C ** 2).sum() - T ** 2)
    den = k * T - (R ** 2).sum()
    if den == 0:
        return {"q": 0.0, "df": k - 1, "p": 1.0, "n": n, "k": k}
    q = float(num / den)
    return {"q": q, "df": k - 1, "p": float(sstats.chi2.sf(q, k - 1)), "n": n, "k": k}


def stuart_maxwell(a, b, categories: Sequence | None = None) -> dict:
    """Stuart–Maxwell test of marginal homogeneity between two paired
    categorical answers (the option chosen under condition a and under b,
    same questions): do the answers shift among the options, not only
    between right and wrong? statsmodels ``SquareTable(...).homogeneity()``;
    pairs with a missing answer are left out. Options that no discordant
    pair involves are dropped (their row of the covariance is zero, which
    makes it singular; their marginal difference is 0, so they add nothing
    but a degree of freedom). Returns n, k (options kept), statistic, df, p
    (NaN with fewer than two options or no discordant pair). With two
    options it is McNemar's χ² without continuity correction."""
    from statsmodels.stats.contingency_tables import SquareTable

    x, y = pd.Series(list(a), dtype=object), pd.Series(list(b), dtype=object)
    keep = x.notna() & y.notna()
    x, y = x[keep].astype(str), y[keep].astype(str)
    cats = [str(c) for c in categories] if categories is not None else sorted(set(x) | set(y))
    disc = x.to_numpy() != y.to_numpy()
    cats = [c for c in cats if ((x.to_numpy() == c) & disc).any() or ((y.to_numpy() == c) & disc).any()]
    n = int(keep.sum())
    out = {"n": n, "k": len(cats), "statistic": float("nan"), "df": max(len(cats) - 1, 0), "p": float("nan")}
    if len(cats) < 2:
        return out
    both = x.isin(cats).to_numpy() & y.isin(cats).to_numpy()
    tab = pd.crosstab(pd.Categorical(x[both], cats), pd.Categorical(y[both], cats),
                      dropna=False).to_numpy(dtype=float)
    try:
        r = SquareTable(tab, shift_zeros=False).homogeneity()
    except np.linalg.LinAlgError:
        return out
    return {**out, "statistic": float(r.statistic), "df": int(r.df), "p": float(r.pvalue)}
