"""Every format of a table keeps the sign and precision
the CSV has, and a significance mark computed on a handful of items says so
(n beside it)."""
from __future__ import annotations

import pandas as pd
import pytest

from medaudit.report import tables


@pytest.fixture()
def tmp_root(tmp_path, monkeypatch):
    (tmp_path / "params").mkdir()
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    return tmp_path


def _res(n_items: int = 3) -> pd.DataFrame:
    """Paired results shaped like stats.paired_bootstrap + adjust_pvalues:
    the issue's example row "-12.5 | 0 | 12.5" (no cell significant) and a
    second model whose +homo drop is significant on ``n_items`` items."""
    rows = []
    for model, deltas, ps in (("m1", (-0.125, 0.0, 0.125), (0.5, 1.0, 0.5)),
                              ("m2", (-0.125, 0.0, -0.5), (0.5, 1.0, 0.01))):
        for cond, d, p in zip(("+hetero", "+Cat", "+homo"), deltas, ps):
            rows.append({"model": model, "cond_a": "base", "cond_b": cond, "metric": "accuracy",
                         "value_a": 0.5, "value_b": 0.5 + d, "delta": d, "rel_delta": d / 0.5,
                         "n_items": n_items, "p": p, "p_holm": min(1.0, 3 * p), "mde": 0.7})
    return pd.DataFrame(rows)


def test_markdown_delta_table_keeps_sign_and_decimals(tmp_root):
    """Today's Markdown reads "-12.5 | 0 | 12.5" for the unstarred cells:
    tabulate re-parses "+12.50" as a number."""
    t = tables.delta_table(_res(n_items=8), "accuracy")
    tables.save_delta_table(t, "d", "p", caption="Accuracy")
    md = (tmp_root / "outputs" / "p" / "tables" / "d.md").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith("| m1"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["m1", "50.00", "-12.50", "+0.00", "+12.50"]
    tex = (tmp_root / "outputs" / "p" / "tables" / "d.tex").read_text(encoding="utf-8")
    assert "+12.50" in tex and "+0.00" in tex


def test_a_star_on_a_few_items_shows_n(tmp_root):
    t = tables.delta_table(_res(n_items=8), "accuracy")
    assert t["text"].loc["m2", "+homo"] == "-50.00*† (n=8, MDE 70.00)"
    assert t["text"].loc["m1", "+homo"] == "+12.50"                  # no star, no n
    big = tables.delta_table(_res(n_items=500), "accuracy")
    assert big["text"].loc["m2", "+homo"] == "-50.00*†"
    tables.save_delta_table(t, "d", "p", caption="Accuracy")
    folder = tmp_root / "outputs" / "p" / "tables"
    assert "-50.00*† (n=8, MDE 70.00)" in (folder / "d.md").read_text(encoding="utf-8")
    assert "n +homo" in (folder / "d.csv").read_text(encoding="utf-8")        # the CSV carries n too
    assert "mde +homo" in (folder / "d.csv").read_text(encoding="utf-8")      # ... and the MDE


def test_below_eight_items_no_mark_and_the_cell_says_so(tmp_root):
    """'-50.00*† (n=3, MDE 70.00)' was a star on three questions, where no test holds its
    level (the bootstrap's rejected a true null 25 % of the time); now no mark, and the reason."""
    t = tables.delta_table(_res(n_items=3), "accuracy")
    assert t["text"].loc["m2", "+homo"] == "-50.00 (n=3, too few to tell)"
    assert t["text"].loc["m1", "+hetero"] == "-12.50 (n=3, too few to tell)"


def test_save_table_markdown_and_latex_keep_the_csv_cells(tmp_root):
    """A plain table: Markdown and LaTeX show each cell as the CSV writes it
    (today tabulate prints 0.0 as 0, drops the + of "+0.50" and rounds
    0.123456789 to 0.123457)."""
    df = pd.DataFrame({"condition": ["+hetero", "+homo"], "delta": ["+0.50", "-12.5"],
                       "value": [0.0, 0.123456789], "n": [3, 4]})
    tables.save_table(df, "plain", "p", caption="Plain")
    folder = tmp_root / "outputs" / "p" / "tables"
    csv = pd.read_csv(folder / "plain.csv", dtype=str, keep_default_na=False)
    md = (folder / "plain.md").read_text(encoding="utf-8")
    tex = (folder / "plain.tex").read_text(encoding="utf-8")
    for cell in csv.to_numpy().ravel():
        assert f" {cell} " in md, cell
        assert cell.replace("_", "\\_") in tex, cell
    assert " 0.0 |" in md and "+0.50" in md and "0.123456789" in md


def test_a_table_without_columns_is_saved_empty(tmp_root):
    """to_csv writes one empty line for a frame without columns, which
    read_csv cannot read back: the Markdown and LaTeX copies must not fail."""
    tables.save_table(pd.DataFrame(), "empty", "p", caption="Nothing")
    folder = tmp_root / "outputs" / "p" / "tables"
    assert (folder / "empty.md").read_text(encoding="utf-8").startswith("Nothing")
    assert (folder / "empty.tex").is_file()


def test_the_shaded_html_keeps_the_markdown_cells_and_one_caption(tmp_root):
    """The report shows 04's tables from their shaded HTML: each cell as the
    Markdown has it (its "(n=3, too few to tell)" note and, in a relative
    table, its % sign), and no caption of its own (the report prints the
    caption above the table; a second one inside read it twice)."""
    folder = tmp_root / "outputs" / "p" / "tables"
    for relative in (False, True):
        t = tables.delta_table(_res(n_items=3), "accuracy", relative=relative)
        tables.save_delta_table(t, "d", "p", caption="Accuracy of the cues")
        html = (folder / "d.html").read_text(encoding="utf-8")
        md = (folder / "d.md").read_text(encoding="utf-8")
        notes = md.count(f"({'n=3'}, too few to tell)")
        assert notes == 6 and html.count("(n=3, too few to tell)") == notes
        for cell in t["text"].to_numpy().ravel():
            assert f">{cell}</td>" in html, cell
        assert ("%" in html) == relative
        assert "Accuracy of the cues" not in html and "<caption" not in html
    big = tables.delta_table(_res(n_items=500), "accuracy")
    tables.save_delta_table(big, "d", "p", caption="Accuracy")
    html = (folder / "d.html").read_text(encoding="utf-8")
    assert html.count("background-color: #ffcdd2") == 1          # m2's significant drop still shaded red
