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
   An override of a parameter the notebook does not take is an error naming
   the ones it takes (``make nb NB=03 ARGS="-p n_items 50"`` would otherwise
   run and change nothing); ``--skip-undeclared`` (``make all``, which passes
   one ARGS to every notebook) passes each notebook only the overrides it
   takes.
3. It executes into a temporary file next to OUTPUT, and the tables and
   figures the notebook saves go to a staging folder
   (``outputs/<P>/.staging/…``, :func:`medaudit.paths.written`). Only when
   the whole notebook succeeded are the staged files moved into
   ``outputs/<P>/tables/`` and ``figures/`` and the notebook renamed to
   OUTPUT. On failure or Ctrl-C the executed notebook, with the error in
   place, is moved to ``outputs/<P>/failed/<notebook name>`` (replacing an
   older one), the staged files are dropped, the previous OUTPUT and its
   tables and figures are left exactly as they were (a failed run
   never removes or overwrites a good output), the failing cell's error is
   printed on stderr with the path of the kept notebook, and the exit status
   is 1 (130 for Ctrl-C). A later success removes the failed copy.
   ``kill`` (SIGTERM) and a closed terminal (SIGHUP) are handled as Ctrl-C
   is: ``run.json`` says "interrupted", the staging folder and the
   temporary notebook are removed, and the exit status is 128 + the signal
   (143, 129). What a SIGKILL leaves (a ``.NN_name.running-<pid>.ipynb``, a
   ``.staging/NN_name-<pid>/``) is removed by the next run of that notebook,
   and :mod:`medaudit.runs` lists a "running" notebook whose process is gone
   as interrupted.
4. Runs are kept apart (:mod:`medaudit.runs`): overrides that change answers
   (``-p subject …``, ``-p k_samples 10``) name a run, and everything of
   steps 1–3 (the notebook, tables, figures, derived data, the failed copy)
   goes to ``outputs/<P>/runs/<run>/`` in place of ``outputs/<P>/``, the
   notebook under OUTPUT's file name; with no such override the profile's own
   folders are used as before. ``--run NAME`` names the run yourself
   (``--run default``: the profile's own folders whatever the overrides).
   ``run.json`` in the run's folder records each notebook's status.
   ``--print-run-folder`` prints the folder these parameters write to and
   exits (the Makefile reads it).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import checks, config, nbparams, paths, progress, runs
from .llm import specs

PATH_KEYS = ("human_labels", "soap_human_labels")
# the kernel's own start-up warnings stay off the console: ipykernel warns that it "is running over TCP
# without encryption", which for a kernel that papermill starts on 127.0.0.1 for this run alone says nothing
# a user can act on. Errors still show; the notebook's own output is not affected.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
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
    p.add_argument("notebook", type=Path, nargs="?", help="the source notebook, e.g. notebooks/03_inference.ipynb")
    p.add_argument("output", type=Path, nargs="?",
                   help="the executed notebook, e.g. outputs/smoke/notebooks/03_inference.ipynb (a named run's "
                        "goes to outputs/<profile>/runs/<run>/notebooks/ under this file name)")
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
    p.add_argument("--no-progress-bar", action="store_true", help="no progress line on the console")
    p.add_argument("--skip-undeclared", action="store_true",
                   help="pass the notebook only the overrides it takes (make all: one ARGS for every notebook); "
                        "without it, an override the notebook does not take is an error")
    p.add_argument("--run", default=None,
                   help="the run's name (default: from the overrides that change answers; 'default': the profile's "
                        "own folders); see python -m medaudit.runs")
    p.add_argument("--print-run-folder", action="store_true",
                   help="print the folder of the run these parameters write to (relative to the root) and exit")
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


def resolve_run(profile: str, items, run: str | None = None) -> tuple[str, dict, list[str]]:
    """The run the -p/-r/-y/-f options ``items`` write to, as this runner names it: (its name,
    the answer-changing parameters that name it, the overrides as given); ``run``: a name given
    with ``--run``, which wins. Every engine that runs a notebook (:mod:`medaudit.engines.batch` and
    through it Ray, Slurm and shards) resolves the run here. Raises
    :class:`medaudit.config.ConfigError` or ValueError (a name that cannot name a run)."""
    overrides, sources = collect_overrides(items)
    changes = runs.changed(profile, overrides)
    name = paths.check_run_name(run) if run else runs.name(changes)
    return name, changes, [sources[k] for k in overrides if k in sources]


def declared_parameters(notebook: Path) -> list[str]:
    """The names the notebook's ``parameters`` cell assigns (:func:`medaudit.nbparams.declared`,
    which the notebook's own check uses too)."""
    return nbparams.declared(notebook)


def prepare(notebook: Path, profile: str, items, skip_undeclared: bool = False) -> dict:
    """Everything before execution: the validated parameters the notebook
    declares. An override of a key the notebook does not declare is an
    error naming the ones it takes (``models``, which the roles name, is
    always accepted), unless ``skip_undeclared``. Raises
    :class:`medaudit.config.ConfigError`."""
    if not notebook.is_file():
        raise config.ConfigError([f"no notebook {notebook}"])
    overrides, sources = collect_overrides(items)
    declared = declared_parameters(notebook)
    if not declared:
        raise config.ConfigError([f"{notebook.name}: no cell tagged 'parameters' (nothing to pass the profile to)"])
    ignored = [k for k in overrides if k not in declared and k not in config.PROFILE_ONLY]
    if ignored and not skip_undeclared:
        # before the profile schema, which knows every notebook's keys: `-p n_itemz 5` to 03 must not be
        # answered "did you mean n_items?", which 03 does not take either
        takes = [k for k in declared if k != "profile"]
        lines = [f"{k} (from {sources.get(k, 'an override')}): {notebook.name} does not take this parameter, so "
                 f"it would change nothing{checks.did_you_mean(k, takes)} ({notebook.name} takes: {', '.join(takes)})"
                 for k in ignored]
        try:                              # and what is wrong with the overrides it does take
            config.load(profile, {k: v for k, v in overrides.items() if k not in ignored}, sources)
        except config.ConfigError as e:
            lines += e.problems
        raise config.ConfigError(lines, profile)
    params = config.load(profile, overrides, sources)
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
    problems = specs.sampling_problems(params, declared)       # what a vendor's models take, before any request
    if problems:
        raise config.ConfigError(problems, profile)
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


def _os_error(e: OSError, what: str) -> str:
    """One line for a file-system error: what could not be done, where, why, and the fix."""
    where = f" {_shown(Path(e.filename))}" if getattr(e, "filename", None) else ""
    why = e.strerror or str(e)
    fix = {13: "make it writable (chmod u+w) or run with another PROFILE",
           30: "the file system is read-only: run from a writable checkout",
           28: "free disk space and rerun"}.get(e.errno or 0, "")
    return f"cannot {what}{where}: {why}" + (f"; {fix}" if fix else "")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the runner is, so that it stops as on
    Ctrl-C (the kernel shut down, the run recorded as interrupted, nothing
    staged left behind)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _stops_as_ctrl_c():
    """While the notebook runs, SIGTERM and SIGHUP raise :class:`Terminated`
    (the default would end the process at once, leaving run.json "running"
    and the staged files behind)."""
    def handler(signum, frame):
        raise Terminated(signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, handler)
        except ValueError:        # not the main thread: signals stay as they were
            pass
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(output: Path, profile: str) -> list[Path]:
    """Remove what a runner of this notebook killed outright (SIGKILL, a
    crash) left: its temporary notebook ``.<stem>.running-<pid>.ipynb`` next
    to ``output`` and its ``.staging/<stem>-<pid>/``, for pids no longer
    alive. Returns what was removed."""
    gone = []
    pattern = re.compile(rf"^\.{re.escape(output.stem)}\.running-(\d+)\.ipynb$")
    for p in output.parent.glob(f".{output.stem}.running-*.ipynb") if output.parent.is_dir() else []:
        m = pattern.match(p.name)
        if m and not _alive(int(m.group(1))):
            p.unlink(missing_ok=True)
            gone.append(p)
    staging = paths.outputs(profile, ".staging", mkdir=False)
    stage_name = re.compile(rf"^{re.escape(output.stem)}-(\d+)$")
    for p in staging.iterdir() if staging.is_dir() else []:
        m = stage_name.match(p.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone


def execute(notebook: Path, output: Path, profile: str, params: dict, cwd: Path | None = None,
            progress_bar: bool = True, run: str = runs.DEFAULT, changes: dict | None = None,
            sources: list[str] | None = None) -> int:
    """Execute; 0 on success, else the failure is reported and kept (see the module doc).
    ``run``: the run whose folders receive the outputs (``changes``, ``sources``: what named
    it, for its manifest; :mod:`medaudit.runs`)."""
    import nbclient.exceptions
    import papermill as pm

    head = f"medaudit.runner: notebook {notebook.name} failed (profile {profile})"
    failed = paths.run_outputs(profile, "failed", output.name, run=run)
    tmp = output.with_name(f".{output.stem}.running-{os.getpid()}.ipynb")
    stage = paths.outputs(profile, ".staging", f"{output.stem}-{os.getpid()}", mkdir=False)
    with contextlib.suppress(OSError):
        remove_leftovers(output, profile)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir(parents=True, exist_ok=True)
        for folder in (output.parent, *(paths.run_outputs(profile, k, run=run) for k in ("tables", "figures"))):
            # a read-only outputs folder fails here, in one line, not after the notebook ran (a file is
            # created and removed: os.access says "writable" to root on a read-only file system)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryFile(dir=folder):
                    pass
            except OSError as e:
                raise OSError(e.errno, e.strerror or str(e), str(folder)) from None
    except OSError as e:
        print(f"{head}: nothing was run\n{_os_error(e, 'write the outputs to')}", file=sys.stderr, flush=True)
        shutil.rmtree(stage, ignore_errors=True)
        return 1
    status = "failed"
    try:
        runs.record(profile, run, output.stem, "running", params=params, changes=changes, sources=sources)
    except OSError as e:
        print(f"{head}: nothing was run\n{_os_error(e, 'write the run manifest in')}", file=sys.stderr, flush=True)
        shutil.rmtree(stage, ignore_errors=True)
        return 1
    saved_env = {k: os.environ.get(k) for k in (paths.STAGE_ENV, progress.PROGRESS_ENV, paths.RUN_ENV)}
    os.environ[paths.STAGE_ENV] = str(stage)          # the kernel inherits it: tables and figures go to the stage
    os.environ[paths.RUN_ENV] = run                   # and its derived data to the run's data/
    stop_line = None
    if progress_bar:
        # one true line in the console: the kernel's stage (requests, agent rounds, judges) with its rate and ETA
        # (medaudit.progress), in place of papermill's cell count, whose ETA knows nothing of a 10-minute cell
        os.environ[progress.PROGRESS_ENV] = str(stage / "progress.txt")
        stop_line = progress.follow(stage / "progress.txt", notebook.stem)
    try:
        with _stops_as_ctrl_c():
            pm.execute_notebook(str(notebook), str(tmp), parameters=params, cwd=str(cwd or notebook.parent),
                                progress_bar=False, request_save_on_cell_execute=True, extra_arguments=KERNEL_ARGS)
            runs.promote(stage, profile, run)
            os.replace(tmp, output)
            status = "ok"
    except (Exception, KeyboardInterrupt) as e:
        if stop_line is not None:
            stop_line()
        if isinstance(e, Terminated):
            what = [f"interrupted ({e.args[0]})"]
        elif isinstance(e, KeyboardInterrupt):
            what = ["interrupted"]
        elif isinstance(e, OSError) and not type(e).__module__.startswith(("papermill", "nbclient")):
            what = [_os_error(e, "write")]
        else:
            what = _error_text(e)
        lines = [head, *what]
        if tmp.exists():
            try:
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.unlink(missing_ok=True)
                shutil.move(str(tmp), str(failed))
                lines.append(f"the executed notebook, with the error in place, is kept at {_shown(failed)}")
            except OSError as e2:
                tmp.unlink(missing_ok=True)
                lines.append(_os_error(e2, "keep the failed notebook in"))
        else:
            lines.append("no executed notebook was written (the kernel did not start?)")
        if output.exists():
            lines.append(f"the previous {_shown(output)} and its tables and figures are kept as they were")
        print("\n".join(lines), file=sys.stderr, flush=True)
        if isinstance(e, KeyboardInterrupt):
            status = "interrupted"
            return 128 + e.signum if isinstance(e, Terminated) else 130
        return 138 if isinstance(e, nbclient.exceptions.DeadKernelError) else 1
    finally:
        if stop_line is not None:
            stop_line()                                   # the line is cleared before any message
        shutil.rmtree(stage, ignore_errors=True)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        with contextlib.suppress(OSError):
            stage.parent.rmdir()                      # .staging/ when no other run is staging
        with contextlib.suppress(OSError):
            runs.record(profile, run, output.stem, status)
    failed.unlink(missing_ok=True)
    if run != runs.DEFAULT:
        print(f"run {run}: {_shown(paths.run_outputs(profile, run=run))}/ (compare: python -m medaudit.runs "
              f"compare default {run} --profile {profile}; its report: python -m medaudit.publish.site {profile} "
              f"--run {run})", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.runner``: check the notebook's parameters
    under the profile and overrides (a bad one: exit 2, nothing run), then execute it into the
    run's folder; ``--print-run-folder`` only prints where the run's outputs go."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")   # as papermill's CLI does
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    if args.print_run_folder:
        try:
            run = resolve_run(args.profile, args.overrides, args.run)[0]
        except (config.ConfigError, ValueError) as e:
            print(f"medaudit.runner: {e}", file=sys.stderr, flush=True)
            return 2
        print(_shown(paths.run_outputs(args.profile, run=run)))
        return 0
    if args.notebook is None or args.output is None:
        _parser().error("the notebook and the output are required")
    try:
        if args.run:
            paths.check_run_name(args.run)
        params = prepare(args.notebook, args.profile, args.overrides, skip_undeclared=args.skip_undeclared)
        run, changes, sources = resolve_run(args.profile, args.overrides, args.run)
    except (config.ConfigError, ValueError) as e:
        print(f"medaudit.runner: {args.notebook.name}: nothing was run.\n{e}", file=sys.stderr, flush=True)
        return 2
    return execute(args.notebook, runs.place(args.output, args.profile, run), args.profile, params, cwd=args.cwd,
                   progress_bar=not args.no_progress_bar, run=run, changes=changes, sources=sources)


if __name__ == "__main__":
    sys.exit(main())
