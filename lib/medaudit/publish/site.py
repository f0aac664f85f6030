"""The report: one HTML page per profile from the executed notebooks.

``python -m medaudit.publish.site <profile>`` (run by ``make all``) writes
``outputs/<profile>/report/`` (``--run NAME``: a named run's,
``outputs/<profile>/runs/<NAME>/report/``; :mod:`medaudit.runs`):

- ``index.html`` — per executed notebook (in order): its title and opening
  narrative, its "What this run shows" (the sentences the notebook wrote
  from its own tables, :mod:`medaudit.report.findings`), every table (``tables/NN_*``) and figure (``figures/NN_*``) it
  wrote — the paper's own first, in the paper's order and under the paper's
  names (Table I … V, then Fig. 3 …; :mod:`medaudit.report.exhibits`), then ours —
  each with its caption and a link to the notebook's HTML rendering,
  then a colophon (commit, profile, versions, per-notebook wall time);
- ``notebooks/NN_*.html`` — the executed notebooks rendered by nbconvert;
- ``published.html`` — our numbers beside the seeds' published ones
  (:mod:`medaudit.publish.published`);
- ``figures/`` — the figures, copied so the folder can be moved or served.

Every file is written atomically (:mod:`medaudit.atomic`): temporary file, then rename.

Nothing here runs a model: the page is built from what the notebooks wrote.
A table or figure without a caption is listed with its name and counted
("uncaptioned"); a notebook named in the DAG that has not been executed is
listed as missing.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import mistune
import nbformat
import pandas as pd

from medaudit import atomic, paths
from medaudit.publish import colophon
from medaudit.report import exhibits

_MD = mistune.create_markdown(plugins=["table"])


@dataclass
class Item:
    """A table or figure of the report: its name, caption, and the table's HTML or the
    figure's path."""
    kind: str            # "table" | "figure"
    name: str
    caption: str
    html: str = ""       # a table's HTML
    src: str = ""        # a figure's path relative to the report

    @property
    def label(self) -> str:
        """As the paper names it: "Table IV (seed 003)", "Fig. 7 (…)", else "Table 07_variant_checks"."""
        return exhibits.label(self.name, self.kind)


@dataclass
class Section:
    """One executed notebook in the report: number, stem, title, opening narrative, link,
    its tables and figures, wall time, commit and "What this run shows"."""
    number: str
    stem: str
    title: str
    narrative: str
    link: str
    items: list = field(default_factory=list)
    wall_s: float | None = None
    commit: str = ""
    findings: str = ""   # the notebook's "What this run shows", as HTML


def _caption_and_body(md_text: str) -> tuple[str, str]:
    """A table's .md file is "caption, blank line, table" or just the table."""
    head, _, rest = md_text.partition("\n\n")
    if head.lstrip().startswith("|"):
        return "", md_text
    return head.strip(), rest


def _table_html(folder: Path, name: str) -> tuple[str, str]:
    caption, _ = _caption_and_body((folder / f"{name}.md").read_text(encoding="utf-8"))
    styled = folder / f"{name}.html"
    if styled.exists():                                   # 04's shaded tables
        return caption, styled.read_text(encoding="utf-8")
    df = pd.read_csv(folder / f"{name}.csv", keep_default_na=False)
    if name.startswith("07_"):                            # culture ids in cultures.yaml's words; the CSV keeps them
        from medaudit.studies import cultural

        df = exhibits.relabel(df, cultural.load_config().display_labels())
    return caption, df.to_html(index=False, border=0, classes="table", escape=True)


def _figure_caption(folder: Path, name: str) -> str:
    p = folder / f"{name}.md"
    return p.read_text(encoding="utf-8").strip() if p.exists() else ""


def _colophon_rows(nb) -> dict[str, str]:
    """The colophon of an executed notebook (its last cell's text output)."""
    for cell in reversed(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain") or out.get("text") or ""
            if "git commit" in text:
                rows = {}
                for line in text.splitlines()[1:]:
                    m = re.match(r"(.+?)\s{2,}(\S.*)$", line.strip())
                    if m:
                        rows[m.group(1).strip()] = m.group(2).strip()
                return rows
        break
    return {}


def _intro(nb) -> tuple[str, str]:
    """(title, narrative HTML) from the notebook's first markdown cell."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = cell.source.strip().splitlines()
            title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else ""
            body = "\n".join(lines[1:] if title else lines).strip()
            return title, _MD(body)
    return "", ""


FINDINGS = "What this run shows"


def _findings(nb) -> str:
    """The notebook's "What this run shows" (the Markdown its findings cell
    displayed, computed from the run's tables by :mod:`medaudit.report.findings`),
    as HTML; a table it names in backticks links to that table in the report.
    "" when the notebook has no such section."""
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith(f"## {FINDINGS}"):
            for code in cells[i + 1:]:
                if code.cell_type == "markdown":
                    break
                md = "".join("".join(o.get("data", {}).get("text/markdown", ""))
                             for o in code.get("outputs", []) if "text/markdown" in o.get("data", {}))
                if md.strip():
                    html = _MD(md)
                    return re.sub(r"<code>(\d\d_[A-Za-z0-9_]+)</code>", r'<a href="#\1"><code>\1</code></a>', html)
            break
    return ""


def collect(profile: str, notebooks: list[Path] | None = None) -> tuple[list[Section], list[str]]:
    """The report's sections (one per executed notebook of ``profile``) and
    the names of notebooks in ``notebooks/`` that have no executed copy."""
    root = paths.project_root()
    out = paths.run_outputs(profile)
    sources = notebooks if notebooks is not None else sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    tables, figures = out / "tables", out / "figures"
    sections, missing = [], []
    for src in sources:
        done = out / "notebooks" / src.name
        if not done.exists():
            missing.append(src.stem)
            continue
        nb = nbformat.read(done, as_version=4)
        title, narrative = _intro(nb)
        number = src.stem[:2]
        sec = Section(number, src.stem, title or src.stem, narrative, f"notebooks/{src.stem}.html")
        col = _colophon_rows(nb)
        sec.commit = col.get("git commit", "")
        sec.findings = _findings(nb)
        try:
            sec.wall_s = float(col.get("wall time (s)", "nan"))
        except ValueError:
            sec.wall_s = None
        for name in sorted({p.stem for p in tables.glob(f"{number}_*.csv")}):
            caption, table = _table_html(tables, name)
            sec.items.append(Item("table", name, caption, html=table))
        for png in sorted(figures.glob(f"{number}_*.png")):
            sec.items.append(Item("figure", png.stem, _figure_caption(figures, png.stem), src=f"figures/{png.name}"))
        # the paper's tables in its order (Table I … V), then its figures, then ours (by file stem,
        # "Table 07_arm_flips" came before Table I)
        sec.items.sort(key=lambda it: exhibits.order_key(it.name))
        sections.append(sec)
    return sections, missing


def _render_notebook(src: Path, dest: Path) -> None:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nbformat.read(src, as_version=4))
    atomic.write_text(dest, body)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("medaudit.publish", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]))


def build(profile: str, render_notebooks: bool = True) -> Path:
    """Write ``outputs/<profile>/report/`` and return the path of index.html."""
    from medaudit.publish import published

    t0 = time.time()
    out = paths.run_outputs(profile)
    site = out / "report"
    (site / "figures").mkdir(parents=True, exist_ok=True)
    (site / "notebooks").mkdir(parents=True, exist_ok=True)
    sections, missing = collect(profile)
    for sec in sections:
        for it in sec.items:
            if it.kind == "figure":
                with atomic.atomic_path(site / it.src) as tmp:
                    shutil.copy2(out / it.src, tmp)
        if render_notebooks:
            _render_notebook(out / "notebooks" / f"{sec.stem}.ipynb", site / sec.link)
    uncaptioned = [it.name for s in sections for it in s.items if not it.caption]
    comparisons = published.compare(profile)
    built = colophon.table(profile, t0)["value"].to_dict()
    built.pop("models", None)                      # the report runs no model
    built["report built in (s)"] = built.pop("wall time (s)")
    env = _env()
    index = env.get_template("report.html.j2").render(
        profile=profile, sections=sections, missing=missing, uncaptioned=uncaptioned, colophon=built,
        n_tables=sum(it.kind == "table" for s in sections for it in s.items),
        n_figures=sum(it.kind == "figure" for s in sections for it in s.items))
    published_html = env.get_template("published.html.j2").render(
        profile=profile, studies=comparisons, colophon=built)
    atomic.write_text(site / "index.html", index)            # atomic: a browser never loads half a page
    atomic.write_text(site / "published.html", published_html)
    return site / "index.html"


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.publish.site``: build a profile's report
    (or a named run's, ``--run``) from its executed notebooks and print its path."""
    import argparse

    from medaudit import config

    ap = argparse.ArgumentParser(prog="python -m medaudit.publish.site",
                                 description="Build outputs/<profile>/report/ from the executed notebooks "
                                             "(index.html, published.html, the notebooks as HTML).")
    ap.add_argument("profile", help="a profile of params/ whose notebooks were executed (smoke, default, paper)")
    ap.add_argument("--no-notebooks", action="store_true", help="do not render the executed notebooks as HTML")
    ap.add_argument("--run", default=None, help="a named run of the profile (python -m medaudit.runs list); "
                                                "default: the profile's own outputs")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    profiles = config.profiles()
    if a.profile not in profiles:
        ap.error(f"no profile '{a.profile}' (params/{a.profile}.yaml); profiles: {', '.join(profiles)}")
    if a.run:
        try:
            paths.check_run_name(a.run)
        except ValueError as e:
            ap.error(str(e))
        if not paths.run_outputs(a.profile, run=a.run).is_dir():
            ap.error(f"no run '{a.run}' of profile {a.profile} ({paths.run_outputs(a.profile, run=a.run)}); "
                     f"python -m medaudit.runs list --profile {a.profile}")
        os.environ[paths.RUN_ENV] = a.run
    path = build(a.profile, render_notebooks=not a.no_notebooks)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
