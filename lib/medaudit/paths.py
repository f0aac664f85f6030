"""Where things live: the project root, raw data, and per-profile outputs."""
from __future__ import annotations

import contextlib
import os
import re
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
RUN_ENV = "MEDAUDIT_RUN"
DEFAULT_RUN = "default"
# a run's name is a folder name: letters, digits and . _ + - (no path separator, no leading dot)
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_run_name(name: str) -> str:
    """``name`` if it can name a run folder, else ValueError saying what a name may hold."""
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"run name {name!r}: a run is named by letters, digits and . _ + - (up to 100, "
                         "starting with a letter or digit; no '/' or '..')")
    return name


def run_name() -> str:
    """The run this process writes for: ``MEDAUDIT_RUN`` (set by :mod:`medaudit.runner` for the
    kernel, by ``python -m medaudit.publish.site --run``), else the profile's default run."""
    return check_run_name(os.environ.get(RUN_ENV) or DEFAULT_RUN)


@contextlib.contextmanager
def in_run(name: str):
    """Read and write as run ``name`` (:func:`run_name`) inside the block, as the runner's kernel
    does: what a command line that resolves a run (from its overrides, or ``--run``) wraps its
    library calls in. The previous value is restored after."""
    check_run_name(name)
    old = os.environ.get(RUN_ENV)
    os.environ[RUN_ENV] = name
    try:
        yield name
    finally:
        if old is None:
            os.environ.pop(RUN_ENV, None)
        else:
            os.environ[RUN_ENV] = old


def run_outputs(profile: str, *parts: str, run: str | None = None, mkdir: bool = False) -> Path:
    """A path in one run's outputs (a rerun with changed answers keeps the last run's):
    the default run's are ``outputs/<profile>/`` itself (as before runs were kept apart), a named
    run's ``outputs/<profile>/runs/<run>/`` (:mod:`medaudit.runs`). ``run``: by default
    :func:`run_name`. The notebooks, tables, figures, derived data (``data/*.jsonl``), failed
    notebooks and report of a run live there; the response store stays the profile's
    (``outputs/<profile>/data/responses.sqlite``, keyed by model and every setting)."""
    name = check_run_name(run if run is not None else run_name())
    base = outputs(profile, mkdir=False) if name == DEFAULT_RUN else outputs(profile, "runs", name, mkdir=False)
    p = base.joinpath(*parts)
    if mkdir:
        (p if not p.suffix else p.parent).mkdir(parents=True, exist_ok=True)
    return p


def run_input(profile: str, *parts: str) -> Path:
    """A file a notebook reads (a derived table under ``data/``): the run's own if it wrote one,
    else the default run's; while the runner runs a notebook, what it wrote so far (its staging
    folder) before either. A named run reruns some notebooks with changed parameters and reads
    what the others wrote under the profile's own parameters (e.g. 03 with another subject reads
    01's items and 02's variants)."""
    stage = os.environ.get(STAGE_ENV)
    if stage and Path(stage).joinpath(*parts).exists():      # written earlier in this run, not yet promoted
        return Path(stage).joinpath(*parts)
    own = run_outputs(profile, *parts)
    return own if own.exists() or run_name() == DEFAULT_RUN else outputs(profile, *parts, mkdir=False)


def written(profile: str, kind: str) -> Path:
    """The folder a notebook writes its ``kind`` ("data", "tables", "figures") into,
    created: ``outputs/<profile>/<kind>/`` (a named run's: :func:`run_outputs`), or, while :mod:`medaudit.runner`
    runs the notebook, that run's staging folder (``MEDAUDIT_STAGE``), whose
    files the runner moves into ``outputs/<profile>/<kind>/`` only when the
    whole notebook succeeded, so that a failed run leaves the last good
    tables and figures as they were."""
    stage = os.environ.get(STAGE_ENV)
    folder = Path(stage) / kind if stage else run_outputs(profile, kind)
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
