"""Which gold letter a kept answer is scored against.

Seed 003 defines correctness per item (§II.B, eq. 1: "base questions with
gold option y_i", an answer to variant i is right when it equals y_i), and
drops "partial answers" before counting (§III.A: "retained 147 questions per
setting"). Two readings of that are kept here:

* ``own`` — each kept item is compared with **its own** gold letter, as eq. 1
  says. The default of every profile.
* ``positional`` — the reading under which the authors' released answers and
  verdicts reproduce every published Table III numerator: after the drop, the
  *p*-th kept item is compared with the gold letter of the *p*-th item of the
  **unfiltered** list. Items before the first dropped one keep their own
  gold; after *k* drops an item is compared with the gold of the item *k*
  places earlier. This is what results when the answers are filtered and the
  gold list is not.

:func:`rescore` applies a reading to a question table of
:func:`medaudit.stats.scoring.question_table` (after
:func:`medaudit.stats.scoring.drop_incomplete`); nothing else changes (parsed
answers, which items are kept). It is a pure function of its arguments.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.stats.scoring import units_of

OWN, POSITIONAL = "own", "positional"
READINGS = (OWN, POSITIONAL)


def _ordered(items, order: Sequence[str] | None, what: str) -> list[str]:
    """``items`` in the order of ``order`` (default: sorted item ids, the file
    order of ids like ``cult-007``); an item ``order`` lacks is an error."""
    items = list(dict.fromkeys(items))
    if order is None:
        return sorted(items)
    pos = {item: i for i, item in enumerate(order)}
    missing = [i for i in items if i not in pos]
    if missing:
        raise ValueError(f"{what}: items {missing[:5]} are not in the item order given")
    return sorted(items, key=pos.__getitem__)


def positional_gold(kept: pd.DataFrame, before: pd.DataFrame, order: Sequence[str] | None = None,
                    units: Sequence[str] | None = None) -> pd.DataFrame:
    """``kept`` rescored under the positional reading.

    ``before``: the question table before the drop (every item each unit was
    asked, with its ``gold``); ``kept``: the rows kept. Per unit (model ×
    prompt format [× form]) the kept items in item order are paired, p-th
    with p-th, with the unit's items in ``before``; each kept row gets the
    paired item's gold (``gold``), that item's id (``gold_from``) and
    ``correct`` recomputed (NaN where unparsed, as
    :func:`medaudit.stats.scoring.question_table` scores). A unit of ``kept`` with
    items ``before`` does not have, or an item with two gold letters, is an
    error naming the unit."""
    if kept.empty:
        return kept.assign(gold_from=pd.Series(dtype=object))
    u = units_of(kept, units)
    by_unit = {(k if isinstance(k, tuple) else (k,)): g
               for k, g in before.groupby(u, sort=False, dropna=False)} if u else {(): before}
    parts = []
    rows = kept.assign(_row=np.arange(len(kept)))
    for key, g in (rows.groupby(u, sort=False, dropna=False) if u else [((), rows)]):
        key = key if isinstance(key, tuple) else (key,)
        unit = ", ".join(f"{c}={v}" for c, v in zip(u, key)) or "(all rows)"
        b = by_unit.get(key)
        if b is None:
            raise ValueError(f"positional gold: unit {unit} is not in the table before the drop")
        n_gold = b.groupby("item_id", sort=False)["gold"].nunique()
        if (n_gold > 1).any():
            item = n_gold.index[n_gold > 1][0]
            raise ValueError(f"positional gold: unit {unit}, item {item} has gold letters "
                             f"{sorted(b.loc[b['item_id'] == item, 'gold'].dropna().unique())}")
        gold_of = b.groupby("item_id", sort=False)["gold"].first()      # the first letter given (None: none)
        every = _ordered(b["item_id"], order, f"unit {unit}")
        mine = _ordered(g["item_id"], order, f"unit {unit}")
        extra = sorted(set(mine) - set(every))
        if extra:
            raise ValueError(f"positional gold: unit {unit}: kept items {extra[:5]} are not in the table "
                             f"before the drop")
        source = dict(zip(mine, every))             # the p-th kept item -> the p-th item of the unfiltered list
        gold = {i: gold_of.get(s) for i, s in source.items()}
        g = g.assign(gold=g["item_id"].map(gold), gold_from=g["item_id"].map(source))
        parsed = g["parsed"].astype(bool)
        g["correct"] = np.where(parsed, (g["parsed_answer"] == g["gold"]).astype(float), np.nan)
        parts.append(g)
    return pd.concat(parts).sort_values("_row", kind="stable").drop(columns="_row")


def rescore(kept: pd.DataFrame, before: pd.DataFrame, reading: str, order: Sequence[str] | None = None,
            units: Sequence[str] | None = None) -> pd.DataFrame:
    """``kept`` under ``reading`` (:data:`READINGS`): ``own`` returns it with
    ``gold_from`` = its own item id, ``positional`` is :func:`positional_gold`."""
    if reading == OWN:
        return kept.assign(gold_from=kept["item_id"])
    if reading == POSITIONAL:
        return positional_gold(kept, before, order, units)
    raise ValueError(f"gold reading {reading!r}: expected one of {list(READINGS)}")
