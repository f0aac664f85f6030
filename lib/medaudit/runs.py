"""Runs kept apart: a rerun with changed answers writes to its own folder, and two runs compared.

A *run* is the set of outputs one set of parameters gives (so that rerunning with a new model never
overwrites the last model's results). Its name comes from the parameters, so the same
overrides always land in the same run and different ones never share a folder:

- no override, or only overrides that change no answer: the profile's **default** run, in
  ``outputs/<profile>/`` exactly as before runs were kept apart (``make all``, the report, nbval
  and every tool that reads ``outputs/<profile>/tables`` see no change);
- otherwise a **named** run, ``outputs/<profile>/runs/<name>/`` with its own ``notebooks/``,
  ``tables/``, ``figures/``, ``data/`` (derived tables), ``failed/`` and ``report/``. The name is
  each changed parameter with a readable value, then a digest of every changed value:
  ``-p subject smollm2-135m`` → ``subject-smollm2-135m.1f0c2a`` (:func:`name`).

What changes answers (:func:`changed`): a parameter whose *resolved* value (model names turned
into their specs, ``models`` overrides applied to every role that names them) differs from the
profile's. An override equal to the profile's value is no change. Two things are left out because
they change no number: the runtime options of a model spec (:data:`RUNTIME_OPTIONS`: threads,
concurrency, keys, time-outs; the weights and the decoding that answer are the same) and
:data:`NOT_ANSWERS` (``recorded_runs``: recorded answers of the same model to exactly the same
requests, replayed or asked again). Everything else (the model, its decoding and context, the
subject, sample sizes, conditions, prompts, statistics settings such as ``n_boot``) names a run.

Each run folder holds ``run.json`` (:func:`record`): the profile, the changed parameters, the
overrides as given, and per notebook its status (running, ok, failed, interrupted), start and end
(UTC), git commit and the models of its roles. The response store stays the profile's
(``outputs/<profile>/data/responses.sqlite``): its keys hold the model and every setting, so runs
share what they have in common and never mix answers.

A named run reads what it did not write itself from the default run
(:func:`medaudit.paths.run_input`): 03 rerun with another subject reads 01's items and 02's
variants; 02 rerun in the same run writes its own variants, which 03 of that run then reads.

    python -m medaudit.runs list [--profile P]
    python -m medaudit.runs compare RUN_A RUN_B --profile P [--table NAME] [--width N]
                                    [--format text|csv|html] [--output FILE]

``compare`` prints each table the two runs share (or the one named) side by side: the rows
matched on their label columns, for each number the value in A, in B and B − A, and each run's N
(:func:`medaudit.report.exhibits.n_text`). A table that only one run has is named as such. The text fits
the terminal (``--width``, default its width; piped, no limit): a table too wide is printed long, one line
per row and column (A, B, B − A), its cells wrapped between words. ``--format csv`` or ``html``
writes every table whole (CSV with a ``table`` column; HTML a page) to ``--output``, by default
``outputs/<profile>/compare/<A>_vs_<B>[_<table>].csv|html``, and prints where.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import difflib
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from medaudit import atomic, paths
from medaudit.publish import colophon
from medaudit.report import exhibits

DEFAULT = paths.DEFAULT_RUN
MANIFEST = "run.json"
# options of a model spec that change how fast or from where, not what answers
RUNTIME_OPTIONS = frozenset({"n_threads", "threads", "concurrency", "api_key_env", "timeout", "max_retries",
                             "retries", "n_batch", "batch_size", "chunk_size"})
# parameters that change no answer (module doc)
NOT_ANSWERS = frozenset({"recorded_runs"})
_READABLE = 60          # characters of the readable part of a name, before the digest
_NUMBER = re.compile(r"^\s*([-+−]?\d+(?:\.\d+)?)")


class RunError(ValueError):
    """An unknown run or table, or a name that cannot name a run."""


# ==========================================================================
# naming


def _is_spec(v: Any) -> bool:
    return isinstance(v, dict) and "backend" in v and "model" in v


def answers(value: Any) -> Any:
    """``value`` with what changes no answer left out: the runtime options of every model spec."""
    if _is_spec(value):
        opts = {k: answers(v) for k, v in (value.get("options") or {}).items() if k not in RUNTIME_OPTIONS}
        return {**{k: answers(v) for k, v in value.items() if k != "options"}, "options": opts}
    if isinstance(value, dict):
        return {k: answers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [answers(v) for v in value]
    return value


_LOADED: dict = {}


def _profile_values(profile: str) -> dict:
    """``config.load(profile)``, once per state of ``params/`` in this process (a load reads
    every file of params/: about a second on 2 busy cores)."""
    from . import config  # lazily: `list` and `compare` need no profile
    files = sorted(paths.project_root().joinpath("params").glob("*.yaml"))
    key = (profile, tuple((str(f), f.stat().st_mtime_ns) for f in files))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = config.load(profile)
    return _LOADED[key]


def changed(profile: str, overrides: dict | None) -> dict:
    """The notebook parameters whose resolved value under ``overrides`` differs from the
    profile's in a way that can change an answer (module doc), each with its new value; {} for
    the default run. Raises :class:`medaudit.config.ConfigError` on invalid parameters."""
    from . import config

    if not overrides:
        return {}
    base, new = _profile_values(profile), config.load(profile, overrides)
    return {k: new[k] for k in sorted(new)
            if k != "profile" and k not in NOT_ANSWERS and answers(new[k]) != answers(base.get(k))}


def _label(v: Any) -> str:
    if _is_spec(v):
        return str(v.get("name") or v.get("model"))
    if isinstance(v, (list, tuple)):
        return "+".join(_label(x) for x in v) or "none"
    if isinstance(v, dict):
        return "custom"
    if v is None or isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _clean(s: str) -> str:
    s = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._+-]", "-", s))
    return s.lstrip("._+-")


def name(changes: dict) -> str:
    """The run's name from :func:`changed`: ``default`` for none, else ``key-value`` per changed
    parameter (a model by its name, a list joined by ``+``; several model roles changed at once,
    as a redefined ``models`` entry does, as one ``models-<name>``; only the keys when that would
    be longer than 60 characters), a dot, and the first 6 hex digits of the sha256 of every changed
    value, so that two runs with different answers never share a name."""
    if not changes:
        return DEFAULT
    digest = hashlib.sha256(json.dumps(answers(changes), sort_keys=True, default=str).encode()).hexdigest()[:6]
    roles = [k for k, v in changes.items() if _is_spec(v) or (isinstance(v, list) and v and all(map(_is_spec, v)))]
    parts = [f"{k}-{_label(v)}" for k, v in changes.items() if k not in roles or len(roles) == 1]
    if len(roles) > 1:        # one model redefined for several roles (-y '{models: {embedded: ...}}')
        parts.insert(0, "models-" + "+".join(dict.fromkeys(_label(changes[k]) for k in roles)))
    readable = _clean("_".join(parts))
    if len(readable) > _READABLE:
        readable = _clean("_".join(changes))[:_READABLE]
    return paths.check_run_name(f"{readable.rstrip('._+-') or 'run'}.{digest}")


def place(output: Path, profile: str, run: str) -> Path:
    """Where a run's executed notebook goes: OUTPUT as given for the default run, else the named
    run's ``notebooks/`` folder under OUTPUT's file name."""
    return output if run == DEFAULT else paths.run_outputs(profile, "notebooks", output.name, run=run)


# ==========================================================================
# the manifest


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


@contextlib.contextmanager
def _locked(path: Path):
    """The manifest's lock file, held while it is read and rewritten (notebooks of one run may
    finish at the same time under make -j)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def manifest_path(profile: str, run: str) -> Path:
    """The run's record (``run.json``) in its folder of ``profile``'s outputs."""
    return paths.run_outputs(profile, MANIFEST, run=run)


def read_manifest(profile: str, run: str) -> dict:
    """The run's ``run.json`` ({} when none was written)."""
    p = manifest_path(profile, run)
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RunError(f"{p}: not a readable run manifest ({e})") from None


def _models(params: dict) -> dict:
    out = {}
    for k, v in params.items():
        if _is_spec(v):
            out[k] = str(v.get("name") or v.get("model"))
        elif isinstance(v, list) and v and all(_is_spec(x) for x in v):
            out[k] = [str(x.get("name") or x.get("model")) for x in v]
    return out


def record(profile: str, run: str, notebook: str, status: str, *, params: dict | None = None,
           changes: dict | None = None, sources: list[str] | None = None, engine: str | None = None) -> Path:
    """Write the run's manifest with ``notebook``'s ``status`` ("running" at the start, then "ok",
    "failed" or "interrupted"), its overrides and models. The run's ``changed`` and ``overrides``
    are those of all its notebooks together (a notebook added with ``--run NAME`` and no override
    of its own adds none). ``engine``: what answers the notebook's requests when it is not the
    runner itself (``ray``, ``slurm``, ``batch``, ``shard``), kept with the notebook's entry.
    Atomic, under a lock."""
    p = manifest_path(profile, run)
    with _locked(p):
        m = read_manifest(profile, run) or {"run": run, "profile": profile, "notebooks": {}}
        m["changed"] = {**m.get("changed", {}), **json.loads(json.dumps(changes or {}, default=str))}
        m["overrides"] = list(dict.fromkeys([*m.get("overrides", []), *(sources or [])]))
        nb = m.setdefault("notebooks", {}).setdefault(notebook, {})
        if status == "running":
            nb.clear()
            nb.update({"status": status, "started": _now(), "commit": colophon.git_commit(),
                       "overrides": list(sources or []), "pid": os.getpid()})
            if params is not None:
                nb["models"] = _models(params)
            if engine:
                nb["engine"] = engine
        else:
            nb.pop("pid", None)
            nb.update({"status": status, "finished": _now()})
        atomic.write_text(p, json.dumps(m, indent=2, ensure_ascii=False) + "\n")
    return p


def promote(stage: Path, profile: str, run: str) -> list[str]:
    """Move the staged derived data, tables and figures of a notebook that ran to the end into the
    run's folders (``outputs/<profile>/`` for the default run), each file with one atomic rename;
    return the kinds written. The runner and every engine that runs a notebook to the end
    (:mod:`medaudit.engines.batch`, and through it Ray, Slurm and shards) promote through here."""
    done = []
    for kind in ("data", "tables", "figures"):
        files = sorted((stage / kind).glob("*")) if (stage / kind).is_dir() else []
        if not files:
            continue
        dest = paths.run_outputs(profile, kind, run=run)
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            os.replace(f, dest / f.name)
        done.append(kind)
    return done


# ==========================================================================
# list and compare


def run_names(profile: str) -> list[str]:
    """The runs of ``profile`` on disk: ``default`` when the profile's own outputs hold a notebook
    or a manifest, then the named runs in ``outputs/<profile>/runs/``, sorted."""
    out = []
    base = paths.run_outputs(profile, run=DEFAULT)
    if (base / MANIFEST).is_file() or any((base / "notebooks").glob("*.ipynb")):
        out.append(DEFAULT)
    folder = base / "runs"
    if folder.is_dir():
        out += sorted(p.name for p in folder.iterdir() if p.is_dir() and paths.RUN_NAME.fullmatch(p.name))
    return out


def folder(profile: str, run: str) -> Path:
    """A run's folder; :class:`RunError` naming the runs there are when it has none."""
    try:
        paths.check_run_name(run)
    except ValueError as e:
        raise RunError(str(e)) from None
    known = run_names(profile)
    if run not in known:
        have = ", ".join(known) if known else "none yet"
        raise RunError(f"no run '{run}' of profile {profile} (runs of {profile}: {have}; "
                       f"python -m medaudit.runs list --profile {profile})")
    return paths.run_outputs(profile, run=run)


def status(entry: dict) -> str:
    """A notebook's status in the manifest, except that "running" whose
    runner process is gone (killed outright: SIGKILL, a crash, a reboot)
    reads "interrupted"."""
    s = entry.get("status", "?")
    pid = entry.get("pid")
    if s == "running" and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "interrupted"
        except PermissionError:
            pass
    return s


def listing(profile: str) -> pd.DataFrame:
    """One row per run: its name, what it changed, its notebooks with their status, the last
    date and commit, and its folder."""
    rows = []
    for run in run_names(profile):
        m = read_manifest(profile, run)
        nbs = m.get("notebooks", {})
        if not nbs:        # a default run written before manifests: its executed notebooks
            nbs = {p.stem: {"status": "ok"} for p in sorted((folder(profile, run) / "notebooks").glob("*.ipynb"))}
        last = max(nbs.values(), key=lambda d: d.get("finished") or d.get("started") or "", default={})
        rows.append({"run": run,
                     "changed": "; ".join(f"{k} = {_label(v)}" for k, v in m.get("changed", {}).items()) or "-",
                     "notebooks": ", ".join(f"{k[:2]} {status(v)}" for k, v in sorted(nbs.items())),
                     "date (UTC)": last.get("finished") or last.get("started") or "",
                     "commit": (last.get("commit") or "")[:12],
                     "folder": os.path.relpath(folder(profile, run), paths.project_root())})
    return pd.DataFrame(rows, columns=["run", "changed", "notebooks", "date (UTC)", "commit", "folder"])


def _read(profile: str, run: str, table: str) -> pd.DataFrame | None:
    p = folder(profile, run) / "tables" / f"{table}.csv"
    return pd.read_csv(p, keep_default_na=False) if p.is_file() else None


def _number(v: Any) -> float | None:
    """A cell's number: the value of a numeric cell, the leading number of a text cell such as
    "-50.00* (n=3)" or "45.3 [30.1, 60.2]"; None otherwise."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return None if pd.isna(v) else float(v)
    m = _NUMBER.match(str(v))
    return float(m.group(1).replace("−", "-")) if m else None


def _numeric(col: pd.Series) -> bool:
    vals = [v for v in col if str(v).strip() != ""]
    return bool(vals) and all(_number(v) is not None for v in vals)


def side_by_side(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str] = ("A", "B")) -> tuple[pd.DataFrame, str]:
    """Two versions of one table matched row by row, and how they were matched. Rows are matched
    on the leading label (non-numeric) columns that both have and that share a value (a label
    found in only one run, such as the model's name when the subject changed, is shown per run
    instead); a label repeated within a table is matched by its order. Rows in A's order, then
    B's rows that A lacks. Then for each column of both: A's value, B's value and, for numbers,
    B − A."""
    na, nb = names
    common = [c for c in a.columns if c in b.columns]
    keys = []
    for c in common:
        if _numeric(a[c]) and _numeric(b[c]):
            break
        keys.append(c)
    keys = [c for c in keys if set(a[c].astype(str)) & set(b[c].astype(str))]
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    if keys:
        ka = a[keys].astype(str).assign(_k=a.groupby(keys, sort=False).cumcount())
        kb = b[keys].astype(str).assign(_k=b.groupby(keys, sort=False).cumcount())
        how = f"rows matched on {', '.join(keys)}"
    else:
        ka, kb = pd.DataFrame({"_k": range(len(a))}), pd.DataFrame({"_k": range(len(b))})
        how = "no label shared by both runs: rows matched by their order"
    left = pd.concat([ka, a.drop(columns=keys).add_suffix(f" [{na}]")], axis=1)
    right = pd.concat([kb, b.drop(columns=keys).add_suffix(f" [{nb}]")], axis=1)
    m = left.assign(_ia=range(len(left))).merge(right.assign(_ib=range(len(right))), on=[*keys, "_k"], how="outer")
    m = m.sort_values(["_ia", "_ib"], na_position="last", kind="stable").reset_index(drop=True)   # A's order
    out = m[keys].copy() if keys else pd.DataFrame(index=m.index)
    for c in [*[c for c in a.columns if c not in keys],
              *[c for c in b.columns if c not in keys and c not in a.columns]]:
        ca, cb = m.get(f"{c} [{na}]"), m.get(f"{c} [{nb}]")
        if ca is not None:
            out[f"{c} [{na}]"] = ca
        if cb is not None:
            out[f"{c} [{nb}]"] = cb
        if ca is not None and cb is not None and _numeric(a[c]) and _numeric(b[c]):
            diff = [None if (x := _number(u)) is None or (y := _number(v)) is None else y - x
                    for u, v in zip(ca.fillna(""), cb.fillna(""))]
            out[f"{c} [{nb} − {na}]"] = [("" if d is None else f"{d:+.4g}") for d in diff]
    return out.fillna("").astype(str), how


def _markdown(df: pd.DataFrame) -> str:
    """Every cell exactly as given (as :func:`medaudit.report.tables.markdown` does; that module's
    statistics imports take seconds that a listing does not need)."""
    return df.to_markdown(index=False, disable_numparse=True)


def _long(both: pd.DataFrame, width: int) -> str:
    """A side-by-side table too wide for ``width`` columns, long: one line per
    row and column with A, B and B − A, each cell wrapped between words to fit."""
    from tabulate import tabulate

    keys = [c for c in both.columns if not c.endswith("]")]
    base = list(dict.fromkeys(c.rsplit(" [", 1)[0] for c in both.columns if c.endswith("]")))
    rows = []
    for _, r in both.iterrows():
        label = " · ".join(str(r[k]) for k in keys if str(r[k])) or f"row {_ + 1}"
        for c in base:
            cells = [str(r.get(f"{c} [{x}]", "")) for x in ("A", "B", "B − A")]
            if any(cells):
                rows.append([label, c, *cells])
    heads = ["row", "column", "A", "B", "B − A"]
    longest = [max([len(h), *(len(str(x[i])) for x in rows)]) for i, h in enumerate(heads)]
    room = max(40, width - 3 * len(heads) - 2)            # "| " … " |" around and between the cells
    w = [min(longest[0], max(10, room // 5)), min(longest[1], max(10, room // 4)), 0, 0, min(longest[4], 12)]
    w[2] = w[3] = max(8, (room - w[0] - w[1] - w[4]) // 2)
    return tabulate(rows, headers=heads, tablefmt="github", disable_numparse=True, maxcolwidths=w)


def compare_frames(profile: str, run_a: str, run_b: str, table: str | None = None) -> list[tuple]:
    """Per table: (name, A's frame or None, B's frame or None, the side-by-side frame or None, how
    its rows were matched); :class:`RunError` for an unknown run or table."""
    fa, fb = folder(profile, run_a), folder(profile, run_b)
    have_a = {p.stem for p in (fa / "tables").glob("*.csv")}
    have_b = {p.stem for p in (fb / "tables").glob("*.csv")}
    if table is not None:
        if table not in have_a | have_b:
            near = difflib.get_close_matches(table, sorted(have_a | have_b), n=1)
            raise RunError(f"no table '{table}' in run {run_a} or {run_b} of profile {profile}"
                           + (f"; did you mean '{near[0]}'?" if near else ""))
        names = [table]
    else:
        names = sorted(have_a | have_b)
        if not names:
            raise RunError(f"runs {run_a} and {run_b} of profile {profile} have no tables yet")
    out = []
    for t in names:
        a, b = _read(profile, run_a, t), _read(profile, run_b, t)
        both, how = side_by_side(a, b) if a is not None and b is not None else (None, "")
        out.append((t, a, b, both, how))
    return out


def write_comparison(profile: str, run_a: str, run_b: str, table: str | None, fmt: str,
                     output: str | Path | None = None) -> Path:
    """``compare`` as a file: CSV (every table's side-by-side rows, a ``table`` column first) or
    an HTML page (each table with both runs' N); returns its path."""
    frames = compare_frames(profile, run_a, run_b, table)
    dest = Path(output) if output else paths.run_outputs(
        profile, "compare", f"{run_a}_vs_{run_b}{'_' + table if table else ''}.{fmt}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        parts = [both.assign(**{"table": t}).pipe(lambda d: d[["table", *[c for c in d.columns if c != "table"]]])
                 for t, _, _, both, _ in frames if both is not None]
        text = pd.concat(parts, ignore_index=True).to_csv(index=False) if parts else "table\n"
    else:
        import html as _html

        body = [f"<h1>Run {_html.escape(run_a)} (A) beside run {_html.escape(run_b)} (B), profile "
                f"{_html.escape(profile)}</h1>"]
        for t, a, b, both, how in frames:
            body.append(f"<h2>{_html.escape(t)}</h2>")
            if both is None:
                only = run_b if a is None else run_a
                body.append(f"<p>only in run {_html.escape(only)}</p>")
                continue
            body.append(f"<p>A: {_html.escape(exhibits.n_text(a))}; B: {_html.escape(exhibits.n_text(b))}; "
                        f"{_html.escape(how)}</p>")
            body.append(both.to_html(index=False, border=0))
        text = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>compare</title><style>"
                "body{font-family:system-ui,sans-serif} table{border-collapse:collapse;font-size:.85rem} "
                "td,th{border:1px solid #ccc;padding:.2rem .4rem;white-space:nowrap}</style></head><body>"
                + "\n".join(body) + "</body></html>\n")
    atomic.write_text(dest, text)
    return dest


def compare(profile: str, run_a: str, run_b: str, table: str | None = None, width: int | None = None) -> str:
    """The text ``python -m medaudit.runs compare`` prints (module doc); a table whose lines
    would pass ``width`` characters is printed long (:func:`_long`)."""
    frames = compare_frames(profile, run_a, run_b, table)
    fa, fb = folder(profile, run_a), folder(profile, run_b)
    out = [(f"profile {profile}: A = run {run_a} ({os.path.relpath(fa, paths.project_root())}), "
            f"B = run {run_b} ({os.path.relpath(fb, paths.project_root())})")]
    for t, a, b, both, how in frames:
        out.append(f"\n== {t}")
        if both is None:
            only, other = (run_b, run_a) if a is None else (run_a, run_b)
            out.append(f"only in run {only} (run {other} did not write it)")
            continue
        out.append(f"A ({run_a}): {exhibits.n_text(a)}; B ({run_b}): {exhibits.n_text(b)}")
        out.append(how)
        if not len(both.columns):
            out.append("(no columns)")
            continue
        wide = _markdown(both)
        if width and max(map(len, wide.splitlines())) > width:
            out.append(f"(too wide for {width} columns: one line per row and column; --format csv or html "
                       "for the whole table)")
            out.append(_long(both, width))
        else:
            out.append(wide)
    if not width:
        return "\n".join(out)
    import textwrap

    lines = "\n".join(out).splitlines()     # the prose fits too; a table line is as laid out above
    return "\n".join(x if x.startswith("|") or len(x) <= width else textwrap.fill(x, width, break_long_words=False,
                                                                                 break_on_hyphens=False)
                     for x in lines)


# ==========================================================================
# command line


def _profiles_with_outputs() -> list[str]:
    root = paths.project_root() / "outputs"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.runs``: ``list`` a profile's runs on disk, or
    ``compare`` two runs' tables side by side (printed, or written as CSV or HTML)."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.runs",
                                 description="The runs of a profile (one per set of answer-changing parameters) "
                                             "and two runs' tables side by side.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="the runs on disk: what each changed, its notebooks, date, commit, folder")
    ls.add_argument("--profile", default=None, help="one profile (default: every profile with outputs)")
    cp = sub.add_parser("compare", help="the tables of two runs side by side, each with its N and the difference")
    cp.add_argument("run_a")
    cp.add_argument("run_b")
    cp.add_argument("--profile", required=True)
    cp.add_argument("--table", default=None, help="one table, e.g. 04_table1_accuracy (default: every table)")
    cp.add_argument("--width", type=int, default=None,
                    help="the widest line to print (default: the terminal's width; no limit when the output "
                         "is not a terminal)")
    cp.add_argument("--format", choices=("text", "csv", "html"), default="text",
                    help="text (printed, fits the width), or every table whole as a CSV or HTML file")
    cp.add_argument("--output", default=None, help="the CSV or HTML file (default: "
                                                    "outputs/<profile>/compare/<A>_vs_<B>[_<table>].<format>)")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if a.cmd == "list":
            profs = [a.profile] if a.profile else _profiles_with_outputs()
            for prof in profs:
                df = listing(prof)
                print(f"profile {prof}: {len(df)} run{'s' if len(df) != 1 else ''}")
                if len(df):
                    print(_markdown(df.astype(str)))
            return 0
        if a.format != "text":
            path = write_comparison(a.profile, a.run_a, a.run_b, a.table, a.format, a.output)
            print(f"written: {os.path.relpath(path)}")
            return 0
        width = a.width or (shutil.get_terminal_size().columns if sys.stdout.isatty() else None)
        print(compare(a.profile, a.run_a, a.run_b, a.table, width=width))
        return 0
    except RunError as e:
        print(f"medaudit.runs: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
