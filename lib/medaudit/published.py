"""Our numbers beside the published ones (``params/published.yaml``).

Each entry names a seed's table, transcribed, and the CSV of ours with the
same shape. :func:`compare` reads our table for a profile, keeps the rows
the published table has (by its ``key`` column; all rows when none match,
as our models are not the seed's) and the compared columns, and returns
both with the sentence on why they differ.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from . import paths


@dataclass
class Comparison:
    study: str
    what: str
    notebook: str
    published: pd.DataFrame
    ours: pd.DataFrame | None     # None: our table was not written under this profile
    differs: str
    ours_name: str


def load(path: str | Path | None = None) -> list[dict]:
    """The entries of ``params/published.yaml``, checked: every published
    row has one value per column. Errors name the file and the entry."""
    path = Path(path) if path else paths.params("published.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    entries = raw.get("studies") or []
    for i, e in enumerate(entries):
        missing = {"study", "what", "ours", "notebook", "key", "columns", "published", "differs"} - set(e)
        if missing:
            raise ValueError(f"{path}: studies[{i}] lacks {sorted(missing)}")
        for row, vals in e["published"].items():
            if len(vals) != len(e["columns"]):
                raise ValueError(f"{path}: studies[{i}] ({e['ours']}), row {row!r}: {len(vals)} values for "
                                 f"{len(e['columns'])} columns")
    return entries


def published_frame(entry: dict) -> pd.DataFrame:
    return pd.DataFrame([[row, *vals] for row, vals in entry["published"].items()],
                        columns=[entry["key"], *entry["columns"]])


def ours_frame(entry: dict, profile: str) -> pd.DataFrame | None:
    p = paths.outputs(profile, "tables", f"{entry['ours']}.csv", mkdir=False)
    if not p.exists():
        return None
    df = pd.read_csv(p, keep_default_na=False)
    key = entry["key"]
    if key in df.columns:
        same = df[df[key].astype(str).isin([str(r) for r in entry["published"]])]
        df = same if len(same) else df
    pattern = entry.get("ours_columns")
    if pattern:
        df = df[[c for c in df.columns if re.search(pattern, c)]]
    else:
        df = df[[c for c in [key, *entry["columns"]] if c in df.columns]]
    return df.round(2)


def compare(profile: str, path: str | Path | None = None) -> list[Comparison]:
    return [Comparison(e["study"], e["what"], e["notebook"], published_frame(e), ours_frame(e, profile),
                       " ".join(e["differs"].split()), e["ours"]) for e in load(path)]
