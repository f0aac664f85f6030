"""Language-model backends behind one interface, the K-sample protocols and
the response store.

``get_backend(kind, model, **options)`` builds a backend by name:
``llamacpp`` (default; local GGUF), ``transformers``, ``openai`` (the OpenAI
API or any compatible server), ``vllm`` (optional, GPU machines) and
``planted`` (validation only: answers drawn from a declared truth,
llm/planted.py).
"""
from __future__ import annotations

from .base import Backend, Completion, GenParams, Request, derive_seed, request_key
from .store import ResponseStore


# the one registry of backends: kind → (module under medaudit.llm, class). The
# modules import their engines lazily, so naming a class loads no engine.
BACKENDS: dict[str, tuple[str, str]] = {
    "llamacpp": ("llamacpp", "LlamaCppBackend"),
    "transformers": ("hf", "TransformersBackend"),
    "openai": ("openai_backend", "OpenAIBackend"),
    "vllm": ("vllm_backend", "VLLMBackend"),
    "planted": ("planted", "PlantedBackend"),     # validation only: answers from a declared truth
}


def backend_class(kind: str) -> type:
    """The class of the backend ``kind`` (a key of :data:`BACKENDS`)."""
    import importlib

    if kind not in BACKENDS:
        raise ValueError(f"unknown backend '{kind}' ({', '.join(BACKENDS)})")
    module, cls = BACKENDS[kind]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def get_backend(kind: str, model: str, **options) -> Backend:
    """A backend of ``kind`` (a key of :data:`BACKENDS`) for ``model``, built with
    ``options`` (its constructor's keywords)."""
    return backend_class(kind)(model, **options)


_LOADED: dict[str, Backend] = {}


def backend_for(spec: dict) -> Backend:
    """The backend of a notebook's model parameter (``subject``, ``judge``,
    ``augmenter``: {name, backend, model, options}), built once per process:
    a judge or augmenter that is the subject model shares its loaded
    weights instead of loading them again."""
    import json

    key = json.dumps({k: spec.get(k) for k in ("backend", "model", "options")}, sort_keys=True, default=str)
    if key not in _LOADED:
        _LOADED[key] = get_backend(spec["backend"], spec["model"], **spec.get("options", {}))
    return _LOADED[key]


def backend_notice(backend: Backend) -> str | None:
    """What a reader must be told of a backend whose answers are not a model's judgement: random
    weights (a benchmark profile's subject, llm/random_model.py: they time the design) or a planted
    truth (a validation profile's subject, llm/planted.py: it validates the chain); None for a model."""
    if getattr(backend, "random_weights", False):
        return f"RANDOM WEIGHTS ({backend.model_id}): these answers time the design; they say nothing about medicine"
    if getattr(backend, "planted", False):
        return f"PLANTED MODEL ({backend.model_id}): answers drawn from a declared truth, to validate the chain"
    return None


__all__ = ["BACKENDS", "Backend", "backend_class", "backend_for", "Completion", "GenParams", "Request",
           "ResponseStore", "derive_seed", "get_backend", "request_key"]
