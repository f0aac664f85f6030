"""An API key never leaves the environment.

The whole chain a researcher uses — notebooks 01, 02, 03, 05 and 06 executed
by papermill, 02's agents, 03, 05 and 06 through the ``openai`` backend against a real
server on 127.0.0.1, the
response store, tables and logs — runs with a fake key in the environment;
the key must appear in no notebook, output file, log line or store row.
"""
from __future__ import annotations

import logging
from pathlib import Path

import papermill as pm
import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_KEY = "sk-" + "test-NOTEBOOK-LEAK-CHECK-0123456789abcdef"  # fake, split for secret scanners
ENV_NAME = "MEDAUDIT_TEST_API_KEY"

pytestmark = pytest.mark.slow


@pytest.fixture()
def keyed(sandbox, monkeypatch):
    """conftest's sandbox root, with the fake key in the environment."""
    monkeypatch.setenv(ENV_NAME, FAKE_KEY)
    return sandbox


def _run(nb: str, root: Path, **params) -> Path:
    out = root / "outputs" / "leak" / "notebooks" / nb
    out.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(ROOT / "notebooks" / nb), str(out), parameters={"profile": "leak", **params},
                        cwd=str(ROOT / "notebooks"), log_output=True, progress_bar=False)
    return out


def test_key_appears_nowhere(keyed, llama_server, caplog, capfd):
    sandbox = keyed
    caplog.set_level(logging.DEBUG)
    _run("01_data_prep.ipynb", sandbox, n_items=2)
    subject = {"name": "smollm2-server", "backend": "openai", "model": "smollm2",
               "options": {"base_url": llama_server, "api_key_env": ENV_NAME, "concurrency": 2}}
    # 02's FairMedQA agents go through the same server and key
    _run("02_augmentation.ipynb", sandbox, conditions=["base", "+homo"], methods=["standalone"],
         agents_model=subject, fairmedqa_items=1, generation_max_tokens=40, fusion_max_tokens=120,
         recorded_runs=[])      # only this run's texts in the store
    executed = _run("03_inference.ipynb", sandbox, subject=subject, infer_items=2,
                    infer_conditions=["base", "+homo"], k_samples=2, max_tokens=8, mitigation_strategies=["none"],
                    recorded_answers=[], recorded_runs=[])      # only this run's answers in the store

    # 05's reformulator, clusterer, judge and answering model too
    # (every stage at its smallest: the property is where the key goes, not what the model says)
    _run("05_open_ended.ipynb", sandbox, judge=subject, open_models=[subject], open_items=1,
         open_conditions=["base", "+homo"], open_samples=2, open_max_tokens=16, cluster_max_tokens=40,
         reformulate_max_attempts=1, cluster_max_attempts=1,
         recorded_runs=[])      # only this run's texts in the store
    # 06's augmenter, note writer and judges (the 135M model's augmentations may all fail: the notebook
    # then reports empty tables, which this run also checks)
    _run("06_soap_audit.ipynb", sandbox, soap_judge=subject, soap_models=[subject], soap_augment_max_tokens=60,
         soap_note_max_tokens=24, soap_disparity_max_tokens=24, recorded_runs=[])

    store = sandbox / "outputs" / "leak" / "data" / "responses.sqlite"
    assert store.exists() and executed.exists()
    from medaudit.llm.store import ResponseStore
    with ResponseStore(store) as s:
        rows = s.frame()
    answers = rows[rows["prompt_format"] == "mcq"]
    assert len(answers) == 2 * 2 * 2 and (rows["backend"] == "openai").all()
    assert rows["prompt_format"].str.startswith("fairmedqa_generation").any()   # the agents ran through the server
    assert {"open", "open_reformulate", "open_judge"} <= set(rows["prompt_format"])   # and 05's stages
    assert "soap_augment" in set(rows["prompt_format"])                                 # and 06's

    files = [p for p in (sandbox / "outputs").rglob("*") if p.is_file()]
    assert any(p.suffix == ".ipynb" for p in files) and any(p.name.endswith(".md") for p in files)
    for p in files:
        assert FAKE_KEY.encode() not in p.read_bytes(), f"the key leaked into {p}"
    assert FAKE_KEY not in rows.astype(str).to_csv()
    out, err = capfd.readouterr()
    assert FAKE_KEY not in out + err, "the key leaked into the console output"
    assert FAKE_KEY not in caplog.text, "the key leaked into the logs"
