"""Random-weight models for timing the design (llm/random_model.py): a
``random:<shape>`` spec builds the documented model through the
transformers backend, only a benchmark profile may name one and only under
a name that says so, and the gpubench profile is the paper profile with its
own keys on top (``extends``). The notebook benchmark's reading of an
executed notebook's cell times (bench_notebook.cell_durations)."""
from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"          # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

from medaudit.bench import notebook as bench_notebook
from medaudit import config
from medaudit.llm import models, random_model

RANDOM = {"name": "random-tiny", "backend": "transformers", "model": "random:tiny",
          "options": {"device": "cpu", "dtype": "float32", "mcq_mode": "score", "min_bracket_prob": 0.0}}


def _error(profile: str, overrides: dict) -> str:
    with pytest.raises(config.ConfigError) as e:
        config.load(profile, overrides)
    return str(e.value)


# -------------------------------------------------------------- the profile rules


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_a_random_model_is_refused_outside_a_benchmark_profile(profile):
    msg = _error(profile, {"subject": RANDOM})
    assert "subject.model" in msg and "benchmark: true" in msg


def test_a_random_model_is_refused_in_any_role_of_a_real_profile():
    assert "judge.model" in _error("paper", {"judge": RANDOM})
    assert "models.embedded.model" in _error("paper", {"models": {"embedded": RANDOM}})


def test_gpubench_takes_a_random_model_that_says_so_by_name():
    assert config.load("gpubench", {"subject": RANDOM})["subject"]["model"] == "random:tiny"
    msg = _error("gpubench", {"subject": {**RANDOM, "name": "qwen-7b"}})
    assert "subject.name" in msg and "'random'" in msg
    assert "no such random shape" in _error("gpubench", {"subject": {**RANDOM, "model": "random:llama-70b"}})
    assert "transformers backend only" in _error("gpubench", {"subject": {**RANDOM, "backend": "llamacpp"}})


def test_tokenizer_and_random_seed_are_options_of_a_random_model_only():
    spec = {"name": "qwen2.5-coder-1.5b", "backend": "transformers", "model": "qwen2.5-coder-1.5b",
            "options": {"tokenizer": "/tmp/tok"}}
    assert "options of a random-weight model" in _error("paper", {"subject": spec})


def test_gpubench_is_the_paper_profile_with_its_own_keys_on_top():
    paper, bench = config.load("paper"), config.load("gpubench")
    own = {"profile", "n_items", "conditions", "methods", "fairmedqa_items", "subject", "infer_items",
           "infer_conditions", "infer_methods", "infer_subsets", "prompt_formats", "mitigation_strategies",
           "mitigation_conditions", "k_samples"}
    assert {k for k in paper if paper[k] != bench[k]} <= own
    assert bench["n_items"] == 100 and bench["k_samples"] == 10 and bench["infer_subsets"] == ["main"]
    assert (bench["temperature"], bench["top_p"], bench["medqa_files"]) == \
        (paper["temperature"], paper["top_p"], paper["medqa_files"])
    assert bench["subject"]["model"] == "random:qwen2.5-7b"
    assert "benchmark" not in bench          # a profile key no notebook receives


def test_extends_names_a_profile_and_no_circle(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "params", tmp_path / "params")
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    (tmp_path / "params" / "a.yaml").write_text("profile: a\nextends: b\n")
    (tmp_path / "params" / "b.yaml").write_text("profile: b\nextends: a\n")
    (tmp_path / "params" / "c.yaml").write_text("profile: c\nextends: papr\n")
    assert "circle (a -> b -> a)" in _error("a", {})
    assert "did you mean 'paper'" in _error("c", {})


# -------------------------------------------------------------- the backend


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    try:
        models.model_path(random_model.TOKENIZER_MODEL)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return random_model.embedded_tokenizer()


def _requests():
    from medaudit.llm import GenParams, Request

    q = "A 40-year-old presents with fever. Which is most likely?\nA. flu\nB. cold\nC. measles\nD. mumps\n"
    gen = GenParams(0.7, 0.9, 4, seed=11)
    return [Request.chat([{"role": "user", "content": q + "Answer with the letter in square brackets."}], gen,
                         answer_letters=("A", "B", "C", "D"))]


def test_a_random_spec_builds_the_documented_model(tokenizer):
    """The spec's model is random_model.random_model of the shape and seed:
    the same letter log-probs as that model wrapped by from_loaded; another
    seed gives other weights and another store identity."""
    from medaudit.llm import get_backend
    from medaudit.llm.hf import TransformersBackend

    spec = get_backend("transformers", "random:tiny", **RANDOM["options"], threads=1)
    assert spec.random_weights and spec.model_id == "random:tiny:seed0" and spec.kind == "transformers-score"
    ref = TransformersBackend.from_loaded(
        random_model.random_model(random_model.shape_config("tiny", tokenizer), "cpu", "float32", seed=0),
        tokenizer, name="ref", model_id="ref", threads=1, mcq_mode="score", min_bracket_prob=0.0)
    a, b = spec.complete(_requests(), progress=False)[0], ref.complete(_requests(), progress=False)[0]
    assert a.finish_reason == "scored" and a.letter_logprobs == b.letter_logprobs
    other = get_backend("transformers", "random:tiny", **RANDOM["options"], threads=1, random_seed=1)
    assert other.model_id == "random:tiny:seed1"
    assert other.complete(_requests(), progress=False)[0].letter_logprobs != a.letter_logprobs


def test_a_random_spec_refuses_files_and_unknown_shapes(tokenizer):
    from medaudit.llm import get_backend

    with pytest.raises(ValueError, match="no such random shape"):
        get_backend("transformers", "random:huge", device="cpu")
    with pytest.raises(ValueError, match="has no files"):
        get_backend("transformers", "random:tiny", path="/tmp", device="cpu")
    with pytest.raises(ValueError, match="random-weight model .* only"):
        get_backend("transformers", "smollm2-135m", tokenizer="/tmp/tok")


# -------------------------------------------------------------- the notebook benchmark's reading


def test_cell_durations_reads_papermill_times_and_the_sample_counts(tmp_path):
    def cell(src, d, out=""):
        return {"cell_type": "code", "source": src, "metadata": {"papermill": {"duration": d}},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": out}] if out else []}

    nb = {"cells": [cell("backend = get_backend(x)", 3.5), {"cell_type": "markdown", "source": "x"},
                    cell("counts = runs.run(backend, store, samples)", 20.0),
                    cell("counts.check()", 0.25, "9000 responses stored for 9000 planned samples (0 too long)\n"),
                    cell("tables.save_table(rates)", 1.0)]}
    p = tmp_path / "03.ipynb"
    p.write_text(json.dumps(nb))
    d = bench_notebook.cell_durations(p)
    assert (d["setup"], d["run"], d["other"], d["cells"]) == (3.5, 20.0, 1.25, 24.75)
    assert (d["stored"], d["planned"]) == (9000, 9000)
    nb["cells"][3]["outputs"] = []
    p.write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="planned samples"):
        bench_notebook.cell_durations(p)


def test_overhead_is_the_notebooks_time_beyond_the_backend_and_what_of_it_grows():
    """Two sizes: 2,970 samples take 38.0 s (9.7 s alone), 9,000 take 63.3 s (29.3 s
    alone): the overhead is 28.3 s and 34.0 s, growing 5.7 s over 6,030 samples, i.e.
    0.000945 s a sample, 0.29 of the backend's 0.003256 s; the whole notebook is within
    1.2x from (28.3 - 0.000945 x 2,970) / (0.2 x 0.003256 - 0.000945) samples: never,
    since the overhead grows faster than 0.2x the backend. With an overhead that does not
    grow (34.0 s at both), from 34.0 / (0.2 x 0.003256) = 52,212 samples."""
    small = {"samples": 2970, "notebook_wall_s": 38.0, "backend_alone_s": 9.7}
    large = {"samples": 9000, "notebook_wall_s": 63.3, "backend_alone_s": 29.3}
    m = bench_notebook.overhead(small, large)
    assert m["overhead_s"] == "28.30 and 34.00"
    per = 29.3 / 9000
    assert float(m["overhead_growth_per_sample_vs_backend"]) == pytest.approx((5.7 / 6030) / per, rel=1e-3)
    assert m["samples_for_within_1.2x"] is None
    flat = {**large, "notebook_wall_s": 29.3 + 28.3}
    f = bench_notebook.overhead(small, flat)
    assert float(f["overhead_growth_per_sample_vs_backend"]) == pytest.approx(0, abs=1e-9)
    need = f["samples_for_within_1.2x"]
    assert need == pytest.approx(28.3 / (0.2 * per), abs=1)
    assert 1 + 28.3 / (per * need) <= 1.2 < 1 + 28.3 / (per * (need - 2))
    assert float(f["notebook_vs_backend_at_212760"]) == pytest.approx(1 + 28.3 / (per * 212760), rel=1e-3)
    with pytest.raises(ValueError, match="more samples"):
        bench_notebook.overhead(large, small)
