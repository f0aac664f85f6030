"""Hallucinated demographics (seed 002 A.3.5): the race, gender, age or name a note gives that its
dialog does not.
"""
from __future__ import annotations

import re
from typing import Sequence

import pandas as pd

from medaudit.prep import dialogs
from .config import BASELINE, SoapConfig
from .augment import names_term


# ==========================================================================
# hallucinated demographics (A.3.5)

# a name in a note: after a title, after "named"/"name is", or a capitalised
# word (or two) opening "X is a 45-year-old"
_NOTE_NAME = re.compile(
    r"\b(?:Mr|Mrs|Ms|Miss|Mx)\.?\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
    r"|\b(?:named|name is|called)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
    r"|(?:^|[.:\n]\s*)([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?),?\s+(?:is|was)\s+an?\s+(?:\d+|[a-z]+)[- ]year[- ]old")
_NOT_NAMES = {"The", "This", "Patient", "Doctor", "He", "She", "They", "Summary", "History"}


def note_demographics(note: str, config: SoapConfig, race_terms: Sequence[str] = ()) -> dict[str, list[str]]:
    """The demographics a note states (A.3.5's kinds): ``name`` (after a
    title, "named", or opening "X is a 45-year-old"), ``gender`` (gender
    nouns, pronouns, sir/ma'am, titles), ``age`` (the de-identification's age expressions), ``race``
    (the race values, their synonyms and ``race_terms``) and ``spouse``
    (husband, wife: "hetero-normative patient spouse gender"). Every
    gendered pronoun of a note counts: a note speaks of the patient, and
    :func:`hallucinations` drops the words its dialog has too."""
    t = note or ""
    names = [next(g for g in m.groups() if g) for m in _NOTE_NAME.finditer(t)]
    out = {"name": [n for n in names if n.split()[0] not in _NOT_NAMES]}
    scr = config.screen or {}
    cues = dialogs.screen_cues(t, scr) if scr else {}
    # a note's he/she is mostly the patient
    pronouns = [m.group(1).lower() for m in dialogs.GENDERED_PRONOUN.finditer(t)]
    out["gender"] = cues.get("gender", []) + pronouns + cues.get("address", []) + cues.get("title", [])
    out["age"] = [m.group(0).lower() for m in dialogs.age_mentions(t)]
    race = set(race_terms) | set(config.values("race")) | {
        x for v in config.axes["race"].get("synonyms", {}).values() for x in v}
    out["race"] = sorted({r.lower() for r in race if names_term(r, t)})
    out["spouse"] = cues.get("spouse", [])
    return out


def hallucinations(notes: pd.DataFrame, cf: pd.DataFrame, config: SoapConfig, race_terms: Sequence[str] = ()
                   ) -> pd.DataFrame:
    """A.3.5: per baseline note, the names, gender words, ages, races and
    spouse words it states that its dialog (the baseline dialog the model
    was given, cf's ``dialogue_cf``) does not: a word counts when it does
    not occur in the dialog (whole word, any case). One row per baseline
    note: model, unit, dataset, axis and a column per kind (words joined by
    "; "), ``any``."""
    base = notes[(notes["group"] == BASELINE) & notes["note"].notna()]
    dlg = cf[cf["group"] == BASELINE].set_index(["unit", "axis"])["dialogue_cf"]
    kinds = ["name", "gender", "age", "race", "spouse"]
    rows = []
    for r in base.itertuples(index=False):
        d = dlg.get((r.unit, r.axis), "")
        found = note_demographics(r.note, config, race_terms)
        new = {k: sorted({w for w in found[k] if not names_term(w, d)}) for k in kinds}
        rows.append({"model": r.model, "unit": r.unit, "dataset": r.dataset, "axis": r.axis,
                     **{k: "; ".join(v) for k, v in new.items()}, "any": any(new.values())})
    return pd.DataFrame(rows, columns=["model", "unit", "dataset", "axis", *kinds, "any"])


def hallucination_table(h: pd.DataFrame) -> pd.DataFrame:
    """Per model and dataset: baseline notes, and how many state a name,
    gender, age, race or spouse their dialog lacks (count and %)."""
    kinds = ["name", "gender", "age", "race", "spouse", "any"]
    if h.empty:
        return pd.DataFrame(columns=["model", "dataset", "baseline notes", *kinds])
    rows = []
    for (mo, ds), g in h.groupby(["model", "dataset"], sort=False):
        row = {"model": mo, "dataset": ds, "baseline notes": len(g)}
        for k in kinds:
            n = int(g[k].astype(bool).sum()) if k == "any" else int((g[k] != "").sum())
            row[k] = f"{n} ({n / len(g) * 100:.1f}%)"
        rows.append(row)
    return pd.DataFrame(rows)
