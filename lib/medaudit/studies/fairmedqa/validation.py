"""The Validation-Agent's accuracy and accuracy gap by Generation-Agent.

Seed 004 A.3 "Evaluating FairMedQA by Accuracy Gap between Counterfactual
Pairs": "Figure 6(a) presents the accuracy of the answers from the
Validation-Agent on different adversarial variants …, while 6(b) presents
the accuracy gaps between the counterfactual pairs" (the figure itself:
:func:`medaudit.studies.fairmedqa.figures.validator_accuracy_plot`).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from medaudit.studies.fairmedqa.config import NEUTRALISED, FairMedQAConfig


def validator_accuracy(agent_variants: pd.DataFrame, config: FairMedQAConfig) -> pd.DataFrame:
    """Seed 001 Fig. 6(a) as a table: "Accuracy and accuracy gap of
    Validation-Agent (GPT-4o-mini) on the adversarial datasets by different
    Generation-Agent" (A.3: "Figure 6(a) presents the accuracy of the
    answers from the Validation-Agent on different adversarial variants from
    GPT-Agent and Deepseek-Agent"). Per Generation-Agent (``generator``),
    validator and text: the neutral vignettes (each once), then each
    group's kept variants (usable): texts, correct, accuracy (%; an
    unparsed answer counts as incorrect). Empty when the agents' log has
    none of these columns (no agent output, or one written before them)."""
    cols = ["generator", "validator", "condition", "texts", "correct", "accuracy"]
    need = {"generator", "validator", "condition", "usable", "validator_correct", "baseline_correct"}
    v = agent_variants
    if v.empty or not need <= set(v.columns):
        return pd.DataFrame(columns=cols)
    rows = []
    for (gname, vname), g in v.groupby(["generator", "validator"], sort=False):
        base = g.drop_duplicates("item_id")
        k = int(base["baseline_correct"].fillna(False).astype(bool).sum())
        rows.append({"generator": gname, "validator": vname, "condition": NEUTRALISED, "texts": len(base),
                     "correct": k})
        for c in [c for c in config.groups if c in set(g["condition"])]:
            u = g[(g["condition"] == c) & g["usable"].astype(bool)]
            rows.append({"generator": gname, "validator": vname, "condition": c, "texts": len(u),
                         "correct": int(u["validator_correct"].fillna(False).astype(bool).sum())})
    out = pd.DataFrame(rows, columns=cols[:-1])
    out["accuracy"] = 100 * out["correct"] / out["texts"].replace(0, np.nan)
    return out


def validator_gaps(acc: pd.DataFrame, config: FairMedQAConfig) -> pd.DataFrame:
    """Fig. 6(b): per Generation-Agent and counterfactual pair, the gap
    between the validator's accuracies on the two groups' variants (pp;
    first − second, so positive where the favorable group is answered
    better), with the texts behind each."""
    cols = ["generator", "validator", "pair", "texts_a", "texts_b", "gap"]
    if acc.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (gname, vname), g in acc.groupby(["generator", "validator"], sort=False):
        by = g.set_index("condition")
        for a, b in config.pairs:
            if a in by.index and b in by.index:
                rows.append({"generator": gname, "validator": vname, "pair": f"{a} vs {b}",
                             "texts_a": by.loc[a, "texts"], "texts_b": by.loc[b, "texts"],
                             "gap": by.loc[a, "accuracy"] - by.loc[b, "accuracy"]})
    return pd.DataFrame(rows, columns=cols)
