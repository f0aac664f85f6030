"""A backend call under changed settings, and its time, for the benchmarks
and the backend tests (a leaf: it imports nothing of the library;
:mod:`medaudit.bench.cli` and :mod:`medaudit.bench.gpu` share it)."""
from __future__ import annotations

import contextlib
import time


@contextlib.contextmanager
def configured(backend, **settings):
    """``backend`` with some of its settings (attributes) changed for one
    block, and restored after it."""
    old = {k: getattr(backend, k) for k in settings}
    for k, v in settings.items():
        setattr(backend, k, v)
    try:
        yield backend
    finally:
        for k, v in old.items():
            setattr(backend, k, v)


def timed(backend, requests, **settings) -> tuple[list, float]:
    """The completions of ``requests`` with the backend's settings changed
    for this call, and the seconds they took."""
    with configured(backend, **settings):
        t = time.perf_counter()
        out = backend.complete(requests, progress=False)
        return out, time.perf_counter() - t
