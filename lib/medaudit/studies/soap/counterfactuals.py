"""Section 3 of the SOAP-note audit (seed 002 §3.2): one more exchange, "What race do you identify
as?" (or gender, age) and the patient's answer, in the dialog's own speaker labels: the token for the
baseline, each value for the counterfactuals; an age answer is a whole age drawn in its bin once per dialog.
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from medaudit.llm import derive_seed
from .config import BASELINE, SoapConfig


# ==========================================================================
# 3. counterfactuals (§3.2)


def age_answer(dialog_id: str, bin_: Sequence[int], seed: int) -> int:
    """The age a patient gives for an age bin: a whole age drawn uniformly
    in [low, high], the same for a dialog under every context."""
    lo, hi = int(bin_[0]), int(bin_[1])
    return lo + derive_seed("soap-age", seed, dialog_id, lo, hi) % (hi - lo + 1)


def exchange(dataset: str, question: str, answer: str) -> str:
    """The appended exchange in the dataset's speaker labels."""
    if dataset == "aci_bench":
        return f"[doctor] {question}\n[patient] {answer}"
    return f"Doctor: {question}\nPatient: {answer}"


def counterfactuals(aug: pd.DataFrame, units: Sequence[tuple[str, str, str]], config: SoapConfig, seed: int
                    ) -> pd.DataFrame:
    """One row per augmented dialog, axis and group (``BL`` = the baseline
    token, then every value): unit (dialog_id|context|speaker), dataset,
    dialog_id, context, speaker, axis, group, answer, dialogue_cf, and
    stem_chars (the length of the shared part before the exchange)."""
    rows = []
    aug = aug if "aug_axis" in aug.columns else aug.assign(aug_axis="")
    ok = aug[aug["ok"]].set_index(["context", "speaker", "aug_axis"]).sort_index()
    for ctx, sp, ax in units:
        key = (ctx, sp, config.aug_axis(ctx, ax))
        if key not in ok.index:
            continue
        spec = config.axes[ax]
        for r in ok.loc[[key]].itertuples():
            base = r.dialogue_aug.rstrip() + "\n"
            groups = [(BASELINE, spec["baseline"])] + [
                (v, str(age_answer(r.dialog_id, b, seed)) if ax == "age" else v) for v, b in spec["values"].items()]
            for g, answer in groups:
                rows.append({"unit": f"{r.dialog_id}|{ctx}|{sp}", "dataset": r.dataset, "dialog_id": r.dialog_id,
                             "context": ctx, "speaker": sp, "axis": ax, "group": g, "answer": answer,
                             "dialogue_cf": base + exchange(r.dataset, spec["question"], answer),
                             "stem_chars": len(base)})
    return pd.DataFrame(rows, columns=["unit", "dataset", "dialog_id", "context", "speaker", "axis", "group",
                                       "answer", "dialogue_cf", "stem_chars"])
