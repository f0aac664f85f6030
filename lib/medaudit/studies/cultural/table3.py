"""Seed 003's Table III under both gold readings, and how the published cells arise.

Table III (seed 003 §III.B): "the denominator is the number of culturally
induced explanations, and the numerator is the number with incorrect final
answers", pooled over the three cultures. The denominators are the authors'
judge verdicts (released); the numerators depend on which gold letter an
answer is compared with (:mod:`medaudit.prep.goldreading`): each item's own
(``own``, eq. 1) or the authors' positional reading (``positional``).

* :func:`readings` — per model and cue, the counts under both readings on the
  questions kept (notebook 07's ``07_table3_readings``);
* :func:`finding` — the sentence notebook 07 prints from them;
* :func:`explanation_rows` — the item-level rows the published page recounts
  (``outputs/<profile>/data/07_table3_explanations.jsonl``);
* :func:`paper_items` — the published denominators do not depend on the gold
  reading, so they say which items the paper counted: the fewest further
  items (beyond the kept ones) whose drop makes every published denominator
  of the released models ours;
* :func:`cell_readings` — per published cell: our counts under both readings
  on our kept items and on the paper's, and which reading reproduces it.
"""
from __future__ import annotations

from itertools import combinations
from typing import Sequence

import numpy as np
import pandas as pd

from .config import CulturalConfig
from .judge import judge_counts, judged
from medaudit.prep import goldreading
from medaudit.prep.goldreading import OWN, POSITIONAL, READINGS
from medaudit.stats.scoring import units_of

LABELS = {OWN: "own gold", POSITIONAL: "positional gold"}


def _count_both(kept: pd.DataFrame, before: pd.DataFrame, labels: pd.DataFrame | None,
                config: CulturalConfig, order: Sequence[str] | None) -> pd.DataFrame:
    """judge_counts under each reading, side by side (``labels`` None: the
    rows carry ``judge_label`` already)."""
    out = None
    for r in READINGS:
        q = goldreading.rescore(kept, before, r, order)
        q = judged(q, labels) if labels is not None else q
        c = judge_counts(q, config)
        c = c[c["cue"].isin(config.cue_names)]
        keys = [k for k in c.columns if k in (*units_of(c), "cue")]
        c = c.rename(columns={"grounded_wrong": f"wrong ({LABELS[r]})", "error_rate": f"error rate ({LABELS[r]}, %)"})
        if out is None:
            out = c[[*keys, "questions", "grounded", f"wrong ({LABELS[r]})", f"error rate ({LABELS[r]}, %)"]]
        else:
            out = out.merge(c[[*keys, f"wrong ({LABELS[r]})", f"error rate ({LABELS[r]}, %)"]], on=keys, how="left")
    return out.reset_index(drop=True)


def readings(kept: pd.DataFrame, before: pd.DataFrame, labels: pd.DataFrame, config: CulturalConfig,
             order: Sequence[str] | None = None) -> pd.DataFrame:
    """Table III's counts per unit and cue under both readings: ``items`` (kept
    items of the unit), ``questions`` (item × culture rows), ``grounded``
    (the denominator: culture-referential explanations with a readable answer),
    and per reading the wrong ones and the error rate (%). ``kept`` is
    :func:`medaudit.stats.scoring.drop_incomplete`'s table, ``before`` the question
    table before the drop, ``labels`` :func:`medaudit.studies.cultural.judge_labels`."""
    c = _count_both(kept, before, labels, config, order)
    u = units_of(c)
    items = kept.groupby(u, sort=False, dropna=False)["item_id"].nunique().rename("items").reset_index()
    c = c.merge(items, on=u, how="left")
    return c[[*u, "cue", "items", *[x for x in c.columns if x not in (*u, "cue", "items")]]]


READING_TEXT = {OWN: "each item's own gold letter",
                POSITIONAL: "the positional gold (the p-th kept item against the gold of the p-th item of the "
                            "unfiltered list)"}


def finding(r: pd.DataFrame) -> str:
    """What :func:`readings` says of seed 003's claim (§III.B: "more than half
    of culturally grounded explanations end with incorrect answers for every
    model"), per model pooled over the cues, under each reading."""
    g = r[r["grounded"] > 0]
    if g.empty:
        return "No culture-referential explanation with a readable answer among the questions kept: nothing to count."
    u = [c for c in units_of(g) if c == "model" or g[c].nunique() > 1]
    wrong = {x: f"wrong ({LABELS[x]})" for x in READINGS}
    tot = g.groupby(u, sort=False)[["grounded", *wrong.values()]].sum()
    parts = []
    for x in READINGS:
        w, n = tot[wrong[x]], tot["grounded"]
        per = "; ".join(f"{' · '.join(map(str, k if isinstance(k, tuple) else (k,)))} {int(a)} of {int(b)} "
                        f"({100 * a / b:.1f}%)" for k, a, b in zip(tot.index, w, n))
        cells, models = int((g[wrong[x]] * 2 > g["grounded"]).sum()), int((w * 2 > n).sum())
        verdict = ("holds" if models == len(tot) else
                   f"does not hold: more than half are wrong for {models} of {len(tot)} models")
        parts.append(f"With {READING_TEXT[x]}: {per} wrong (more than half in {cells} of {len(g)} model × cue "
                     f"cells); the seed's claim {verdict}.")
    return " ".join(parts)


def explanation_rows(kept: pd.DataFrame, before: pd.DataFrame, labels: pd.DataFrame,
                     order: Sequence[str] | None = None) -> pd.DataFrame:
    """Every question row (before the drop) of the units that have verdicts,
    with its verdict (``judge_label``; empty where none), whether the drop
    kept it (``kept``) and its ``position`` in the item order: what the
    published page needs to recount Table III on another item set."""
    u = units_of(labels)
    lab = labels[[*u, "item_id", "condition", "judge_label"]]
    units = lab[u].drop_duplicates()
    rows = before.merge(units, on=u, how="inner").merge(lab, on=[*u, "item_id", "condition"], how="left")
    k = kept[[*u, "item_id"]].drop_duplicates().assign(kept=True)
    rows = rows.merge(k, on=[*u, "item_id"], how="left")
    rows["kept"] = rows["kept"].eq(True)
    pos = {i: n for n, i in enumerate(order if order is not None else sorted(rows["item_id"].unique()))}
    rows["position"] = rows["item_id"].map(pos)
    cols = [*u, "item_id", "position", "condition", "parsed", "parsed_answer", "gold", "correct", "judge_label", "kept"]
    return rows[cols].sort_values([*u, "position", "condition"], kind="stable").reset_index(drop=True)


def _order(expl: pd.DataFrame) -> list[str]:
    return list(expl.drop_duplicates("item_id").sort_values("position", kind="stable")["item_id"])


def paper_items(expl: pd.DataFrame, targets: pd.DataFrame, config: CulturalConfig,
                max_extra: int = 2) -> dict:
    """The items the paper counted, read from its denominators.

    ``expl``: :func:`explanation_rows`; ``targets``: model, cue and
    ``grounded`` (a published denominator) for every published cell of a
    released model. The denominators (YES verdicts with a readable answer)
    do not depend on the gold reading. Searches the fewest further items
    (0 to ``max_extra``), dropped from every model's kept items, whose drop
    makes every target ours. Returns ``{"extra": tuple of item ids or None,
    "matches": how many sets of that size fit, "size": that size or None,
    "kept": the items each model keeps then}``; ``extra`` is None when no set
    fits or several do (the data cannot tell which)."""
    k = expl[expl["kept"]].copy()
    k["cue"] = [config.split(c)[1] for c in k["condition"]]
    yes = k[(k["judge_label"] == "YES") & k["parsed"].astype(bool) & k["cue"].isin(config.cue_names)]
    t = targets.set_index(["model", "cue"])["grounded"].astype(int)
    none = {"extra": None, "matches": 0, "size": None, "kept": None, "targets": len(t),
            "models": len(set(m for m, _ in t.index)), "candidates": None}
    if t.empty:
        return none
    items = sorted(k["item_id"].unique(), key=dict(zip(k["item_id"], k["position"])).__getitem__)
    per = yes.groupby(["model", "cue", "item_id"]).size()
    d = np.zeros((len(t), len(items)), dtype=int)      # d[cell, item]: the cell's denominator's share from the item
    col = {i: n for n, i in enumerate(items)}
    for n, (m, q) in enumerate(t.index):
        if (m, q) in per.index.droplevel(2):
            s = per.loc[(m, q)]
            d[n, [col[i] for i in s.index]] = s.to_numpy()
    have = d.sum(axis=1)
    gap = have - t.to_numpy()                           # what the further drop must take away, per cell
    for size in range(0, max_extra + 1):
        if size == 0:
            fits = [()] if not gap.any() else []
        elif size == 1:
            fits = [(items[j],) for j in np.flatnonzero((d == gap[:, None]).all(axis=0))]
        else:
            fits = [tuple(items[j] for j in c) for c in combinations(range(len(items)), size)
                    if (d[:, list(c)].sum(axis=1) == gap).all()]
        if fits:
            return {**none, "extra": fits[0] if len(fits) == 1 else None, "matches": len(fits), "size": size,
                    "kept": len(items) - size, "candidates": len(items)}
        if (gap < 0).any():                              # we count fewer than the paper: no drop can help
            break
    return {**none, "candidates": len(items)}


def _cell(w, n) -> str:
    return "–" if pd.isna(n) else f"{int(w)} / {int(n)}"


def cell_readings(expl: pd.DataFrame, cells: pd.DataFrame, config: CulturalConfig,
                  max_extra: int = 2) -> tuple[pd.DataFrame, dict]:
    """Per published Table III cell (``cells``: row, column, model, cue,
    published (the printed text), wrong and grounded (its two counts)), our counts under both readings on our kept
    items and on the paper's items (:func:`paper_items`), and which reading
    reproduces the published numerator and denominator there. Returns the
    table and :func:`paper_items`' answer."""
    released = set(expl["model"])
    pub = cells.rename(columns={"wrong": "pw", "grounded": "pn"})
    targets = pub[pub["model"].isin(released)].rename(columns={"pn": "grounded"})
    found = paper_items(expl, targets[["model", "cue", "grounded"]], config, max_extra)
    order = _order(expl)

    def counts(rows):
        return _count_both(rows, expl, None, config, order).set_index(["model", "cue"])

    ours = counts(expl[expl["kept"]])
    extra = found["extra"]
    paper = counts(expl[expl["kept"] & ~expl["item_id"].isin(extra)]) if extra is not None else None
    n_ours = expl[expl["kept"]].groupby("model")["item_id"].nunique()
    out = []
    for _, c in pub.iterrows():
        key = (c["model"], c["cue"])
        r = {"row": c["row"], "column": c["column"], "published": c["published"]}
        if c["model"] not in released:
            out.append({**r, "items": "–", "own gold": "–", "positional gold": "–", "paper's items": "–",
                        "own gold, paper's items": "–", "positional gold, paper's items": "–",
                        "reproduced by": "not released",
                        "needs": f"the released answers and verdicts of {c['model']} (not shipped)"})
            continue
        o = ours.loc[key] if key in ours.index else None
        r["items"] = int(n_ours.get(c["model"], 0))
        for x in READINGS:
            r[LABELS[x]] = "–" if o is None else _cell(o[f"wrong ({LABELS[x]})"], o["grounded"])
        if paper is None:
            r.update({"paper's items": "not found" if found["matches"] == 0 else f"{found['matches']} sets fit",
                      "own gold, paper's items": "–", "positional gold, paper's items": "–"})
            base = o
        else:
            p = paper.loc[key] if key in paper.index else None
            r["paper's items"] = (f"{r['items'] - len(extra)}: ours less {', '.join(extra)}" if extra
                                  else f"{r['items']}: ours")
            for x in READINGS:
                r[f"{LABELS[x]}, paper's items"] = ("–" if p is None else
                                                    _cell(p[f"wrong ({LABELS[x]})"], p["grounded"]))
            base = p
        hits = [LABELS[x] for x in READINGS if base is not None and int(base["grounded"]) == int(c["pn"])
                and int(base[f"wrong ({LABELS[x]})"]) == int(c["pw"])]
        r["reproduced by"] = " and ".join(hits) or "neither"
        r["needs"] = ("" if not extra else
                      f"the drop of {', '.join(extra)}, which the answers here do not call for (read from the "
                      f"published denominators; presumably partial in a model whose answers are not here)")
        out.append(r)
    return pd.DataFrame(out), found
