"""Notebook 07 with its model stages on (the smoke profile runs it with them
off, on the released answers): the real notebook through the runner, in a
temporary compendium (MEDAUDIT_ROOT), with the 135M model as subject,
judge and augmenter on one item. What `make all` does on the default
profile, at the smallest size."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from support.sandbox import compendium_root

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "smollm2-135m", "backend": "llamacpp", "model": "smollm2-135m",
        "options": {"n_threads": 2, "n_ctx": 4096}}
STAGES = ["cultural_augment", "cultural_answers", "cultural_judge"]


def _run(root: Path, env: dict, stages: list[str]) -> subprocess.CompletedProcess:
    args = {"model_stages": stages, "subject": TINY, "judge": TINY, "augmenter": TINY, "released_answers": [],
            "cultural_items": 1, "cultural_explain_items": 1, "augment_items": 1, "augment_max_attempts": 1,
            # the 135M model writes to the limit: 48 tokens keep its 11 explanations and their 11 verdicts
            # short (at 160, under a CPU burner, the first run took about 28 of the 40 minutes allowed)
            "explain_max_tokens": 48}
    out = root / "outputs" / "smoke" / "notebooks" / "07_cultural_flips.ipynb"
    return subprocess.run([sys.executable, "-m", "medaudit.runner", str(ROOT / "notebooks" / "07_cultural_flips.ipynb"),
                           str(out), "--profile", "smoke", "--no-progress-bar", "-y", yaml.safe_dump(args)],
                          cwd=root, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=2400)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    root = tmp_path_factory.mktemp("nb07")
    env = compendium_root(root)
    r = _run(root, env, STAGES)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return root, env


def _table(root: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(root / "outputs" / "smoke" / "tables" / f"{name}.csv")


def _stored(root: Path) -> pd.DataFrame:
    with sqlite3.connect(root / "outputs" / "smoke" / "data" / "responses.sqlite") as con:
        return pd.read_sql_query("SELECT model, source, prompt_format, key FROM responses", con)


def test_every_stage_asks_the_model_and_the_tables_show_its_rows(ran):
    ran, _ = ran
    stored = _stored(ran)
    assert set(stored["source"]) == {"generated"} and set(stored["model"]) == {"smollm2-135m"}
    assert {"mcq_option", "mcq_explain", "cultural_judge", "cultural_augment"} <= set(stored["prompt_format"])
    # the 135M model rarely writes a readable option: what it answered is counted, not scored as wrong
    kept = _table(ran, "07_retained")
    assert set(kept["model"]) == {"smollm2-135m"} and set(kept["prompt_format"]) == {"mcq_option", "mcq_explain"}
    assert (kept["items"] == 1).all() and (kept["retained"] + kept["dropped"] == kept["items"]).all()
    rates = _table(ran, "07_parse_rates")
    assert "smollm2-135m" in rates.to_string()
    assert (ran / "outputs" / "smoke" / "tables" / "07_augment_summary.csv").is_file()
    assert (ran / "outputs" / "smoke" / "tables" / "07_table3_judge.csv").is_file()


def test_a_rerun_with_the_stages_off_asks_nothing_and_reads_the_same_answers(ran):
    ran, env = ran
    before = _stored(ran)
    kept = _table(ran, "07_retained")
    r = _run(ran, env, [])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = _stored(ran)
    assert sorted(after["key"]) == sorted(before["key"])       # no model was asked
    pd.testing.assert_frame_equal(_table(ran, "07_retained"), kept)
