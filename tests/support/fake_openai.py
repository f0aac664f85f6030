"""A small OpenAI-compatible server for testing the openai backend (stdlib only).

    with FakeOpenAI(status=401, message="Incorrect API key provided") as fake:
        OpenAIBackend("fake-model", base_url=fake.base_url).complete(...)

It listens on 127.0.0.1 on a free port and answers ``GET /v1/models`` (the
``models`` list) and ``POST /v1/chat/completions`` as its settings say;
they are plain attributes and may be changed between calls:

* ``status``/``message``: every chat request gets this HTTP status; other
  than 200 it is an OpenAI-style JSON error ``{"error": {"message": …}}``,
  with ``Retry-After: <retry_after>`` when set. ``delay_s``: wait this long
  before answering (ends early when the server stops).
* a 200 answers ``content`` (None: a message without content; a word is a
  token) with ``finish_reason`` and ``refusal``; its ``model`` field is
  ``served_model`` (default: the model asked for). ``content`` may be a
  function of the request body (:func:`by_request`: a deterministic
  "model" whose reply depends on the messages and settings alone). A
  request that asks for ``logprobs`` gets them: each word a token, its
  ``top_logprobs`` the same word with each other option letter (A-E) in its
  place, their log-probs a function of the body.
* ``reasoning=True`` behaves like an OpenAI reasoning model (GPT-5, o-series):
  a request with ``max_tokens`` gets the API's 400 "Unsupported parameter:
  'max_tokens' is not supported with this model. Use 'max_completion_tokens'
  instead.", a temperature or top_p other than 1 the 400 "Unsupported value:
  …", ``logprobs`` a 400 too (``rejects`` chooses which of these apply). It
  spends ``reasoning_tokens`` hidden tokens first (``reasoning_by_effort``
  per ``reasoning_effort`` where given) out of ``max_completion_tokens``, then
  writes what is left of the answer: when reasoning takes the whole limit the
  reply is content "" with finish_reason "length", and
  ``usage.completion_tokens_details.reasoning_tokens`` says how many.

Counters: ``chat_requests``, ``bodies`` (every chat request's JSON),
``statuses`` (the status each got), ``models_requests``.
The server stops by itself after ``lifetime_s`` (daemon threads).
"""
from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import time

from support.fault_proxy import serve_local

REASONING_REJECTS = ("max_tokens", "temperature", "top_p", "logprobs")
LETTERS = "ABCDE"


def _digest(body: dict, salt: str = "") -> bytes:
    """A hash of what names a request's answer: its messages and settings."""
    keep = {k: body.get(k) for k in ("messages", "seed", "temperature", "top_p", "max_tokens")}
    return hashlib.sha256((salt + json.dumps(keep, sort_keys=True)).encode()).digest()


def by_request(body: dict) -> str:
    """A deterministic reply: the bracketed option letter and a reason, both
    chosen by a hash of the request (another seed or prompt gives another
    answer; the same request always the same)."""
    h = _digest(body)
    words = ["typical", "classic", "most", "likely", "given", "the", "findings", "history", "presentation"]
    return f"[{LETTERS[h[0] % 4]}] " + " ".join(words[b % len(words)] for b in h[1:1 + 2 + h[1] % 5])


def _logprobs(body: dict, words: list[str], top: int) -> dict:
    """choices[0].logprobs of a reply: every word a token; the alternatives of
    a word holding a letter of A-E are that word with each other letter."""
    h = _digest(body, "logprobs")
    out = []
    for j, w in enumerate(words):
        alts = [w]
        m = re.search(r"(?<![A-Za-z])[A-E](?![a-z])", w)
        if m:
            alts += [w[:m.start()] + L + w[m.end():] for L in LETTERS if L != m.group(0)]
        # the written word is the most likely; the others below it, in an order set by the hash
        lps = [-0.05] + [-(0.5 + (h[(j * 7 + i) % 32] % 50) / 10.0) for i in range(1, len(alts))]
        entries = [{"token": a, "logprob": lp, "bytes": list(a.encode())} for a, lp in zip(alts, lps)]
        out.append({**entries[0], "top_logprobs": entries[:max(1, top)]})
    return {"content": out, "refusal": None}


class FakeOpenAI:
    def __init__(self, *, model: str = "fake-model", models: list[dict] | None = None, status: int = 200,
                 message: str = "error (fake)", retry_after: str | None = None, delay_s: float = 0.0,
                 content: str | None = "[B] because it is the fake answer", finish_reason: str = "stop",
                 refusal: str | None = None, served_model: str | None = None, reasoning: bool = False,
                 rejects: tuple[str, ...] = REASONING_REJECTS, reasoning_tokens: int = 0,
                 reasoning_by_effort: dict[str, int] | None = None, lifetime_s: float = 300.0):
        self.models = models if models is not None else [{"id": model, "object": "model", "created": 0,
                                                          "owned_by": "fake"}]
        self.status, self.message, self.retry_after, self.delay_s = status, message, retry_after, delay_s
        self.content, self.finish_reason, self.refusal = content, finish_reason, refusal
        self.served_model = served_model
        self.reasoning, self.rejects = reasoning, tuple(rejects)
        self.reasoning_tokens, self.reasoning_by_effort = reasoning_tokens, dict(reasoning_by_effort or {})
        self.lifetime_s = lifetime_s
        self.chat_requests = 0
        self.models_requests = 0
        self.bodies: list[dict] = []
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None

    # -- life cycle --------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server, _ = serve_local(Handler, "fake-openai")
        timer = threading.Timer(self.lifetime_s, self.stop)
        timer.daemon = True
        timer.start()
        return self

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- answers -----------------------------------------------------------
    def answer(self, body: dict) -> tuple[int, dict, dict]:
        """(status, JSON body, headers) of one chat request."""
        if self.status != 200:
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return self.status, _error(self.message, "fake_error"), headers
        if self.reasoning:
            rejected = self._reasoning_rejects(body)
            if rejected:
                return 400, rejected, {}
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
        spent = 0
        if self.reasoning:
            spent = min(limit, self.reasoning_by_effort.get(body.get("reasoning_effort"), self.reasoning_tokens))
        text = self.content(body) if callable(self.content) else self.content
        words = (text or "").split()
        written = words[:limit - spent]
        finish = "length" if len(written) < len(words) or spent == limit > 0 else self.finish_reason
        content = None if text is None else " ".join(written)
        logprobs = _logprobs(body, written, int(body.get("top_logprobs") or 0)) if body.get("logprobs") else None
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": spent + len(written),
                 "total_tokens": prompt_tokens + spent + len(written),
                 "completion_tokens_details": {"reasoning_tokens": spent}}
        with self._lock:
            n = self.chat_requests
        return 200, {
            "id": f"chatcmpl-fake-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_model or body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": logprobs,
                         "message": {"role": "assistant", "content": content, "refusal": self.refusal}}],
            "usage": usage}, {}

    def _reasoning_rejects(self, body: dict) -> dict | None:
        """The 400 body the OpenAI API gives a reasoning model's request with
        chat-style settings, or None."""
        if "max_tokens" in self.rejects and "max_tokens" in body:
            return _error("Unsupported parameter: 'max_tokens' is not supported with this model. "
                          "Use 'max_completion_tokens' instead.", "invalid_request_error",
                          param="max_tokens", code="unsupported_parameter")
        for p in ("temperature", "top_p"):
            if p in self.rejects and body.get(p) is not None and body[p] != 1:
                return _error(f"Unsupported value: '{p}' does not support {body[p]} with this model. "
                              f"Only the default (1) value is supported.", "invalid_request_error",
                              param=p, code="unsupported_value")
        if "logprobs" in self.rejects and body.get("logprobs"):
            return _error("Unsupported parameter: 'logprobs' is not supported with this model.",
                          "invalid_request_error", param="logprobs", code="unsupported_parameter")
        return None


def _error(message: str, typ: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": typ, "param": param, "code": code}}


class _Handler(http.server.BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.0"   # one request per connection: simple and bounded

    def log_message(self, format, *args):  # noqa: A002 - silence: never print requests
        pass

    def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass   # the client gave up

    def do_GET(self):
        f = self.fake
        if self.path.rstrip("/").endswith("/models"):
            with f._lock:
                f.models_requests += 1
            self._send(200, {"object": "list", "data": f.models})
        else:
            self._send(404, _error(f"no route {self.path}", "not_found"))

    def do_POST(self):
        f = self.fake
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            body = {}
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, _error(f"no route {self.path}", "not_found"))
            return
        with f._lock:
            f.chat_requests += 1
            f.bodies.append(body)
        if f.delay_s:
            f._stopping.wait(f.delay_s)
        status, payload, headers = f.answer(body)
        with f._lock:
            f.statuses.append(status)
        self._send(status, payload, headers)
