"""Models with the weights of no one, for measuring speed only: a causal LM of
a named shape with random weights, built on the device without a checkpoint.

A random model costs what the real model of its shape costs per forward pass
(the same matrices, the same attention), so it times the paper design on a
GPU that has no checkpoint (``python -m medaudit.bench gpu``, and notebook 03
under the ``gpubench`` profile). Its answers mean nothing: it never opens
"[X]" on purpose and rarely ends its turn.

**As a model spec** (the transformers backend): ``model: "random:<shape>"``,
e.g. ``{name: random-qwen2.5-7b, backend: transformers, model:
"random:qwen2.5-7b", options: {device: cuda, dtype: bfloat16, mcq_mode:
score, tokenizer: DIR}}``. The weights are drawn from ``torch.manual_seed``
of the spec's ``random_seed`` (0); the model's identity in the store is
``random:<shape>:seed<seed>``, so its answers never share keys with a real
model's. The profile check (:mod:`medaudit.config`) refuses such a spec
unless the profile declares ``benchmark: true`` (the ``gpubench`` profile),
and its name must say ``random``, so every table row and the colophon label
it; notebook 03 prints that its answers measure speed only.

**The shapes** (:data:`SHAPES`): ``qwen2.5-7b`` is Qwen2.5-7B-Instruct's
config.json (7,615,616,512 parameters); ``tiny`` (2 layers, hidden 64, the
tokenizer's vocabulary) runs the same path on a CPU for tests.

**The tokenizer** is the embedded model's (the Qwen2.5 tokenizer), extracted
from its verified GGUF file, or a folder it was saved to (``python -m
medaudit.bench gpu --save-tokenizer DIR``, to carry to a GPU machine without
the model package).
"""
from __future__ import annotations

import functools

from . import models

PREFIX = "random:"
TOKENIZER_MODEL = "qwen2.5-coder-1.5b"  # the embedded model whose GGUF carries the tokenizer

# transformers Qwen2Config arguments. qwen2.5-7b: Qwen2.5-7B(-Instruct)'s config.json.
SHAPES = {
    "qwen2.5-7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       intermediate_size=18944, vocab_size=152064, hidden_act="silu",
                       max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False, use_sliding_window=False),
    # vocab_size None: the tokenizer's length (every id it writes has a row)
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=None, hidden_act="silu", max_position_embeddings=32768,
                 rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False),
}


def is_random(model: object) -> bool:
    """Whether a spec's ``model`` names a random-weight model."""
    return isinstance(model, str) and model.startswith(PREFIX)


def shape_of(model: str) -> str:
    """The shape a ``random:<shape>`` model names (a known one, else an error
    listing them)."""
    shape = model[len(PREFIX):] if is_random(model) else model
    if shape not in SHAPES:
        raise ValueError(f"model '{model}': no such random shape; one of "
                         + ", ".join(PREFIX + s for s in SHAPES))
    return shape


def saved_tokenizer(folder: str):
    """A tokenizer saved with ``save_pretrained`` (local files only)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


@functools.cache
def embedded_tokenizer(name: str = TOKENIZER_MODEL):
    """The tokenizer of a registry model, extracted from its verified GGUF
    file by transformers (local files only)."""
    from transformers import AutoTokenizer

    gguf = models.model_path(name)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


def tokenizer(folder: str | None = None):
    """The embedded tokenizer, from ``folder`` where it was saved, else from the GGUF."""
    return embedded_tokenizer() if folder is None else saved_tokenizer(folder)


def shape_config(shape: str, tok):
    """The transformers config of ``shape``; its vocabulary must hold every
    id the tokenizer writes (``len(tok)``)."""
    from transformers import Qwen2Config

    if shape not in SHAPES:
        raise KeyError(f"shape {shape!r}: one of {', '.join(SHAPES)}")
    kw = dict(SHAPES[shape])
    kw["vocab_size"] = kw["vocab_size"] or len(tok)
    if kw["vocab_size"] < len(tok):
        raise ValueError(f"shape {shape!r}: vocabulary {kw['vocab_size']} < the tokenizer's {len(tok)} ids")
    return Qwen2Config(architectures=["Qwen2ForCausalLM"], **kw)


def param_count(cfg) -> int:
    """The parameters of a Qwen2 config, counted from its sizes: embedding,
    per layer q/k/v (with biases), o, the gated MLP and two norms, the final
    norm, and the output matrix unless tied."""
    h, v, inter = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    layer = (h * q + q) + 2 * (h * kv + kv) + q * h + 3 * h * inter + 2 * h
    return v * h + cfg.num_hidden_layers * layer + h + (0 if cfg.tie_word_embeddings else v * h)


def random_model(cfg, device: str, dtype: str, seed: int = 0):
    """A causal LM of ``cfg`` with random weights, created on ``device`` in
    ``dtype`` (allocated once: no CPU copy, no float32 copy)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"   # as hf.py
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, **{dtype_kw: getattr(torch, dtype)})
    return model.eval()


def model_id(shape: str, seed: int) -> str:
    """The store identity of a random model: its shape and weight seed."""
    return f"{PREFIX}{shape}:seed{int(seed)}"
