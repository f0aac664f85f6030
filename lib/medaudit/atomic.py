"""Atomic file writes: a reader sees the old file or the new one, never a part.

Every derived file (tables, JSONL frames, figures, the report) is written to
a temporary file in the same folder and then renamed over the target with
:func:`os.replace`, which is atomic on POSIX file systems (and on Windows for
files on one volume). If writing fails, the temporary file is removed and the
old file is left as it was.

Temporary files are hidden (``.<stem>.<random>.tmp<suffix>``) and keep the
target's suffix, so writers that infer a format from the name (matplotlib's
``savefig``) still work, and globs such as ``02_*.csv`` never match them.

- :func:`atomic_path` — a context manager yielding a temporary path to write;
- :func:`atomic_paths` — the same for several files that belong together (a
  table's CSV, Markdown and LaTeX; a figure's PNG, PDF and caption): all are
  written first and renamed only if every one was written;
- :func:`atomic_open` — a context manager yielding an open file;
- :func:`write_text`, :func:`write_bytes` — one call each.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_path", "atomic_paths", "atomic_open", "write_text", "write_bytes"]


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide and racy)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _fsync(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces
    ``path`` in one rename, on an exception it is removed and ``path`` is
    untouched. The new file gets the old file's permissions, or the usual
    ``0o666 & ~umask`` for a new one (not mkstemp's 0600). With ``fsync``
    the data reach the disk before the rename (a crash leaves old or new)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        if fsync:
            _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_paths(paths, *, fsync: bool = True) -> Iterator[list[Path]]:
    """Yield one temporary path per target in ``paths`` (same order); on a
    clean exit each replaces its target, on an exception all are removed
    and every target is untouched. (Each rename is atomic; the group is
    renamed in a moment at the end, not as one transaction.)"""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(p, fsync=fsync)) for p in paths]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                newline: str | None = None, fsync: bool = True) -> Iterator[IO]:
    """``open(path, mode)`` for writing, made atomic (see :func:`atomic_path`).
    ``mode`` is "w", "wt", "wb" (the file always starts empty)."""
    if mode not in ("w", "wt", "wb"):
        raise ValueError(f"atomic_open writes a new file: mode must be 'w', 'wt' or 'wb', not {mode!r}")
    with atomic_path(path, fsync=fsync) as tmp:
        if "b" in mode:
            f = open(tmp, mode)
        else:
            f = open(tmp, mode, encoding=encoding, newline=newline)
        with f:
            yield f


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8", *, fsync: bool = True) -> Path:
    """``Path(path).write_text(text)``, atomically; returns the path."""
    with atomic_open(path, "w", encoding=encoding, fsync=fsync) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> Path:
    """``Path(path).write_bytes(data)``, atomically; returns the path."""
    with atomic_open(path, "wb", fsync=fsync) as f:
        f.write(data)
    return Path(path)
