"""A real local Ray cluster for a test: ``ray start --head`` on 127.0.0.1
with ``cpus`` CPUs (Ray's worker slots) and a small object store, in a temp
dir of its own; stopped after by killing the processes whose command line
names that dir (and their children), never ``ray stop`` (which stops every
Ray on the machine)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from support.fault_proxy import free_port

RAY = Path(sys.executable).with_name("ray")


def _mine(tmp: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(tmp in a for a in (p.info["cmdline"] or [])):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def workers(tmp: str, name: str = "") -> list[psutil.Process]:
    """The cluster's worker processes (``ray::…`` titles; ``name`` in the title when given)."""
    procs = set()
    for p in _mine(tmp):
        try:
            procs |= set(p.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    out = []
    for p in procs:
        try:
            title = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if title.startswith("ray::") and name in title:
            out.append(p)
    return out


@contextmanager
def local_ray_cluster(cpus: int = 2, object_store_mb: int = 100, env: dict | None = None, ready_s: float = 300):
    """Yields (address, temp dir) of a running head node."""
    tmp = tempfile.mkdtemp(prefix="rayt-", dir="/tmp")       # short: Ray's socket paths must fit 107 bytes
    port = free_port()
    args = [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
            "--num-cpus", str(cpus), "--object-store-memory", str(object_store_mb * 1024 * 1024),
            "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", tmp]
    full_env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=ready_s, env=full_env)
        assert r.returncode == 0, f"ray start failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        yield f"127.0.0.1:{port}", tmp
    finally:
        procs = _mine(tmp)
        for p in procs:
            try:
                procs += p.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.5)
        shutil.rmtree(tmp, ignore_errors=True)
