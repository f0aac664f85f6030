"""Shared fixtures: the real shipped datasets, loaded once per session.

Nothing here writes anywhere: data/raw/ is read only, and tests that write
(tables) point MEDAUDIT_ROOT at a temporary folder.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from medaudit import data, paths, perturb, selection

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def medqa4() -> pd.DataFrame:
    """The 1,273 MedQA-USMLE 4-option test items (index = 0-based line = row)."""
    df = data.load_medqa(paths.raw(*data.MEDQA4)).records
    assert (df["row"] == df.index).all()
    return df


@pytest.fixture(scope="session")
def selection_cfg() -> dict:
    return selection.load_selection(paths.params("selection.yaml"))


@pytest.fixture(scope="session")
def conditions() -> perturb.ConditionSet:
    return perturb.load_conditions(paths.params("conditions.yaml"))


@pytest.fixture(scope="session")
def mts_train() -> pd.DataFrame:
    return data.load_mts_dialog(paths.raw("mts_dialog", "MTS-Dialog-TrainingSet.csv")).records


@pytest.fixture(scope="session")
def aci_train() -> pd.DataFrame:
    return data.load_aci_bench(paths.raw("aci_bench", "challenge_data", "train.csv")).records


@pytest.fixture(scope="session")
def find_items(medqa4):
    """``find_items(pattern)``: the 4-option items whose question matches a regex."""

    def find(pattern: str, flags: int = 0) -> pd.DataFrame:
        rx = re.compile(pattern, flags)
        hits = medqa4[medqa4["question"].map(lambda q: bool(rx.search(q)))]
        assert len(hits), f"no MedQA item matches {pattern!r}"
        return hits

    return find


@pytest.fixture(scope="session")
def find_item(find_items):
    """``find_item(pattern)``: the single 4-option item whose question matches."""

    def find(pattern: str, flags: int = 0) -> pd.Series:
        hits = find_items(pattern, flags)
        assert len(hits) == 1, f"{pattern!r} matches rows {list(hits['row'])}, expected one"
        return hits.iloc[0]

    return find
