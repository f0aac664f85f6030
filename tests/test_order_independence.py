"""An answer depends on its request alone, not on what was answered before it:
the llama.cpp backend's (stem from position 0, then suffix), and the test
server's (tests/support/llama_server.py), which the comparisons of two runs
rely on.

llama_cpp.server keeps the previous request's tokens in its KV cache and
evaluates only what differs; the same request then samples from logits
computed in other batch shapes, and now and then draws another token. Found as
a CI failure of ``test_batch_api``: one of 12 answers of the smoke stage came
back "B" through the Batch API and "A. The patient’s closest relatives …"
directly. Every test that compares two runs through a server relies on this
property, so it is tested here once, on those very requests.
"""
from __future__ import annotations

import json

import pytest
from support.threads import per_worker

from medaudit.llm.openai_backend import OpenAIBackend
from medaudit.llm.store import ResponseStore
from support.fake_batch import collect, engine_for
from support.smoke import MODEL, smoke_plan

pytestmark = pytest.mark.slow


def test_an_answer_does_not_depend_on_the_request_before_it(tmp_path, monkeypatch, llama_server, medqa4,
                                                             conditions):
    backend = OpenAIBackend(MODEL, base_url=llama_server, concurrency=1, timeout_s=120)
    samples = smoke_plan(backend, medqa4, conditions, n_items=2, k=2)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        files = collect(backend, samples, tmp_path / "batch", store)
    bodies = [json.loads(x)["body"] for f in files for x in f.read_text().splitlines()]
    assert bodies[0]["logprobs"] is True
    answer = engine_for(llama_server)

    def seen(body: dict) -> str:
        status, r = answer(body)
        assert status == 200, r
        c = r["choices"][0]
        return json.dumps([c["message"]["content"], c["logprobs"]], sort_keys=True)

    # bodies 0 and 7 each came back in two versions on the stock server (their
    # text, or the log-probabilities beside it), depending on what had been
    # answered just before: itself (all of its prompt cached but the last
    # token) or another request
    for i in (0, 7):
        got = {seen(bodies[i]), seen(bodies[i])}
        for j in (i + 1, i + 4):
            seen(bodies[j])
            got.add(seen(bodies[i]))
        assert len(got) == 1, f"request {i}: {len(got)} different answers"


def test_the_llamacpp_backend_answers_alike_in_any_order(medqa4, conditions):
    from medaudit.llm.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(MODEL, n_ctx=2048, n_threads=per_worker())
    reqs = [s.request for s in smoke_plan(backend, medqa4, conditions, n_items=2, k=2)]
    assert reqs[0].stem_chars is not None          # the stem is shared: the cache is reused

    def seen(cs) -> list[tuple]:
        assert not any(c.error for c in cs)
        return [(c.text, c.tokens_out, c.answer_logprob, c.letter_logprobs) for c in cs]

    ref = seen(backend.complete(reqs, progress=False))
    back = seen(backend.complete(reqs[::-1], progress=False))[::-1]
    again = seen(backend.complete(reqs[:1] * 2, progress=False))    # right after itself
    fresh = seen(backend.complete(reqs, progress=False, reuse_prefix=False))
    assert back == ref and again == ref[:1] * 2 and fresh == ref
    assert len({t for t, *_ in ref}) > 4
