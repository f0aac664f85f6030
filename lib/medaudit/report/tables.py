"""Writing tables: one call saves CSV, Markdown and LaTeX side by side.

Every file is written atomically (:mod:`medaudit.atomic`): all formats of a
table are rendered to temporary files first and renamed over the old ones
only when every format succeeded, so a reader never sees a partial file and
a failed render leaves the previous table as it was."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from medaudit import atomic, paths
from medaudit.report import exhibits
from medaudit.stats import intervals


def save_table(df: pd.DataFrame, name: str, profile: str, caption: str = "",
               index: bool = False, n: int | str | None = None) -> pd.DataFrame:
    """Write ``outputs/<profile>/tables/<name>.{csv,md,tex}`` and, in a
    notebook, show it where it is made: a caption naming it as the paper
    does ("Table IV (seed 003)", :func:`medaudit.report.exhibits.label`), the
    caption text, its N (``n``: a number or a phrase; by default read from
    the table, :func:`medaudit.report.exhibits.n_text`) and the files, then the
    table. Returns ``df`` (in a notebook as :class:`medaudit.report.exhibits.Shown`,
    which the same cell does not show a second time)."""
    folder = paths.written(profile, "tables")
    shown = df
    if isinstance(df.columns, pd.MultiIndex):  # grouped headers read as "C1: Indigenous · Id" in files
        df = df.set_axis([" · ".join(str(x) for x in c if str(x)) for c in df.columns], axis=1)
    with atomic.atomic_paths([folder / f"{name}.{ext}" for ext in ("csv", "md", "tex")]) as (csv, md, tex):
        df.to_csv(csv, index=index)
        cells = csv_cells(df, index)
        md.write_text((f"{caption}\n\n" if caption else "") + markdown(cells, numeric=_numeric(df, index)) + "\n",
                      encoding="utf-8")
        tex.write_text(cells.to_latex(index=False, caption=caption or None, label=f"tab:{name}", escape=True),
                       encoding="utf-8")
    shown_at = paths.run_outputs(profile, "tables", f"{name}.csv").relative_to(paths.project_root()).as_posix()
    return exhibits.show_table(shown, name, caption, exhibits.n_text(shown, n), shown_at)


def csv_cells(df: pd.DataFrame, index: bool = False) -> pd.DataFrame:
    """Every cell as the CSV writes it (strings; an empty cell for NaN), so
    that the Markdown and LaTeX versions show the same digits and signs as
    the CSV (tabulate re-reads "+0.50" as 0.5 and
    prints 0.0 as 0)."""
    if df.shape[1] == 0 and not index:       # the CSV of a table without columns is one empty line
        return pd.DataFrame(index=range(len(df)))
    buf = io.StringIO()
    df.to_csv(buf, index=index)
    buf.seek(0)
    cells = pd.read_csv(buf, dtype=str, keep_default_na=False)
    return cells.rename(columns=lambda c: "" if str(c).startswith("Unnamed: ") else c)


def _numeric(df: pd.DataFrame, index: bool) -> list[bool]:
    cols = ([df.index.to_series()] if index else []) + [df.iloc[:, i] for i in range(df.shape[1])]
    return [pd.api.types.is_numeric_dtype(c) and not pd.api.types.is_bool_dtype(c) for c in cols]


def markdown(text: pd.DataFrame, index: bool = False, numeric: list[bool] | None = None) -> str:
    """A table of strings as Markdown, each cell exactly as given (no
    re-reading of "+1.50" or "0.0" as numbers); ``numeric`` columns are
    right-aligned."""
    n = text.shape[1] + int(index)
    align = ["right" if x else "left" for x in (numeric or [False] * n)]
    return text.to_markdown(index=index, disable_numparse=True, colalign=align)


def table_paths(name: str, profile: str) -> list[Path]:
    """The files a table ``name`` is saved as under the profile's run: its CSV, Markdown
    and LaTeX."""
    folder = paths.run_outputs(profile, "tables")
    return [folder / f"{name}.{ext}" for ext in ("csv", "md", "tex")]


# --------------------------------------------------------------------------
# tables shaped like seed 000 Table 1: rows are models, columns conditions

SIG_MARK = "*"        # p <= alpha, uncorrected (the papers' shading)
HOLM_MARK = "†"       # still p <= alpha after Holm correction
PAIR_MARK = "‡"       # e.g. +homo differs from +hetero within the model
SMALL_N = 30          # a marked cell on fewer paired items shows its n (ours: the seed's cells rest on 2,364)


def delta_table(res: pd.DataFrame, metric: str, *, relative: bool = False, scale: float = 100.0,
                base_label: str = "Base", alpha: float = 0.05, digits: int = 2,
                pair_p: pd.DataFrame | None = None, small_n: int = SMALL_N,
                pair_n: pd.DataFrame | None = None, pair_mde: pd.DataFrame | None = None
                ) -> dict[str, pd.DataFrame]:
    """From paired-bootstrap results (``stats.paired_bootstrap`` with
    ``adjust_pvalues`` applied), the seed-000 layout for one metric.

    Rows: models; first column the base value (``value_a`` × ``scale``),
    then one column per condition with the delta (× ``scale``) or, with
    ``relative``, the relative change in %. Returns ``values`` (numbers),
    ``p`` (uncorrected), ``p_holm`` and ``text`` (formatted with marks: * for
    p ≤ alpha, † when it survives Holm, ‡ where ``pair_p`` (model × condition
    p-values of a within-model pair comparison) is ≤ alpha), ``n`` (the
    paired items behind each cell, ``n_items``) and ``mde`` (the minimum
    detectable effect on the table's scale, from the results' ``mde``). A
    marked cell resting on fewer than ``small_n`` paired items shows them
    and what they can detect, "-50.00* (n=3, MDE 70.00)" (a star on
    three items is not the paper's star; nor is it
    read without its MDE). A ‡ on fewer than ``small_n`` items of its own
    pair (``pair_n``) carries that pair's MDE (``pair_mde``, same shape as
    ``pair_p``, on the metric's scale), not the comparison with Base:
    "-50.00*‡ (n=8, MDE 70.00; ‡ n=9, MDE 80.00)". A cell on
    fewer than :data:`medaudit.stats.intervals.MIN_N` paired items carries no mark
    at all and says so, "-33.33 (n=3, too few to tell)" (below
    that n the coverage simulation vouches for no test).
    """
    r = res[res["metric"] == metric]
    unit = "model"
    if r.empty:         # no contrast was estimable (a partial run): the table has no rows
        empty = pd.DataFrame(columns=[base_label], index=pd.Index([], name=unit), dtype=object)
        return {k: empty.copy() for k in ("values", "p", "p_holm", "text", "n", "mde")}
    conds = list(dict.fromkeys(r["cond_b"]))
    base = r.groupby(unit, sort=False)["value_a"].first() * scale
    val = r.pivot(index=unit, columns="cond_b", values="rel_delta" if relative else "delta")[conds]
    val = val * 100 if relative else val * scale
    p = r.pivot(index=unit, columns="cond_b", values="p")[conds]
    ph = r.pivot(index=unit, columns="cond_b", values="p_holm")[conds] if "p_holm" in r else p * np.nan
    n = r.pivot(index=unit, columns="cond_b", values="n_items")[conds] if "n_items" in r else p * np.nan
    mde = r.pivot(index=unit, columns="cond_b", values="mde")[conds] if "mde" in r else p * np.nan
    va = r.pivot(index=unit, columns="cond_b", values="value_a")[conds].abs()

    def on_scale(x):                  # an MDE on the table's scale: points, or % of the base value
        return 100 * x / va.where(va > 0) if relative else x * scale

    mde = on_scale(mde)
    pmde = on_scale(pair_mde.reindex(index=va.index, columns=conds)) if pair_mde is not None else None
    pn = pair_n.reindex(index=va.index, columns=conds) if pair_n is not None else None
    values = pd.concat([base.rename(base_label), val], axis=1).loc[base.index]
    text = values.copy().astype(object)
    for m in values.index:
        text.loc[m, base_label] = f"{values.loc[m, base_label]:.{digits}f}"
        for c in conds:
            v = values.loc[m, c]
            s = "n/a" if pd.isna(v) else (f"{v:+.{digits}f}" + ("%" if relative else ""))
            if pd.notna(v) and pd.notna(n.loc[m, c]) and not intervals.can_tell(n.loc[m, c]):
                # below MIN_N questions no test or interval is vouched for: no mark, said so
                text.loc[m, c] = f"{s} (n={int(n.loc[m, c])}, {intervals.TOO_FEW})"
                continue
            vs_base = p.loc[m, c] <= alpha
            holm = ph.loc[m, c] <= alpha
            paired = (pair_p is not None and c in pair_p.columns and m in pair_p.index
                      and pair_p.loc[m, c] <= alpha)
            s += SIG_MARK * bool(vs_base) + HOLM_MARK * bool(holm) + PAIR_MARK * bool(paired)
            notes = []
            # the MDE of the comparison each mark belongs to: Base for * and †, the pair for ‡
            if (vs_base or holm or (paired and pn is None)) and n.loc[m, c] < small_n:
                notes.append(_small_n_note(n.loc[m, c], mde.loc[m, c], digits, relative))
            if paired and pn is not None and pd.notna(pn.loc[m, c]) and pn.loc[m, c] < small_n:
                notes.append(f"{PAIR_MARK} " + _small_n_note(pn.loc[m, c], pmde.loc[m, c], digits, relative))
            if notes:
                s += f" ({'; '.join(notes)})"
            text.loc[m, c] = s
    out = {"values": values, "p": p.loc[base.index], "p_holm": ph.loc[base.index], "n": n.loc[base.index],
           "mde": mde.loc[base.index], "text": text}
    if {"b", "c", "n_items"} <= set(r.columns) and r["b"].notna().any():
        # McNemar cells: the discordant share, to recompute the MDE at another n (published.pool_note)
        psi = r.assign(psi=(r["b"] + r["c"]) / r["n_items"]).pivot(index=unit, columns="cond_b", values="psi")
        out["psi"] = psi[conds].loc[base.index]
    return out


def _small_n_note(n: float, mde: float, digits: int, relative: bool) -> str:
    """"n=8, MDE 35.00" beside a mark on fewer than SMALL_N items:
    the smallest difference those n items detect with power 0.8 at α = 0.05
    (``stats.paired_bootstrap``'s ``mde``, on the table's scale)."""
    if pd.isna(mde):
        return f"n={int(n)}, MDE n/a"
    if np.isinf(mde):
        return f"n={int(n)}, no effect detectable"
    return f"n={int(n)}, MDE {mde:.{digits}f}" + ("%" if relative else "")


def save_delta_table(t: dict[str, pd.DataFrame], name: str, profile: str, caption: str,
                     better: str = "higher") -> pd.DataFrame:
    """CSV (values and p-values), Markdown and LaTeX (marks), HTML (shading:
    green/red for better/worse where p ≤ 0.05, yellow when ``better`` is
    "neither", as the seed shades confidence); in a notebook the marked
    table is shown with its caption and N (the paired items per cell), as
    :func:`save_table` does."""
    folder = paths.written(profile, "tables")
    out = t["values"].join(t["p"].add_prefix("p "), how="left").join(t["p_holm"].add_prefix("p_holm "))
    if "n" in t:
        out = out.join(t["n"].add_prefix("n "))
    if "mde" in t:
        out = out.join(t["mde"].add_prefix("mde "))
    if "psi" in t:
        out = out.join(t["psi"].add_prefix("psi "))
    legend = (f"{caption}\n\n{SIG_MARK} p ≤ 0.05 (uncorrected, as the paper shades); "
              f"{HOLM_MARK} also after Holm correction; {PAIR_MARK} differs from the paired condition; "
              f"(n=…, MDE …) beside a mark: it rests on fewer than {SMALL_N} paired items, which detect "
              f"with power 0.8 at α = 0.05 only a difference of at least the MDE (same scale as the cell); "
              f"(n=…, {intervals.TOO_FEW}): fewer than {intervals.MIN_N} paired items, where no test is vouched "
              f"for, so no mark (docs/statistics.md).")
    vals, p = t["values"], t["p"]

    def shade(col):
        if col.name not in p.columns:
            return [""] * len(col)
        out = []
        for m in col.index:
            v = vals.loc[m, col.name]
            if not (p.loc[m, col.name] <= 0.05):
                out.append("")
            elif better == "neither":
                out.append("background-color: #fff3b0")
            else:
                good = v > 0 if better == "higher" else v < 0
                out.append("background-color: #c8e6c9" if good else "background-color: #ffcdd2")
        return out

    # the shaded cells are the Markdown's, marks, notes and % signs included; no caption of its own (the
    # report prints the caption above the table)
    styled = t["text"].style.apply(shade)
    with atomic.atomic_paths([folder / f"{name}.{ext}" for ext in ("csv", "md", "tex", "html")]) as (
            csv, md, tex, html):
        out.to_csv(csv)
        md.write_text(legend + "\n\n" + markdown(t["text"], index=True,
                                                   numeric=[False] + [True] * t["text"].shape[1]) + "\n",
                      encoding="utf-8")
        tex.write_text(t["text"].to_latex(caption=legend.replace("\n\n", " "), label=f"tab:{name}", escape=True),
                       encoding="utf-8")
        html.write_text(styled.to_html(), encoding="utf-8")
    n = t["n"].to_numpy(float) if "n" in t and t["n"].size else np.array([])
    n = n[np.isfinite(n)]
    n_words = (("N = 0: no paired comparison in this run" if not n.size else
                f"N = {int(n.min())} paired items per cell" if n.min() == n.max() else
                f"N = {int(n.min())}–{int(n.max())} paired items per cell"))
    return exhibits.show_table(t["text"], name, caption, n_words, f"outputs/{profile}/tables/{name}.csv")
