"""Agreement between two label sources on the same units (raw agreement, Cohen's kappa) and between
two partitions of the same samples (adjusted Rand index, pairwise agreement): a judge against people,
two judges, two clustering methods.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


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
