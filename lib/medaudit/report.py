"""The colophon that ends every executed notebook: where the numbers came from."""
from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pandas as pd

from . import paths

PACKAGES = ("medaudit", "numpy", "pandas", "scipy", "statsmodels", "pingouin", "scikit-learn",
            "matplotlib", "seaborn", "papermill", "nbval", "openai", "transformers",
            "llama_cpp_python", "torch", "vllm")


def git_commit(root: Path | None = None) -> str:
    """HEAD's hash, with ``+dirty`` when tracked files differ; 'unknown' outside git."""
    root = root or paths.project_root()
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions(names=PACKAGES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def colophon(profile: str, started: float, models: dict[str, str] | None = None) -> pd.DataFrame:
    """A two-column table: git commit, profile, Python and package versions,
    model file hashes (``models``: name → sha256 or API model id) and wall time."""
    rows = [("git commit", git_commit()), ("profile", profile),
            ("python", f"{platform.python_implementation()} {sys.version.split()[0]}"),
            ("platform", platform.platform())]
    rows += [(f"package {k}", v) for k, v in package_versions().items()]
    for name, ident in (models or {}).items():
        rows.append((f"model {name}", ident))
    if not models:
        rows.append(("models", "none used by this notebook"))
    rows.append(("wall time (s)", f"{time.time() - started:.1f}"))
    rows.append(("finished (UTC)", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())))
    return pd.DataFrame(rows, columns=["what", "value"]).set_index("what")
