"""The Anthropic Message Batches API for the batch files of
:mod:`medaudit.engines.batch`, with the official ``anthropic`` SDK
(``pip install -e '.[vendors]'``); the shared bookkeeping is
:mod:`medaudit.engines.batch_vendors`.

    python -m medaudit.engines.batch_api submit|wait|status|download|cancel --vendor anthropic --out DIR

As the API documents it (docs.anthropic.com, "Batch processing" and the
Message Batches reference): one ``POST /v1/messages/batches`` carries the
requests themselves (``{"custom_id", "params"}``, the params a Messages API
request), at most 100,000 requests or 256 MB per batch; a ``custom_id`` is
1 to 64 characters of ``[a-zA-Z0-9_-]`` (a store key, 64 hex digits, is
one); the batch is ``in_progress`` until it ``ended`` (``canceling`` in
between when cancelled), and ends within 24 hours: what it has not processed
by then comes back ``expired``. Its results (a JSONL file at
``results_url``, kept 29 days, in any order, matched by ``custom_id``) are
one line per request, ``succeeded`` (the Message), ``errored`` (the error),
``canceled`` or ``expired``.

The body → params translation follows Anthropic's OpenAI SDK compatibility
layer (the direct run's endpoint, ``https://api.anthropic.com/v1/``): system
and developer messages are joined (one newline between them) into
``system``; ``max_tokens`` or ``max_completion_tokens`` → ``max_tokens``;
``temperature`` (0 to 1: a higher one is refused here, where the layer
would cap it), ``top_p`` (both for a model that takes one or the other,
:data:`medaudit.llm.specs.ONE_OF_TEMPERATURE_TOP_P`, refused here: the API
would refuse every request), ``stop`` → ``stop_sequences``; ``seed``,
``logprobs``, ``top_logprobs``, ``reasoning_effort``, ``presence_penalty``
and ``frequency_penalty`` are ignored, as that layer ignores them (so no
log-probs come back, as from a direct run); ``n`` must be 1; any other field is
refused by name. A Message becomes a chat completion with the text of its
text blocks, ``stop_reason`` mapped (``end_turn``, ``stop_sequence``,
``pause_turn`` → ``stop``; ``max_tokens`` → ``length``; ``refusal`` →
``content_filter``; ``tool_use`` → ``tool_calls``) and its token counts.
"""
from __future__ import annotations

import json
import sys

from medaudit.engines.batch_vendors import (TranslationError, VendorBatch, chat_completion, error_line, max_tokens_of,
                                            ok_line, refuse_unknown, split_messages)
from medaudit.llm.specs import ONE_OF_TEMPERATURE_TOP_P

MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
MAPPED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "n"}
IGNORED = {"seed", "logprobs", "top_logprobs", "reasoning_effort", "presence_penalty", "frequency_penalty"}
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
          "model_context_window_exceeded": "length", "refusal": "content_filter", "tool_use": "tool_calls"}


def params_for(body: dict, where: str) -> dict:
    """The Messages API params of one chat-completions body (module docstring)."""
    refuse_unknown(body, MAPPED | IGNORED, where, "Anthropic")
    if body.get("n", 1) != 1:
        raise TranslationError(f"{where}: n = {body['n']}: a Message Batches request answers once")
    if not body.get("model"):
        raise TranslationError(f"{where}: no model")
    system, turns = split_messages(body, where)
    p: dict = {"model": body["model"], "max_tokens": max_tokens_of(body, where),
               "messages": [{"role": r, "content": c} for r, c in turns]}
    if system:
        p["system"] = "\n".join(system)
    if body.get("temperature") is not None:
        if not 0 <= float(body["temperature"]) <= 1:
            raise TranslationError(f"{where}: temperature {body['temperature']} is outside Anthropic's 0 to 1")
        if body.get("top_p") is not None and ONE_OF_TEMPERATURE_TOP_P.search(str(body["model"])):
            raise TranslationError(f"{where}: {body['model']} takes temperature or top_p, not both (export with "
                                   "top_p: null: the temperature alone)")
        p["temperature"] = body["temperature"]
    if body.get("top_p") is not None:
        p["top_p"] = body["top_p"]
    if body.get("stop"):
        p["stop_sequences"] = [body["stop"]] if isinstance(body["stop"], str) else list(body["stop"])
    return p


def line_of(d: dict) -> dict:
    """One result line of the Message Batches API as an OpenAI-batch line."""
    cid, res = d.get("custom_id"), d.get("result") or {}
    kind = res.get("type")
    if kind == "succeeded":
        m = res.get("message") or {}
        text = "".join(b.get("text", "") for b in m.get("content") or [] if b.get("type") == "text")
        u = m.get("usage") or {}
        return ok_line(cid, chat_completion(
            rid=m.get("id", ""), model=m.get("model", ""), text=text,
            finish=FINISH.get(m.get("stop_reason"), m.get("stop_reason") or "stop"),
            prompt_tokens=int(u.get("input_tokens") or 0), completion_tokens=int(u.get("output_tokens") or 0)))
    if kind == "errored":
        err = (res.get("error") or {}).get("error") or res.get("error") or {}
        return error_line(cid, str(err.get("type") or "errored"), str(err.get("message") or json.dumps(err)))
    if kind == "canceled":
        return error_line(cid, "batch_cancelled", "the Message Batch was canceled before this request was processed")
    if kind == "expired":
        return error_line(cid, "batch_expired", "the Message Batch reached its 24-hour limit before this request")
    return error_line(cid, "malformed", f"a result of type {kind!r}")


class AnthropicBatch(VendorBatch):
    """A batch folder's jobs at Anthropic's Message Batches API: each request sent as
    ``{"custom_id", "params"}`` (the Messages API request :func:`params_for` makes), results read
    back as OpenAI-batch lines."""
    vendor = "anthropic"
    default_base_url = "https://api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES
    expiry = "24 hours (unprocessed requests come back expired); results kept 29 days"

    def _client(self, base_url, key):
        try:
            import anthropic
        except ImportError:
            raise TranslationError("the Anthropic adapter needs the anthropic package: pip install -e '.[vendors]'") \
                from None
        from medaudit.llm.openai_backend import is_local

        extra = {"http_client": anthropic.DefaultHttpxClient(trust_env=False)} if is_local(base_url) else {}
        return anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=3, **extra)

    def _translate(self, cid, body, where):
        return "", {"custom_id": cid, "params": params_for(body, where)}

    def _create(self, group, requests, name):
        return self.client.messages.batches.create(requests=requests).id

    def _retrieve(self, batch_id):
        b = self.client.messages.batches.retrieve(batch_id)
        rc = b.request_counts
        counts = {k: getattr(rc, k) for k in ("processing", "succeeded", "errored", "canceled", "expired")}
        if b.processing_status != "ended":
            return "in_progress", {"counts": counts}
        state = "cancelled" if rc.canceled else "expired" if rc.expired else "completed"
        return state, {"counts": counts}

    def _results(self, part):
        return b"".join(json.dumps(r.to_dict(), ensure_ascii=False).encode() + b"\n"
                        for r in self.client.messages.batches.results(part["batch_id"]))

    def _lines(self, raw, part):
        return [line_of(json.loads(x)) for x in raw.decode("utf-8").splitlines() if x.strip()]

    def _cancel(self, batch_id):
        self.client.messages.batches.cancel(batch_id)

    def _missing(self, error):
        import anthropic

        return isinstance(error, anthropic.NotFoundError)


if __name__ == "__main__":
    from medaudit.engines.batch_api import main

    sys.exit(main(["--vendor", "anthropic", *sys.argv[1:]]))
