"""A model's own decoding settings: "the default generation configuration".

Two studies decode with each model's own settings rather than settings of
their own. Seed 002 §3.3 generates its notes "using default generation
configurations"; seed 003's authors call a transformers pipeline with
nothing but a token budget (``pipe(chats, max_new_tokens=1)`` for an option,
4096 for an explanation), so each model samples as its own
``generation_config.json`` says. This module says what that is for any model
spec of a profile ({name, backend, model, options}), and where it was read:

- a ``generation_config`` mapping in the spec itself (the profile's word for
  a model whose files say nothing, or to override them);
- an API or server model (backend ``openai``): no sampling parameter is
  sent at all, so the server applies its own default (a vLLM server: the
  model's generation_config.json; an API: its documented default);
- a local GGUF file (``llamacpp``): llama.cpp's sampling metadata
  (``general.sampling.*``) when the file carries it, else the registry
  entry's ``generation_config`` (params/models.yaml: the upstream model's
  generation_config.json, transcribed), else an error that says what to add;
- a local folder (``transformers``, ``vllm``): its generation_config.json,
  read as transformers reads it (no file: transformers' defaults).

transformers' reading, which the authors' pipelines used: ``do_sample``
false or absent is greedy decoding whatever the temperature says; sampling
applies temperature, top-k (default 50) and top-p (default 1.0); a
repetition penalty applies in both cases.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from medaudit.llm import GenParams
from medaudit.llm import models as _models

# transformers' GenerationConfig defaults for the settings read here
TRANSFORMERS_DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 50,
                         "repetition_penalty": 1.0}
# llama.cpp's GGUF sampling keys (gguf-py Keys.General.SAMPLING_*) → the names used here,
# and llama.cpp's defaults for a key a file leaves out
GGUF_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
             "general.sampling.top_k": "top_k", "general.sampling.penalty_repeat": "repetition_penalty"}
LLAMACPP_DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "repetition_penalty": 1.0}


class DecodingError(ValueError):
    """A model's own decoding cannot be known: names the model and what to add."""


@dataclass(frozen=True)
class OwnDecoding:
    """A model's own sampling settings and where they were read.
    ``temperature`` None: the server's own default (nothing is sent)."""
    temperature: float | None
    top_p: float | None
    top_k: int = 0
    repetition_penalty: float = 1.0
    source: str = ""

    def params(self, max_tokens: int, seed: int = 0) -> GenParams:
        """The request settings with this decoding and a token budget."""
        return GenParams(self.temperature, self.top_p, int(max_tokens), seed, self.top_k, self.repetition_penalty)

    def describe(self) -> str:
        """One line for a notebook: the settings and their source."""
        if self.temperature is None:
            what = "server default (no sampling parameter sent)"
        elif self.temperature == 0:
            what = "greedy"
        else:
            what = f"temperature {self.temperature:g}, top-p {self.top_p:g}, top-k {self.top_k or 'off'}"
        if self.repetition_penalty != 1.0:
            what += f", repetition penalty {self.repetition_penalty:g}"
        return f"{what} ({self.source})"


def from_generation_config(cfg: dict, source: str) -> OwnDecoding:
    """The decoding a generation_config.json mapping gives under
    transformers' reading (module docstring). Unknown keys are ignored;
    a value of the wrong kind raises naming ``source`` and the key."""
    c = {**TRANSFORMERS_DEFAULTS, **{k: v for k, v in cfg.items() if k in TRANSFORMERS_DEFAULTS and v is not None}}
    try:
        rep = float(c["repetition_penalty"])
        if not c["do_sample"] or float(c["temperature"]) == 0:
            return OwnDecoding(0.0, 1.0, 0, rep, source + ": greedy (do_sample false or absent)"
                               if not c["do_sample"] else source + ": greedy (temperature 0)")
        return OwnDecoding(float(c["temperature"]), float(c["top_p"]), int(c["top_k"]), rep, source)
    except (TypeError, ValueError) as e:
        raise DecodingError(f"{source}: a sampling setting is not a number ({e})") from None


# GGUF value types (the GGUF specification): fixed sizes, struct codes; 8 string, 9 array
_GGUF_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_metadata(path: str | Path, wanted: set[str]) -> dict:
    """The values of the ``wanted`` keys of a GGUF file's key-value header
    (GGUF v2/v3, little-endian), read without loading the tensors or the
    tokenizer's arrays (they are skipped, not decoded): gguf's own reader
    takes ~6 s on the embedded model for the same answer."""
    import mmap
    import struct

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise DecodingError(f"{path}: not a GGUF file")
        version, _tensors, n_kv = struct.unpack_from("<IQQ", m, 4)
        if version not in (2, 3):
            raise DecodingError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
        pos, out = 24, {}

        def string(at: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", m, at)
            return m[at + 8: at + 8 + n].decode("utf-8", "replace"), at + 8 + n

        def skip_or_read(t: int, at: int, read: bool):
            if t in _GGUF_FIXED:
                code = _GGUF_FIXED[t]
                return (struct.unpack_from("<" + code, m, at)[0] if read else None), at + struct.calcsize(code)
            if t == 8:
                s, at = string(at)
                return (s if read else None), at
            if t == 9:
                item, count = struct.unpack_from("<IQ", m, at)
                at += 12
                if item in _GGUF_FIXED and not read:
                    return None, at + count * struct.calcsize(_GGUF_FIXED[item])
                vals = []
                for _ in range(count):
                    v, at = skip_or_read(item, at, read)
                    vals.append(v)
                return (vals if read else None), at
            raise DecodingError(f"{path}: unknown GGUF value type {t}")

        for _ in range(n_kv):
            key, pos = string(pos)
            (t,) = struct.unpack_from("<I", m, pos)
            value, pos = skip_or_read(t, pos + 4, key in wanted)
            if key in wanted:
                out[key] = value
        return out


def gguf_sampling(path: str | Path) -> dict | None:
    """llama.cpp's sampling metadata of a GGUF file ({temperature, top_p,
    top_k, repetition_penalty}, llama.cpp's defaults for the keys it leaves
    out), or None when the file carries none."""
    meta = gguf_metadata(path, set(GGUF_KEYS))
    found = {GGUF_KEYS[k]: v for k, v in meta.items()}
    return {**LLAMACPP_DEFAULTS, **found} if found else None


def _local_gguf(spec: dict) -> Path | None:
    opts = spec.get("options") or {}
    if opts.get("path"):
        return Path(opts["path"])
    if spec.get("model") in _models.registry():
        return Path(_models.model_path(spec["model"]))
    return Path(spec["model"]) if str(spec.get("model", "")).endswith(".gguf") else None


def own(spec: dict) -> OwnDecoding:
    """The own decoding of a profile's model spec (module docstring: the
    sources in order)."""
    name = spec.get("name") or spec.get("model")
    if isinstance(spec.get("generation_config"), dict):
        return from_generation_config(spec["generation_config"], f"{name}: the profile's generation_config")
    backend = spec.get("backend", "llamacpp")
    if backend == "openai":
        return OwnDecoding(None, None, 0, 1.0, f"{name}: the server's own default")
    if backend == "llamacpp":
        path = _local_gguf(spec)
        meta = gguf_sampling(path) if path is not None and path.exists() else None
        if meta is not None:
            return OwnDecoding(float(meta["temperature"]), float(meta["top_p"]), int(meta["top_k"]),
                               float(meta["repetition_penalty"]), f"{name}: the GGUF file's sampling metadata")
        entry = _models.registry().get(spec.get("model"), {})
        if isinstance(entry.get("generation_config"), dict):
            return from_generation_config(entry["generation_config"],
                                          f"{name}: params/models.yaml generation_config "
                                          f"({entry.get('generation_config_source', 'upstream')})")
        raise DecodingError(f"{name}: the GGUF file carries no sampling metadata and the model has no "
                            "generation_config in params/models.yaml or in its profile spec; add "
                            "generation_config: {do_sample: ..., temperature: ..., top_p: ...} (the upstream "
                            "model's generation_config.json) to the spec, or choose a greedy decoding")
    opts = spec.get("options") or {}
    folder = Path(opts.get("path") or spec.get("model", ""))
    if (folder / "generation_config.json").is_file():
        f = folder / "generation_config.json"
        try:
            cfg = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DecodingError(f"{f}: not valid JSON ({e})") from None
        return from_generation_config(cfg, str(f))
    if folder.is_dir():
        return from_generation_config({}, f"{folder}: no generation_config.json, transformers' defaults")
    raise DecodingError(f"{name}: {folder} is not a model folder; give the model's folder "
                        "or a generation_config in its spec")


def is_hosted_api(spec: dict) -> bool:
    """Whether a profile's model spec is a hosted API model (the way seeds
    001/003/004's authors called GPT, Claude, DeepSeek and Qwen): backend
    ``openai`` at a ``base_url`` that is not this machine (none: the OpenAI
    API) and no ``generation_config`` of its own. A model served here (a
    vLLM server on loopback) or given a ``generation_config`` is a local
    model behind a server."""
    from medaudit.llm.openai_backend import is_local

    return (spec.get("backend") == "openai" and not isinstance(spec.get("generation_config"), dict)
            and not is_local((spec.get("options") or {}).get("base_url")))


def own_params(spec: dict, max_tokens: int, seed: int = 0) -> GenParams:
    """:func:`own` as request settings with ``max_tokens``."""
    return own(spec).params(max_tokens, seed)
