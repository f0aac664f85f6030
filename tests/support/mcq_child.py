"""Child process for tests/test_store.py: one MCQ run of the tiny real model
(smollm2-135m, one thread) into a response store.

    python tests/support/mcq_child.py STORE

Prints "READY <planned> <already stored>" once the model is loaded and the
plan is made (the parent times its kills from there), then "DONE <counts as
JSON>" when every sample is stored. ``build_samples`` is imported by the
test so that parent and child plan the same keys.
"""
from __future__ import annotations

import json
import sys

MODEL = "smollm2-135m"
N_ITEMS, CONDITIONS, K, SEED, MAX_TOKENS = 4, ("base", "+homo"), 5, 11, 12


def load_backend():
    """The real llama.cpp backend on one thread for generation *and* prompt
    evaluation. ``n_threads`` of LlamaCppBackend sets only the former; prompt
    batches would use every core, and two such processes on a small machine
    spin in ggml's thread barrier (a 1-second prompt took 15 s)."""
    from medaudit.llm.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(MODEL, n_threads=1)
    backend.llm._ctx.set_n_threads(1, 1)
    return backend


def build_samples(model_id: str):
    from medaudit import data, paths, perturb
    from medaudit.llm import GenParams, mcq

    items = data.load_medqa(paths.raw(*data.MEDQA4)).records.head(N_ITEMS)
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    variants = perturb.make_variants(items, cs, conditions=list(CONDITIONS))
    assert variants["ok"].all()
    return mcq.plan(variants, items, model=MODEL, backend="llamacpp", model_id=model_id, k=K, seed=SEED,
                    gen=GenParams(temperature=0.8, top_p=0.95, max_tokens=MAX_TOKENS))


def main(store_path: str) -> None:
    from medaudit.llm import ResponseStore, runs
    backend = load_backend()
    samples = build_samples(backend.model_id)
    store = ResponseStore(store_path)
    print("READY", len(samples), store.count(), flush=True)
    counts = runs.run(backend, store, samples, model=MODEL, progress=False)
    store.close()
    print("DONE", json.dumps(counts.counts()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
