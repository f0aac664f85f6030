"""The notebook path at the benchmark's speed: notebook 03 as a researcher
runs it, timed against the backend alone on the same samples, in one run.

    python -m medaudit.bench notebook [--profile gpubench] [-y YAML]... [--tokenizer DIR] [--items N[,N]]

``bench gpu`` times the transformers backend alone. A researcher's run of
``make nb NB=03`` also starts a kernel, imports the library, builds the
backend, plans the samples, checks the store, stores every answer, parses
and tabulates. This command measures what that costs:

1. notebook 03 runs through the project's runner (papermill, the profile's
   parameters and ``-y`` overrides, exactly as ``make nb NB=03`` runs it) on
   an empty store, and its wall time is taken; papermill's own duration of
   each cell says where it went (the backend's build, the run cell that
   draws and stores every sample, the rest);
2. then, in this process, the same backend answers the same samples (their
   store keys must equal the notebook's: the same requests) through
   :func:`medaudit.bench.timing.timed` — the backend alone, as ``bench gpu`` times
   it, after a warm-up on four;
3. it prints seconds per sample of the whole notebook, of its run cell and
   of the backend alone, and their ratios (the target: the notebook within
   1.2× of the backend);
4. with two sizes (``--items 33,100``: more questions, the same K) it also
   prints the notebook's overhead over the backend at each, how much of it
   grows with the design, and what follows for the whole notebook's ratio at
   the paper's size (:func:`overhead`). Sizes differ in questions, not in K:
   the letter scorer evaluates each distinct prompt once, and with four
   options K > 24 repeats option orders, so the backend's cost per sample
   falls with K (H200: 0.00326 s at K = 10, 0.00188 s at K = 30).

The profile must have a random-weight subject (``benchmark: true``: the
``gpubench`` profile, a random Qwen2.5-7B shape on ``cuda``): its store
holds nothing but answers of weights of no one, so it is emptied first.
Notebooks 01 and 02 must have run under it (their items and variants are
03's input; they need no GPU). ``--tokenizer DIR`` gives the subject a
tokenizer folder saved by ``python -m medaudit.bench gpu --save-tokenizer``
(on a machine without the embedded model package).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from medaudit import config, paths
from medaudit.prep import data
from medaudit.llm import GenParams, ResponseStore, get_backend, mcq, random_model
from medaudit.bench.timing import timed

NOTEBOOK = "03_inference"


def _overrides(yamls: list[str], tokenizer: str | None, profile: str) -> tuple[dict, list[str]]:
    """The overrides as one mapping (for :func:`config.load`) and as the
    runner's ``-y`` arguments; ``tokenizer`` is added to the subject's options."""
    merged: dict = {}
    for y in yamls:
        m = config.read_yaml(y, "-y")
        if not isinstance(m, dict):
            raise config.ConfigError([f"-y {y!r}: a YAML mapping of key: value"])
        merged.update(m)
    if tokenizer is not None:
        subject = merged.get("subject") or config.load(profile, merged)["subject"]
        merged["subject"] = {**subject, "options": {**subject.get("options", {}),
                                                    "tokenizer": str(Path(tokenizer).resolve())}}
    return merged, ([json.dumps(merged)] if merged else [])


def cell_durations(nb_path: str | os.PathLike) -> dict:
    """Seconds of an executed notebook's cells as papermill recorded them:
    ``setup`` (the cell that builds the backend), ``run`` (the one that
    draws and stores the samples), ``other`` and ``cells`` (all), and the
    planned / stored sample counts the run cell printed after it."""
    nb = json.loads(Path(nb_path).read_text(encoding="utf-8"))
    out = {"setup": 0.0, "run": 0.0, "other": 0.0, "cells": 0.0, "stored": None, "planned": None}
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        d = float((cell.get("metadata", {}).get("papermill", {}) or {}).get("duration") or 0.0)
        src = "".join(cell.get("source", ""))
        kind = "run" if "runs.run(" in src else "setup" if "get_backend(" in src else "other"
        out[kind] += d
        out["cells"] += d
        for o in cell.get("outputs", []):
            text = "".join(o.get("text", "")) if o.get("output_type") == "stream" else ""
            m = re.search(r"(\d+) responses stored for (\d+) planned samples", text)
            if m:
                out["stored"], out["planned"] = int(m.group(1)), int(m.group(2))
    if out["planned"] is None:
        raise ValueError(f"{nb_path}: no cell printed 'N responses stored for M planned samples' "
                         "(not an executed notebook 03?)")
    return out


def notebook_samples(params: dict, backend) -> list:
    """The samples notebook 03 plans for ``params`` (the same function its
    planning cell calls: :func:`medaudit.llm.mcq.plan_samples`)."""
    profile = params["profile"]
    items = pd.concat([data.load_frame(profile, "items"), data.load_frame(profile, "psych_items")])
    variants = mcq.select_variants(data.load_frame(profile, "variants"), params["infer_items"],
                                   params["infer_conditions"], params["infer_methods"], params["infer_subsets"])
    gen = GenParams(temperature=params["temperature"], top_p=params["top_p"], max_tokens=params["max_tokens"])
    return mcq.plan_samples(variants, items, prompt_formats=params["prompt_formats"],
                            strategies=params["mitigation_strategies"], arm_conditions=params["mitigation_conditions"],
                            model=params["subject"]["name"], backend=backend.kind, model_id=backend.model_id,
                            k=params["k_samples"], seed=params["seed"], gen=gen)


def _build_parts(subject: dict):
    """The backend built in this process, timed by part: the imports of torch
    and transformers, the device's start (CUDA context; nothing on a CPU) and
    the build itself (tokenizer and weights)."""
    t0 = time.perf_counter()
    import torch
    import transformers  # noqa: F401  (timed: the backend imports it)

    t1 = time.perf_counter()
    device = str(subject.get("options", {}).get("device", "cpu"))
    if device.startswith("cuda"):
        torch.zeros(1, device=device)
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    backend = get_backend(subject["backend"], subject["model"], **subject.get("options", {}))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    return backend, {"build_imports_s": round(t1 - t0, 2), "build_device_start_s": round(t2 - t1, 2),
                     "build_model_s": round(t3 - t2, 2)}


def bench_notebook(profile: str = "gpubench", yamls: list[str] = (), tokenizer: str | None = None,
                   items: int | None = None) -> dict:
    """One size: notebook 03 on an empty store, then the backend alone on the
    same samples (module docstring). ``items`` overrides ``infer_items`` (the
    first N questions of those notebook 02 augmented)."""
    yamls = [*yamls, json.dumps({"infer_items": int(items)})] if items is not None else list(yamls)
    overrides, y_args = _overrides(list(yamls), tokenizer, profile)
    params = config.load(profile, overrides)
    subject = params["subject"]
    if not random_model.is_random(subject["model"]):
        raise ValueError(f"profile '{profile}': the subject is {subject['model']!r}; this benchmark empties the "
                         "store, so it runs a random-weight subject only (a benchmark profile: gpubench)")
    for name, nb in (("items", "01"), ("variants", "02")):
        if not paths.outputs(profile, "data", f"{name}.jsonl", mkdir=False).is_file():
            raise FileNotFoundError(f"outputs/{profile}/data/{name}.jsonl: run notebook {nb} first "
                                    f"(make nb NB={nb} PROFILE={profile})")
    store_path = paths.outputs(profile, "data", "responses.sqlite")
    for p in (store_path, *(store_path.with_name(store_path.name + s) for s in ("-wal", "-shm"))):
        p.unlink(missing_ok=True)       # only answers of random weights: the run starts empty
    out_nb = paths.outputs(profile, "notebooks", f"{NOTEBOOK}.ipynb")
    cmd = [sys.executable, "-m", "medaudit.runner", str(paths.project_root() / "notebooks" / f"{NOTEBOOK}.ipynb"),
           str(out_nb), "--profile", profile, *(a for y in y_args for a in ("-y", y)),
           "--run", "default"]          # a benchmark of its own (its store emptied): the profile's folders
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=paths.project_root(), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"notebook {NOTEBOOK} failed (exit {proc.returncode}); see outputs/{profile}/failed/")
    cells = cell_durations(out_nb)
    n = cells["planned"]

    backend, build = _build_parts(subject)
    samples = notebook_samples(params, backend)
    with ResponseStore(store_path) as store:
        same = len(store.has(s.key for s in samples))
    if len(samples) != n or same != n:
        raise AssertionError(f"the notebook planned {n} samples and stored {cells['stored']}; replanned here: "
                             f"{len(samples)}, {same} of them under the notebook's keys")
    reqs = [s.request for s in samples]
    timed(backend, reqs[:4])                   # warm-up (the notebook's backend warmed up on its own run)
    _, t_alone = timed(backend, reqs)
    s_nb, s_run, s_alone = wall / n, cells["run"] / n, t_alone / n
    return {
        "profile": profile, "subject": f"{subject['name']} ({backend.model_id}, {backend.kind})",
        "device": str(backend.device), "samples": n, "stored": cells["stored"],
        "notebook_wall_s": round(wall, 2),
        "kernel_and_imports_s": round(wall - cells["cells"], 2),
        "backend_build_cell_s": round(cells["setup"], 2),
        "run_cell_s": round(cells["run"], 2),
        "other_cells_s": round(cells["other"], 2),
        **build,
        "backend_alone_s": round(t_alone, 2),
        "notebook_s_per_sample": f"{s_nb:.6g}",
        "run_cell_s_per_sample": f"{s_run:.6g}",
        "backend_alone_s_per_sample": f"{s_alone:.6g}",
        "notebook_vs_backend": f"{s_nb / s_alone:.4g}",
        "run_cell_vs_backend": f"{s_run / s_alone:.4g}",
        "batches_alone": f"{len(backend.batch_rows)} ({max(backend.batch_rows, default=0)} rows most)",
    }


PAPER_SAMPLES = 212_760   # seed 000's full design per model (docs/speed.md)


def overhead(small: dict, large: dict, target: float = 1.2) -> dict:
    """Two sizes of one design (more questions, the same K): the notebook's
    overhead over the backend alone at each (its wall time less the backend's
    time on the same samples: the kernel, the imports, the build, the first
    calls, the plan, the store), how much of it grows with each further sample
    (a share of the backend's cost per sample), and from these the whole
    notebook's ratio at the paper's design size and the size from which it is
    within ``target`` × the backend alone (None: never), at the larger run's
    backend cost per sample."""
    dn = large["samples"] - small["samples"]
    if dn <= 0:
        raise ValueError("the second size must plan more samples than the first")
    ov_s = small["notebook_wall_s"] - small["backend_alone_s"]
    ov_l = large["notebook_wall_s"] - large["backend_alone_s"]
    grow = (ov_l - ov_s) / dn
    per = large["backend_alone_s"] / large["samples"]

    def ratio(n):
        return 1 + (ov_s + grow * (n - small["samples"])) / (per * n)

    slack = (target - 1) * per - grow
    need = (ov_s - grow * small["samples"]) / slack if slack > 0 else None
    return {"sizes": f"{small['samples']} and {large['samples']} samples",
            "overhead_s": f"{ov_s:.2f} and {ov_l:.2f}",
            "overhead_growth_per_sample_vs_backend": f"{grow / per:.4g}",
            "backend_alone_s_per_sample": f"{per:.6g}",
            f"notebook_vs_backend_at_{PAPER_SAMPLES}": f"{ratio(PAPER_SAMPLES):.4g}",
            f"samples_for_within_{target}x": (max(int(np.ceil(need)), 0) if need is not None else None)}


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.bench notebook``: run notebook 03
    through the runner at one or two design sizes, print each run's time against the backend
    alone on the same samples (target: the run cell within 1.2x), and with two sizes how much of
    the overhead grows with the design."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.bench notebook", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="gpubench", help="a benchmark profile (random-weight subject)")
    ap.add_argument("-y", dest="yamls", action="append", default=[], metavar="YAML",
                    help="parameter overrides as for the runner, e.g. -y '{n_items: 20}' (repeatable)")
    ap.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="the subject's tokenizer folder (python -m medaudit.bench gpu --save-tokenizer DIR)")
    ap.add_argument("--items", default=None, metavar="N[,N]",
                    help="infer_items for one run, or two sizes (e.g. 33,100): the notebook's overhead over the "
                         "backend at each and how much of it grows with the design")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.items.split(",")] if a.items else [None]
    if len(sizes) > 2:
        ap.error("--items: one size or two")
    rs = []
    for n in sizes:
        r = bench_notebook(a.profile, a.yamls, a.tokenizer, items=n)
        rs.append(r)
        _print(r)
        print(f"\nnotebook 03 vs the backend alone, same samples, same machine, one run: whole notebook "
              f"{r['notebook_vs_backend']}x, its run cell {r['run_cell_vs_backend']}x (target <= 1.2x)\n")
    if len(rs) == 2:
        _print(overhead(*rs))
    return 0


def _print(r: dict) -> None:
    width = max(map(len, r))
    for key, v in r.items():
        print(f"{key:<{width}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
