"""Run one notebook under a profile: validate, execute, keep what failed.

    python -m medaudit.runner NOTEBOOK OUTPUT --profile P \
        [-p name value]... [-y yaml]... [-f file]... [-r name value]...

1. The parameters are ``params/<P>.yaml`` (with ``profile: P``) and the
   overrides on top, applied in the order given: ``-p name value`` (the value
   read as papermill reads it: True/False/None, an int, a float, else a string;
   a value that starts with ``[`` or ``{`` is read as YAML, e.g.
   ``-p infer_conditions '[base, +homo]'``), ``-r name value`` (a raw string),
   ``-y 'YAML mapping'`` and ``-f file.yaml``. They are validated against
   :mod:`medaudit.config` before anything executes or loads; invalid
   parameters exit with status 2 and one message listing every problem.
   A model role may name an entry of the profile's ``models`` (``-p judge
   embedded``); an override of ``models`` (``-y '{models: {embedded: {...}}}'``)
   redefines the entries it gives, keeping the others, and so switches every
   role that names them.
2. The notebook receives only the parameters its ``parameters`` cell declares
   (so papermill warns about none), model names resolved to their specs;
   ``models`` itself is a profile key that no notebook receives. The schema
   has checked the rest.
3. It executes into a temporary file next to OUTPUT, renamed to OUTPUT only on
   success. On failure the executed notebook, with the error in place, is
   moved to ``outputs/<P>/failed/<notebook name>`` (replacing an older one),
   an older OUTPUT is removed (its tables may have been overwritten by the
   failed run), the failing cell's error is printed on stderr with the path
   of the kept notebook, and the exit status is 1. A later success removes
   the failed copy.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import config, nbparams, paths

PATH_KEYS = ("human_labels", "soap_human_labels")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# ==========================================================================
# command line


class Ordered(argparse.Action):
    """Collect -p/-r/-y/-f in one list, in the order they were given."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest) or [])
        items.append((option_string, values if isinstance(values, list) else [values]))
        setattr(namespace, self.dest, items)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m medaudit.runner",
        description="Validate a profile and its overrides, then execute one notebook with papermill.")
    p.add_argument("notebook", type=Path, help="the source notebook, e.g. notebooks/03_inference.ipynb")
    p.add_argument("output", type=Path, help="the executed notebook, e.g. outputs/smoke/notebooks/03_inference.ipynb")
    p.add_argument("--profile", required=True, help="a profile in params/ (smoke, default, paper)")
    p.add_argument("-p", "--parameters", dest="overrides", nargs=2, action=Ordered, metavar=("NAME", "VALUE"),
                   help="override one parameter (True/False/None, numbers, YAML lists and mappings, else a string)")
    p.add_argument("-r", "--parameters_raw", dest="overrides", nargs=2, action=Ordered, metavar=("NAME", "VALUE"),
                   help="override one parameter with a raw string")
    p.add_argument("-y", "--parameters_yaml", dest="overrides", action=Ordered, metavar="YAML",
                   help="override parameters with a YAML mapping")
    p.add_argument("-f", "--parameters_file", dest="overrides", action=Ordered, metavar="FILE",
                   help="override parameters with a YAML file")
    p.add_argument("--cwd", type=Path, default=None, help="the kernel's working folder (default: the notebook's)")
    p.add_argument("--log-level", default="WARNING", help="papermill's log level (default WARNING)")
    p.add_argument("--no-progress-bar", action="store_true", help="no papermill progress bar")
    return p


def _resolve_type(value: str, what: str = "-p") -> Any:
    """A ``-p`` value as papermill's CLI reads it (True, False, None, an
    int, a float, else the string), plus YAML lists and mappings."""
    out: Any = value
    if value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[value]
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if isinstance(out, str) and out.lstrip()[:1] in ("[", "{"):
        parsed = config.read_yaml(out, what)
        if isinstance(parsed, (list, dict)):
            return parsed
    return out


def _quote(s: str, limit: int = 60) -> str:
    s = " ".join(str(s).split())
    return repr(s if len(s) <= limit else s[: limit - 3] + "...")


def _set(values: dict, sources: dict, key: str, value: Any, what: str) -> None:
    """One override; ``models`` is merged entry by entry (a later entry of
    the same name wins), and each entry's source is kept as ``models.<name>``."""
    if key == "models":
        if not isinstance(value, dict):   # replaced whole (the schema reports a non-mapping)
            for k in [k for k in sources if k.startswith("models.")]:
                del sources[k]
        else:
            sources.update({f"models.{name}": what for name in value})
            if isinstance(values.get("models"), dict):
                value = {**values["models"], **value}
    values[key], sources[key] = value, what


def collect_overrides(items: list[tuple[str, list[str]]]) -> tuple[dict, dict]:
    """(overrides, sources) from the ordered -p/-r/-y/-f options; a later
    option wins over an earlier one for the same key (for ``models``, for
    the same entry)."""
    values, sources, problems = {}, {}, []
    for opt, args in items or []:
        if opt in ("-p", "--parameters"):
            name, raw = args
            _set(values, sources, name, _resolve_type(raw, f"-p {name} {raw}"), f"-p {name} {raw}")
        elif opt in ("-r", "--parameters_raw"):
            name, raw = args
            _set(values, sources, name, raw, f"-r {name} {raw}")
        else:
            if opt in ("-y", "--parameters_yaml"):
                what = f"-y {_quote(args[0])}"
                mapping = config.read_yaml(args[0], what)
            else:
                what = f"-f {args[0]}"
                try:
                    text = Path(args[0]).read_text(encoding="utf-8")
                except OSError as e:
                    problems.append(f"{what}: cannot read the file ({e.strerror})")
                    continue
                mapping = config.read_yaml(text, what)
            if mapping is None:
                continue
            if not isinstance(mapping, dict):
                problems.append(f"{what}: must be a YAML mapping of name: value, not {type(mapping).__name__}")
                continue
            # a role written as an alias (*name) of an entry of the mapping's own `models` names it
            for k, v in config.aliases_to_names(mapping).items():
                _set(values, sources, k, v, what)
    if problems:
        raise config.ConfigError(problems)
    # a relative label file named from the shell's folder: the notebooks run in notebooks/
    for key in PATH_KEYS:
        v = values.get(key)
        if isinstance(v, str) and not Path(v).expanduser().is_absolute() and Path(v).exists():
            values[key] = str(Path(v).resolve())
    return values, sources


def declared_parameters(notebook: Path) -> list[str]:
    """The names the notebook's ``parameters`` cell assigns (:func:`medaudit.nbparams.declared`,
    which the notebook's own check uses too)."""
    return nbparams.declared(notebook)


def prepare(notebook: Path, profile: str, items) -> dict:
    """Everything before execution: the validated parameters the notebook
    declares. Raises :class:`medaudit.config.ConfigError`."""
    if not notebook.is_file():
        raise config.ConfigError([f"no notebook {notebook}"])
    overrides, sources = collect_overrides(items)
    params = config.load(profile, overrides, sources)
    declared = declared_parameters(notebook)
    if not declared:
        raise config.ConfigError([f"{notebook.name}: no cell tagged 'parameters' (nothing to pass the profile to)"])
    profile_only = [k for k in declared if k in config.PROFILE_ONLY]
    if profile_only:
        raise config.ConfigError([f"{notebook.name}: its parameters cell declares {profile_only}: a profile key that "
                                  "no notebook receives (`models` defines the models the roles name; the notebook "
                                  "gets each role's spec)"], profile)
    unknown = [k for k in declared if k not in config.KEYS]
    if unknown:
        raise config.ConfigError([f"{notebook.name}: its parameters cell declares {unknown}, which the profile "
                                  "schema does not know: add them to lib/medaudit/config.py (Profile) and to "
                                  "every profile in params/"], profile)
    return {k: params[k] for k in declared}


# ==========================================================================
# execution


def _shown(p: Path) -> str:
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def _error_text(e: BaseException, tail: int = 15) -> list[str]:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(e, PapermillExecutionError):
        lines = [f"{e.ename}: {e.evalue}"]
        tb = "\n".join(_ANSI.sub("", t) for t in (e.traceback or [])).splitlines()
        tb = [t for t in tb if t.strip()]
        if tb:
            lines += ["last lines of the traceback:", *tb[-tail:]]
        return [f"failed in cell In [{e.exec_count}]:", *lines]
    return [f"{type(e).__name__}: {e}"]


def execute(notebook: Path, output: Path, profile: str, params: dict, cwd: Path | None = None,
            progress_bar: bool = True) -> int:
    """Execute; 0 on success, else the failure is reported and kept (see the module doc)."""
    import nbclient.exceptions
    import papermill as pm

    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.running-{os.getpid()}.ipynb")
    failed = paths.outputs(profile, "failed", output.name, mkdir=False)
    try:
        pm.execute_notebook(str(notebook), str(tmp), parameters=params, cwd=str(cwd or notebook.parent),
                            progress_bar=progress_bar, request_save_on_cell_execute=True)
    except (Exception, KeyboardInterrupt) as e:
        what = ["interrupted"] if isinstance(e, KeyboardInterrupt) else _error_text(e)
        lines = [f"medaudit.runner: notebook {notebook.name} failed (profile {profile})", *what]
        if tmp.exists():
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.unlink(missing_ok=True)
            shutil.move(str(tmp), str(failed))
            lines.append(f"the executed notebook, with the error in place, is kept at {_shown(failed)}")
        else:
            lines.append("no executed notebook was written (the kernel did not start?)")
        if output.exists():
            output.unlink()
            lines.append(f"removed the previous {_shown(output)}: this run may have overwritten its tables")
        print("\n".join(lines), file=sys.stderr, flush=True)
        if isinstance(e, KeyboardInterrupt):
            return 130
        return 138 if isinstance(e, nbclient.exceptions.DeadKernelError) else 1
    os.replace(tmp, output)
    failed.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")   # as papermill's CLI does
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    try:
        params = prepare(args.notebook, args.profile, args.overrides)
    except config.ConfigError as e:
        print(f"medaudit.runner: {args.notebook.name}: nothing was run.\n{e}", file=sys.stderr, flush=True)
        return 2
    return execute(args.notebook, args.output, args.profile, params, cwd=args.cwd,
                   progress_bar=not args.no_progress_bar)


if __name__ == "__main__":
    sys.exit(main())
