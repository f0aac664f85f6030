"""The scripted test backend (tests/support/scripted.py) keeps the Backend
contract of medaudit.llm.base, so that what the other tests learn from it
holds for a real backend's control flow."""
from __future__ import annotations

import pytest

from medaudit.llm import Completion, GenParams, Request
from medaudit.llm.base import Backend, BackendStopped
from support.scripted import ScriptedBackend, nth_reply


def _requests(*prompts: str) -> list[Request]:
    return [Request.chat([{"role": "user", "content": p}], GenParams()) for p in prompts]


def test_every_result_goes_to_on_result_once_in_request_order():
    failed = Completion(text="", error="HTTP 500: boom", error_kind="http_500")
    be = ScriptedBackend(lambda r, i, be: failed if i == 1 else f"{r.messages[0][1]} {i}")
    reqs = _requests("a", "b", "c")
    got = []
    out = be.complete(reqs, on_result=lambda i, c: got.append((i, c)))
    assert [(i, c.text) for i, c in got] == [(0, "a 0"), (1, ""), (2, "c 2")]
    assert [c for _, c in got] == out and out[1] is failed              # the same objects, returned in order
    assert all(type(c) is Completion for c in out)                      # a str reply became a Completion
    assert be.seen == reqs and be.sent == 3
    assert be.complete(_requests("d"))[0].text == "d 0"                # on_result is optional
    assert be.seen[-1] == _requests("d")[0] and be.sent == 4


def test_kind_and_model_id():
    be = ScriptedBackend(lambda r, i, be: "x")
    assert isinstance(be, Backend) and (be.kind, be.model_id) == ("scripted", "script-v1")
    be = ScriptedBackend(lambda r, i, be: "x", kind="fake", model_id="fake-2")
    assert (be.kind, be.model_id) == ("fake", "fake-2")


def test_a_stop_raised_by_the_reply_propagates_and_keeps_what_came_before():
    def reply(r, i, be):
        if i == 2:
            raise BackendStopped("HTTP 401 twice")
        return "[A]"

    be = ScriptedBackend(reply)
    got = []
    with pytest.raises(BackendStopped, match="401"):
        be.complete(_requests("a", "b", "c", "d"), on_result=lambda i, c: got.append(i))
    assert got == [0, 1] and be.sent == 2 and len(be.seen) == 3       # seen: the request it stopped at too


def test_a_reply_can_change_the_identity_mid_batch():
    def reply(r, i, be):
        if i == 1:
            be.model_id += " [reasoning]"
        return be.model_id

    be = ScriptedBackend(reply, model_id="m")
    assert [c.text for c in be.complete(_requests("a", "b", "c"))] == ["m", "m [reasoning]", "m [reasoning]"]


def test_nth_reply_answers_each_job_in_turn():
    be = ScriptedBackend(nth_reply({"Q-1": ["first", "second"], "Q-2": ["only"]}))
    out = be.complete(_requests("about Q-1", "about Q-2", "Q-1 again"))
    assert [c.text for c in out] == ["first", "only", "second"]
    with pytest.raises(KeyError, match="no script"):
        be.complete(_requests("Q-3"))
    with pytest.raises(IndexError):
        be.complete(_requests("Q-2"))                                   # its script is used up
