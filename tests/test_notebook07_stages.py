"""Notebook 07 with its model stages on (the smoke profile runs it with them
off, on the released answers): the real notebook through the runner, in a
temporary compendium (MEDAUDIT_ROOT), on one item, with subject, judge and
augmenter an OpenAI-compatible server on 127.0.0.1 whose replies are a
function of the request (tests/support/fake_openai.py: ``by_request``).
The property is the notebook's control flow — every stage asks, stores and
tabulates, a rerun with the stages off asks nothing — so a deterministic
server serves it in seconds where a real model took minutes; the embedded
model's own answers through the same stages are checked by nbval on
recorded runs (notebooks 02-06) and by ``make test-live``."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from support.fake_openai import FakeOpenAI, by_request
from support.sandbox import compendium_root

ROOT = Path(__file__).resolve().parents[1]
NAME = "fake-model"
STAGES = ["cultural_augment", "cultural_answers", "cultural_judge"]

pytestmark = pytest.mark.slow            # two runs of notebook 07: about a minute


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(model=NAME, content=by_request, lifetime_s=1800) as fake:
        yield fake


def _run(root: Path, env: dict, stages: list[str], url: str) -> subprocess.CompletedProcess:
    spec = {"name": NAME, "backend": "openai", "model": NAME, "options": {"base_url": url, "concurrency": 1}}
    args = {"model_stages": stages, "subject": spec, "judge": spec, "augmenter": spec, "released_answers": [],
            "cultural_items": 1, "cultural_explain_items": 1, "augment_items": 1, "augment_max_attempts": 1,
            "explain_max_tokens": 48}
    out = root / "outputs" / "smoke" / "notebooks" / "07_cultural_flips.ipynb"
    return subprocess.run([sys.executable, "-m", "medaudit.runner", str(ROOT / "notebooks" / "07_cultural_flips.ipynb"),
                           str(out), "--profile", "smoke", "--no-progress-bar", "-y", yaml.safe_dump(args),
                           # both runs (stages on, then off) in the profile's own folders, as the tests read them
                           # (these overrides would otherwise name a run of their own: medaudit.runs)
                           "--run", "default"],
                          cwd=root, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=1200)


@pytest.fixture(scope="module")
def ran(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("nb07")
    env = compendium_root(root)
    r = _run(root, env, STAGES, server.base_url)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return root, env, server


def _table(root: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(root / "outputs" / "smoke" / "tables" / f"{name}.csv")


def _stored(root: Path) -> pd.DataFrame:
    with sqlite3.connect(root / "outputs" / "smoke" / "data" / "responses.sqlite") as con:
        return pd.read_sql_query("SELECT model, source, prompt_format, key FROM responses", con)


def test_every_stage_asks_the_model_and_the_tables_show_its_rows(ran):
    ran, _, server = ran
    stored = _stored(ran)
    assert set(stored["source"]) == {"generated"} and set(stored["model"]) == {NAME}
    assert {"mcq_option", "mcq_explain", "cultural_judge", "cultural_augment"} <= set(stored["prompt_format"])
    assert server.chat_requests == len(stored)          # every request asked once, every answer stored
    kept = _table(ran, "07_retained")
    assert set(kept["model"]) == {NAME} and set(kept["prompt_format"]) == {"mcq_option", "mcq_explain"}
    assert (kept["items"] == 1).all() and (kept["retained"] + kept["dropped"] == kept["items"]).all()
    rates = _table(ran, "07_parse_rates")
    assert NAME in rates.to_string()
    assert (ran / "outputs" / "smoke" / "tables" / "07_augment_summary.csv").is_file()
    assert (ran / "outputs" / "smoke" / "tables" / "07_table3_judge.csv").is_file()


def test_the_mitigation_arm_is_asked_under_its_own_format_and_its_flips_pair_with_the_plain_prompts(ran):
    """The smoke profile's arms (mitigation_strategies [none, fairness], cultural_arm_items 1):
    the arm is asked on the item in every condition under <format>+fairness, and 07_arm_flips
    pairs it with the plain prompt per cue."""
    ran, _, _ = ran
    stored = _stored(ran)
    assert {"mcq_option+fairness", "mcq_explain+fairness"} <= set(stored["prompt_format"])
    assert (stored["prompt_format"] == "mcq_option+fairness").sum() == 11          # one item, every condition
    t = _table(ran, "07_arm_flips")
    assert set(t["strategy"]) == {"fairness"} and set(t["format"]) == {"mcq_option", "mcq_explain"}
    assert set(t["model"]) == {NAME} and (t["Δflip n"] <= 1).all()
    assert len(t[t["format"] == "mcq_option"]) == 10                  # neutral and the nine cultural conditions


def test_a_rerun_with_the_stages_off_asks_nothing_and_reads_the_same_answers(ran):
    ran, env, server = ran
    before = _stored(ran)
    kept = _table(ran, "07_retained")
    asked = server.chat_requests
    r = _run(ran, env, [], server.base_url)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert server.chat_requests == asked
    after = _stored(ran)
    assert sorted(after["key"]) == sorted(before["key"])       # no model was asked
    pd.testing.assert_frame_equal(_table(ran, "07_retained"), kept)
