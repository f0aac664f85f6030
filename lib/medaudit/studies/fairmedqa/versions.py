"""Table 2: old → new model versions.

Seed 004 §5.3 "Cross-Version Analysis of Bias in LLMs": "Table 2 reports the
evolution in diagnostic accuracy, CFR, and AD between old-to-new model
versions" (ΔAcc, ΔCFR, ΔAD of two models answered under one protocol).
"""
from __future__ import annotations


import pandas as pd

from medaudit.studies.fairmedqa.answers import same_protocol
from medaudit.studies.fairmedqa.config import FairMedQAConfig


def version_table(pairs_: pd.DataFrame, old: str, new: str, config: FairMedQAConfig) -> pd.DataFrame:
    """Table 2: for two models (old → new), per attribute: ΔAcc (pp; the
    mean accuracy over the pair's two groups), ΔCFR and ΔAD (pp). Two
    models of different protocols (a ``protocol`` column) are refused."""
    same_protocol(pairs_, [old, new])
    rows = []
    for a, b in config.pairs:
        attr = config.groups[a]["attribute"]
        p = pairs_[(pairs_["a"] == a) & (pairs_["b"] == b)].set_index("model")
        if old not in p.index or new not in p.index:
            continue
        acc = lambda m: (p.loc[m, "acc_a"] + p.loc[m, "acc_b"]) / 2  # noqa: E731
        rows.append({"old": old, "new": new, "attribute": attr, "ΔAcc": acc(new) - acc(old),
                     "ΔCFR": 100 * (p.loc[new, "CFR"] - p.loc[old, "CFR"]),
                     "ΔAD": 100 * (p.loc[new, "AD"] - p.loc[old, "AD"])})
    return pd.DataFrame(rows)
