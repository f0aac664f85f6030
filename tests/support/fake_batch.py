"""A fake OpenAI Batch API on 127.0.0.1 (stdlib only), answering as the real
one does (https://platform.openai.com/docs/api-reference/batch):

* ``POST /v1/files`` (multipart: ``file``, ``purpose``) → a file object;
  ``GET /v1/files/{id}`` and ``GET /v1/files/{id}/content``.
* ``POST /v1/batches`` → a batch ``validating``; ``GET /v1/batches/{id}``
  runs it (each line's body handed to ``engine(body) -> (status, body)``)
  and answers ``completed`` with ``output_file_id`` (the 200 lines) and
  ``error_file_id`` (the others) and ``request_counts``;
  ``POST /v1/batches/{id}/cancel``; ``GET /v1/batches`` lists them.

Faults, per instance: ``fail`` (custom_ids answered with a 500 error line),
``expire_after`` (a batch expires after that many lines: status
``expired``, the rest in its error file with code ``batch_expired``),
``drop`` (custom_ids silently absent from every file: a partial output),
``invalid`` (every batch fails validation: status ``failed`` with
``errors``). A line whose url is not /v1/chat/completions fails validation.
"""
from __future__ import annotations

import email.parser
import email.policy
import http.client
import http.server
import json
import threading
import time
from typing import Callable
from urllib.parse import urlparse

import pytest

from medaudit.engines import batch
from medaudit.llm import dispatch, runs
from support.fault_proxy import Served
from support.smoke import MODEL


class FakeBatchAPI(Served):
    def __init__(self, engine: Callable[[dict], tuple[int, dict]], *, fail=(), expire_after: int | None = None,
                 drop=(), invalid: bool = False):
        self.engine = engine
        self.fail, self.drop = set(fail), set(drop)
        self.expire_after, self.invalid = expire_after, invalid
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.engine_calls = 0
        self._lock = threading.RLock()       # the engine runs under it and adds files
        self._server = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "FakeBatchAPI":
        return self._serve(_Handler, "fake-batch")

    # -- state -------------------------------------------------------------
    def add_file(self, name: str, data: bytes, purpose: str) -> dict:
        with self._lock:
            fid = f"file-{len(self.files) + 1:04d}"
            self.files[fid] = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                               "filename": name, "purpose": purpose, "status": "processed", "_data": data}
        return self.files[fid]

    def create_batch(self, req: dict) -> dict:
        with self._lock:
            bid = f"batch_{len(self.batches) + 1:04d}"
        b = {"id": bid, "object": "batch", "endpoint": req.get("endpoint"), "errors": None,
             "input_file_id": req.get("input_file_id"), "completion_window": req.get("completion_window"),
             "status": "validating", "output_file_id": None, "error_file_id": None,
             "created_at": int(time.time()), "in_progress_at": None, "expires_at": int(time.time()) + 86400,
             "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
             "cancelling_at": None, "cancelled_at": None,
             "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": req.get("metadata")}
        self.batches[bid] = b
        return b

    def advance(self, bid: str) -> dict:
        """validating → in_progress (first look) → ended (second look)."""
        b = self.batches[bid]
        if b["status"] == "validating":
            b["status"], b["in_progress_at"] = "in_progress", int(time.time())
        elif b["status"] == "in_progress":
            self._run(b)
        elif b["status"] == "cancelling":
            b["status"], b["cancelled_at"] = "cancelled", int(time.time())
        return b

    def _run(self, b: dict) -> None:
        lines = [json.loads(x) for x in self.files[b["input_file_id"]]["_data"].decode().splitlines() if x.strip()]
        bad = [i for i, x in enumerate(lines, 1) if x.get("url") != "/v1/chat/completions"]
        if self.invalid or bad:
            b["status"], b["failed_at"] = "failed", int(time.time())
            b["errors"] = {"object": "list", "data": [
                {"code": "invalid_url" if bad else "invalid_request", "line": bad[0] if bad else 1,
                 "message": "the url must be /v1/chat/completions", "param": "url"}]}
            return
        out, err = [], []
        for i, x in enumerate(lines):
            cid = x["custom_id"]
            rid = f"batch_req_{b['id']}_{i}"
            if cid in self.drop:
                continue
            if self.expire_after is not None and i >= self.expire_after:
                err.append({"id": rid, "custom_id": cid, "response": None, "error": {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion window expired."}})
                continue
            if cid in self.fail:
                status, body = 500, {"error": {"message": "The server had an error processing your request.",
                                               "type": "server_error", "param": None, "code": None}}
            else:
                self.engine_calls += 1
                status, body = self.engine(x["body"])
            line = {"id": rid, "custom_id": cid, "response": {"status_code": status, "request_id": f"req_{i}",
                                                              "body": body}, "error": None}
            (out if status == 200 else err).append(line)
        def file(rows, kind):
            if not rows:
                return None
            data = "".join(json.dumps(r) + "\n" for r in rows).encode()
            return self.add_file(f"{b['id']}_{kind}.jsonl", data, f"batch_{kind}")["id"]
        b["output_file_id"], b["error_file_id"] = file(out, "output"), file(err, "error")
        b["request_counts"] = {"total": len(lines), "completed": len(out),
                               "failed": sum(e["error"] is None for e in err)}
        now = int(time.time())
        if self.expire_after is not None and self.expire_after < len(lines):
            b["status"], b["expired_at"] = "expired", now
        else:
            b["status"], b["completed_at"] = "completed", now


def _public(d: dict) -> dict:
    return {k: v for k, v in d.items() if not k.startswith("_")}


class _Handler(http.server.BaseHTTPRequestHandler):
    fake: FakeBatchAPI
    protocol_version = "HTTP/1.0"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _send(self, status: int, payload, raw: bytes | None = None) -> None:
        body = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _missing(self) -> None:
        self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_GET(self):
        f = self.fake
        parts = self.path.split("?")[0].strip("/").split("/")     # v1, files|batches, id, content
        if parts[1:2] == ["files"] and len(parts) >= 3 and parts[2] in f.files:
            if parts[3:] == ["content"]:
                return self._send(200, None, raw=f.files[parts[2]]["_data"])
            return self._send(200, _public(f.files[parts[2]]))
        if parts[1:] == ["batches"]:
            return self._send(200, {"object": "list", "data": list(f.batches.values()), "has_more": False})
        if parts[1:2] == ["batches"] and len(parts) == 3 and parts[2] in f.batches:
            with f._lock:
                return self._send(200, f.advance(parts[2]))
        self._missing()

    def do_POST(self):
        f = self.fake
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n)
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[1:] == ["files"]:
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + data)
            fields = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()}
            up = fields["file"]
            purpose = fields["purpose"].get_content().strip()
            if purpose != "batch":
                return self._send(400, {"error": {"message": f"purpose {purpose!r}", "type": "invalid_request_error"}})
            return self._send(200, _public(f.add_file(up.get_filename(), up.get_payload(decode=True), purpose)))
        if parts[1:] == ["batches"]:
            req = json.loads(data or b"{}")
            if req.get("input_file_id") not in f.files or req.get("endpoint") != "/v1/chat/completions":
                return self._send(400, {"error": {"message": "bad input_file_id or endpoint",
                                                  "type": "invalid_request_error"}})
            return self._send(200, f.create_batch(req))
        if parts[1:2] == ["batches"] and parts[3:] == ["cancel"] and parts[2] in f.batches:
            b = f.batches[parts[2]]
            if b["status"] in ("validating", "in_progress"):
                b["status"], b["cancelling_at"] = "cancelling", int(time.time())
            return self._send(200, b)
        self._missing()


def engine_for(base_url: str):
    """The batch engine: POST the line's body to the chat-completions server."""
    u = urlparse(base_url)

    def answer(body: dict) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        try:
            conn.request("POST", u.path + "/chat/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    return answer


def collect(backend, samples, folder, store):
    with pytest.raises(dispatch.BatchCollected):
        runs.run(backend, store, samples, model=MODEL, progress=False, dispatch=dispatch.Collect(folder))
    return batch.write_batches(batch.read_manifest(folder).values(), folder, max_requests=4)
