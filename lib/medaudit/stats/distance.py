"""How far our numbers lie from a paper's: each cell's difference with the standard error of the
difference between two runs of one model, its z, and the cells marked far with a Bonferroni bound
across the cells compared (a model the paper measured, rerun, is called far in at most
:data:`FAR_ALPHA` of cases). The maintainer's ``python -m medaudit.released add`` warns with it and
the published page explains a differing cell with it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


FAR_ALPHA = 0.05      # family-wise false-alarm rate of "far from the paper's row" across the cells compared


def distance(ours: pd.DataFrame, paper: dict[tuple[str, str], float]) -> pd.DataFrame:
    """One model's seed 004 Table 3 cells beside the paper's row of its name
    (``ours``: its :func:`medaudit.studies.fairmedqa.metrics.pair_table` rows,
    seed_pair, n, CFR, AD, se_paired in points; ``paper``: {(seed_pair,
    "CFR" | "AD"): value}; cells either lacks are left out): seed_pair,
    measure, ours, paper, difference, n, se, z, cell, far.

    ``se`` is the standard error of the difference between two runs of one
    model on these vignettes, √2 × the SE of ours (CFR: binomial over the n
    pairs; AD: the paired SE of the accuracy difference, ``se_paired``);
    ``far``: |z| beyond the normal quantile 1 − FAR_ALPHA / (2k), k the
    cells compared (Bonferroni: a file of the model the paper measured,
    rerun, is called far in at most FAR_ALPHA of cases). ``python -m
    medaudit.released add`` warns with it; the published page explains a
    differing cell with it (:mod:`medaudit.publish.published`)."""
    ours = ours.set_index("seed_pair")
    rows = []
    for (pair, measure), value in paper.items():
        if pair not in ours.index:
            continue
        o = ours.loc[pair]
        n = int(o["n"])
        se = (np.sqrt(o["CFR"] * (1 - o["CFR"]) / n) if measure == "CFR" else o["se_paired"] / 100) if n else np.nan
        diff, s2 = float(o[measure]) - value, float(np.sqrt(2) * se)
        rows.append({"seed_pair": pair, "measure": measure, "ours": float(o[measure]), "paper": value,
                     "difference": diff, "n": n, "se": s2,
                     "z": diff / s2 if s2 > 0 else (0.0 if diff == 0 else float(np.inf * np.sign(diff)))})
    return mark_far(pd.DataFrame(rows), "seed 004 Table 3, counting rule 'paper'")


def mark_far(out: pd.DataFrame, what: str) -> pd.DataFrame:
    """``out`` with ``cell`` and ``far`` (|z| beyond the Bonferroni quantile over its cells)."""
    from scipy.stats import norm

    if len(out):
        out["cell"] = (out["seed_pair"] + " " + out["measure"]) if "seed_pair" in out else out["column"]
        crit = float(norm.ppf(1 - FAR_ALPHA / (2 * len(out))))
        out["far"] = out["z"].abs() > crit
        out.attrs["critical z"] = crit
        out.attrs["what"] = what
    return out
