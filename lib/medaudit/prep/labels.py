"""Human labels: the CSV a clinician fills to check an LLM judge (notebooks
05 and 06 write templates with the same columns), its validated reader, and
agreement between a judge and people, or two judges, on the samples both
labelled (raw agreement and Cohen's kappa, :func:`medaudit.stats.agreement.agreement`).
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from medaudit.stats.agreement import agreement

HUMAN_COLUMNS = ("item_id", "condition", "sample", "question", "ground_truth", "answer", "label", "annotator", "note")


def load_human_labels(path, allowed: Sequence[str] | None = ("CORRECT", "INCORRECT"), column: str = "label"
                      ) -> pd.DataFrame:
    """A filled human-label CSV (:func:`medaudit.studies.openended.human_template`;
    the SOAP-note audit's :func:`medaudit.studies.soap.human_template` writes the
    same columns): model, item_id, condition, sample,
    label (the file's ``column``, "label" unless told: one of ``allowed``,
    any case, returned as ``allowed`` spells it; ``allowed`` None: any
    text, as written, for the caller to check; rows left blank there are
    dropped), annotator. Errors name the file, the row (as numbered in a
    spreadsheet, header = 1) and the field."""
    from pathlib import Path

    path = Path(path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    need = {"model", "item_id", "condition", "sample", column}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}")
    spelt = {a.upper(): a for a in allowed} if allowed is not None else None
    out = []
    for n, r in enumerate(df.to_dict("records"), start=2):
        lab = " ".join(r[column].split())
        if not lab:
            continue
        if spelt is not None:
            if lab.upper() not in spelt:
                raise ValueError(f"{path}: row {n}, field {column!r}: {r[column]!r} is not "
                                 f"{' or '.join(allowed)}")
            lab = spelt[lab.upper()]
        try:
            sample = int(r["sample"])
        except ValueError:
            raise ValueError(f"{path}: row {n}, field 'sample': {r['sample']!r} is not an integer") from None
        for f in ("model", "item_id", "condition"):
            if not r[f].strip():
                raise ValueError(f"{path}: row {n}, field {f!r} is empty")
        out.append({"model": r["model"], "item_id": r["item_id"], "condition": r["condition"], "sample": sample,
                    "label": lab, "annotator": r.get("annotator", "")})
    return pd.DataFrame(out, columns=["model", "item_id", "condition", "sample", "label", "annotator"])


def judge_agreement(a: pd.DataFrame, b: pd.DataFrame, col_a: str = "verdict", col_b: str = "verdict"
                    ) -> dict:
    """:func:`agreement` of two label sources on the samples both label
    (joined on model, item_id, condition, sample)."""
    keys = ["model", "item_id", "condition", "sample"]
    m = a[keys + [col_a]].merge(b[keys + [col_b]], on=keys, suffixes=("_a", "_b"))
    ca, cb = (f"{col_a}_a", f"{col_b}_b") if col_a == col_b else (col_a, col_b)
    return agreement(m[ca], m[cb])
