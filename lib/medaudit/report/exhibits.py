"""What a saved table or figure is, and showing it where it is made.

Every table (:func:`medaudit.report.tables.save_table`) and figure
(:func:`medaudit.report.plots.save`) a notebook saves is also shown in the notebook,
at the cell that made it, under a caption that
names it as the paper does ("Table IV", "Fig. 7"; :func:`label`), says what
it shows and gives its N (:func:`n_text`). Outside a notebook kernel (a
script, a test) nothing is shown.

The papers' names come from the file stems: ``NN_tableK…`` is Table K of the
study notebook NN reproduces (seed 003, notebook 07, numbers its tables in
Roman numerals as the paper does), ``NN_figK…`` is its Fig. K, and the
tables and figures whose stems carry no number are listed in :data:`TABLES`
and :data:`FIGURES`. A table
of ours that the paper does not have is named by its file stem.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

# the study (seed) each notebook reproduces, as its captions name it
STUDIES = {"03": "seed 000", "04": "seed 000", "05": "seed 000", "06": "seed 002", "07": "seed 003",
           "08": "FairMedQA, seeds 001/004"}
ROMAN = {"07"}                                   # seed 003 (IEEE style): Table I … V
# figures whose stems carry no number: stem → the paper's figure number (the docstrings of the plot functions)
FIGURES = {"07_accuracy_ci": "3", "07_components": "4", "07_forest_idctx": "5",
           "08_accuracy": "3", "08_cfr_ad": "4", "08_trigger_rates": "5"}
# tables whose stems carry no number: stem → the paper's table number (params/published.yaml's `what`)
# (and seed 000's Table 4, whose parts our stems name by metric: 4A is AUROC, 4B is ECE, seed 000 Appendix)
TABLES = {"06_incidence_mts_dialog_race": "2", "06_incidence_mts_dialog_gender": "4",
          "04_table4_AUROC": "4A", "04_table4_ECE": "4B"}
# columns that carry a table's N, most specific first
N_COLUMNS = ("n", "N", "n_items", "questions", "items", "vignettes", "dialogs", "pairs", "variants", "notes",
             "verdicts", "answers", "responses")

_TABLE = re.compile(r"^(\d\d)_table(\d+)")
_FIG = re.compile(r"^(\d\d)_fig(\d+)")
_PANEL = re.compile(r"_([A-Z])$")
# tables the paper itself splits into lettered parts (seed 000: Table 1A–1C, 4A–4B); elsewhere a letter
# ending our stem is a panel of ours (one metric per file), named as such
PAPER_PARTS = {("04", "1"), ("04", "4")}


def _roman(k: int) -> str:
    out = ""
    for value, digits in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while k >= value:
            out, k = out + digits, k - value
    return out


def paper_number(name: str) -> tuple[str, str] | None:
    """("Table", "IV") or ("Fig.", "7") where the saved ``name`` is one of
    the paper's own tables or figures ("1A" for the paper's lettered
    parts), else None."""
    if name in TABLES:
        return "Table", TABLES[name]
    m = _TABLE.match(name)
    if m:
        nb, k = m.groups()
        panel = _PANEL.search(name)
        part = panel.group(1) if panel and (nb, k) in PAPER_PARTS else ""
        return "Table", (_roman(int(k)) if nb in ROMAN else k) + part
    m = _FIG.match(name)
    if m:
        return "Fig.", m.group(2)
    if name in FIGURES:
        return "Fig.", FIGURES[name]
    return None


def label(name: str, kind: str = "table") -> str:
    """How a caption names a saved table or figure: "Table IV (seed 003)"
    for the paper's own ("Table 7 (seed 000), panel B" for one panel of
    ours of it), else "Table 07_variant_checks" (``kind`` "table" or
    "figure")."""
    paper = paper_number(name)
    if paper is None:
        return f"{'Table' if kind == 'table' else 'Figure'} {name}"
    study = STUDIES.get(name[:2])
    panel = _PANEL.search(name)
    out = f"{paper[0]} {paper[1]}" + (f" ({study})" if study else "")
    if kind == "table" and paper[0] == "Fig.":          # 08_fig3_accuracy: the numbers the paper draws
        out += ", its numbers"
    if panel and not paper[1].endswith(panel.group(1)):
        out += f", panel {panel.group(1)}"
    return out


def order_key(name: str) -> tuple:
    """Sort key within a notebook: the paper's tables by number, then its
    figures by number, then ours by name."""
    paper = paper_number(name)
    if paper is None:
        return (2, 0, "", name)
    kind, number = paper
    m = re.match(r"([IVX]+|\d+)(.*)", number)
    digits, rest = m.groups() if m else (number, "")
    value = int(digits) if digits.isdigit() else _unroman(digits)
    return (0 if kind == "Table" else 1, value, rest, name)


def _unroman(s: str) -> int:
    values = {"I": 1, "V": 5, "X": 10}
    total = 0
    for a, b in zip(s, s[1:] + " "):
        total += -values[a] if values.get(b, 0) > values[a] else values[a]
    return total


def n_text(df: pd.DataFrame, n: int | str | None = None) -> str:
    """The N a table rests on, in words: ``n`` when given (a number or a
    phrase), else the first N column present (:data:`N_COLUMNS`: "N = 147
    (column questions)", or its range "N = 3–50 per row (column n)"), else
    the number of rows."""
    if n is not None:
        return f"N = {n}" if not isinstance(n, str) else n
    if not len(df):
        return "N = 0: no rows in this run"
    for col in N_COLUMNS:
        if col in df.columns:
            v = pd.to_numeric(df[col], errors="coerce").dropna()
            if len(v):
                lo, hi = int(v.min()), int(v.max())
                return f"N = {lo} (column {col})" if lo == hi else f"N = {lo}–{hi} per row (column {col})"
    return f"N = {len(df)} row{'s' if len(df) != 1 else ''}"


def in_notebook() -> bool:
    """True inside a Jupyter kernel (papermill, nbval, JupyterLab)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def caption_markdown(name: str, caption: str, kind: str, n: str | None, saved: str) -> str:
    """An exhibit's caption as one Markdown line: its bold label (:func:`label`), the
    caption, its N where given, and the file it was saved as."""
    head = f"**{label(name, kind)}**"
    parts = [head + (f" — {caption.strip()}" if caption.strip() else "")]
    if n:
        parts.append(n)
    parts.append(f"saved as `{saved}`")
    return " · ".join(parts)


class Shown(pd.DataFrame):
    """A table already shown with its caption by the cell that saved it:
    displaying it again in that same cell (``display(save_table(...))``, or
    the call as the cell's last line) shows nothing more. Anything computed
    from it is a plain DataFrame, and in a later cell it shows as usual."""

    _metadata = ["_shown_in"]

    def _ipython_display_(self):
        from IPython.display import display

        here = _request_id()
        if here is not None and getattr(self, "_shown_in", None) == here:
            return
        display(relabelled(pd.DataFrame(self)))


def _request_id() -> str | None:
    """The id of the execute request (the cell run) this code runs in: a
    cell's identity that holds whatever the client (nbval runs cells
    without history, so the execution count does not advance there)."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    try:
        return (kernel.get_parent() or {}).get("header", {}).get("msg_id") or None
    except Exception:       # an old or unusual kernel: show rather than hide
        return None


_LABELS: dict[str, str] = {}     # id -> the words a reader meets, for the tables this kernel shows


def display_labels(labels: dict[str, str]) -> None:
    """Show every cell equal to a key of ``labels`` as its value in the tables
    this notebook shows from now on (e.g. ``"southeast_asian:id"`` → "Southeast
    Asian Id", :meth:`medaudit.studies.cultural.CulturalConfig.display_labels`). Display
    only: the CSV, Markdown and LaTeX files and the frames keep the ids."""
    _LABELS.clear()
    _LABELS.update(labels)


def relabel(df: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """A copy of ``df`` whose text cells that are keys of ``labels`` read as their values."""
    if not labels or not len(df):
        return df
    text = [c for c in df.columns if df[c].dtype == object or pd.api.types.is_string_dtype(df[c])]
    if not text or not all(isinstance(c, str) for c in text):
        return df
    return df.assign(**{c: df[c].map(lambda x: labels.get(x, x) if isinstance(x, str) else x) for c in text})


def relabelled(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` as shown: text cells that are ids of :func:`display_labels` in their labels."""
    return relabel(df, _LABELS)


def show_table(df: pd.DataFrame, name: str, caption: str, n: str | None, saved: str) -> pd.DataFrame:
    """In a notebook: the caption (label, caption, N, file) and the table
    (ids in their :func:`display_labels`); returns ``df`` as :class:`Shown`
    there (so it is not shown twice), else ``df`` itself."""
    if not in_notebook():
        return df
    from IPython.display import Markdown, display

    display(Markdown(caption_markdown(name, caption, "table", n, saved)))
    display(relabelled(df) if len(df) else Markdown("*(no rows in this run: the caption and the cells above say why)*"))
    out = Shown(df)
    object.__setattr__(out, "_shown_in", _request_id())
    return out


def show_figure(png: Path, name: str, caption: str, saved: str) -> None:
    """In a notebook: the saved PNG itself (what is shown is what was
    saved), then its caption."""
    if not in_notebook():
        return
    from IPython.display import Image, Markdown, display

    display(Image(data=Path(png).read_bytes(), format="png"))
    display(Markdown(caption_markdown(name, caption, "figure", None, saved)))


__all__ = ["FIGURES", "STUDIES", "TABLES", "Shown", "caption_markdown", "display_labels", "in_notebook", "label",
           "n_text", "order_key", "relabel", "relabelled",
           "paper_number", "show_figure", "show_table"]
