"""Glue for the multiple-choice analyses (notebook 04): responses from the
store, per-question confidence, and the paired comparisons shaped like seed
000's tables. The definitions live in ``uncertainty``, ``metrics`` and
``stats``; this module only wires them together."""
from __future__ import annotations

import pandas as pd

from . import data, paths, stats, tables, uncertainty
from .llm.store import ResponseStore, current

# seed 000 layouts: (metric, relative change?, scale of the base value, which way is better)
TABLE1 = {"A": ("accuracy", False, 100.0, "higher", "Accuracy (Base in %, others: Δ in points vs Base)"),
          "B": ("brier", True, 1.0, "lower", "Brier score (Base raw, others: relative % change vs Base)"),
          "C": ("confidence", False, 100.0, "neither", "Confidence (Base: 100 × (1 − normalised entropy), others: Δ vs Base)")}
TABLE4 = {"AUROC": ("auroc", False, 100.0, "higher", "AUROC (Base × 100, others: Δ vs Base)"),
          "ECE": ("ece", False, 100.0, "lower", "ECE (Base × 100, others: Δ vs Base)")}


def load(profile: str, conditions: list[str], prompt_format: str = "mcq") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(responses, items) for the analysis: every model in the store (its
    most recent run: :func:`medaudit.llm.store.current`), the listed
    conditions (their embedded forms too), one prompt format; items
    carry ``subset`` (main / psychiatry) from ``02_augmentation``."""
    store = ResponseStore(paths.outputs(profile, "data", "responses.sqlite"))
    r = current(store.frame("WHERE prompt_format = ?", (prompt_format,)))
    store.close()
    keep = set(conditions) | {f"{c} (embedded)" for c in conditions}
    r = r[r["condition"].isin(keep)]
    items = pd.concat([data.load_frame(profile, "items"), data.load_frame(profile, "psych_items")])
    subset = data.load_frame(profile, "variants").drop_duplicates("item_id").set_index("item_id")["subset"]
    items = items.assign(subset=items["item_id"].map(subset))
    return r, items


def questions(responses: pd.DataFrame, items: pd.DataFrame, seed: int) -> pd.DataFrame:
    qt = uncertainty.question_table(responses, items, seed)
    return qt.merge(items[["item_id", "subset"]], on="item_id", how="left")


def compare(qt: pd.DataFrame, base: str, conditions: list[str], n_boot: int, seed: int,
            pairs: list[tuple[str, str]] = ()) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Paired bootstrap (and McNemar for accuracy) of every condition against
    the base, and of the given within-model pairs; p-values corrected by Holm
    and BH within each metric."""
    have = set(qt["condition"])
    # the listed conditions, each followed by its embedded form (B.1) when that was run
    present = [x for c in conditions for x in (c, f"{c} (embedded)") if x in have and x != base]
    res = stats.adjust_pvalues(stats.paired_bootstrap(qt, base=base, conditions=present,
                                                      n_boot=n_boot, seed=seed))
    pairs = [p for p in pairs if set(p) <= set(qt["condition"])]
    pair_res = (stats.adjust_pvalues(stats.paired_bootstrap(qt, pairs=pairs, n_boot=n_boot, seed=seed))
                if pairs else None)
    return res, pair_res


def seed_tables(res: pd.DataFrame, pair_res: pd.DataFrame | None, layout: dict, profile: str,
                prefix: str) -> dict[str, pd.DataFrame]:
    """Save each panel of a seed-000 table; returns the marked text tables."""
    out = {}
    for panel, (metric, relative, scale, better, caption) in layout.items():
        pair_p = None
        if pair_res is not None:
            pr = pair_res[pair_res["metric"] == metric]
            pair_p = pr.pivot(index="model", columns="cond_b", values="p") if len(pr) else None
        t = tables.delta_table(res, metric, relative=relative, scale=scale, pair_p=pair_p)
        out[panel] = tables.save_delta_table(t, f"{prefix}_{panel}", profile, caption, better)
    return out
