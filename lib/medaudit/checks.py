"""What a profile check reports, and the helpers every check uses: the problems found, each
naming the key, the value and where it was set; the closest valid name; a definition file loaded
as a problem rather than an exception. :mod:`medaudit.config` runs the checks, and each study
checks its own keys with these (:mod:`medaudit.studies.profile`).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Mapping

from medaudit import paths


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def dotted_path(loc: tuple) -> str:
    """A pydantic error location as the key path a profile writes (``models.x.options.n_ctx``, ``conditions[2]``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (key)"
        else:
            out += ("." if out else "") + str(part)
    return out


def closest_name(word: str, choices, n: int = 1) -> list[str]:
    """The ``n`` choices closest to ``word`` (difflib, cutoff 0.6)."""
    return difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.6)


def did_you_mean(word: str, choices) -> str:
    """"; did you mean 'x'?" for the closest choice, or nothing."""
    close = closest_name(word, choices)
    return f"; did you mean '{close[0]}'?" if close else ""


class Problems:
    """The problems found in a profile, one line each, naming the key path, the value and the
    file or override it came from (``sources``: key → where it was set)."""

    def __init__(self, sources: Mapping[str, str] | str | None):
        self.sources = sources
        self.lines: list[str] = []
        self.found_by: list[tuple[str, str]] = []     # (cross-check, line) of each line a cross-check added

    def source(self, key: str, path: str = "") -> str:
        """Where ``key`` came from; for a path under an entry of ``models``,
        where that entry came from (``models.<name>`` in the sources; an
        override may redefine one entry of the profile's)."""
        if isinstance(self.sources, str):
            return self.sources
        if self.sources:
            if key == "models":
                for k in sorted(self.sources, key=len, reverse=True):
                    if k.startswith("models.") and (path == k or path.startswith((k + ".", k + "[", k + " "))):
                        return self.sources[k]
            return self.sources.get(key, self.sources.get("*", ""))
        return ""

    def add(self, path: str, message: str, value: Any = ..., key: str | None = None) -> None:
        """Record a problem at ``path`` (its top key ``key``), with the value when given."""
        key = key or re.split(r"[.\[ ]", path, maxsplit=1)[0]
        shown = path if value is ... else f"{path} = {short_repr(value)}"
        src = self.source(key, path)
        self.lines.append(f"{shown}{f' (from {src})' if src else ''}: {message}")


def safe_load(what: str, load):
    """(object, None) or (None, error text) for a definitions loader."""
    try:
        return load(), None
    except Exception as e:  # a broken definitions file is itself a problem to report
        return None, f"{what}: {e}"


def check_names(pr: Problems, key: str, values, known, defined_in: str, what: str) -> list[str]:
    """Report every entry of ``values`` not in ``known``; returns the known ones."""
    ok = []
    for i, v in enumerate(values):
        if v in known:
            ok.append(v)
            continue
        pr.add(f"{key}[{i}]", f"unknown {what} '{v}'{did_you_mean(v, known)} "
                              f"({defined_in} defines: {', '.join(map(str, known))})", key=key)
    return ok


class Cross:
    """What every cross-check reads: the problems so far, the values, the
    keys already reported (``bad``; a check may add to it, and a later check
    then skips that key) and the roles given as the name of a ``models`` entry."""

    def __init__(self, pr: Problems, v: dict, bad: set[str], named: Mapping[str, str] | None):
        self.pr, self.v, self.bad, self.named = pr, v, bad, named or {}

    def ok(self, *keys: str) -> bool:
        """Every key is set and its own type and range were fine."""
        return all(k in self.v and k not in self.bad for k in keys)


def check_defined(c: Cross, key: str, load, names, defined_in: str, what: str) -> None:
    """A study's check of one name list: every entry of ``key`` (when set and not null) is among
    ``names(definitions)``, the definitions read by ``load``; a file that cannot be read is
    itself the problem reported (its error names the file)."""
    if not (c.ok(key) and c.v[key] is not None):
        return
    defs, err = safe_load("cannot be checked", load)
    if err:
        c.pr.add(key, err)
    else:
        check_names(c.pr, key, c.v[key], names(defs), defined_in, what)


def existing_file(value: str) -> Path | None:
    """``value`` as an existing path: absolute, or relative to notebooks/
    (where the notebooks run) or the project root."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    try:
        root = paths.project_root()
    except FileNotFoundError:
        return None
    for base in (root / "notebooks", root):
        if (base / p).exists():
            return base / p
    return None


def benchmark_path(path: str) -> Path:
    """A benchmark file named in a profile: absolute, or from the compendium's root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else paths.project_root() / p
