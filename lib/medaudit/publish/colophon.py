"""The colophon that ends every executed notebook: where the numbers came from."""
from __future__ import annotations

import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pandas as pd

from medaudit import paths

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
    """The installed version of each package of ``names`` (those not installed left
    out)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def measured_model_ident(ident: str) -> str:
    """``ident`` (a model's identity as a notebook records it, e.g.
    "llamacpp: <sha256>") with every sha256 pinned in params/models.yaml
    checked against the file it pins, measured now
    (:func:`medaudit.llm.models.file_sha256`, cached while the file is
    unchanged): a pinned hash is kept only where the file hashes to it,
    otherwise replaced by the measured hash and flagged. Identities that
    name no pinned hash (API model ids, measured hashes of ``path=`` files)
    are returned as they are."""
    ident = str(ident)
    try:
        from medaudit.llm import models as _models
        reg = _models.registry()
    except Exception:                                  # no (readable) params/models.yaml here
        return ident
    for name, s in (reg or {}).items():
        want = s.get("sha256") if isinstance(s, dict) else None
        if not want or want not in ident:
            continue
        try:
            got = _models.file_sha256(_models.model_file(name))
        except (OSError, ValueError, RuntimeError) as e:
            ident += f" (NOT MEASURED: the file of '{name}' cannot be read: {e})"
            continue
        if got != want:
            ident = ident.replace(want, got) + f" (MEASURED; params/models.yaml pins {want} for '{name}')"
    return ident


def table(profile: str, started: float, models: dict[str, str] | None = None) -> pd.DataFrame:
    """A two-column table: git commit, profile, Python and package versions,
    model identities (``models``: name → measured sha256 or API model id;
    a registry's pinned hash is re-measured, see :func:`measured_model_ident`,
    so the colophon records what was measured, not what was expected) and
    wall time."""
    rows = [("git commit", git_commit()), ("profile", profile),
            ("python", f"{platform.python_implementation()} {sys.version.split()[0]}"),
            ("platform", platform.platform())]
    rows += [(f"package {k}", v) for k, v in package_versions().items()]
    for name, ident in (models or {}).items():
        rows.append((f"model {name}", measured_model_ident(ident)))
    if not models:
        rows.append(("models", "none used by this notebook"))
    rows.append(("wall time (s)", f"{time.time() - started:.1f}"))
    rows.append(("finished (UTC)", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())))
    return pd.DataFrame(rows, columns=["what", "value"]).set_index("what")
