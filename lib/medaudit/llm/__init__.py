"""Language-model backends behind one interface, the K-sample protocols and
the response store.

``get_backend(kind, model, **options)`` builds a backend by name:
``llamacpp`` (default; local GGUF), ``transformers``, ``openai`` (the OpenAI
API or any compatible server) and ``vllm`` (optional, GPU machines).
"""
from __future__ import annotations

from .base import Backend, Completion, GenParams, Request, derive_seed, request_key
from .store import ResponseStore


def get_backend(kind: str, model: str, **options) -> Backend:
    if kind == "llamacpp":
        from .llamacpp import LlamaCppBackend
        return LlamaCppBackend(model, **options)
    if kind == "openai":
        from .openai_backend import OpenAIBackend
        return OpenAIBackend(model, **options)
    if kind == "transformers":
        from .hf import TransformersBackend
        return TransformersBackend(model, **options)
    if kind == "vllm":
        from .vllm_backend import VLLMBackend
        return VLLMBackend(model, **options)
    raise ValueError(f"unknown backend '{kind}' (llamacpp, transformers, openai, vllm)")


_BACKENDS: dict[str, Backend] = {}


def backend_for(spec: dict) -> Backend:
    """The backend of a notebook's model parameter (``subject``, ``judge``,
    ``augmenter``: {name, backend, model, options}), built once per process:
    a judge or augmenter that is the subject model shares its loaded
    weights instead of loading them again."""
    import json

    key = json.dumps({k: spec.get(k) for k in ("backend", "model", "options")}, sort_keys=True, default=str)
    if key not in _BACKENDS:
        _BACKENDS[key] = get_backend(spec["backend"], spec["model"], **spec.get("options", {}))
    return _BACKENDS[key]


__all__ = ["Backend", "backend_for", "Completion", "GenParams", "Request", "ResponseStore", "derive_seed",
           "get_backend", "request_key"]
