"""What a profile's model specs may say, checked before any model loads: each backend's options,
the random-weight and local models' rules, what serves a spec (:func:`serving_identity`), and what
each vendor's models accept of the sampling settings (docs/models.md, "What each vendor's models
accept"): Anthropic's models from Claude Opus 4.1 and the 4.5 generation on take temperature or
top_p, not both (a request with both: HTTP 400, "`temperature` and `top_p` cannot both be specified
for this model"); Anthropic's older models and OpenAI's and Gemini's chat models take both. A model
is Anthropic's when a role asks it at Anthropic's endpoint.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Mapping

from medaudit.checks import Problems, did_you_mean, existing_file
from medaudit.llm import backend_class, random_model


ANTHROPIC_HOSTS = ("api.anthropic.com",)


# Claude Opus 4.1 and later, Sonnet and Haiku 4.5 and later (claude-opus-4-1-20250805, claude-sonnet-4-5,
# claude-haiku-4-5-20251001, claude-opus-4-6, …); not claude-opus-4-20250514 (Opus 4), which takes both
ONE_OF_TEMPERATURE_TOP_P = re.compile(
    r"claude-(?:opus-4-[1-9]|(?:sonnet|haiku)-4-[5-9]|(?:opus|sonnet|haiku)-(?:[5-9]|\d{2,}))(?![0-9])")


def takes_temperature_or_top_p(spec: Mapping) -> bool:
    """Whether the model of ``spec`` takes temperature or top_p, not both: a Claude model of
    :data:`ONE_OF_TEMPERATURE_TOP_P` asked at Anthropic's endpoint (the ``openai`` backend with
    Anthropic's ``base_url``: its OpenAI-compatible API, which a vendor batch also answers for)."""
    from urllib.parse import urlparse

    if not isinstance(spec, Mapping) or spec.get("backend") != "openai":
        return False
    host = urlparse(str((spec.get("options") or {}).get("base_url") or "")).hostname or ""
    return host in ANTHROPIC_HOSTS and bool(ONE_OF_TEMPERATURE_TOP_P.search(str(spec.get("model", ""))))


def sampling_problems(params: Mapping, keys) -> list[str]:
    """What the model roles among ``keys`` (the parameters a notebook receives) cannot take of the
    profile's sampling settings, said before any model loads or any request is sent (the runner's
    :func:`medaudit.runner.prepare`, which every engine runs): ``top_p: null`` (nothing sent) for a
    local model, which needs a value; both temperature and top_p for an Anthropic model that takes
    one or the other (:func:`takes_temperature_or_top_p`: every request would fail with HTTP 400)."""
    keys = list(keys)
    if "top_p" not in keys:
        return []                     # the notebook samples with no top-p of the profile
    top_p, out = params.get("top_p"), []
    for key in keys:
        value = params.get(key)
        specs = [(key, value)] if isinstance(value, Mapping) else (
            [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [])
        for where, spec in specs:
            if not (isinstance(spec, Mapping) and "backend" in spec and "model" in spec):
                continue
            name = spec.get("name") or spec.get("model")
            if top_p is None and spec.get("backend") != "openai":
                out.append(f"top_p: null sends no top-p, which only an API model (the openai backend) can take; "
                           f"{where} ({name}) is a local {spec.get('backend')} model: give top_p a value")
            elif top_p is not None and takes_temperature_or_top_p(spec):
                out.append(f"{where} ({name}): Anthropic's {spec.get('model')} takes temperature or top_p, not "
                           f"both, and top_p {top_p} would be sent beside the temperature (HTTP 400 for every "
                           "request); set top_p: null (-y '{top_p: null}'): the temperature alone is sent")
    return out


POSITIVE_INT_OPTIONS = ("n_ctx", "n_threads", "n_batch", "concurrency", "tensor_parallel_size", "threads",
                         "batch_size", "chunk_size")


def backend_options(backend: str) -> tuple[set[str], bool]:
    """The option names a backend's constructor takes (besides ``model``),
    and whether it takes any (``**kwargs``). The backend modules import
    their engines lazily, so this loads no model and no engine."""
    cls = backend_class(backend)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"model"}
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def check_model(pr: Problems, path: str, spec: Mapping, registry: dict | None, benchmark: bool = False) -> None:
    """Report what is wrong with the model spec at ``path`` (a role, a list entry or a ``models``
    entry), before any model loads: an option its backend does not take (the closest one named), a
    count that is not a whole number >= 1, a key given in place of the NAME of its environment
    variable; a random-weight model (llm/random_model.py) outside a benchmark profile, on another
    backend or under a name that does not say so; a local file that is not there; a llama.cpp or
    transformers model that ``registry`` (params/models.yaml) does not register. A planted model is
    checked by :mod:`medaudit.config` (its truths name the studies' conditions)."""
    backend, model = spec.get("backend"), spec.get("model")
    options = spec.get("options") or {}
    known, any_ok = backend_options(backend)
    if not any_ok:
        for opt in options:
            if opt not in known:
                pr.add(f"{path}.options.{opt}", f"not an option of the {backend} backend"
                       f"{did_you_mean(opt, known)} (it takes: {', '.join(sorted(known))})", options[opt])
    for opt in POSITIVE_INT_OPTIONS:
        v = options.get(opt)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            pr.add(f"{path}.options.{opt}", "must be a whole number >= 1", v)
    env = options.get("api_key_env")
    if env is not None and (not isinstance(env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env)):
        pr.add(f"{path}.options.api_key_env", "must be the NAME of the environment variable that holds the key "
               "(e.g. OPENAI_API_KEY), never the key itself", "<hidden>")
    if random_model.is_random(model):
        # weights of no one (llm/random_model.py): for timing only, never in a real run, and labelled
        if backend != "transformers":
            pr.add(f"{path}.model", "a random-weight model runs on the transformers backend only", model)
        elif model[len(random_model.PREFIX):] not in random_model.SHAPES:
            pr.add(f"{path}.model", "no such random shape; one of "
                   + ", ".join(random_model.PREFIX + s for s in random_model.SHAPES), model)
        if not benchmark:
            pr.add(f"{path}.model", "random weights answer nothing: only a benchmark profile (benchmark: true, "
                   "e.g. gpubench) may use them, to time the design", model)
        if "random" not in str(spec.get("name", "")).lower():
            pr.add(f"{path}.name", "a random-weight model's name must say 'random' (it labels every table row)",
                   spec.get("name"))
        return
    if options.get("tokenizer") is not None or options.get("random_seed") is not None:
        pr.add(f"{path}.options", "tokenizer and random_seed: options of a random-weight model "
               "(model: random:<shape>) only", sorted(k for k in ("tokenizer", "random_seed") if k in options))
    if backend in ("llamacpp", "transformers") and options.get("path") is not None:
        if not isinstance(options["path"], str) or existing_file(options["path"]) is None:
            pr.add(f"{path}.options.path", "no such file or folder (absolute, or relative to notebooks/)",
                   options["path"])
        return
    if registry is None:
        return
    if backend == "llamacpp":
        local = sorted(n for n, s in registry.items() if (s or {}).get("backend") == "llamacpp")
        if model not in registry:
            pr.add(f"{path}.model", f"not a model of params/models.yaml{did_you_mean(model, local)} "
                   f"(local models: {', '.join(local)}); register it there or give options.path", model)
        elif (registry[model] or {}).get("backend") != "llamacpp":
            pr.add(f"{path}.model", f"params/models.yaml registers it for the "
                   f"{(registry[model] or {}).get('backend')} backend, not llamacpp (local models: "
                   f"{', '.join(local)})", model)
    elif backend == "transformers" and options.get("gguf_file") is None:
        if model not in registry and existing_file(model) is None:
            pr.add(f"{path}.model", "neither a model of params/models.yaml"
                   f"{did_you_mean(model, registry)} nor an existing local folder; give options.path", model)

# an API model's dated snapshot: gpt-4o-mini-2024-07-18, claude-3-7-sonnet-20250219, …@20250219
_SNAPSHOT = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8})$")


_LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}


def serving_identity(spec: Mapping) -> tuple:
    """What serves a model spec, whatever its name: for a local model the weights' file or folder
    (a registry model's file, ``options.path`` / ``gguf_file``, or the model as a path; whichever
    local backend reads it), for a server its normalised address (a loopback host is one host:
    127.0.0.1 and localhost are the same machine) and the model without a dated snapshot suffix
    (gpt-4o-mini-2024-07-18 is gpt-4o-mini). Runtime options (threads, context length,
    concurrency) do not change the weights that answer, so they are left out; the backends'
    ``model_id`` (the file's sha256, the server's answer to ``GET /models``) is finer but needs the
    model loaded."""
    from urllib.parse import urlparse

    from medaudit.llm import models
    from medaudit.llm.openai_backend import normalise_base_url

    options = spec.get("options") or {}
    model = str(spec.get("model"))
    if spec.get("backend") == "planted":
        return ("planted", model, options.get("seed"))
    if spec.get("backend") == "openai":
        url = normalise_base_url(options.get("base_url"))
        host = urlparse(url).hostname or ""
        if host in _LOOPBACK:
            url = url.replace(host if ":" not in host else f"[{host}]", "localhost", 1)
        return ("server", url, _SNAPSHOT.sub("", model))
    path = options.get("path")
    if options.get("gguf_file"):
        g = Path(str(options["gguf_file"]))
        path = g if g.is_absolute() or not path else Path(str(path)) / g
    if path is None:
        try:
            path = models.model_file(model) if model in models.registry() else Path(model)
        except ValueError:
            path = Path(model)
    return ("weights", str(Path(str(path)).expanduser().resolve()))
