"""A fake Anthropic API on 127.0.0.1 (stdlib only), written from Anthropic's
public documentation (the Message Batches reference and guide, and the
OpenAI SDK compatibility page), for the tests of medaudit.engines.batch_anthropic:

* ``POST /v1/messages/batches`` ``{"requests": [{"custom_id", "params"}]}``:
  1 to 100,000 requests and at most 256 MB (else 413), each ``custom_id``
  ``^[a-zA-Z0-9_-]{1,64}$`` and unique (else 400); a new batch is
  ``in_progress`` with ``request_counts.processing`` = n, ``expires_at`` 24 h on.
* ``GET /v1/messages/batches/{id}``: the first look leaves it in progress,
  the second processes it: every request ``succeeded`` (a Message),
  ``errored`` (``fail``: an ``api_error``; a request without
  ``max_tokens``, or with both temperature and top_p for a model of
  ``ONE_OF``: an ``invalid_request_error``) or ``expired`` (past
  ``expire_after`` requests, as at the 24-hour limit), then ``ended``
  with its ``results_url``; a batch being cancelled ends with every request
  ``canceled``.
* ``POST /v1/messages/batches/{id}/cancel``: ``canceling``. An id the
  server does not know (``forget()``: as after a restart) is a 404
  ``not_found_error`` on every route.
* ``GET /v1/messages/batches/{id}/results``: the JSONL results, in reverse
  request order (the API promises no order).
* ``POST /v1/chat/completions``: the OpenAI-compatible endpoint, converting
  the body as the compatibility page says (system messages hoisted and
  joined by a newline, temperature capped at 1, seed and log-probs
  ignored) and answering with the same model; both temperature and top_p
  for a model of ``ONE_OF``: 400, as the Messages API answers.

The "model" is deterministic: the reply is a function of the Messages
request (system, turns, temperature, top_p, max_tokens; a word a token),
so a request answered in a batch and directly must agree exactly.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from datetime import datetime, timedelta, timezone

from support.fault_proxy import Served

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# the models that take temperature or top_p, not both (the models overview and migration guide: Claude
# Opus 4.1, and Sonnet, Haiku and Opus 4.5 on); a request to one with both is refused (400)
ONE_OF = ("claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5", "claude-sonnet-4-6",
          "claude-opus-4-6")
BOTH = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."


def refused(params: dict) -> str | None:
    """Why the Messages API refuses these params before answering (None: it answers)."""
    model = str(params.get("model", ""))
    if (any(model == m or model.startswith(m + "-") for m in ONE_OF)
            and params.get("temperature") is not None and params.get("top_p") is not None):
        return BOTH
    return None
WORDS = ["typical", "classic", "most", "likely", "given", "the", "findings", "history", "presentation"]


def reply(params: dict) -> tuple[str, str, int, int]:
    """(text, stop_reason, input tokens, output tokens) of a Messages request."""
    keep = {k: params.get(k) for k in ("system", "messages", "temperature", "top_p", "max_tokens")}
    h = hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).digest()
    words = [f"[{'ABCD'[h[0] % 4]}]"] + [WORDS[b % len(WORDS)] for b in h[1:1 + 2 + h[1] % 5]]
    limit = int(params["max_tokens"])
    stop = "max_tokens" if len(words) > limit else "end_turn"
    words = words[:limit]
    n_in = sum(len(str(m.get("content", "")).split()) for m in params.get("messages", []))
    return " ".join(words), stop, n_in + len(str(params.get("system", "")).split()), len(words)


def _now(delta_h: float = 0) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=delta_h)).isoformat().replace("+00:00", "Z")


def _err(typ: str, message: str) -> dict:
    return {"type": "error", "error": {"type": typ, "message": message}}


class FakeAnthropic(Served):
    def __init__(self, *, fail=(), expire_after: int | None = None, max_requests: int = 100_000,
                 max_bytes: int = 256 * 1024 * 1024):
        self.fail, self.expire_after = set(fail), expire_after
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.batches: dict[str, dict] = {}
        self.model_calls = 0
        self.sent: list[str] = []             # every custom_id of every batch created
        self._lock = threading.RLock()
        self._server = None

    @property
    def base_url(self) -> str:
        """What the SDK takes (it adds /v1/…)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def compat_url(self) -> str:
        """The OpenAI-compatible endpoint (the openai backend's base_url)."""
        return self.base_url + "/v1"

    def __enter__(self) -> "FakeAnthropic":
        return self._serve(_Handler, "fake-anthropic")

    def forget(self) -> None:
        """Forget every batch, as a server restarted without its state (each id then a 404)."""
        with self._lock:
            self.batches.clear()

    def message(self, params: dict, rid: str) -> dict:
        self.model_calls += 1
        text, stop, n_in, n_out = reply(params)
        return {"id": rid, "type": "message", "role": "assistant", "model": params["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": n_in, "output_tokens": n_out}}

    def create(self, body: dict) -> tuple[int, dict]:
        reqs = body.get("requests")
        if not isinstance(reqs, list) or not 1 <= len(reqs) <= self.max_requests:
            return 400, _err("invalid_request_error", f"requests: between 1 and {self.max_requests} items")
        ids = [r.get("custom_id", "") for r in reqs]
        bad = [c for c in ids if not CUSTOM_ID.match(str(c))]
        if bad or len(set(ids)) != len(ids):
            return 400, _err("invalid_request_error", f"custom_id invalid or repeated: {(bad or ids)[0]}")
        with self._lock:
            bid = f"msgbatch_{len(self.batches) + 1:04d}"
            self.sent += ids
            self.batches[bid] = {
                "id": bid, "type": "message_batch", "processing_status": "in_progress",
                "request_counts": {"processing": len(reqs), "succeeded": 0, "errored": 0, "canceled": 0,
                                   "expired": 0},
                "created_at": _now(), "expires_at": _now(24), "ended_at": None, "cancel_initiated_at": None,
                "archived_at": None, "results_url": None, "_requests": reqs, "_looks": 0, "_results": None}
        return 200, self.batches[bid]

    def look(self, bid: str) -> dict:
        with self._lock:
            b = self.batches[bid]
            b["_looks"] += 1
            if b["processing_status"] == "ended" or (b["processing_status"] == "in_progress" and b["_looks"] < 2):
                return b
            out = []
            for i, r in enumerate(b["_requests"]):
                cid, params = r["custom_id"], r.get("params") or {}
                if b["processing_status"] == "canceling":
                    res = {"type": "canceled"}
                elif self.expire_after is not None and i >= self.expire_after:
                    res = {"type": "expired"}
                elif cid in self.fail:
                    res = {"type": "errored", "error": _err("api_error", "Internal server error")}
                elif not params.get("max_tokens") or not params.get("model"):
                    res = {"type": "errored", "error": _err("invalid_request_error", "max_tokens: Field required")}
                elif refused(params):
                    res = {"type": "errored", "error": _err("invalid_request_error", refused(params))}
                else:
                    res = {"type": "succeeded", "message": self.message(params, f"msg_{bid}_{i}")}
                out.append({"custom_id": cid, "result": res})
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            for x in out:
                counts[x["result"]["type"]] += 1
            b.update(_results=out, request_counts=counts, processing_status="ended", ended_at=_now(),
                     results_url=f"{self.base_url}/v1/messages/batches/{bid}/results")
            return b


def _public(b: dict) -> dict:
    return {k: v for k, v in b.items() if not k.startswith("_")}


class _Handler(http.server.BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.0"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _send(self, status: int, payload=None, raw: bytes | None = None) -> None:
        body = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/binary" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _parts(self) -> list[str]:
        return self.path.split("?")[0].strip("/").split("/")

    def do_GET(self):
        f, p = self.fake, self._parts()
        if p[:3] == ["v1", "messages", "batches"] and len(p) >= 4 and p[3] in f.batches:
            if p[4:] == ["results"]:
                b = f.batches[p[3]]
                if b["processing_status"] != "ended":
                    return self._send(400, _err("invalid_request_error", "the batch has not ended"))
                rows = list(reversed(b["_results"]))
                return self._send(200, raw="".join(json.dumps(r) + "\n" for r in rows).encode())
            return self._send(200, _public(f.look(p[3])))
        self._send(404, _err("not_found_error", f"no route {self.path}"))

    def do_POST(self):
        f, p = self.fake, self._parts()
        n = int(self.headers.get("Content-Length") or 0)
        if p == ["v1", "messages", "batches"] and n > f.max_bytes:
            return self._send(413, _err("request_too_large", f"a batch is at most {f.max_bytes} bytes"))
        data = json.loads(self.rfile.read(n) or b"{}")
        if p == ["v1", "messages", "batches"]:
            status, out = f.create(data)
            return self._send(status, _public(out) if status == 200 else out)
        if p[:3] == ["v1", "messages", "batches"] and p[4:] == ["cancel"] and p[3] in f.batches:
            with f._lock:
                b = f.batches[p[3]]
                if b["processing_status"] == "in_progress":
                    b["processing_status"], b["cancel_initiated_at"] = "canceling", _now()
            return self._send(200, _public(b))
        if p == ["v1", "chat", "completions"]:
            why = refused(data)
            if why:
                return self._send(400, _err("invalid_request_error", why))
            return self._send(200, compat(f, data))
        self._send(404, _err("not_found_error", f"no route {self.path}"))


def compat(fake: FakeAnthropic, body: dict) -> dict:
    """The OpenAI-compatible endpoint's answer, from the compatibility page:
    system and developer messages hoisted and joined with a newline,
    temperature capped at 1, seed / logprobs / top_logprobs ignored."""
    system = [m["content"] for m in body["messages"] if m["role"] in ("system", "developer")]
    params = {"model": body["model"], "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens"),
              "messages": [m for m in body["messages"] if m["role"] not in ("system", "developer")]}
    if system:
        params["system"] = "\n".join(system)
    if body.get("temperature") is not None:
        params["temperature"] = min(1, body["temperature"])
    if body.get("top_p") is not None:
        params["top_p"] = body["top_p"]
    m = fake.message(params, "msg_compat")
    finish = {"end_turn": "stop", "max_tokens": "length"}[m["stop_reason"]]
    return {"id": m["id"], "object": "chat.completion", "created": 0, "model": m["model"],
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": m["content"][0]["text"]}}],
            "usage": {"prompt_tokens": m["usage"]["input_tokens"], "completion_tokens": m["usage"]["output_tokens"],
                      "total_tokens": m["usage"]["input_tokens"] + m["usage"]["output_tokens"]}}
