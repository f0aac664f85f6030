"""A tiny two-stage notebook: answers, then a judge of each answer whose
prompt quotes it (so the judges can only be asked once the answers are
stored: a second round), writing ``tables/tiny_judges.csv``. Run on the
openai backend by the round-loop tests (test_slurm, test_ray_run): the
property they check is the bookkeeping, not a model's text."""
from __future__ import annotations

from pathlib import Path

import nbformat

STAGES = '''
from medaudit import paths
from medaudit.llm import GenParams, ResponseStore, get_backend, mcq, runs
import pandas as pd
options = {"A": "Aspirin", "B": "Heparin", "C": "Warfarin", "D": "Alteplase"}
items = pd.DataFrame({"item_id": ["q1", "q2"], "options": [options, options]})
variants = pd.DataFrame([{"item_id": i, "condition": c, "question": f"{c} patient, question {i}: which drug?"}
                         for i in items["item_id"] for c in infer_conditions])
backend = get_backend(subject["backend"], subject["model"], **subject.get("options", {}))
store = ResponseStore(paths.outputs(profile, "data", "responses.sqlite"))
gen = GenParams(temperature, top_p, max_tokens)
samples = mcq.plan(variants, items, model=subject["name"], backend=backend.kind, model_id=backend.model_id,
                   k=k_samples, seed=seed, gen=gen)
runs.run(backend, store, samples, model=subject["name"]).check()
'''
JUDGES = '''
answers = store.by_keys([s.key for s in samples]).sort_values("key")
quoted = pd.DataFrame({"item_id": answers["item_id"],
                       "condition": answers["condition"] + " k" + answers["sample"].astype(str),
                       "question": "A colleague answered: " + answers["response_text"] + ". Which option is right?"})
judges = mcq.plan(quoted, items, model=subject["name"], backend=backend.kind, model_id=backend.model_id, k=1,
                  seed=seed + 1, gen=gen)
runs.run(backend, store, judges, model=subject["name"]).check()
table = store.by_keys([s.key for s in judges]).sort_values("condition")[["condition", "parsed_answer"]]
table.to_csv(paths.written(profile, "tables") / "tiny_judges.csv", index=False)   # the run's, as save_table
'''


def two_stage_notebook(path: Path) -> Path:
    """Write the notebook at ``path`` (parameters: profile, seed, subject,
    infer_conditions, k_samples, temperature, top_p, max_tokens)."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nseed = 1\nsubject = {}\ninfer_conditions = []\n'
                                       'k_samples = 1\ntemperature = 0.7\ntop_p = 0.9\nmax_tokens = 16\n')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(STAGES), nbformat.v4.new_code_cell(JUDGES)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def plant_default_run(root: Path) -> dict[Path, bytes]:
    """The default run of this notebook as a direct run with the profile's own subject leaves it
    (its table, executed notebook and manifest) in the compendium ``root``: the files and their
    bytes, which a run with another subject must leave as they are."""
    base = root / "outputs" / "smoke"
    files = {base / "tables" / "tiny_judges.csv": b"condition,parsed_answer\nbase k0,C\n",
             base / "notebooks" / "09_tiny.ipynb": b'{"cells": [], "metadata": {}, "nbformat": 4}\n',
             base / "run.json": b'{"run": "default", "profile": "smoke", "notebooks": {"09_tiny": {"status": "ok"}}}\n'}
    for p, b in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b)
    return files
