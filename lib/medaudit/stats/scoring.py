"""Single-answer scoring shared by the studies: one answer per question
(first sample or majority), the gold letter attached, the complete-case rule
(an item kept only when it is parsed in every condition of its unit), and
accuracy per unit and condition. An unparsed answer is never counted wrong:
its ``correct`` is NaN and it is left out of the accuracy (or, under the
complete-case rule, its whole item is).

A *unit* is what one row of a study's table describes: a model, a prompt
format and an option form (:data:`UNIT_COLS`), where the table has them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.parse import TRUNCATED

UNIT_COLS = ("model", "prompt_format", "form")


def units_of(df: pd.DataFrame, units: Sequence[str] | None = None) -> list[str]:
    """The unit columns (default :data:`UNIT_COLS`) that ``df`` has."""
    return [u for u in (units or UNIT_COLS) if u in df.columns]


def attach_gold(responses: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """Add ``gold`` (the item's ``answer_idx``) by item_id (and form when both
    tables have one). Letters must be those of the same option form."""
    keys = ["item_id"] + (["form"] if "form" in responses.columns and "form" in items.columns else [])
    gold = items[keys + ["answer_idx"]].rename(columns={"answer_idx": "gold"})
    return responses.drop(columns=["gold"], errors="ignore").merge(gold, on=keys, how="left", validate="m:1")


def question_table(df: pd.DataFrame, items: pd.DataFrame | None = None, how: str = "first",
                   units: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (unit, item, condition) with parsed_answer, gold, parsed, correct.

    ``df`` is a per-question table, or the per-sample responses table of
    :mod:`medaudit.llm.store` (column ``sample``). With several samples per
    question, ``how="first"`` keeps the lowest sample number (the seed drew
    one answer per question), ``how="majority"`` the most frequent parsed
    answer (ties: the one drawn first); a question whose kept answer is
    unparsed has ``parsed`` False and ``correct`` NaN, never counted wrong;
    ``truncated`` marks one cut by the token limit (``parse_status``
    "truncated"), which no rule counts wrong.
    ``gold`` comes from the table or, when absent, from ``items``.
    """
    if "gold" not in df.columns:
        if items is None:
            raise ValueError("no 'gold' column: pass the items table")
        df = attach_gold(df, items)
    u = units_of(df, units)
    keys = u + ["item_id", "condition"]
    if "sample" in df.columns and df.duplicated(keys).any():
        d = df.sort_values(keys + ["sample"], kind="stable")
        if how == "first":
            df = d.drop_duplicates(keys, keep="first")
        elif how == "majority":
            def vote(g: pd.DataFrame) -> pd.Series:
                p = g["parsed_answer"].dropna()
                if p.empty:
                    return g.iloc[0]
                counts = p.value_counts()
                best = counts[counts == counts.max()].index
                first = p[p.isin(best)].iloc[0]
                return g[g["parsed_answer"] == first].iloc[0]
            df = d.groupby(keys, sort=False, dropna=False).apply(vote, include_groups=False).reset_index()
        else:
            raise ValueError("how must be 'first' or 'majority'")
    elif df.duplicated(keys).any():
        raise ValueError(f"duplicate rows for {keys}")
    out = df[keys + ["parsed_answer", "gold"]].copy()
    out["parsed"] = out["parsed_answer"].notna() & (out["parsed_answer"].astype(object) != "")
    # cut by the token limit (parse_status "truncated"): unparsed, and no error of the model's
    out["truncated"] = (df["parse_status"].eq(TRUNCATED).to_numpy() if "parse_status" in df.columns
                        else np.zeros(len(out), bool))
    out["correct"] = np.where(out["parsed"], (out["parsed_answer"] == out["gold"]).astype(float), np.nan)
    return out.reset_index(drop=True)


@dataclass
class Retained:
    """Questions kept by :func:`drop_incomplete`, and what was dropped."""

    table: pd.DataFrame           # the kept rows
    summary: pd.DataFrame         # per unit: items, complete, retained, dropped, unparsed questions, rule
    dropped: pd.DataFrame         # per unit and dropped item: the conditions unparsed or missing

    def __iter__(self):
        return iter((self.table, self.summary))


COUNTING_RULES = ("across_models", "per_model")


def drop_incomplete(qt: pd.DataFrame, conditions: Sequence[str] | None = None,
                    prompt_formats: Sequence[str] | None = None,
                    units: Sequence[str] | None = None,
                    across: Sequence[str] | None = None) -> Retained:
    """The seed's rule for incomplete outputs (§III.A: "we removed partial
    answers and retained 147 questions per setting").

    Within each unit (model × prompt_format [× form]), an item is *complete*
    if it has a parsed answer in EVERY condition (``conditions``, default:
    all conditions present for that unit); an incomplete item has all its
    rows dropped, so every condition is scored on the same questions
    (``I_s`` of eq. 1 is then one set per unit).

    ``across`` (a list of model names) is the rule "complete across the
    models" (the seed's 147 are one set for all its models): the units of
    these models that share the other unit columns (prompt format, form)
    keep only the items complete in *every* one of them, so an item one
    model left unparsed is dropped from all of them. Units of other models
    (e.g. a profile's own model, which answers a subset) keep the per-model
    rule. ``None`` or ``[]``: the per-model rule everywhere.

    ``prompt_formats`` restricts the rule to those formats (the others are
    returned unchanged); the default applies it everywhere. Unit-level
    counts are in ``summary`` (``complete``: the unit's own complete items;
    ``retained``: those kept under the rule in force, ``rule``) and the
    dropped items in ``dropped``, with the conditions that failed in this
    unit and ``unparsed by``: the models whose incompleteness dropped it.
    """
    u = units_of(qt, units)
    pool = set(across or [])
    groups = list(qt.groupby(u, sort=False, dropna=False)) if u else [((), qt)]
    info = []                       # (position, unit, rows, rows in conds, conds, items, complete items)
    kept, summ, drop = [], [], []
    for pos, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        unit = dict(zip(u, key))
        if prompt_formats is not None and unit.get("prompt_format") not in prompt_formats:
            kept.append((pos, g))
            n = g["item_id"].nunique()
            summ.append({"_pos": pos, **unit, "items": n, "complete": n, "retained": n, "dropped": 0,
                         "unparsed questions": int((~g["parsed"]).sum()), "rule applied": False, "rule": ""})
            continue
        conds = list(conditions) if conditions is not None else list(dict.fromkeys(g["condition"]))
        gg = g[g["condition"].isin(conds)]
        ok = gg[gg["parsed"]].groupby("item_id")["condition"].nunique()
        items = list(dict.fromkeys(g["item_id"]))
        complete = {i for i in items if ok.get(i, 0) == len(conds)}
        info.append((pos, unit, g, gg, conds, items, complete))

    def pooled(unit) -> bool:
        return unit.get("model") in pool

    def rest(unit) -> tuple:
        return tuple((k, v) for k, v in unit.items() if k != "model")

    common: dict[tuple, set] = {}
    owners: dict[tuple, list] = {}
    for _, unit, _, _, _, items, complete in info:
        if pooled(unit):
            r = rest(unit)
            common[r] = set(complete) if r not in common else common[r] & complete
            owners.setdefault(r, []).append((unit.get("model"), complete))
    for pos, unit, g, gg, conds, items, complete in info:
        keep = common[rest(unit)] if pooled(unit) else complete
        kept.append((pos, g[g["item_id"].isin(keep)]))
        for i in items:
            if i in keep:
                continue
            have = set(gg.loc[(gg["item_id"] == i) & gg["parsed"], "condition"])
            present = set(gg.loc[gg["item_id"] == i, "condition"])
            by = ([m for m, comp in owners[rest(unit)] if i not in comp] if pooled(unit)
                  else [unit.get("model", "")])
            drop.append({**unit, "item_id": i,
                         "unparsed": ", ".join(c for c in conds if c in present and c not in have),
                         "missing": ", ".join(c for c in conds if c not in present),
                         "unparsed by": ", ".join(str(m) for m in by)})
        summ.append({"_pos": pos, **unit, "items": len(items), "complete": len(complete),
                     "retained": len(keep & set(items)),
                     "dropped": len(items) - len(keep & set(items)), "unparsed questions": int((~gg["parsed"]).sum()),
                     "rule applied": True, "rule": "across_models" if pooled(unit) else "per_model"})
    kept = [f for _, f in sorted(kept, key=lambda t: t[0])]
    summ = [{k: v for k, v in r.items() if k != "_pos"} for r in sorted(summ, key=lambda r: r["_pos"])]
    table = pd.concat(kept, ignore_index=True) if kept else qt.iloc[:0]
    return Retained(table, pd.DataFrame(summ),
                    pd.DataFrame(drop, columns=[*u, "item_id", "unparsed", "missing", "unparsed by"]))


def accuracy(qt: pd.DataFrame, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Eq. 1 per unit and condition: n (questions scored), n_correct,
    accuracy in %. Unparsed questions (NaN ``correct``) are not scored; after
    :func:`drop_incomplete` there are none."""
    u = units_of(qt, units)
    s = qt[qt["correct"].notna()]
    g = s.groupby(u + ["condition"], sort=False)["correct"]
    out = pd.DataFrame({"n": g.size(), "n_correct": g.sum().astype(int)}).reset_index()
    out["accuracy"] = 100 * out["n_correct"] / out["n"]
    return out
