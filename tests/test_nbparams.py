"""Every notebook checks its own parameters, so plain papermill behaves as the
runner does: an unknown name is an error naming the closest valid
one, a value the schema refuses is an error naming the key."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medaudit import config, nbparams

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_declared_reads_the_parameters_cell(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x = 1"},
                    {"cell_type": "code", "metadata": {"tags": ["parameters"]},
                     "source": ["profile = 'smoke'\n", "seed: int = 3\n", "k_samples = 2  # K\n", "seed = 4\n"]},
                    {"cell_type": "code", "metadata": {}, "source": "other = 5"}]}
    p = tmp_path / "n.ipynb"
    p.write_text(json.dumps(nb))
    assert nbparams.declared(p) == ["profile", "seed", "k_samples"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_checks_its_parameters_first(nb):
    """The first code cell after the parameters cell calls the check with the
    notebook's own name, before any other code; the declared names are all
    profile keys, and the smoke profile with the notebook's defaults passes."""
    cells = json.loads(nb.read_text())["cells"]
    i = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    first = next(c for c in cells[i + 1:] if c["cell_type"] == "code")
    code = [line for line in "".join(first["source"]).splitlines() if line.strip() and not line.startswith("#")]
    assert code[:2] == ["from medaudit import nbparams", f'nbparams.check(globals(), "{nb.stem}")'
                        + code[1][len(f'nbparams.check(globals(), "{nb.stem}")'):]]
    names = nbparams.declared(nb)
    assert names and set(names) <= set(config.KEYS) | {"profile"}
    ns: dict = {}
    exec("".join(cells[i]["source"]), ns)        # the parameters cell as committed
    nbparams.check({**ns, "In": [], "get_ipython": print}, nb.stem)


def test_unknown_names_and_bad_values_are_reported_together():
    ns = {"profile": "smoke", "seed": 1, "k_sampels": 3, "n_boot": 0, "infer_conditions": "[base, +homo]",
          "unparsed_rule": "incorrect", "calibration_models": None, "In": [], "_": None, "pd": json}
    with pytest.raises(config.ConfigError) as e:
        nbparams.check(ns, "04_calibration")
    text = str(e.value)
    # k_samples is another notebook's parameter, not 04's: no suggestion of it (it would change nothing here)
    assert "k_sampels (given to 04_calibration): unknown parameter (04_calibration takes: profile, seed, " \
           "infer_conditions" in text and "k_samples'" not in text
    assert "n_boot = 0" in text and "infer_conditions = '[base, +homo]'" in text
    assert "give lists and mappings with -y 'infer_conditions: [base, +homo]'" in text
    assert "In" not in e.value.problems[0] and len(e.value.problems) == 4, e.value.problems


def test_a_key_of_another_notebook_is_named_as_such():
    ns = {"profile": "smoke", "seed": 1, "infer_conditions": ["base"], "n_boot": 10, "unparsed_rule": "drop",
          "calibration_models": None, "k_samples": 3}
    with pytest.raises(config.ConfigError, match="k_samples .given to 04_calibration.: a profile key that "
                                                 "04_calibration does not take"):
        nbparams.check(ns, "04_calibration")


def test_a_profile_not_in_params_names_the_output_folder_and_is_checked_as_smoke(capsys):
    """Plain papermill's `profile` also names outputs/<profile>/ (the tests use their own
    names): the values are still checked, on top of the smoke profile."""
    ns = {"profile": "web", "seed": 1, "infer_conditions": ["base"], "n_boot": 10, "unparsed_rule": "drop",
          "calibration_models": None}
    nbparams.check(ns, "04_calibration")
    assert "profile 'web' is not in params/" in capsys.readouterr().out
    with pytest.raises(config.ConfigError, match="unparsed_rule = 'dorp'"):
        nbparams.check({**ns, "unparsed_rule": "dorp"}, "04_calibration")


def test_only_the_notebooks_own_parameters_are_reported(tmp_path, monkeypatch):
    """A compendium without the recorded files (`recorded_runs`, `recorded_answers`): notebook 04
    does not take them, so its check passes; 03, which takes both, is refused for each file."""
    import shutil

    shutil.copytree(ROOT / "params", tmp_path / "params")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "raw").symlink_to(ROOT / "data" / "raw")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    ns = {"profile": "smoke", "seed": 1, "infer_conditions": ["base"], "n_boot": 10, "unparsed_rule": "drop",
          "calibration_models": None}
    nbparams.check(ns, "04_calibration")
    cells = json.loads((ROOT / "notebooks" / "03_inference.ipynb").read_text())["cells"]
    params: dict = {}
    exec("".join(next(c for c in cells if "parameters" in c["metadata"].get("tags", []))["source"]), params)
    with pytest.raises(config.ConfigError) as e:
        nbparams.check(params, "03_inference")
    assert e.value.problems == ["recorded_answers[0] = 'recorded/smoke_03_mcq.jsonl' (from 03_inference's "
                                "parameters): no such file under data/"] + [
        f"recorded_runs[{i}] = '{f}' (from 03_inference's parameters): no such file under data/"
        for i, f in enumerate(params["recorded_runs"])]


def _papermill(nb: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "papermill", nb, str(out), "--no-progress-bar", *args],
                          cwd=ROOT / "notebooks", capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_plain_papermill_with_a_typo_stops_with_the_closest_name(tmp_path):
    """The issue's own example: papermill itself, not the runner."""
    r = _papermill("04_calibration.ipynb", tmp_path / "out.ipynb", "-p", "k_sampels", "3")
    assert r.returncode != 0
    assert "k_sampels (given to 04_calibration): unknown parameter (04_calibration takes: " in r.stderr
    r = _papermill("03_inference.ipynb", tmp_path / "out3.ipynb", "-p", "temprature", "0.7", "-p", "k_samples", "-1")
    assert r.returncode != 0
    assert "temprature (given to 03_inference): unknown parameter; did you mean 'temperature'?" in r.stderr
    assert "k_samples = -1 (from 03_inference's parameters): Input should be greater than or equal to 1" in r.stderr
    # nothing ran past the check: the executed notebook stops in the check's cell
    cells = [c for c in json.loads((tmp_path / "out3.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    failed = [c for c in cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and "nbparams.check" in "".join(failed[0]["source"])
    assert all(c.get("execution_count") is None for c in cells[cells.index(failed[0]) + 1:])
