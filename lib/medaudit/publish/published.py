"""Our numbers beside the published ones (``params/published.yaml``).

Each entry names a seed's table, transcribed, and the CSV of ours with the
same shape. :func:`compare` reads our table for a profile, keeps the rows
the published table has (by its ``key`` column; all rows when none match,
as our models are not the seed's) and the compared columns, and returns
both with the sentence on why they differ.

Entries whose rows are models we hold real answers of (the released
answers) are compared **cell by cell** (:func:`cells`): ``rows`` maps a
published row label to our key value, ``where`` filters our table (e.g.
one prompt format), ``digits`` is the printed precision. A cell is
"equal" when ours, rounded as printed, is the published value (every
number in a text cell such as "−4.67 / −0.67", or the same text), else
"differs" with the first of the entry's ``reasons`` that explains it with
evidence computed from the data (:data:`REASONS`: functions of the
published row, our row and our other tables), or the entry's general
``differs`` sentence when none applies.

An entry's ``rules`` names the profile parameters that decide how our
table was counted (the unparsed-answer rule, FairMedQA's counting and
McNemar test, the note decoding); the page shows each with the value the
notebook was run with (:func:`rules_used`), so every table says which rule
it follows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from medaudit import paths
from medaudit.stats import testpower
from medaudit.stats.distance import FAR_ALPHA, distance


@dataclass
class Comparison:
    """One published table beside ours: study, what it is, notebook, both tables, why they
    differ, and for a cell-by-cell entry each cell's status, the profile's counting rules, our rows
    the paper lacks and (Table III) both gold readings."""
    study: str
    what: str
    notebook: str
    published: pd.DataFrame
    ours: pd.DataFrame | None     # None: our table was not written under this profile
    differs: str
    ours_name: str
    # cell by cell (entries with ``rows``): row, column, published, ours, status, why
    cells: pd.DataFrame | None = None
    rules: dict | None = None           # the profile parameters that decide how ours is counted: {name: value}
    not_in_paper: list | None = None    # our rows (entries with ``rows``) that no published row maps to
    readings: pd.DataFrame | None = None   # Table III (entries with ``gold_readings``): both gold readings per cell
    readings_note: str | None = None       # how the paper's items were found (:func:`readings_note`)

    @property
    def counts(self) -> dict:
        """How many cells have each status (equal, differs, missing); empty when not
        compared cell by cell."""
        if self.cells is None or self.cells.empty:
            return {}
        return self.cells["status"].value_counts().to_dict()


def load(path: str | Path | None = None) -> list[dict]:
    """The entries of ``params/published.yaml``, checked: every published
    row has one value per column. Errors name the file and the entry."""
    path = Path(path) if path else paths.params("published.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    entries = raw.get("studies") or []
    for i, e in enumerate(entries):
        missing = {"study", "what", "ours", "notebook", "key", "columns", "published", "differs"} - set(e)
        if missing:
            raise ValueError(f"{path}: studies[{i}] lacks {sorted(missing)}")
        if "rows" in e and set(e["rows"]) != set(e["published"]):
            raise ValueError(f"{path}: studies[{i}] ({e['ours']}): `rows` must map every published row, "
                             f"differ in {sorted(set(e['rows']) ^ set(e['published']))}")
        for r in e.get("reasons") or []:
            if r.get("why") not in REASONS:
                raise ValueError(f"{path}: studies[{i}] ({e['ours']}): reason {r.get('why')!r} is not one of "
                                 f"{sorted(REASONS)}")
        from medaudit import config

        unknown = [r for r in e.get("rules") or [] if r not in config.KEYS]
        if unknown:
            raise ValueError(f"{path}: studies[{i}] ({e['ours']}): rules {unknown} are not profile parameters")
        for row, vals in e["published"].items():
            if len(vals) != len(e["columns"]):
                raise ValueError(f"{path}: studies[{i}] ({e['ours']}), row {row!r}: {len(vals)} values for "
                                 f"{len(e['columns'])} columns")
    return entries


def published_frame(entry: dict) -> pd.DataFrame:
    """An entry's published table as a frame: the row label (its ``key`` column, or
    ``row`` for a cell-by-cell entry) and the compared columns."""
    key = "row" if "rows" in entry else entry["key"]
    return pd.DataFrame([[row, *vals] for row, vals in entry["published"].items()],
                        columns=[key, *entry["columns"]])


def _our_table(profile: str, name: str) -> pd.DataFrame | None:
    p = paths.run_outputs(profile, "tables", f"{name}.csv")
    return pd.read_csv(p, keep_default_na=False) if p.exists() else None


def _key(df: pd.DataFrame, key) -> pd.Series:
    cols = [key] if isinstance(key, str) else list(key)
    return df[cols].astype(str).agg(" · ".join, axis=1)


def ours_frame(entry: dict, profile: str) -> pd.DataFrame | None:
    """Our table of an entry for ``profile``, shaped like the published one (None when
    not written): for a cell-by-cell entry every row of ours under its published label, ours
    alone marked "not in the paper"; otherwise the published rows (all when none match) and the
    compared columns, rounded to 2 places."""
    df = _our_table(profile, entry["ours"])
    if df is None:
        return None
    for col, val in (entry.get("where") or {}).items():
        df = df[df[col].astype(str) == str(val)] if col in df.columns else df
    if "rows" in entry:
        # every row of ours: a published row's label where one maps to it, else ours, marked "not in the paper"
        want = {str(v): k for k, v in entry["rows"].items()}
        keys = list(_key(df, entry["key"]))
        df = df.copy()
        df.insert(0, "row", [want.get(k, k) for k in keys])
        df.insert(1, "paper", ["" if k in want else NOT_IN_PAPER for k in keys])
        if "validator" in df.columns:      # a model that was also the Validation-Agent: its mark
            marks = df["validator"].fillna("").astype(str)
            df["paper"] = ["; ".join(x for x in (p, v) if x) for p, v in zip(df["paper"], marks)]
        cols = ["row", "paper"] + [c for c in ["N", "n", *entry["columns"]] if c in df.columns]
        return df[cols]
    key = entry["key"]
    if key in df.columns:
        same = df[df[key].astype(str).isin([str(r) for r in entry["published"]])]
        df = same if len(same) else df
    pattern = entry.get("ours_columns")
    if pattern:
        df = df[[c for c in df.columns if re.search(pattern, c)]]
    else:
        df = df[[c for c in [key, *entry["columns"], "validator"] if c in df.columns]]
    return df.round(2)


NOT_IN_PAPER = "not in the paper"
_NUM = re.compile(r"[-+−]?\d+(?:\.\d+)?")


def numbers(x) -> list[float]:
    """The numbers in a cell ("−4.67 / +0.66" → [-4.67, 0.66]; 92.0 → [92.0])."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return [float(x)]
    return [float(m.replace("−", "-")) for m in _NUM.findall(str(x))]


def same(published, ours, digits: int) -> bool:
    """Ours, rounded to the printed precision, is the published value:
    every number of the cell (half a unit of the last printed digit), or,
    for cells without numbers, the same text."""
    if ours is None or (isinstance(ours, float) and pd.isna(ours)) or str(ours) in ("", "n/a", "–"):
        return False
    a, b = numbers(published), numbers(ours)
    if not a and not b or str(published).startswith("<"):
        return str(published).replace("−", "-").strip() == str(ours).replace("−", "-").strip()
    return len(a) == len(b) and all(abs(x - round(y, digits)) <= 0.5 * 10 ** -digits + 1e-9 for x, y in zip(a, b))


# --------------------------------------------------------------------------
# reasons: evidence computed from the data for a cell that differs. Each
# takes (entry, row label, column, published row (dict), our row (dict),
# profile) and returns a sentence, or None when it does not apply.


def _fmt(x: float) -> str:
    if x is None or x != x:        # NaN: the text says n/a ("+nan" stood in the report)
        return "n/a"
    x = round(x, 2) + 0.0          # no "−0.00"
    return f"{x:+.2f}".replace("-", "−")


def _format(entry: dict) -> str:
    """The prompt format an entry's rows come from (``prompt_format``, or its ``where`` filter)."""
    return entry.get("prompt_format") or (entry.get("where") or {}).get("prompt_format", "mcq_explain")


def _eq2_on_printed(entry, col, pub) -> tuple[float, float] | None:
    """(Δ_Orig, Δ_Neut) of a Δ Avg column by eq. 2 on the published row's printed accuracies."""
    cue = col.split(" · ")[-1]
    cells = [c for c in entry["columns"] if c.endswith(f" · {cue}") and not c.startswith(("Δ", "Cochran"))]
    vals = [numbers(pub[c])[0] for c in cells]
    if len(vals) != 3:
        return None
    mean = sum(vals) / 3
    return mean - numbers(pub["Baselines · Orig."])[0], mean - numbers(pub["Baselines · Neut."])[0]


def _delta_from_printed(entry, row, col, pub, ours, profile):
    """Δ Avg as eq. 2 gives it from the paper's own printed accuracies."""
    d = _eq2_on_printed(entry, col, pub)
    if d is None:
        return None
    d_o, d_n = d
    printed = numbers(pub[col])
    digits = int(entry.get("digits", 2))
    # the mean of three accuracies less one, each rounded to `digits`: at most one unit of the last digit off
    bound = 10 ** -digits
    gap = max((abs(p - e) for p, e in zip(printed, (d_o, d_n))), default=0.0)
    if gap > bound + 1e-9:
        return (f"eq. 2 on the paper's own printed accuracies gives {_fmt(d_o)} / {_fmt(d_n)}, not the printed "
                f"{pub[col]}: a gap of {gap:.2f} points, beyond rounding (at most {bound:g}); ours is eq. 2 on "
                f"our accuracies")
    return (f"eq. 2 on the paper's own printed accuracies gives {_fmt(d_o)} / {_fmt(d_n)} "
            f"(printed {pub[col]}, the same within rounding); ours is computed from unrounded accuracies")


def _cochran(entry, row, col, pub, ours, profile):
    t = _our_table(profile, "07_cochran_q")
    if t is None:
        return None
    cue = {"Id": "id", "Ctx": "ctx", "Id+Ctx": "id+ctx"}.get(col.split(" · ")[-1])
    fmt = _format(entry)
    g = t[(t["model"] == str(entry["rows"][row]).split(" · ")[0]) & (t["cue"] == cue) & (t["prompt_format"] == fmt)]
    if g.empty:
        return None
    p = g.set_index("reference")["p"]
    return (f"Cochran's Q on the released answers: p = {p.get('original', float('nan')):.3g} (vs Orig.) / "
            f"{p.get('neutral', float('nan')):.3g} (vs Neut.); the paper states p < 1e-14 for every cell")


def _our_row(entry, row, profile) -> dict | None:
    """Our whole row (its N included) for a published row label."""
    df = ours_frame(entry, profile)
    if df is None:
        return None
    g = df[(df["row"] == row) & ~df["paper"].str.startswith(NOT_IN_PAPER)]
    return None if g.empty else g.iloc[0].to_dict()


def implied_n(values, digits: int = 2, lo: int = 20, hi: int = 1000) -> int | None:
    """The smallest N (``lo``..``hi``) of which every printed percentage is a
    whole count (k/N·100 rounded to ``digits`` is the printed value): the
    number of items a published row was counted on, read from its own
    numbers. None when no N fits (or there are fewer than three values,
    too few to tell)."""
    vals = [v for v in values if 0 < v < 100]
    if len(vals) < 3:
        return None
    tol = 0.5 * 10 ** -digits + 1e-9
    for n in range(lo, hi + 1):
        if all(abs(round(v * n / 100) * 100 / n - v) <= tol for v in vals):
            return n
    return None


def _rate_columns(entry) -> list[str]:
    return [c for c in entry["columns"] if not c.startswith(("Δ", "Cochran"))]


def _complete_items(entry, row, col, pub, ours, profile):
    """Tables II / IV / V: on how many items the paper and we counted this
    row, both read from the data: the paper's N from its own printed
    percentages (:func:`implied_n`), ours from our row's N and notebook 07's
    ``07_retained`` / ``07_dropped`` (the counting rule in force, and which
    model's unparsed answers dropped which items)."""
    model = str(entry["rows"][row]).split(" · ")[0]
    fmt = _format(entry)
    mine = _our_row(entry, row, profile)
    kept = _our_table(profile, "07_retained")
    if mine is None or kept is None or "N" not in mine:
        return None
    n_ours = int(mine["N"])
    n_paper = implied_n([x for c in _rate_columns(entry) for x in numbers(pub[c])[:1]])
    if n_paper is None or n_paper == n_ours:
        return None
    g = kept[(kept["model"] == model) & (kept["prompt_format"] == fmt)]
    if g.empty:
        return None
    u = g.iloc[0]
    rule = str(u.get("rule", "")) or "per_model"
    every = kept[kept["prompt_format"] == fmt]
    pooled = every[every.get("rule", pd.Series("", index=every.index)) == "across_models"]
    what = "percentages" if entry["ours"] != "07_table5_harmful_flips" else "harmful-flip rates"
    head = (f"the paper's printed {what} in this row are whole counts out of {n_paper}; ours are out of {n_ours}")
    if entry["ours"] == "07_table5_harmful_flips":
        return (f"{head}, the questions answered correctly under Original among the {int(u['retained'])} items "
                f"scored ({_rule_phrase(rule, model, pooled)})")
    dropped = _our_table(profile, "07_dropped")
    why = ""
    if dropped is not None and int(u["items"]) > int(u["retained"]) and "unparsed by" in dropped.columns:
        d = dropped[(dropped["model"] == model) & (dropped["prompt_format"] == fmt)]
        by = {}
        for _, r in d.iterrows():
            for m in str(r["unparsed by"]).split(", "):
                by.setdefault(m, []).append(str(r["item_id"]))
        why = "; dropped: " + "; ".join(f"{len(v)} left unparsed by {m} ({', '.join(v)})" for m, v in by.items())
    return f"{head}: {_rule_phrase(rule, model, pooled)}, {int(u['retained'])} of {int(u['items'])} items{why}"


def _rule_phrase(rule, model, pooled) -> str:
    if rule == "across_models":
        names = ", ".join(str(m) for m in pooled["model"])
        return (f"cultural_counting = across_models, the items complete in every one of {len(pooled)} "
                f"released models ({names})")
    return f"cultural_counting = per_model, the items {model} answered in every condition"


def _flip_neutral(entry, row, col, pub, ours, profile):
    """The Neutral cell of Tables IV / V: how many of ours changed, counted
    from our own row (rate × N: flips of N compared questions in Table IV,
    harmful flips of N originally correct ones in Table V)."""
    if col != "Neutral":
        return None
    model = str(entry["rows"][row]).split(" · ")[0]
    mine = _our_row(entry, row, profile)
    if mine is None or "N" not in mine or not numbers(mine.get("Neutral")):
        return None
    rate, n = numbers(mine["Neutral"])[0], int(mine["N"])
    k = round(rate * n / 100)
    what = ("answered correctly under Original and wrongly under Neutral"
            if entry["ours"] == "07_table5_harmful_flips" else "answered differently under Original and Neutral")
    return (f"the released answers of {model}: {k} of {n} questions {what} ({rate:.2f}%); "
            f"the paper prints {pub[col]}")


_ORIG, _NEUT = "Baselines · Orig.", "Baselines · Neut."


def _neutral_as_original(entry, row, col, pub, ours, profile):
    """Table II prints its Neut. baseline equal to its Orig. one (and each
    Δ Avg pair with equal halves) in most rows, where the released answers
    of the same models score the two conditions differently. Applies to the
    Neut. cell and to a Δ Avg cell whose printed halves are equal while ours
    are not; the numbers are read from the published row and our row (the
    halves of Δ differ by exactly Neut. − Orig., eq. 2). A Δ cell whose
    first half differs too gets :func:`_delta_from_printed`'s evidence."""
    if _ORIG not in pub or _NEUT not in pub or numbers(pub[_ORIG]) != numbers(pub[_NEUT]):
        return None
    mine = _our_row(entry, row, profile)
    if mine is None or not numbers(mine.get(_ORIG)) or not numbers(mine.get(_NEUT)):
        return None
    mo, mn = numbers(mine[_ORIG])[0], numbers(mine[_NEUT])[0]
    rows = [dict(zip(entry["columns"], v)) for v in entry["published"].values()]
    k = sum(numbers(r[_ORIG]) == numbers(r[_NEUT]) for r in rows)
    printed = (f"the paper prints Neut. = Orig. ({numbers(pub[_ORIG])[0]:.2f}) in this row, as in {k} of "
               f"{len(rows)} rows of the table; the released answers give Orig. {mo:.2f}, Neut. {mn:.2f}")
    if col == _NEUT:
        return printed
    if not col.startswith("Δ"):
        return None
    p, o = numbers(pub[col]), numbers(ours)
    if len(p) != 2 or len(o) != 2 or p[0] != p[1] or abs(o[0] - o[1]) < 0.005:
        return None
    why = (f"{printed}, so its Δ against Orig. and Neut. are the same ({pub[col]}); ours differ by "
           f"Neut. − Orig. = {_fmt(mn - mo)}")
    digits = int(entry.get("digits", 2))
    if not same(p[0], o[0], digits):        # the half against Orig. differs too: say why
        eq2 = _eq2_on_printed(entry, col, pub)
        if eq2 is not None and not same(p[0], eq2[0], digits):
            why += "; and " + _delta_from_printed(entry, row, col, pub, ours, profile)
        else:
            n = _complete_items(entry, row, col, pub, ours, profile)
            why += f"; and the accuracies differ: {n}" if n else ""
    return why


def _judge_counts(entry, row, col, pub, ours, profile):
    """Table III: the released verdicts' counts behind our cell; where some
    YES verdicts judge an explanation whose answer line cannot be read
    (07_table3_counts ``grounded_unreadable``), both counts are given."""
    a, b = numbers(pub[col]), numbers(ours)
    if len(a) < 2 or len(b) < 2:
        return None
    extra = 0
    counts = _our_table(profile, "07_table3_counts")
    cue = {"Identity": "id", "Context": "ctx", "Identity + Context": "id+ctx"}.get(col)
    if counts is not None and cue and "grounded_unreadable" in counts:
        g = counts[(counts["model"] == str(entry["rows"][row]).split(" · ")[0]) & (counts["cue"] == cue)]
        extra = int(g["grounded_unreadable"].sum()) if len(g) else 0
    n = (f"{int(b[1]) + extra} culture-referential explanations ({int(b[1])} with a readable answer)" if extra
         else f"{int(b[1])} culture-referential explanations")
    den = ("the same number of culture-referential explanations" if a[1] == b[1] and not extra
           else f"{n} (paper {int(a[1])})")
    return (f"the authors' released verdicts give {den}; of those, {int(b[0])} end in a wrong answer in the "
            f"released answers, where the paper counts {int(a[0])}")


_READINGS: dict = {}


def gold_readings(entry: dict, profile: str) -> tuple[pd.DataFrame, dict] | None:
    """Table III: per published cell, our counts under each gold
    reading (:mod:`medaudit.prep.goldreading`) on our kept items and on the paper's
    items, and which reading reproduces the cell
    (:func:`medaudit.studies.cultural.table3.cell_readings`), recounted from the item-level rows
    notebook 07 writes (``outputs/<profile>/data/<gold_readings>.jsonl``).
    None when the entry has no ``gold_readings`` or the rows are not written."""
    name = entry.get("gold_readings")
    p = paths.run_input(profile, "data", f"{name}.jsonl") if name else None
    if p is None or not p.exists():
        return None
    key = (str(p), p.stat().st_mtime_ns)
    if key not in _READINGS:
        from medaudit.studies import cultural
        from medaudit.studies.cultural import table3

        config = cultural.load_config()
        cue = {config.cue_label(q, long=True): q for q in config.cue_names}
        expl = pd.read_json(p, orient="records", lines=True, dtype=False)
        cells_ = []
        for row, vals in entry["published"].items():
            for col, v in zip(entry["columns"], vals):
                w, n = numbers(v)[:2]
                cells_.append({"row": row, "column": col, "model": str(entry["rows"][row]).split(" · ")[0],
                               "cue": cue[col], "published": v, "wrong": int(w), "grounded": int(n)})
        _READINGS.clear()
        _READINGS[key] = table3.cell_readings(expl, pd.DataFrame(cells_), config)
    return _READINGS[key]


def readings_note(found: dict) -> str:
    """How the paper's items were read from its denominators (:func:`medaudit.studies.cultural.table3.paper_items`)."""
    head = (f"The published denominators do not depend on the gold reading, so they say which items the paper "
            f"counted: {found['targets']} published cells of {found['models']} released models")
    if found["size"] is None:
        return (f"{head}; no set of at most 2 further items dropped from ours makes them all ours, so the cells are "
                f"recounted on our kept items only.")
    if found["size"] == 0:
        return f"{head}, every one equal to ours on our kept items ({found['kept']}): the paper's items are ours."
    if found["extra"] is None:
        return (f"{head}; {found['matches']} sets of {found['size']} further items fit them all, so the data "
                f"cannot tell which the paper dropped; the cells are recounted on our kept items only.")
    return (f"{head}; of our {found['candidates']} kept items, exactly one set of {found['size']} — "
            f"{', '.join(found['extra'])} — makes all {found['targets']} ours when dropped too, leaving "
            f"{found['kept']} items. Our counting rule keeps {'it' if found['size'] == 1 else 'them'}: the files "
            f"here do not show why the paper dropped {'it' if found['size'] == 1 else 'them'} (§III.A: partial "
            f"answers; presumably of a model whose answers are not here).")


def _gold_reading(entry, row, col, pub, ours, profile):
    """Table III: our count with each item's own gold beside the authors'
    positional reading, on our kept items and on the paper's items (read
    from its denominators), and which reproduces the published cell."""
    got = gold_readings(entry, profile)
    if got is None:
        return None
    table, found = got
    g = table[(table["row"] == row) & (table["column"] == col)]
    if g.empty or g.iloc[0]["reproduced by"] == "not released":
        return None
    r = g.iloc[0]
    text = (f"wrong / culture-referential explanations on our {r['items']} kept items: {r['own gold']} with each "
            f"item's own gold, {r['positional gold']} under the authors' positional reading (the p-th kept item "
            f"scored against the gold of the p-th item of the unfiltered list)")
    if found.get("extra"):
        items, own, pos = r["paper's items"], r["own gold, paper's items"], r["positional gold, paper's items"]
        text += f"; on the paper's items ({items}, read from its denominators): own gold {own}, positional {pos}"
    return f"{text}. The published {pub[col]} is reproduced by: {r['reproduced by']}."


def _far_from_paper(entry, row, col, pub, ours, profile):
    """Seed 004 Table 3: a differing cell of a released model, read with the
    distance ``released add`` printed when the file was added
    (:func:`distance` over the model's CFR and AD cells): FAR FROM THE
    PAPER'S ROW (not the model the paper measured?) or within the spread of
    two runs of one model."""
    table = _our_table(profile, entry["ours"])
    model, _, pair = str(entry["rows"][row]).partition(" · ")
    if table is None or not {"model", "seed_pair", "n", "CFR", "AD", "se_paired"} <= set(table.columns):
        return None
    mine = table[table["model"].astype(str) == model]
    cols = list(entry["columns"])
    paper = {(p, m): float(v[cols.index(m)]) for label, v in entry["published"].items()
             for mod, _, p in [str(entry["rows"][label]).partition(" · ")] if mod == model for m in ("CFR", "AD")}
    comp = distance(mine, paper)
    if comp.empty:
        return None
    far = comp[comp["far"]]
    crit = comp.attrs["critical z"]
    here = comp[(comp["seed_pair"] == pair) & (comp["measure"] == col)]
    cell = (f" This cell: ours {here['ours'].iloc[0]:.4f}, paper {here['paper'].iloc[0]:.4f}, z "
            f"{here['z'].iloc[0]:+.1f}." if len(here) else "")
    if len(far):
        worst = comp.loc[comp["z"].abs().idxmax()]
        return (f"FAR FROM THE PAPER'S ROW {model!r} in {len(far)} of {len(comp)} CFR/AD cells (|z| > {crit:.2f}, "
                f"family-wise {FAR_ALPHA:g}; largest: {worst['cell']} {worst['ours']:.4f} vs {worst['paper']:.4f}, "
                f"z {worst['z']:+.1f}): the answers added under this name may not be the model the paper "
                f"measured (released add warned so).{cell}")
    return (f"{model}'s answers are within the spread of two runs of one model in all {len(comp)} CFR/AD cells "
            f"(|z| ≤ {crit:.2f}, family-wise {FAR_ALPHA:g}): a rerun may differ this much.{cell}")


REASONS = {"delta_from_printed": _delta_from_printed, "far_from_paper": _far_from_paper, "gold_reading": _gold_reading,
           "cochran_released": _cochran,
           "complete_items": _complete_items, "flip_neutral": _flip_neutral, "judge_counts": _judge_counts,
           "neutral_as_original": _neutral_as_original}


NOT_RELEASED = "not released"


def _released_models(path: str | Path | None = None) -> set[str]:
    """Every model named under ``models`` in ``params/released.yaml``."""
    path = Path(path) if path else paths.params("released.yaml")
    if not path.is_file():
        return set()
    specs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {str(m) for r in specs.values() if isinstance(r, dict) for m in (r.get("models") or {})}


def cells(entry: dict, ours: pd.DataFrame | None, profile: str) -> pd.DataFrame:
    """Every published cell of a ``rows`` entry beside ours: row, column,
    published, ours, status (equal | differs | missing) and why."""
    out = []
    digits = int(entry.get("digits", 2))
    reasons = entry.get("reasons") or []
    general = " ".join(entry["differs"].split())
    by_row = {} if ours is None else {r["row"]: r for r in ours.to_dict("records")
                                      if not str(r.get("paper", "")).startswith(NOT_IN_PAPER)}
    released_models = _released_models()
    for row, vals in entry["published"].items():
        pub = dict(zip(entry["columns"], vals))
        mine = by_row.get(row)
        model = str(entry["rows"][row]).split(" · ")[0]
        for col in entry["columns"]:
            o = None if mine is None else mine.get(col)
            if mine is None and ours is not None and model not in released_models:
                out.append({"row": row, "column": col, "published": pub[col], "ours": "–", "status": NOT_RELEASED,
                            "why": f"no answers of {model} in params/released.yaml (python -m medaudit.released add)"})
                continue
            if mine is None or col not in mine:
                out.append({"row": row, "column": col, "published": pub[col], "ours": "–", "status": "missing",
                            "why": f"no row for {entry['rows'][row]} in our table under this profile"})
                continue
            if same(pub[col], o, digits):
                out.append({"row": row, "column": col, "published": pub[col], "ours": o, "status": "equal", "why": ""})
                continue
            why = None
            for r in reasons:
                if re.search(r.get("columns", ".*"), col) and row in r.get("rows", [row]):
                    why = REASONS[r["why"]](entry, row, col, pub, o, profile)
                    if why:
                        break
            out.append({"row": row, "column": col, "published": pub[col], "ours": o, "status": "differs",
                        "why": why or general})
    return pd.DataFrame(out, columns=["row", "column", "published", "ours", "status", "why"])


def _median(df: pd.DataFrame, prefix: str, columns) -> float | None:
    vals = pd.to_numeric(pd.concat([df[f"{prefix} {c}"] for c in columns if f"{prefix} {c}" in df.columns]
                                   or [pd.Series(dtype=float)]), errors="coerce")
    vals = vals.dropna()              # inf (none detectable) stays: it counts in the median
    return float(vals.median()) if len(vals) else None


def pool_note(entry: dict, profile: str) -> str | None:
    """How this run's question pool changes the stars of a delta table, read
    from the data: the eligible and answered items of
    the selection funnel (``pool.funnel``), the paired items and the MDE of
    our cells (the table's ``n …`` and ``mde …`` columns: median over the
    cells), and what the same test would detect with the seed's pool
    (``pool.seed_n``): the MDE recomputed at the seed's n from the cells'
    median discordant share (``psi …``; exact power of the McNemar test the
    cells run, :func:`medaudit.stats.testpower.mcnemar_mde`), not scaled by √n,
    which at n = 8 is off by a sixth. Seed 000 §3.1 samples its 2,364
    questions from the whole MedQA pool; a profile that reads one split
    (the shipped test split, as every profile here) has fewer to draw from.
    None when the entry has no ``pool`` or the tables are missing."""
    spec = entry.get("pool")
    if not spec:
        return None
    funnel, ours = _our_table(profile, spec["funnel"]), _our_table(profile, entry["ours"])
    if funnel is None or ours is None or funnel.empty:
        return None
    steps = funnel[~funnel["step"].astype(str).str.startswith("psychiatry subset")]
    sampled = str(steps["step"].iloc[-1]).startswith("sampled")
    answered = int(steps["n"].iloc[-1])
    eligible = int(steps["n"].iloc[-2]) if sampled and len(steps) > 1 else answered
    deltas = [c for c in entry["columns"] if c != entry["columns"][0]]
    n, mde, psi = _median(ours, "n", deltas), _median(ours, "mde", deltas), _median(ours, "psi", deltas)
    seed_n = int(spec["seed_n"])
    files = rules_used(profile, spec.get("funnel_notebook", "01_data_prep"), ["medqa_files"])["medqa_files"]
    src = f" of {', '.join(map(str, files))}" if isinstance(files, list) else ""
    head = (f"This run's pool: {eligible:,} eligible items{src} ({answered:,} answered); the seed "
            f"drew {seed_n:,} from the whole MedQA pool")
    if not n or not mde:
        return head + "."
    ours_txt = ("detect, with power 0.8 at α = 0.05, no change at all (median MDE: none detectable at n)"
                if np.isinf(mde) else
                f"detect, with power 0.8 at α = 0.05, only changes of at least {mde:.2f} points (median MDE)")
    text = f"{head}. Our cells rest on {n:g} paired questions (median) and {ours_txt}"
    if psi:
        at_seed = 100 * testpower.mcnemar_mde(seed_n, psi, test="auto")
        text += (f"; at the same discordance (median ψ {psi:.3f}) the same test on {seed_n:,} questions "
                 f"would detect {at_seed:.2f}")
        if np.isfinite(mde):
            text += f". A star here needs a change {mde / at_seed:.1f}× as large as a star in the seed"
    return text + (". An unstarred cell is no evidence of no change: it is read by its verdict (04_paired_tests), "
                   "equivalence only where its 95% interval lies inside the margin.")


def rules_used(profile: str, notebook: str, names) -> dict:
    """{parameter: value} for ``names``, as the notebook was last run under
    ``profile``: the parameters papermill recorded in the executed notebook
    (``outputs/<profile>/notebooks/``, command-line overrides included), else
    the profile file's value, else "unknown"."""
    import json

    ran: dict = {}
    nb = paths.run_outputs(profile, "notebooks", f"{notebook}.ipynb")
    if nb.is_file():
        ran = json.loads(nb.read_text(encoding="utf-8")).get("metadata", {}).get("papermill", {}).get("parameters", {})
    prof_file = paths.project_root() / "params" / f"{profile}.yaml"
    prof = (yaml.safe_load(prof_file.read_text(encoding="utf-8")) or {}) if prof_file.is_file() else {}
    return {r: ran.get(r, prof.get(r, "unknown")) for r in names}


_N_COLUMN = re.compile(r"(^|· )(n|N|n_items|questions|dialogs|vignettes|items|pairs)( .*)?$")


def run_note(entry: dict, profile: str) -> str:
    """What this run's own table of an entry rests on, computed from it (an
    entry without ``rows``: our model's answers, not a released model's):
    its rows, the N behind its cells (the table's n columns) and the step one
    unit moves a percentage by, and the Base column's range beside the
    entry's ``chance`` (the accuracy of guessing, in %), where it has one.
    "" when the table was not written. The entry's own ``differs`` says
    only what holds of every run (the seed's design against ours); the
    numbers of a run are said here."""
    df = _our_table(profile, entry["ours"])
    if df is None or "rows" in entry:
        return ""
    if df.empty:
        return "This run's table has no rows."
    key = entry["key"] if isinstance(entry["key"], str) else entry["key"][0]
    names = list(dict.fromkeys(df[key].astype(str))) if key in df.columns else []
    text = f"This run's table: {len(df)} row{'s' if len(df) != 1 else ''}"
    text += f" ({', '.join(names[:6])}{', …' if len(names) > 6 else ''})" if names else ""
    ns = pd.concat([pd.to_numeric(df[c], errors="coerce") for c in df.columns if _N_COLUMN.match(str(c))]
                   or [pd.Series(dtype=float)]).dropna()
    ns = ns[ns > 0]
    unit = entry.get("unit", "questions")
    if len(ns):
        lo, hi = int(ns.min()), int(ns.max())
        text += f", its cells resting on {lo:,} {unit}" if lo == hi else f", its cells resting on {lo:,}–{hi:,} {unit}"
        text += f" (one of them moves a percentage by {100 / lo:.1f} points)" if lo else ""
        seed_n = (entry.get("pool") or {}).get("seed_n")
        text += f", where the seed's rest on {seed_n:,}" if seed_n else ""
    base = pd.to_numeric(df["Base"], errors="coerce").dropna() if "Base" in df.columns else pd.Series(dtype=float)
    if len(base):
        b = f"{base.min():.1f}" if base.min() == base.max() else f"{base.min():.1f}–{base.max():.1f}"
        text += f"; Base {b}%"
        if entry.get("chance") is not None:
            c = float(entry["chance"])
            where = ("at or below" if base.max() <= c else "within 10 points of" if base.max() - c <= 10
                     else "above")
            text += f", {where} chance ({c:g}%)"
    return text + "."


def compare(profile: str, path: str | Path | None = None) -> list[Comparison]:
    """Every entry of ``params/published.yaml`` (or ``path``) as a :class:`Comparison`
    for ``profile``, with the sentence on why the numbers differ, the run's notes and, where
    there are released answers, the cell-by-cell comparison."""
    out = []
    for e in load(path):
        ours = ours_frame(e, profile)
        differs = " ".join(" ".join((e["differs"], run_note(e, profile))).split())
        pool = pool_note(e, profile)
        readings = gold_readings(e, profile)
        out.append(Comparison(e["study"], e["what"], e["notebook"], published_frame(e), ours,
                              f"{differs} {pool}" if pool else differs, e["ours"],
                              cells(e, ours, profile) if "rows" in e else None,
                              rules_used(profile, e["notebook"], e.get("rules") or []),
                              [] if ours is None or "rows" not in e else
                              [r if p == NOT_IN_PAPER else f"{r} ({p.removeprefix(NOT_IN_PAPER + '; ')})"
                               for r, p in zip(ours["row"], ours["paper"]) if p.startswith(NOT_IN_PAPER)],
                              None if readings is None else readings[0],
                              None if readings is None else readings_note(readings[1])))
    return out
