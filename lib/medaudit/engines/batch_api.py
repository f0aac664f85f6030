"""The OpenAI Batch API lifecycle for the batch files of :mod:`medaudit.engines.batch`
(with the ``openai`` package): upload each file with purpose "batch",
create a batch on ``/v1/chat/completions`` with a 24 h window, poll until it
ends, download its output and error files, cancel on request.

    python -m medaudit.engines.batch_api submit   --out DIR [--base-url URL]
    python -m medaudit.engines.batch_api wait     --out DIR [--every 60] [--max-wait S]
    python -m medaudit.engines.batch_api download --out DIR
    python -m medaudit.engines.batch_api cancel   --out DIR
    python -m medaudit.engines.batch_api probe    [--base-url URL]

State lives in ``DIR/jobs.json``, keyed by each input file's content
(sha256 → file name, endpoint, file id, batch id, status; each command sees
the jobs of its own endpoint and of the folder's current batch files: an
earlier export round's jobs are history), so every step can be rerun and a moved or
copied folder knows what it sent: ``submit`` skips a file whose content was
already submitted and whose batch is not failed, expired or cancelled, and
sends any other (a new export round written into the same folder is new
content). When an import finds the requests of a completed batch still
unanswered and writes the same resubmit file again, it marks that job
pending, so the next ``submit`` sends it once more; ``download`` writes
``DIR/results/<input file>.<batch id>.output.jsonl`` and ``….error.jsonl``. A batch that
expired keeps the answers it finished (its output file) and lists the rest
in its error file (``batch_expired``); ``python -m medaudit.engines.batch import``
then stores what came back and writes the resubmit file for the rest. A
batch whose input failed validation (``status: failed``) is reported with
the server's errors. A batch the server no longer knows (404: a restarted
local server, a dropped batch) ends ``status``, ``wait``, ``download`` and
``cancel`` in one message naming it, its file and the exact command that
sends it again (:func:`medaudit.engines.batch.submit_command`: the vendor, base URL
and key variable the job was made with), its job marked pending; ``submit``
sends a forgotten batch's file again itself, saying so, rather than
reprinting its id. The vendor adapters do the same.

The API key is read from the environment (``--api-key-env``, default
OPENAI_API_KEY) and never written; a local ``base_url`` needs none. ``probe``
says whether an endpoint answers ``GET /v1/batches`` (the OpenAI API does;
``vllm serve`` and SGLang's server may not: there, ``vllm run-batch`` runs
the same file offline — docs/models.md "Scaling up").
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

from medaudit.engines.batch import (RESEND, BatchError, content_sha, forgotten, job_key, load_jobs, save_jobs,
                                    submit_command)

TERMINAL = ("completed", "failed", "expired", "cancelled")
ENDPOINT = "/v1/chat/completions"


def _client(base_url: str | None, api_key_env: str, timeout_s: float = 120):
    import openai

    from medaudit.llm.openai_backend import PLACEHOLDER_KEY, is_local

    key = os.environ.get(api_key_env)
    if not key:
        if not is_local(base_url):
            raise BatchError(f"the Batch API needs an API key in the environment variable {api_key_env}")
        key = PLACEHOLDER_KEY
    extra = {"http_client": openai.DefaultHttpxClient(trust_env=False)} if is_local(base_url) else {}
    return openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, **extra)


class BatchAPI:
    """One batch folder's jobs on one endpoint."""

    def __init__(self, folder: Path, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 sleep=time.sleep):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise BatchError(f"{self.folder}: no such batch folder "
                             "(python -m medaudit.engines.batch export --out writes it)")
        from medaudit.llm.openai_backend import normalise_base_url

        self.client = _client(base_url, api_key_env)
        self.endpoint = normalise_base_url(base_url)    # jobs are per endpoint: a folder may go to several
        self.sleep = sleep
        self.jobs: dict = load_jobs(self.folder)
        # the command that sends this folder's files again, as this object was made
        self.command = submit_command(self.folder, "openai", base_url,
                                      api_key_env if api_key_env != "OPENAI_API_KEY" else None)
        self.notes: list[str] = []          # what a command did besides its output (a forgotten batch sent again)

    def _save(self) -> None:
        save_jobs(self.folder, self.jobs)

    def submit(self, files: list[Path] | None = None, metadata: dict | None = None) -> list[str]:
        """Upload and create a batch for each file (default: the folder's
        batch-*.jsonl); returns the batch ids."""
        files = files if files is not None else sorted(self.folder.glob("batch-*.jsonl"))
        if not files:
            raise BatchError(f"{self.folder}: no batch-*.jsonl files (run python -m medaudit.engines.batch export)")
        ids, resent, new = [], [], []
        for f in files:
            data = Path(f).read_bytes()                 # read once: hashed, then uploaded
            key = job_key(content_sha(data), self.endpoint)
            job = self.jobs.get(key)
            if job and job.get("status") not in RESEND:
                if job.get("status") in TERMINAL or self._known(job["batch_id"]):
                    ids.append(job["batch_id"])
                    continue
                lost = job["batch_id"]
            else:
                lost = None
            up = self.client.files.create(file=(Path(f).name, data), purpose="batch")
            b = self.client.batches.create(input_file_id=up.id, endpoint=ENDPOINT, completion_window="24h",
                                           metadata={"medaudit_file": Path(f).name, **(metadata or {})})
            self.jobs[key] = {"file": Path(f).name, "file_id": up.id, "batch_id": b.id, "status": b.status,
                              "endpoint": self.endpoint, "sent": (job or {}).get("sent", 0) + 1}
            self._save()
            ids.append(b.id)
            if lost:
                resent.append((lost, Path(f).name))
                new.append(b.id)
        if resent:
            self.notes.append(forgotten(self.endpoint, resent, "submit", self.command) + f" as batch {', '.join(new)}")
        return ids

    def _known(self, batch_id: str) -> bool:
        """Whether the server still knows a batch that has not ended (``submit`` sends the file of
        one it forgot again instead of reprinting a dead id)."""
        import openai

        try:
            self.client.batches.retrieve(batch_id)
        except openai.NotFoundError:
            return False
        return True

    def _mine(self) -> dict:
        """The jobs of the folder's current batch files submitted to this
        endpoint (a job of an earlier export round written into the same
        folder is history: its results were downloaded with that round)."""
        return {n: j for n, j in self.jobs.items() if j.get("endpoint") == self.endpoint and n in self._current}

    @functools.cached_property
    def _current(self) -> set[str]:
        """The job keys of the folder's batch files, hashed once per command
        (``wait`` polls :meth:`refresh` every minute; files of up to 200 MB)."""
        return {job_key(content_sha(f), self.endpoint) for f in self.folder.glob("batch-*.jsonl")}

    def _forgotten(self, lost: list[dict], doing: str = "fetch") -> BatchError:
        """The error for jobs whose batch or file the server no longer has
        (404: a local server restarted, or its state was cleared): each is
        marked pending, so the next ``submit`` sends its file again
        (:func:`medaudit.engines.batch.forgotten`, with the exact command)."""
        for job in lost:
            job["status"] = "pending"
        self._save()
        return BatchError(forgotten(self.endpoint, [(j["batch_id"], j.get("file", "?")) for j in lost], doing,
                                    self.command))

    def refresh(self) -> dict[str, object]:
        """Each job's batch as the server says now (a batch the server no
        longer knows: :class:`BatchError` saying to submit it again)."""
        import openai

        out, lost = {}, []
        for name, job in self._mine().items():
            try:
                b = self.client.batches.retrieve(job["batch_id"])
            except openai.NotFoundError:
                lost.append(job)
                continue
            job["status"] = b.status
            job["output_file_id"], job["error_file_id"] = b.output_file_id, b.error_file_id
            rc = b.request_counts
            job["counts"] = {"total": rc.total, "completed": rc.completed, "failed": rc.failed} if rc else None
            if b.errors and b.errors.data:
                job["errors"] = [f"line {e.line}: {e.code}: {e.message}" for e in b.errors.data]
            out[name] = b
        if lost:
            raise self._forgotten(lost)
        self._save()
        return out

    def wait(self, every_s: float = 60, max_wait_s: float | None = None) -> dict[str, object]:
        """Poll until every batch has ended (completed, failed, expired,
        cancelled) or ``max_wait_s`` has passed."""
        t0 = time.monotonic()
        while True:
            batches = self.refresh()
            if all(b.status in TERMINAL for b in batches.values()):
                return batches
            if max_wait_s is not None and time.monotonic() - t0 > max_wait_s:
                return batches
            self.sleep(every_s)

    def download(self) -> list[Path]:
        """The output and error files of every ended batch, under results/
        (files the server no longer has: :class:`BatchError` saying to
        submit their batch again, after writing the others)."""
        import openai

        got, lost = [], []
        res = self.folder / "results"
        res.mkdir(exist_ok=True)
        for name, job in self._mine().items():
            for which in ("output", "error"):
                fid = job.get(f"{which}_file_id")
                if not fid:
                    continue
                path = res / f"{Path(job.get('file', name)).stem}.{job['batch_id']}.{which}.jsonl"
                try:
                    path.write_bytes(self.client.files.content(fid).read())
                except openai.NotFoundError:
                    lost.append(job)
                    break
                got.append(path)
        if lost:
            raise self._forgotten(lost)
        return got

    def cancel(self) -> list[str]:
        """Cancel every batch of the folder that has not ended; the ids. A batch the server no
        longer knows: :class:`BatchError` (after cancelling the others), its job marked pending."""
        import openai

        out, lost = [], []
        for job in self._mine().values():
            if job.get("status") not in TERMINAL and job.get("status") not in RESEND:
                try:
                    job["status"] = self.client.batches.cancel(job["batch_id"]).status
                except openai.NotFoundError:
                    lost.append(job)
                    continue
                out.append(job["batch_id"])
        self._save()
        if lost:
            raise self._forgotten(lost, "cancel")
        return out

    def summary(self) -> str:
        """One line per job of this endpoint (file, batch id, status, request counts), each
        error it reported indented under it."""
        lines = []
        for name, j in self._mine().items():
            lines.append(f"{j.get('file', Path(name).name)}: {j['batch_id']} {j.get('status')} {j.get('counts') or ''}")
            lines += [f"  {e}" for e in j.get("errors", [])]
        return "\n".join(lines)


def probe(base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY") -> tuple[bool, str]:
    """Whether the endpoint answers ``GET /v1/batches`` (True, words) or not."""
    try:
        _client(base_url, api_key_env, timeout_s=15).batches.list(limit=1)
        return True, "the endpoint answers /v1/batches"
    except Exception as e:  # noqa: BLE001 - any failure means: no Batch API here
        return False, f"no Batch API: {type(e).__name__}: {str(e)[:200]}"


VENDORS = {"openai": None, "anthropic": "batch_anthropic.AnthropicBatch", "gemini": "batch_gemini.GeminiBatch"}


def vendor_api(vendor: str):
    """The class that runs ``vendor``'s batch lifecycle on a batch folder
    (each with submit, refresh, wait, download, cancel, summary)."""
    if VENDORS[vendor] is None:
        return lambda folder, base_url=None, key_env=None: BatchAPI(folder, base_url, key_env or "OPENAI_API_KEY")
    import importlib

    module, cls = VENDORS[vendor].split(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.engines.batch_api``: ``submit``, ``wait``,
    ``status``, ``download`` or ``cancel`` a batch folder's jobs at the chosen vendor, or
    ``probe`` an endpoint; a batch error is reported on stderr."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.engines.batch_api", description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["submit", "wait", "download", "cancel", "status", "probe"])
    ap.add_argument("--out", type=Path, help="the batch folder written by python -m medaudit.engines.batch export")
    ap.add_argument("--base-url", default=None, help="default: the OpenAI API")
    ap.add_argument("--api-key-env", default=None, help="default: OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY")
    ap.add_argument("--vendor", choices=sorted(VENDORS), default="openai",
                    help="whose batch API: the OpenAI one (and servers that copy it), Anthropic's Message Batches "
                         "(medaudit.engines.batch_anthropic) or Gemini's batch mode (medaudit.engines.batch_gemini)")
    ap.add_argument("--every", type=float, default=60, help="seconds between polls (wait)")
    ap.add_argument("--max-wait", type=float, default=None, help="stop polling after this many seconds")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "probe":
            ok, why = probe(args.base_url, args.api_key_env or "OPENAI_API_KEY")
            print(why)
            return 0 if ok else 1
        if args.out is None:
            raise BatchError(f"{args.cmd} needs --out")
        api = vendor_api(args.vendor)(args.out, args.base_url, args.api_key_env or None)
        if args.cmd == "submit":
            print("\n".join(api.submit()))
            for note in api.notes:
                print(f"medaudit.engines.batch_api: {note}", file=sys.stderr)
        elif args.cmd == "wait":
            api.wait(args.every, args.max_wait)
        elif args.cmd == "status":
            api.refresh()
        elif args.cmd == "download":
            print("\n".join(map(str, api.download())))
        elif args.cmd == "cancel":
            print("\n".join(api.cancel()))
        if args.cmd in ("wait", "status", "submit"):
            print(api.summary())
    except BatchError as e:
        print(f"medaudit.engines.batch_api: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
