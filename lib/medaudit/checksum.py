"""The sha256 of a file, read in chunks (a 1 GB model file never sits in
memory). A leaf: it imports nothing of the library."""
from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The hex sha256 of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
