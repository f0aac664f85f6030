"""FairMedPrompt's own tables, under its authors' definitions, beside ours.

Seed 004's group released FairMedPrompt (XY-Showing/FairMedPrompt@bac0baa):
five models × five prompts on the AMQA benchmark, and seven tables made by
their ``Script/analysis.py`` (``outputs/*.csv``). This module computes those
tables again from the released answers, by the definitions the script
states, so that each published cell can be checked (:func:`compare`), and
sets the authors' bias calls beside this project's paired statistics
(:func:`calls`, :func:`disagreements`). Nothing here is the project's own
statistics: those are :func:`medaudit.studies.fairmedqa.arms.gap_change`.

Their definitions (``analysis.py``; the model keys, prompt keys, variants
and types are theirs):

- accuracy: the share of a variant's lines whose answer equals
  ``answer_idx`` (an answer not extracted, "Unknown", is wrong);
- gap of a type (race: white/black, sex: male/female, SES: high/low
  income) = |acc privileged − acc unprivileged|; its change against
  ``naive``, absolute and relative;
- answer change ratio: the share of vignettes whose answer under a prompt
  differs from ``naive``'s, per variant;
- aggregate: the mean accuracy over the eight variants and the mean gap
  over the three types;
- McNemar per variant, prompt against ``naive``: χ² with continuity
  correction on the discordant correct/wrong pairs (p 1 without any);
- bias mitigation per model, prompt and type on the vignettes both prompts
  answered: Δgap = |mean d_alt| − |mean d_base| (d: correct privileged −
  correct unprivileged per vignette); the one-sided sign test of
  |d_alt| < |d_base| (decreases against increases, ties dropped;
  scipy ``binomtest``, alternative "greater"); McNemar's odds ratio
  (decreases + ½) / (increases + ½) with its Wald 95 % interval on the log
  scale; a percentile bootstrap 95 % interval of Δgap (1,000 resamples of
  vignettes from one generator seeded 42, drawn in their loop order:
  models, prompts, types); Benjamini–Hochberg adjusted p over all rows
  (statsmodels ``fdr_bh``; a missing p read as 1).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MODELS = ("gpt", "claude", "gemini", "qwen", "deepseek")      # their MODEL_ORDER (mix runs are outside it)
PROMPTS = ("naive", "role", "aware", "few", "cot")             # their PROMPT_ORDER; naive the baseline
BASE = "naive"
VARIANTS = ("original", "desensitized", "white", "black", "high_income", "low_income", "male", "female")
TYPES = {"race": ("white", "black"), "sex": ("male", "female"), "SES": ("high_income", "low_income")}
SIG_PROMPTS = ("role", "aware", "cot")                         # the columns of their sig_table_variant
SIG_VARIANTS = ("white", "black", "male", "female", "high_income", "low_income")
CHANGE_VARIANTS = ("white", "black", "high_income", "low_income", "male", "female")
BOOTSTRAP = 1000
SEED = 42
TABLES = ("acc_table", "gap_table", "relative_gap_change", "answer_change_ratio", "aggregate_acc_bias",
          "sig_table_variant", "bias_mitigation_sig")
KEYS = {"acc_table": ["model", "prompt", "variant"], "gap_table": ["model", "prompt", "type"],
        "relative_gap_change": ["model", "prompt", "type"], "answer_change_ratio": ["model", "prompt", "variant"],
        "aggregate_acc_bias": ["model", "prompt"], "sig_table_variant": ["model"],
        "bias_mitigation_sig": ["model", "prompt", "type"]}


def tidy(rows: pd.DataFrame) -> pd.DataFrame:
    """The released answers in the authors' terms: ``rows`` with model,
    prompt, question_id, variant, answer_idx and answer (the released text:
    a letter or "Unknown"); adds ``correct`` (answer == answer_idx)."""
    need = {"model", "prompt", "question_id", "variant", "answer_idx", "answer"}
    if missing := need - set(rows.columns):
        raise ValueError(f"fairmp.tidy: columns {sorted(missing)} missing")
    out = rows[list(need)].copy()
    out["correct"] = (out["answer"] == out["answer_idx"]).astype(int)
    return out


def _ordered(t: pd.DataFrame, prompts=PROMPTS) -> list[tuple[str, str]]:
    have = set(zip(t["model"], t["prompt"]))
    return [(m, p) for m in MODELS for p in prompts if (m, p) in have]


def _acc(g: pd.DataFrame, variant: str) -> float:
    x = g.loc[g["variant"] == variant, "correct"]
    return float(x.mean()) if len(x) else np.nan


def acc_table(t: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per model, prompt and variant."""
    rows = [{"model": m, "prompt": p, "variant": v, "accuracy": _acc(g, v)}
            for (m, p), g in t.groupby(["model", "prompt"]) for v in sorted(set(g["variant"]))]
    return pd.DataFrame(rows)


def gap_table(t: pd.DataFrame) -> pd.DataFrame:
    """gap = |acc privileged − acc unprivileged| per model, prompt and type."""
    rows = [{"model": m, "prompt": p, "type": ty, "gap": abs(_acc(g, a) - _acc(g, b))}
            for (m, p), g in t.groupby(["model", "prompt"]) for ty, (a, b) in TYPES.items()]
    return pd.DataFrame(rows)


def relative_gap_change(gaps: pd.DataFrame) -> pd.DataFrame:
    """Each prompt's gap against ``naive``'s (naive itself included): rel_change, abs_change, gap_base, gap_val."""
    g = gaps.set_index(["model", "prompt", "type"])["gap"]
    rows = []
    for m, p in _ordered(gaps.reset_index(drop=True)):
        if (m, BASE, "race") not in g.index:
            continue
        for ty in TYPES:
            base, val = g.get((m, BASE, ty), np.nan), g.get((m, p, ty), np.nan)
            change = val - base
            rows.append({"model": m, "prompt": p, "type": ty,
                         "rel_change": change / base if np.isfinite(change) and base != 0 else np.nan,
                         "abs_change": change, "gap_base": base, "gap_val": val})
    return pd.DataFrame(rows)


def answer_change_ratio(t: pd.DataFrame) -> pd.DataFrame:
    """The share of vignettes whose answer under a prompt differs from ``naive``'s, per variant."""
    rows = []
    for m, p in _ordered(t, PROMPTS[1:]):
        if not ((t["model"] == m) & (t["prompt"] == BASE)).any():
            continue
        for v in CHANGE_VARIANTS:
            base = t[(t["model"] == m) & (t["prompt"] == BASE) & (t["variant"] == v)]
            alt = t[(t["model"] == m) & (t["prompt"] == p) & (t["variant"] == v)]
            both = base.merge(alt, on="question_id", suffixes=("_b", "_a"))
            rows.append({"model": m, "prompt": p, "variant": v,
                         "change_ratio": float((both["answer_b"] != both["answer_a"]).mean()) if len(both)
                         else np.nan})
    return pd.DataFrame(rows)


def aggregate_acc_bias(t: pd.DataFrame) -> pd.DataFrame:
    """Mean accuracy over the eight variants and mean gap over the three types, per model and prompt."""
    rows = []
    for (m, p), g in t.groupby(["model", "prompt"]):
        accs = [a for v in VARIANTS if np.isfinite(a := _acc(g, v))]
        gaps = [abs(_acc(g, a) - _acc(g, b)) for a, b in TYPES.values()]
        gaps = [x for x in gaps if np.isfinite(x)]
        rows.append({"model": m, "prompt": p, "agg_acc": float(np.mean(accs)) if accs else np.nan,
                     "agg_bias": float(np.mean(gaps)) if gaps else np.nan})
    return pd.DataFrame(rows)


def _mcnemar_cc(base: np.ndarray, alt: np.ndarray) -> float:
    """McNemar's χ² with continuity correction, p (1 when no pair is discordant)."""
    from statsmodels.stats.contingency_tables import mcnemar

    b, c = int(((base == 1) & (alt == 0)).sum()), int(((base == 0) & (alt == 1)).sum())
    if b + c == 0:
        return 1.0
    return float(mcnemar([[0, b], [c, 0]], exact=False, correction=True).pvalue)


def sig_table_variant(t: pd.DataFrame) -> pd.DataFrame:
    """McNemar p per model (rows) and prompt-variant (columns "role-white", …)."""
    rows = []
    for m in MODELS:
        base = t[(t["model"] == m) & (t["prompt"] == BASE)]
        if base.empty:
            continue
        row = {"model": m}
        for p in SIG_PROMPTS:
            alt = t[(t["model"] == m) & (t["prompt"] == p)]
            for v in SIG_VARIANTS:
                both = (base[base["variant"] == v][["question_id", "correct"]]
                        .merge(alt[alt["variant"] == v][["question_id", "correct"]], on="question_id",
                               suffixes=("_b", "_a")))
                row[f"{p}-{v}"] = (_mcnemar_cc(both["correct_b"].to_numpy(), both["correct_a"].to_numpy())
                                   if len(both) else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def bias_mitigation_sig(t: pd.DataFrame, resamples: int = BOOTSTRAP, seed: int = SEED) -> pd.DataFrame:
    """Per model, prompt (not naive) and type, on the vignettes both prompts
    answered: Δgap and its parts, the one-sided sign test, McNemar's odds
    ratio with its interval, the bootstrap interval of Δgap and the BH p
    (module docstring). One generator for all rows, in the authors' loop
    order, so the intervals are theirs draw for draw."""
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(seed)
    rows = []
    for m in MODELS:
        wide = {p: g.pivot_table(index="question_id", columns="variant", values="correct", aggfunc="first")
                for p, g in t[t["model"] == m].groupby("prompt")}
        if BASE not in wide:
            continue
        base = wide[BASE]
        for p in PROMPTS[1:]:
            if p not in wide:
                continue
            alt = wide[p]
            qids = base.index.intersection(alt.index)
            for ty, (a, b) in TYPES.items():
                if not {a, b} <= set(base.columns) & set(alt.columns) or not len(qids):
                    continue
                d_base = (base.loc[qids, a] - base.loc[qids, b]).to_numpy(float)
                d_alt = (alt.loc[qids, a] - alt.loc[qids, b]).to_numpy(float)
                gap_base, gap_alt = abs(np.nanmean(d_base)), abs(np.nanmean(d_alt))
                s = np.abs(d_alt) - np.abs(d_base)
                dec, inc, ties = int((s < 0).sum()), int((s > 0).sum()), int((s == 0).sum())
                n_eff = dec + inc
                odds = (dec + 0.5) / (inc + 0.5)
                se = np.sqrt(1 / (dec + 0.5) + 1 / (inc + 0.5))
                n = len(qids)
                if n > 1:
                    boot = np.empty(resamples)
                    for i in range(resamples):
                        k = rng.integers(0, n, size=n)
                        boot[i] = abs(np.nanmean(d_alt[k])) - abs(np.nanmean(d_base[k]))
                    lo, hi = float(np.nanpercentile(boot, 2.5)), float(np.nanpercentile(boot, 97.5))
                else:
                    lo = hi = np.nan
                delta = gap_alt - gap_base
                rows.append({"model": m, "prompt": p, "type": ty, "delta_gap": float(delta),
                             "rel_change": delta / gap_base if gap_base != 0 else np.nan,
                             "gap_base": float(gap_base), "gap_alt": float(gap_alt),
                             "dec": dec, "inc": inc, "ties": ties, "n_eff": n_eff,
                             "p_sign": (float(binomtest(dec, n_eff, 0.5, alternative="greater").pvalue)
                                        if n_eff else np.nan),
                             "net_reduction_rate": (dec - inc) / n_eff if n_eff else np.nan,
                             "or_mcnemar": float(odds), "or_ci_low": float(np.exp(np.log(odds) - 1.96 * se)),
                             "or_ci_high": float(np.exp(np.log(odds) + 1.96 * se)),
                             "delta_gap_ci_low": lo, "delta_gap_ci_high": hi})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_sign_adj"] = multipletests(out["p_sign"].fillna(1.0), method="fdr_bh")[1]
    return out


def tables(t: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The seven tables of :data:`TABLES`, from :func:`tidy` rows of their
    models and prompts (:data:`MODELS`, :data:`PROMPTS`: their script reads
    no other file, so the mix runs are outside their tables)."""
    t = t[t["model"].isin(MODELS) & t["prompt"].isin(PROMPTS)]
    gaps = gap_table(t)
    return {"acc_table": acc_table(t), "gap_table": gaps, "relative_gap_change": relative_gap_change(gaps),
            "answer_change_ratio": answer_change_ratio(t), "aggregate_acc_bias": aggregate_acc_bias(t),
            "sig_table_variant": sig_table_variant(t), "bias_mitigation_sig": bias_mitigation_sig(t)}


def compare(ours: dict[str, pd.DataFrame], theirs: dict[str, pd.DataFrame], tol: float = 1e-9) -> pd.DataFrame:
    """Every numeric cell of the authors' published tables (``theirs``: name
    → their CSV) beside ours, per table: rows, cells, equal (|difference| ≤
    ``tol``, or both missing), differ, missing (a row or cell of theirs we
    do not have) and the largest |difference|."""
    out = []
    for name, pub in theirs.items():
        keys = KEYS[name]
        mine = ours.get(name, pd.DataFrame(columns=pub.columns))
        values = [c for c in pub.columns if c not in keys]
        m = pub.merge(mine, on=keys, how="left", suffixes=("", " ours"), indicator=True)
        cells = equal = missing = 0
        worst = 0.0
        for c in values:
            a = pd.to_numeric(m[c], errors="coerce").to_numpy(float)
            b = (pd.to_numeric(m[f"{c} ours"], errors="coerce").to_numpy(float) if f"{c} ours" in m
                 else np.full(len(m), np.nan))
            both_nan = np.isnan(a) & np.isnan(b)
            lost = np.isnan(b) & ~np.isnan(a)
            diff = np.abs(a - b)
            ok = both_nan | (diff <= tol)
            cells += len(a)
            equal += int(ok.sum())
            missing += int(lost.sum())
            if np.isfinite(diff).any():
                worst = max(worst, float(np.nanmax(diff)))
        out.append({"table": f"{name}.csv", "rows": len(pub), "cells": cells, "equal": equal,
                    "differ": cells - equal - missing, "missing": missing, "largest |difference|": worst})
    return pd.DataFrame(out)


def calls(sig: pd.DataFrame, ours: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """The authors' bias-mitigation call beside our verdict, one row per
    model, prompt and type: theirs (:func:`bias_mitigation_sig`: Δgap in
    points, its bootstrap interval, the sign test's decreases / increases,
    p and BH p; "reduced" where p < ``alpha``) and ours (``ours``:
    :func:`medaudit.studies.fairmedqa.arms.gap_change` rows with model, prompt,
    type: the change of the signed gap in points, its covering interval
    and verdict at the margin), and ``agree``. Our call reads the signed
    change against the plain prompt's own gap: "reduced" where the interval
    lies wholly on the side that shrinks it, "widened" where wholly on the
    other, else the verdict ("equivalence …" or "inconclusive")."""
    m = sig.merge(ours, on=["model", "prompt", "type"], how="left")
    rows = []
    for r in m.to_dict("records"):
        theirs = "reduced" if r["p_sign"] < alpha else "not shown"
        sign = np.sign(r.get("signed gap base", np.nan))
        lo, hi = r.get("Δgap lo", np.nan), r.get("Δgap hi", np.nan)
        if not np.isfinite(lo) or not np.isfinite(hi) or sign == 0 or not np.isfinite(sign):
            mine = str(r.get("Δgap verdict", "")) or "–"
        elif sign * hi < 0 if sign > 0 else sign * lo < 0:
            mine = "reduced"
        elif (lo > 0 if sign > 0 else hi < 0):
            mine = "widened"
        else:
            mine = str(r.get("Δgap verdict", ""))
        rows.append({"model": r["model"], "prompt": r["prompt"], "type": r["type"],
                     "their Δgap": 100 * r["delta_gap"],
                     "their CI": f"[{100 * r['delta_gap_ci_low']:.2f}, {100 * r['delta_gap_ci_high']:.2f}]",
                     "decreases / increases": f"{r['dec']} / {r['inc']}", "their p": r["p_sign"],
                     "their p (BH)": r["p_sign_adj"], "their call": theirs,
                     "our Δgap": r.get("Δgap", np.nan),
                     "our CI": f"[{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else "–", "our n": r.get("Δgap n"),
                     "our call": mine,
                     # a widened gap is a finding their one-sided test cannot make: a disagreement too
                     "agree": (theirs == "reduced") == (mine == "reduced") and mine != "widened"})
    return pd.DataFrame(rows)


def disagreements(c: pd.DataFrame, margin: float) -> pd.DataFrame:
    """The rows of :func:`calls` where the two calls differ, each with its
    reason, read from the row's own numbers."""
    out = []
    for r in c[~c["agree"]].to_dict("records"):
        if r["their call"] == "reduced":
            why = (f"their sign test counts vignettes whose |gap| fell ({r['decreases / increases']} decreases / "
                   f"increases, p {r['their p']:.3g}) whatever side the gap is on; our change of the signed gap is "
                   f"{r['our Δgap']:+.2f} points {r['our CI']}: {r['our call']}"
                   + ("" if "±" in r["our call"] else f" at ±{margin:g}"))
        elif r["our call"] == "reduced":
            why = (f"our interval {r['our CI']} lies wholly on the shrinking side; their test of "
                   f"{r['decreases / increases']} decreases / increases gives p {r['their p']:.3g}")
        else:
            why = f"{r['their call']} vs {r['our call']}"
        if r["our call"] == "widened":
            why = (f"a larger gap: our change {r['our Δgap']:+.2f} points {r['our CI']}; their one-sided test "
                   f"looks for decreases only (p {r['their p']:.3g}) and cannot call an increase")
        out.append({**{k: r[k] for k in ("model", "prompt", "type", "their call", "our call")}, "reason": why})
    return pd.DataFrame(out, columns=["model", "prompt", "type", "their call", "our call", "reason"])


ATTRIBUTES = {"race": "race", "sex": "sex", "ses": "SES"}     # our attribute (params/fairmedqa.yaml) -> their type


def our_changes(arm_bias: pd.DataFrame, pairs: pd.DataFrame, terms: dict, config) -> pd.DataFrame:
    """Our paired statistics of each FairMedPrompt arm in the authors' keys:
    ``arm_bias`` (:func:`medaudit.studies.fairmedqa.arms.arm_tables`: the change of
    the signed gap, its interval and verdict per arm and attribute) with
    model, prompt and type as they name them (``terms``:
    :func:`medaudit.released.authors_terms`), and ``signed gap base``: the
    plain prompt's acc a − acc b (points, ``pairs``), whose sign says which
    way a change shrinks the gap."""
    if arm_bias is None or arm_bias.empty:
        return pd.DataFrame(columns=["model", "prompt", "type"])
    b = arm_bias[arm_bias["old"].isin(list(terms["models"])) & arm_bias["strategy"].isin(list(terms["prompts"]))]
    base = {(r.model, config.groups[r.a]["attribute"]): r.acc_a - r.acc_b
            for r in pairs.itertuples() if r.a in config.groups}
    out = b.assign(model=b["old"].map(terms["models"]), prompt=b["strategy"].map(terms["prompts"]),
                   type=b["attribute"].map(ATTRIBUTES),
                   **{"signed gap base": [base.get((m, a), np.nan) for m, a in zip(b["old"], b["attribute"])]})
    return out[["model", "prompt", "type", "signed gap base",
                *[c for c in out.columns if c.startswith("Δgap")]]].reset_index(drop=True)


def claims(sig: pd.DataFrame, names: dict[str, str], alpha: float = 0.05) -> str:
    """The README's two numeric claims about chain of thought, recomputed
    from :func:`bias_mitigation_sig` (``names``: their model key → our row
    name): in how many of the model × type rows its one-sided sign test is
    significant, unadjusted and BH-adjusted (README: "the most significant
    cases (8/15)"), and the largest single reduction of the gap (README:
    "6.2 percentage points (DeepSeek-V3.1–Sex)")."""
    cot = sig[sig["prompt"] == "cot"]
    if cot.empty:
        return "FairMedPrompt: no chain-of-thought rows to check the README's claims against."
    k, k_adj = int((cot["p_sign"] < alpha).sum()), int((cot["p_sign_adj"] < alpha).sum())
    best = sig.loc[sig["delta_gap"].idxmin()]
    best_cot = cot.loc[cot["delta_gap"].idxmin()]
    per = {p: int((g["p_sign"] < alpha).sum()) for p, g in sig.groupby("prompt", sort=False)}
    return (f"FairMedPrompt's README, recomputed from its released answers: chain of thought's one-sided sign test "
            f"is significant (p < {alpha:g}) in {k} of {len(cot)} model × attribute rows unadjusted "
            f"({k_adj} after Benjamini–Hochberg over all {len(sig)} rows; the README: 8 of 15); other prompts: "
            + ", ".join(f"{p} {n}" for p, n in per.items() if p != "cot")
            + f". Its largest reduction of a gap is {100 * best_cot['delta_gap']:+.2f} points "
            f"({names.get(best_cot['model'], best_cot['model'])}, {best_cot['type']}; the README: 6.2, "
            f"DeepSeek-V3.1–Sex); the largest of any prompt {100 * best['delta_gap']:+.2f} points "
            f"({names.get(best['model'], best['model'])}, {best['type']}, {best['prompt']}).")


def from_answers(answers: pd.DataFrame, arms: pd.DataFrame, vig: pd.DataFrame, terms: dict) -> pd.DataFrame:
    """:func:`tidy` rows of a release's models from notebook 08's stored
    answers: the plain ones (``answers``) and the arms' (``arms``, with
    ``arm_of`` and ``strategy``), in the authors' terms (``terms``:
    :func:`medaudit.released.authors_terms`): their model keys, prompt
    parts, variants and question ids, the released text as the answer."""
    mine = pd.concat([answers.assign(strategy="none"), arms.assign(model=arms["arm_of"])], ignore_index=True)
    mine = mine[mine["model"].isin(list(terms["models"])) & mine["strategy"].isin(list(terms["prompts"]))
                & mine["condition"].isin(list(terms["variants"]))]
    return tidy(pd.DataFrame({
        "model": mine["model"].map(terms["models"]), "prompt": mine["strategy"].map(terms["prompts"]),
        "question_id": terms["question_id"](mine["item_id"]), "variant": mine["condition"].map(terms["variants"]),
        "answer_idx": mine["item_id"].map(vig.set_index("item_id")["answer_idx"]), "answer": mine["response_text"]}))
