"""Where things live: the project root, raw data, and per-profile outputs."""
from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The compendium's root folder.

    ``MEDAUDIT_ROOT`` wins; otherwise the nearest folder at or above the
    working directory that holds both ``params/`` and ``data/raw/`` (notebooks
    run with their own folder as working directory under nbval); otherwise
    the checkout this package was installed from in editable mode.
    """
    env = os.environ.get("MEDAUDIT_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for cand in (here, *here.parents):
        if (cand / "params").is_dir() and (cand / "data" / "raw").is_dir():
            return cand
    pkg_root = Path(__file__).resolve().parents[2]
    if (pkg_root / "params").is_dir():
        return pkg_root
    raise FileNotFoundError(
        "cannot find the compendium root (a folder with params/ and data/raw/); "
        "run from inside the checkout or set MEDAUDIT_ROOT"
    )


def raw(*parts: str) -> Path:
    """A path under ``data/raw/`` (shipped, never written by code)."""
    return project_root().joinpath("data", "raw", *parts)


def data(*parts: str) -> Path:
    """A path under ``data/`` (shipped: raw data, recorded answers)."""
    return project_root().joinpath("data", *parts)


def outputs(profile: str, *parts: str, mkdir: bool = True) -> Path:
    """A path under ``outputs/<profile>/``; its parent folder is created."""
    p = project_root().joinpath("outputs", profile, *parts)
    if mkdir:
        (p if not p.suffix else p.parent).mkdir(parents=True, exist_ok=True)
    return p


STAGE_ENV = "MEDAUDIT_STAGE"


def written(profile: str, kind: str) -> Path:
    """The folder a notebook writes its ``kind`` ("tables", "figures") into,
    created: ``outputs/<profile>/<kind>/``, or, while :mod:`medaudit.runner`
    runs the notebook, that run's staging folder (``MEDAUDIT_STAGE``), whose
    files the runner moves into ``outputs/<profile>/<kind>/`` only when the
    whole notebook succeeded, so that a failed run leaves the last good
    tables and figures as they were."""
    stage = os.environ.get(STAGE_ENV)
    folder = Path(stage) / kind if stage else outputs(profile, kind, mkdir=False)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def params(name: str) -> Path:
    """A file under ``params/`` (profiles, conditions, keyword lists)."""
    p = project_root().joinpath("params", name)
    if not p.exists():
        raise FileNotFoundError(f"no params file {p}")
    return p


def profiles() -> list[str]:
    """The profiles in params/: the YAML files with a top-level ``profile`` key."""
    import yaml

    out = []
    for p in sorted(project_root().joinpath("params").glob("*.yaml")):
        try:
            raw = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        if isinstance(raw, dict) and "profile" in raw:
            out.append(p.stem)
    return out
