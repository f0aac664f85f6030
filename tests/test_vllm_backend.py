"""The vLLM backend without vLLM: the module imports, building the backend
says how to install it, and the per-request sampling settings and the
answer-position log-probs are built correctly (no GPU, no model)."""
from __future__ import annotations

import importlib
import importlib.util
import math
import sys

import pytest

from medaudit.llm.base import GenParams, Request

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                                reason="vLLM is installed: these tests are for machines without it")


def test_module_imports_without_vllm():
    mod = importlib.import_module("medaudit.llm.vllm_backend")
    assert "vllm" not in sys.modules
    assert mod.VLLMBackend.kind == "vllm"


def test_building_the_backend_raises_with_the_install_hint():
    from medaudit.llm.vllm_backend import VLLMBackend

    with pytest.raises(ImportError, match=r"pip install '\.\[vllm\]'") as e:
        VLLMBackend("Qwen/Qwen2.5-0.5B-Instruct")
    assert "GPU" in str(e.value)


def test_build_vllm_requests_sampling_kwargs():
    from medaudit.llm.vllm_backend import build_vllm_requests

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q1?"}]
    reqs = [
        Request.chat(msgs, GenParams(0.7, 0.9, 16, 11), answer_letters=("A", "B", "C", "D")),
        Request.chat(msgs[1:], GenParams(0.0, 1.0, 5, 12)),
        Request.chat(msgs, GenParams(1.0, 0.95, 512, 2**31 - 1), answer_letters=("A", "B", "C", "D", "E")),
    ]
    built = build_vllm_requests(reqs)
    assert len(built) == 3
    assert [m for m, _ in built] == [msgs, msgs[1:], msgs]          # order and content kept
    assert built[0][1] == {"n": 1, "temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "seed": 11,
                           "logprobs": 20}
    assert built[1][1] == {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 5, "seed": 12}
    assert built[2][1]["seed"] == 2**31 - 1 and built[2][1]["logprobs"] == 20
    assert build_vllm_requests([]) == []


class _Logprob:                       # the shape of vllm.sequence.Logprob
    def __init__(self, logprob: float):
        self.logprob = logprob


def test_answer_logprobs_from_top_k():
    """"[" then a letter; letters outside the returned top-k are absent."""
    from medaudit.llm.vllm_backend import answer_logprobs

    forms = ({}, {}, {"A": 10, "B": 11, "C": 12, "D": 13})      # "[X" is two tokens
    gen, pieces = [5, 11, 6], ["[", "B", "]"]
    steps = [{5: _Logprob(-0.1)},
             {11: _Logprob(-0.5), 10: _Logprob(-1.5), 12: _Logprob(-2.0), 99: _Logprob(-3.0)},  # no D
             {6: _Logprob(-0.01)}]
    chosen, dist = answer_logprobs(gen, steps, pieces, forms)
    assert chosen == -0.5
    assert dist == {"A": -1.5, "B": -0.5, "C": -2.0}
    assert math.log(sum(math.exp(v) for v in dist.values())) <= 0

    merged = ({"A": 20, "B": 21}, {}, {"A": 10, "B": 11})       # "[A" as one token
    assert answer_logprobs([20, 6], [{20: -0.2, 21: -1.9}, {6: 0.0}], ["[A", "]"], merged) == (
        -0.2, {"A": -0.2, "B": -1.9})
    assert answer_logprobs([7, 8], [{7: -0.1}, {8: -0.1}], ["The", " answer"], forms) == (None, None)
    assert answer_logprobs(gen, None, pieces, forms) == (None, None)   # no logprobs asked for


class _Out:                           # the shape of vllm.RequestOutput (one completion)
    def __init__(self, text: str):
        self.prompt_token_ids = [1, 2, 3]
        self.outputs = [type("Gen", (), {"text": text, "token_ids": [7, 8], "finish_reason": "length",
                                         "logprobs": None})()]


class _ChunkedEngine:
    """Stands in for ``vllm.LLM`` (not installed here): answers each chat
    call with the messages' text, and is interrupted on its third call."""

    def __init__(self):
        self.calls = []

    def chat(self, messages, sampling_params, use_tqdm=True):
        self.calls.append(len(messages))
        if len(self.calls) == 3:
            raise KeyboardInterrupt
        assert len(sampling_params) == len(messages)
        return [_Out(m[-1]["content"]) for m in messages]


def test_requests_go_in_chunks_and_finished_chunks_are_handed_over_before_an_interrupt():
    from medaudit.llm.vllm_backend import VLLMBackend

    be = object.__new__(VLLMBackend)          # no engine: only the chunking is under test
    be.chunk_size, be.llm, be._SamplingParams, be.eos_ids = 4, _ChunkedEngine(), dict, set()
    reqs = [Request.chat([{"role": "user", "content": f"q{i}"}], GenParams(0.7, 0.9, 8, i)) for i in range(10)]
    seen = {}
    with pytest.raises(KeyboardInterrupt):
        be.complete(reqs, progress=False, on_result=lambda i, c: seen.setdefault(i, c.text))
    assert be.llm.calls == [4, 4, 2]                        # chunks of 4 in request order
    assert seen == {i: f"q{i}" for i in range(8)}           # the two finished chunks, by request index

    be.llm = _ChunkedEngine()
    be.chunk_size = 100
    with pytest.raises(ValueError, match="chunk_size"):
        VLLMBackend("m", chunk_size=0)
    assert [c.text for c in be.complete(reqs[:5], progress=False)] == [f"q{i}" for i in range(5)]
    assert be.llm.calls == [5]
