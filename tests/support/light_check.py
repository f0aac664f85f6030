"""CI check of the light install (``make light-check``, run by ``make test``).

Run with the python of a venv that has only ``pip install -e '.[dev]'``
(no torch, no transformers, no llama-cpp-python). In a compendium of its own
(params copied, raw data linked, outputs empty) it executes notebooks 07 and
08 of the smoke profile with ``model_stages: []`` and the report, while an
import hook (a ``.pth`` file of this venv, active when
``MEDAUDIT_IMPORT_LOG`` is set) records every attempt to import torch,
transformers or llama_cpp, in the kernels too. Exit 0 only when both
notebooks and the report succeed, nothing of those was asked for, and
notebook 07 says it skipped the embedder's table.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WATCHED = ("torch", "transformers", "llama_cpp")
GUARD = "medaudit_import_guard"

HOOK = f'''"""Records imports of {WATCHED} to $MEDAUDIT_IMPORT_LOG (tests/support/light_check.py)."""
import os
import sys
import traceback


class _Guard:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {WATCHED!r}:
            with open(os.environ["MEDAUDIT_IMPORT_LOG"], "a") as fh:
                fh.write(name + "\\n" + "".join(traceback.format_stack(limit=8)) + "\\n")
        return None


if os.environ.get("MEDAUDIT_IMPORT_LOG"):
    sys.meta_path.insert(0, _Guard())
'''


def main() -> int:
    present = []
    for dist in ("torch", "transformers", "llama-cpp-python"):
        try:
            metadata.version(dist)
            present.append(dist)
        except metadata.PackageNotFoundError:
            pass
    if present:
        print(f"light_check: {sys.prefix} is not a light venv: {', '.join(present)} installed", file=sys.stderr)
        return 1
    site = Path(sysconfig.get_paths()["purelib"])
    (site / f"{GUARD}.py").write_text(HOOK, encoding="utf-8")
    (site / f"{GUARD}.pth").write_text(f"import {GUARD}\n", encoding="utf-8")

    sys.path.insert(0, str(HERE))
    from sandbox import compendium_root

    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        log = Path(tmp) / "imports.log"
        env = {**os.environ, **compendium_root(root), "MEDAUDIT_IMPORT_LOG": str(log),
               "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        steps = [[sys.executable, "-m", "medaudit.runner", str(ROOT / "notebooks" / f"{nb}.ipynb"),
                  str(root / "outputs" / "smoke" / "notebooks" / f"{nb}.ipynb"), "--profile", "smoke",
                  "-p", "model_stages", "[]", "--no-progress-bar"]
                 for nb in ("07_cultural_flips", "08_fairness_disparities")]
        steps.append([sys.executable, "-m", "medaudit.publish.site", "smoke", "--no-notebooks"])
        for cmd in steps:
            r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
            if r.returncode:
                print(f"light_check: {' '.join(cmd[2:4])} failed (rc {r.returncode}):\n{r.stderr[-4000:]}",
                      file=sys.stderr)
                return 1
        if log.exists() and log.read_text().strip():
            print(f"light_check: imports of {', '.join(WATCHED)} were attempted:\n{log.read_text()[:4000]}",
                  file=sys.stderr)
            return 1
        nb07 = json.loads((root / "outputs" / "smoke" / "notebooks" / "07_cultural_flips.ipynb").read_text())
        said = "".join("".join(o.get("text", "")) for c in nb07["cells"] for o in c.get("outputs", []))
        if "diversity table skipped" not in said:
            print("light_check: notebook 07 did not say it skipped the diversity table", file=sys.stderr)
            return 1
        tables = root / "outputs" / "smoke" / "tables"
        for name in ("07_table2_accuracy", "07_table5_harmful_flips", "08_table3_pairs"):
            if not (tables / f"{name}.csv").exists():
                print(f"light_check: {name}.csv was not written", file=sys.stderr)
                return 1
        if not (root / "outputs" / "smoke" / "report" / "published.html").exists():
            print("light_check: the report was not written", file=sys.stderr)
            return 1
    print(f"light_check: 07 and 08 (model_stages []) and the report ran without {', '.join(WATCHED)} "
          f"in {time.time() - t0:.0f} s ({sys.prefix})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
