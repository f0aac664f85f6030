"""Batch files, shards and store merging: every model stage on the engines
researchers already run (the OpenAI Batch API, ``vllm run-batch``, SGLang,
several GPU nodes at once), with the store's guarantees kept.

    python -m medaudit.engines.batch export --profile P --notebook 03 --out DIR [--engine vllm|llama.cpp]
        [-p NAME VALUE]...
    python -m medaudit.engines.batch import --profile P --out DIR RESULTS.jsonl [ERRORS.jsonl]...
    python -m medaudit.engines.batch shard  --profile P --notebook 03 --shard 0/3 [--workdir DIR]
    python -m medaudit.engines.batch merge  OUT.sqlite IN1.sqlite IN2.sqlite ...
    python -m medaudit.engines.batch answer --out DIR RESULTS.jsonl      # a planted model's batch (validation only)

How the pending requests are found. The notebook itself plans them: every
model stage sends its requests through :func:`medaudit.llm.runs.run`, which
asks its dispatch policy (:mod:`medaudit.llm.dispatch`, which this module
sets through the environment of the notebook's kernel) what to do with the
requests the store lacks. In *collect* mode (``MEDAUDIT_BATCH_COLLECT=DIR``, set by ``export``)
they are written to ``DIR/manifest.jsonl`` under their store keys — exactly
the keys a direct run would store them under, since the stage code built
them — and the notebook stops there (:class:`BatchCollected`). A stage whose
next step depends on the replies (judges of answers, an agent's next turn,
a reformulation's check) is therefore exported round by round: export,
run, import, export again; each round exports the first stage that still
has pending requests. In *shard* mode (``MEDAUDIT_SHARD=i/N``) the node
answers only the pending keys of its shard (:func:`in_shard`: the key's
hash modulo N, so the split needs no coordination), stores them in its own
store and stops (:class:`ShardDone`); ``merge`` combines the nodes' stores.

The batch file. One line per request in the OpenAI batch format
(``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
"body"}``), ``custom_id`` the store key, ``body`` exactly the chat
completions body the openai backend would send for that request (for a local
backend, a body for the engine named by ``export --engine``, with that
backend's model name and every sampling setting it applies in the engine's
field names — :func:`medaudit.llm.dispatch.body_for`; without an engine the
export is refused, since the engine would fill what the body leaves out with
its own defaults): chunked at 50,000
requests or 200 MB per file, the Batch API's limits. ``manifest.jsonl``
keeps what the store row needs (item, condition, format, sample,
permutation, messages, settings, model identity), so ``import`` needs no
model and no notebook run.

Where the notebook's outputs go. Every run of the notebook here (export,
shard, and through them Ray's and Slurm's rounds) writes to the run a direct
run with the same overrides writes (:func:`run_notebook`,
:func:`medaudit.runner.resolve_run`), and only when it ran to the end.

Import. Result and error files are read in any order, partial or repeated:
a key already stored is counted, not written twice. A result for a key the
manifest does not hold, or whose manifest entry no longer hashes to it, is
refused by name before anything is written; so is, with ``--profile``, a
manifest written under another profile fingerprint. A failed line (an error
file's line, a non-200 status, a 200 without an answer) is not stored — as
for a direct run, a failed request is asked again — but written to
``failures.jsonl`` with its reason, and every request without an answer
(failed or absent) goes to ``resubmit/batch-*.jsonl`` under the batch folder,
batch files to send again.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from medaudit.llm import dispatch
from medaudit.llm.base import Completion, GenParams, Request, request_key
# re-exported: the batch command line's own names for the dispatch policy's parts
from medaudit.llm.dispatch import ENV_COLLECT, ENV_FINGERPRINT, ENV_SHARD, MANIFEST, BatchCollected, ShardDone
from medaudit.llm.dispatch import in_shard  # noqa: F401 - re-exported: which shard a key belongs to
from medaudit.llm.runs import Sample, row
from medaudit.llm.store import COLUMNS, ResponseStore

MAX_REQUESTS = 50_000            # the OpenAI Batch API's limits per input file
MAX_BYTES = 200 * 1024 * 1024
URL = "/v1/chat/completions"


class BatchError(ValueError):
    """A batch or result file that cannot be used: names the file, line and field."""


# ==========================================================================
# the Batch API jobs of a folder (medaudit.engines.batch_api keeps them; import
# marks the ones whose requests are pending again)

JOBS = "jobs.json"
# a job in one of these states is sent again by ``submit``; "pending" marks a
# completed job whose requests an import found still unanswered (resubmitted)
RESEND = ("failed", "expired", "cancelled", "pending")


def content_sha(data: Path | bytes) -> str:
    """A batch file's identity in ``jobs.json``: the sha256 of its bytes
    (given, or read from the path), so a moved or copied folder knows what
    it sent, and a new file written where an old one was is a new job."""
    return hashlib.sha256(data if isinstance(data, bytes) else Path(data).read_bytes()).hexdigest()


def job_key(sha: str, endpoint: str) -> str:
    """A job's key in ``jobs.json``: the batch file's content on one endpoint."""
    return f"{sha}@{endpoint}"


def load_jobs(folder: Path) -> dict:
    """``folder``'s jobs ({content sha256 @ endpoint: job}). A jobs file of
    an older version, keyed by the batch file's path, is re-keyed by the
    content of the file at that path (a job whose file is gone keeps its key)."""
    p = Path(folder) / JOBS
    jobs = json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
    out = {}
    for k, j in jobs.items():
        if "@" not in k and Path(k).is_file():
            out[job_key(content_sha(Path(k)), j.get("endpoint", ""))] = {"file": Path(k).name, **j}
        else:
            out[k] = j
    return out


def save_jobs(folder: Path, jobs: dict) -> None:
    """Write ``folder``'s jobs to ``jobs.json`` through a temporary file and a rename, so an
    interrupted write leaves the old file whole."""
    tmp = Path(folder) / (JOBS + ".tmp")
    tmp.write_text(json.dumps(jobs, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, Path(folder) / JOBS)


def submit_command(folder: Path, vendor: str = "openai", base_url: str | None = None,
                   api_key_env: str | None = None) -> str:
    """The exact ``python -m medaudit.engines.batch_api submit`` command that sends the batch files of
    ``folder`` to where its jobs went: the vendor, base URL and key variable they were made with
    (each only when it is not the default), quoted for a shell."""
    cmd = ["python", "-m", "medaudit.engines.batch_api", "submit"]
    if vendor != "openai":
        cmd += ["--vendor", vendor]
    cmd += ["--out", str(folder)]
    if base_url:
        cmd += ["--base-url", base_url]
    if api_key_env:
        cmd += ["--api-key-env", api_key_env]
    return shlex.join(cmd)


FORGOTTEN_NEXT = {
    "fetch": "its answers cannot be fetched; marked to be sent again: run `{cmd}`, then wait and download",
    "cancel": "nothing is left to cancel; marked to be sent again: `{cmd}` sends {it}",
    "submit": "sent again",
}


def forgotten(endpoint: str, lost: list[tuple[str, str]], doing: str, cmd: str) -> str:
    """The one message for batches the server no longer knows (404: a local server restarted, its
    state was cleared, or the vendor dropped an old batch): which batches of which files, and what
    happens next (:data:`FORGOTTEN_NEXT`: ``fetch`` for status, wait and download, ``cancel``,
    ``submit``). Each job is marked pending by its caller, so that ``submit`` sends its file again."""
    what = ", ".join(f"{bid} ({file})" for bid, file in lost)
    it = "it" if len(lost) == 1 else "them"
    return (f"{endpoint} no longer knows batch {what} (404: the server forgot it, e.g. it restarted); "
            + FORGOTTEN_NEXT[doing].format(cmd=cmd, it=it))


def mark_pending(folder: Path, files: Iterable[Path]) -> int:
    """Mark the jobs of ``folder`` whose content equals one of ``files`` as
    pending again (their requests still have no answer after an import), so
    that ``submit`` sends them once more; returns how many were marked."""
    p = Path(folder) / JOBS
    if not p.exists():
        return 0
    jobs = load_jobs(folder)
    shas = {content_sha(f) for f in files}
    n = 0
    for k, j in jobs.items():
        if k.split("@", 1)[0] in shas and j.get("status") not in RESEND:
            j["status"], n = "pending", n + 1
    if n:
        save_jobs(folder, jobs)
    return n


def shard_spec(text: str) -> tuple[int, int]:
    """``"i/N"`` → (i, N) with 0 <= i < N (:func:`medaudit.llm.dispatch.shard_spec`)."""
    try:
        return dispatch.shard_spec(text)
    except dispatch.ShardSpecError as e:
        raise BatchError(str(e)) from None


@dataclass
class Entry:
    """One manifest line: the planned sample and where it is stored."""
    sample: Sample
    model: str
    backend: str
    model_id: str
    body: dict
    settings: dict | None
    fingerprint: str


def manifest_entry(d: dict) -> Entry:
    """One manifest line (its JSON object) as an Entry, the request with its labels."""
    req = Request(tuple((m[0], m[1]) for m in d["messages"]), GenParams(**d["params"]),
                  tuple(d["answer_letters"]), d.get("stem_chars"), tuple((d.get("labels") or {}).items()))
    s = Sample(d["item_id"], d["condition"], d["prompt_format"], int(d["k"]), d["perm"], req, key=d["key"],
               meta={"judged_key": d["judged_key"]} if d.get("judged_key") else {})
    return Entry(s, d["model"], d["backend"], d["model_id"], d["body"], d.get("settings"), d.get("fingerprint", ""))


def expected_key(e: Entry) -> str:
    """The store key a manifest entry's answer must come back under: its backend, model
    id and request with the sample's item, condition, prompt format, k and permutation
    (:func:`medaudit.llm.base.request_key`)."""
    s = e.sample
    return request_key(e.backend, e.model_id, s.request, item_id=s.item_id, condition=s.condition,
                       prompt_format=s.prompt_format, k=s.k, perm=s.perm)


def read_manifest(folder: Path) -> dict[str, Entry]:
    """The manifest's entries by key (a repeated key once)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise BatchError(f"{path}: no manifest (run `python -m medaudit.engines.batch export` first)")
    out: dict[str, Entry] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = manifest_entry(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise BatchError(f"{path} line {n}: not a manifest entry ({type(exc).__name__}: {exc})") from None
        out.setdefault(e.sample.key, e)
    return out


def batch_line(key: str, body: dict) -> str:
    """One line of an OpenAI-batch input file: the request ``body`` posted to the chat
    completions endpoint under ``key`` as its custom id."""
    return json.dumps({"custom_id": key, "method": "POST", "url": URL, "body": body}, ensure_ascii=False)


def write_batches(entries: Iterable[Entry], folder: Path, prefix: str = "batch", max_requests: int = MAX_REQUESTS,
                  max_bytes: int = MAX_BYTES) -> list[Path]:
    """The batch input files ``prefix-0001.jsonl``, … (each at most
    ``max_requests`` lines and ``max_bytes`` bytes), in manifest order."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{prefix}-*.jsonl"):
        old.unlink()
    files: list[Path] = []
    f, n, size = None, 0, 0
    for e in entries:
        data = (batch_line(e.sample.key, e.body) + "\n").encode("utf-8")
        if len(data) > max_bytes:
            raise BatchError(f"request {e.sample.key} ({e.sample.item_id} / {e.sample.condition}) is "
                             f"{len(data)} bytes, over the {max_bytes}-byte file limit")
        if f is None or n >= max_requests or size + len(data) > max_bytes:
            if f:
                f.close()
            files.append(folder / f"{prefix}-{len(files) + 1:04d}.jsonl")
            f, n, size = open(files[-1], "wb"), 0, 0
        f.write(data)
        n += 1
        size += len(data)
    if f:
        f.close()
    return files


# ==========================================================================
# results


def completion_from_body(body: dict, req: Request) -> Completion:
    """A Completion from a chat-completions response body, read as the
    openai backend reads a live response: the text (or refusal), finish
    reason, tokens, served model and the letters' log-probs at the answer
    position. A reply without an answer is a failed Completion."""
    from openai.types.chat import ChatCompletion

    from medaudit.llm.openai_backend import answer_position

    try:
        r = ChatCompletion.model_validate(body)
        ch = r.choices[0]
        msg = ch.message
    except Exception as e:  # noqa: BLE001 - any shape problem is a malformed line
        return Completion(text="", error=f"malformed response body: {type(e).__name__}: {str(e)[:200]}",
                          error_kind="malformed")
    usage = r.usage
    c = Completion(text=(msg.content or msg.refusal or "").strip(),
                   tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
                   tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
                   finish_reason=ch.finish_reason or "", served_model=str(r.model or ""))
    if c.finish_reason == "error" or (msg.content is None and not msg.refusal):
        c.error, c.error_kind = "the response has no message content", "no_content"
        return c
    content = getattr(getattr(ch, "logprobs", None), "content", None)
    if req.answer_letters and content:
        c.answer_logprob, c.letter_logprobs = answer_position(content, req.answer_letters)
    return c


@dataclass
class ImportReport:
    """What :func:`import_results` did: ``stored`` new rows, ``already``
    stored (a repeated line, a file read twice), ``failed`` lines (by kind,
    in ``failures``), ``missing`` (planned, no line in any file), and the
    resubmit file when some requests still lack an answer. ``answered_since``:
    error lines of requests that have an answer now (from another round or
    file): no failure, counted here so that every line is accounted for."""
    lines: int = 0
    stored: int = 0
    already: int = 0
    different: int = 0
    answered_since: int = 0
    failed: int = 0
    missing: int = 0
    failures: dict = field(default_factory=dict)
    resubmit: Path | None = None
    failures_file: Path | None = None

    def __repr__(self) -> str:
        out = (f"lines {self.lines}; stored {self.stored}; already stored {self.already} "
               f"({self.different} with another reply, the stored one kept); error lines of requests answered "
               f"since {self.answered_since} (no failure); failed {self.failed}; missing {self.missing}")
        out += "".join(f"\n  failed {n}x [{k}]" for k, n in self.failures.items())
        if self.failures_file:
            out += f"\n  each failure with its reason: {self.failures_file}"
        if self.resubmit:
            out += f"\n  resubmit {self.failed + self.missing} requests: {self.resubmit}"
        return out


def _read_lines(path: Path):
    """(line number, the line's JSON object, or the reason it is none)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield n, json.loads(line), None
                except ValueError as e:
                    yield n, None, f"not JSON ({e})"


def _error_text(err) -> str:
    """A failed line's ``error`` (an object with message / code, or text) in words."""
    if isinstance(err, dict):
        return ": ".join(str(x) for x in (err.get("code"), err.get("message")) if x) or json.dumps(err)
    return str(err) if err else ""


def _outcome(path: Path, n: int, d: dict, entry: Entry) -> tuple[Completion, str | None]:
    """(the Completion of one result or error line, why the line is refused
    or None): a line answered by another model than its request named is
    refused."""
    resp, err = d.get("response"), d.get("error")
    if resp and resp.get("status_code") == 200 and isinstance(resp.get("body"), dict):
        c = completion_from_body(resp["body"], entry.sample.request)
        want = entry.body.get("model")
        # the OpenAI API answers "gpt-4o-mini-2024-07-18" for "gpt-4o-mini"; a server may name what it
        # serves (its GGUF path), which the openai backend's identity records as "(served: …)"
        if (not c.error and want and c.served_model and not c.served_model.startswith(str(want))
                and f"served: {c.served_model}" not in entry.model_id):
            return c, (f"{path} line {n}: request {entry.sample.key} ({_label(entry)}) was answered by "
                       f"model {c.served_model!r}, not the {want!r} it was sent to")
        return c, None
    if resp and resp.get("status_code") not in (None, 200):
        b = resp.get("body") or {}
        msg = (b.get("error") or {}).get("message") if isinstance(b, dict) else None
        # vLLM's run-batch: an empty body, the reason in the line's `error`
        msg = msg or _error_text(err) or b
        return Completion(text="", error=f"HTTP {resp['status_code']}: {msg}"[:500],
                          error_kind=f"http_{resp['status_code']}"), None
    if err:
        return Completion(text="", error=_error_text(err)[:500],
                          error_kind=str((err.get("code") if isinstance(err, dict) else None) or "error")), None
    return Completion(text="", error="a line with neither response nor error", error_kind="malformed"), None


def answer_here(folder: Path, backend, out: Path) -> int:
    """Answer a manifest's requests in this process with ``backend``, one
    that no engine serves (the planted model, validation only: it answers
    from the requests' labels, which the manifest keeps beside the bodies),
    as OpenAI-batch output and error lines appended to ``out``, which
    :func:`import_results` reads as any engine's. Requests planned for
    another backend or model identity are refused by name before anything
    is written. Returns the lines written."""
    entries = list(read_manifest(folder).values())
    other = [e for e in entries if (e.backend, e.model_id) != (backend.kind, backend.model_id)]
    if other:
        raise BatchError(f"{Path(folder) / MANIFEST}: {len(other)} requests (e.g. {_label(other[0])}) are for "
                         f"{other[0].backend} {other[0].model_id}, not {backend.kind} {backend.model_id}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        for e, c in zip(entries, backend.complete([e.sample.request for e in entries], progress=False)):
            f.write(result_line(e.sample.key, c, backend.model_id) + "\n")
    return len(entries)


def result_line(key: str, c: Completion, model: str) -> str:
    """One OpenAI-batch output line (an error line for a failed
    Completion) for a request answered in-process by ``model``."""
    if c.error:
        d = {"custom_id": key, "response": None, "error": {"code": c.error_kind or "error", "message": c.error}}
    else:
        d = {"custom_id": key, "response": {"status_code": 200, "request_id": "", "body": {
            "id": key, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": c.finish_reason or "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": c.text}}],
            "usage": {"prompt_tokens": c.tokens_in, "completion_tokens": c.tokens_out,
                      "total_tokens": c.tokens_in + c.tokens_out}}}}
    return json.dumps(d, ensure_ascii=False)


def _label(e: Entry) -> str:
    s = e.sample
    return f"{s.item_id} / {s.condition} / {s.prompt_format} k={s.k}"


def import_results(folder: Path, files: list[Path], store: ResponseStore, fingerprint: str | None = None
                   ) -> ImportReport:
    """Store the answers of result and error files (any order, partial or
    repeated) under the manifest's keys; see the module docstring."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    refused = []
    for key, e in manifest.items():
        if expected_key(e) != key:
            refused.append(f"{key} ({_label(e)}): its manifest entry no longer hashes to it")
        elif fingerprint is not None and e.fingerprint and e.fingerprint != fingerprint:
            refused.append(f"{key} ({_label(e)}): exported under another profile (fingerprint "
                           f"{e.fingerprint[:12]}, now {fingerprint[:12]})")
    # every line is read and judged before anything is stored: an import is all or nothing
    lines = []
    for path in files:
        for n, d, problem in _read_lines(Path(path)):
            key = d.get("custom_id") if isinstance(d, dict) else None
            if problem is not None:
                refused.append(f"{path} line {n}: {problem}")
            elif key not in manifest:
                refused.append(f"{path} line {n}: custom_id {key!r} is not a request of this export")
            else:
                c, why = _outcome(Path(path), n, d, manifest[key])
                if why is None:
                    lines.append((Path(path), n, c, manifest[key]))
                    continue
                refused.append(why)
    if refused:
        head = (f"{len(refused)} refused; nothing was imported (fix or remove "
                f"{'it' if len(refused) == 1 else 'them'} to import the other {len(lines)} lines):")
        raise BatchError("\n  ".join([head, *refused[:20]]) + ("\n  …" if len(refused) > 20 else ""))
    rep = ImportReport(lines=len(lines))
    answered: dict[str, str] = {}
    fails: dict[str, dict] = {}
    error_lines: dict[str, int] = {}
    for path, n, c, e in lines:
        key = e.sample.key
        if c.error:
            error_lines[key] = error_lines.get(key, 0) + 1
            if key not in answered:
                fails[key] = {"custom_id": key, "what": _label(e), "kind": c.error_kind, "error": c.error,
                              "file": str(path), "line": n}
            continue
        if key in answered or store.has([key]):
            rep.already += 1
            old = answered.get(key)
            if old is None:
                old = store.by_keys([key])["response_text"].iloc[0]
            rep.different += old != c.text
            answered.setdefault(key, old)
            fails.pop(key, None)
            continue
        if e.settings is not None:
            c.settings = e.settings
        store.put(row(e.sample, c, model=e.model, backend=e.backend, model_id=e.model_id))
        answered[key] = c.text
        fails.pop(key, None)
        rep.stored += 1
    have = store.has(manifest)
    # an error line of a request answered since (a later round, already stored) is no failure
    fails = {k: v for k, v in fails.items() if k not in have}
    rep.answered_since = sum(n for k, n in error_lines.items() if k in have)
    rep.failed = len(fails)
    for f in fails.values():
        rep.failures[f["kind"]] = rep.failures.get(f["kind"], 0) + 1
    with open(folder / "failures.jsonl", "w", encoding="utf-8") as f:
        for x in fails.values():
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    rep.failures_file = folder / "failures.jsonl" if fails else None
    pending = [e for k, e in manifest.items() if k not in have]
    rep.missing = len(pending) - rep.failed
    if pending:
        rep.resubmit = folder / "resubmit"
        written = write_batches(pending, rep.resubmit)
        # a resubmit file equal to one already sent holds requests still unanswered: send it again
        mark_pending(rep.resubmit, written)
    else:
        for old in (folder / "resubmit").glob("batch-*.jsonl"):
            old.unlink()
    return rep


# ==========================================================================
# merging stores


@dataclass
class MergeReport:
    """What :func:`merge` did: stores and rows read, rows added, and duplicates (the same
    key with the same reply, kept once)."""
    stores: int = 0
    rows: int = 0
    added: int = 0
    duplicates: int = 0

    def __repr__(self) -> str:
        return (f"read {self.rows} rows from {self.stores} stores: added {self.added}, duplicates {self.duplicates} "
                f"(same key, same reply: kept once)")


# what makes two rows of one key the same reply: the text and what was read from it
REPLY = ("response_text", "parsed_answer", "parse_status", "answer_logprob", "letter_logprobs")


def _replies(store: ResponseStore) -> dict[str, tuple]:
    return {r[0]: tuple(r[1:]) for r in store.query(f"SELECT key, {', '.join(REPLY)} FROM responses")}


def merge(out: Path, inputs: list[Path]) -> MergeReport:
    """Combine stores by key into ``out`` (created or extended). A key held
    with two different replies (in the inputs or against ``out``: another
    text, parsed answer, parse status or log-prob) is refused by name and
    nothing is written (a target the merge created is removed again); the
    same key with the same reply is counted as a duplicate and kept once."""
    rep = MergeReport(stores=len(inputs))
    for p in inputs:
        if not Path(p).is_file():
            raise BatchError(f"no store {p}")
    existed = Path(out).exists()
    target = ResponseStore(out)
    seen = _replies(target)
    new_rows: dict[str, dict] = {}
    clashes = []
    for p in inputs:
        with ResponseStore(p) as s:
            df, replies = s.frame(), _replies(s)
        rep.rows += len(df)
        for r in df.to_dict("records"):
            k = r["key"]
            if k in seen:
                if seen[k] != replies[k]:
                    clashes.append(f"{k} ({r['item_id']} / {r['condition']} / {r['prompt_format']} k={r['sample']}) "
                                   f"in {p}")
                else:
                    rep.duplicates += 1
                continue
            seen[k] = replies[k]
            new_rows[k] = {c: (None if _isna(r.get(c)) else r.get(c)) for c in COLUMNS}
    if clashes:
        target.close()
        if not existed:
            for suffix in ("", "-wal", "-shm"):
                Path(str(out) + suffix).unlink(missing_ok=True)
        raise BatchError(f"{len(clashes)} keys hold two different replies; nothing was merged:\n  "
                         + "\n  ".join(clashes[:20]))
    target.put_many(list(new_rows.values()))
    rep.added = len(new_rows)
    target.close()
    return rep


def _isna(v) -> bool:
    try:
        return v is None or v != v
    except Exception:  # noqa: BLE001
        return False


# ==========================================================================
# running a notebook in a mode


def notebook_path(spec: str) -> Path:
    """``03`` or ``03_inference`` or a path → the notebook file."""
    from medaudit import paths

    p = Path(spec)
    if p.suffix == ".ipynb" and p.is_file():
        return p
    hits = sorted((paths.project_root() / "notebooks").glob(f"{spec}*.ipynb"))
    if len(hits) != 1:
        raise BatchError(f"--notebook {spec}: {'no' if not hits else len(hits)} notebooks match "
                         f"under notebooks/ (give 03, 03_inference or a path)")
    return hits[0]


def fingerprint(params: dict) -> str:
    """A hash of the notebook's resolved parameters."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


# the stops of a notebook whose requests another engine answers: its run goes on in a later round
ROUND_STOPS = (BatchCollected.__name__, ShardDone.__name__, dispatch.NotStored.__name__)


def run_notebook(notebook: Path, profile: str, overrides, env: dict, workdir: Path, *, run: str | None = None,
                 engine: str = "batch") -> tuple[bool, str, str]:
    """Execute the notebook under the profile with ``env`` set: (finished,
    the type of the exception that stopped it, its words); ("", "") when it
    ran to the end. The executed copy is kept in ``workdir``.

    The run is the one :mod:`medaudit.runner` writes these overrides to
    (:func:`medaudit.runner.resolve_run`; ``run``: a name given, as ``--run``), so an engine
    never writes another subject's results into the default run: the kernel gets the run's
    name and a staging folder, and only a notebook that ran to the end has its derived data,
    tables and figures moved into the run's folders (:func:`medaudit.runs.promote`) and its
    executed copy placed in the run's ``notebooks/`` — a round that stops for its pending
    requests (:data:`ROUND_STOPS`) or fails leaves them as they were. The run's manifest
    records the notebook with ``engine``: running, then ok, or failed when it stopped on an
    error."""
    import papermill as pm

    from medaudit import paths, runner, runs

    params = runner.prepare(notebook, profile, overrides)
    run, changes, sources = runner.resolve_run(profile, overrides, run)
    env = {**env, ENV_FINGERPRINT: fingerprint(params), paths.RUN_ENV: run}
    old = {k: os.environ.get(k) for k in [*env, paths.STAGE_ENV]}
    os.environ.update(env)
    # after MEDAUDIT_ROOT is set: a Slurm task's root of its own
    stage = paths.outputs(profile, ".staging", f"{notebook.stem}-{engine}-{os.getpid()}", mkdir=False)
    os.environ[paths.STAGE_ENV] = str(stage)
    workdir.mkdir(parents=True, exist_ok=True)
    status = "failed"
    try:
        stage.mkdir(parents=True, exist_ok=True)
        runs.record(profile, run, notebook.stem, "running", params=params, changes=changes, sources=sources,
                    engine=engine)
        executed = workdir / notebook.name
        pm.execute_notebook(str(notebook), str(executed), parameters=params, cwd=str(notebook.parent),
                            progress_bar=False)
        runs.promote(stage, profile, run)
        placed = paths.run_outputs(profile, "notebooks", notebook.name, run=run, mkdir=True)
        shutil.copy2(executed, placed)
        status = "ok"
        return True, "", ""
    except Exception as e:  # noqa: BLE001 - the stop is expected; reported to the caller
        # the notebook's kernel is another process: papermill names its exception's type (ename)
        ename = getattr(e, "ename", type(e).__name__)
        if ename in ROUND_STOPS:
            status = "running"
        return False, ename, f"{ename}: {getattr(e, 'evalue', e)}"
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        with contextlib.suppress(OSError):
            stage.parent.rmdir()                      # .staging/ when nothing else is staging
        if status != "running":
            with contextlib.suppress(OSError):
                runs.record(profile, run, notebook.stem, status)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def export(notebook: Path, profile: str, out: Path, overrides=(), engine: str | None = None, *,
           runs_on: str = "batch") -> tuple[list[Path], int, str]:
    """Run the notebook in collect mode; (batch files, requests, how the run
    ended). ``engine``: the batch engine that answers a local backend's
    requests (:data:`medaudit.llm.dispatch.ENGINES`; their bodies name every
    sampling setting in its field names). ``runs_on``: what answers the rounds, for the run's
    manifest (:func:`run_notebook`: a notebook that ran to the end writes its run's outputs)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    env = {ENV_COLLECT: str(out.resolve()), **({dispatch.ENV_ENGINE: engine} if engine else {})}
    done, stopped_by, why = run_notebook(notebook, profile, overrides, env, out / "executed", engine=runs_on)
    if not (out / MANIFEST).exists():
        if done:
            return [], 0, "the notebook ran to the end: nothing is pending"
        raise BatchError(f"{notebook.name} stopped before any request was pending: {why}")
    if stopped_by != BatchCollected.__name__:
        raise BatchError(f"{notebook.name} stopped with an error, not a batch export: {why}")
    entries = list(read_manifest(out).values())
    return write_batches(entries, out), len(entries), why


# ==========================================================================
# command line


def _overrides(args) -> list:
    return list(getattr(args, "overrides", None) or [])


def _override_args(p: argparse.ArgumentParser) -> None:
    """-p NAME VALUE and -y YAML, as python -m medaudit.runner takes them (in order)."""
    from medaudit.runner import Ordered

    p.add_argument("-p", "--parameters", dest="overrides", nargs=2, action=Ordered, metavar=("NAME", "VALUE"),
                   help="a parameter override, as the runner reads it")
    p.add_argument("-y", "--parameters_yaml", dest="overrides", action=Ordered, metavar="YAML",
                   help="overrides as a YAML mapping")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m medaudit.engines.batch", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write a stage's pending requests as OpenAI-batch JSONL")
    e.add_argument("--profile", required=True)
    e.add_argument("--notebook", required=True, help="03, 03_inference or a path")
    e.add_argument("--out", required=True, type=Path, help="the batch folder (manifest and batch files)")
    e.add_argument("--engine", choices=sorted(dispatch.ENGINES),
                   help="the engine that answers a local backend's requests (llamacpp, transformers, vllm): the "
                        "bodies then name every sampling setting in its field names; not needed for the openai "
                        "backend, whose body is what the direct run sends")
    _override_args(e)
    i = sub.add_parser("import", help="store the answers of result/error files")
    i.add_argument("--out", required=True, type=Path, help="the batch folder written by export")
    i.add_argument("--profile", required=True, help="the store outputs/<profile>/data/responses.sqlite")
    i.add_argument("--notebook", help="refuse requests exported under other parameters of this notebook "
                                      "(needed when the export recorded its parameters)")
    i.add_argument("--no-check", action="store_true", help="import without checking the export's parameters")
    i.add_argument("--store", type=Path, help="another store file")
    _override_args(i)
    i.add_argument("files", nargs="+", type=Path)
    s = sub.add_parser("shard", help="run the notebook answering shard i of N of its pending requests")
    s.add_argument("--profile", required=True)
    s.add_argument("--notebook", required=True)
    s.add_argument("--shard", required=True, help="i/N, e.g. 0/3")
    s.add_argument("--workdir", type=Path, default=None, help="where the executed copy goes")
    _override_args(s)
    a = sub.add_parser("answer", help="answer a planted model's batch in this process (no engine serves one)")
    a.add_argument("--out", required=True, type=Path, help="the batch folder written by export")
    a.add_argument("results", type=Path, help="the output file to append the result lines to (then: import)")
    m = sub.add_parser("merge", help="combine stores by key")
    m.add_argument("out", type=Path)
    m.add_argument("inputs", nargs="+", type=Path)
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.engines.batch``: ``export``, ``import``,
    ``shard``, ``answer`` (a planted model's requests answered here) and ``merge``; a bad file or
    parameter is reported on stderr with exit status 2."""
    args = _parser().parse_args(argv)
    from medaudit.config import ConfigError

    try:
        if args.cmd == "export":
            files, n, why = export(notebook_path(args.notebook), args.profile, args.out, _overrides(args),
                                   args.engine)
            print(f"{n} requests in {len(files)} batch files under {args.out}" + (f" ({why})" if not n else ""))
            for f in files:
                print(f"  {f}")
        elif args.cmd == "import":
            from medaudit import paths, runner
            fp = None
            if args.notebook:
                fp = fingerprint(runner.prepare(notebook_path(args.notebook), args.profile, _overrides(args)))
            elif not args.no_check and any(e.fingerprint for e in read_manifest(args.out).values()):
                raise BatchError(f"{args.out}: the export recorded the parameters it was made under; pass "
                                 "--notebook (and the same -p / -y) so that the import checks them, or --no-check "
                                 "to import without the check")
            store = ResponseStore(args.store or paths.outputs(args.profile, "data", "responses.sqlite"))
            print(import_results(args.out, args.files, store, fingerprint=fp))
        elif args.cmd == "shard":
            shard_spec(args.shard)
            nb = notebook_path(args.notebook)
            from medaudit import paths, runner
            run = runner.resolve_run(args.profile, _overrides(args))[0]
            work = args.workdir or paths.run_outputs(args.profile, "shards", args.shard.replace("/", "-of-"), run=run)
            done, stopped_by, why = run_notebook(nb, args.profile, _overrides(args), {ENV_SHARD: args.shard}, work,
                                                 run=run, engine="shard")
            print("the notebook ran to the end" if done else why)
            if not done and stopped_by != ShardDone.__name__:
                return 1
        elif args.cmd == "answer":
            from medaudit.llm.planted import PlantedBackend, TruthError, is_planted

            ids = sorted({e.model_id for e in read_manifest(args.out).values()})
            if len(ids) != 1 or not is_planted(ids[0]):
                raise BatchError(f"{args.out}: answer serves one planted model's requests (planted:<truth>); the "
                                 f"manifest names {', '.join(ids)}: send them to an engine")
            try:
                backend = PlantedBackend.from_model_id(ids[0])
            except TruthError as e:
                raise BatchError(str(e)) from None
            n = answer_here(args.out, backend, args.results)
            print(f"{n} result lines appended to {args.results}; store them with import")
        elif args.cmd == "merge":
            print(merge(args.out, args.inputs))
    except (BatchError, ConfigError) as e:      # ConfigError: the runner's checks of the parameters
        print(f"medaudit.engines.batch: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
