"""The GPU benchmark (python -m medaudit.bench gpu) on the CPU with the tiny
shape: it runs and prints every line, its projections are s/sample × the
paper design, its floor is 2 × params × tokens / peak, its random model has
the shape's parameter count, and the backend hook it uses (a model already in
memory) behaves as the same model loaded from files. No timing is asserted."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"          # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from medaudit.bench import cli as bench, gpu as bench_gpu
from medaudit.llm import GenParams, Request, models

pytestmark = pytest.mark.slow     # the benchmark on the CPU: torch, the tokenizer and a random model, about 35 s



@pytest.fixture(scope="module", autouse=True)
def embedded_model():
    """The embedded GGUF carries the tokenizer (make setup installs it)."""
    try:
        models.model_path(bench_gpu.TOKENIZER_MODEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))

TOKENIZER_IDS = 151936      # len() of the Qwen2.5 tokenizer in the embedded GGUF (pinned by sha256)

# the tiny shape by hand: hidden 64, 2 layers, 4 heads of 16, 2 kv heads, MLP 128, vocab = the tokenizer
H, L, FF, KV = 64, 2, 128, 2 * 16
TINY_PARAMS = (TOKENIZER_IDS * H                      # embedding
               + L * ((H * H + H)                     # q_proj (+ bias)
                      + 2 * (H * KV + KV)             # k_proj, v_proj (+ bias)
                      + H * H                         # o_proj
                      + 3 * H * FF                    # gate, up, down
                      + 2 * H)                        # two RMSNorms
               + H                                    # final norm
               + TOKENIZER_IDS * H)                   # lm_head (not tied)
KEYS = ["device", "dtype", "threads", "shape", "params", "params_by_formula", "model_build_s", "tokenizer",
        "questions", "K", "samples", "max_tokens", "temperature_top_p", "batch_size", "rows_generate_batched",
        "rows_generate_batched_hf", "rows_score", "prompt_tokens_mean",
        "stem_tokens_mean_per_question", "floor_tokens", "generated_tokens_mean_one",
        "generated_tokens_mean_batched", "scored_samples", "generate_one_timed_samples",
        "generate_one_s_per_sample", "generate_batched_s_per_sample", "generate_batched_hf_s_per_sample",
        "score_s_per_sample", "floor_s_per_sample", "paper_samples", "projected_generate_one",
        "projected_generate_batched", "projected_generate_batched_hf", "projected_score", "projected_floor",
        "generate_one_vs_floor", "generate_batched_vs_floor", "generate_batched_hf_vs_floor", "score_vs_floor",
        "batched_vs_one", "score_vs_batched", "free_text", "rows_free_batched", "free_batched_tokens",
        "free_batched_tokens_per_s", "free_batched_hf_tokens_per_s", "free_one_requests", "free_one_ms_per_token",
        "weight_read_ms_per_token", "free_one_vs_weight_read", "graph_errors", "graph_vs_static", "peak_memory",
        "load_average_1min"]
ITEMS, K = 2, 2


@pytest.fixture(scope="module")
def printed():
    """The command's output, run once through bench's main (the sub-command
    wiring): {key: value text} and the closing line."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench.main(["gpu", "--shape", "tiny", "--items", str(ITEMS), "--k", str(K), "--device", "cpu",
                         "--threads", "1", "--max-tokens", "2", "--one-at-a-time", "6", "--free-rows", "3",
                         "--free-tokens", "3", "--free-one", "1"])
    assert rc == 0
    lines = buf.getvalue().splitlines()
    table = dict(re.match(r"(\S+)\s{2,}(.*)$", ln).groups() for ln in lines if ln and not ln.startswith("per "))
    return table, [ln for ln in lines if ln.startswith("per sample against the FLOP floor")]


def num(text: str) -> float:
    return float(text.split()[0])


def test_prints_every_line(printed):
    table, closing = printed
    assert list(table) == KEYS
    assert len(closing) == 1
    assert table["device"] == "cpu" and table["dtype"] == "float32"
    assert table["K"] == str(K)
    assert table["questions"] == f"{ITEMS * 9} ({ITEMS} items x 9 conditions)"
    assert int(table["samples"]) == ITEMS * 9 * K
    assert table["scored_samples"] == f"{ITEMS * 9 * K}/{ITEMS * 9 * K}"     # min_bracket_prob 0: none generated
    assert table["generate_one_timed_samples"] == f"6 of {ITEMS * 9 * K} (every 6)"
    assert float(table["generated_tokens_mean_batched"]) <= 2
    # the free-text way: a random model never ends its turn, so every row runs to the limit
    assert table["free_batched_tokens"] == "9" and table["free_one_requests"] == "1 (3 tokens)"
    assert table["rows_free_batched"] == "1 batches, 3.0 rows mean, 3 most"
    assert table["graph_errors"] == "none (no CUDA graph on a CPU)"


def test_random_model_has_the_shape_parameter_count(printed):
    table, _ = printed
    assert int(table["params"]) == TINY_PARAMS == 19_522_112
    assert int(table["params_by_formula"]) == TINY_PARAMS
    assert f"vocab {TOKENIZER_IDS}" in table["shape"] and f"{TOKENIZER_IDS} ids, none clamped" in table["tokenizer"]


def test_projections_are_s_per_sample_times_the_paper_design(printed):
    table, _ = printed
    assert table["paper_samples"].endswith("= 212,760")
    for way in ("generate_one", "generate_batched", "generate_batched_hf", "score", "floor"):
        s = num(table[f"{way}_s_per_sample"])
        projected = num(table[f"projected_{way}"])
        assert s > 0 and projected > 0
        assert projected == pytest.approx(s * 212_760, rel=1e-5)
        hours = float(re.search(r"\(([\d.e+-]+) h\)", table[f"projected_{way}"]).group(1))
        assert hours == pytest.approx(projected / 3600, rel=1e-2)
        if way != "floor":
            assert num(table[f"{way}_vs_floor"]) == pytest.approx(s / num(table["floor_s_per_sample"]), rel=1e-3)


def test_floor_is_two_flops_per_parameter_per_evaluated_token(printed):
    # a known token count, by hand: 1,000 tokens of the tiny model at 800 TFLOP/s
    assert bench_gpu.flop_floor_s(TINY_PARAMS, 1000, 800) == pytest.approx(2 * 19_522_112 * 1000 / 800e12, rel=1e-12)
    assert bench_gpu.flop_floor_s(7_615_616_512, 100, 400) == pytest.approx(3.807808256e-3, rel=1e-12)
    # the printed floor: the printed tokens (stems once + suffixes) over the printed samples
    table, _ = printed
    tokens = int(table["floor_tokens"].split()[0])
    n = int(table["samples"])
    assert 0 < tokens < float(table["prompt_tokens_mean"]) * n      # stems counted once, not K times
    assert num(table["floor_s_per_sample"]) == pytest.approx(2 * TINY_PARAMS * tokens / 800e12 / n, rel=1e-5)


def test_paper_design_from_the_params():
    d = bench_gpu.paper_design()
    assert d["samples"] == 212_760 == 2364 * 9 * 1 * 10 * 1
    assert d["conditions"] == bench_gpu.TABLE1 and d["methods"] == ["standalone"] and d["k"] == 10
    assert d["formats"] == ["mcq"]
    assert bench_gpu.paper_design(100)["samples"] == 9000


def test_7b_shape_is_qwen2_5_7b():
    """The literal config has Qwen2.5-7B's published parameter count (built
    on the meta device: no memory), and the formula agrees."""
    import torch

    cfg = bench_gpu.shape_config("qwen2.5-7b", bench_gpu.embedded_tokenizer())
    m = bench_gpu.random_model(cfg, "meta", "bfloat16")
    assert m.num_parameters() == bench_gpu.param_count(cfg) == 7_615_616_512
    assert next(m.parameters()).dtype == torch.bfloat16 and next(m.parameters()).device.type == "meta"


def test_from_loaded_behaves_as_the_same_model_loaded_from_files(tmp_path):
    """TransformersBackend.from_loaded around an in-memory model gives what
    the backend gives for the same weights and tokenizer saved to a folder
    and loaded the ordinary way: greedy texts, letter log-probs, scoring."""
    from medaudit.llm.hf import TransformersBackend

    tok = bench_gpu.embedded_tokenizer()
    model = bench_gpu.random_model(bench_gpu.shape_config("tiny", tok), "cpu", "float32", seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    mem = TransformersBackend.from_loaded(model, tok, name="tiny", model_id="random:tiny", threads=1)
    disk = TransformersBackend("tiny", path=str(tmp_path), threads=1)
    assert (mem.kind, mem.model_id, mem.model_name) == ("transformers", "random:tiny", "tiny")
    assert (mem.eos_ids, mem.pad_id, mem.open_id) == (disk.eos_ids, disk.pad_id, disk.open_id)
    assert mem.model is model                      # wrapped, not copied
    stem = "A 40-year-old man has a cough. Which is the most likely diagnosis?"
    msgs = [{"role": "user", "content": f"{stem}\nA. Asthma\nB. Pneumonia\nC. Flu\nD. Cold\nAnswer [X]."}]
    reqs = [Request.chat(msgs, GenParams(0.0, 1.0, 2, i), answer_letters=tuple("ABCD"), stem_chars=len(stem))
            for i in range(2)]
    a, b = mem.complete(reqs, progress=False), disk.complete(reqs, progress=False)
    assert [c.text for c in a] == [c.text for c in b]
    mem.mcq_mode = disk.mcq_mode = "score"
    mem.min_bracket_prob = disk.min_bracket_prob = 0.0
    a, b = mem.complete(reqs, progress=False), disk.complete(reqs, progress=False)
    assert mem.kind == "transformers-score"
    assert [c.finish_reason for c in a] == ["scored", "scored"]
    for x, y in zip(a, b):
        assert x.text == y.text
        assert x.letter_logprobs == pytest.approx(y.letter_logprobs, abs=1e-9)
    with pytest.raises(ValueError, match="mcq_mode"):
        TransformersBackend.from_loaded(model, tok, name="tiny", model_id="x", mcq_mode="nope")


def test_kernel_kinds_tell_attention_from_matrix_products():
    # kernel names of the kind torch's CUDA backends launch (constructed here), and CPU operators
    assert bench_gpu.kernel_kind("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert bench_gpu.kernel_kind("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"   # cutlass, but attention
    assert bench_gpu.kernel_kind("aten::_scaled_dot_product_efficient_attention") == "attention"
    assert bench_gpu.kernel_kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "matmul"
    assert bench_gpu.kernel_kind("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT") == "matmul"
    assert bench_gpu.kernel_kind("aten::addmm") == "matmul" and bench_gpu.kernel_kind("aten::mm") == "matmul"
    assert bench_gpu.kernel_kind("void at::native::elementwise_kernel<128, 4>") == "other"
    assert bench_gpu.kernel_kind("aten::copy_") == "other" and bench_gpu.kernel_kind("aten::log_softmax") == "other"


def test_profile_way_splits_the_scoring_time_and_writes_its_costliest_operators(tmp_path):
    """On a CPU with the tiny shape: the profiled run's operators by their own time, split into
    attention, matrix products and the rest (the parts sum to the busy time), the host's
    tokenisation timed apart and its token count that of the prompts."""
    from medaudit.llm.hf import TransformersBackend

    tok = bench_gpu.embedded_tokenizer()
    model = bench_gpu.random_model(bench_gpu.shape_config("tiny", tok), "cpu", "float32")
    be = TransformersBackend.from_loaded(model, tok, name="random-tiny", model_id="random:tiny:seed0", device="cpu",
                                         threads=1)
    reqs = [s.request for s in bench_gpu.study_samples(1, 2, be)]
    score = dict(mcq_mode="score", share_stem=True, min_bracket_prob=0.0, decode="prefix")
    r = bench_gpu.profile_way(be, reqs, score, tmp_path / "score_profile.txt")
    text = (tmp_path / "score_profile.txt").read_text()
    assert text.startswith(f"CPU operators of one profiled run, {len(reqs)} requests")
    assert "matmul" in text and "aten::" in text and len(text.splitlines()) <= 42
    parts = r["profile_attention_s"] + r["profile_matmul_s"] + r["profile_other_s"]
    assert r["profile_matmul_s"] > 0 and parts == pytest.approx(r["profile_busy_s"], abs=2e-4)
    assert 0 < r["profile_busy_s"] <= r["profile_wall_s"] * 1.05 and r["profile_host_prep_s"] > 0
    assert r["profile_prompt_tokens"] == sum(len(be.prompt_ids(q)) for q in reqs)
    assert r["profile_idle_share"].startswith("n/a")
