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
* **Non-additivity** of orientation × religion: see :func:`nonadditivity_test`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy import stats as sstats
from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar
from statsmodels.stats.multitest import multipletests

from .metrics import N_BINS, bin_index

UNITS = ("model", "prompt_format")
METRICS = ("accuracy", "majority_accuracy", "confidence", "brier", "ece", "auroc")
EXACT_BELOW = 25


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
    ci_hi, p_boot, n_items, n_boot_finite and one ``value[<condition>]``
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
        raise ValueError("no unit has all the conditions of any contrast")
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
                        "n_items": n_items, "n_boot_finite": int(np.isfinite(d).sum()),
                        **{f"value[{cnd}]": float(point[m][0, comp[cnd]]) for cnd in w}})
    return BootstrapResult(pd.DataFrame(out), draws, idx.shape[0], seed)


def paired_bootstrap(qt: pd.DataFrame, base: str = "base", conditions: Iterable[str] | None = None, *,
                     pairs: Iterable[tuple[str, str]] | None = None, n_boot: int = 1000, seed: int = 0,
                     idx: np.ndarray | None = None, units: Sequence[str] = UNITS,
                     confidence: str = "confidence", correct: str = "majority_correct",
                     accuracy: str = "single_correct", metrics: Sequence[str] = METRICS,
                     n_bins: int = N_BINS, mcnemar: bool = True) -> pd.DataFrame:
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
    res = res[cols]
    if mcnemar:
        res = _add_mcnemar(res, qt, unit_cols, confidence, correct, accuracy)
    return res


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
    res = pd.concat([res.reset_index(drop=True), pd.DataFrame(extra)], axis=1)
    res["p"] = np.where(res["metric"] == "accuracy", res["p_mcnemar"], res["p_boot"])
    return res


# --------------------------------------------------------------------------
# multiple testing


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
                adj[ok] = multipletests(p[ok], method=method)[1]
                out.iloc[ix, out.columns.get_loc(f"{col}_{suffix}")] = adj
    return out


# --------------------------------------------------------------------------
# non-additivity of orientation × religion

ORIENTATIONS = ("hetero", "homo", "gay", "bi")
RELIGIONS = ("Cat", "Mus", "Ath")


def condition_factors(conditions: Iterable[str], base: str = "base",
                      orientations: Iterable[str] = ORIENTATIONS,
                      religions: Iterable[str] = RELIGIONS) -> pd.DataFrame:
    """(condition, orientation, religion) for the conditions made only of
    known tokens ("+homo+Cat" → homo, Cat; base → none, none); others are
    left out. Absent factors are the string "none"."""
    ori, rel = set(orientations), set(religions)
    rows = []
    for cond in conditions:
        if cond == base:
            rows.append((cond, "none", "none"))
            continue
        toks = [t for t in str(cond).split("+") if t]
        o = [t for t in toks if t in ori]
        r = [t for t in toks if t in rel]
        if toks and len(o) <= 1 and len(r) <= 1 and len(o) + len(r) == len(toks):
            rows.append((cond, o[0] if o else "none", r[0] if r else "none"))
    return pd.DataFrame(rows, columns=["condition", "orientation", "religion"])


def interaction_design(factors: pd.DataFrame) -> pd.DataFrame:
    """Dummy design per condition: one column per non-"none" orientation and
    religion level, and one ``o:r`` column for each joint condition present.
    Index: condition. The base (none, none) row is all zeros."""
    f = factors.set_index("condition")
    cols = {}
    for o in sorted(set(f["orientation"]) - {"none"}):
        cols[o] = (f["orientation"] == o).astype(float)
    for r in sorted(set(f["religion"]) - {"none"}):
        cols[r] = (f["religion"] == r).astype(float)
    for o, r in sorted({(o, r) for o, r in zip(f["orientation"], f["religion"]) if "none" not in (o, r)}):
        cols[f"{o}:{r}"] = ((f["orientation"] == o) & (f["religion"] == r)).astype(float)
    return pd.DataFrame(cols, index=f.index)


def nonadditivity_test(qt: pd.DataFrame, *, outcome: str = "single_correct", method: str = "conditional",
                       factors: pd.DataFrame | None = None, base: str = "base",
                       orientation: str = "homo", level: float = 0.95) -> dict:
    """Is the joint effect of orientation and religion different from the sum
    of the single effects? A logit model of per-question correctness with
    item effects, fitted to ONE model's questions (filter ``qt`` first).

    ``logit P(correct_ic) = α_i + Σ_o β_o·O_o(c) + Σ_r γ_r·R_r(c) + Σ_{o,r} δ_or·O_o(c)·R_r(c)``

    with α_i one effect per item; ``δ_or`` is the non-additivity on the
    log-odds scale: 0 when the joint condition's log-odds shift equals the sum
    of the two single shifts.

    ``method="conditional"`` (default): conditional logit
    (``statsmodels`` ``ConditionalLogit``, groups = items). Conditioning on
    each item's number of correct answers removes α_i exactly, so 2,364 item
    effects need not be estimated: an unconditional logit with that many
    dummies is biased with ~8 observations per item (incidental parameters)
    and fails to converge for the many items answered right (or wrong) under
    every condition, whose α_i is infinite. Those items carry no information
    about the condition effects and drop out (``n_items_informative``).
    ``method="gee"``: a population-averaged logit (GEE, exchangeable
    working correlation within item, robust SEs) as a sensitivity check; its
    coefficients are marginal, hence smaller in magnitude.

    Returns a dict: ``coefficients`` (term, coef, se, ci_lo, ci_hi, p,
    odds_ratio, interaction), ``pooled`` (the mean of the ``orientation:r``
    interactions with its Wald CI and p: one 1-df test of non-additivity
    for ``orientation``), ``joint`` (Wald χ² that all interactions are 0:
    chi2, df, p), and n_obs, n_items, n_items_informative, method,
    converged, max_abs_score (conditional: the largest |gradient| of the
    log-likelihood per observation at the estimate).
    """
    if factors is None:
        factors = condition_factors(pd.unique(qt["condition"]), base=base)
    design = interaction_design(factors)
    d = qt[qt["condition"].isin(design.index) & qt[outcome].notna()]
    X = design.loc[d["condition"]].to_numpy()
    keep = X.std(axis=0) > 0
    names = list(design.columns[keep])
    X = X[:, keep]
    y = d[outcome].to_numpy(dtype=float)
    groups = pd.factorize(d["item_id"])[0]
    fit, conv, score = _fit_logit(y, X, groups, method)
    params, cov = np.asarray(fit.params)[-len(names):], np.asarray(fit.cov_params())[-len(names):, -len(names):]
    se = np.sqrt(np.diag(cov))
    z = sstats.norm.ppf(0.5 + level / 2)
    coef = pd.DataFrame({"term": names, "coef": params, "se": se, "ci_lo": params - z * se,
                         "ci_hi": params + z * se, "p": 2 * sstats.norm.sf(np.abs(params / se)),
                         "odds_ratio": np.exp(params), "interaction": [":" in t for t in names]})
    inter = np.array([":" in t for t in names])
    joint = _wald(params[inter], cov[np.ix_(inter, inter)])
    mine = np.array([t.startswith(f"{orientation}:") for t in names])
    pooled = _linear(params, cov, mine / max(mine.sum(), 1), z) if mine.any() else None
    per_item = pd.Series(y).groupby(groups).agg(["min", "max"])
    return {"coefficients": coef, "pooled": pooled, "joint": joint, "n_obs": int(len(y)),
            "n_items": int(per_item.shape[0]),
            "n_items_informative": int((per_item["min"] != per_item["max"]).sum()),
            "method": method, "converged": conv, "max_abs_score": score}


def _fit_logit(y: np.ndarray, X: np.ndarray, groups: np.ndarray, method: str):
    """(fitted results, converged?, max |score| at the estimate)."""
    import statsmodels.api as sm
    from statsmodels.discrete.conditional_models import ConditionalLogit
    from statsmodels.tools.sm_exceptions import ModelWarning

    if method == "conditional":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModelWarning)
            model = ConditionalLogit(y, X, groups=groups)
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


def _wald(b: np.ndarray, v: np.ndarray) -> dict:
    if not b.size:
        return {"chi2": np.nan, "df": 0, "p": np.nan}
    chi2 = float(b @ np.linalg.solve(v, b))
    return {"chi2": chi2, "df": int(b.size), "p": float(sstats.chi2.sf(chi2, b.size))}


def _linear(b: np.ndarray, v: np.ndarray, w: np.ndarray, z: float) -> dict:
    est, se = float(w @ b), float(np.sqrt(w @ v @ w))
    return {"coef": est, "se": se, "ci_lo": est - z * se, "ci_hi": est + z * se,
            "p": float(2 * sstats.norm.sf(abs(est / se)))}


def interaction_contrasts(orientation: str = "+homo", religions: Iterable[str] = ("+Cat", "+Mus", "+Ath"),
                          base: str = "base") -> dict[str, dict[str, float]]:
    """Difference-in-differences contrasts for :func:`bootstrap_contrasts`:
    ``(joint − base) − (orientation − base) − (religion − base)`` per
    religion, i.e. the joint delta minus the sum of the single deltas on the
    metric's own scale (percentage points for accuracy, Brier units …)."""
    return {f"{orientation}{r} − ({orientation}) − ({r})": {base: 1.0, orientation: -1.0, r: -1.0,
                                                            f"{orientation}{r}": 1.0}
            for r in religions}


# --------------------------------------------------------------------------
# agreement between label sources and between clusterings


def agreement(a: Sequence, b: Sequence) -> dict:
    """Raw agreement and Cohen's kappa between two label sources on the
    same units (pairs where either is missing are left out)."""
    from sklearn.metrics import cohen_kappa_score

    x, y = pd.Series(list(a), dtype=object), pd.Series(list(b), dtype=object)
    keep = x.notna() & y.notna()
    x, y = x[keep].astype(str), y[keep].astype(str)
    n = int(keep.sum())
    if n == 0:
        return {"n": 0, "agreement": np.nan, "kappa": np.nan}
    kappa = cohen_kappa_score(x, y) if len(set(x) | set(y)) > 1 else np.nan
    return {"n": n, "agreement": float((x.to_numpy() == y.to_numpy()).mean()), "kappa": float(kappa)}


def partition_agreement(a: Sequence[int], b: Sequence[int]) -> dict:
    """Two clusterings of the same samples: adjusted Rand index, and the
    raw agreement and kappa on every pair of samples being in the same
    cluster or not."""
    from sklearn.metrics import adjusted_rand_score

    a, b = np.asarray(a), np.asarray(b)
    iu = np.triu_indices(len(a), 1)
    same_a, same_b = (a[:, None] == a[None, :])[iu], (b[:, None] == b[None, :])[iu]
    pairs = agreement(same_a, same_b)
    return {"ari": float(adjusted_rand_score(a, b)) if len(a) > 1 else np.nan,
            "pair_agreement": pairs["agreement"], "pair_kappa": pairs["kappa"], "pairs": pairs["n"]}
