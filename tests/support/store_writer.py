"""Child process for tests/test_store.py: many small write transactions
into one response store, to run beside another writer or to be killed.

    python tests/support/store_writer.py STORE WRITER_ID N_OWN N_SHARED START_AT
        writes N_OWN rows only this writer has and N_SHARED rows that every
        writer has (same keys), shuffled, 1-3 rows a transaction, starting
        at the wall-clock time START_AT so that writers overlap
    python tests/support/store_writer.py STORE WRITER_ID --pairs N
        writes N transactions of two rows each ("…-a" and "…-b"): after a
        kill every pair must be whole or absent

Prints "READY" once the store is open and "DONE <rows given> [<first write
time> <last write time>]" at the end.
"""
from __future__ import annotations

import random
import sys
import time

from medaudit.llm import ResponseStore


def row(key: str, writer: str, i: int) -> dict:
    return {"key": key, "source": "generated", "backend": "test", "model": "writer-test",
            "model_id": "none", "item_id": f"item-{i % 97}", "condition": "base",
            "prompt_format": "mcq", "sample": i, "permutation": "ABCD", "temperature": 0.7,
            "top_p": 0.9, "max_tokens": 16, "seed": i, "prompt": "[]",
            "response_text": f"text of {key}" + " padding" * (i % 7), "parsed_answer": "B",
            "parse_status": "ok", "tokens_in": 100, "tokens_out": 5, "latency_s": 0.0,
            "retries": 0, "cost_usd": 0.0}


def _meet_the_other_writers(path: str, writer: str, n_writers: int = 2, timeout_s: float = 60.0) -> None:
    """Wait, a quarter of the way in, until every writer has got this far:
    the writes then overlap in time for certain, however the processes were
    scheduled (a time-based start alone left them apart now and then)."""
    import glob

    open(f"{path}.started-{writer}", "w").close()
    deadline = time.time() + timeout_s
    while len(glob.glob(f"{path}.started-*")) < n_writers and time.time() < deadline:
        time.sleep(0.005)


def main(argv: list[str]) -> None:
    path, writer = argv[0], argv[1]
    if argv[2] == "--pairs":
        store = ResponseStore(path)
        print("READY", flush=True)
        for i in range(int(argv[3])):
            store.put_many([row(f"pair-{writer}-{i}-a", writer, i), row(f"pair-{writer}-{i}-b", writer, i)])
        print("DONE", 2 * int(argv[3]), flush=True)
        return
    n_own, n_shared, start_at = int(argv[2]), int(argv[3]), float(argv[4])
    rng = random.Random(f"writer-{writer}")
    rows = [row(f"own-{writer}-{i}", writer, i) for i in range(n_own)]
    rows += [row(f"shared-{j}", "shared", j) for j in range(n_shared)]
    rng.shuffle(rows)
    time.sleep(max(0.0, start_at - time.time()))
    store = ResponseStore(path)          # both writers create the file at the same moment
    print("READY", flush=True)
    t0 = time.time()
    i = 0
    barrier_at = len(rows) // 4
    while i < len(rows):
        n = rng.randint(1, 3)
        store.put_many(rows[i:i + n])
        i += n
        if barrier_at is not None and i >= barrier_at:
            _meet_the_other_writers(path, writer)
            barrier_at = None
        if rng.random() < 0.2:           # a reader in between writes
            store.has([rows[rng.randrange(len(rows))]["key"]])
    t1 = time.time()
    store.close()
    print("DONE", len(rows), t0, t1, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
