"""Derived files are replaced atomically: a reader running alongside a writer
sees the old file or the new one, never an empty or partial one; a write that
fails leaves the old file as it was and no temporary file behind."""
from __future__ import annotations

import os
import threading

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from medaudit import atomic
from medaudit.prep import data
from medaudit.report import plots, tables


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    (tmp_path / "params").mkdir()
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    return tmp_path.resolve()


def _leftovers(folder):
    """Files in ``folder`` that are not the outputs themselves (temporaries)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or ".tmp" in p.name)


def _big_frames(rows: int = 4_000, note_chars: int = 0):
    """Two frames of ``rows`` rows that differ in every row; ``note_chars``
    adds a text column that long (bytes without cells: save_table renders
    every cell into Markdown and LaTeX too, ~0.5 ms a cell)."""
    rng = np.random.default_rng(0)
    a = pd.DataFrame({"model": rng.choice(["qwen-1.5b", "qwen-0.5b", "smollm2"], rows),
                      "condition": rng.choice(["base", "+homo", "+hetero"], rows),
                      "x": rng.random(rows), "y": rng.integers(0, 10**9, rows)})
    if note_chars:
        a["note"] = ["".join(rng.choice(list("abcdefgh "), note_chars)) for _ in range(rows)]
    b = a.assign(x=a["x"] + 1.0, model=a["model"].str.upper())
    return a, b


def _race(path, write, expected: set[bytes], rewrites: int = 50):
    """Rewrite ``path`` ``rewrites`` times with ``write(i)`` while a reader thread
    reads it in a loop; return (reads, bad reads) where a bad read is one whose
    bytes are neither of ``expected`` (empty, partial or missing)."""
    stop = threading.Event()
    reads, bad = [0], []

    def reader():
        while not stop.is_set():
            try:
                got = path.read_bytes()
            except FileNotFoundError:
                got = None
            reads[0] += 1
            if got not in expected:
                bad.append(-1 if got is None else len(got))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        for i in range(rewrites):
            write(i)
    finally:
        stop.set()
        t.join(10)
    return reads[0], bad


def test_reader_never_sees_a_partial_table_csv(tmp_root):
    """A reader alongside 50 rewrites of a ~180 kB table CSV only ever reads a
    complete file (the old code truncated it in place: empty and partial reads)."""
    a, b = _big_frames(400, note_chars=400)
    folder = tmp_root / "outputs" / "race" / "tables"
    csv = folder / "big.csv"
    expected = set()
    for df in (b, a):                                # the final state before the race: a
        tables.save_table(df, "big", "race", caption="A big table")
        expected.add(csv.read_bytes())
    assert len(expected) == 2 and min(map(len, expected)) > 150_000
    reads, bad = _race(csv, lambda i: tables.save_table((a, b)[i % 2], "big", "race", caption="A big table"),
                       expected)
    assert reads >= 50, f"the reader only read {reads} times"
    assert not bad, f"{len(bad)} of {reads} reads saw a partial/empty/missing file (sizes {bad[:10]})"
    assert _leftovers(folder) == []


def test_reader_never_sees_a_partial_jsonl_frame(tmp_root):
    a, b = _big_frames(20_000)
    p = data.save_frame(a, "race", "frame")
    expected = {p.read_bytes()}
    data.save_frame(b, "race", "frame")
    expected.add(p.read_bytes())
    reads, bad = _race(p, lambda i: data.save_frame((a, b)[i % 2], "race", "frame"), expected)
    assert not bad, f"{len(bad)} of {reads} reads saw a partial/empty/missing file"
    pd.testing.assert_frame_equal(data.load_frame("race", "frame"), b if 49 % 2 else a, check_dtype=False)
    assert _leftovers(p.parent) == []


class _Boom:
    """A cell that cannot be rendered: str() raises (mid-way through to_csv)."""

    def __str__(self):
        raise RuntimeError("cannot render this cell")

    __repr__ = __format__ = lambda self, *a: str(self)


def test_failed_table_write_keeps_the_old_files(tmp_root):
    old = pd.DataFrame({"condition": ["base", "+homo"] * 500, "n": range(1000)})
    tables.save_table(old, "t", "p", caption="Old")
    folder = tmp_root / "outputs" / "p" / "tables"
    before = {p.name: p.read_bytes() for p in tables.table_paths("t", "p")}
    bad = pd.DataFrame({"condition": ["x"] * 999 + [_Boom()], "n": range(1000)})
    with pytest.raises(RuntimeError, match="cannot render"):
        tables.save_table(bad, "t", "p", caption="New")
    assert {p.name: p.read_bytes() for p in tables.table_paths("t", "p")} == before
    assert _leftovers(folder) == []


def test_failed_latex_keeps_every_old_format(tmp_root, monkeypatch):
    """An exception while rendering the last format (LaTeX) leaves the old CSV,
    Markdown and LaTeX as they were (a table's formats are replaced together)
    and no temporary file of any format behind."""
    tables.save_table(pd.DataFrame({"x": [1, 2]}), "t", "p", caption="Old")
    folder = tmp_root / "outputs" / "p" / "tables"
    before = {p.name: p.read_bytes() for p in tables.table_paths("t", "p")}

    def boom(self, *a, **k):
        raise RuntimeError("latex renderer failed")

    monkeypatch.setattr(pd.DataFrame, "to_latex", boom)
    with pytest.raises(RuntimeError, match="latex renderer failed"):
        tables.save_table(pd.DataFrame({"x": [3, 4]}), "t", "p", caption="New")
    assert {p.name: p.read_bytes() for p in tables.table_paths("t", "p")} == before
    assert _leftovers(folder) == []


def test_delta_table_formats_are_atomic(tmp_root, monkeypatch):
    """save_delta_table writes CSV, Markdown, LaTeX and HTML; a failure while
    rendering the HTML (the last format) leaves all four old files and no temporaries."""
    idx = pd.Index(["m1", "m2"], name="model")
    t = {"values": pd.DataFrame({"Base": [50.0, 60.0], "+homo": [1.0, -2.0]}, index=idx),
         "p": pd.DataFrame({"+homo": [0.01, 0.5]}, index=idx),
         "p_holm": pd.DataFrame({"+homo": [0.02, 0.5]}, index=idx),
         "text": pd.DataFrame({"Base": ["50.00", "60.00"], "+homo": ["+1.00*†", "-2.00"]}, index=idx)}
    tables.save_delta_table(t, "d", "p", caption="Deltas")
    folder = tmp_root / "outputs" / "p" / "tables"
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["d.csv", "d.html", "d.md", "d.tex"]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert b"background-color" in before["d.html"]

    def boom(self, *a, **k):
        raise RuntimeError("html renderer failed")

    monkeypatch.setattr(pd.io.formats.style.Styler, "to_html", boom)
    with pytest.raises(RuntimeError, match="html renderer failed"):
        tables.save_delta_table(t, "d", "p", caption="Deltas again")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before   # all four formats, not only the HTML
    assert _leftovers(folder) == []


class _PdfBreaks(matplotlib.artist.Artist):
    """Draws nothing on screen/PNG; raises when drawn for the PDF (after the
    PNG has been written, while the PDF file is being written)."""

    def draw(self, renderer):
        if type(getattr(renderer, "_renderer", renderer)).__name__ == "RendererPdf":
            raise RuntimeError("cannot draw the PDF")


def test_failed_figure_keeps_the_old_png_pdf_and_caption(tmp_root):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = plots.save(fig, "f", "p", caption="Old caption")
    folder = tmp_root / "outputs" / "p" / "figures"
    assert png == "outputs/p/figures/f.png" and (tmp_root / png).exists()   # the same on every checkout
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(before) == ["f.md", "f.pdf", "f.png"] and before["f.png"].startswith(b"\x89PNG")
    assert before["f.pdf"].startswith(b"%PDF") and before["f.md"] == b"Old caption\n"

    fig2, ax2 = plt.subplots()
    ax2.plot([0, 1], [0, 1], color="red")
    ax2.add_artist(_PdfBreaks())
    with pytest.raises(RuntimeError, match="cannot draw the PDF"):
        plots.save(fig2, "f", "p", caption="New caption")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not plt.fignum_exists(fig2.number)           # closed even when saving failed

    fig3, ax3 = plt.subplots()
    ax3.plot([0, 1], [0, 1], color="red")
    plots.save(fig3, "f", "p", caption="New caption")
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(after) == sorted(before) and after["f.md"] == b"New caption\n"
    assert after["f.png"] != before["f.png"]


def test_atomic_path_success_and_failure(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    with pytest.raises(ValueError):
        with atomic.atomic_path(target) as tmp:
            assert tmp.parent == tmp_path and tmp.suffix == ".txt" and tmp.name.startswith(".")
            tmp.write_text("half")
            raise ValueError("interrupted")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic.atomic_path(target) as tmp:
        tmp.write_text("new\n")
        assert target.read_text() == "old\n"          # not visible before the rename
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_write_text_bytes_and_open(tmp_path):
    p = atomic.write_text(tmp_path / "a.md", "héllo\n")
    assert p.read_text(encoding="utf-8") == "héllo\n"
    umask = os.umask(0o022)
    os.umask(umask)
    assert (p.stat().st_mode & 0o777) == 0o666 & ~umask   # the usual mode of a new file, not mkstemp's 0600
    atomic.write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    with atomic.atomic_open(tmp_path / "c.jsonl") as f:
        f.write('{"a": 1}\n')
    assert (tmp_path / "c.jsonl").read_text() == '{"a": 1}\n'
    with pytest.raises(ValueError):
        with atomic.atomic_open(tmp_path / "c.jsonl", "a"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "b.bin", "c.jsonl"]
