"""Loop tests over a recorded real run: the tiny model's own rows, replayed.

A test of a loop (the FairMedQA agents, the open-ended stages, the cultural
augmenter) checks our control flow over what a real model answered. Asking
the model each time costs minutes on 2 cores; so the rows of one live run
are kept in ``tests/recorded/<name>.jsonl`` (:mod:`medaudit.llm.recorded`:
each row with its request, replayed only to exactly that request) and the
test replays them into its store and runs stored-only
(:class:`medaudit.llm.dispatch.StoredOnly`): a request the recording does not
answer — a prompt, a setting or the loop changed — fails at once, naming the
file to record again, never a silent live run.

``pytest --record`` (``make test-live``) runs the same tests live instead and
writes their generated rows back to the files.
"""
from __future__ import annotations

from pathlib import Path

from medaudit.llm import ResponseStore, dispatch, recorded

RECORDINGS = Path(__file__).resolve().parents[1] / "recorded"


class Recording:
    """``recording.store(path, name)``: a response store at ``path`` that
    answers from ``tests/recorded/<name>.jsonl`` (or, recording, from the
    model, and written to that file when the test ends)."""

    def __init__(self, request, monkeypatch):
        self.request, self.monkeypatch = request, monkeypatch
        self.live = bool(request.config.getoption("--record"))

    def store(self, path: Path, name: str) -> ResponseStore:
        file = RECORDINGS / f"{name}.jsonl"
        store = ResponseStore(path)
        if self.live:
            def write():
                with ResponseStore(path) as s:
                    rows = s.frame("WHERE source = 'generated'")
                if len(rows):
                    recorded.record(rows, file)
            self.request.addfinalizer(write)
            return store
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no recording; make test-live (pytest --record) writes it")
        recorded.replay(file, store)
        self.monkeypatch.setenv(dispatch.ENV_STORED_ONLY,
                                f"tests/recorded/{file.name}: `make test-live` records it again")
        return store
