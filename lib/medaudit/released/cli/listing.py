"""``python -m medaudit.released list``: what params/released.yaml holds, a row per model and part.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from medaudit import paths
from medaudit.released import (folder, model_key, summary_check)


# --------------------------------------------------------------------------
# list: what params/released.yaml holds


def _rows(path: Path) -> int | None:
    """Records of a release file: lines of a JSONL file, items of a JSON list (None: no such file)."""
    if not path.exists():
        return None
    if path.suffix == ".jsonl":
        return sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip())
    data = json.loads(path.read_text(encoding="utf-8"))
    return len(data) if isinstance(data, list) else 1


def listing(study: str | None = None, params_path: str | Path | None = None) -> pd.DataFrame:
    """What ``params/released.yaml`` holds, one row per model and answer
    file: study, model, strategy (``none``: the plain answers; else the
    mitigation arm), file, rows (vignettes or items in the file; –: the
    file is missing) and, where the release has the authors' Summary file,
    ``summary``: whether the answers' own counts equal it
    (:func:`summary_check`), models in :func:`model_key`'s order."""
    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    specs = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
    out = []
    for name, release in specs.items():
        if study not in (None, name):
            continue
        base = folder(name, release)
        key = model_key(name, release)
        arms = [("none", release.get("answers") or {}, release.get("summary"), release.get("models") or {})]
        arms += [(s, a.get("answers") or {}, a.get("summary"), a.get("models") or {})
                 for s, a in (release.get("strategies") or {}).items()]
        rows = []
        for s_no, (strategy, answers, summary, members) in enumerate(arms):
            for model, part in members.items():
                for pattern in answers:
                    path = base / pattern.format(file=part)
                    n = _rows(path)
                    note = ""
                    if summary and n is not None:
                        sp = base / summary.format(file=part)
                        if sp.exists():
                            check = summary_check(path, sp, release)
                            note = (f"equal in all {len(check)} texts" if check["equal"].all() else
                                    f"DIFFERS in {int((~check['equal']).sum())} of {len(check)} texts")
                        else:
                            note = "no Summary file"
                    rows.append({"study": name, "model": str(model), "strategy": strategy, "file": path.name,
                                 "rows": "–" if n is None else n, "summary": note, "_order": (key(str(model)), s_no)})
        out += sorted(rows, key=lambda r: r["_order"])
    return pd.DataFrame(out, columns=["study", "model", "strategy", "file", "rows", "summary", "_order"]).drop(
        columns="_order")
