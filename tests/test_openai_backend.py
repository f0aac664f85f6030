"""The openai backend against a real OpenAI-compatible server.

A session fixture starts llama.cpp's own server (``python -m llama_cpp.server``)
on the tiny SmolLM2-135M model on 127.0.0.1; the fault-injection tests put
:mod:`support.fault_proxy` between the backend and that server. Behaviours a
small local model cannot show (a 401 on everything, a 200 without content, a
reasoning model that rejects ``max_tokens``) come from
:mod:`support.fake_openai`, a real HTTP server on 127.0.0.1 that answers as
the OpenAI API does. Nothing leaves the machine.
"""
from __future__ import annotations

import logging
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import openai
import pandas as pd
import pytest
from support.threads import per_worker

from medaudit import parse
from medaudit.llm import mcq, runs, models
from medaudit.llm.base import Backend, BackendStopped, Completion, GenParams, Request, request_key
from medaudit.llm.openai_backend import OpenAIBackend, answer_position, normalise_base_url, retry_after_s
from medaudit.llm.store import ResponseStore
from support.fake_openai import FakeOpenAI
from support.fault_proxy import FaultProxy, free_port
from support.llama_server import llama_server

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
LETTERS = ("A", "B", "C", "D")
FAKE_KEY = "sk-" + "test-DO-NOT-LEAK-1234567890abcdef"  # fake, and split so no scanner mistakes it for a key

QUESTIONS = [
    ("q1", "A 45-year-old man has crushing chest pain radiating to the left arm. Which test should be done first?",
     {"A": "Electrocardiogram", "B": "Chest X-ray", "C": "Abdominal ultrasound", "D": "Lumbar puncture"}),
    ("q2", "A 6-year-old child has a barking cough and inspiratory stridor. What is the most likely diagnosis?",
     {"A": "Croup", "B": "Asthma", "C": "Pneumonia", "D": "Otitis media"}),
    ("q3", "Which vitamin deficiency causes scurvy?",
     {"A": "Vitamin A", "B": "Vitamin B12", "C": "Vitamin C", "D": "Vitamin D"}),
    ("q4", "Which drug reverses an opioid overdose?",
     {"A": "Flumazenil", "B": "Naloxone", "C": "Atropine", "D": "Glucagon"}),
]


# -- fixtures ---------------------------------------------------------------

def _frames(questions=QUESTIONS):
    items = pd.DataFrame([{"item_id": i, "options": o} for i, _, o in questions])
    variants = pd.DataFrame([{"item_id": i, "condition": "base", "question": q} for i, q, _ in questions])
    return variants, items


def _samples(k: int = 3, max_tokens: int = 8, temperature: float = 0.7, questions=QUESTIONS,
             backend: str = "openai", model_id: str = MODEL) -> list[runs.Sample]:
    variants, items = _frames(questions)
    return mcq.plan(variants, items, model=MODEL, backend=backend, model_id=model_id, k=k, seed=20240601,
                    gen=GenParams(temperature, 0.9, max_tokens, 0))


# the 12 requests of the end-to-end and fault tests: 4 questions × 3 permutations
REQUESTS = [s.request for s in _samples()]


def _create_kwargs(req: Request) -> dict:
    p = req.params
    return dict(model=MODEL, messages=req.message_dicts(), temperature=p.temperature, top_p=p.top_p,
                max_tokens=p.max_tokens, seed=p.seed, logprobs=True, top_logprobs=20)


@pytest.fixture(scope="session")
def direct(llama_server):
    """REQUESTS sent one by one to the server with the plain openai client:
    the reference the backend's results are compared with."""
    client = openai.OpenAI(base_url=llama_server, api_key="not-needed", max_retries=0, timeout=120,
                           http_client=openai.DefaultHttpxClient(trust_env=False))   # no HTTP proxy
    out = []
    for req in REQUESTS:
        r = client.chat.completions.create(**_create_kwargs(req))
        out.append(r)
    return out


def _text(r) -> str:
    return (r.choices[0].message.content or "").strip()


# -- end to end --------------------------------------------------------------

def test_end_to_end_in_order_with_tokens(llama_server, direct):
    backend = OpenAIBackend(MODEL, base_url=llama_server, concurrency=3, timeout_s=120)
    assert isinstance(backend, Backend) and backend.kind == "openai" and backend.model_name == MODEL
    # the serving identity: the name, the URL, and what GET /models says is served (llama_cpp.server
    # started without an alias lists its one model by the GGUF path, and serves it under any name)
    assert backend.model_id == f"{MODEL} @ {llama_server} (served: {models.model_path(MODEL)})"
    seen: list[tuple[int, Completion]] = []
    out = backend.complete(REQUESTS, progress=False, on_result=lambda i, c: seen.append((i, c)))

    assert len(out) == len(REQUESTS)
    assert all(not c.error for c in out), [c.error for c in out]
    # in request order: each completion matches the same request sent alone
    assert [c.text for c in out] == [_text(r) for r in direct]
    assert [c.tokens_in for c in out] == [r.usage.prompt_tokens for r in direct]
    assert [c.tokens_out for c in out] == [r.usage.completion_tokens for r in direct]
    assert len({c.tokens_in for c in out}) > 1          # the questions differ in length: order is tested
    assert all(c.tokens_in > 50 and 1 <= c.tokens_out <= 8 for c in out)
    assert all(c.finish_reason in ("stop", "length") and c.latency_s > 0 and c.retries == 0 for c in out)
    assert all(c.served_model and c.settings is None for c in out)   # chat style: GenParams as sent
    # on_result: once per request, the very object returned at that index
    assert sorted(i for i, _ in seen) == list(range(len(REQUESTS)))
    assert all(out[i] is c for i, c in seen)
    t = backend.totals
    assert t["requests"] == len(REQUESTS) and t["retries"] == 0 and t["failures"] == 0
    assert t["tokens_in"] == sum(c.tokens_in for c in out)
    assert t["tokens_out"] == sum(c.tokens_out for c in out)
    assert t["cost_usd"] == 0.0 and all(c.cost_usd == 0.0 for c in out)   # no pricing: free


def _few_shot_requests(temperature: float, n: int = 2) -> list[Request]:
    """MCQ requests preceded by one worked example answered "[B]": SmolLM2-135M
    then answers in brackets, which puts an answer position in the output."""
    shot = mcq.build_messages("mcq", "Which organ produces insulin?",
                              {"A": "Liver", "B": "Pancreas", "C": "Kidney", "D": "Spleen"}, "ABCD")
    out = []
    for k in range(n):
        item, q, opts = QUESTIONS[k % len(QUESTIONS)]
        perm = mcq.permutation("ABCD", 5, item, k)
        msgs = shot + [{"role": "assistant", "content": "[B]"}] + mcq.build_messages("mcq", q, opts, perm)
        out.append(Request.chat(msgs, GenParams(temperature, 0.9, 6, 1000 + k), answer_letters=LETTERS))
    return out


def test_logprobs_come_back_from_llama_cpp_server(llama_server, direct):
    # what the server really does: logprobs for chat completions, top 20 per token
    r0 = direct[0]
    assert r0.choices[0].logprobs is not None and r0.choices[0].logprobs.content
    assert len(r0.choices[0].logprobs.content[0].top_logprobs) == 20

    reqs = _few_shot_requests(0.0)
    backend = OpenAIBackend(MODEL, base_url=llama_server, concurrency=2, timeout_s=120)
    out = backend.complete(reqs, progress=False)
    assert all(not c.error for c in out)
    with_answer = 0
    for c in out:
        letter, status = parse.parse_bracket_letter(c.text, "ABCD")
        if c.text.startswith("[") and status == parse.OK:
            with_answer += 1
            assert isinstance(c.answer_logprob, float) and c.answer_logprob <= 0
            assert c.letter_logprobs[letter] == c.answer_logprob
            assert set(c.letter_logprobs) <= set(LETTERS) and len(c.letter_logprobs) >= 2
            assert all(v <= 0 for v in c.letter_logprobs.values())
            assert sum(math.exp(v) for v in c.letter_logprobs.values()) <= 1 + 1e-6
            # greedy: the chosen letter is the most likely one
            assert c.answer_logprob == max(c.letter_logprobs.values())
        elif "[" not in c.text:
            assert c.answer_logprob is None and c.letter_logprobs is None
    assert with_answer >= 1, [c.text for c in out]

    # the same numbers as the llamacpp backend's exact full-vocabulary log-probs
    from medaudit.llm.llamacpp import LlamaCppBackend

    local = LlamaCppBackend(MODEL, n_ctx=2048, n_threads=per_worker())
    ref = local.complete(reqs, progress=False)
    # (a prompt evaluated in batches of other shapes moves the log-probs by up
    # to ~0.07 here; a wrong position would be off by far more)
    compared = 0
    for c, e in zip(out, ref):
        if c.text == e.text and c.letter_logprobs and e.letter_logprobs:
            for L, v in c.letter_logprobs.items():
                assert v == pytest.approx(e.letter_logprobs[L], abs=0.2), (c.text, L)
                compared += 1
            best = lambda d: max(d, key=d.get)
            assert best(c.letter_logprobs) == best(e.letter_logprobs)
    assert compared >= 2


def test_no_logprobs_without_answer_letters(llama_server, monkeypatch):
    # a proxy in the environment (nothing listens on port 9) is not used for a local server
    for v in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(v, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    req = Request.chat([{"role": "user", "content": "Say hello."}], GenParams(0.0, 0.9, 4, 1))
    with FaultProxy(llama_server.rsplit("/v1", 1)[0], reject_logprobs=True) as proxy:
        c = OpenAIBackend(MODEL, base_url=proxy.base_url, timeout_s=120,
                          lookup_served=False).complete([req], progress=False)[0]
    assert not c.error and c.text
    assert c.answer_logprob is None and c.letter_logprobs is None
    assert proxy.injected["logprobs_rejected"] == 0 and proxy.forwarded == 1   # logprobs were not asked for


@pytest.mark.parametrize("status", [400, 500])
def test_server_that_rejects_logprobs(llama_server, direct, status):
    # 400: as the OpenAI API; 500: as llama_cpp.server started with --logits_all false
    upstream = llama_server.rsplit("/v1", 1)[0]
    reqs = REQUESTS[:2]
    with FaultProxy(upstream, reject_logprobs=status) as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, concurrency=1, timeout_s=120,
                                lookup_served=False)
        out = backend.complete(reqs, progress=False)
    assert [c.text for c in out] == [_text(r) for r in direct[:2]]
    assert all(not c.error and c.retries == 0 for c in out)
    assert all(c.answer_logprob is None and c.letter_logprobs is None for c in out)
    # rejected once, then never asked again
    assert proxy.injected["logprobs_rejected"] == 1 and proxy.forwarded == 2
    assert backend.logprobs_fallbacks == 1


# -- faults ----------------------------------------------------------------

def test_fault_injection(llama_server, direct):
    upstream = llama_server.rsplit("/v1", 1)[0]
    rates = {"429": 0.2, "500": 0.2, "slow": 0.1, "malformed": 0.1}
    bodies = [_create_kwargs(r) for r in REQUESTS]

    def plan(seed):
        p = FaultProxy(upstream, rates=rates, seed=seed)
        return [p.planned(b) for b in bodies]

    # the first seed whose plan has most requests meet a fault, every kind of
    # fault, and no request more than 5 (the plan depends on the requests'
    # text, so it is chosen here rather than fixed)
    seed = next(s for s in range(1000)
                if sum(map(bool, pl := plan(s))) >= 8 and max(map(len, pl)) <= 5
                and set(rates) <= {f for p in pl for f in p})
    planned = plan(seed)
    with FaultProxy(upstream, rates=rates, seed=seed, retry_after="1", slow_s=4.0) as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, concurrency=2, timeout_s=2.0,
                                max_retries=16, backoff_base_s=0.05, backoff_max_s=0.5, lookup_served=False)
        t0 = time.perf_counter()
        out = backend.complete(REQUESTS, progress=False)
        elapsed = time.perf_counter() - t0
    inj = proxy.injected
    assert all(not c.error for c in out), [c.error for c in out]
    assert [c.text for c in out] == [_text(r) for r in direct]
    assert [c.tokens_in for c in out] == [r.usage.prompt_tokens for r in direct]

    # every kind of fault was met, and most requests met at least one
    assert set(inj) == set(rates) and all(inj[f] >= 1 for f in rates), dict(inj)
    faults = [proxy.faults_for(b) for b in bodies]
    assert faults == [len(p) for p in planned]
    assert sum(f > 0 for f in faults) >= 8, faults
    assert sum(faults) == sum(inj.values())

    # each injected fault cost exactly one retry of the request that met it
    # (the proxy keeps forwarded requests alive, so no timeout comes from a
    # busy server: every timeout is an injected slow response)
    causes = backend.retry_causes
    assert dict(causes) == {"rate_limit": inj["429"], "server_error": inj["500"], "timeout": inj["slow"],
                            "malformed": inj["malformed"]}
    assert [c.retries for c in out] == faults
    assert backend.totals["retries"] == sum(faults) == sum(inj.values())
    assert backend.totals["failures"] == 0 and backend.totals["requests"] == len(REQUESTS)
    # every request reached the server exactly once: the faults were the proxy's
    assert proxy.forwarded == len(REQUESTS)
    assert proxy.abandoned == inj["slow"]          # the client hung up on every slow response
    assert elapsed < 600          # a hang guard only: the slow faults alone take seconds


def test_retry_after_is_honoured(llama_server):
    upstream = llama_server.rsplit("/v1", 1)[0]
    req = REQUESTS[0]
    with FaultProxy(upstream, script=["429"], retry_after="1") as proxy:
        # without Retry-After the backoff would be at most 1 ms
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, max_retries=3, backoff_base_s=0.001,
                                backoff_max_s=10, timeout_s=120, lookup_served=False)
        c = backend.complete([req], progress=False)[0]
    assert not c.error and c.retries == 1
    (t1, f1), (t2, f2) = proxy.arrivals
    assert (f1, f2) == ("429", "ok")
    assert 0.95 <= t2 - t1 < 15      # waited the second it was asked to (upper bound: a loaded machine)

    # a Retry-After longer than backoff_max_s is capped
    with FaultProxy(upstream, script=["429"], retry_after="30") as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, max_retries=3, backoff_base_s=0.001,
                                backoff_max_s=0.4, timeout_s=120, lookup_served=False)
        c = backend.complete([req], progress=False)[0]
    assert not c.error and c.retries == 1
    (t1, _), (t2, _) = proxy.arrivals
    assert 0.35 <= t2 - t1 < 15      # capped: far below the 30 s asked for


def test_gives_up_after_max_retries(tmp_path):
    # no upstream at all: every request gets a 500
    with FaultProxy(None, rates={"500": 1.0}) as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, max_retries=3, backoff_base_s=0.01,
                                backoff_max_s=0.05, timeout_s=10, lookup_served=False)
        seen = []
        out = backend.complete(REQUESTS[:2], progress=False, on_result=lambda i, c: seen.append(i))
        assert sorted(seen) == [0, 1]
        assert all(c.error and "InternalServerError" in c.error and "3 retries" in c.error for c in out)
        assert all(c.retries == 3 and c.text == "" and c.error_kind == "gave_up" for c in out)
        assert proxy.injected["500"] == 2 * (1 + 3) and proxy.forwarded == 0
        assert backend.totals["failures"] == 2 and backend.totals["retries"] == 6
        assert backend.retry_causes["server_error"] == 6

        # through runs.run: nothing is stored, so a rerun asks again
        samples = _samples(k=1, questions=QUESTIONS[:2])
        with ResponseStore(tmp_path / "r.sqlite") as store:
            report = runs.run(backend, store, samples, model=MODEL, progress=False)
            assert report.counts() == {"planned": 2, "cached": 0, "generated": 0, "failed": 2, "too_long": 0,
                                       "not_sent": 0}
            assert store.count() == 0
        # the failures by kind, in the backend's words
        (f,) = report.failures.itertuples(index=False)
        assert (f.kind, f.count) == ("gave_up", 2) and "HTTP 500" in f.error and "(injected)" in f.error
        assert backend.totals["failures"] == 4


def test_other_4xx_are_not_retried():
    with FaultProxy(None, script=["401"]) as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, max_retries=5, backoff_base_s=0.01,
                                lookup_served=False)
        c = backend.complete([REQUESTS[0]], progress=False)[0]
    assert c.error and "AuthenticationError" in c.error and "not retryable" in c.error
    assert c.error.startswith("HTTP 401") and "Incorrect API key provided" in c.error   # the server's words
    assert c.error_kind == "http_401"
    assert c.retries == 0 and proxy.requests == 1
    assert backend.totals["failures"] == 1


# -- the key -----------------------------------------------------------------

def test_api_key_never_leaks(llama_server, tmp_path, monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)   # openai, httpx and our own loggers at their most verbose
    env = "MEDAUDIT_TEST_API_KEY"
    monkeypatch.setenv(env, FAKE_KEY)
    upstream = llama_server.rsplit("/v1", 1)[0]
    completions: list[Completion] = []

    # through runs.run into a store, with a 429 then a malformed body on every
    # request's first attempts so the retry paths log too
    samples = _samples(k=2, questions=QUESTIONS[:2])
    db = tmp_path / "responses.sqlite"
    with FaultProxy(upstream, script=["429", "malformed"], retry_after="0") as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, api_key_env=env, concurrency=2,
                                timeout_s=120, backoff_base_s=0.01, backoff_max_s=0.05)
        assert backend._client.api_key == FAKE_KEY          # the key was read from the variable
        orig = backend.complete
        backend.complete = lambda reqs, **kw: completions.extend(orig(reqs, **kw)) or completions
        with ResponseStore(db) as store:
            counts = runs.run(backend, store, samples, model=MODEL, progress=True)
            assert counts["generated"] == 4 and store.count() == 4
            blobs = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name)}
        assert any(n.endswith("-wal") for n in blobs)        # the WAL file was looked at too
    # (the fifth 429 met the backend's GET /models at construction: the identity then goes without it)
    assert proxy.injected["429"] == 5 and proxy.injected["malformed"] == 4
    assert backend.totals["retries"] == 8

    # a server that echoes the Authorization header in its 401 message
    with FaultProxy(None, script=["401"]) as proxy:
        echo = OpenAIBackend(MODEL, base_url=proxy.base_url, api_key_env=env)
        bad = echo.complete([REQUESTS[0]], progress=True)[0]
    assert bad.error and "Incorrect API key provided" in bad.error and "***" in bad.error
    completions.append(bad)

    # the store after closing (WAL checkpointed into the main file) as well
    blobs.update({p.name + " (closed)": p.read_bytes() for p in tmp_path.iterdir()
                  if p.name.startswith(db.name)})
    key = FAKE_KEY.encode()
    for name, data in blobs.items():
        assert key not in data, name
        assert b"DO-NOT-LEAK" not in data, name
    for b in (backend, echo):
        assert FAKE_KEY not in repr(b) and FAKE_KEY not in str(b)
        assert FAKE_KEY not in repr(vars(b))
        with pytest.raises(TypeError):
            __import__("pickle").dumps(b)
    assert len(completions) == 5
    for c in completions:
        assert FAKE_KEY not in repr(c) and FAKE_KEY not in str(c.to_dict())
    captured = capsys.readouterr()
    assert FAKE_KEY not in captured.out and FAKE_KEY not in captured.err
    assert FAKE_KEY not in caplog.text
    assert all(FAKE_KEY not in str(r.args) for r in caplog.records)
    # the logs were captured, down to the openai client's and httpx's debug records
    names = {r.name.split(".")[0] for r in caplog.records}
    assert {"medaudit", "openai"} <= names and any(n.startswith("httpcore") for n in names), names


def test_api_key_comes_from_the_environment_only(monkeypatch):
    monkeypatch.delenv("MEDAUDIT_NO_SUCH_KEY", raising=False)
    with pytest.raises(RuntimeError, match="MEDAUDIT_NO_SUCH_KEY"):
        OpenAIBackend("gpt-4o-mini", api_key_env="MEDAUDIT_NO_SUCH_KEY")
    with pytest.raises(RuntimeError, match="MEDAUDIT_NO_SUCH_KEY"):
        OpenAIBackend("gpt-4o-mini", base_url="https://api.example.invalid/v1", api_key_env="MEDAUDIT_NO_SUCH_KEY")
    # a local server needs none
    b = OpenAIBackend("local", base_url="http://127.0.0.1:1/v1", api_key_env="MEDAUDIT_NO_SUCH_KEY")
    assert b.kind == "openai" and b.model_id == "local @ http://127.0.0.1:1/v1"   # nothing there: no GET /models
    assert b._client.api_key == "not-needed"


# -- pricing -----------------------------------------------------------------

def test_pricing(llama_server, direct):
    pricing = {"input_per_mtok": 2.5, "output_per_mtok": 10.0}
    # through a proxy that injects nothing, to see how many requests are in flight at once
    with FaultProxy(llama_server.rsplit("/v1", 1)[0]) as proxy:
        backend = OpenAIBackend(MODEL, base_url=proxy.base_url, concurrency=2, timeout_s=120,
                                pricing=pricing, lookup_served=False)
        out = backend.complete(REQUESTS[:3], progress=False)
    assert proxy.max_inflight == 2 and proxy.forwarded == 3 and not proxy.injected
    assert all(not c.error for c in out)
    for c, r in zip(out, direct):
        assert (c.tokens_in, c.tokens_out) == (r.usage.prompt_tokens, r.usage.completion_tokens)
        assert c.cost_usd == pytest.approx(c.tokens_in * 2.5e-6 + c.tokens_out * 10e-6, rel=1e-12)
        assert c.cost_usd > 0
    assert backend.totals["cost_usd"] == pytest.approx(sum(c.cost_usd for c in out))
    assert backend.cost(1_000_000, 1_000_000) == pytest.approx(12.5)


# -- the serving identity ------------------------------------------------------

def _ask(n: int = 1, max_tokens: int = 16, temperature: float = 0.7, letters=()) -> list[Request]:
    return [Request.chat([{"role": "user", "content": f"Question number {i}?"}],
                         GenParams(temperature, 0.9, max_tokens, i), answer_letters=letters) for i in range(n)]


def test_base_url_is_normalised():
    assert normalise_base_url(None) == "https://api.openai.com/v1"
    assert normalise_base_url("HTTPS://API.OpenAI.com:443/v1/") == "https://api.openai.com/v1"
    assert normalise_base_url("http://LocalHost:80/v1") == "http://localhost/v1"
    assert normalise_base_url("http://127.0.0.1:8001/v1/") == "http://127.0.0.1:8001/v1"
    assert normalise_base_url("https://host:8443/V1") == "https://host:8443/V1"      # the path is kept as is
    assert normalise_base_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert normalise_base_url("https://user:secret@host/v1") == "https://host/v1"    # credentials never kept


def test_keys_differ_by_port_and_not_by_spelling(caplog):
    caplog.set_level(logging.INFO, logger="medaudit")
    a, b = free_port(), free_port()
    # nothing listens there: GET /models fails, which is logged and does not stop construction
    one = OpenAIBackend("default", base_url=f"http://127.0.0.1:{a}/v1")
    two = OpenAIBackend("default", base_url=f"http://127.0.0.1:{b}/v1")
    same = OpenAIBackend("default", base_url=f"HTTP://127.0.0.1:{a}/v1/")
    assert one.model_id == f"default @ http://127.0.0.1:{a}/v1" and one.model_name == "default"
    assert "GET /models failed" in caplog.text
    req = _ask()[0]
    key = lambda be: request_key(be.kind, be.model_id, req, item_id="q1", k=0)
    assert key(one) != key(two)
    assert key(one) == key(same)


def test_served_identity_from_models(caplog):
    caplog.set_level(logging.INFO, logger="medaudit")
    # vLLM renames the checkpoint with --served-model-name but reports it as ``root``
    with FakeOpenAI(models=[{"id": "default", "object": "model", "created": 0, "owned_by": "vllm",
                             "root": "/ckpt/llama-3-8b"}], served_model="default") as fake:
        a = OpenAIBackend("default", base_url=fake.base_url)
        fake.models[0]["root"] = "/ckpt/qwen-2.5-7b"           # the same URL and name, another checkpoint
        b = OpenAIBackend("default", base_url=fake.base_url)
        # a list that does not hold the model: the URL and the name only
        fake.models = [{"id": "other-1", "object": "model", "created": 0, "owned_by": "x"},
                       {"id": "other-2", "object": "model", "created": 0, "owned_by": "x"}]
        c = OpenAIBackend("default", base_url=fake.base_url)
        assert fake.models_requests == 3            # once at construction, not per request
        out = a.complete(_ask(2), progress=False)
        assert fake.models_requests == 3
    assert a.model_id == f"default @ {fake.base_url} (served: /ckpt/llama-3-8b)"
    assert b.model_id == f"default @ {fake.base_url} (served: /ckpt/qwen-2.5-7b)"
    assert c.model_id == f"default @ {fake.base_url}"
    assert "does not list the model" in caplog.text
    assert all(not x.error and x.served_model == "default" for x in out)


def test_two_servers_with_the_same_model_name_never_share_answers(tmp_path):
    path = models.model_path(MODEL)
    with llama_server(path, tmp_path / "a.log", alias="default", n_ctx=512, n_threads=1) as url_a, \
            llama_server(path, tmp_path / "b.log", alias="default", n_ctx=512, n_threads=1) as url_b:
        a = OpenAIBackend("default", base_url=url_a, timeout_s=120)
        b = OpenAIBackend("default", base_url=url_b, timeout_s=120)
        req = Request.chat([{"role": "user", "content": "Say hello."}], GenParams(0.0, 0.9, 4, 1))
        ca = a.complete([req], progress=False)[0]
    assert a.model_id == f"default @ {url_a}" and b.model_id == f"default @ {url_b}"
    assert a.model_id != b.model_id
    assert request_key(a.kind, a.model_id, req) != request_key(b.kind, b.model_id, req)
    assert not ca.error and ca.text and ca.served_model


# -- failures explained, early stop, Ctrl-C --------------------------------------

def test_401_on_everything_stops_after_a_few_requests(monkeypatch):
    env = "MEDAUDIT_TEST_API_KEY"
    monkeypatch.setenv(env, FAKE_KEY)
    message = "Incorrect API key provided. You can find your API key at the dashboard."
    with FakeOpenAI(status=401, message=message) as fake:
        backend = OpenAIBackend("fake-model", base_url=fake.base_url, api_key_env=env, concurrency=4)
        seen: list[tuple[int, Completion]] = []
        with pytest.raises(BackendStopped) as stopped:
            backend.complete(_ask(100), progress=False, on_result=lambda i, c: seen.append((i, c)))
        reached = fake.chat_requests
    # stopped after a few of the 100 (counted, not timed: the machine may be loaded)
    assert 3 <= reached < 10, reached
    summary = stopped.value.summary
    assert "401" in summary and message in summary and FAKE_KEY not in summary
    assert f"Sent {reached} of 100 requests: {len(seen)} failed, 0 succeeded" in summary
    first = int(re.search(r"the first to fail this way was request (\d+) of the batch", summary)[1])
    assert first in {i for i, _ in seen}
    # every request that reached the server came back through on_result, explained
    assert len(seen) == reached
    for _, c in seen:
        assert c.error_kind == "http_401" and c.error.startswith("HTTP 401") and message in c.error
        assert c.retries == 0 and c.text == ""


def test_server_down_stops_after_the_same_gave_up():
    # nothing listens on the port: every request gives up on the same refused connection
    backend = OpenAIBackend("fake-model", base_url=f"http://127.0.0.1:{free_port()}/v1", concurrency=2,
                            max_retries=1, backoff_base_s=0.01, backoff_max_s=0.02)
    seen: list[Completion] = []
    with pytest.raises(BackendStopped) as stopped:
        backend.complete(_ask(50), progress=False, on_result=lambda i, c: seen.append(c))
    assert 3 <= len(seen) < 10
    gave_up = [c for c in seen if c.error_kind == "gave_up"]
    assert len(gave_up) >= 3 and all("gave up after 1 retries" in c.error for c in gave_up)
    assert "APIConnectionError" in gave_up[0].error and "refused" in gave_up[0].error.lower()
    # a request caught waiting to retry when the batch stopped says so
    assert all(c.error_kind == "interrupted" for c in seen if c not in gave_up)
    assert "[gave_up]" in stopped.value.summary and "refused" in stopped.value.summary.lower()


def test_different_failures_do_not_stop_the_batch():
    # failures alternating with successes: nothing in a row, every request gets its answer
    with FakeOpenAI() as fake:
        backend = OpenAIBackend("fake-model", base_url=fake.base_url, concurrency=1, stop_after=2)
        answer = fake.answer

        def every_other(body):      # 404 on odd seeds, answers on even ones
            return (404, {"error": {"message": "not here"}}, {}) if body["seed"] % 2 else answer(body)

        fake.answer = every_other
        out = backend.complete(_ask(8), progress=False)
    assert [bool(c.error) for c in out] == [False, True] * 4
    assert all(c.error_kind == "http_404" for c in out[1::2])


def test_a_200_without_an_answer_is_a_failure():
    with FakeOpenAI(content=None) as fake:
        backend = OpenAIBackend("fake-model", base_url=fake.base_url, max_retries=2, backoff_base_s=0.01)
        c = backend.complete(_ask(1), progress=False)[0]
        assert fake.chat_requests == 3                   # retried like a malformed body
        assert c.error_kind == "no_content" and "without message content" in c.error and c.retries == 2
        assert backend.retry_causes["no_content"] == 2 and backend.totals["failures"] == 1

        fake.content, fake.finish_reason = "[A] half an answer", "error"
        c = backend.complete(_ask(1), progress=False)[0]
        assert c.error_kind == "no_content" and "finish_reason 'error'" in c.error and c.text == ""

        # a refusal is the model's answer; "length" and "content_filter" are answers with their reason
        fake.content, fake.refusal, fake.finish_reason = None, "I cannot help with that.", "stop"
        c = backend.complete(_ask(1), progress=False)[0]
        assert not c.error and c.text == "I cannot help with that."
        fake.content, fake.refusal = "", None
        for reason in ("length", "content_filter"):
            fake.finish_reason = reason
            c = backend.complete(_ask(1), progress=False)[0]
            assert not c.error and c.text == "" and c.finish_reason == reason


def test_ctrl_c_stops_without_waiting_out_retry_after(tmp_path):
    """Ctrl-C while every worker waits out a 10-minute Retry-After ends the
    batch at once. The bound (120 s) is far above what a loaded 2-core machine
    needs to deliver a signal and far below the 600 s the workers would wait."""
    retry_after_s = 600
    with FakeOpenAI(status=503, message="The server is overloaded.", retry_after=str(retry_after_s),
                    delay_s=0.3) as fake:
        err = tmp_path / "stderr.txt"
        child = subprocess.Popen([sys.executable, str(Path(__file__).parent / "support" / "openai_interrupt_child.py"),
                                  fake.base_url, str(retry_after_s)], stdout=subprocess.PIPE, stderr=open(err, "wb"),
                                 text=True)
        try:
            assert child.stdout.readline().strip() == "READY", err.read_text()[-3000:]
            t_ready = time.monotonic()
            # every worker has had its 503 (the server counts the answers it sent), then waits to retry
            while len(fake.statuses) < 4 and time.monotonic() - t_ready < 300 and child.poll() is None:
                time.sleep(0.05)
            time.sleep(1.0)
            assert len(fake.statuses) >= 4 and child.poll() is None, err.read_text()[-3000:]
            sent_before = fake.chat_requests
            t_sig = time.monotonic()
            child.send_signal(signal.SIGINT)
            rc = child.wait(timeout=300)
            took = time.monotonic() - t_sig
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert rc == 130 and child.stdout.read().strip() == "INTERRUPTED", err.read_text()[-3000:]
    assert took < retry_after_s / 5, took
    assert fake.chat_requests == sent_before == 4     # no retry and nothing new was sent


# -- reasoning models ----------------------------------------------------------

def test_reasoning_style_by_name():
    with pytest.raises(ValueError, match="api_style"):
        OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_style="fast")
    with FakeOpenAI(model="gpt-5-mini", reasoning=True, reasoning_tokens=100,
                    reasoning_by_effort={"low": 30}, served_model="gpt-5-mini-2025-08-07") as fake:
        backend = OpenAIBackend("gpt-5-mini", base_url=fake.base_url, reasoning_effort="low")
        out = backend.complete(_ask(2, max_tokens=16, letters=LETTERS), progress=False)
        assert fake.statuses == [200, 200]                   # the first request was already right
        body = fake.bodies[0]
        assert body["max_completion_tokens"] == 16 + 1024 and body["reasoning_effort"] == "low"
        assert not {"max_tokens", "temperature", "top_p", "logprobs"} & set(body)
        assert backend.model_id == f"gpt-5-mini @ {fake.base_url} [reasoning api: budget 1024, effort low]"
        for c in out:
            assert not c.error and c.text == "[B] because it is the fake answer"
            assert c.settings == {"max_completion_tokens": 1040, "reasoning_effort": "low"}
            assert c.tokens_out == 30 + 7 and c.served_model == "gpt-5-mini-2025-08-07"

        # the style named explicitly, whatever the name; another budget is another identity
        other = OpenAIBackend("gpt-5-mini", base_url=fake.base_url, api_style="reasoning", reasoning_budget=128)
        assert other.model_id == f"gpt-5-mini @ {fake.base_url} [reasoning api: budget 128]"
        c = other.complete(_ask(1, max_tokens=16), progress=False)[0]
        assert not c.error and c.settings == {"max_completion_tokens": 144} and fake.bodies[-1]["seed"] == 0

        # an explicit "chat" is honoured: the 400 is the answer, and it stops the batch
        chat = OpenAIBackend("gpt-5-mini", base_url=fake.base_url, api_style="chat")
        assert chat.model_id == f"gpt-5-mini @ {fake.base_url}"
        seen = []
        with pytest.raises(BackendStopped) as stopped:
            chat.complete(_ask(20), progress=False, on_result=lambda i, c: seen.append(c))
    assert seen[0].error_kind == "http_400" and "Use 'max_completion_tokens' instead" in seen[0].error
    assert "HTTP 400" in stopped.value.summary and len(seen) < 10


@pytest.mark.parametrize("rejects", [("max_tokens", "temperature", "top_p", "logprobs"), ("temperature",)])
def test_reasoning_style_learned_from_a_400(tmp_path, caplog, rejects):
    caplog.set_level(logging.WARNING, logger="medaudit")
    with FakeOpenAI(model="house-reasoner", reasoning=True, rejects=rejects, reasoning_tokens=20) as fake:
        backend = OpenAIBackend("house-reasoner", base_url=fake.base_url, concurrency=2)
        chat_id = backend.model_id
        assert chat_id == f"house-reasoner @ {fake.base_url}"     # a name "auto" does not know
        samples = _samples(k=2, max_tokens=8, questions=QUESTIONS[:3], model_id=chat_id)
        with ResponseStore(tmp_path / "r.sqlite") as store:
            report = runs.run(backend, store, samples, model="house-reasoner", progress=False)
            rows = store.frame()
    assert report["generated"] == 6 and report["failed"] == 0
    assert backend.model_id == chat_id + " [reasoning api: budget 1024]"
    # one rejected request per worker at most, each sent again at once; then reasoning style only
    assert 1 <= fake.statuses.count(400) <= 2 and fake.statuses.count(200) == 6
    assert all("max_completion_tokens" in b for b, st in zip(fake.bodies, fake.statuses) if st == 200)
    assert "api_style: reasoning" in caplog.text
    # stored under keys of the identity that answered, with the settings sent
    assert set(rows["key"]) == {s.key for s in samples}
    assert all(s.key == request_key("openai", backend.model_id, s.request, item_id=s.item_id,
                                    condition=s.condition, prompt_format=s.prompt_format, k=s.k, perm=s.perm)
               for s in samples)
    assert set(rows["model_id"]) == {backend.model_id} and set(rows["max_tokens"]) == {8 + 1024}
    assert rows["temperature"].isna().all()


def test_reasoning_budget_used_up_is_a_failure():
    with FakeOpenAI(model="o3-mini", reasoning=True, reasoning_tokens=500) as fake:
        backend = OpenAIBackend("o3-mini", base_url=fake.base_url, reasoning_budget=100, max_retries=3)
        c = backend.complete(_ask(1, max_tokens=16), progress=False)[0]
        assert fake.chat_requests == 1                              # not retried
        assert c.error_kind == "reasoning_budget" and c.text == "" and c.finish_reason == "length"
        assert "116 reasoning tokens of 116" in c.error and "reasoning_budget" in c.error
        assert c.tokens_out == 116 and backend.totals["tokens_out"] == 116   # spent all the same
        assert backend.totals["failures"] == 1

        # room left after the reasoning: an answer; too little: the answer cut, with its reason
        roomy = OpenAIBackend("o3-mini", base_url=fake.base_url)
        c = roomy.complete(_ask(1, max_tokens=16), progress=False)[0]
        assert not c.error and c.text == "[B] because it is the fake answer" and c.tokens_out == 507
        tight = OpenAIBackend("o3-mini", base_url=fake.base_url, reasoning_budget=500)
        c = tight.complete(_ask(1, max_tokens=3), progress=False)[0]
        assert not c.error and c.text == "[B] because it" and c.finish_reason == "length"
        assert c.settings == {"max_completion_tokens": 503} and c.tokens_out == 503


# -- the pieces, without a server ---------------------------------------------

def _tok(token, logprob, alts=()):
    return SimpleNamespace(token=token, logprob=logprob,
                           top_logprobs=[SimpleNamespace(token=t, logprob=v) for t, v in alts])


def test_answer_position_forms():
    # "[B" in one token: the other merged forms are the candidates
    content = [_tok("The", -0.1), _tok(" [B", -0.5, [(" [B", -0.5), (" [A", -1.0), ("[C", -2.0), (" [D", -3.0)]),
               _tok("]", -0.01)]
    assert answer_position(content, LETTERS) == (-0.5, {"B": -0.5, "A": -1.0, "D": -3.0})
    content = [_tok("[C", -0.7, [("[C", -0.7), ("[A", -1.1), ("The", -2.0)]), _tok("]", 0.0)]
    assert answer_position(content, LETTERS) == (-0.7, {"C": -0.7, "A": -1.1})
    # "[" then "D": the plain letters at the next position
    content = [_tok("[", -0.2, [("[", -0.2)]), _tok("D", -0.9, [("A", -0.8), ("D", -0.9), ("B", -2.5)]),
               _tok("]", 0.0)]
    assert answer_position(content, LETTERS) == (-0.9, {"A": -0.8, "D": -0.9, "B": -2.5})
    # the chosen letter outside the top-k still gets its own log-prob
    content = [_tok(" [", -0.2), _tok("C", -6.0, [("A", -0.1)])]
    assert answer_position(content, LETTERS) == (-6.0, {"A": -0.1, "C": -6.0})
    # "[X]" copied from the prompt: no answer, but the letters there
    content = [_tok("[", -0.2), _tok("X", -0.3, [("X", -0.3), ("A", -1.5)]), _tok("]", 0.0)]
    assert answer_position(content, LETTERS) == (None, {"A": -1.5})
    # no bracket, a word starting with a letter, a cut-off bracket, no logprobs
    assert answer_position([_tok("B", -0.1), _tok(".", -0.2)], LETTERS) == (None, None)
    assert answer_position([_tok("[Because", -0.1)], LETTERS) == (None, None)
    assert answer_position([_tok("A", -0.1), _tok(" [", -0.2)], LETTERS) == (None, None)
    assert answer_position(None, LETTERS) == (None, None)
    # a letter that is not an option is not an answer
    assert answer_position([_tok("[E", -0.3, [("[A", -1.0)])], LETTERS) == (None, None)


def test_retry_after_parsing_and_backoff():
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None and retry_after_s(None) is None
    from email.utils import formatdate
    assert 3 <= retry_after_s({"retry-after": formatdate(time.time() + 5, usegmt=True)}) <= 5
    b = OpenAIBackend("local", base_url="http://localhost:1/v1", backoff_base_s=0.5, backoff_max_s=3)
    for attempt, cap in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (10, 3.0)]:
        waits = [b._backoff(attempt) for _ in range(200)]
        assert all(0 <= w <= cap for w in waits)
        assert max(waits) > cap * 0.7      # full jitter spreads over the whole range
