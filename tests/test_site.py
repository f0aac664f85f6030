"""The report (medaudit.publish.site): built from a real executed notebook in a
sandbox, then opened in headless Chromium (Debian's chromium and
chromium-driver, installed by ``make setup``) so a broken page fails here."""
from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import papermill as pm
import pytest

from medaudit.publish import published, site

pytestmark = pytest.mark.slow     # builds the report site of the smoke outputs, about 30 s

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A compendium root of its own with notebook 01 executed by papermill
    (no model: real tables and a real figure), and its report."""
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(ROOT / "params", root / "params")
    (root / "data").mkdir()
    (root / "data" / "raw").symlink_to(ROOT / "data" / "raw")
    (root / "notebooks").mkdir()
    shutil.copy2(ROOT / "notebooks" / "01_data_prep.ipynb", root / "notebooks")
    shutil.copy2(ROOT / "notebooks" / "06_soap_audit.ipynb", root / "notebooks")   # not executed: listed missing
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDAUDIT_ROOT", str(root))
    try:      # undone however the set-up ends: a leaked MEDAUDIT_ROOT would point every later test here
        out = root / "outputs" / "web" / "notebooks" / "01_data_prep.ipynb"
        out.parent.mkdir(parents=True)
        pm.execute_notebook(str(root / "notebooks" / "01_data_prep.ipynb"), str(out),
                            parameters={"profile": "web"}, cwd=str(ROOT / "notebooks"), progress_bar=False)
        index = site.build("web")
        yield root, index
    finally:
        mp.undo()


def test_report_lists_every_table_and_figure_with_captions(built):
    root, index = built
    html = index.read_text(encoding="utf-8")
    tables = sorted(p.stem for p in (root / "outputs" / "web" / "tables").glob("01_*.csv"))
    figures = sorted(p.stem for p in (root / "outputs" / "web" / "figures").glob("01_*.png"))
    assert tables and figures == ["01_dialog_turns"]
    for name in tables:
        assert f'id="{name}"' in html
        caption = (root / "outputs" / "web" / "tables" / f"{name}.md").read_text().split("\n\n")[0]
        assert caption in html
    assert '<img src="figures/01_dialog_turns.png"' in html
    assert (index.parent / "figures" / "01_dialog_turns.png").exists()
    assert "Turns per dialog by dataset" in html
    # every item links to the rendered notebook, which exists
    assert html.count('href="notebooks/01_data_prep.html"') >= len(tables) + len(figures)
    assert "01 · Data preparation" in (index.parent / "notebooks" / "01_data_prep.html").read_text()
    assert "Not executed under this profile: 06_soap_audit" in html
    assert "Without a caption" not in html
    assert "Colophon" in html and "report built in (s)" in html
    # the notebook's own "What this run shows", where the README sends readers
    assert '<h3 id="findings01">What this run shows</h3>' in html
    assert re.search(r"<li>Of [0-9,]+ MedQA questions, [0-9,]+ are the main pool", html)
    assert '<a href="#01_selection_funnel"><code>01_selection_funnel</code></a>' in html


def test_published_page_pairs_every_study(built):
    root, index = built
    page = (index.parent / "published.html").read_text(encoding="utf-8")
    entries = published.load()
    assert len(entries) >= 6
    for e in entries:
        assert e["what"].split(":")[0] in html.unescape(page)      # an apostrophe is written &#39;
    assert page.count("not written under this profile") == len(entries)   # only 01 ran
    assert "55.58" in page and "Why they differ" in page


def test_published_entries_are_checked(tmp_path):
    bad = tmp_path / "published.yaml"
    bad.write_text("studies:\n  - {study: s, what: w, ours: t, notebook: n, key: model, columns: [a, b],\n"
                   "     published: {m: [1]}, differs: d}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(bad)) + r".*row 'm': 1 values for 2 columns"):
        published.load(bad)


def test_ours_keeps_the_published_rows_and_columns(built, tmp_path):
    root, _ = built
    t = root / "outputs" / "web" / "tables"
    pd.DataFrame({"model": ["a", "GPT-5.1"], "Base": [1.0, 2.0], "+homo": [3.0, 4.0], "p +homo": [0.5, 0.5]}) \
        .to_csv(t / "04_table1_A.csv", index=False)
    entry = next(e for e in published.load() if e["ours"] == "04_table1_A")
    ours = published.ours_frame(entry, "web")
    assert ours.to_dict("records") == [{"model": "GPT-5.1", "Base": 2.0, "+homo": 4.0}]
    (t / "04_table1_A.csv").unlink()


# --------------------------------------------------------------------------
# a real browser


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extras (make setup)")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, ("Chromium is not installed: `make setup` installs Debian's chromium and "
                                 "chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1280,1600"):
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))
    yield d
    d.quit()


def test_report_opens_in_chromium(built, browser):
    from selenium.webdriver.common.by import By

    root, index = built
    browser.get(index.as_uri())
    assert browser.title == "medaudit report (web)"
    h1 = browser.find_element(By.TAG_NAME, "h1")
    assert h1.is_displayed() and "identity" in h1.text
    h2 = [e.text for e in browser.find_elements(By.TAG_NAME, "h2")]
    assert "01 · Data preparation" in h2 and "Colophon" in h2
    img = browser.find_element(By.CSS_SELECTOR, "#\\30 1_dialog_turns img")
    browser.execute_script("arguments[0].scrollIntoView();", img)
    # the figure was fetched and decoded at its real size, and is on screen
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 300
    assert img.size["width"] > 300 and img.is_displayed()
    shot = root / "outputs" / "web" / "report" / "screenshot.png"
    assert browser.save_screenshot(str(shot))
    from PIL import Image

    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert rgb.std() > 10                      # not a blank page
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    orange = (r > 200) & (g > 120) & (g < 200) & (b < 150)     # the histogram's MTS-Dialog bars, painted
    assert orange.sum() > 2000
    # the rendered notebook opens too, and the published page links back
    browser.get((index.parent / "notebooks" / "01_data_prep.html").as_uri())
    assert "Data preparation" in browser.find_element(By.TAG_NAME, "h1").text
    browser.get((index.parent / "published.html").as_uri())
    assert browser.find_element(By.LINK_TEXT, "back to the report").is_displayed()


def test_every_counted_table_names_the_rules_it_was_counted_under(tmp_path):
    """The published-vs-ours page labels each table with the rule it
    used: the FairMedQA counting and McNemar test, seed 000's unparsed rule."""
    comps = {c.ours_name: c for c in published.compare("smoke")}
    assert comps["08_table3_pairs"].rules == {"fairmedqa_counting": "paper", "fairmedqa_unparsed": "drop",
                                              "fairmedqa_mcnemar": "exact"}
    assert comps["04_table1_A"].rules == {"unparsed_rule": "incorrect"}
    page = site._env().get_template("published.html.j2").render(profile="smoke", studies=list(comps.values()),
                                                                colophon={"git commit": "x"})
    assert "<code>fairmedqa_counting</code> = paper" in page and "<code>unparsed_rule</code> = incorrect" in page
    bad = tmp_path / "published.yaml"
    bad.write_text("studies:\n  - {study: s, what: w, ours: t, notebook: n, key: model, columns: [a],\n"
                   "     published: {m: [1]}, differs: d, rules: [unparsed_rul]}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"rules \['unparsed_rul'\] are not profile parameters"):
        published.load(bad)


def test_the_rules_shown_are_those_the_notebook_ran_with(tmp_path, monkeypatch):
    """A command-line override (make nb ARGS="-p fairmedqa_counting complete")
    is what the executed notebook recorded, and what the page shows."""
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    shutil.copytree(ROOT / "params", tmp_path / "params")
    nb = tmp_path / "outputs" / "smoke" / "notebooks" / "08_fairness_disparities.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text('{"cells": [], "metadata": {"papermill": {"parameters": {"fairmedqa_counting": "complete"}}}}')
    got = published.rules_used("smoke", "08_fairness_disparities", ["fairmedqa_counting", "fairmedqa_mcnemar"])
    assert got == {"fairmedqa_counting": "complete", "fairmedqa_mcnemar": "exact"}     # the second from the profile
    assert published.rules_used("nosuch", "08_fairness_disparities", ["fairmedqa_counting"]) == \
        {"fairmedqa_counting": "unknown"}


# --------------------------------------------------------------------------
# the report in the papers' order, under the papers' names, n/a not +nan, tables that fit


@pytest.fixture(scope="module")
def ordered(tmp_path_factory):
    """A report of notebook 07's tables as the notebook names them (an
    executed notebook of one markdown cell; the tables written by the
    library's own save functions, one with a missing value)."""
    from medaudit.report import tables

    root = tmp_path_factory.mktemp("ordered")
    shutil.copytree(ROOT / "params", root / "params")
    (root / "data").mkdir()
    (root / "data" / "raw").symlink_to(ROOT / "data" / "raw")
    (root / "notebooks").mkdir()
    shutil.copy2(ROOT / "notebooks" / "07_cultural_flips.ipynb", root / "notebooks")
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDAUDIT_ROOT", str(root))
    try:
        import nbformat

        out = root / "outputs" / "ord" / "notebooks" / "07_cultural_flips.ipynb"
        out.parent.mkdir(parents=True)
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell("# 07 · Cultural cues\n\nWhat the notebook asks.")]
        nbformat.write(nb, out)
        for name in ("07_arm_flips", "07_table5_harmful_flips", "07_variant_checks", "07_table1_accuracy",
                     "07_table4_flips"):
            tables.save_table(pd.DataFrame({"model": ["m"], "value": [1.0], "n": [147]}), name, "ord",
                              caption=f"caption of {name}")
        wide = pd.DataFrame({"model": ["m"], **{f"a rather long column header number {i}": [f"{i}.00 (n=3, MDE 70.00)"]
                                                for i in range(24)}})
        tables.save_table(wide, "07_table2_accuracy", "ord", caption="a wide table")
        # numbers as 04_paired_tests and 08_arm_accuracy print them, many columns wide (Table I's N is 150)
        rng = np.random.default_rng(0)
        numeric = pd.DataFrame({"model": ["Qwen-2.5", "GPT-4.1"], "N": [150, 150],
                                **{f"p_{i}": rng.uniform(-1, 1, 2).round(4) for i in range(14)},
                                **{f"x{i}": [1.0, -0.2282] for i in range(14)}})
        tables.save_table(numeric, "07_z_numbers", "ord", caption="a wide table of numbers")
        res = pd.DataFrame({"model": ["m", "m"], "metric": ["accuracy"] * 2, "cond_b": ["+a", "+b"],
                            "value_a": [0.5, 0.5], "delta": [0.1, np.nan], "rel_delta": [0.2, np.nan],
                            "p": [0.5, np.nan], "p_holm": [0.5, np.nan], "n_items": [3, 3], "mde": [0.7, np.nan]})
        tables.save_delta_table(tables.delta_table(res, "accuracy"), "07_table3_judge", "ord", caption="delta")
        mp.setattr(published, "compare", lambda profile: [])   # these stand-in tables are not the papers' shapes
        index = site.build("ord", render_notebooks=False)
        yield root, index
    finally:
        mp.undo()


def test_report_orders_tables_as_the_paper_and_names_them_so(ordered):
    _, index = ordered
    html = index.read_text(encoding="utf-8")
    order = [m for m in re.findall(r'id="(07_[a-z0-9_]+)"', html)]
    assert order == ["07_table1_accuracy", "07_table2_accuracy", "07_table3_judge", "07_table4_flips",
                     "07_table5_harmful_flips", "07_arm_flips", "07_variant_checks", "07_z_numbers"]
    for label in ("Table I (seed 003)", "Table IV (seed 003)", "Table 07_arm_flips"):
        assert f">{label}</h3>" in html
    assert "+nan" not in html and "nan</td>" not in html
    assert "n/a" in html


# every number in a table cell laid out on one line (a sign only where it starts the number, not the hyphen
# of "Llama-3.2-3B", which may end a line): a Range over the number's characters has one box per line
SPLIT_NUMBERS = r"""
const out = [];
for (const cell of document.querySelectorAll('td, th')) {
  const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    for (const m of node.data.matchAll(/(?:(?<![\w.])[-+\u2212])?\d[\d,.]*%?/g)) {
      if (m[0].length < 2) continue;
      const r = document.createRange();
      r.setStart(node, m.index);
      r.setEnd(node, m.index + m[0].length);
      const lines = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
      if (lines.size > 1) out.push(m[0] + ' in "' + cell.textContent.trim().slice(0, 50) + '"');
    }
  }
}
return out;
"""


def _whole_numbers(browser, page):
    """The page opened at 1,400 px (the width the split numbers were seen at):
    the numbers split across lines, and how far the page scrolls sideways."""
    browser.set_window_size(1400, 1600)
    browser.get(page.as_uri())
    split = browser.execute_script(SPLIT_NUMBERS)
    side = browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    return split, side


def test_report_tables_fit_the_page_in_chromium(ordered, browser):
    """A wide table wraps between words and, still too wide, scrolls in its own
    box; no number is broken across lines ("1.|00|00|0", "-0.2|282", N "1|5|0"
    were, when cells could break anywhere) and the page never scrolls sideways."""
    from selenium.webdriver.common.by import By

    _, index = ordered
    split, side = _whole_numbers(browser, index)
    assert split == [], f"numbers split across lines: {split[:5]}"
    assert side <= 1, f"the page scrolls sideways by {side}px"
    boxes = browser.find_elements(By.CSS_SELECTOR, ".fit")
    assert len(boxes) == 8
    for box in boxes:       # a box fits the page; its table fits it or the box scrolls
        assert browser.execute_script("return arguments[0].getBoundingClientRect().right", box) <= 1400
    assert "+nan" not in browser.find_element(By.TAG_NAME, "body").text


def test_published_page_keeps_every_number_whole_in_chromium(built, browser):
    _, index = built
    split, side = _whole_numbers(browser, index.parent / "published.html")
    assert split == [], f"numbers split across lines: {split[:5]}"
    assert side <= 1, f"the page scrolls sideways by {side}px"


def test_rendered_notebook_shows_its_figure_inline(built, browser):
    """A figure the notebook saves is also shown in the
    executed notebook, where it is made (the rendered HTML has the image)."""
    from selenium.webdriver.common.by import By

    _, index = built
    browser.get((index.parent / "notebooks" / "01_data_prep.html").as_uri())
    imgs = [i for i in browser.find_elements(By.TAG_NAME, "img")
            if (i.get_attribute("src") or "").startswith("data:image/png")]
    assert len(imgs) == 1
    browser.execute_script("arguments[0].scrollIntoView();", imgs[0])
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", imgs[0]) > 300
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Figure 01_dialog_turns" in body                    # its caption under it
    assert "Table 01_selection_funnel" in body                  # and every table under its caption


def test_report_tables_of_07_show_culture_labels_and_the_csv_keeps_the_ids(tmp_path):
    df = pd.DataFrame({"model": ["m"], "culture": ["southeast_asian"], "condition": ["southeast_asian:id+ctx"],
                       "n": [150]})
    for name in ("07_idctx_delta", "04_other"):
        df.to_csv(tmp_path / f"{name}.csv", index=False)
        (tmp_path / f"{name}.md").write_text("caption\n\n| x |\n", encoding="utf-8")
    _, html = site._table_html(tmp_path, "07_idctx_delta")
    assert "Southeast Asian</td>" in html and "Southeast Asian Id+Ctx</td>" in html and "southeast_asian" not in html
    assert "southeast_asian" in (tmp_path / "07_idctx_delta.csv").read_text(encoding="utf-8")
    assert "southeast_asian" in site._table_html(tmp_path, "04_other")[1]       # other studies' ids as written
