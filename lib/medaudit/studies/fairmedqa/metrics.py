"""The disparity metrics: accuracy, CFR, AD, McNemar and Cohen's h.

Seed 004 §4.1 "Evaluation Metrics" (counterfactual fairness: the share of
vignettes answered the same under both groups of a pair; accuracy disparity
AD = |Acc_a − Acc_b|), §5.2's McNemar test on each counterfactual pair and
A.2's Table 3 (CFR, AD, McNemar's p, Cohen's h): :func:`accuracy_table`
(Fig. 3), :func:`pair_table` (Table 3, its counting rules), and
:func:`between_models` (each model against a reference on the same
vignettes). Every table shows its N per cell.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.stats import equivalence as _equivalence
from medaudit.stats import intervals as _intervals
from medaudit.stats import paired as _stats
from medaudit.stats.testpower import mcnemar_mde
from medaudit.studies.fairmedqa.config import NEUTRALISED, ORIGINAL


MARGIN = 3.0   # points: the default δ of 08's verdicts (profile key fairmedqa_margin; docs/statistics.md)


def p_text(p: float) -> str:
    """A p-value as the seed prints it (Table 3): "<0.0001" below 1e-4, else four decimals."""
    if pd.isna(p):
        return "–"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def cohens_h(p1: float, p2: float) -> float:
    """Cohen's h between two proportions: |2·asin√p1 − 2·asin√p2|."""
    return float(abs(2 * np.arcsin(np.sqrt(p1)) - 2 * np.arcsin(np.sqrt(p2))))


COUNTING = ("paper", "complete")


def accuracy_table(qt: pd.DataFrame, units: Sequence[str] = ("model",), conditions: Sequence[str] | None = None,
                   unparsed: str = "wrong") -> pd.DataFrame:
    """Accuracy per variant (seed 004 Fig. 3; the authors' Summary files):
    per unit and condition, questions, parsed, correct and accuracy (%).

    ``unparsed="wrong"`` (the seed's: its released Summary counts divide by
    all 801 vignettes, an answer the authors could not extract counting as
    incorrect) or ``"drop"`` (accuracy of the parsed answers only). Either
    way the unparsed answers are counted in their own column and the rule is
    named in ``rule``; ``truncated`` counts the unparsed replies cut by the
    token limit, which neither rule counts wrong. Rows by unit (first appearance), then ``conditions``
    order (default: original, neutralised, then the rest by name).

    ``vignettes`` counts the unit's vignettes (answered under any
    condition) and ``missing`` those without an answer under this one (a
    variant every agent round rejected has no text to answer): such a
    vignette is in neither the numerator nor the denominator, and shown."""
    if unparsed not in ("wrong", "drop"):
        raise ValueError("unparsed must be 'wrong' or 'drop'")
    trunc = qt["truncated"] if "truncated" in qt else pd.Series(False, index=qt.index)
    g = qt.assign(truncated=trunc).groupby([*units, "condition"], sort=False)
    out = pd.DataFrame({"questions": g.size(), "parsed": g["parsed"].sum().astype(int),
                        "correct": g["correct"].sum().astype(int),
                        "truncated": g["truncated"].sum().astype(int)}).reset_index()
    out["unparsed"] = out["questions"] - out["parsed"]
    if units:
        n_vig = qt.groupby(list(units), sort=False)["item_id"].nunique().rename("vignettes").reset_index()
        out = out.merge(n_vig, on=list(units), how="left")
    else:
        out["vignettes"] = qt["item_id"].nunique()
    out["missing"] = out["vignettes"] - out["questions"]
    # a reply cut by the token limit is no answer of the model's: never counted wrong
    denom = out["questions"] - out["truncated"] if unparsed == "wrong" else out["parsed"]
    out["accuracy"] = 100 * out["correct"] / denom.replace(0, np.nan)
    out["rule"] = "unparsed counted wrong" if unparsed == "wrong" else "unparsed left out"
    order = {c: i for i, c in enumerate(conditions or [ORIGINAL, NEUTRALISED])}
    first = {u: i for i, u in enumerate(pd.unique(out[units[0]]))} if units else {}
    key = [(first.get(u, 0) if units else 0, order.get(c, len(order)), c)
           for u, c in zip(out[units[0]] if units else out["condition"], out["condition"])]
    return out.iloc[sorted(range(len(out)), key=key.__getitem__)].reset_index(drop=True)


def pair_table(qt: pd.DataFrame, pairs: Sequence[tuple[str, str]], units: Sequence[str] = ("model",),
               counting: str = "paper", mcnemar: str = "exact", unparsed: str = "drop",
               margin: float = MARGIN) -> pd.DataFrame:
    """Table 3 per unit and counterfactual pair (a, b).

    ``counting="paper"`` (seed 004 Table 3; the authors' released answers
    give its CFR, AD and h to the fourth decimal for all four released
    models only this way): CFR (share of vignettes with the same answer
    under a and b) and McNemar on the vignettes parsed under both (``n``);
    acc_a, acc_b, AD (|acc_a − acc_b| as a proportion) and Cohen's h on
    each group's own parsed answers (``n_a``, ``n_b``); the answer
    distribution of Fig. 7 on the vignettes parsed under both: n11 (both
    correct), mcnemar_b (only a correct), mcnemar_c (only b correct), n00
    (both wrong). ``"complete"``:
    everything on the vignettes parsed under both. ``mcnemar``: "exact"
    (the seed's and the authors' binomial test throughout) or "auto"
    (exact below 25 discordant pairs, else χ² with continuity correction;
    :func:`medaudit.stats.paired.mcnemar_test`). The rule is named in ``counting``.
    ``unparsed``: "drop" (Table 3's published values: acc_a, acc_b, AD and h
    on the parsed answers) or "wrong" (an answered text whose answer was not
    extracted counts as incorrect in acc_a, acc_b, AD and h, as
    :func:`accuracy_table`'s ``unparsed="wrong"``; ``n_a``/``n_b`` then
    count the answered texts). Under either rule a reply cut by the token
    limit (``truncated``) is no answer of the model's and is never counted
    wrong: left out of acc_a/acc_b, n_a/n_b, AD and h exactly as
    :func:`accuracy_table` leaves it out of its denominator (the
    parameter's meaning in params/default.yaml ``fairmedqa_unparsed``:
    "unextracted answers ... counted incorrect", an answer the authors
    could not extract, seed 004's released Summary counts).

    N per cell: ``vignettes`` (the unit's vignettes, answered under any
    condition), ``missing_a`` / ``missing_b`` (those with no answer under a
    / b: a variant every agent round rejected, or a text not answered), so
    that a vignette whose variant was rejected leaves n visibly, not
    silently. A pair is listed when either member has answers.

    Beside the seed's statistics, on the n vignettes parsed
    under both: ``delta`` (acc_b − acc_a in points on those vignettes),
    ``se_paired`` and ``se_cluster`` (by vignette: one row each, so equal;
    :func:`medaudit.stats.paired.paired_delta`) in points, ``rho`` (correlation
    of the pair's correctness) and ``mde`` (points): the smallest |delta|
    these n vignettes detect with power 0.8 at α = 0.05 under the McNemar
    test the pair runs (``mcnemar``; exact power at the observed
    discordance (b + c)/n, :func:`medaudit.stats.testpower.mcnemar_mde`; ``inf``:
    none detectable at n). ``ci_lo``, ``ci_hi`` (points), the 95 %
    interval of delta that covers at these n
    (:func:`medaudit.stats.intervals.paired_interval`), ``margin`` (δ, points,
    the profile's ``fairmedqa_margin``) and ``verdict``
    (:func:`medaudit.stats.equivalence.verdict` from McNemar's p and that
    interval): a pair without a significant difference reads "equivalence
    shown within ±δ" only where the interval lies inside ±δ, else
    "inconclusive"."""
    if counting not in COUNTING:
        raise ValueError(f"counting must be one of {COUNTING}")
    if mcnemar not in ("exact", "auto"):
        raise ValueError("mcnemar must be 'exact' or 'auto'")
    if unparsed not in ("wrong", "drop"):
        raise ValueError("unparsed must be 'wrong' or 'drop'")
    exact_below = np.inf if mcnemar == "exact" else _stats.EXACT_BELOW
    rows = []
    for key, g in qt.groupby(list(units), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        ans = g.pivot(index="item_id", columns="condition", values="parsed_answer")
        cor = g.pivot(index="item_id", columns="condition", values="correct")
        present = g.pivot(index="item_id", columns="condition", values="parsed").notna()
        # a reply cut by the token limit is no answer of the model's: never counted wrong (as accuracy_table)
        cut = (g.pivot(index="item_id", columns="condition", values="truncated").fillna(False).astype(bool)
               if "truncated" in g else present & False)
        for a, b in pairs:
            if a not in ans.columns and b not in ans.columns:
                continue
            for c in (a, b):
                if c not in ans.columns:           # every variant of c rejected: a row of n = 0, not no row
                    ans[c], cor[c], present[c], cut[c] = np.nan, np.nan, False, False
            both = ans[a].notna() & ans[b].notna()
            n = int(both.sum())
            ya, yb = cor.loc[both, a].to_numpy(float), cor.loc[both, b].to_numpy(float)
            if counting == "paper" and unparsed == "wrong":     # every answered text, unparsed = incorrect
                own_a, own_b = (cor.loc[present[c] & ~cut[c], c].fillna(0).to_numpy(float) for c in (a, b))
            elif counting == "paper":
                own_a, own_b = cor[a].dropna().to_numpy(float), cor[b].dropna().to_numpy(float)
            else:
                own_a, own_b = ya, yb
            pa = own_a.mean() if len(own_a) else np.nan
            pb = own_b.mean() if len(own_b) else np.nan
            m = (_stats.mcnemar_test(ya, yb, exact_below=exact_below) if n
                 else {"n11": 0, "b": 0, "c": 0, "n00": 0, "method": "", "pvalue": np.nan})
            label = " vs ".join(c.rsplit(":", 1)[-1].title() for c in (a, b))     # the seed's "White vs Black"
            rows.append({**dict(zip(units, key)), "pair": f"{a} vs {b}", "seed_pair": label, "a": a, "b": b, "n": n,
                         "n_a": len(own_a), "n_b": len(own_b), "vignettes": len(present),
                         "missing_a": int((~present[a]).sum()), "missing_b": int((~present[b]).sum()),
                         "acc_a": 100 * pa, "acc_b": 100 * pb,
                         "CFR": float((ans.loc[both, a] == ans.loc[both, b]).mean()) if n else np.nan,
                         "AD": float(abs(pa - pb)) if len(own_a) and len(own_b) else np.nan,
                         "n11": m["n11"], "mcnemar_b": m["b"], "mcnemar_c": m["c"], "n00": m["n00"],
                         "mcnemar_method": m["method"],
                         "mcnemar_p": m["pvalue"], "McNemar p": p_text(m["pvalue"]),
                         "cohens_h": cohens_h(pa, pb) if len(own_a) and len(own_b) else np.nan,
                         "counting": counting, "unparsed": unparsed,
                         **_paired_errors(ya, yb, both[both].index.to_numpy(), m, n, mcnemar, margin)})
    return pd.DataFrame(rows)


def _paired_errors(ya: np.ndarray, yb: np.ndarray, vignettes: np.ndarray, m: dict, n: int,
                   test: str = "exact", margin: float = MARGIN) -> dict:
    """delta, se_paired, se_cluster, rho, mde, ci_lo, ci_hi, margin, verdict
    of one pair (:func:`pair_table`); the MDE is that of the McNemar ``test``
    the pair ran ("exact" / "auto"), the verdict reads its p."""
    if not n:
        return {"delta": np.nan, "se_paired": np.nan, "se_cluster": np.nan, "rho": np.nan, "mde": np.nan,
                "ci_lo": np.nan, "ci_hi": np.nan, "margin": margin, "verdict": _intervals.TOO_FEW}
    e = _stats.paired_delta(ya, yb, vignettes)
    v = _equivalence.paired_verdict(ya, yb, vignettes, margin, p=m["pvalue"])
    return {"delta": 100 * e["delta"], "se_paired": 100 * e["se_paired"], "se_cluster": 100 * e["se_cluster"],
            "rho": e["rho"], "mde": 100 * mcnemar_mde(n, (m["b"] + m["c"]) / n, test=test),
            "ci_lo": v["ci_lo"], "ci_hi": v["ci_hi"], "margin": margin, "verdict": v["verdict"]}


def between_models(qt: pd.DataFrame, reference: str, conditions: Sequence[str], mcnemar: str = "exact",
                   unparsed: str = "drop", margin: float = MARGIN) -> pd.DataFrame:
    """Every other model against ``reference`` on the same vignettes, per
    text (condition): the accuracy of each on the vignettes both answered
    (n), the difference in points, McNemar (``mcnemar``) and its MDE — the
    question a new model's row beside the released models asks ("is it
    more accurate than GPT-4.1 on the same items?"). Columns: condition,
    model, reference, n, acc_reference, acc_model, delta, mcnemar_b
    (vignettes only the reference got right), mcnemar_c (only the model),
    mcnemar_p, mde, ci_lo, ci_hi, margin, verdict. :func:`pair_table` with the roles swapped: the models
    are the pair, the text the unit; ``unparsed`` as there (the run's
    ``fairmedqa_unparsed``)."""
    models = [m for m in pd.unique(qt["model"]) if m != reference]
    cols = ["condition", "model", "reference", "n", "acc_reference", "acc_model", "delta", "mcnemar_b",
            "mcnemar_c", "mcnemar_method", "mcnemar_p", "mde", "ci_lo", "ci_hi", "margin", "verdict"]
    if reference not in set(qt["model"]) or not models:
        return pd.DataFrame(columns=cols)
    swapped = qt[qt["condition"].isin(list(conditions))].assign(model=lambda d: d["condition"],
                                                                  condition=qt["model"])
    t = pair_table(swapped, [(reference, m) for m in models], units=("model",), counting="complete",
                   mcnemar=mcnemar, unparsed=unparsed, margin=margin)
    out = pd.DataFrame({"condition": t["model"], "model": t["b"], "reference": t["a"], "n": t["n"],
                        "acc_reference": t["acc_a"], "acc_model": t["acc_b"], "delta": t["delta"],
                        "mcnemar_b": t["mcnemar_b"], "mcnemar_c": t["mcnemar_c"],
                        "mcnemar_method": t["mcnemar_method"], "mcnemar_p": t["mcnemar_p"], "mde": t["mde"],
                        "ci_lo": t["ci_lo"], "ci_hi": t["ci_hi"], "margin": t["margin"], "verdict": t["verdict"]})
    return out.reset_index(drop=True)[cols]
