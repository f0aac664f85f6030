"""One true progress line per long stage: in a notebook one
output updated in place (a stderr bar became ~90 red chunks), on the
runner's console the kernel's line (papermill's cell bar sat at "4/20" for
8.5 minutes with a false ETA)."""
from __future__ import annotations

import io
import re
import time

import nbformat
from nbclient import NotebookClient

from medaudit import progress


def test_the_line_says_done_of_total_rate_elapsed_and_eta(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    p = progress.Progress(10, "qwen · mcq", "req", disable=True)
    assert p.line() == "qwen · mcq: 0/10 req · 00:00 elapsed · ETA estimating"
    now[0] = 130.0                 # the first answer after a 30 s model load: not part of the rate
    p.update()
    now[0] = 134.0
    p.update(2)                    # two more in 4 s: 0.5 req/s, but too few to tell how long the rest takes
    assert p.line() == "qwen · mcq: 3/10 req · 0.50 req/s · 00:34 elapsed · ETA estimating"
    now[0] = 142.0
    p.update(3)                    # five after the first, in 12 s: 7 left at 5/12 req/s, 9.6 s
    assert p.line() == "qwen · mcq: 6/10 req · 0.42 req/s · 00:42 elapsed · ETA 00:09"
    now[0] = 148.0
    p.update(4)
    assert p.line(final=True) == "qwen · mcq: 10/10 req · 0.50 req/s · 00:48 elapsed · done"
    slow = progress.Progress(100, "judge", "req", disable=True)
    slow.update()
    for _ in range(5):
        now[0] += 20
        slow.update()              # one every 20 s
    assert "20.0 s/req" in slow.line() and "ETA 31:20" in slow.line()


def test_a_log_shows_every_stage_done_even_when_the_next_starts_at_once(tmp_path, monkeypatch):
    """In a log (not a terminal) 05 printed "open: 0/12 req" and never "done":
    the next stage overwrote the line before the console looked again."""
    path = tmp_path / "progress.txt"
    monkeypatch.setenv(progress.PROGRESS_ENV, str(path))
    out = io.StringIO()
    end = progress.follow(path, "05_open_ended", stream=out, log_every_s=3600)
    for stage in ("open", "cluster", "judge"):     # three stages inside one poll
        with progress.bar(12, stage, "req") as p:
            p.update(12)
    end()
    lines = out.getvalue().splitlines()
    assert [x.split(" · ")[0] for x in lines] == ["05_open_ended: open: 12/12 req", "05_open_ended: cluster: 12/12 req",
                                                  "05_open_ended: judge: 12/12 req"], lines
    assert all(x.endswith("done") for x in lines)


def test_the_kernel_writes_its_line_for_the_console_and_the_console_shows_it(tmp_path, monkeypatch):
    path = tmp_path / "progress.txt"
    monkeypatch.setenv(progress.PROGRESS_ENV, str(path))
    with progress.bar(4, "agents · round 1", "req") as p:
        for _ in range(4):
            p.update()
    assert re.fullmatch(r"agents · round 1: 4/4 req · .* · done\n", path.read_text())
    out = io.StringIO()                # not a terminal: a line per stage, not a line per second
    end = progress.follow(path, "02_augmentation", stream=out, log_every_s=3600)
    time.sleep(2.5)
    end()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("02_augmentation: agents · round 1: 4/4 req")


def test_a_notebook_shows_one_updating_line_not_a_chunk_per_update(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.setattr(progress, "NOTEBOOK_EVERY_S", 0.0)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from medaudit import progress\nprogress.NOTEBOOK_EVERY_S = 0.0\n"
        "with progress.bar(60, 'subject · mcq', 'req') as p:\n"
        "    for _ in range(60):\n        p.update()")]
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = nb.cells[0].outputs
    assert [o["output_type"] for o in outs] == ["display_data"], outs
    text = outs[0]["data"]["text/plain"]
    assert text.startswith("subject · mcq: 60/60 req") and text.endswith("done")
