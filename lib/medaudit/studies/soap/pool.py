"""Section 1 of the SOAP-note audit (seed 002 §3, "Data De-identification"): de-identified MTS-Dialog
and ACI-Bench dialogs screened for demographic cues (:func:`screen`), reviewed by hand as data
(:func:`load_review`, :func:`apply_review`), counted step by step (:func:`dialog_funnel`), a seeded
sample per dataset (:func:`select_dialogs`), and the one-shot example (:func:`aci_example`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from medaudit.prep import dialogs
from medaudit.llm import derive_seed
from .config import SoapConfig


# ==========================================================================
# 1. dialogs


REVIEW_COLUMNS = ["dialog_id", "dataset", "decision", "by", "note"]
DECISIONS = ("keep", "exclude")


def screen(dialogs_: pd.DataFrame, config: SoapConfig) -> pd.DataFrame:
    """The de-identified dialogs with the demographic screen's cue columns
    (:func:`medaudit.prep.dialogs.screen_all`, word lists in params/soap.yaml)."""
    if not config.screen:
        raise ValueError("params/soap.yaml has no `screen` section: the dialog screen of seed §3 needs it")
    return dialogs.screen_all(dialogs_, config.screen)


def load_review(path: str | Path) -> pd.DataFrame:
    """Read and check a review list; errors name the file, the row (as a
    spreadsheet counts it, the header being row 1) and the field."""
    path = Path(path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in REVIEW_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} (need {REVIEW_COLUMNS})")
    for i, r in enumerate(df.itertuples(index=False), start=2):
        if not r.dialog_id.strip():
            raise ValueError(f"{path}: row {i}, field 'dialog_id': empty")
        if r.decision not in DECISIONS:
            raise ValueError(f"{path}: row {i} ({r.dialog_id}), field 'decision': "
                             f"{r.decision!r} is not keep or exclude")
        if r.by != "screen" and not r.note.strip():
            raise ValueError(f"{path}: row {i} ({r.dialog_id}), field 'note': a reviewer's decision needs a reason")
    dup = df["dialog_id"][df["dialog_id"].duplicated()].tolist()
    if dup:
        raise ValueError(f"{path}: field 'dialog_id': listed more than once: {dup[:5]}")
    return df


def apply_review(screened: pd.DataFrame, review: pd.DataFrame, path: str | Path = "the review list",
                 needs_review: bool = True) -> pd.DataFrame:
    """``screened`` with ``review`` (keep | exclude | not reviewed: passes
    the screen but is not in the list, so is not audited), ``review_by``
    and ``pool`` (audited: long enough and kept by the review; a reviewer's
    ``keep`` overrides the screen, a ``keep`` by ``screen`` on a dialog the
    screen now rejects does not: the word lists changed since the list was
    made). With ``needs_review`` (params/soap.yaml ``pool_needs_review``)
    only a reviewer's ``keep`` counts: seed 002 §3, "Following this initial
    filtering process, we perform a thorough manual review of the selected
    dialogs to identify and remove any remaining indicators of identity."
    A listed dialog that does not exist is an error naming it."""
    unknown = sorted(set(review["dialog_id"]) - set(screened["dialog_id"]))
    if unknown:
        raise ValueError(f"{path}: field 'dialog_id': no such dialog {unknown[:5]}")
    rv = review.set_index("dialog_id")
    out = screened.copy()
    dec = out["dialog_id"].map(rv["decision"])
    by = out["dialog_id"].map(rv["by"])
    out["review"] = dec.fillna("not reviewed")
    out["review_by"] = by.fillna("")
    out["pool"] = out["keep"] & (dec == "keep") & (out["screen_pass"] | (by != "screen"))
    if needs_review:
        out["pool"] &= by.ne("screen") & by.notna()
    return out


def select_dialogs(pool: pd.DataFrame, sizes: dict, seed: int, exclude: Sequence[str] = ()) -> pd.DataFrame:
    """The dialogs audited: per dataset in ``sizes`` ({dataset: n}, n null =
    all), a seeded sample of the pool (``pool`` column of
    :func:`apply_review`, or every row where there is none), never a dialog
    of ``exclude`` (the one-shot example)."""
    out = []
    for ds, n in sizes.items():
        cand = pool[(pool["dataset"] == ds) & pool.get("pool", pool["keep"]) & ~pool["dialog_id"].isin(list(exclude))]
        if cand.empty:
            raise ValueError(f"no dialog of dataset {ds!r} in the pool (mts_dialog | aci_bench)")
        cand = cand.sort_values("dialog_id")
        if n is not None and n < len(cand):
            cand = cand.sample(n=int(n), random_state=derive_seed("soap-dialogs", seed, ds) % 2**32)
        out.append(cand)
    return pd.concat(out).sort_values(["dataset", "dialog_id"]).reset_index(drop=True)


def dialog_funnel(reviewed: pd.DataFrame, selected: pd.DataFrame | None = None, example_id: str | None = None,
                  min_turns_mts: int = 10) -> pd.DataFrame:
    """Seed §3's selection, counted per dataset: dialogs, too short (MTS
    under ``min_turns_mts`` turns), rejected by the screen (and by each cue
    kind: a dialog counts under every kind it has), passed, excluded by the
    review, not in the review list, the one-shot example, the pool, and
    (with ``selected``) the dialogs sampled for this run. The seed ends at
    93 MTS-Dialog and 47 ACI-Bench dialogs."""
    rows = []
    kinds = [c[4:] for c in reviewed.columns if c.startswith("cue_")]
    for ds, g in reviewed.groupby("dataset", sort=False):
        long_ = g[g["keep"]]
        passed = long_[long_["screen_pass"]]
        pool = g[g["pool"]]
        ex = pool["dialog_id"].eq(example_id).sum() if example_id else 0
        row = {"dataset": ds, "dialogs": len(g), f"too short (< {min_turns_mts} turns)": int((~g["keep"]).sum()),
               "screened": len(long_), "rejected by the screen": int((~long_["screen_pass"]).sum())}
        for k in kinds:
            if k in set(", ".join(long_["cues"]).split(", ")):
                row[f"  with {k}"] = int(long_["cues"].str.split(", ").map(lambda c: k in c).sum())
        by_hand = long_.get("review_by", pd.Series("", index=long_.index)).ne("screen") & long_["review"].ne(
            "not reviewed")
        if "redacted_cues" in long_.columns:
            row["with a cue redacted"] = int((long_["redacted_cues"] > 0).sum())
            row["  passed thanks to a redaction"] = int((long_["screen_pass"] & (long_["redacted_cues"] > 0)).sum())
        passed_by = passed.get("review_by", pd.Series("", index=passed.index))
        unread = passed["review"].eq("keep") & passed_by.eq("screen") & ~passed["pool"]
        row.update({"passed the screen": len(passed),
                    "excluded by the review": int((passed["review"] == "exclude").sum()),
                    "kept by the screen, not read (not audited)": int(unread.sum()),
                    "not in the review list": int((passed["review"] == "not reviewed").sum()),
                    "kept by a reviewer over the screen": int((long_["pool"] & ~long_["screen_pass"]).sum()),
                    "one-shot example": int(ex), "pool": len(pool) - int(ex),
                    "  read by a reviewer": int((pool["dialog_id"].isin(long_.loc[by_hand, "dialog_id"])
                                                 & pool["dialog_id"].ne(example_id)).sum()),
                    "seed": {"mts_dialog": 93, "aci_bench": 47}.get(ds)})
        if selected is not None:
            row["audited (sample)"] = int((selected["dataset"] == ds).sum())
        rows.append(row)
    t = pd.DataFrame(rows).fillna(0).set_index("dataset").astype(int).T      # counts: whole numbers
    return t.rename_axis(index="step", columns=None).reset_index()


ACI_HEADINGS = ("CHIEF COMPLAINT", "HISTORY OF PRESENT ILLNESS", "REVIEW OF SYSTEMS", "PHYSICAL EXAMINATION",
                "RESULTS", "ASSESSMENT AND PLAN")


def note_headings(note: str) -> list[str]:
    """The section headings of an ACI-Bench note (lines in capitals)."""
    return [ln.strip() for ln in note.splitlines() if re.fullmatch(r"[A-Z][A-Z /&-]{3,}", ln.strip())]


def aci_example(dialogs_: pd.DataFrame, encounter: str | None = None, race_terms: Sequence[str] = (),
                origin_terms: Sequence[str] = (), screen_cfg: dict | None = None) -> dict:
    """The ACI-Bench one-shot example (A.3.3, Figure 3: "Dialogue: <Dialog
    pertaining to id: D2N068 in the validation set of ACI-Bench> Summary:
    <Ground truth pertaining to id: D2N068 …>"): the encounter ``encounter``
    of any split (params/soap.yaml ``aci_example``, the seed's D2N068; None:
    the shortest train dialog, the former choice), its de-identified dialog
    and its reference note de-identified by the same rules as the audited
    dialogs (names from the metadata become [NAME]; ages, race and origin
    terms go). ``cues``: what the screen finds in the dialog and the note
    (the seed's example is a male patient's visit: its "he" stays, as the
    seed does not say it redacted the example; the notebook reports it)."""
    aci = dialogs_[dialogs_["dataset"] == "aci_bench"]
    if encounter is not None:
        pick = aci[aci["source_id"] == encounter]
        if pick.empty:
            raise ValueError(f"aci_example {encounter!r} is no ACI-Bench encounter (params/soap.yaml: aci_example; "
                             f"e.g. D2N068, the seed's)")
    else:
        pick = aci[aci["split"] == "train"]
    r = pick.loc[pick["dialogue_deid"].str.len().idxmin()]
    names = list(r["names"]) if isinstance(r["names"], list) else []
    note, _ = dialogs.deidentify(r["reference"], names, race_terms, origin_terms)
    out = {"dialog_id": r["dialog_id"], "dialog": r["dialogue_deid"], "note": note, "headings": note_headings(note)}
    if screen_cfg:
        found = dialogs.screen_cues(r["dialogue_deid"], screen_cfg)
        found_note = dialogs.screen_cues(note, screen_cfg)
        out["cues"] = {k: sorted(set(found.get(k, []) + found_note.get(k, []))) for k in screen_cfg["exclude"]
                       if found.get(k) or found_note.get(k)}
    return out
