"""The transformers backend on the real SmolLM2-135M GGUF (loaded offline).

transformers dequantises the Q4_1 file to float32 on load: about 0.5 GB for
this 135M model, loaded in seconds. Needs the `hf` extra (torch, transformers,
gguf) and the model package (`make setup`); skipped without them.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"          # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import dataclasses
import math
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from medaudit.llm import mcq, models
from medaudit.llm.base import Backend, GenParams, Request

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
LETTERS = ("A", "B", "C", "D")


@pytest.fixture(scope="module")
def backend(hf_tiny):
    """conftest's session-wide transformers backend (SmolLM2-135M, one thread)."""
    assert MODEL == "smollm2-135m"
    return hf_tiny


def mcq_request(item, params: GenParams, shots: list[dict] = ()) -> Request:
    perm = mcq.permutation("ABCD", 0, item.item_id, "test", 0)
    msgs = list(shots) + mcq.build_messages("mcq", item.question, item.options, perm)
    return Request.chat(msgs, params, answer_letters=LETTERS)


@pytest.fixture(scope="module")
def one_shot(medqa4) -> list[dict]:
    """One worked example answered "[D]": without it this small model never
    opens a bracket, so there would be no answer position to test."""
    ex = medqa4.iloc[10]
    assert ex["answer_idx"] == "D"
    return mcq.build_messages("mcq", ex["question"], ex["options"], "ABCD") + [
        {"role": "assistant", "content": "[D]"}]


def test_loads_offline_from_registry_gguf(backend):
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert isinstance(backend, Backend)
    assert backend.kind == "transformers"
    assert backend.model_id == models.model_sha256(MODEL)
    assert backend.path == str(models.model_path(MODEL))
    assert backend.model.dtype == torch.float32          # dequantised
    assert backend.tokenizer.chat_template


def test_unknown_model_and_missing_files_fail_before_loading(tmp_path):
    from medaudit.llm.hf import TransformersBackend

    with pytest.raises(KeyError, match="not in params/models.yaml"):
        TransformersBackend("no-such-model")
    with pytest.raises(FileNotFoundError):
        TransformersBackend("x", path=str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        TransformersBackend("x", path=str(tmp_path), gguf_file="missing.gguf")


def test_mcq_requests_give_completions(backend, medqa4):
    reqs = [mcq_request(medqa4.iloc[i], GenParams(0.7, 0.9, 12, 100 + i)) for i in range(3)]
    seen = []
    out = backend.complete(reqs, progress=False, on_result=lambda i, c: seen.append(i))
    assert sorted(seen) == [0, 1, 2]           # each once, as its batch finishes (batches grouped by length)
    assert len(out) == 3
    for r, c in zip(reqs, out):
        assert c.text and not c.error
        assert c.tokens_in == len(backend.prompt_ids(r)) > 100
        assert 0 < c.tokens_out <= 12
        assert c.finish_reason in ("stop", "length")
        assert c.latency_s > 0


def test_same_seed_same_text(backend, medqa4):
    req = mcq_request(medqa4.iloc[0], GenParams(0.7, 0.9, 12, 42))
    a, b = backend.complete([req, req], progress=False)
    assert (a.text, a.tokens_out) == (b.text, b.tokens_out)


def test_different_seeds_can_differ(backend, medqa4):
    base = mcq_request(medqa4.iloc[0], GenParams(0.7, 0.9, 8, 0))
    reqs = [dataclasses.replace(base, params=GenParams(0.7, 0.9, 8, s)) for s in range(5)]
    texts = [c.text for c in backend.complete(reqs, progress=False)]
    assert len(set(texts)) > 1, texts


def test_temperature_zero_is_greedy_and_deterministic(backend, medqa4):
    base = mcq_request(medqa4.iloc[1], GenParams(0.0, 0.9, 8, 1))
    reqs = [base, dataclasses.replace(base, params=GenParams(0.0, 0.9, 8, 2)), base]
    texts = [c.text for c in backend.complete(reqs, progress=False)]
    assert len(set(texts)) == 1, texts


def test_letter_logprobs_at_the_answer_position(backend, medqa4, one_shot):
    found = []
    for s in range(8):
        req = mcq_request(medqa4.iloc[s % 2], GenParams(0.7, 0.9, 4, s), shots=one_shot)
        c = backend.complete([req], progress=False)[0]
        if c.letter_logprobs is not None:
            found.append((req, c))
        if len(found) == 2:
            break
    assert found, "the model never opened a bracket: no answer position to check"
    for req, c in found:
        lp = c.letter_logprobs
        assert set(lp) == set(LETTERS)
        assert all(v <= 0 for v in lp.values())
        assert math.log(sum(math.exp(v) for v in lp.values())) <= 1e-9   # a sub-distribution
        letter = re.search(r"\[([A-D])", c.text).group(1)                   # "[B]" → "B"
        assert c.answer_logprob == lp[letter]

    # exact: the full-vocabulary log-softmax of the logits after "prompt + '['"
    # (SmolLM2 writes "[B" as two tokens, "[" then "B")
    req, c = found[0]
    assert c.text.startswith("[")
    ids = backend.prompt_ids(req) + backend.tokenizer.encode("[", add_special_tokens=False)
    with torch.inference_mode():
        logits = backend.model(torch.tensor([ids])).logits[0, -1].double()
    ref = torch.log_softmax(logits, -1)
    _, _, plain = backend._letter_ids(LETTERS)
    for L in LETTERS:
        assert c.letter_logprobs[L] == pytest.approx(float(ref[plain[L]]), abs=1e-4)
