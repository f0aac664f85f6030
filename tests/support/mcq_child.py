"""Child process for tests/test_store.py: one MCQ run into a response store,
of the tiny real model (smollm2-135m, one thread) or, with ``--scripted``,
of a scripted backend that answers each request by a hash of it after a
tenth of a second (the kill-and-resume test: its property is the store's
atomicity under SIGKILL, not the model's text).

    python tests/support/mcq_child.py STORE [--scripted]

Prints "READY <planned> <already stored>" once the model is loaded and the
plan is made (the parent times its kills from there), then "DONE <counts as
JSON>" when every sample is stored. ``build_samples`` is imported by the
test so that parent and child plan the same keys.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time

MODEL = "smollm2-135m"
N_ITEMS, CONDITIONS, K, SEED, MAX_TOKENS = 4, ("base", "+homo"), 5, 11, 12
SCRIPTED = ("scripted", "scripted-mcq-v1")     # the scripted backend's kind and identity
DELAY_S = 0.1                                  # its time per request: kills land mid-run


def scripted_backend():
    """A deterministic stand-in that takes time per request as a model does:
    the letter, its log-probs and the token counts a function of the request."""
    from medaudit.llm.base import Completion
    from scripted import ScriptedBackend

    def reply(r, i, be):
        time.sleep(DELAY_S)
        h = hashlib.sha256(repr((r.messages, r.params)).encode()).digest()
        lp = {L: -0.05 - (h[j + 1] % 40) / 10 for j, L in enumerate("ABCD")}
        letter = max(lp, key=lp.get)
        return Completion(text=f"[{letter}] because", tokens_in=100 + h[5], tokens_out=4,
                          answer_logprob=lp[letter], letter_logprobs=lp)

    return ScriptedBackend(reply, kind=SCRIPTED[0], model_id=SCRIPTED[1])


def load_backend():
    """The real llama.cpp backend on one thread for generation *and* prompt
    evaluation. ``n_threads`` of LlamaCppBackend sets only the former; prompt
    batches would use every core, and two such processes on a small machine
    spin in ggml's thread barrier (a 1-second prompt took 15 s)."""
    from medaudit.llm.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(MODEL, n_threads=1)
    backend.llm._ctx.set_n_threads(1, 1)
    return backend


def build_samples(model_id: str, kind: str = "llamacpp"):
    from medaudit.prep import data, perturb
    from medaudit import paths
    from medaudit.llm import GenParams, mcq

    items = data.load_medqa(paths.raw(*data.MEDQA4)).records.head(N_ITEMS)
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    variants = perturb.make_variants(items, cs, conditions=list(CONDITIONS))
    assert variants["ok"].all()
    return mcq.plan(variants, items, model=MODEL, backend=kind, model_id=model_id, k=K, seed=SEED,
                    gen=GenParams(temperature=0.8, top_p=0.95, max_tokens=MAX_TOKENS))


def main(store_path: str, scripted: bool = False) -> None:
    from medaudit.llm import ResponseStore, runs
    backend = scripted_backend() if scripted else load_backend()
    samples = build_samples(backend.model_id, backend.kind)
    store = ResponseStore(store_path)
    print("READY", len(samples), store.count(), flush=True)
    counts = runs.run(backend, store, samples, model=MODEL, progress=False)
    store.close()
    print("DONE", json.dumps(counts.counts()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], "--scripted" in sys.argv[2:])
