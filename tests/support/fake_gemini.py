"""A fake Gemini API on 127.0.0.1 (stdlib only), written from Google's public
documentation (the Batch API guide, the Batch Mode and Files references,
the OpenAI compatibility page), for the tests of medaudit.engines.batch_gemini:

* ``POST /upload/v1beta/files`` with ``X-Goog-Upload-Protocol: resumable``
  and ``X-Goog-Upload-Command: start`` answers the upload URL
  (``X-Goog-Upload-URL``); the bytes then go there with ``upload,
  finalize`` and the file comes back (``files/…``). A file over
  ``max_bytes`` (2 GB) is refused (400).
* ``POST /v1beta/models/{model}:batchGenerateContent`` ``{"batch":
  {"displayName", "inputConfig": {"fileName"}}}``: a batch
  ``batches/…`` (the long-running operation; its ``metadata`` the
  GenerateContentBatch) in ``BATCH_STATE_PENDING``. The input file is one
  ``{"key", "request"}`` per line.
* ``GET /v1beta/batches/{id}``: pending → running → (third look)
  ``BATCH_STATE_SUCCEEDED`` with ``output.responsesFile``: one line per
  request, ``{"key", "response"}`` or ``{"key", "error"}``, the error a
  ``google.rpc.Status`` (``{"code", "message"}``, the code numeric:
  ``fail`` gives 13, INTERNAL), in reverse order;
  ``expire=True``: ``BATCH_STATE_EXPIRED`` and no responses file (a job
  pending or running past 48 hours); a batch cancelled meanwhile ends
  ``BATCH_STATE_CANCELLED`` without one.
* ``POST /v1beta/batches/{id}:cancel``; ``GET /v1beta/files/{id}:download``.
  A batch or file the server does not know (``forget()``: as after a
  restart) is a 404 ``NOT_FOUND``.
* ``POST /v1beta/openai/chat/completions``: the OpenAI-compatible endpoint
  (system messages → systemInstruction, assistant → model turns, the
  sampling settings and log-probs into generationConfig), answering with
  the same model.

The "model" is deterministic: text and log-probs are a function of the
GenerateContentRequest (system instruction, turns, temperature, topP,
maxOutputTokens, seed; a word a token), so that a request answered in a
batch and directly must agree exactly.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
from datetime import datetime, timezone
from urllib.parse import parse_qs, unquote, urlparse

from support.fake_openai import _logprobs
from support.fault_proxy import Served

WORDS = ["typical", "classic", "most", "likely", "given", "the", "findings", "history", "presentation"]
STATE = "BATCH_STATE_"


def generate(req: dict, model: str) -> dict:
    """The GenerateContentResponse of one request."""
    cfg = req.get("generationConfig") or {}
    keep = {"system": req.get("systemInstruction"), "contents": req.get("contents"),
            **{k: cfg.get(k) for k in ("temperature", "topP", "maxOutputTokens", "seed")}}
    h = hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).digest()
    words = [f"[{'ABCD'[h[0] % 4]}]"] + [WORDS[b % len(WORDS)] for b in h[1:1 + 2 + h[1] % 5]]
    limit = int(cfg.get("maxOutputTokens") or 8192)
    finish = "MAX_TOKENS" if len(words) > limit else "STOP"
    words = words[:limit]
    cand = {"content": {"role": "model", "parts": [{"text": " ".join(words)}]}, "finishReason": finish, "index": 0}
    if cfg.get("responseLogprobs"):
        lp = _logprobs({"messages": keep}, words, int(cfg.get("logprobs") or 1))["content"]
        cand["logprobsResult"] = {
            "chosenCandidates": [{"token": x["token"], "logProbability": x["logprob"]} for x in lp],
            "topCandidates": [{"candidates": [{"token": a["token"], "logProbability": a["logprob"]}
                                              for a in x["top_logprobs"]]} for x in lp]}
    n_in = sum(len(p.get("text", "").split()) for c in req.get("contents", []) for p in c.get("parts", []))
    return {"candidates": [cand], "modelVersion": model, "responseId": h[:6].hex(),
            "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": len(words),
                              "totalTokenCount": n_in + len(words)}}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _err(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status}}


class FakeGemini(Served):
    def __init__(self, *, fail=(), expire: bool = False, max_bytes: int = 2 * 1024 ** 3):
        self.fail, self.expire, self.max_bytes = set(fail), expire, max_bytes
        self.files: dict[str, dict] = {}
        self.uploads: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.model_calls = 0
        self.sent: list[str] = []             # every key of every batch created
        self._lock = threading.RLock()
        self._server = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def compat_url(self) -> str:
        return self.base_url + "/v1beta/openai/"

    def __enter__(self) -> "FakeGemini":
        return self._serve(_Handler, "fake-gemini")

    def forget(self) -> None:
        """Forget every batch and file, as a server restarted without its state."""
        with self._lock:
            self.batches.clear()
            self.files.clear()

    def add_file(self, data: bytes, display: str, mime: str) -> dict:
        with self._lock:
            fid = f"f{len(self.files) + 1:04d}"
            self.files[fid] = {"name": f"files/{fid}", "displayName": display, "mimeType": mime,
                               "sizeBytes": str(len(data)), "createTime": _now(), "state": "ACTIVE",
                               "uri": f"{self.base_url}/v1beta/files/{fid}", "_data": data}
        return self.files[fid]

    def create(self, model: str, body: dict) -> tuple[int, dict]:
        fname = ((body.get("batch") or {}).get("inputConfig") or {}).get("fileName", "")
        fid = fname.split("/")[-1]
        if fid not in self.files:
            return 400, _err(400, "INVALID_ARGUMENT", f"no input file {fname!r}")
        with self._lock:
            bid = f"batches/b{len(self.batches) + 1:04d}"
            lines = [json.loads(x) for x in self.files[fid]["_data"].decode().splitlines() if x.strip()]
            self.sent += [x["key"] for x in lines]
            self.batches[bid] = {"name": bid, "done": False, "metadata": {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
                "model": f"models/{model}", "displayName": (body.get("batch") or {}).get("displayName", ""),
                "createTime": _now(), "updateTime": _now(), "state": STATE + "PENDING",
                "batchStats": {"requestCount": str(len(lines)), "pendingRequestCount": str(len(lines))}},
                "_lines": lines, "_model": model}
        return 200, self.batches[bid]

    def look(self, bid: str) -> dict:
        with self._lock:
            b = self.batches[bid]
            md = b["metadata"]
            if md["state"] == STATE + "PENDING":
                md["state"] = STATE + "RUNNING"
            elif md["state"] == STATE + "RUNNING":
                md["updateTime"] = md["endTime"] = _now()
                b["done"] = True
                if self.expire:
                    md["state"] = STATE + "EXPIRED"
                    return b
                out = []
                for x in b["_lines"]:
                    if x["key"] in self.fail:       # a google.rpc.Status: its numeric code (13: INTERNAL)
                        out.append({"key": x["key"], "error": {"code": 13, "message": "Internal error encountered."}})
                    else:
                        self.model_calls += 1
                        out.append({"key": x["key"], "response": generate(x["request"], b["_model"])})
                data = "".join(json.dumps(r) + "\n" for r in reversed(out)).encode()
                f = self.add_file(data, f"{bid}-responses", "application/jsonl")
                md["state"] = STATE + "SUCCEEDED"
                md["output"] = {"responsesFile": f["name"]}
                md["batchStats"] = {"requestCount": str(len(out)), "pendingRequestCount": "0",
                                    "successfulRequestCount": str(sum("response" in r for r in out)),
                                    "failedRequestCount": str(sum("error" in r for r in out))}
                b["response"] = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main."
                                          "GenerateContentBatchOutput", "responsesFile": f["name"]}
            return b


def _public(d: dict) -> dict:
    return {k: v for k, v in d.items() if not k.startswith("_")}


class _Handler(http.server.BaseHTTPRequestHandler):
    fake: FakeGemini
    protocol_version = "HTTP/1.0"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _send(self, status: int, payload=None, raw: bytes | None = None, headers: dict | None = None) -> None:
        body = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        f = self.fake
        path = unquote(urlparse(self.path).path)
        if path.startswith("/v1beta/batches/") and path[len("/v1beta/"):] in f.batches:
            return self._send(200, _public(f.look(path[len("/v1beta/"):])))
        if path.startswith("/v1beta/files/") and path.endswith(":download"):
            fid = path[len("/v1beta/files/"):-len(":download")]
            if fid in f.files:
                return self._send(200, raw=f.files[fid]["_data"])
        self._send(404, _err(404, "NOT_FOUND", f"no route {self.path}"))

    def do_POST(self):
        f = self.fake
        u = urlparse(self.path)
        path = unquote(u.path)
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n)
        if path == "/upload/v1beta/files":
            cmd = (self.headers.get("X-Goog-Upload-Command") or "").replace(" ", "")
            if cmd == "start":
                size = int(self.headers.get("X-Goog-Upload-Header-Content-Length") or 0)
                if size > f.max_bytes:
                    return self._send(400, _err(400, "INVALID_ARGUMENT", f"file of {size} bytes: the limit is "
                                                                         f"{f.max_bytes}"))
                meta = (json.loads(data or b"{}").get("file") or {})
                uid = str(len(f.uploads) + 1)
                f.uploads[uid] = {"meta": meta, "mime": self.headers.get("X-Goog-Upload-Header-Content-Type", ""),
                                  "data": b""}
                return self._send(200, {}, headers={
                    "X-Goog-Upload-URL": f"{f.base_url}/upload/v1beta/files?upload_id={uid}",
                    "X-Goog-Upload-Status": "active"})
            uid = (parse_qs(u.query).get("upload_id") or [""])[0]
            up = f.uploads.get(uid)
            if up is None:
                return self._send(404, _err(404, "NOT_FOUND", "no such upload"))
            up["data"] += data
            if "finalize" in cmd:
                made = f.add_file(up["data"], up["meta"].get("displayName", ""), up["mime"])
                return self._send(200, {"file": _public(made)}, headers={"X-Goog-Upload-Status": "final"})
            return self._send(200, {}, headers={"X-Goog-Upload-Status": "active"})
        if path.startswith("/v1beta/models/") and path.endswith(":batchGenerateContent"):
            model = path[len("/v1beta/models/"):-len(":batchGenerateContent")]
            status, out = f.create(model, json.loads(data or b"{}"))
            return self._send(status, _public(out) if status == 200 else out)
        if path.startswith("/v1beta/batches/") and path.endswith(":cancel"):
            bid = path[len("/v1beta/"):-len(":cancel")]
            with f._lock:
                b = f.batches.get(bid)
                if b is None:
                    return self._send(404, _err(404, "NOT_FOUND", f"no batch {bid!r}"))
                if b["metadata"]["state"] in (STATE + "PENDING", STATE + "RUNNING"):
                    b["metadata"]["state"], b["done"] = STATE + "CANCELLED", True
            return self._send(200, {})
        if path == "/v1beta/openai/chat/completions":
            return self._send(200, compat(f, json.loads(data)))
        self._send(404, _err(404, "NOT_FOUND", f"no route {self.path}"))


def compat(fake: FakeGemini, body: dict) -> dict:
    """The OpenAI-compatible endpoint: the chat body as a GenerateContentRequest, answered."""
    system = [m["content"] for m in body["messages"] if m["role"] in ("system", "developer")]
    req = {"contents": [{"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
                        for m in body["messages"] if m["role"] not in ("system", "developer")]}
    if system:
        req["systemInstruction"] = {"parts": [{"text": "\n".join(system)}]}
    cfg = {"maxOutputTokens": body.get("max_completion_tokens") or body.get("max_tokens")}
    for k, name in (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed")):
        if body.get(k) is not None:
            cfg[name] = body[k]
    if body.get("logprobs"):
        cfg["responseLogprobs"], cfg["logprobs"] = True, body.get("top_logprobs") or 1
    req["generationConfig"] = cfg
    fake.model_calls += 1
    r = generate(req, body["model"])
    c = r["candidates"][0]
    lp = c.get("logprobsResult")
    content = None
    if lp:
        content = [{"token": ch["token"], "logprob": ch["logProbability"], "bytes": None,
                    "top_logprobs": [{"token": a["token"], "logprob": a["logProbability"], "bytes": None}
                                     for a in top["candidates"]]}
                   for ch, top in zip(lp["chosenCandidates"], lp["topCandidates"])]
    u = r["usageMetadata"]
    return {"id": r["responseId"], "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": {"STOP": "stop", "MAX_TOKENS": "length"}[c["finishReason"]],
                         "message": {"role": "assistant", "content": c["content"]["parts"][0]["text"]},
                         "logprobs": {"content": content} if content else None}],
            "usage": {"prompt_tokens": u["promptTokenCount"], "completion_tokens": u["candidatesTokenCount"],
                      "total_tokens": u["totalTokenCount"]}}
