"""The Gemini API's batch mode for the batch files of :mod:`medaudit.engines.batch`,
with the official ``google-genai`` SDK (``pip install -e '.[vendors]'``);
the shared bookkeeping is :mod:`medaudit.engines.batch_vendors`.

    python -m medaudit.engines.batch_api submit|wait|status|download|cancel --vendor gemini --out DIR

As the API documents it (ai.google.dev, "Batch API" and the Batch Mode
reference): the requests go in a JSONL input file, one
``{"key", "request"}`` per line (the request a ``GenerateContentRequest``),
uploaded through the Files API (at most 2 GB a file; no request count
limit is documented, so the size decides), and
``models/{model}:batchGenerateContent`` makes one batch of one model from
it (a batch file whose bodies name several models becomes one batch per
model). The job is ``PENDING``, ``RUNNING``, then ``SUCCEEDED``,
``FAILED``, ``CANCELLED`` or ``EXPIRED`` (a job still pending or running
after 48 hours expires, with no results: every request of it comes back as
a ``batch_expired`` failure to resubmit). A finished job names its
responses file: one line per request, its ``key`` and either a
``GenerateContentResponse`` or an error status (a ``google.rpc.Status``: its
numeric code named as google.rpc names it, 13 → ``INTERNAL``).

The body → request translation follows the Gemini API's OpenAI
compatibility endpoint (the direct run's,
``https://generativelanguage.googleapis.com/v1beta/openai/``): system and
developer messages → ``systemInstruction`` (joined, one newline between),
user → ``user`` and assistant → ``model`` turns; ``generationConfig`` takes
``temperature``, ``topP``, ``topK``, ``maxOutputTokens`` (max_tokens or
max_completion_tokens), ``seed``, ``stopSequences``, ``presencePenalty``,
``frequencyPenalty``, and log-probs (``logprobs`` → ``responseLogprobs``,
``top_logprobs`` → ``logprobs``); ``n`` must be 1; any other field is
refused by name. A response becomes a chat completion: the text of the
first candidate's parts (thought parts left out), ``finishReason`` mapped
(``STOP`` → ``stop``, ``MAX_TOKENS`` → ``length``, the safety and
recitation reasons → ``content_filter``), the token counts (output:
candidates plus thoughts), ``modelVersion`` as the served model, and the
chosen and top candidates' log-probs as chat-completions log-probs. A
response without a candidate (a blocked prompt) has no content: the import
counts it as a failure.
"""
from __future__ import annotations

import json
import sys

from medaudit.engines.batch_vendors import (TranslationError, VendorBatch, chat_completion, error_line, max_tokens_of,
                                            ok_line, refuse_unknown, split_messages)

MAX_BYTES = 2 * 1024 ** 3                # the Files API's limit per input file
MAX_REQUESTS = 10 ** 9                   # none documented: the bytes decide
CONFIG = {"temperature": "temperature", "top_p": "topP", "top_k": "topK", "seed": "seed",
          "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty",
          "logprobs": "responseLogprobs", "top_logprobs": "logprobs"}
KNOWN = set(CONFIG) | {"model", "messages", "max_tokens", "max_completion_tokens", "stop", "n"}
FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
          "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
          "IMAGE_SAFETY": "content_filter"}
# google.rpc.Code, by number: what a google.rpc.Status (a responses-file line's ``error``) carries in
# its ``code`` (0 OK … 16 UNAUTHENTICATED, as the Status and Code protos in googleapis define them)
RPC_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
             "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
             "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
STATES = {"JOB_STATE_SUCCEEDED": "completed", "JOB_STATE_FAILED": "failed", "JOB_STATE_CANCELLED": "cancelled",
          "JOB_STATE_EXPIRED": "expired"}


def request_for(body: dict, where: str) -> dict:
    """The GenerateContentRequest of one chat-completions body (module docstring)."""
    refuse_unknown(body, KNOWN, where, "Gemini")
    if body.get("n", 1) != 1:
        raise TranslationError(f"{where}: n = {body['n']}: one candidate per request")
    system, turns = split_messages(body, where)
    req: dict = {"contents": [{"role": "model" if r == "assistant" else "user", "parts": [{"text": c}]}
                              for r, c in turns]}
    if system:
        req["systemInstruction"] = {"parts": [{"text": "\n".join(system)}]}
    cfg = {"maxOutputTokens": max_tokens_of(body, where)}
    for k, name in CONFIG.items():
        if body.get(k) is not None and not (k == "logprobs" and body[k] is False):
            cfg[name] = body[k]
    if body.get("stop"):
        cfg["stopSequences"] = [body["stop"]] if isinstance(body["stop"], str) else list(body["stop"])
    req["generationConfig"] = cfg
    return req


def _logprobs(res: dict) -> list | None:
    chosen = res.get("chosenCandidates") or []
    top = res.get("topCandidates") or []
    if not chosen:
        return None
    out = []
    for i, c in enumerate(chosen):
        alts = (top[i].get("candidates") if i < len(top) else None) or [c]
        out.append({"token": c.get("token", ""), "logprob": float(c.get("logProbability", 0.0)), "bytes": None,
                    "top_logprobs": [{"token": a.get("token", ""), "logprob": float(a.get("logProbability", 0.0)),
                                      "bytes": None} for a in alts]})
    return out


def error_code(err: dict) -> str:
    """A failed line's error in words: its ``status`` where it has one (the API's HTTP error form,
    e.g. ``INTERNAL``), else the name of its numeric google.rpc code (a ``google.rpc.Status``, as
    the responses file writes one: 13 → ``INTERNAL``), an HTTP-range number as ``http_<n>``."""
    if err.get("status"):
        return str(err["status"])
    code = err.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return RPC_CODES[code] if 0 <= code < len(RPC_CODES) else f"http_{code}"
    return str(code or "error")


def line_of(d: dict, model: str) -> dict:
    """One line of a Gemini responses file as an OpenAI-batch line."""
    cid = d.get("key")
    err = d.get("error") or d.get("status")
    if err and not d.get("response"):
        return error_line(cid, error_code(err), str(err.get("message") or json.dumps(err)))
    r = d.get("response") or {}
    u = r.get("usageMetadata") or {}
    tokens = dict(prompt_tokens=int(u.get("promptTokenCount") or 0),
                  completion_tokens=int(u.get("candidatesTokenCount") or 0) + int(u.get("thoughtsTokenCount") or 0))
    served = r.get("modelVersion") or model
    cands = r.get("candidates") or []
    if not cands:
        why = (r.get("promptFeedback") or {}).get("blockReason") or "no candidate"
        return error_line(cid, "prompt_blocked", f"the response has no candidate ({why})")
    c = cands[0]
    parts = (c.get("content") or {}).get("parts") or []
    text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
    reason = c.get("finishReason") or "STOP"
    return ok_line(cid, chat_completion(rid=r.get("responseId", ""), model=served, text=text,
                                        finish=FINISH.get(reason, reason.lower()),
                                        logprobs=_logprobs(c.get("logprobsResult") or {}), **tokens))


class GeminiBatch(VendorBatch):
    """A batch folder's jobs in the Gemini API's batch mode: the requests of each model
    written to a JSONL file of ``{"key", "request"}`` lines (:func:`request_for`), uploaded
    through the Files API and run as one batch job, results read back as OpenAI-batch lines."""
    vendor = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    api_key_env = "GEMINI_API_KEY"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES
    expiry = "48 hours pending or running (then no results at all)"

    def _client(self, base_url, key):
        try:
            from google import genai
        except ImportError:
            raise TranslationError("the Gemini adapter needs the google-genai package: pip install -e '.[vendors]'") \
                from None
        # the batch and files methods are the v1beta API's
        return genai.Client(api_key=key, http_options={"api_version": "v1beta",
                                                       **({"base_url": base_url} if base_url else {})})

    def _translate(self, cid, body, where):
        if not body.get("model"):
            raise TranslationError(f"{where}: no model")
        return str(body["model"]), {"key": cid, "request": request_for(body, where)}

    def _create(self, group, requests, name):
        inputs = self.folder / "vendor"
        inputs.mkdir(exist_ok=True)
        path = inputs / f"{name}.gemini.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
        up = self.client.files.upload(file=str(path), config={"display_name": name, "mime_type": "jsonl"})
        job = self.client.batches.create(model=group, src=up.name, config={"display_name": name})
        return job.name

    def _retrieve(self, batch_id):
        job = self.client.batches.get(name=batch_id)
        state = getattr(job.state, "value", None) or str(job.state)
        dest = getattr(getattr(job, "dest", None), "file_name", None)
        return STATES.get(state, "in_progress"), {"counts": {"state": state}, "responses_file": dest}

    def _results(self, part):
        if not part.get("responses_file"):
            return None
        return self.client.files.download(file=part["responses_file"])

    def _lines(self, raw, part):
        return [line_of(json.loads(x), part["group"]) for x in raw.decode("utf-8").splitlines() if x.strip()]

    def _cancel(self, batch_id):
        self.client.batches.cancel(name=batch_id)

    def _missing(self, error):
        from google.genai import errors

        return isinstance(error, errors.APIError) and error.code == 404


if __name__ == "__main__":
    from medaudit.engines.batch_api import main

    sys.exit(main(["--vendor", "gemini", *sys.argv[1:]]))
