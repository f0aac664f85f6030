"""How many threads a model may use in this test process.

Under pytest-xdist (``make test`` runs ``-n 2``) every worker is a process of
its own and loads its own models; two workers whose llama.cpp or torch both
ask for every core put 4 threads on 2 cores, and llama.cpp's threads wait on
each other at every layer (a request then takes several times longer). So
the cores are shared out: one thread each for two workers on 2 cores, and at
most 2 (what these tests asked for before xdist) when pytest runs alone.
"""
from __future__ import annotations

import os


def per_worker(most: int = 2) -> int:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, min(most, (os.cpu_count() or 2) // max(1, workers)))
