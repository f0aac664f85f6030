"""What :func:`medaudit.llm.runs.run` does with the requests the store lacks:
a dispatch policy, chosen once per run and passed in.

* :class:`Direct` sends them to the backend (the default).
* :class:`Collect` writes them to a batch folder's ``manifest.jsonl`` under
  their store keys and stops the notebook (:class:`BatchCollected`):
  ``python -m medaudit.engines.batch export`` turns the manifest into batch files.
* :class:`Shard` sends only this node's shard of them (the key's hash modulo
  N) and then stops the notebook (:class:`ShardDone`) while other nodes
  answer the rest; ``python -m medaudit.engines.batch merge`` joins the stores.
* :class:`StoredOnly` sends nothing: a request the store (or a replayed
  recording) does not answer stops the run (:class:`NotStored`), naming
  the request and what to record again. The test run uses it, so a
  recording made stale by a prompt or parameter change fails at once
  instead of becoming a silent live run.

:func:`from_env` reads the policy a notebook process was started with (the
notebook runs in its own kernel: the batch CLI and the test run set an
environment variable before they start it). The outcome of a stopped run is
an exception of its own type, never a message to match.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .openai_backend import TOP_LOGPROBS
from .recorded import replayed_files

ENV_COLLECT = "MEDAUDIT_BATCH_COLLECT"
ENV_SHARD = "MEDAUDIT_SHARD"
ENV_FINGERPRINT = "MEDAUDIT_BATCH_FINGERPRINT"
ENV_ENGINE = "MEDAUDIT_BATCH_ENGINE"
ENV_STORED_ONLY = "MEDAUDIT_STORED_ONLY"
MANIFEST = "manifest.jsonl"


class DispatchStop(RuntimeError):
    """A run stopped on purpose by its dispatch policy (not a failure of the model)."""


class BatchCollected(DispatchStop):
    """The stage's pending requests were written to the manifest; the
    notebook stops here (its next step would need the replies)."""


class ShardDone(DispatchStop):
    """This node answered its shard of a stage's pending requests; the other
    shards are answered elsewhere. Merge the stores, then go on."""


class NotStored(DispatchStop):
    """Stored-only mode: a planned request has no stored answer."""


class ShardSpecError(ValueError):
    """A shard named other than ``i/N`` with 0 <= i < N."""


def shard_spec(text: str) -> tuple[int, int]:
    """``"i/N"`` → (i, N) with 0 <= i < N."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ShardSpecError(f"--shard must be i/N with integers, e.g. 0/3 (got {text!r})") from None
    if n < 1 or not 0 <= i < n:
        raise ShardSpecError(f"--shard {text}: need 0 <= i < N")
    return i, n


def in_shard(key: str, i: int, n: int) -> bool:
    """Whether a store key belongs to shard ``i`` of ``n``: its hex hash
    modulo ``n`` (deterministic, the same on every node)."""
    return int(key[:16], 16) % n == i


# The engines a local backend's requests can be batched to, and the field each
# takes for the sampling settings the local backends apply, with the value that
# switches it off. Whatever a body leaves out, an engine fills with its own
# defaults (llama_cpp.server: top-k 40, min-p 0.05, repeat penalty 1.1; vLLM:
# the model's generation_config.json), so the body names every one.
ENGINES = {
    "llama.cpp": {"top_k": ("top_k", 0), "min_p": ("min_p", 0.0), "repetition_penalty": ("repeat_penalty", 1.0)},
    "vllm": {"top_k": ("top_k", -1), "min_p": ("min_p", 0.0), "repetition_penalty": ("repetition_penalty", 1.0)},
}
# what a repetition penalty looks at: llama.cpp the last 64 tokens, transformers and vLLM prompt and reply
_PENALTY_SCOPE = {"llamacpp": "last 64 tokens", "llama.cpp": "last 64 tokens", "transformers": "prompt and reply",
                  "vllm": "prompt and reply"}


class EngineError(ValueError):
    """A batch engine cannot reproduce a backend's sampling: says why and what to pass."""


def body_for(backend, req, engine: str | None = None) -> tuple[dict, dict | None]:
    """(the chat-completions body, the settings sent where they differ from
    the request's GenParams). A backend that talks to an OpenAI-compatible
    endpoint says itself what it would send (``request_body``: its API style
    and log-prob choice included): the direct run sends the same. A local
    backend's body is for the batch ``engine`` (:data:`ENGINES`) and names
    every sampling setting the backend applies in that engine's field names;
    the settings sent then record the engine and those settings. Refused
    (:class:`EngineError`) without an engine, for an engine that applies a
    repetition penalty differently, and for letter scoring (no engine scores)."""
    if hasattr(backend, "request_body"):
        kw, settings = backend.request_body(req)
        return json.loads(json.dumps(kw)), settings
    kind = backend.kind
    p = req.params.local(kind)
    if kind.startswith("transformers-score"):
        raise EngineError("the transformers backend's letter scoring reads the model's distribution, which no batch "
                          "engine returns; export with mcq_mode: generate")
    if kind.endswith("-stop"):
        raise EngineError("stop_at_answer (stop at the ']' after an opened '[') is the transformers backend's own "
                          "rule, which no batch engine applies; export without it")
    kind = kind.split("-")[0]           # the transformers backend's decoders share its penalty rule
    if engine is None:
        raise EngineError(f"the {kind} backend samples with top-k {p.top_k or 'off'}, min-p off and repetition "
                          f"penalty {p.repetition_penalty:g}; a batch engine applies its own defaults to what a body "
                          f"leaves out: name the engine that answers it (--engine {' | '.join(ENGINES)})")
    if engine not in ENGINES:
        raise EngineError(f"engine {engine!r}: use one of {', '.join(ENGINES)} (or send the requests to a server "
                          "through the openai backend)")
    if p.repetition_penalty != 1.0 and _PENALTY_SCOPE.get(kind) != _PENALTY_SCOPE[engine]:
        raise EngineError(f"the {kind} backend's repetition penalty ({p.repetition_penalty:g}) looks at the "
                          f"{_PENALTY_SCOPE.get(kind, 'tokens it chooses')}, {engine}'s at the "
                          f"{_PENALTY_SCOPE[engine]}: the batch cannot reproduce it; use the other engine or a "
                          "direct run")
    names = ENGINES[engine]
    sampling = {names["top_k"][0]: p.top_k or names["top_k"][1], names["min_p"][0]: names["min_p"][1],
                names["repetition_penalty"][0]: p.repetition_penalty}
    body = dict(model=getattr(backend, "model_name", None) or backend.model_id, messages=req.message_dicts(),
                seed=p.seed, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_tokens, **sampling)
    if req.answer_letters:
        body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    return body, {"engine": engine, "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens,
                  **sampling}


def write_manifest(folder: Path, backend, samples: list, *, model: str, fingerprint: str = "",
                   engine: str | None = None) -> int:
    """Append the samples to ``folder/manifest.jsonl`` (one JSON line each:
    what the store row needs, the request body for ``engine``,
    :func:`body_for`, and the request's labels beside the body). Every body
    is made before anything is written."""
    folder.mkdir(parents=True, exist_ok=True)
    bodies = [body_for(backend, s.request, engine) for s in samples]
    with open(folder / MANIFEST, "a", encoding="utf-8") as f:
        for s, (body, settings) in zip(samples, bodies):
            r = s.request
            f.write(json.dumps({
                "key": s.key, "model": model, "backend": backend.kind, "model_id": backend.model_id,
                "item_id": s.item_id, "condition": s.condition, "prompt_format": s.prompt_format, "k": s.k,
                "perm": s.perm, "messages": [list(m) for m in r.messages], "params": asdict(r.params),
                "answer_letters": list(r.answer_letters), "stem_chars": r.stem_chars,
                "judged_key": s.meta.get("judged_key"), "settings": settings,
                "fingerprint": fingerprint, "body": body,
                # what the planner knows and never sends (Request.labels): beside the body, not in it,
                # for a backend that answers from it (the planted model, validation only)
                "labels": dict(r.labels)}, ensure_ascii=False) + "\n")
    return len(samples)


def _formats(todo: list) -> str:
    return ", ".join(sorted({s.prompt_format for s in todo}))


@dataclass
class Direct:
    """Send every pending request."""

    def select(self, backend, todo: list, *, model: str) -> list:
        """The requests to send now: every pending one."""
        return todo

    def after(self, pending: int, sent: int, report) -> None:
        """What to do once the selected requests are answered: nothing, the run goes on."""
        return None


@dataclass
class Collect(Direct):
    """Write the pending requests to ``folder``'s manifest and stop."""
    folder: Path
    fingerprint: str = ""
    engine: str | None = None

    def select(self, backend, todo: list, *, model: str) -> list:
        """Write the pending requests to the folder's manifest and stop the notebook
        (:class:`BatchCollected`); with none pending, send nothing and go on."""
        if not todo:
            return todo
        n = write_manifest(Path(self.folder), backend, todo, model=model, fingerprint=self.fingerprint,
                           engine=self.engine)
        raise BatchCollected(f"{n} pending requests of {model} ({_formats(todo)}) written to "
                             f"{Path(self.folder) / MANIFEST}; the notebook stops here (batch export)")


@dataclass
class Shard(Direct):
    """Send shard ``i`` of ``n`` of the pending requests, then stop the
    notebook when other shards own the rest (the run's report in the
    message: a failure of this shard is named, not hidden)."""
    i: int
    n: int

    def select(self, backend, todo: list, *, model: str) -> list:
        """The pending requests of this shard: those whose key's hash falls to ``i`` of ``n``
        (:func:`in_shard`)."""
        return [s for s in todo if in_shard(s.key, self.i, self.n)]

    def after(self, pending: int, sent: int, report) -> None:
        """Stop the notebook (:class:`ShardDone`) when other shards hold pending requests;
        go on when this shard held them all."""
        if pending > sent:
            raise ShardDone(f"shard {self.i}/{self.n}: sent {sent} of the stage's {pending} pending requests "
                            f"({report!r}); the others belong to other shards. Merge the stores "
                            f"(python -m medaudit.engines.batch merge), then rerun.")


@dataclass
class StoredOnly(Direct):
    """Send nothing; a pending request stops the run, named, with ``hint``
    (what to record again)."""
    hint: str = ""

    def select(self, backend, todo: list, *, model: str) -> list:
        """Send nothing: a pending request stops the run (:class:`NotStored`), naming the
        first one, the recording that holds its format and ``hint``."""
        if not todo:
            return todo
        s = todo[0]
        files = replayed_files(s.prompt_format)
        where = f" ({', '.join(files)} holds this format)" if files else ""
        raise NotStored(f"stored-only run ({ENV_STORED_ONLY}): {len(todo)} requests of {model} ({_formats(todo)}) "
                        f"have no stored or recorded answer, first {s.item_id} / {s.condition} / "
                        f"{s.prompt_format} k={s.k} (key {s.key[:12]}). A prompt, a setting or the model "
                        f"changed since the recording{where}: record it again"
                        + (f" ({self.hint})" if self.hint else "") + ".")


def from_env(environ=None) -> Direct:
    """The policy the environment names: ``MEDAUDIT_BATCH_COLLECT=DIR`` →
    :class:`Collect` (with ``MEDAUDIT_BATCH_FINGERPRINT``),
    ``MEDAUDIT_SHARD=i/N`` → :class:`Shard`, ``MEDAUDIT_STORED_ONLY`` (any
    non-empty value other than 0; the value, if not 1, is the hint) →
    :class:`StoredOnly`; else :class:`Direct`. Two of them at once is an error."""
    env = os.environ if environ is None else environ
    named = [k for k in (ENV_COLLECT, ENV_SHARD, ENV_STORED_ONLY) if env.get(k) not in (None, "", "0")]
    if len(named) > 1:
        raise ValueError(f"{' and '.join(named)} are both set: a run has one dispatch policy")
    if not named:
        return Direct()
    value = env[named[0]]
    if named[0] == ENV_COLLECT:
        return Collect(Path(value), env.get(ENV_FINGERPRINT, ""), env.get(ENV_ENGINE) or None)
    if named[0] == ENV_SHARD:
        return Shard(*shard_spec(value))
    return StoredOnly("" if value == "1" else value)
