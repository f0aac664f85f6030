"""Every saved table and figure is shown where it is made, under a caption
naming it as the paper does, with its N."""
from __future__ import annotations

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from medaudit.report import exhibits
from support.sandbox import compendium_root


@pytest.mark.parametrize("name, kind, expected", [
    ("07_table4_flips", "table", "Table IV (seed 003)"),
    ("07_table5_harmful_flips", "table", "Table V (seed 003)"),
    ("04_table1_A", "table", "Table 1A (seed 000)"),
    ("04_table5_psychiatry", "table", "Table 5 (seed 000)"),
    ("05_table2_A", "table", "Table 2 (seed 000), panel A"),
    ("04_table5_psychiatry_B", "table", "Table 5 (seed 000), panel B"),
    ("04_table4_AUROC", "table", "Table 4A (seed 000)"),
    ("04_table4_ECE", "table", "Table 4B (seed 000)"),
    ("06_incidence_mts_dialog_gender", "table", "Table 4 (seed 002)"),
    ("08_table3_pairs", "table", "Table 3 (FairMedQA, seeds 001/004)"),
    ("08_fig7_answer_distribution", "figure", "Fig. 7 (FairMedQA, seeds 001/004)"),
    ("08_fig3_accuracy", "table", "Fig. 3 (FairMedQA, seeds 001/004), its numbers"),
    ("07_forest_idctx", "figure", "Fig. 5 (seed 003)"),
    ("07_variant_checks", "table", "Table 07_variant_checks"),
    ("01_dialog_turns", "figure", "Figure 01_dialog_turns"),
])
def test_labels_name_tables_and_figures_as_the_papers_do(name, kind, expected):
    assert exhibits.label(name, kind) == expected


def test_paper_tables_come_first_in_the_papers_order():
    names = ["07_variant_checks", "07_table4_flips", "07_forest_idctx", "07_table1_accuracy", "07_accuracy_ci",
             "07_table5_harmful_flips", "07_table2_accuracy"]
    assert sorted(names, key=exhibits.order_key) == [
        "07_table1_accuracy", "07_table2_accuracy", "07_table4_flips", "07_table5_harmful_flips",
        "07_accuracy_ci", "07_forest_idctx", "07_variant_checks"]


def test_n_is_read_from_the_table():
    assert exhibits.n_text(pd.DataFrame({"model": ["a", "b"], "n": [12, 12]})) == "N = 12 (column n)"
    assert exhibits.n_text(pd.DataFrame({"questions": [3, 50]})) == "N = 3–50 per row (column questions)"
    assert exhibits.n_text(pd.DataFrame({"x": [1, 2, 3]})) == "N = 3 rows"
    assert exhibits.n_text(pd.DataFrame({"x": []})) == "N = 0: no rows in this run"
    assert exhibits.n_text(pd.DataFrame({"x": [1]}), n="N = 147 questions") == "N = 147 questions"


CELLS = [
    'profile = "smoke"\n'
    "import matplotlib.pyplot as plt\nimport pandas as pd\nfrom medaudit.report import plots, tables",
    'tables.save_table(pd.DataFrame({"model": ["a"], "flip": [1.5], "n": [147]}), "07_table4_flips", profile,\n'
    '                  caption="Flip rates (%)")',
    'display(tables.save_table(pd.DataFrame({"x": [1, 2]}), "07_variant_checks", profile, caption="Checks"))',
    't = tables.save_table(pd.DataFrame({"x": [3]}), "07_other", profile, caption="Other")',
    "t",
    'tables.save_table(pd.DataFrame({"x": []}), "08_table2_versions", profile, caption="Versions");',
    'fig, ax = plt.subplots()\nax.plot([0, 1], [0, 1])\n'
    'plots.save(fig, "08_fig7_answer_distribution", profile, caption="Answer distribution")',
]


def _kinds(cell) -> list[str]:
    out = []
    for o in cell.outputs:
        data = o.get("data", {})
        out.append("png" if "image/png" in data else "md" if "text/markdown" in data
                   else "table" if "text/html" in data else o.get("output_type"))
    return out


@pytest.mark.parametrize("history", [True, False], ids=["papermill", "nbval"])
def test_a_notebook_shows_each_saved_table_once_with_its_caption_and_each_figure(tmp_path, monkeypatch, history):
    """``history=False`` runs the cells as nbval does (no history: the
    execution count does not advance, so it cannot tell cells apart)."""
    for k, v in compendium_root(tmp_path).items():
        monkeypatch.setenv(k, v)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i, store_history=history)
    cells = nb.cells
    errors = [o for c in cells for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    assert _kinds(cells[1]) == ["md", "table"]
    caption = cells[1].outputs[0]["data"]["text/markdown"]
    assert caption.startswith("**Table IV (seed 003)** — Flip rates (%)")
    assert "N = 147 (column n)" in caption and "outputs/smoke/tables/07_table4_flips.csv" in caption
    assert _kinds(cells[2]) == ["md", "table"]              # display(save_table(...)): shown once
    assert _kinds(cells[3]) == ["md", "table"]
    assert _kinds(cells[4]) == ["table"]                    # the saved frame, shown again in a later cell
    assert _kinds(cells[5]) == ["md", "md"]                 # an empty table says so
    assert "no rows in this run" in cells[5].outputs[1]["data"]["text/markdown"]
    kinds = _kinds(cells[6])
    assert kinds[:2] == ["png", "md"], kinds                # the figure, then its caption
    assert cells[6].outputs[1]["data"]["text/markdown"].startswith("**Fig. 7 (FairMedQA, seeds 001/004)**")
    saved = tmp_path / "outputs" / "smoke" / "figures" / "08_fig7_answer_distribution.png"
    import base64
    assert base64.b64decode(cells[6].outputs[0]["data"]["image/png"]) == saved.read_bytes()


def test_tables_show_culture_labels_and_keep_the_ids():
    """Culture ids ("southeast_asian", "indigenous_canadian:id+ctx") are shown
    in cultures.yaml's words in the tables a notebook shows; the frame (and so
    its CSV) keeps the ids."""
    from medaudit.studies import cultural
    from medaudit.report import exhibits

    df = pd.DataFrame({"model": ["m", "m"], "culture": ["southeast_asian", "indigenous_canadian"],
                       "condition": ["southeast_asian:id", "indigenous_canadian:id+ctx"], "n": [3, 4]})
    try:
        exhibits.display_labels(cultural.load_config().display_labels())
        shown = exhibits.relabelled(df)
    finally:
        exhibits.display_labels({})
    assert list(shown["culture"]) == ["Southeast Asian", "Indigenous Canadian"]
    assert list(shown["condition"]) == ["Southeast Asian Id", "Indigenous Canadian Id+Ctx"]
    assert list(shown["model"]) == ["m", "m"] and list(shown["n"]) == [3, 4]
    assert list(df["culture"]) == ["southeast_asian", "indigenous_canadian"]       # the table itself keeps the ids
    assert exhibits.relabelled(df) is df                                             # nothing set: shown as it is
