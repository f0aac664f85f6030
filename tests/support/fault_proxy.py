"""A fault-injecting reverse proxy for testing API backends (stdlib only).

    with FaultProxy("http://127.0.0.1:8080", rates={"429": 0.2, "500": 0.2}, seed=1) as proxy:
        client = OpenAI(base_url=proxy.base_url, ...)

It listens on 127.0.0.1 on a free port and forwards every request to the
upstream origin unchanged (path, body, content type), except that it answers
some requests itself with a fault:

* ``"429"``       429 with ``Retry-After: <retry_after>``
* ``"500"``       500 with a JSON error body
* ``"slow"``      nothing for ``slow_s`` seconds (longer than the client's
                  timeout), then a 504; the client has given up by then (the
                  proxy stops waiting as soon as it hangs up)
* ``"malformed"`` 200 whose body is not a chat completion: truncated JSON,
                  JSON without ``choices``, or an HTML page (in turn)
* ``"401"``       401 whose message echoes the Authorization header, as a
                  careless server might (the client must not leak it)

Which fault a request gets is decided by a seeded RNG from the request
(its JSON body) and how many times that same request was seen before, not
from arrival order: the k-th attempt of a given request meets the same
fault whatever the concurrency or timing, so a test run is reproducible and each request's
retries can be checked against the faults it met. ``script`` fixes the
first attempts of every request (``["429"]``: each request's first attempt
is a 429) before the rates apply; ``planned`` tells in advance which faults
a request will meet. With ``reject_logprobs`` every request that asks for
``logprobs`` gets a 400 saying so (or a 500, as llama_cpp.server gives when
started with ``--logits_all false``), counted as ``"logprobs_rejected"``.

Forwarded requests whose upstream takes longer than ``hold_open_s`` are
answered 200 at once and kept alive with a space every ``hold_open_s`` until
the upstream body follows (JSON allows leading whitespace): the client's
read timeout then fires on injected slow faults only, never because a busy
CPU-bound upstream queued the request. ``hold_open_s=None`` turns this off.

Counters: ``injected`` (Counter by fault), ``forwarded``, ``requests``, ``posts``,
``by_body`` (faults per request id, see ``request_id``), ``arrivals``
(monotonic time, fault), ``max_inflight``, ``abandoned``, ``held_open``.

Everything is bounded: upstream calls time out, slow faults end when the client hangs up
or the proxy stops, and the proxy stops by itself after ``lifetime_s``
seconds (daemon threads, so it never holds the process up).
"""
from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import random
import select
import socket
import threading
import time
from collections import Counter, defaultdict
from urllib.parse import urlparse

FAULTS = ("429", "500", "slow", "malformed", "401")
MALFORMED_BODIES = (
    ("application/json", b'{"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"index": 0, "mess'),
    ("application/json", b'{"id": "chatcmpl-x", "object": "chat.completion", "usage": {"prompt_tokens": 1}}'),
    ("text/html", b"<html><body>502 Bad Gateway (but sent as 200)</body></html>"),
)


class FaultProxy:
    def __init__(self, upstream: str | None, *, rates: dict[str, float] | None = None, seed: int = 0,
                 script: list[str] | tuple[str, ...] = (), retry_after: str | None = "1",
                 slow_s: float = 4.0, reject_logprobs: bool | int = False, hold_open_s: float | None = 0.5,
                 lifetime_s: float = 300.0, upstream_timeout_s: float = 60.0):
        rates = dict(rates or {})
        unknown = (set(rates) | set(script)) - set(FAULTS) - {"ok"}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)} (have {FAULTS})")
        if sum(rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")
        u = urlparse(upstream) if upstream else None
        self.upstream = (u.hostname, u.port or 80) if u else None
        self.rates, self.seed, self.script = rates, seed, list(script)
        self.retry_after, self.slow_s = retry_after, slow_s
        # True or 400: a 400 as the OpenAI API sends; 500: as llama_cpp.server --logits_all false does
        self.reject_logprobs = 400 if reject_logprobs is True else int(reject_logprobs or 0)
        self.hold_open_s = hold_open_s
        self.lifetime_s, self.upstream_timeout_s = lifetime_s, upstream_timeout_s
        self.injected: Counter = Counter()
        self.forwarded = 0
        self.requests = 0
        self.posts = 0          # POST requests (chat completions), faulted or forwarded
        self.by_body: dict[str, Counter] = defaultdict(Counter)
        self.arrivals: list[tuple[float, str]] = []
        self.inflight = 0
        self.abandoned = 0      # slow faults whose client hung up before the end
        self.held_open = 0      # forwarded requests kept alive with whitespace while upstream worked
        self.max_inflight = 0
        self._seen: Counter = Counter()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # -- life cycle --------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            pass

        Handler.proxy = proxy
        self._server, self._thread = serve_local(Handler, "fault-proxy")
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            # shutdown() has already returned: the wait is only a guard, far above a loaded machine
            self._thread.join(timeout=120)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- decisions ---------------------------------------------------------
    @staticmethod
    def request_id(body: bytes | dict) -> str:
        """A request's identity: the hash of its JSON body with sorted keys
        (so it does not depend on how the client ordered or spaced it)."""
        if isinstance(body, (bytes, bytearray)):
            try:
                body = json.loads(body or b"null")
            except ValueError:
                return hashlib.sha256(bytes(body)).hexdigest()
        blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _decide(self, body: bytes) -> tuple[str, int, str]:
        """(fault or "ok", attempt index of this request, request id)."""
        h = self.request_id(body)
        with self._lock:
            k = self._seen[h]
            self._seen[h] += 1
        if self.reject_logprobs:
            try:
                if json.loads(body or b"{}").get("logprobs"):
                    return "logprobs_rejected", k, h
            except (ValueError, AttributeError):
                pass
        return self._fault_at(h, k), k, h

    def _fault_at(self, h: str, k: int) -> str:
        """The fault of the k-th attempt of request ``h`` ("ok": forward it)."""
        if k < len(self.script):
            return self.script[k]
        r = random.Random(f"{self.seed}:{h}:{k}").random()
        acc = 0.0
        for fault in FAULTS:
            acc += self.rates.get(fault, 0.0)
            if r < acc:
                return fault
        return "ok"

    def planned(self, body: bytes | dict, limit: int = 100) -> list[str]:
        """The faults a request will meet before it is first forwarded, if
        every fault makes the client retry (and nothing else does): a test
        can choose a seed that gives the mix of faults it wants."""
        h = self.request_id(body)
        out = []
        for k in range(limit):
            f = self._fault_at(h, k)
            if f == "ok":
                break
            out.append(f)
        return out

    def _record(self, fault: str, h: str) -> None:
        with self._lock:
            self.requests += 1
            self.arrivals.append((time.monotonic(), fault))
            if fault == "ok":
                self.forwarded += 1
            else:
                self.injected[fault] += 1
                self.by_body[h][fault] += 1

    def faults_for(self, body: bytes | dict) -> int:
        """How many faults the request with this body (bytes or the JSON as a dict) met."""
        return sum(self.by_body.get(self.request_id(body), Counter()).values())

    def summary(self) -> dict:
        return {"requests": self.requests, "forwarded": self.forwarded, "injected": dict(self.injected),
                "max_inflight": self.max_inflight, "abandoned": self.abandoned, "held_open": self.held_open}


class _Handler(http.server.BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.0"   # one request per connection: simple and bounded

    def log_message(self, format, *args):  # noqa: A002 - silence: never print requests
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout): nothing to do

    def _error(self, status: int, message: str, typ: str, headers: dict | None = None):
        body = json.dumps({"error": {"message": message, "type": typ, "code": status}}).encode()
        self._send(status, body, headers=headers)

    def _wait_or_hangup(self, seconds: float) -> bool:
        """Wait up to ``seconds``; False as soon as the client hangs up (or the
        proxy stops), so a slow fault holds no thread once nobody waits for it."""
        deadline = time.monotonic() + seconds
        while not self.proxy._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            try:
                readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    with self.proxy._lock:
                        self.proxy.abandoned += 1
                    return False
            except (OSError, ValueError):
                return False
        return False

    def do_GET(self):
        self._handle(b"")

    def do_POST(self):
        with self.proxy._lock:
            self.proxy.posts += 1
        n = int(self.headers.get("Content-Length") or 0)
        self._handle(self.rfile.read(n) if n else b"")

    def _handle(self, body: bytes):
        p = self.proxy
        with p._lock:
            p.inflight += 1
            p.max_inflight = max(p.max_inflight, p.inflight)
        try:
            fault, k, h = p._decide(body)
            p._record(fault, h)
            if fault == "429":
                hdr = {"Retry-After": p.retry_after} if p.retry_after is not None else {}
                self._error(429, "Rate limit reached (injected)", "rate_limit_error", hdr)
            elif fault == "500":
                self._error(500, "The server had an error (injected)", "server_error")
            elif fault == "slow":
                if self._wait_or_hangup(p.slow_s):
                    self._error(504, "Too slow (injected)", "timeout")
            elif fault == "malformed":
                ctype, payload = MALFORMED_BODIES[p.injected["malformed"] % len(MALFORMED_BODIES)]
                self._send(200, payload, ctype)
            elif fault == "401":
                self._error(401, f"Incorrect API key provided: {self.headers.get('Authorization', '')}",
                            "invalid_request_error")
            elif fault == "logprobs_rejected":
                if p.reject_logprobs >= 500:
                    self._error(p.reject_logprobs, "logprobs is not supported for models created with "
                                "logits_all=False (injected)", "internal_server_error")
                else:
                    self._error(p.reject_logprobs, "logprobs are not supported by this model (injected)",
                                "invalid_request_error")
            else:
                self._forward(body)
        finally:
            with p._lock:
                p.inflight -= 1

    def _upstream(self, body: bytes, result: dict) -> None:
        p = self.proxy
        conn = http.client.HTTPConnection(*p.upstream, timeout=p.upstream_timeout_s)
        try:
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json"),
                       "Accept": self.headers.get("Accept", "application/json")}
            conn.request(self.command, self.path, body=body if self.command == "POST" else None,
                         headers=headers)
            r = conn.getresponse()
            result.update(status=r.status, data=r.read(),
                          ctype=r.getheader("Content-Type", "application/json"))
        except (OSError, http.client.HTTPException) as e:
            result.update(status=502, ctype="application/json", data=json.dumps(
                {"error": {"message": f"upstream failed: {type(e).__name__}", "type": "proxy_error"}}).encode())
        finally:
            conn.close()

    def _forward(self, body: bytes):
        p = self.proxy
        if p.upstream is None:
            self._error(502, "no upstream", "proxy_error")
            return
        result: dict = {}
        worker = threading.Thread(target=self._upstream, args=(body, result), daemon=True)
        worker.start()
        worker.join(p.hold_open_s if p.hold_open_s else None)
        if not worker.is_alive():
            self._send(result["status"], result["data"], result["ctype"])
            return
        # upstream is busy: answer 200 now and send a space (JSON allows
        # leading whitespace) every hold_open_s, so the client's read timeout
        # fires on injected slow faults only, never on a busy upstream
        with p._lock:
            p.held_open += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")   # no length: the body ends when we close
            self.end_headers()
            self.wfile.flush()
            while worker.is_alive():                    # bounded by upstream_timeout_s
                self.wfile.write(b" ")
                self.wfile.flush()
                worker.join(p.hold_open_s)
            data = result["data"]
            if result["status"] != 200:   # too late for its status: the client sees a body without choices
                data = json.dumps({"error": {"message": f"upstream answered {result['status']}",
                                             "type": "proxy_error"}}).encode()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            pass  # the client gave up


def serve_local(handler: type, name: str) -> tuple[http.server.ThreadingHTTPServer, threading.Thread]:
    """A threading HTTP server of ``handler`` on 127.0.0.1 (a free port),
    serving from a daemon thread; a client that hangs up is not an error."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.handle_error = lambda request, client_address: None   # a client that hung up is fine
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, name=name, daemon=True)
    thread.start()
    return srv, thread


class Served:
    """A fake server's lifetime as a context manager: ``_serve`` serves a
    request handler class that reads the fake as ``self.fake`` (a subclass
    made per fake, so two fakes never share state); leaving stops it."""

    _server = None

    def _serve(self, handler: type, name: str):
        self._server, _ = serve_local(type("H", (handler,), {"fake": self}), name)
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
