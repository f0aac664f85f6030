"""Progress of a long stage (model requests, agent rounds, judges): one true line.

``bar(total, desc, unit)`` returns a :class:`Progress` with tqdm's
``update``, ``set_postfix`` and ``close``, whose line reads
"qwen-1.5b: 120/600 req · 1.31 req/s · 01:32 elapsed · ETA 06:06". Where it
shows:

* in a notebook kernel, as one output updated in place (an IPython display
  handle; a stderr bar became ~90 red stderr chunks in an executed notebook);
  the saved notebook keeps the last state;
* on the console of :mod:`medaudit.runner`, which runs the kernel: the line
  is written to the file named by ``MEDAUDIT_PROGRESS`` and the runner shows
  it (:func:`follow`), one updating line on a terminal, a line a minute in
  a log (papermill's cell bar showed "4/20 cells" with a false ETA for
  minutes);
* elsewhere (a script, a test), as a tqdm bar on stderr.

The rate and the ETA are from the items done so far in this stage (after
the first, so a model load does not count as per-item time); until
:data:`ETA_AFTER` items have returned after the first and
:data:`ETA_AFTER_S` seconds have passed, the line says "ETA estimating" (a
few early answers, K samples of one question sharing its cached prompt,
gave an ETA twelve times too short). Each finished stage's last line
("… · done", "… · stopped") is also appended to ``MEDAUDIT_PROGRESS``'s
``.log`` file, so the runner's console shows it even when the next stage
starts within the second it polls.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

PROGRESS_ENV = "MEDAUDIT_PROGRESS"
NOTEBOOK_EVERY_S = 1.0          # a notebook output is updated at most once a second
FILE_EVERY_S = 0.5
ETA_AFTER = 5                   # items returned after the first before an ETA is given
ETA_AFTER_S = 10.0              # and seconds since the first returned


def clock(seconds: float) -> str:
    """``seconds`` as ``MM:SS``, or ``H:MM:SS`` from an hour on."""
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Progress:
    """One stage's progress (see the module doc)."""

    def __init__(self, total: int, desc: str, unit: str = "req", disable: bool = False):
        self.total, self.desc, self.unit, self.disable = int(total), desc, unit, disable
        self.n = 0
        self.postfix: dict = {}
        self.t0 = time.monotonic()
        self.t_first: float | None = None
        self._shown = 0.0
        self._written = 0.0
        self._handle = None
        self._tqdm = None
        self._file = os.environ.get(PROGRESS_ENV)
        if disable:
            return
        if _in_kernel():
            from IPython.display import display

            self._handle = display(_Line(self.line()), display_id=True)
        elif not self._file:
            from tqdm import tqdm

            self._tqdm = tqdm(total=self.total, desc=desc, unit=unit, mininterval=1.0, dynamic_ncols=True)
        self._write(force=True)

    # tqdm's interface, as the backends use it
    def update(self, k: int = 1) -> None:
        """Count ``k`` more items done and refresh the line (the first item done starts the
        rate's clock)."""
        if self.n == 0 and k:
            self.t_first = time.monotonic()
        self.n += k
        if self.disable:
            return
        if self._tqdm is not None:
            self._tqdm.update(k)
        self._refresh()

    def set_postfix(self, refresh: bool = False, **kw) -> None:
        """Show ``kw`` as ``name value`` pairs at the end of the line."""
        self.postfix = kw
        if self._tqdm is not None:
            self._tqdm.set_postfix(refresh=refresh, **kw)

    def close(self) -> None:
        """Show the final line (done or stopped) and stop updating."""
        if self.disable:
            return
        if self._tqdm is not None:
            self._tqdm.close()
        self._refresh(final=True)
        self.disable = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # the line
    def rate(self) -> float | None:
        """Items per second, from the first item done on (None before two)."""
        if self.n < 2 or self.t_first is None:
            return None
        dt = time.monotonic() - self.t_first
        return (self.n - 1) / dt if dt > 0 else None

    def line(self, final: bool = False) -> str:
        """The progress line: done/total, rate, elapsed time, then "done" or "stopped" when
        final, else the ETA once the rate has settled, and the postfix."""
        elapsed = time.monotonic() - self.t0
        parts = [f"{self.desc}: {self.n}/{self.total} {self.unit}"]
        r = self.rate()
        if r:
            parts.append(f"{r:.2f} {self.unit}/s" if r >= 0.1 else f"{1 / r:.1f} s/{self.unit}")
        parts.append(f"{clock(elapsed)} elapsed")
        if final:
            parts.append("done" if self.n >= self.total else "stopped")
        elif self.total > self.n:
            settled = (r and self.n - 1 >= ETA_AFTER and self.t_first is not None
                       and time.monotonic() - self.t_first >= ETA_AFTER_S)
            parts.append(f"ETA {clock((self.total - self.n) / r)}" if settled else "ETA estimating")
        parts += [f"{k} {v}" for k, v in self.postfix.items() if v]
        return " · ".join(parts)

    def _refresh(self, final: bool = False) -> None:
        now = time.monotonic()
        if self._handle is not None and (final or now - self._shown >= NOTEBOOK_EVERY_S):
            self._handle.update(_Line(self.line(final)))
            self._shown = now
        self._write(final=final)

    def _write(self, force: bool = False, final: bool = False) -> None:
        now = time.monotonic()
        if not self._file or not (force or final or now - self._written >= FILE_EVERY_S):
            return
        self._written = now
        try:
            text = self.line(final) + "\n"
            tmp = f"{self._file}.{os.getpid()}.tmp"
            Path(tmp).write_text(text, encoding="utf-8")
            os.replace(tmp, self._file)
            if final:         # kept for the console, whatever stage overwrites the line next
                with open(f"{self._file}.log", "a", encoding="utf-8") as fh:
                    fh.write(text)
        except OSError:
            pass        # the console line is a courtesy: never fail a run over it


class _Line:
    """A plain-text output (no HTML, no stderr): one line."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def bar(total: int, desc: str, unit: str = "req", disable: bool = False) -> Progress:
    """A :class:`Progress` for ``total`` items of one stage."""
    return Progress(total, desc, unit, disable)


def follow(path: Path, name: str, stream=None, log_every_s: float = 60.0):
    """Show the progress line the kernel writes to ``path`` on ``stream``
    (stderr) until the returned function is called: on a terminal one line
    rewritten in place, prefixed with the notebook's ``name`` and its wall
    time; in a log a new line when the stage changes and at most every
    ``log_every_s``. Every stage's last line ("… · done") is shown in both,
    read from the ``.log`` file the kernel appends it to (on a terminal it
    stays above the running line). Calling the function ends (clears) the
    line, after showing any last line not yet shown."""
    stream = stream or sys.stderr
    stop = threading.Event()
    tty = hasattr(stream, "isatty") and stream.isatty()
    t0 = time.monotonic()
    finals = Path(f"{path}.log")

    def read(p: Path) -> str:
        try:
            return p.read_text(encoding="utf-8")
        except OSError:
            return ""

    def loop() -> None:
        last, last_stage, logged, done_at = "", "", 0.0, 0
        while True:
            stopping = stop.wait(1.0)
            text, done = read(path).strip(), read(finals).splitlines()
            now = time.monotonic()
            for line in done[done_at:]:             # the stages finished since the last look
                stream.write(("\r\x1b[K" if tty else "") + f"{name}: {line}\n")
                last_stage, logged = line.split(":", 1)[0], now
            done_at = max(done_at, len(done))
            if stopping:
                break
            if tty:
                stream.write(f"\r\x1b[K{name} · {clock(now - t0)}" + (f" · {text}" if text else ""))
            elif text and text != last and text not in done:
                stage = text.split(":", 1)[0]
                if stage != last_stage or now - logged >= log_every_s:
                    stream.write(f"{name}: {text}\n")
                    last_stage, logged = stage, now
            stream.flush()
            last = text
        if tty:
            stream.write("\r\x1b[K")
        stream.flush()

    thread = threading.Thread(target=loop, name="medaudit-progress", daemon=True)
    thread.start()

    def end() -> None:
        stop.set()
        thread.join(timeout=5)

    return end


__all__ = ["PROGRESS_ENV", "Progress", "bar", "clock", "follow"]
