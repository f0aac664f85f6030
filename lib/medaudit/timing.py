"""Timing a backend call for the benchmarks (a leaf: it imports nothing of
the library; :mod:`medaudit.bench` and :mod:`medaudit.bench_gpu` share it)."""
from __future__ import annotations

import time


def timed(backend, requests, **settings) -> tuple[list, float]:
    """The completions of ``requests`` with the backend's settings changed
    for this call, and the seconds they took."""
    old = {k: getattr(backend, k) for k in settings}
    for k, v in settings.items():
        setattr(backend, k, v)
    try:
        t = time.perf_counter()
        out = backend.complete(requests, progress=False)
        return out, time.perf_counter() - t
    finally:
        for k, v in old.items():
            setattr(backend, k, v)
