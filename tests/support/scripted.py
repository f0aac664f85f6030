"""The one scripted backend the tests use in place of a model.

:class:`ScriptedBackend` keeps the contract of
:class:`medaudit.llm.base.Backend` (``kind``, ``model_id``, ``complete``
handing every completion to ``on_result`` in request order, stopping with
:class:`~medaudit.llm.base.BackendStopped`) and answers each request with
what a test's ``reply`` function says. It is a test double for the control
flow around a backend (what is sent, retried, stored, counted, kept when a
run stops), not for any model behaviour: each test states only what its
fake answers.

    be = ScriptedBackend(lambda request, i, be: "[A]")
    be = ScriptedBackend(nth_reply({"Q-ok": ["not json", valid]}))
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from medaudit.llm.base import Completion, Request

Reply = Callable[[Request, int, "ScriptedBackend"], "Completion | str"]


class ScriptedBackend:
    """A backend whose answers come from ``reply(request, i, backend)``: ``i``
    is the request's index in the batch passed to ``complete``, ``backend``
    this double (a reply may read ``backend.seen`` or change
    ``backend.model_id``, as a backend that learns about its endpoint does).
    A ``str`` reply becomes ``Completion(text=...)``; a Completion is handed
    back as it is (an ``error``/``error_kind`` one is a failed request); a
    reply that raises :class:`~medaudit.llm.base.BackendStopped` stops the
    batch there, as a real backend does, with what came before already
    handed to ``on_result``.

    ``seen`` holds every request ``complete`` was given, in order (the one
    being answered included, so a reply can count earlier ones); ``sent``
    counts the completions it handed back. A test double for control flow,
    not for model behaviour."""

    def __init__(self, reply: Reply, *, kind: str = "scripted", model_id: str = "script-v1"):
        self.reply, self.kind, self.model_id = reply, kind, model_id
        self.seen: list[Request] = []
        self.sent = 0

    def complete(self, requests, progress=False, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.seen.append(r)
            c = self.reply(r, i, self)
            if isinstance(c, str):
                c = Completion(text=c)
            self.sent += 1
            out.append(c)
            if on_result is not None:
                on_result(i, c)
        return out


def nth_reply(script: dict) -> Reply:
    """Replies per job, one after the other: the n-th request whose first
    message contains ``key`` (the first such key of ``script``; a job's
    revisions keep its first message) gets ``script[key][n - 1]``. A request
    that no key matches, or one more than its script holds, fails the test."""
    asked = Counter()

    def reply(request, i, backend):
        first = request.messages[0][1]
        key = next((k for k in script if k in first), None)
        if key is None:
            raise KeyError(f"no script for a request whose first message is {first[:80]!r}")
        asked[key] += 1
        return script[key][asked[key] - 1]

    return reply
