"""The repetitions of a recovery of planted effects (:mod:`medaudit.validation.recovery`): R runs
of one study's chain, each under another planted seed (:func:`medaudit.llm.planted.seeds`) and
run index, each in a response store of its own, as a fresh run finds it (a rerun of the recovery
answers from it).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import pandas as pd

from medaudit import paths
from medaudit.llm import ResponseStore
from medaudit.llm.planted import PlantedBackend, seeds


def repeat(profile: str, r: int, model: str, store_name: str,
           one: Callable[[ResponseStore, int, int], pd.DataFrame], first_seed: int | None = None,
           progress: bool = True) -> pd.DataFrame:
    """R repetitions of ``one(store, planted_seed, i)`` (a study's repetition, its rows), the
    planted seeds derived from ``first_seed`` (default: the truth of ``model``'s own seed),
    repetition ``i`` answered into ``outputs/<profile>/data/recovery/<store_name>-<seed>.sqlite``;
    the rows of all, each with its ``repetition``, and the time of each on stderr when
    ``progress``."""
    truth_seed = PlantedBackend(model).truth.seed if first_seed is None else first_seed
    out = []
    for i, ps in enumerate(seeds(truth_seed, r)):
        t0 = time.time()
        store = ResponseStore(paths.outputs(profile, "data", "recovery", f"{store_name}-{ps}.sqlite"))
        try:
            out.append(one(store, ps, i).assign(repetition=i))
        finally:
            store.close()
        if progress:
            print(f"repetition {i + 1}/{r}: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return pd.concat(out, ignore_index=True)
