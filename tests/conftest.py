"""Shared fixtures: the real shipped datasets, loaded once per session.

Nothing here writes anywhere: data/raw/ is read only, and tests that write
(tables) point MEDAUDIT_ROOT at a temporary folder.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from medaudit.prep import data, perturb, selection
from medaudit import paths

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--record", action="store_true", default=False,
                     help="run the loop tests live and write their rows to tests/recorded/ (make test-live)")


def pytest_configure(config):
    """The skip gate: a skip that tests/skips.toml does not allow fails the run."""
    from support.skip_gate import AllowList, SkipGate, tier_from_env

    config.pluginmanager.register(SkipGate(AllowList.load(Path(__file__).parent / "skips.toml"), tier_from_env()),
                                  "medaudit_skip_gate")


def pytest_collection_modifyitems(config, items):
    """Longest files first, for make test's two workers (support/schedule.py)."""
    from support.schedule import order

    order(items)


@pytest.fixture()
def recording(request, monkeypatch):
    """Replay a recorded real run into a test's store, stored-only (support/recording.py)."""
    from support.recording import Recording

    return Recording(request, monkeypatch)


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


# -- a real OpenAI-compatible server on 127.0.0.1 (llama.cpp's own) ---------


from medaudit.llm import models as _models
from support.llama_server import llama_server as _llama_server
from support.sandbox import compendium_root

SERVER_MODEL = "smollm2-135m"
ROOT_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def hf_tiny():
    """The transformers backend on SmolLM2-135M (its GGUF dequantised), one
    torch thread, loaded once for every test that needs it (on a busy machine
    two threads wait on each other and a request takes ~10x longer)."""
    try:
        _models.model_path(SERVER_MODEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from medaudit.llm.hf import TransformersBackend

    return TransformersBackend(SERVER_MODEL, threads=1)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """Base URL (…/v1) of a llama_cpp.server running SmolLM2-135M."""
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with _llama_server(_models.model_path(SERVER_MODEL), log) as url:
        yield url


@pytest.fixture()
def sandbox(tmp_path, monkeypatch):
    """A compendium root of its own: params copied, raw data linked, outputs
    empty; the model cache is the checkout's (assembled models are reused)."""
    for name, value in compendium_root(tmp_path).items():
        monkeypatch.setenv(name, value)
    return tmp_path
