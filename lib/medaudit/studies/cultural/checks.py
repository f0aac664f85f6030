"""Section 2 of the cultural-cue study (seed 003): each variant diffed against its original (word
level), its added text, and flags for changed question sentences, appended options and clinical words.
"""
from __future__ import annotations


import pandas as pd

from medaudit.prep.variants import edit_report
from .config import CulturalConfig, ORIGINAL
from .variants import CulturalSet


# ==========================================================================
# 2. checking released / generated variants

def check_variants(cs: CulturalSet, config: CulturalConfig, form: str = "5opt") -> pd.DataFrame:
    """:func:`variants.edit_report` on every non-original variant of ``cs``
    (released and rebuilt), against the options of ``form``. One row per
    variant: item_id, index, condition, culture, cue, source, question and
    the check columns."""
    items = cs.items[form].set_index("item_id")
    var = cs.variants
    orig = var[var["kind"] == ORIGINAL].set_index("item_id")["question"]
    rows = []
    for v in var[var["kind"] != ORIGINAL].itertuples(index=False):
        r = edit_report(orig[v.item_id], v.question, items.loc[v.item_id, "options"], config.clinical_terms)
        rows.append({"item_id": v.item_id, "index": v.index, "condition": v.condition, "kind": v.kind,
                     "culture": v.culture, "cue": v.cue, "source": v.source, "question": v.question, **r})
    return pd.DataFrame(rows)


def check_summary(checked: pd.DataFrame) -> pd.DataFrame:
    """Counts per condition (order of appearance): variants, identical to
    the original, final sentence changed (exactly / beyond whitespace and
    quotes), options appended, no added text, flagged for review (clinical
    terms or an option's text brought in), median number of new words."""
    g = checked.groupby("condition", sort=False)
    return pd.DataFrame({
        "variants": g.size(),
        "identical to original": g["same_as_original"].sum().astype(int),
        "final sentence changed": g["final_changed"].sum().astype(int),
        "final sentence changed (words)": g["final_changed_words"].sum().astype(int),
        "options appended": g["options_appended"].sum().astype(int),
        "no added text": g["added"].apply(lambda s: int((s.str.strip() == "").sum())),
        "clinical terms in added text": g["clinical_terms"].apply(lambda s: int((s != "").sum())),
        "option text in added text": g["options_in_added"].apply(lambda s: int((s != "").sum())),
        "flagged for review": g["review"].sum().astype(int),
        "median new words": g["n_new_words"].median(),
    }).reset_index()
