"""The vLLM backend: the real engine where vLLM is installed, and our own
control flow everywhere.

Where vLLM is importable (``pip install '.[vllm]'`` on a CUDA machine),
``test_the_real_vllm_engine_generates`` builds :class:`VLLMBackend` itself —
a real ``vllm.LLM`` on a tiny random Qwen2 checkpoint saved with the embedded
model's tokenizer, no download — and generates with it. Where vLLM is absent
that test is skipped with the reason "vLLM not installed: the real-engine test
was not run", which tests/skips.toml allows and every run's summary lists.

The other tests need no vLLM and run everywhere: the module imports without
it, building the backend without it says how to install it, the per-request
sampling settings and the answer-position log-probs are built correctly, and
(``test_own_control_flow_*``, a backend made without an engine) the requests go
in chunks whose results are handed over before an interrupt."""
from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

from medaudit.llm.base import GenParams, Request

ROOT = Path(__file__).resolve().parents[1]
VLLM_ABSENT = ("vLLM not installed: the real-engine test was not run "
               "(pip install '.[vllm]' on a CUDA machine runs it)")


def test_module_imports_without_importing_vllm():
    code = ("import sys; import medaudit.llm.vllm_backend as m; "
            "assert 'vllm' not in sys.modules, 'vllm imported'; print(m.VLLMBackend.kind)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "vllm"


def test_building_the_backend_without_vllm_raises_with_the_install_hint(monkeypatch):
    from medaudit.llm.vllm_backend import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)      # vLLM absent, whether or not it is installed
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


def test_own_control_flow_requests_go_in_chunks_and_finished_chunks_are_handed_over_before_an_interrupt():
    """Our chunking only, with a stand-in engine (the real one:
    test_the_real_vllm_engine_generates)."""
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


def _tiny_checkpoint(folder: Path) -> Path:
    """A Qwen2 checkpoint with random weights (2 layers, hidden 128, two heads
    of 64) and the embedded model's tokenizer with its chat template, saved
    where vLLM loads it without a download."""
    from medaudit.llm import random_model

    tok = random_model.embedded_tokenizer()
    cfg = random_model.shape_config("tiny", tok)
    cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size = 128, 2, 1, 256
    cfg.max_position_embeddings = 2048
    random_model.random_model(cfg, "cpu", "float32", seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# the engine's start (CUDA graphs off) takes half a minute or more
@pytest.mark.slow
def test_the_real_vllm_engine_generates(tmp_path):
    """VLLMBackend built by its own constructor on a real vllm.LLM: every
    request is answered in order, its prompt counted by the chat template,
    its reply within max_tokens; a greedy request and a seeded one repeat
    exactly; the per-token log-probs the engine returns have the shape
    answer_logprobs reads (one top-k dict per generated token, holding it)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip(VLLM_ABSENT)
    from medaudit.llm.models import folder_sha256
    from medaudit.llm.vllm_backend import TOP_LOGPROBS, VLLMBackend, _lp, answer_logprobs

    folder = _tiny_checkpoint(tmp_path / "tiny-qwen2")
    be = VLLMBackend(str(folder), chunk_size=2, dtype="float16", gpu_memory_utilization=0.3,
                     max_model_len=1024, enforce_eager=True, seed=0)
    assert be.model_id == folder_sha256(folder)
    msgs = [{"role": "system", "content": "Answer with the letter in brackets."},
            {"role": "user", "content": "Which is a vowel?\nA. b\nB. e\nC. k\nD. t"}]
    reqs = [Request.chat(msgs, GenParams(0.0, 1.0, 8, 1), answer_letters=("A", "B", "C", "D")),
            Request.chat(msgs, GenParams(0.9, 0.95, 12, 7)),
            Request.chat(msgs[1:], GenParams(0.9, 0.95, 12, 8))]
    seen = {}
    out = be.complete(reqs, progress=False, on_result=lambda i, c: seen.setdefault(i, c))
    assert len(out) == 3 and sorted(seen) == [0, 1, 2]
    for r, c in zip(reqs, out):
        prompt = be.tokenizer.apply_chat_template(r.message_dicts(), tokenize=False, add_generation_prompt=True)
        assert c.tokens_in == len(be.tokenizer.encode(prompt, add_special_tokens=False))
        assert 0 <= c.tokens_out <= r.params.max_tokens and c.finish_reason in ("stop", "length")
        assert isinstance(c.text, str) and c.latency_s > 0
    assert out[0].tokens_in == out[1].tokens_in != out[2].tokens_in    # the messages, not the settings, count
    again = be.complete(reqs[:2], progress=False)
    assert [c.text for c in again] == [c.text for c in out[:2]]          # greedy, and seeded, repeat

    o = be.llm.chat([msgs], sampling_params=[be._SamplingParams(n=1, temperature=0.0, max_tokens=6,
                                                               logprobs=TOP_LOGPROBS)], use_tqdm=False)[0]
    g = o.outputs[0]
    assert len(g.logprobs) == len(g.token_ids) > 0
    for tid, step in zip(g.token_ids, g.logprobs):
        assert tid in step and 1 <= len(step) <= TOP_LOGPROBS + 1
        assert all(_lp(v) <= 0.0 for v in step.values())
    pieces = [be.tokenizer.decode([t], skip_special_tokens=True) for t in g.token_ids]
    chosen, dist = answer_logprobs(list(g.token_ids), g.logprobs, pieces, be._forms(("A", "B", "C", "D")))
    assert (chosen, dist) == (None, None) or (dist and all(v <= 0.0 for v in dist.values()))
