"""The one small interface every backend implements.

Chat messages in, one completion out per request, with optional token
log-probabilities. K samples of a question are K requests (each with its own
option permutation and seed), so every sample is reproducible on its own and
results do not depend on run order or batching.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True)
class GenParams:
    """The sampling settings of one request. ``temperature`` 0 is greedy;
    ``None`` (with ``top_p`` None) means "the server's own default": an API
    backend then sends no sampling parameter at all (a local backend needs
    concrete values: :mod:`medaudit.llm.decoding` reads a local model's own
    generation configuration). ``top_k`` 0 and ``repetition_penalty`` 1.0
    are off (and then leave the store key as it was before they existed).
    ``max_tokens`` :data:`NO_LIMIT` (0): no completion limit is sent, the
    API's own maximum applies (seed 003's authors called their API model so;
    an API backend only)."""
    NO_LIMIT: ClassVar[int] = 0
    temperature: float | None = 0.7
    top_p: float | None = 0.9
    max_tokens: int = 16
    seed: int = 0
    top_k: int = 0
    repetition_penalty: float = 1.0

    def key_dict(self) -> dict:
        """The settings as they enter a store key: ``top_k`` and
        ``repetition_penalty`` only when switched on."""
        # the fields by name (asdict's deep copy of each, a third of request_key's time, copies nothing here)
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("top_k", "repetition_penalty")}
        return {**d, **self.extras()}

    def extras(self) -> dict:
        """The sampling settings beyond temperature and top-p that are on
        (top-k not 0, a repetition penalty not 1.0)."""
        out = {}
        if self.top_k:
            out["top_k"] = self.top_k
        if self.repetition_penalty != 1.0:
            out["repetition_penalty"] = self.repetition_penalty
        return out

    def local(self, backend: str) -> "GenParams":
        """These settings, checked for a local backend: "the server's
        default" has no meaning on a model this process runs."""
        if self.temperature is None or self.top_p is None:
            raise ValueError(f"{backend}: temperature/top_p None means the server's default and is for API "
                             "backends; resolve a local model's own settings first (medaudit.llm.decoding.own_params)")
        if self.max_tokens == self.NO_LIMIT:
            raise ValueError(f"{backend}: max_tokens 0 (no limit sent) is for API backends; a local model "
                             "needs a token budget")
        return self


@dataclass(frozen=True)
class Request:
    """One request to a model: the chat messages, the generation settings, the answer
    letters whose distribution to report, the shared stem's length, and the planner's labels
    (never sent, never in the key)."""
    messages: tuple[tuple[str, str], ...]      # ((role, content), …): hashable and ordered
    params: GenParams = GenParams()
    # when set, the backend reports the distribution over these tokens at the
    # answer position (the token after "[") where it can
    answer_letters: tuple[str, ...] = ()
    # characters at the start of the last message that every sample of the same
    # question shares (the vignette, before the options): a local backend
    # evaluates them once and reuses them for each sample
    stem_chars: int | None = None
    # what the planner knows about the request and never sends: ((name, value), …) of item_id,
    # condition, prompt_format, k and, for a multiple-choice question, "gold" (the letter its right
    # option is shown under). No model reads it and it is not part of the store key (request_key);
    # only the planted model (llm/planted.py: validation) answers from it.
    labels: tuple[tuple[str, object], ...] = field(default=(), compare=False, repr=False)

    @staticmethod
    def chat(messages: list[dict], params: GenParams, answer_letters=(), stem_chars=None, labels=()) -> "Request":
        """A request from chat messages as dicts (``{"role", "content"}``), kept as hashable
        tuples."""
        return Request(tuple((m["role"], m["content"]) for m in messages), params, tuple(answer_letters),
                       stem_chars, tuple(labels))

    def message_dicts(self) -> list[dict]:
        """The messages as the chat APIs take them: a list of ``{"role", "content"}`` dicts."""
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class Completion:
    """One completion of a request: its text, token counts, latency, finish reason, the
    answer letter's log-probabilities where the backend gives them, retries, cost, and for a
    failed request why (``error``) and of what kind (``error_kind``)."""
    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    finish_reason: str = ""
    # log-prob of the token chosen right after "[" (seed 000 B.3), if any
    answer_logprob: float | None = None
    # log-probs of each of ``answer_letters`` at that position (exact where the
    # backend exposes the full vocabulary; from top-k where it does not)
    letter_logprobs: dict[str, float] | None = None
    retries: int = 0
    cost_usd: float = 0.0
    # a failed request: ``error`` says why in words (the server's status and
    # message where there is one), ``error_kind`` names the kind for counting:
    # "too_long" (the prompt cannot fit the context; not sent), "http_<status>"
    # (a non-retryable HTTP error), "gave_up" (still failing after every retry),
    # "no_content" (a 200 without text, or finish_reason "error"),
    # "interrupted". A failed completion is never stored: a rerun asks again.
    error: str = ""
    error_kind: str = ""
    # the model the server says answered (an API's response ``model`` field)
    served_model: str = ""
    # the generation settings actually sent where they differ from the
    # request's GenParams (e.g. {"max_completion_tokens": 64} for a reasoning
    # model that takes no temperature); recorded with the stored row
    settings: dict | None = None

    def to_dict(self) -> dict:
        """The completion's fields as a dict."""
        return asdict(self)


def too_long(n_prompt: int, n_ctx: int, max_tokens: int, context: str = "n_ctx", hint: str = "") -> Completion | None:
    """The failed Completion of a prompt that cannot fit: ``n_prompt`` tokens
    plus the ``max_tokens`` budget beyond the model's ``n_ctx`` context
    (measured before anything is evaluated, so the run goes on and the
    prompt is named); None when it fits. ``context`` names the limit in the
    message, ``hint`` what to do about it."""
    limit = n_ctx - max_tokens
    if n_prompt <= limit:
        return None
    return Completion(text="", tokens_in=n_prompt, error_kind="too_long",
                      error=f"prompt of {n_prompt} tokens does not fit: {context} {n_ctx} - max_tokens {max_tokens} "
                            f"leaves {limit}; not sent" + (f" ({hint})" if hint else ""))


class BackendStopped(RuntimeError):
    """Raised by ``Backend.complete`` when it stops before the end of a batch
    because going on cannot help (the same non-retryable failure repeated, or
    the user interrupted). Results already handed to ``on_result`` are kept
    (they are stored); ``summary`` says why in words."""

    def __init__(self, summary: str):
        super().__init__(summary)
        self.summary = summary


@runtime_checkable
class Backend(Protocol):
    """The contract every backend keeps.

    ``model_id`` is the model's serving identity and enters every cache key:
    it must change whenever the answers could (a file's sha256, a folder's
    content hash, an endpoint's normalised base URL with the model id it
    serves). A backend may change ``model_id`` during ``complete`` when it
    learns something about the endpoint that changes what is sent (e.g. an
    API dialect); :func:`medaudit.llm.runs.run` then stores the results under
    keys made with the new identity.

    ``complete`` returns one Completion per request, in request order, and
    hands each to ``on_result(i, completion)`` on the calling thread as soon
    as it exists, so that a run stopped half way keeps what it finished. A
    request that fails comes back with ``error``/``error_kind`` set; it does
    not raise, except :class:`BackendStopped` when the rest of the batch
    cannot succeed.
    """

    # "llamacpp", "transformers" ("transformers-score", "-prefix", "-stop": llm/hf.py), "openai", "vllm"
    kind: str
    model_id: str      # serving identity: part of every cache key

    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: "Callable[[int, Completion], None] | None" = None) -> list[Completion]:
        """One completion per request, in the same order."""
        ...


# --------------------------------------------------------------------------
# the answer position: where a bracketed option letter is generated


def letter_token_ids(encode, letters) -> tuple[dict, dict, dict]:
    """Token ids of each option letter in the three forms it can take at the
    answer position: "[X" as one token, " [X" as one token, and "X" as the
    token right after a "[" token. ``encode`` maps a string to token ids
    without special tokens. (Shared by the llama.cpp, transformers and vLLM
    backends.)"""
    enc = encode
    merged = {L: ids[0] for L in letters if len(ids := enc("[" + L)) == 1}
    space_merged = {L: ids[0] for L in letters if len(ids := enc(" [" + L)) == 1}
    plain = {}
    for L in letters:
        ids = enc("[" + L)
        plain[L] = ids[-1] if len(ids) >= 2 else enc(L)[-1]
    return merged, space_merged, plain


def find_answer_position(gen: list[int], pieces: list[str], forms: tuple[dict, dict, dict]
                         ) -> tuple[int, dict, str | None] | None:
    """The answer position in a generated sequence: ``(j, {letter: token id},
    chosen letter or None)`` where ``j`` is the index of the generated token
    whose distribution holds the letters — the token that opens the bracket
    ("[B" or " [B"), or the token after a token ending in "[". ``pieces`` are
    the generated tokens' texts. None when no bracket was opened."""
    merged, space_merged, plain = forms
    for j, tok in enumerate(gen):
        for ids in (merged, space_merged):
            hit = next((L for L, tid in ids.items() if tid == tok), None)
            if hit is not None:
                return j, ids, hit
        if pieces[j].rstrip().endswith("[") and j + 1 < len(gen):
            return j + 1, plain, next((L for L, tid in plain.items() if tid == gen[j + 1]), None)
    return None


def request_key(backend: str, model_id: str, req: Request, **meta) -> str:
    """The response-store key: a hash of everything that can change the text
    (backend, model identity, full messages, every sampling setting) plus the
    identifying metadata (item, condition, prompt format, sample index k,
    option permutation), so K samples never collapse onto one key."""
    payload = {
        "backend": backend, "model": model_id,
        "messages": req.messages, "params": req.params.key_dict(),
        "answer_letters": req.answer_letters, "meta": meta,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def derive_seed(*parts) -> int:
    """A 31-bit seed from any parts (global seed, item, condition, k)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF
