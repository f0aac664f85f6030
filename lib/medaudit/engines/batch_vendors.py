"""What the vendor batch adapters share (:mod:`medaudit.engines.batch_anthropic`,
:mod:`medaudit.engines.batch_gemini`): each turns the folder's OpenAI-batch files
(``python -m medaudit.engines.batch export``) into its vendor's own batch requests,
runs the vendor's batch lifecycle with the vendor's SDK, and writes what came
back as OpenAI-batch result and error lines, so that ``python -m
medaudit.engines.batch import`` stores the answers exactly where a direct run would
(the key is the custom id; nothing here touches the store).

Which direct run the keys belong to. The store key names the backend and its
endpoint, and the batch file's bodies are the ``openai`` backend's. A vendor
batch therefore answers a subject declared as the ``openai`` backend at that
vendor's OpenAI-compatible endpoint (Anthropic:
``https://api.anthropic.com/v1/``, Gemini:
``https://generativelanguage.googleapis.com/v1beta/openai/``): the direct run
and the batch then store under the same keys, and the adapter translates the
body as the vendor's compatibility layer documents it (a field that layer
ignores — the seed; log-probs for Anthropic — is dropped here too; a field
neither takes is refused by name, never dropped silently).

State. ``DIR/jobs.json`` as for the OpenAI Batch API (:mod:`medaudit.engines.batch`:
keyed by the batch file's content and the endpoint, here ``<vendor>:<base
URL>``), each job with its *parts*: a file is cut into as many vendor
batches as the vendor's limits (requests and bytes per batch) need, and
Gemini takes one model per batch. ``submit`` sends a file whose job is new,
failed, expired, cancelled or marked pending by an import, and skips the
others; ``download`` writes ``DIR/results/<file>.<batch>.output.jsonl`` and
``….error.jsonl`` (the vendor's own result file is kept beside them under
``DIR/results/raw/``). A request of an ended batch that has no result line
(a Gemini batch that expired or was cancelled returns none) is written as an
error line naming why (``batch_expired``, ``batch_cancelled``,
``batch_failed``), so the import lists it in ``failures.jsonl`` and puts it
in the resubmit file. A batch the vendor no longer knows (its SDK's 404) is
one message with the exact command that sends its file again, the job marked
pending, as for the OpenAI Batch API (:mod:`medaudit.engines.batch_api`).
"""
from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

from medaudit.engines.batch import (RESEND, BatchError, content_sha, forgotten, job_key, load_jobs, save_jobs,
                                    submit_command)

# the states a part is reported in (each vendor maps its own onto these)
ENDED = ("completed", "failed", "expired", "cancelled")
# the failure code of a request its ended batch did not answer, by the batch's end state
UNANSWERED = {"expired": "batch_expired", "cancelled": "batch_cancelled", "failed": "batch_failed"}


class TranslationError(BatchError):
    """A batch line the vendor's API cannot take as it stands (names file, line, field)."""


def read_batch_file(path: Path) -> list[tuple[str, dict]]:
    """(custom_id, chat-completions body) of each line of an OpenAI-batch file."""
    out, seen = [], set()
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            cid, body = d["custom_id"], d["body"]
        except (ValueError, KeyError, TypeError) as e:
            raise BatchError(f"{path} line {n}: not an OpenAI-batch line ({type(e).__name__}: {e})") from None
        if d.get("url") != "/v1/chat/completions":
            raise BatchError(f"{path} line {n}: url {d.get('url')!r}: only /v1/chat/completions lines are translated")
        if cid in seen:
            raise BatchError(f"{path} line {n}: custom_id {cid} repeated")
        seen.add(cid)
        out.append((cid, body))
    return out


def split_messages(body: dict, where: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(the system and developer texts, the other (role, text) turns) of a
    chat body; a message whose content is not text is refused."""
    system, turns = [], []
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content")
        if not isinstance(content, str):
            raise TranslationError(f"{where}: messages[{i}].content is not text; only text turns are translated")
        if m.get("role") in ("system", "developer"):
            system.append(content)
        elif m.get("role") in ("user", "assistant"):
            turns.append((m["role"], content))
        else:
            raise TranslationError(f"{where}: messages[{i}].role {m.get('role')!r} "
                                   "is neither system, user nor assistant")
    if not turns:
        raise TranslationError(f"{where}: no user turn")
    return system, turns


def max_tokens_of(body: dict, where: str) -> int:
    """The request's output token limit (``max_completion_tokens``, else ``max_tokens``):
    the vendors need one, so a body with neither is a :class:`TranslationError`."""
    v = body.get("max_completion_tokens", body.get("max_tokens"))
    if v is None:
        raise TranslationError(f"{where}: neither max_tokens nor max_completion_tokens is set (the vendor needs one)")
    return int(v)


def refuse_unknown(body: dict, known: set[str], where: str, vendor: str) -> None:
    """Raise :class:`TranslationError` naming the fields of ``body`` outside ``known``: a
    field the vendor's request has no counterpart for is refused, not dropped."""
    extra = sorted(set(body) - known)
    if extra:
        raise TranslationError(f"{where}: field {', '.join(extra)} has no counterpart in the {vendor} batch request; "
                               "export without it or run the stage directly")


def chat_completion(*, rid: str, model: str, text: str | None, finish: str, prompt_tokens: int,
                    completion_tokens: int, logprobs: list | None = None, refusal: str | None = None) -> dict:
    """A chat-completions response body (what the compatibility endpoint of
    the vendor answers), read by :func:`medaudit.engines.batch.completion_from_body`."""
    return {"id": rid, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": text, "refusal": refusal},
                         "logprobs": {"content": logprobs} if logprobs else None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def ok_line(cid: str, body: dict) -> dict:
    """An OpenAI-batch result line for a vendor's answer: status 200 with the chat
    completion ``body`` under custom id ``cid``."""
    return {"custom_id": cid, "response": {"status_code": 200, "body": body}, "error": None}


def error_line(cid: str, code: str, message: str) -> dict:
    """An OpenAI-batch error line for a request the vendor did not answer: its
    ``code`` and ``message`` under custom id ``cid``."""
    return {"custom_id": cid, "response": None, "error": {"code": code, "message": message}}


ENVELOPE = 256      # bytes a batch spends beyond its requests (the create call's wrapper)


def request_bytes(req: dict) -> int:
    """What one request adds to a batch: its JSON as the SDKs write it at
    the widest (ASCII escapes, spaces after separators) and a separator."""
    return len(json.dumps(req).encode()) + 1


def chunk(items: list[tuple[str, int]], max_requests: int, max_bytes: int, what: str) -> list[list[int]]:
    """Indices of ``items`` ((custom_id, the request's bytes,
    :func:`request_bytes`)) cut into runs of at most ``max_requests``
    requests and ``max_bytes`` bytes with the envelope."""
    parts: list[list[int]] = []
    size = ENVELOPE
    for i, (cid, n) in enumerate(items):
        if n + ENVELOPE > max_bytes:
            raise BatchError(f"{what}: request {cid} is {n} bytes, over the {max_bytes}-byte batch limit")
        if not parts or len(parts[-1]) >= max_requests or size + n > max_bytes:
            parts.append([])
            size = ENVELOPE
        parts[-1].append(i)
        size += n
    return parts


class VendorBatch:
    """One batch folder's jobs at one vendor. A vendor module fills in
    ``vendor``, its endpoint, key variable and limits, and the seven ``_``
    methods below (the SDK client and its calls, the translations)."""

    vendor = ""
    default_base_url = ""
    api_key_env = ""
    max_requests = 0            # per vendor batch
    max_bytes = 0               # per vendor batch (the request payload as sent)
    expiry = ""                 # in words (the docs)

    def __init__(self, folder: Path, base_url: str | None = None, api_key_env: str | None = None,
                 sleep=time.sleep):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise BatchError(f"{self.folder}: no such batch folder "
                             "(python -m medaudit.engines.batch export --out writes it)")
        self.base_url = base_url
        self.endpoint = f"{self.vendor}:{(base_url or self.default_base_url).rstrip('/')}"
        self.sleep = sleep
        env = api_key_env or self.api_key_env
        key = os.environ.get(env)
        if not key:
            from medaudit.llm.openai_backend import PLACEHOLDER_KEY, is_local
            if not is_local(base_url):
                raise BatchError(f"the {self.vendor} batch API needs an API key in the environment variable {env}")
            key = PLACEHOLDER_KEY
        self.client = self._client(base_url, key)
        self.jobs: dict = load_jobs(self.folder)
        # the command that sends this folder's files again, as this object was made
        self.command = submit_command(self.folder, self.vendor, base_url, api_key_env)
        self.notes: list[str] = []          # what a command did besides its output (a forgotten batch sent again)

    # -- what a vendor module provides ----------------------------------------
    def _client(self, base_url: str | None, key: str):
        raise NotImplementedError

    def _translate(self, cid: str, body: dict, where: str) -> tuple[str, dict]:
        """(the group the request goes in — its model where a batch takes one —,
        the request in the vendor's batch format)."""
        raise NotImplementedError

    def _create(self, group: str, requests: list[dict], name: str) -> str:
        """Create one vendor batch; its id."""
        raise NotImplementedError

    def _retrieve(self, batch_id: str) -> tuple[str, dict]:
        """(the part's state in :data:`ENDED` or "in_progress", what to keep: counts, result location)."""
        raise NotImplementedError

    def _results(self, part: dict) -> bytes | None:
        """The vendor's result file of an ended part (None: it has none)."""
        raise NotImplementedError

    def _lines(self, raw: bytes, part: dict) -> list[dict]:
        """The vendor's result file as OpenAI-batch result/error lines."""
        raise NotImplementedError

    def _cancel(self, batch_id: str) -> None:
        raise NotImplementedError

    def _missing(self, error: Exception) -> bool:
        """Whether an exception of the vendor's SDK says the server does not know the batch or
        file it was asked about (HTTP 404)."""
        raise NotImplementedError

    def _forgotten(self, lost: list[tuple[dict, dict]], doing: str) -> BatchError:
        """The error for parts whose batch the server no longer knows: each of their jobs marked
        pending, so that ``submit`` sends its file again (:func:`medaudit.engines.batch.forgotten`)."""
        for job, _ in lost:
            job["status"] = "pending"
        self._save()
        return BatchError(forgotten(self.endpoint, [(p["batch_id"], job["file"]) for job, p in lost], doing,
                                    self.command))

    def _call(self, fn, part: dict, job: dict, lost: list):
        """``fn(part)``; None, with (job, part) added to ``lost``, when the server no longer knows
        the part's batch."""
        try:
            return fn(part)
        except Exception as e:  # noqa: BLE001 - only the SDK's not-found is handled; the rest goes on
            if not self._missing(e):
                raise
            lost.append((job, part))
            return None

    # -- the lifecycle ---------------------------------------------------------
    def _save(self) -> None:
        save_jobs(self.folder, self.jobs)

    @functools.cached_property
    def _current(self) -> set[str]:
        return {job_key(content_sha(f), self.endpoint) for f in self.folder.glob("batch-*.jsonl")}

    def _mine(self) -> dict:
        return {k: j for k, j in self.jobs.items() if j.get("endpoint") == self.endpoint and k in self._current}

    def plan(self, path: Path) -> list[tuple[str, list[str], list[dict]]]:
        """The vendor batches one batch file becomes: (group, custom ids,
        vendor requests) each, within the limits. Every line is translated
        before anything is sent."""
        groups: dict[str, list[tuple[str, dict]]] = {}
        for n, (cid, body) in enumerate(read_batch_file(path), 1):
            g, req = self._translate(cid, body, f"{path} line {n} (custom_id {cid})")
            groups.setdefault(g, []).append((cid, req))
        out = []
        for g, items in groups.items():
            sized = [(cid, request_bytes(req)) for cid, req in items]
            for idx in chunk(sized, self.max_requests, self.max_bytes, str(path)):
                out.append((g, [items[i][0] for i in idx], [items[i][1] for i in idx]))
        return out

    def submit(self, files: list[Path] | None = None) -> list[str]:
        """Send each batch file (default: the folder's ``batch-*.jsonl``) to the vendor,
        split into batches within its limits, and return the vendor's batch ids. A file already sent
        is not sent again unless its job failed, expired, was cancelled or is pending, or the vendor
        no longer knows it (then it is resent and a note says so)."""
        files = files if files is not None else sorted(self.folder.glob("batch-*.jsonl"))
        if not files:
            raise BatchError(f"{self.folder}: no batch-*.jsonl files (run python -m medaudit.engines.batch export)")
        ids, resent, new = [], [], []
        for f in files:
            f = Path(f)
            key = job_key(content_sha(f), self.endpoint)
            job = self.jobs.get(key)
            lost: list = []
            if job and job.get("status") not in RESEND:
                for p in job["parts"]:
                    if p["status"] not in ENDED:
                        self._call(lambda q: self._retrieve(q["batch_id"]), p, job, lost)
                if not lost:
                    ids += [p["batch_id"] for p in job["parts"]]
                    continue
            parts = []
            for i, (group, cids, reqs) in enumerate(self.plan(f), 1):
                bid = self._create(group, reqs, f"{f.stem}-{i}")
                parts.append({"batch_id": bid, "group": group, "keys": cids, "status": "in_progress"})
                ids.append(bid)
            self.jobs[key] = {"file": f.name, "endpoint": self.endpoint, "vendor": self.vendor, "parts": parts,
                              "status": "in_progress", "sent": (job or {}).get("sent", 0) + 1}
            self._save()
            if lost:
                resent += [(p["batch_id"], f.name) for _, p in lost]
                new += [p["batch_id"] for p in parts]
        if resent:
            self.notes.append(forgotten(self.endpoint, resent, "submit", self.command) + f" as {', '.join(new)}")
        return ids

    def refresh(self) -> dict[str, str]:
        """Each part's state now ({batch id: state})."""
        out, lost = {}, []
        for job in self._mine().values():
            before = len(lost)
            for p in job["parts"]:
                if p["status"] not in ENDED:
                    got = self._call(lambda q: self._retrieve(q["batch_id"]), p, job, lost)
                    if got is None:
                        continue
                    p["status"], info = got
                    p.update(info)
                out[p["batch_id"]] = p["status"]
            if len(lost) > before:
                continue
            states = {p["status"] for p in job["parts"]}
            if job.get("status") == "pending" and not states - set(ENDED):
                continue                # an import found its requests unanswered: submit sends it again
            job["status"] = ("in_progress" if states - set(ENDED) else
                             next((s for s in ("failed", "expired", "cancelled") if s in states), "completed"))
        if lost:
            raise self._forgotten(lost, "fetch")
        self._save()
        return out

    def wait(self, every_s: float = 60, max_wait_s: float | None = None) -> dict[str, str]:
        """Poll every ``every_s`` seconds until every job has ended or ``max_wait_s`` has
        passed; returns each job's last state."""
        t0 = time.monotonic()
        while True:
            states = self.refresh()
            if all(s in ENDED for s in states.values()):
                return states
            if max_wait_s is not None and time.monotonic() - t0 > max_wait_s:
                return states
            self.sleep(every_s)

    def download(self) -> list[Path]:
        """Each ended part's results as OpenAI-batch output and error files
        under results/ (the vendor's file under results/raw/)."""
        res = self.folder / "results"
        (res / "raw").mkdir(parents=True, exist_ok=True)
        got, lost = [], []
        for job in self._mine().values():
            stem = Path(job["file"]).stem
            for p in job["parts"]:
                if p["status"] not in ENDED:
                    continue
                n = len(lost)
                raw = self._call(self._results, p, job, lost)
                if len(lost) > n:
                    continue
                lines = []
                if raw is not None:
                    (res / "raw" / f"{stem}.{_safe(p['batch_id'])}.{self.vendor}.jsonl").write_bytes(raw)
                    lines = self._lines(raw, p)
                answered = {x["custom_id"] for x in lines}
                why = UNANSWERED.get(p["status"])
                if why:
                    lines += [error_line(k, why, f"the {self.vendor} batch {p['batch_id']} ended {p['status']} "
                                                 "without answering this request") for k in p["keys"]
                              if k not in answered]
                ok, bad = [], []
                for x in lines:
                    (ok if (x.get("response") or {}).get("status_code") == 200 else bad).append(x)
                for which, rows in (("output", ok), ("error", bad)):
                    if rows:
                        path = res / f"{stem}.{_safe(p['batch_id'])}.{which}.jsonl"
                        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                        encoding="utf-8")
                        got.append(path)
        if lost:
            raise self._forgotten(lost, "fetch")
        return got

    def cancel(self) -> list[str]:
        """Cancel every part that has not ended; the ids. A part the server no longer knows:
        :class:`BatchError` (after cancelling the others), its job marked pending."""
        out, lost = [], []
        for job in self._mine().values():
            if job.get("status") == "pending":
                continue                # its batches are done or forgotten: submit sends it again
            for p in job["parts"]:
                if p["status"] in ENDED:
                    continue
                n = len(lost)
                self._call(lambda q: self._cancel(q["batch_id"]), p, job, lost)
                if len(lost) == n:
                    out.append(p["batch_id"])
        if lost:
            raise self._forgotten(lost, "cancel")
        return out

    def summary(self) -> str:
        """One line per vendor batch of this folder's jobs: file, vendor, batch id, model
        group, request count, status and counts."""
        lines = []
        for j in self._mine().values():
            for p in j["parts"]:
                lines.append(f"{j['file']}: {self.vendor} {p['batch_id']} ({p.get('group')}, {len(p['keys'])} "
                             f"requests) {p['status']} {p.get('counts') or ''}".rstrip())
        return "\n".join(lines)


def _safe(batch_id: str) -> str:
    """A batch id as part of a file name (Gemini's are ``batches/…``)."""
    return batch_id.replace("/", "_")
