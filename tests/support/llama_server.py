"""A real OpenAI-compatible server on 127.0.0.1: llama.cpp's own
(``python -m llama_cpp.server``, through fresh_llama_server.py: every request
is evaluated from an empty context) on a local GGUF, started for a test and
stopped after it. Used by conftest's session server and by the tests that
need servers of their own (two servers whose models share a name)."""
from __future__ import annotations

import http.client
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from support.fault_proxy import free_port
from support.threads import per_worker


def _status(port: int, path: str, timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


@contextmanager
def llama_server(model_path: str | Path, logfile: Path, *, alias: str | None = None, n_ctx: int = 2048,
                 n_threads: int | None = None, ready_s: float = 120):
    """Base URL (…/v1) of a running server; it answered ``/v1/models``
    before this yields. Raises AssertionError with the server's log when it
    exits or does not answer within ``ready_s``."""
    port = free_port()
    args = [sys.executable, str(Path(__file__).with_name("fresh_llama_server.py")),
            "--model", str(model_path), "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(n_threads or per_worker())]
    if alias:
        args += ["--model_alias", alias]
    with open(logfile, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + ready_s
        while True:
            tail = lambda: Path(logfile).read_text(errors="replace")[-3000:]   # noqa: E731
            assert proc.poll() is None, f"llama_cpp.server exited ({proc.returncode}):\n{tail()}"
            try:
                if _status(port, "/v1/models") == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"llama_cpp.server did not answer within {ready_s} s:\n{tail()}"
            time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
