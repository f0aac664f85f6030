"""Child process for tests/test_openai_backend.py: one batch through the
openai backend, to be interrupted with SIGINT (Ctrl-C).

    python tests/support/openai_interrupt_child.py BASE_URL [MAX_WAIT_S]

Prints "READY" once the backend exists, then runs 20 requests with long
retry waits (the server is expected to answer 503 with a long Retry-After;
MAX_WAIT_S caps the wait, 30 s unless given).
On KeyboardInterrupt it prints "INTERRUPTED" and exits with status 130;
"FINISHED" if the batch ever ends by itself.
"""
from __future__ import annotations

import signal
import sys


def main(base_url: str, max_wait_s: float = 30.0) -> None:
    # Ctrl-C in a terminal reaches a foreground program whose SIGINT raises KeyboardInterrupt.
    # A test suite started in the background (`make test &`, nohup, some CI runners) passes
    # SIGINT on as *ignored*, and Python then never raises it: restore what a terminal gives.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from medaudit.llm.base import GenParams, Request
    from medaudit.llm.openai_backend import OpenAIBackend

    backend = OpenAIBackend("fake-model", base_url=base_url, concurrency=4, timeout_s=30, max_retries=6,
                            backoff_base_s=5, backoff_max_s=max_wait_s)
    requests = [Request.chat([{"role": "user", "content": f"Question {i}?"}], GenParams(0.0, 1.0, 8, i))
                for i in range(20)]
    print("READY", flush=True)
    try:
        backend.complete(requests, progress=False)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(130)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(float, sys.argv[2:3]))
