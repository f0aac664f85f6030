"""Accuracy, calibration, discrimination and selective prediction on arrays
(seed 000 §2, A.3), and a per-group summary of a question table.

Every array function takes ``c`` (confidence in [0, 1]) and ``y`` (1 if the
prediction is correct, else 0) of equal length and no NaN; the table
functions drop unscored questions (NaN confidence or correctness) first and
count them.

Definitions
-----------
* Brier: ``mean((c - y)**2)``.
* ECE: ``M = 10`` equal-width bins with edges ``0, 0.1, …, 1.0``; bin ``j``
  holds ``j/M <= c < (j+1)/M`` and the last bin is closed, so ``c = 1.0``
  (all K samples agree) falls in ``[0.9, 1.0]``. ``c`` is rounded to 9
  decimals before binning, so a confidence that should sit on an edge (0.5
  from a 5/5 split) is not sent to the lower bin by floating-point error.
  ``ECE = sum_j (n_j / N) |acc_j - conf_j|``; empty bins contribute nothing.
* AUROC: ``sklearn.metrics.roc_auc_score(y, c)`` (ties count one half); NaN
  when ``y`` has one class only.
* Selective prediction: questions are answered in decreasing confidence;
  covering the top fraction gives a coverage and a selective risk (error rate
  among the answered). Confidence from K samples takes few distinct values,
  so the ordering within a tie block is arbitrary; the curve is reported at
  the block ends (every threshold ``c >= t``), which is order-free.
* AURC: the area under the risk–coverage curve in Geifman & El-Yaniv's
  discrete form, ``(1/N) sum_{k=1..N} risk(k)`` with ``risk(k)`` the error
  rate among the k most confident questions, taken *in expectation over a
  random order within ties*: inside a tie block errors accrue at the block's
  own rate (cumulative errors interpolated linearly), which is exactly that
  expectation because ``risk(k) = errors(k)/k`` is linear in ``errors(k)``.
  Lower is better; a perfect ranking gives the minimum for its accuracy.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

N_BINS = 10


def _arrays(c, y) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(c, dtype=float)
    y = np.asarray(y, dtype=float)
    if c.shape != y.shape:
        raise ValueError(f"c and y differ in shape: {c.shape} vs {y.shape}")
    return c, y


def accuracy(y) -> float:
    """Share correct; NaN for an empty array."""
    y = np.asarray(y, dtype=float)
    return float(y.mean()) if y.size else np.nan


def brier(c, y) -> float:
    """Mean squared error between confidence and correctness."""
    c, y = _arrays(c, y)
    return float(np.mean((c - y) ** 2)) if c.size else np.nan


def bin_index(c, n_bins: int = N_BINS) -> np.ndarray:
    """Equal-width bin of each confidence: ``floor(c·M)`` after rounding to 9
    decimals, with ``c = 1.0`` in the last bin (see module docstring)."""
    c = np.asarray(c, dtype=float)
    return np.clip(np.floor(np.round(c * n_bins, 9)), 0, n_bins - 1).astype(np.int64)


def reliability(c, y, n_bins: int = N_BINS) -> pd.DataFrame:
    """Reliability-diagram data: one row per bin (empty ones included) with
    edges ``lo``/``hi``, ``n``, ``confidence`` (mean c), ``accuracy`` and
    ``gap`` = accuracy − confidence (NaN for empty bins)."""
    c, y = _arrays(c, y)
    b = bin_index(c, n_bins)
    n = np.bincount(b, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(b, weights=c, minlength=n_bins) / n
        acc = np.bincount(b, weights=y, minlength=n_bins) / n
    edges = np.linspace(0, 1, n_bins + 1)
    return pd.DataFrame({"bin": np.arange(n_bins), "lo": edges[:-1], "hi": edges[1:], "n": n,
                         "confidence": conf, "accuracy": acc, "gap": acc - conf})


def ece(c, y, n_bins: int = N_BINS) -> float:
    """Expected calibration error with ``n_bins`` equal-width bins."""
    c, y = _arrays(c, y)
    if not c.size:
        return np.nan
    b = bin_index(c, n_bins)
    diff = np.bincount(b, weights=y - c, minlength=n_bins)
    return float(np.abs(diff).sum() / c.size)


def auroc(c, y) -> float:
    """Area under the ROC curve of confidence for correctness; NaN with one class."""
    c, y = _arrays(c, y)
    if c.size == 0 or np.unique(y).size < 2:
        return np.nan
    return float(roc_auc_score(y, c))


def _tie_blocks(c: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct confidences in decreasing order with cumulative counts and
    cumulative errors at each block end."""
    levels, inv = np.unique(-c, return_inverse=True)
    n = np.bincount(inv, minlength=levels.size)
    err = np.bincount(inv, weights=1.0 - y, minlength=levels.size)
    return -levels, np.cumsum(n), np.cumsum(err)


def risk_coverage(c, y) -> pd.DataFrame:
    """The risk–coverage curve at every threshold: ``threshold`` (answer when
    c >= threshold), ``n`` answered, ``coverage``, ``risk`` (error rate among
    the answered) and ``accuracy`` = 1 − risk. Order-free under ties."""
    c, y = _arrays(c, y)
    thr, cum_n, cum_err = _tie_blocks(c, y)
    return pd.DataFrame({"threshold": thr, "n": cum_n, "coverage": cum_n / c.size,
                         "risk": cum_err / cum_n, "accuracy": 1 - cum_err / cum_n})


def _expected_errors(c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Expected cumulative errors among the k most confident, k = 1..N, with
    a random order inside tie blocks (linear interpolation inside a block)."""
    _, cum_n, cum_err = _tie_blocks(c, y)
    k = np.arange(1, c.size + 1)
    return np.interp(k, np.r_[0, cum_n], np.r_[0.0, cum_err])


def aurc(c, y) -> float:
    """Area under the risk–coverage curve (module docstring): the mean over
    k = 1..N of the expected error rate among the k most confident."""
    c, y = _arrays(c, y)
    if not c.size:
        return np.nan
    k = np.arange(1, c.size + 1)
    return float(np.mean(_expected_errors(c, y) / k))


def accuracy_at_coverage(c, y, coverages: Iterable[float] = (0.5, 0.8, 0.9, 1.0)) -> pd.DataFrame:
    """Expected selective accuracy when answering the most confident
    ``round(coverage·N)`` questions (random order inside the tie block that
    straddles the cut)."""
    c, y = _arrays(c, y)
    cov = np.asarray(list(coverages), dtype=float)
    k = np.maximum(1, np.round(cov * c.size)).astype(int)
    e = _expected_errors(c, y)
    return pd.DataFrame({"coverage": cov, "n": k, "accuracy": 1 - e[k - 1] / k})


# --------------------------------------------------------------------------
# tables


def _scored(df: pd.DataFrame, confidence: str, correct: str) -> pd.DataFrame:
    return df[df[confidence].notna() & df[correct].notna()]


def metric_row(df: pd.DataFrame, confidence: str = "confidence", correct: str = "majority_correct",
               accuracy_col: str = "single_correct", n_bins: int = N_BINS) -> dict:
    """All metrics of one group of questions (see :func:`metric_table`)."""
    s = _scored(df, confidence, correct)
    c, y = s[confidence].to_numpy(float), s[correct].to_numpy(float)
    a = df[accuracy_col].dropna().to_numpy(float)
    return {"n": len(df), "n_scored": len(s), "n_unscored": len(df) - len(s),
            "accuracy": accuracy(a), "majority_accuracy": accuracy(y),
            "confidence": float(c.mean()) if c.size else np.nan,
            "brier": brier(c, y), "ece": ece(c, y, n_bins), "auroc": auroc(c, y), "aurc": aurc(c, y)}


def metric_table(qt: pd.DataFrame, by: Iterable[str] = ("model", "condition"), *,
                 confidence: str = "confidence", correct: str = "majority_correct",
                 accuracy_col: str = "single_correct", n_bins: int = N_BINS) -> pd.DataFrame:
    """One row per group of a question table.

    ``accuracy`` is the single-sample accuracy (``accuracy_col``, the
    accuracy tables of seed 000); ``majority_accuracy``, ``confidence``,
    ``brier``, ``ece``, ``auroc`` and ``aurc`` use ``confidence`` against
    ``correct`` (majority vote by default). For the log-prob baseline pass
    ``confidence="logprob_confidence"``; for the exact-letter estimate
    ``confidence="exact_confidence", correct="exact_correct"``. ``n_unscored``
    counts questions with no prediction (no parsed sample), which are left out.
    """
    by = list(by)
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))),
             **metric_row(g, confidence, correct, accuracy_col, n_bins)}
            for key, g in qt.groupby(by, sort=False, observed=True)]
    return pd.DataFrame(rows)


def reliability_table(qt: pd.DataFrame, by: Iterable[str] = ("model", "condition"), *,
                      confidence: str = "confidence", correct: str = "majority_correct",
                      n_bins: int = N_BINS) -> pd.DataFrame:
    """Reliability-diagram data per group (e.g. per model and condition):
    the rows of :func:`reliability` with the group's keys in front."""
    by = list(by)
    parts = []
    for key, g in qt.groupby(by, sort=False, observed=True):
        s = _scored(g, confidence, correct)
        r = reliability(s[confidence], s[correct], n_bins)
        parts.append(r.assign(**dict(zip(by, key if isinstance(key, tuple) else (key,))))[by + list(r.columns)])
    return pd.concat(parts, ignore_index=True)


def risk_coverage_table(qt: pd.DataFrame, by: Iterable[str] = ("model", "condition"), *,
                        confidence: str = "confidence", correct: str = "majority_correct") -> pd.DataFrame:
    """The risk–coverage curve per group, keys in front."""
    by = list(by)
    parts = []
    for key, g in qt.groupby(by, sort=False, observed=True):
        s = _scored(g, confidence, correct)
        r = risk_coverage(s[confidence], s[correct])
        parts.append(r.assign(**dict(zip(by, key if isinstance(key, tuple) else (key,))))[by + list(r.columns)])
    return pd.concat(parts, ignore_index=True)
