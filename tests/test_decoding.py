"""A model's own decoding: "default generation
configurations" (seed 002 §3.3) and seed 003's authors' pipelines mean each
model's own generation config, read as transformers reads it; an API model
gets no sampling parameter; top-k and a repetition penalty reach every
backend and the store key, and leave the keys of settings without them
unchanged."""
from __future__ import annotations

import hashlib
from pathlib import Path
import json

import pytest

from medaudit.llm import decoding
from medaudit.llm import dispatch, models
from medaudit.llm.base import GenParams, Request, request_key
from support.fake_openai import FakeOpenAI

QWEN = {"name": "qwen2.5-coder-1.5b", "backend": "llamacpp", "model": "qwen2.5-coder-1.5b"}


def test_transformers_reading_of_a_generation_config():
    # no do_sample: transformers decodes greedily whatever the temperature says
    d = decoding.from_generation_config({"temperature": 0.6, "top_p": 0.9}, "x")
    assert (d.temperature, d.top_p, d.top_k) == (0.0, 1.0, 0) and "greedy" in d.source
    # a repetition penalty applies to greedy decoding too
    assert decoding.from_generation_config({"repetition_penalty": 1.2}, "x").repetition_penalty == 1.2
    # sampling: a key left out takes transformers' default (top_k 50, top_p 1.0)
    d = decoding.from_generation_config({"do_sample": True, "temperature": 0.6}, "x")
    assert (d.temperature, d.top_p, d.top_k, d.repetition_penalty) == (0.6, 1.0, 50, 1.0)
    with pytest.raises(decoding.DecodingError, match="x: a sampling setting is not a number"):
        decoding.from_generation_config({"do_sample": True, "temperature": "hot"}, "x")


def test_registry_models_decode_as_their_upstream_config():
    g = decoding.own_params(QWEN, 100, seed=3)
    assert (g.temperature, g.top_p, g.top_k, g.repetition_penalty, g.max_tokens, g.seed) == (0.7, 0.8, 20, 1.1, 100, 3)
    assert "params/models.yaml" in decoding.own(QWEN).source
    # SmolLM2's config sets no sampling: greedy
    assert decoding.own({"name": "s", "backend": "llamacpp", "model": "smollm2-135m"}).temperature == 0.0
    # the profile's own generation_config wins over the registry
    spec = {**QWEN, "generation_config": {"do_sample": True, "temperature": 0.3, "top_p": 0.5}}
    assert (decoding.own(spec).temperature, decoding.own(spec).top_k) == (0.3, 50)


def test_an_api_model_gets_no_sampling_parameter():
    spec = {"name": "gpt-4o", "backend": "openai", "model": "gpt-4o"}
    g = decoding.own_params(spec, 64)
    assert g.temperature is None and g.top_p is None and "server" in decoding.own(spec).describe()
    req = Request.chat([{"role": "user", "content": "hi"}], g)
    from medaudit.llm.openai_backend import OpenAIBackend

    with FakeOpenAI(content="fine") as fake:
        backend = OpenAIBackend("fake-model", base_url=fake.base_url)
        body, _ = dispatch.body_for(backend, req)
        assert "temperature" not in body and "top_p" not in body and body["max_tokens"] == 64
        assert backend.complete([req], progress=False)[0].text == "fine"
        assert "temperature" not in fake.bodies[-1] and "top_p" not in fake.bodies[-1]
        # top-k and a repetition penalty go to the server (a vLLM server takes them)
        req2 = Request.chat([{"role": "user", "content": "hi"}], decoding.own_params(QWEN, 8))
        backend.complete([req2], progress=False)
        sent = fake.bodies[-1]
        assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["repetition_penalty"]) == (0.7, 0.8, 20, 1.1)
        assert dispatch.body_for(backend, req2)[0]["top_k"] == 20      # a batch file carries them too


def test_a_local_backend_refuses_the_server_default():
    with pytest.raises(ValueError, match="resolve a local model's own settings first"):
        GenParams(None, None, 8).local("llamacpp")


def test_store_keys_without_the_new_settings_are_unchanged():
    req = Request.chat([{"role": "user", "content": "q"}], GenParams(0.7, 0.9, 16, 5), answer_letters=("A", "B"))
    old = {"backend": "llamacpp", "model": "m", "messages": req.messages,
           "params": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "seed": 5},
           "answer_letters": req.answer_letters, "meta": {"k": 0}}
    before = hashlib.sha256(json.dumps(old, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()
    assert request_key("llamacpp", "m", req, k=0) == before
    topk = Request(req.messages, GenParams(0.7, 0.9, 16, 5, top_k=20), req.answer_letters)
    rep = Request(req.messages, GenParams(0.7, 0.9, 16, 5, repetition_penalty=1.1), req.answer_letters)
    assert len({before, request_key("llamacpp", "m", topk, k=0), request_key("llamacpp", "m", rep, k=0)}) == 3


def test_gguf_sampling_metadata_is_read(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_float32("general.sampling.temp", 0.6)
    w.add_int32("general.sampling.top_k", 30)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    d = decoding.own({"name": "m", "backend": "llamacpp", "model": "m", "options": {"path": str(path)}})
    # the keys the file leaves out take llama.cpp's defaults
    assert (round(d.temperature, 6), d.top_p, d.top_k, d.repetition_penalty) == (0.6, 0.95, 30, 1.0)
    assert "GGUF" in d.source
    # a file with none and no registry entry: an error that says what to add
    bare = tmp_path / "bare.gguf"
    w = gguf.GGUFWriter(str(bare), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(decoding.DecodingError,
                       match="bare: the GGUF file carries no sampling metadata.*generation_config"):
        decoding.own({"name": "bare", "backend": "llamacpp", "model": "bare", "options": {"path": str(bare)}})


def test_a_model_folder_gives_its_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "bos_token_id": 1}))
    d = decoding.own({"name": "f", "backend": "vllm", "model": str(tmp_path)})
    assert (d.temperature, d.top_p, d.top_k) == (0.6, 0.9, 50) and str(tmp_path) in d.source
    (tmp_path / "generation_config.json").unlink()
    assert decoding.own({"name": "f", "backend": "transformers", "model": str(tmp_path)}).temperature == 0.0


def test_row_sampler_top_k_one_is_greedy():
    torch = pytest.importorskip("torch")
    from medaudit.llm.hf import _RowSampler

    scores = torch.tensor([[0.0, 2.0, 1.9, 1.8], [3.0, 0.0, 2.9, 0.1]])
    for seed in range(20):
        out = _RowSampler(1.5, 1.0, [seed, seed + 1], "cpu", top_k=1)(None, scores.clone())
        assert out.argmax(dim=-1).tolist() == [1, 0]


@pytest.mark.slow
def test_llamacpp_top_k_reaches_the_sampler():
    """On the real tiny model: sampling at a high temperature with top-k 1
    gives the greedy reply for every seed, while without top-k the replies
    differ (the setting is applied, not dropped)."""
    try:
        models.model_path("smollm2-135m")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from medaudit.llm.llamacpp import LlamaCppBackend

    b = LlamaCppBackend("smollm2-135m", n_ctx=512, n_threads=1)
    msgs = [{"role": "user", "content": "Name three symptoms of influenza."}]
    greedy = b.complete([Request.chat(msgs, GenParams(0.0, 1.0, 12, 0))], progress=False)[0].text
    topk1 = b.complete([Request.chat(msgs, GenParams(1.5, 1.0, 12, s, top_k=1)) for s in range(3)], progress=False)
    hot = b.complete([Request.chat(msgs, GenParams(1.5, 1.0, 12, s)) for s in range(3)], progress=False)
    assert [c.text for c in topk1] == [greedy] * 3
    assert any(c.text != greedy for c in hot)


def test_cultural_authors_decoding_is_the_models_own():
    """Seed 003's authors ran ``pipe(chats, max_new_tokens=1)`` (option) and
    4096 (explanation) with each model's own generation config
    (HIVE-UofT/Evaluatiog-Cultural-Clues-Medical-LLMs@d8ddddc,
    Code/*_option_diagnose.py, Code/*_short_diagnose.py)."""
    from medaudit.studies import cultural

    g, explain = cultural.answer_gen("authors", QWEN, temperature=0.0, top_p=1.0, max_tokens=16,
                                     explain_max_tokens=256)
    assert (g.temperature, g.top_p, g.top_k, g.repetition_penalty) == (0.7, 0.8, 20, 1.1) and explain == 4096
    # their API model was sent temperature 0.0 and no token limit (tests/test_paper_profile_selections.py)
    api = {"name": "gpt-4.1", "backend": "openai", "model": "gpt-4.1"}
    assert cultural.answer_gen("authors", api, temperature=0.7, top_p=1.0, max_tokens=16,
                               explain_max_tokens=256)[0].temperature == 0.0
    g, explain = cultural.answer_gen("greedy", QWEN, temperature=0.0, top_p=1.0, max_tokens=16,
                                     explain_max_tokens=256)
    assert (g.temperature, g.top_k, g.repetition_penalty, g.max_tokens, explain) == (0.0, 0, 1.0, 16, 256)
    with pytest.raises(ValueError, match="cultural_decoding 'beam'"):
        cultural.answer_gen("beam", QWEN, temperature=0.0, top_p=1.0, max_tokens=16, explain_max_tokens=256)


def test_paper_profile_decodes_as_the_seeds_authors():
    from medaudit import config

    p = config.load("paper")
    assert p["cultural_decoding"] == "authors" and p["soap_note_decoding"] == "default"
    # the authors' 4096-token explanation budget fits the paper profile's context
    assert p["subject"]["options"]["n_ctx"] >= 4096 + 1024


def test_the_gguf_header_reader_reads_the_real_files_keys():
    """The header is read key by key (the tokenizer's 151,936 strings skipped
    or read), as gguf's own reader would give them."""
    try:
        path = models.model_path("qwen2.5-coder-1.5b")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    meta = decoding.gguf_metadata(path, {"general.architecture", "tokenizer.ggml.tokens", "qwen2.context_length"})
    assert meta["general.architecture"] == "qwen2" and len(meta["tokenizer.ggml.tokens"]) == 151936
    assert meta["qwen2.context_length"] == 32768
    with pytest.raises(decoding.DecodingError, match="not a GGUF file"):
        decoding.gguf_metadata(Path(__file__), {"x"})


def test_top_k_one_is_on_everywhere():
    """top_k 1 (greedy by top-k) is a setting that is on: it reaches the
    key, the row and an API body, like any other top-k (1 == 1.0 must not
    read as the repetition penalty's "off")."""
    g = GenParams(0.7, 0.9, 8, 0, top_k=1)
    assert g.extras() == {"top_k": 1} and g.key_dict()["top_k"] == 1
    assert GenParams(0.7, 0.9, 8, 0, repetition_penalty=1.0).extras() == {}
    assert GenParams(0.7, 0.9, 8, 0, top_k=20, repetition_penalty=1.1).extras() == {"top_k": 20,
                                                                                    "repetition_penalty": 1.1}
