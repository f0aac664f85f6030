"""A notebook checks the parameters it was given, however it was started.

``make nb`` and ``make all`` go through :mod:`medaudit.runner`, which checks a
profile and every override against the schema (:mod:`medaudit.config`) before
anything runs. A user of plain papermill (``papermill 04_calibration.ipynb
out.ipynb -p k_sampels 3``) bypasses the runner: papermill only warns, among
other log lines, that the notebook has no parameter ``k_sampels``, and runs it
with its defaults. So every notebook's first code cell calls :func:`check`,
which raises one :class:`medaudit.config.ConfigError` listing every problem,
the same checks as the runner's:

* a name the notebook does not declare: the closest declared name (or, for a
  key of another notebook, which notebook-free key it is);
* a value of the wrong type or out of range, or a name a definition file does
  not know (``config.load`` of the run's profile with the given values on top;
  a ``profile`` that is not in params/ only names the output folder, and the
  values are then checked on top of the smoke profile, which the parameters
  cell holds).

Under the runner the check always passes (the values were validated and only
declared names passed); it costs a profile read.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Mapping

from . import checks, config, paths

# what IPython and ipykernel put into a kernel's namespace before any cell runs
_KERNEL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_PLAIN = (str, int, float, bool, type(None), list, dict, tuple)


def declared(notebook: Path) -> list[str]:
    """The names the notebook's cell tagged ``parameters`` assigns, in order
    (top-level assignments, as papermill reads them)."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            names: list[str] = []
            for node in ast.parse(src).body:
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, ast.AnnAssign) else [])
                for t in targets:
                    if isinstance(t, ast.Name) and t.id not in names:
                        names.append(t.id)
            return names
    return []


def notebook_path(name: str) -> Path:
    """``notebooks/<name>.ipynb`` of the compendium (``MEDAUDIT_ROOT`` or the
    working directory's checkout), else of the checkout this package is in."""
    file = f"{name}.ipynb"
    for root in (paths.project_root(), Path(__file__).resolve().parents[2]):
        if (root / "notebooks" / file).is_file():
            return root / "notebooks" / file
    if Path(file).is_file():                       # papermill's default working directory: the notebook's own
        return Path(file).resolve()
    raise FileNotFoundError(f"notebook {file} not found under {paths.project_root() / 'notebooks'}")


def given(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter-like names of a kernel namespace before the notebook's own
    code ran: what the parameters cell and papermill's injected cell assigned."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in _KERNEL_NAMES and isinstance(v, _PLAIN)}


def problems(values: Mapping[str, Any], names: list[str], notebook: str) -> list[str]:
    """Every problem of ``values`` (name -> value) for a notebook declaring ``names``."""
    out = []
    for k in values:
        if k in names:
            continue
        if k in config.KEYS:
            out.append(f"{k} (given to {notebook}): a profile key that {notebook} does not take "
                       f"(its parameters: {', '.join(names)})")
        elif checks.closest_name(k, names):
            out.append(f"{k} (given to {notebook}): unknown parameter{checks.did_you_mean(k, names)}")
        else:             # no suggestion of another notebook's key: it would change nothing here either
            out.append(f"{k} (given to {notebook}): unknown parameter ({notebook} takes: {', '.join(names)})")
    return out


def check(namespace: Mapping[str, Any], notebook: str) -> None:
    """Raise :class:`config.ConfigError` unless every parameter in
    ``namespace`` (``globals()`` in the notebook's first code cell) is one the
    notebook declares, with a value the profile schema accepts."""
    names = declared(notebook_path(notebook))
    values = given(namespace)
    found = problems(values, names, notebook)
    profile = values.get("profile")
    if not isinstance(profile, str):
        found.append(f"profile = {profile!r} (given to {notebook}): the name of a profile in params/")
    else:
        mine = {k: v for k, v in values.items() if k in names and k != "profile"}
        base = profile
        if profile not in config.profiles():
            # papermill's `profile` also names the output folder (outputs/<profile>/); a name that is
            # not in params/ is checked against the smoke profile, whose values the parameters cell holds
            base = "smoke"
            print(f"profile '{profile}' is not in params/ ({', '.join(config.profiles())}): the parameters are "
                  f"checked against params/smoke.yaml's schema and files; outputs go to outputs/{profile}/")
        try:
            config.load(base, mine, {k: f"{notebook}'s parameters" for k in mine})
        except config.ConfigError as e:
            # only this notebook's parameters: the runner checks the rest of a profile
            found += [line for line in e.problems if re.split(r"[.\[ ]", line, maxsplit=1)[0] in names]
        found += [f"{k} = {v!r}: text where a list or mapping may be meant (papermill's -p passes text; "
                  f"give lists and mappings with -y '{k}: {v.strip()}')"
                  for k, v in mine.items() if isinstance(v, str) and v.strip()[:1] in "[{"
                  and any(line.startswith(f"{k} ") for line in found)]
    if found:
        raise config.ConfigError(found, profile if isinstance(profile, str) else None)


__all__ = ["check", "declared", "given", "notebook_path", "problems"]
