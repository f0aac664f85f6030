"""The notebooks' own contracts: nbval re-executes them with the values in
their `parameters` cell, so those values must be the smoke profile's; every
notebook ends with the colophon; notebooks stay thin (no library code)."""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SMOKE = yaml.safe_load((ROOT / "params" / "smoke.yaml").read_text())


def _cells(nb_path):
    return nbformat.read(nb_path, as_version=4).cells


def _parameters(nb_path) -> dict:
    cells = [c for c in _cells(nb_path) if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{nb_path.name}: exactly one cell tagged 'parameters'"
    tree = ast.parse(cells[0].source)
    return {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets}


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS][:3] == ["01", "02", "03"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_is_the_smoke_profile(nb):
    params = _parameters(nb)
    assert params["profile"] == "smoke"
    for name, value in params.items():
        assert name in SMOKE, f"{nb.name}: parameter '{name}' is missing from params/smoke.yaml"
        assert SMOKE[name] == value, f"{nb.name}: '{name}' = {value!r} but smoke.yaml has {SMOKE[name]!r}"


@pytest.mark.parametrize("profile", ["default", "paper"])
def test_every_profile_sets_every_notebook_parameter(profile):
    prof = yaml.safe_load((ROOT / "params" / f"{profile}.yaml").read_text())
    wanted = set().union(*(_parameters(nb) for nb in NOTEBOOKS))
    assert wanted - set(prof) == set(), f"params/{profile}.yaml lacks {sorted(wanted - set(prof))}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_ends_with_colophon_and_stays_thin(nb):
    cells = _cells(nb)
    code = [c for c in cells if c.cell_type == "code"]
    assert "colophon.table(" in code[-1].source
    assert "NBVAL_IGNORE_OUTPUT" in code[-1].source
    for c in code:
        assert "\ndef " not in "\n" + c.source, f"{nb.name}: define functions in lib/, not in notebooks"
        # logic stays under 25 lines a cell; the parameters cell is one declaration a line (its
        # names and values checked by nbparams), so it may be as long as the notebook's parameters
        limit = 40 if "parameters" in c.metadata.get("tags", []) else 25
        assert c.source.count("\n") < limit, f"{nb.name}: a cell of {c.source.count(chr(10)) + 1} lines"
        # and does not grow wide instead: no line over 120 characters (ruff's line length)
        wide = [ln for ln in c.source.splitlines() if len(ln) > 120]
        assert not wide, f"{nb.name}: a cell line of {len(wide[0])} characters (at most 120): {wide[0][:60]}…"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_reference_outputs_are_committed(nb):
    """nbval needs stored outputs: a notebook saved without them checks nothing."""
    code = [c for c in _cells(nb) if c.cell_type == "code"]
    checked = [c for c in code
               if "NBVAL_IGNORE_OUTPUT" not in c.source and "parameters" not in c.metadata.get("tags", [])]
    assert checked, f"{nb.name}: no cell is regression-checked"
    assert all(c.get("outputs") for c in checked), f"{nb.name}: a checked cell has no stored output"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_what_this_run_shows_prints_no_missing_number(nb):
    """The reference notebooks' "What this run shows" (the findings cell's
    output) says a missing number in words: no "nan" or "n/a" inside a
    sentence (07 printed "nan Δflip", 08 "With n/a vignettes", 05 "band … n/a
    to n/a points" on the default profile; medaudit.report.findings.unreadable)."""
    from medaudit.report import findings

    cells = [c for c in _cells(nb) if c.get("id") == "findings-code"]
    assert len(cells) == 1, f"{nb.name}: one findings cell"
    text = "\n".join("".join(o.get("data", {}).get("text/markdown", "")) for o in cells[0].get("outputs", []))
    assert text.strip(), f"{nb.name}: the findings cell shows nothing"
    assert findings.unreadable(text) == [], f"{nb.name}: {findings.unreadable(text)[:2]}"
