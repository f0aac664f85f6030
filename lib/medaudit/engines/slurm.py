"""A notebook's model stages on a Slurm job array, every round until the
notebook is answered: the hash shards of :mod:`medaudit.engines.batch` with the
round loop automated.

    python -m medaudit.engines.slurm write  --profile P --notebook 03 --tasks N [--state DIR]
                                    [--sbatch-option OPT]... [-p/-y ...]
    python -m medaudit.engines.slurm submit --state DIR          # start (or, after a failed round, resume):
                                                         # sbatch the next round
    python -m medaudit.engines.slurm task   --state DIR --round R   # what array task $SLURM_ARRAY_TASK_ID runs
    python -m medaudit.engines.slurm status --state DIR

``write`` writes ``DIR/array.sbatch`` (default DIR: ``slurm/<notebook>/``
in the run's folder) and ``DIR/state.json`` (profile, notebook, overrides,
the run, N, the python and project root to run with). The run is the one a
direct run with the same overrides writes (:func:`medaudit.runner.resolve_run`,
:mod:`medaudit.runs`): ``outputs/<profile>/`` for the profile's own
parameters, else ``outputs/<profile>/runs/<run>/``. Slurm is the scheduler;
this module only says what each task does:

* task i of round R (``SLURM_ARRAY_TASK_ID`` = i; ``SLURM_ARRAY_TASK_COUNT``,
  when Slurm sets it, must equal N) works in ``DIR/round-R/task-i/``: a
  compendium root of its own whose ``outputs/<profile>/data/`` is a copy of
  the project's as the previous round left it (the store copied with
  SQLite's backup; a named run's own ``data/`` copied too), everything else
  linked. It runs the notebook in shard
  mode (``MEDAUDIT_SHARD=i/N``): the first stage with pending requests
  answers the keys whose hash modulo N is i into the task's own store, and
  the notebook stops (or runs on, where its shard held the whole stage).
  It then records its outcome in ``DIR/round-R/done-i.json``.
* The last task of the round to finish (every ``done-*.json`` present; an
  exclusive create of ``DIR/round-R/merge.claim`` decides, so two tasks
  finishing together merge once) is the round's last step: it merges the
  tasks' stores into the project's (:func:`medaudit.engines.batch.merge`: by key; a
  key held twice with the same reply counted once, two different replies
  refused), then runs the notebook stored-only on the merged store. If that
  runs to the end, the notebook is answered: its tables, figures and
  executed copy are written to the run's folder (only then:
  :func:`medaudit.engines.batch.run_notebook`), and the loop ends. If a request is
  still pending (a later stage: judges of the answers, an agent's next
  turn), it submits round R+1 with ``sbatch`` — up to ``--max-rounds``, and
  never after a round that added nothing or in which a task failed (then
  ``status`` says which, and ``submit`` starts the next round once fixed:
  what the other tasks answered is kept).

Every answer is stored under the key a direct run uses, by the same code;
a task killed and rerun asks again only for what its store lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from medaudit.engines import batch
from medaudit import paths
from medaudit.llm import dispatch

STATE = "state.json"
SCRIPT = "array.sbatch"
STORE = ("data", "responses.sqlite")


class SlurmError(RuntimeError):
    """A state folder, task environment or round that cannot go on: says why and what to do."""


# ==========================================================================
# the state folder


def load(state_dir: Path) -> dict:
    """The Slurm state of ``state_dir`` (its ``state.json``); a missing one is a
    :class:`SlurmError` that says how to write it."""
    p = Path(state_dir) / STATE
    if not p.is_file():
        raise SlurmError(f"{p}: no Slurm state (python -m medaudit.engines.slurm write makes it)")
    return json.loads(p.read_text(encoding="utf-8"))


def save(state_dir: Path, state: dict) -> None:
    """Write the Slurm state to ``state_dir/state.json`` through a temporary file and a
    rename, so an interrupted write leaves the old state whole."""
    tmp = Path(state_dir) / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, Path(state_dir) / STATE)


def run_of(state: dict) -> str:
    """The run the array writes to: the one the runner names for the state's overrides
    (:func:`medaudit.runner.resolve_run`, recorded by ``write``; resolved again for a state
    written before runs were kept apart)."""
    if not state.get("run"):
        from medaudit import runner

        state["run"] = runner.resolve_run(state["profile"], state["overrides"])[0]
    return state["run"]


def run_folder(state: dict, root: Path | None = None) -> Path:
    """The run's folder under ``root`` (default: the state's project root): ``outputs/<profile>/``
    for the default run, else ``outputs/<profile>/runs/<run>/`` (as :func:`medaudit.paths.run_outputs`
    lays them out)."""
    base = Path(root or state["root"]) / "outputs" / state["profile"]
    run = run_of(state)
    return base if run == paths.DEFAULT_RUN else base / "runs" / run


def script_text(state_dir: Path, state: dict) -> str:
    """The array script: N tasks, each ``python -m medaudit.engines.slurm task``."""
    name = f"medaudit-{Path(state['notebook']).stem.split('_')[0]}-{state['profile']}"
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --array=0-{state['tasks'] - 1}",
             f"#SBATCH --output={state_dir}/logs/%A_%a.out"]
    lines += [f"#SBATCH {opt}" for opt in state.get("sbatch_options", [])]
    lines += [
        "# written by python -m medaudit.engines.slurm write: task i answers shard i of N of the notebook's pending",
        "# requests; the last task of a round to finish merges the stores and submits the next round",
        "# (python -m medaudit.engines.slurm submit passes the round number as the first argument).",
        "set -euo pipefail",
        f"cd {shlex.quote(state['root'])}",
        f"export MEDAUDIT_ROOT={shlex.quote(state['root'])}",
        f"exec {shlex.quote(state['python'])} -m medaudit.engines.slurm task --state {shlex.quote(str(state_dir))} "
        '--round "${1:?the round number}"',
    ]
    return "\n".join(lines) + "\n"


def write(profile: str, notebook: Path, tasks: int, state_dir: Path | None = None, overrides=(),
          sbatch_options=(), max_rounds: int = 20, sbatch: str = "sbatch", python: str | None = None) -> Path:
    """Write the array script and the state for a profile and notebook; the script's path."""
    from medaudit import runner

    if tasks < 1:
        raise SlurmError(f"--tasks {tasks}: need at least one task")
    runner.prepare(notebook, profile, list(overrides))     # the profile and overrides are checked now
    run = runner.resolve_run(profile, list(overrides))[0]
    state_dir = Path(state_dir or paths.run_outputs(profile, "slurm", notebook.stem, run=run)).resolve()
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    state = {"profile": profile, "notebook": str(notebook.resolve()), "overrides": [list(o) if isinstance(o, tuple)
                                                                                    else o for o in overrides],
             "run": run, "tasks": tasks, "root": str(paths.project_root()), "python": python or sys.executable,
             "sbatch": sbatch, "sbatch_options": list(sbatch_options), "max_rounds": max_rounds, "round": 0,
             "rounds": {}, "finished": False}
    save(state_dir, state)
    path = state_dir / SCRIPT
    path.write_text(script_text(state_dir, state), encoding="utf-8")
    path.chmod(0o755)
    return path


def submit(state_dir: Path) -> tuple[int, str]:
    """sbatch the next round; (its number, what sbatch said)."""
    state = load(state_dir)
    if state.get("finished"):
        raise SlurmError(f"{state_dir}: the notebook is answered (round {state['round']}); nothing to submit")
    r = state["round"] + 1
    if r > state["max_rounds"]:
        raise SlurmError(f"{state_dir}: round {r} would pass --max-rounds {state['max_rounds']}")
    state["round"] = r
    state["rounds"][str(r)] = {"submitted": time.time()}
    save(state_dir, state)
    cmd = [*shlex.split(state["sbatch"]), str(Path(state_dir) / SCRIPT), str(r)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]}: not found (is this a Slurm login node?); the round is {r}") from None
    if out.returncode != 0:
        raise SlurmError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[:500]}")
    job = re.search(r"(\d+)", out.stdout)
    state = load(state_dir)
    state["rounds"][str(r)]["job"] = job.group(1) if job else out.stdout.strip()
    save(state_dir, state)
    return r, out.stdout.strip()


# ==========================================================================
# one task


def task_index(state: dict, environ=None) -> int:
    """This array task's shard index from ``SLURM_ARRAY_TASK_ID``, checked against the
    state's task count (and ``SLURM_ARRAY_TASK_COUNT`` where set): a task outside the array the
    state was written for is a :class:`SlurmError`."""
    env = os.environ if environ is None else environ
    raw = env.get("SLURM_ARRAY_TASK_ID")
    if raw is None:
        raise SlurmError("SLURM_ARRAY_TASK_ID is not set: `task` runs inside a Slurm array task")
    i, n = int(raw), state["tasks"]
    count = env.get("SLURM_ARRAY_TASK_COUNT")
    if count is not None and int(count) != n:
        raise SlurmError(f"the array has {count} tasks (SLURM_ARRAY_TASK_COUNT), the state {n}: submit the script "
                         "python -m medaudit.engines.slurm write wrote, with its --array")
    if not 0 <= i < n:
        raise SlurmError(f"SLURM_ARRAY_TASK_ID {i} is outside 0..{n - 1}")
    return i


def copy_store(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite store (the backup API: WAL included)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    if not src.exists():
        return
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def task_root(state: dict, where: Path) -> Path:
    """A compendium root for one task: the project's ``outputs/<profile>/data``
    copied (the store by backup), every other top-level entry linked."""
    root, profile = Path(state["root"]), state["profile"]
    mine = where / "outputs" / profile / STORE[0] / STORE[1]
    kept = where.parent / "kept.sqlite"
    if mine.exists():                   # a task run again (requeued): its answers so far are kept
        copy_store(mine, kept)
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    for entry in root.iterdir():
        if entry.name != "outputs":
            (where / entry.name).symlink_to(entry)
    src = root / "outputs" / profile / "data"
    dst = where / "outputs" / profile / "data"
    dst.mkdir(parents=True)
    if src.is_dir():
        for f in src.iterdir():
            if f.name.startswith("responses.sqlite"):
                continue
            (shutil.copytree if f.is_dir() else shutil.copy2)(f, dst / f.name)
    own = run_folder(state) / "data"
    if run_of(state) != paths.DEFAULT_RUN and own.is_dir():     # a named run's own derived tables (02 rerun in it)
        shutil.copytree(own, run_folder(state, where) / "data")
    copy_store(kept if kept.exists() else src / STORE[1], dst / STORE[1])
    kept.unlink(missing_ok=True)
    return where


def run_task(state_dir: Path, round_no: int, environ=None) -> dict:
    """Answer this task's shard of round ``round_no``; the round's last
    task then merges and goes on (module docstring). The task's outcome."""
    state_dir = Path(state_dir).resolve()
    state = load(state_dir)
    i, n = task_index(state, environ), state["tasks"]
    rdir = state_dir / f"round-{round_no}"
    tdir = rdir / f"task-{i}"
    rdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    root = task_root(state, tdir / "root")
    env = {dispatch.ENV_SHARD: f"{i}/{n}", dispatch.ENV_COLLECT: "", dispatch.ENV_STORED_ONLY: "",
           "MEDAUDIT_ROOT": str(root)}
    done, stopped_by, why = batch.run_notebook(Path(state["notebook"]), state["profile"], state["overrides"], env,
                                               tdir / "executed", run=run_of(state), engine="slurm")
    outcome = ("finished" if done else "shard_done" if stopped_by == dispatch.ShardDone.__name__ else "failed")
    store = root / "outputs" / state["profile"] / STORE[0] / STORE[1]
    rec = {"task": i, "outcome": outcome, "why": why, "store": str(store), "seconds": round(time.monotonic() - t0, 1)}
    tmp = rdir / f".done-{i}.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1), encoding="utf-8")
    os.replace(tmp, rdir / f"done-{i}.json")
    if len(list(rdir.glob("done-*.json"))) == n:
        try:
            fd = os.open(rdir / "merge.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return rec                          # another task finished at the same moment and merges
        os.close(fd)
        rec["round"] = finish_round(state_dir, round_no)
    return rec


def finish_round(state_dir: Path, round_no: int) -> dict:
    """The round's last step: merge, check, and submit the next round or stop."""
    state = load(state_dir)
    rdir = Path(state_dir) / f"round-{round_no}"
    done = [json.loads(p.read_text()) for p in sorted(rdir.glob("done-*.json"))]
    root, profile = Path(state["root"]), state["profile"]
    main_store = root / "outputs" / profile / STORE[0] / STORE[1]
    main_store.parent.mkdir(parents=True, exist_ok=True)
    rep = batch.merge(main_store, [Path(d["store"]) for d in done if Path(d["store"]).exists()])
    summary = {"tasks": {d["task"]: d["outcome"] for d in done}, "added": rep.added, "rows": _count(main_store)}
    failed = [d for d in done if d["outcome"] == "failed"]
    if failed:
        summary["next"] = (f"stopped: task {', '.join(str(d['task']) for d in failed)} failed "
                           f"({failed[0]['why'][:300]}); fix it, then "
                           f"python -m medaudit.engines.slurm submit --state {state_dir}")
    else:
        env = {dispatch.ENV_STORED_ONLY: "the next Slurm round answers it", dispatch.ENV_SHARD: "",
               dispatch.ENV_COLLECT: "", "MEDAUDIT_ROOT": str(root)}
        ok, stopped_by, why = batch.run_notebook(Path(state["notebook"]), profile, state["overrides"], env,
                                                 rdir / "check", run=run_of(state), engine="slurm")
        if ok:
            run = run_of(state)
            out = run_folder(state) / "notebooks" / Path(state["notebook"]).name
            summary["next"] = (f"finished: every request answered; run {run}: the executed notebook is {out}, its "
                               "tables and figures beside it")
            state["finished"] = True
        elif stopped_by != dispatch.NotStored.__name__:
            summary["next"] = f"stopped: the stored-only run failed: {why[:300]}"
        elif rep.added == 0:
            summary["next"] = (f"stopped: round {round_no} answered nothing new and requests are still pending "
                               f"({why[:300]})")
        elif round_no >= state["max_rounds"]:
            summary["next"] = f"stopped: --max-rounds {state['max_rounds']} reached with requests pending"
        else:
            summary["next"] = "next round"
    state["rounds"].setdefault(str(round_no), {}).update(summary)
    save(state_dir, state)
    if summary["next"] == "next round":
        r, said = submit(state_dir)
        state = load(state_dir)
        state["rounds"][str(round_no)]["next"] = f"round {r} submitted: {said}"
        save(state_dir, state)
    return load(state_dir)["rounds"][str(round_no)]


def _count(path: Path) -> int:
    if not Path(path).exists():
        return 0
    with sqlite3.connect(path) as c:
        n = c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    c.close()
    return n


def status(state_dir: Path) -> str:
    """The state in words: notebook, profile, task count and round, then per round its
    job, the tasks done and what the round recorded."""
    state = load(state_dir)
    lines = [f"{Path(state['notebook']).name} on profile {state['profile']}, {state['tasks']} tasks; round "
             f"{state['round']}{' (finished)' if state['finished'] else ''}"]
    for r, info in sorted(state["rounds"].items(), key=lambda x: int(x[0])):
        rdir = Path(state_dir) / f"round-{r}"
        got = sorted(int(p.stem.split("-")[1]) for p in rdir.glob("done-*.json"))
        lines.append(f"  round {r}: job {info.get('job', '?')}, tasks done {got}; " +
                     "; ".join(f"{k} {v}" for k, v in info.items() if k not in ("submitted", "job")))
    return "\n".join(lines)


# ==========================================================================
# command line


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.engines.slurm``: ``write`` the array script
    and state, ``submit`` the next round, run one array ``task``'s shard, or print the
    ``status``; an error is reported on stderr."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.engines.slurm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the array script and state for a profile and notebook")
    w.add_argument("--profile", required=True)
    w.add_argument("--notebook", required=True, help="03, 03_inference or a path")
    w.add_argument("--tasks", required=True, type=int, help="N: the array's size (shards)")
    w.add_argument("--state", type=Path, help="default: slurm/<notebook>/ in the run's folder (outputs/<profile>/, "
                                              "or outputs/<profile>/runs/<run>/ when an override changes answers)")
    w.add_argument("--sbatch-option", action="append", default=[], metavar="OPT",
                   help="an #SBATCH line, written with =: --sbatch-option=--gres=gpu:1 (repeat)")
    w.add_argument("--max-rounds", type=int, default=20)
    w.add_argument("--sbatch", default="sbatch", help="the submit command (default sbatch)")
    from medaudit.runner import Ordered

    w.add_argument("-p", "--parameters", dest="overrides", nargs=2, action=Ordered, metavar=("NAME", "VALUE"),
                   help="a parameter override, as the runner reads it")
    w.add_argument("-y", "--parameters_yaml", dest="overrides", action=Ordered, metavar="YAML",
                   help="overrides as a YAML mapping")
    for name in ("submit", "status"):
        sub.add_parser(name).add_argument("--state", type=Path, required=True)
    t = sub.add_parser("task", help="run this array task's shard (inside Slurm)")
    t.add_argument("--state", type=Path, required=True)
    t.add_argument("--round", type=int, required=True)
    args = ap.parse_args(argv)
    from medaudit.config import ConfigError

    try:
        if args.cmd == "write":
            path = write(args.profile, batch.notebook_path(args.notebook), args.tasks, args.state,
                         list(args.overrides or []), args.sbatch_option, args.max_rounds, args.sbatch)
            print(f"{path}\nstart it: python -m medaudit.engines.slurm submit --state {path.parent}")
        elif args.cmd == "submit":
            r, said = submit(args.state)
            print(f"round {r}: {said}")
        elif args.cmd == "task":
            rec = run_task(args.state, args.round)
            print(json.dumps(rec, indent=1))
            return 1 if rec["outcome"] == "failed" else 0
        elif args.cmd == "status":
            print(status(args.state))
    except (SlurmError, batch.BatchError, ConfigError) as e:      # ConfigError: the runner's checks
        print(f"medaudit.engines.slurm: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
