"""medaudit.engines.slurm: the array script and its round loop, run by hand with the
Slurm environment variables set (no Slurm runs here; ``sbatch`` is a stand-in
that records what it was asked to submit).

A two-stage notebook (answers, then a judge of each answer whose prompt
quotes it, so the judges can only be asked in a later round) on the openai
backend against a deterministic OpenAI-compatible server
(tests/support/fake_openai.py, ``by_request``): the property is the
bookkeeping — the array's rounds, merged, give the store and the table of one
process — not a model's text.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from medaudit import runner
from medaudit.engines import slurm
from medaudit.llm.store import ResponseStore
from support.fake_openai import FakeOpenAI, by_request
from support.sandbox import compendium_root
from support.smoke import MODEL
from support.two_stage import plant_default_run, two_stage_notebook

LIB = Path(__file__).resolve().parents[1] / "lib"

_notebook = two_stage_notebook


def _env(root: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDAUDIT_", "SLURM_"))}
    env.update(compendium_env(root), PYTHONPATH=str(LIB), **extra)
    return env


def compendium_env(root: Path) -> dict:
    return {"MEDAUDIT_ROOT": str(root), "MEDAUDIT_MODEL_CACHE": str(Path(__file__).resolve().parents[1] / ".cache"
                                                                     / "models")}


def _frame(store: Path) -> pd.DataFrame:
    with ResponseStore(store) as s:
        df = s.frame()
    cols = [c for c in df.columns if c not in ("created_at", "latency_s", "run_id", "wall_s")]
    return df[cols].sort_values("key").reset_index(drop=True)


# eight notebook runs in their own kernels (two rounds of two tasks, a requeued task, two checks, one process)
@pytest.mark.slow
def test_array_tasks_run_by_hand_give_the_store_and_table_of_one_process(tmp_path, monkeypatch):
    with FakeOpenAI(model=MODEL, content=by_request) as fake:
        subject = (f"{{subject: {{name: {MODEL}, backend: openai, model: {MODEL}, "
                   f"options: {{base_url: '{fake.base_url}', concurrency: 1}}}}}}")
        over = ["-y", subject, "-p", "k_samples", "2"]
        # one process: the notebook run directly into its own compendium
        one = tmp_path / "one"
        one.mkdir()
        for k, v in compendium_root(one).items():
            monkeypatch.setenv(k, v)
        nb = _notebook(tmp_path / "nbs" / "09_tiny.ipynb")
        # the direct run: the runner, into the run its overrides name (another subject: a named run)
        assert runner.main([str(nb), str(one / "outputs" / "smoke" / "notebooks" / nb.name), "--profile", "smoke",
                            "--no-progress-bar", *over]) == 0
        run = runner.resolve_run("smoke", [("-y", [subject]), ("-p", ["k_samples", "2"])])[0]
        assert run != "default"
        direct_requests = fake.chat_requests
        assert direct_requests == 24                      # 2 items x 3 conditions x K=2 answers, as many judges

        # the array: two tasks, sbatch a stand-in that records each submission
        root = tmp_path / "root"
        root.mkdir()
        for k, v in compendium_root(root).items():
            monkeypatch.setenv(k, v)
        default = plant_default_run(root)
        log = tmp_path / "sbatch.log"
        fake_sbatch = tmp_path / "bin" / "sbatch"
        fake_sbatch.parent.mkdir()
        fake_sbatch.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "Submitted batch job 4242"\n')
        fake_sbatch.chmod(0o755)
        assert slurm.main(["write", "--profile", "smoke", "--notebook", str(nb), "--tasks", "2", "--sbatch",
                           str(fake_sbatch), "--sbatch-option=--gres=gpu:1", *over]) == 0
        state_dir = root / "outputs" / "smoke" / "runs" / run / "slurm" / "09_tiny"
        script = state_dir / "array.sbatch"
        text = script.read_text()
        assert "#SBATCH --array=0-1" in text and "#SBATCH --gres=gpu:1" in text
        assert slurm.main(["submit", "--state", str(state_dir)]) == 0

        def task(i: int, r: int, count: int = 2) -> subprocess.CompletedProcess:
            return subprocess.run(["bash", str(script), str(r)], capture_output=True, text=True, timeout=600,
                                  env=_env(root, SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_TASK_COUNT=str(count),
                                           SLURM_ARRAY_JOB_ID="4242"))

        bad = task(0, 1, count=3)
        assert bad.returncode == 2 and "SLURM_ARRAY_TASK_COUNT" in bad.stderr
        rounds = 0
        while True:
            submitted = log.read_text().splitlines()
            if len(submitted) == rounds:
                break
            rounds = len(submitted)
            r = int(submitted[-1].split()[-1])
            assert r == rounds
            first = task(1, r)
            assert first.returncode == 0, first.stdout + first.stderr
            if r == 1:                              # the task requeued: its answers are kept, nothing asked twice
                sent = fake.chat_requests
                again = task(1, r)
                assert again.returncode == 0 and fake.chat_requests == sent
            assert not (state_dir / f"round-{r}" / "merge.claim").exists()
            last = task(0, r)
            assert last.returncode == 0, last.stdout + last.stderr
            assert (state_dir / f"round-{r}" / "merge.claim").exists()
        state = slurm.load(state_dir)
        assert rounds == 2 and state["finished"], slurm.status(state_dir)
        assert state["rounds"]["1"]["added"] == 12 and state["rounds"]["2"]["added"] == 12
        assert fake.chat_requests - direct_requests == 24        # every request once across the array
        assert "finished" in slurm.status(state_dir)
    a = _frame(one / "outputs" / "smoke" / "data" / "responses.sqlite")
    b = _frame(root / "outputs" / "smoke" / "data" / "responses.sqlite")
    assert len(a) == len(b) == 24
    pd.testing.assert_frame_equal(a, b)
    table = f"outputs/smoke/runs/{run}/tables/tiny_judges.csv"
    assert (one / table).read_bytes() == (root / table).read_bytes()
    assert {p: p.read_bytes() for p in default} == default, "the default run's files changed"
    folder = root / "outputs" / "smoke" / "runs" / run
    assert (folder / "notebooks" / "09_tiny.ipynb").exists()
    placed = folder / "notebooks" / "09_tiny.ipynb"
    assert f"run {run}: the executed notebook is {placed}" in state["rounds"]["2"]["next"]
    entry = json.loads((folder / "run.json").read_text())["notebooks"]["09_tiny"]
    assert (entry["status"], entry["engine"]) == ("ok", "slurm")
    listed = subprocess.run([sys.executable, "-m", "medaudit.runs", "list", "--profile", "smoke"], capture_output=True,
                            text=True, timeout=120, env=_env(root))
    assert run in listed.stdout and "09 ok" in listed.stdout, listed.stdout + listed.stderr



def test_a_task_outside_the_array_or_without_slurm_is_refused():
    state = {"tasks": 3}
    assert slurm.task_index(state, {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3"}) == 2
    with pytest.raises(slurm.SlurmError, match="SLURM_ARRAY_TASK_ID is not set"):
        slurm.task_index(state, {})
    with pytest.raises(slurm.SlurmError, match="outside 0..2"):
        slurm.task_index(state, {"SLURM_ARRAY_TASK_ID": "3"})
    with pytest.raises(slurm.SlurmError, match="the array has 4 tasks"):
        slurm.task_index(state, {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_a_failed_task_stops_the_loop_keeps_the_others_answers_and_submit_resumes(tmp_path, monkeypatch):
    """No notebook runs here: the round's last step sees a failed task, merges
    what the tasks stored, submits nothing and says how to resume."""
    root = tmp_path / "root"
    root.mkdir()
    for k, v in compendium_root(root).items():
        monkeypatch.setenv(k, v)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    slurm.save(state_dir, {"profile": "smoke", "notebook": str(tmp_path / "09_x.ipynb"), "overrides": [], "tasks": 2,
                           "root": str(root), "python": sys.executable, "sbatch": "echo Submitted batch job 7",
                           "sbatch_options": [], "max_rounds": 20, "round": 1, "rounds": {"1": {}}, "finished": False})
    (state_dir / "array.sbatch").write_text("#!/bin/bash\n")
    rdir = state_dir / "round-1"
    rdir.mkdir()
    for i, outcome in enumerate(["shard_done", "failed"]):
        store = rdir / f"task-{i}" / "responses.sqlite"
        store.parent.mkdir()
        ResponseStore(store).close()
        (rdir / f"done-{i}.json").write_text(json.dumps({"task": i, "outcome": outcome, "store": str(store),
                                                         "why": "RuntimeError: the GPU fell over" if i else ""}))
    info = slurm.finish_round(state_dir, 1)
    assert info["tasks"] == {"0": "shard_done", "1": "failed"}
    assert info["next"].startswith("stopped: task 1 failed (RuntimeError: the GPU fell over)")
    assert f"python -m medaudit.engines.slurm submit --state {state_dir}" in info["next"]
    assert (root / "outputs" / "smoke" / "data" / "responses.sqlite").exists()      # merged, nothing lost
    assert slurm.load(state_dir)["round"] == 1                                      # nothing submitted
    assert slurm.submit(state_dir) == (2, f"Submitted batch job 7 {state_dir / 'array.sbatch'} 2")
    assert slurm.load(state_dir)["rounds"]["2"]["job"] == "7"
    assert "round 2: job 7" in slurm.status(state_dir)
