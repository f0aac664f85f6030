"""Seed 000's multiple-choice analyses (notebook 04): responses from the
store, per-question confidence, the paired comparisons shaped like seed
000's tables, and the orientation × religion non-additivity model of its
factors. The general methods live in :mod:`medaudit.stats` (uncertainty,
metrics, paired tests, regression); this module wires them to the study."""
from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sstats

from medaudit.prep import data
from medaudit.stats import equivalence, intervals, paired as stats, uncertainty
from medaudit.stats.regression import fit_logit, linear_contrast, wald_test
from medaudit import paths
from medaudit.report import tables
from medaudit.llm import runs
from medaudit.llm.store import ResponseStore, current

# seed 000 layouts: (metric, relative change?, scale of the base value, which way is better)
TABLE1 = {"A": ("accuracy", False, 100.0, "higher", "Accuracy (Base in %, others: Δ in points vs Base)"),
          "B": ("brier", True, 1.0, "lower", "Brier score (Base raw, others: relative % change vs Base)"),
          "C": ("confidence", False, 100.0, "neither",
                "Confidence (Base: 100 × (1 − normalised entropy), others: Δ vs Base)")}
# seed 000 Table 7 (B.3): the token-probability baseline, "the log-likelihood of the token
# corresponding to the model's selected option letter", per condition
TABLE7 = {"A": ("brier", True, 1.0, "lower", "Token-probability baseline (B.3): Brier score (Base raw, others: "
                "relative % change vs Base)"),
          "B": ("confidence", False, 100.0, "neither", "Token-probability baseline (B.3): confidence "
                "(Base: 100 × mean letter probability, others: Δ vs Base)"),
          "C": ("auroc", False, 100.0, "higher",
                "Token-probability baseline (B.3): AUROC (Base × 100, others: Δ vs Base)")}
# seed 000 Table 9 (B.7): "We additionally replace 'homosexual' with the more contemporary umbrella
# term 'gay' and re-run the analysis"; its columns Base, +gay, +gay+Cat, +gay+Mus, +gay+Ath and the
# panels of Table 1
TABLE9_CONDITIONS = ("+gay", "+gay+Cat", "+gay+Mus", "+gay+Ath")
TABLE9 = {panel: (metric, relative, scale, better, f"Table 9 (B.7, \"gay\" instead of \"homosexual\"): {caption}")
          for panel, (metric, relative, scale, better, caption) in TABLE1.items()}
TABLE4 = {"AUROC": ("auroc", False, 100.0, "higher", "AUROC (Base × 100, others: Δ vs Base)"),
          "ECE": ("ece", False, 100.0, "lower", "ECE (Base × 100, others: Δ vs Base)")}


def load(profile: str, conditions: list[str], prompt_format: str = "mcq",
         models: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(responses, items) for the analysis: every model in the store, or
    only ``models`` (its most recent run: :func:`medaudit.llm.store.current`),
    the listed conditions (their embedded forms too), one prompt format;
    items carry ``subset`` (main / psychiatry) from ``02_augmentation``."""
    store = ResponseStore(paths.outputs(profile, "data", "responses.sqlite"))
    r = store.frame("WHERE prompt_format = ?", (prompt_format,))
    store.close()
    # the conditions first, then the most recent run among them: 07's option-only answers are
    # `mcq` rows of the same model too, stored later with other settings and conditions
    keep = set(conditions) | {f"{c} (embedded)" for c in conditions}
    r = current(r[r["condition"].isin(keep)])
    if models is not None:
        missing = sorted(set(models) - set(r["model"]))
        if missing:
            raise ValueError(f"calibration_models: no '{prompt_format}' answers of {missing} in the store of "
                             f"profile '{profile}' (models there: {sorted(set(r['model']))})")
        r = r[r["model"].isin(models)]
    items = pd.concat([data.load_frame(profile, "items"), data.load_frame(profile, "psych_items")])
    subset = data.load_frame(profile, "variants").drop_duplicates("item_id").set_index("item_id")["subset"]
    items = items.assign(subset=items["item_id"].map(subset))
    return r, items


def questions(responses: pd.DataFrame, items: pd.DataFrame, seed: int, unparsed: str = "drop") -> pd.DataFrame:
    """The per-question table (:func:`uncertainty.questions`) with each
    item's subset; ``unparsed`` is the rule for unparsed answers ("incorrect":
    seed 000 §2, "mark predictions that do not match the ground truth as
    incorrect"; "drop": left out)."""
    qt = uncertainty.questions(runs.mark_truncated(responses), items, seed, unparsed=unparsed)
    return qt.merge(items[["item_id", "subset"]], on="item_id", how="left")


def unparsed_note(rule: str) -> str:
    """The sentence a table caption carries about the rule for unparsed answers."""
    notes = {"incorrect": "Unparsed answers are counted incorrect (seed 000 §2: \"mark predictions that do not "
                          "match the ground truth as incorrect\"); a question with no parsed sample has confidence 0. "
                          "A reply cut by the token limit is left out, not counted incorrect (column truncated).",
             "drop": "Unparsed answers are left out (a question with no parsed sample is not scored), "
                     "not the seed's rule (seed 000 §2 counts them incorrect); so are replies cut by the "
                     "token limit (column truncated)."}
    if rule not in notes:
        raise ValueError(f"unparsed rule must be one of {list(notes)}, not {rule!r}")
    return notes[rule]


def accuracy_table(qt: pd.DataFrame, rule: str, by: tuple[str, ...] = ("model", "condition")) -> pd.DataFrame:
    """Single-sample accuracy with the parsing beside it, per group: questions,
    scored (questions with a ``single_correct``), accuracy (%), single answers
    unparsed, questions with no parsed sample, samples parsed (%), and the
    questions with at least half of their K samples parsed (%), the measure of
    seed 000 Table 3 ("parsing rate": ≥ 5/10). ``rule`` names the rule the
    table was scored under (column ``unparsed rule``)."""
    unparsed_note(rule)
    by = [b for b in by if b in qt.columns]
    d = qt.assign(_half=qt["n_parsed"] >= (qt["n_samples"] + 1) // 2,
                  _single_unparsed=qt["single"].isna() & (qt["n_samples"] > 0))
    g = d.groupby(by, sort=False, observed=True)
    out = g.agg(questions=("item_id", "size"), scored=("single_correct", "count"),
                acc=("single_correct", "mean"), single_unparsed=("_single_unparsed", "sum"),
                none=("n_parsed", lambda s: int((s == 0).sum())), parsed=("n_parsed", "sum"),
                samples=("n_samples", "sum"), half=("_half", "mean"), truncated=("n_truncated", "sum")).reset_index()
    ci = pd.DataFrame([_parse_intervals(x) for _, x in g], index=out.index)
    return pd.DataFrame({**{b: out[b] for b in by}, "questions": out["questions"], "scored": out["scored"],
                         "accuracy (%)": 100 * out["acc"], "accuracy lo": ci["acc_lo"], "accuracy hi": ci["acc_hi"],
                         "single answer unparsed": out["single_unparsed"].astype(int),
                         "no parsed sample": out["none"], "samples": out["samples"].astype(int),
                         "samples parsed (%)": 100 * out["parsed"] / out["samples"],
                         "samples parsed lo": ci["samples_lo"], "samples parsed hi": ci["samples_hi"],
                         "questions ≥ half parsed (%)": 100 * out["half"],
                         "questions ≥ half parsed lo": ci["half_lo"], "questions ≥ half parsed hi": ci["half_hi"],
                         "truncated": out["truncated"].astype(int), "unparsed rule": rule})


def _parse_intervals(g: pd.DataFrame) -> dict:
    """95 % intervals in % (:func:`medaudit.stats.intervals.proportion_interval`)
    of one group's single-sample accuracy (one row per scored question),
    samples parsed (a question's K samples clustered by item) and questions
    with at least half of their samples parsed (one row per question,
    clustered by item)."""
    acc = intervals.proportion_interval(g["single_correct"].to_numpy(float), g["item_id"].to_numpy())
    k, m = g["n_parsed"].to_numpy(int), g["n_samples"].to_numpy(int)
    rows = np.concatenate([np.r_[np.ones(a), np.zeros(b - a)] for a, b in zip(k, m)]) if m.sum() else np.zeros(0)
    smp = intervals.proportion_interval(rows, np.repeat(g["item_id"].to_numpy(), m))
    half = intervals.proportion_interval(g["_half"].to_numpy(float), g["item_id"].to_numpy())
    return {f"{name}_{e}": 100 * r[e] for name, r in (("acc", acc), ("samples", smp), ("half", half))
            for e in ("lo", "hi")}


MARGIN = 2.0   # points: the default δ of 04's and 05's verdicts (profile key calibration_margin; docs/statistics.md)


def compare(qt: pd.DataFrame, base: str, conditions: list[str], n_boot: int, seed: int,
            pairs: list[tuple[str, str]] = (), confidence: str = "confidence", margin: float = MARGIN
            ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Every condition against the base, and the given within-model pairs
    (:func:`medaudit.stats.paired.paired_bootstrap`, then :func:`covered`: the
    intervals, tests and verdicts that hold at the run's n); p-values
    corrected by Holm and BH within each metric. ``confidence`` names the
    confidence column (``"logprob_confidence"``: the B.3 baseline of Table 7)."""
    have = set(qt["condition"])
    # the listed conditions, each followed by its embedded form (B.1) when that was run
    present = [x for c in conditions for x in (c, f"{c} (embedded)") if x in have and x != base]

    def run(**kw):
        res = stats.paired_bootstrap(qt, n_boot=n_boot, seed=seed, confidence=confidence, **kw)
        return stats.adjust_pvalues(covered(res, qt, margin, confidence, n_perm=n_boot, seed=seed))

    res = run(base=base, conditions=present)
    pairs = [p for p in pairs if set(p) <= set(qt["condition"])]
    return res, (run(pairs=pairs) if pairs else None)


ITEM_METRICS = {"accuracy": "single_correct", "majority_accuracy": "majority_correct"}


def covered(res: pd.DataFrame, qt: pd.DataFrame, margin: float = MARGIN, confidence: str = "confidence",
            n_perm: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The rows of :func:`medaudit.stats.paired.paired_bootstrap` with
    the interval, test and verdict that hold at the run's n (the coverage
    table of docs/statistics.md). Item-mean metrics (accuracy, majority
    accuracy, confidence, Brier): ``ci_lo`` / ``ci_hi`` are
    :func:`medaudit.stats.intervals.paired_interval` on the paired items (the
    percentile bootstrap covered 77–90 % at n = 8); ECE and AUROC, which are
    not means over items, get no interval (NaN: none was shown to cover).
    ``p`` (what the marks read): McNemar for accuracy, as before; the exact
    sign-flip test (:func:`medaudit.stats.intervals.signflip_p`) for the other
    item means; for ECE and AUROC the randomisation test that swaps the two
    conditions' answers within items (:func:`swap_p`). ``p_boot`` stays
    beside it as the seed's bootstrap p, not used for marks. ``margin``
    (points) and ``verdict`` (:func:`medaudit.stats.equivalence.verdict`; ECE and
    AUROC can show a difference, never equivalence), ``ci_method``, and
    ``p_method``: which test gave ``p`` and whether it is exact or a Monte
    Carlo estimate (:func:`p_method`)."""
    if res.empty:
        return res.assign(ci_method=pd.Series(dtype=object), margin=pd.Series(dtype=float),
                          verdict=pd.Series(dtype=object), p_method=pd.Series(dtype=object))
    units = [u for u in stats.UNITS if u in res.columns]
    lay = stats.layout(qt, units, confidence)
    per_item = {"accuracy": lay.acc, "majority_accuracy": lay.correct, "confidence": lay.conf,
                "brier": (lay.conf - lay.correct) ** 2}
    out = res.copy().reset_index(drop=True)
    extra = []
    for r in out.to_dict("records"):
        ia = lay.index.get((tuple(r[u] for u in units), r["cond_a"]))
        ib = lay.index.get((tuple(r[u] for u in units), r["cond_b"]))
        m = lay.valid[ia] & lay.valid[ib]
        n = int(m.sum())
        if r["metric"] in per_item:
            x = per_item[r["metric"]]
            ya, yb = x[ia][m], x[ib][m]
            ci = intervals.paired_interval(ya, yb, lay.items.to_numpy()[m])
            if r["metric"] == "accuracy":
                p, test = r["p"], "McNemar"
            else:
                p = intervals.signflip_p(ya, yb)
                test = p_method("sign-flip", intervals.signflip_is_exact(ya, yb), intervals.N_PERM)
            lo, hi = ci["lo"], ci["hi"]
            v = equivalence.verdict(p, 100 * lo, 100 * hi, margin, n)
            how = intervals.METHOD
        else:
            p = swap_p(lay, ia, ib, m, r["metric"], n_perm, seed)
            test = p_method("swap", n <= SWAP_EXACT_UP_TO, n_perm)
            lo = hi = np.nan
            v = equivalence.verdict(p, np.nan, np.nan, margin, n)
            how = "none: no interval shown to cover"
        extra.append({"ci_lo": lo, "ci_hi": hi, "p": p, "ci_method": how, "margin": margin, "verdict": v,
                      "p_method": test})
    extra = pd.DataFrame(extra)
    for c in extra.columns:
        out[c] = extra[c].to_numpy()
    return out


SWAP_EXACT_UP_TO = 10    # swap_p enumerates every swap pattern up to this many items


def p_method(test: str, exact: bool, n_random: int) -> str:
    """How a randomisation p was computed, for a table cell or a sentence:
    "exact sign-flip" (every sign pattern, or its exact distribution), or
    "sign-flip from 20,000 random flips" (a Monte Carlo estimate: confidence
    and Brier are continuous, so above
    :data:`medaudit.stats.intervals.EXACT_UP_TO` questions with a non-zero
    difference :func:`medaudit.stats.intervals.signflip_p` samples)."""
    if exact:
        return f"exact {test}"
    return f"{test} from {n_random:,} random {'flips' if test == 'sign-flip' else 'swaps'}"


def p_note(res: pd.DataFrame) -> str:
    """A caption's sentence, computed from :func:`covered`'s rows, on which
    test gave each p and where it is a Monte Carlo estimate, e.g. "p:
    McNemar (accuracy); exact sign-flip (confidence, 4 rows); sign-flip from
    20,000 random flips (confidence, Brier, 8 rows)". Empty without
    ``p_method``."""
    if res is None or "p_method" not in res.columns or not len(res):
        return ""
    parts = []
    for how, g in res.groupby("p_method", sort=False):
        metrics = ", ".join(dict.fromkeys(g["metric"]))
        rows = f", {len(g)} row{'s' if len(g) != 1 else ''}" if how != "McNemar" else ""
        parts.append(f"{how} ({metrics}{rows})")
    return "p: " + "; ".join(parts) + "."


def swap_p(lay: "stats.Layout", ia: int, ib: int, mask: np.ndarray, metric: str, n_perm: int = 1000,
           seed: int = 0) -> float:
    """Two-sided randomisation p of metric(b) − metric(a) (ECE, AUROC) when
    the two conditions' answers (confidence and correctness) are swapped
    within items: every swap pattern up to 10 items, else ``n_perm`` seeded
    patterns (p = (1 + #)/(1 + n_perm)). Exact under "the condition does not
    matter" (the answers of an item are exchangeable), so it holds its level
    at every n; on three items its smallest p is 2/8."""
    idx = np.flatnonzero(mask)
    n = idx.size
    if n == 0:
        return float("nan")
    if n <= SWAP_EXACT_UP_TO:
        swaps = np.array(list(itertools.product((False, True), repeat=n)), dtype=bool)   # row 0: as observed
    else:
        swaps = np.random.default_rng(seed).random((n_perm, n)) < 0.5
        swaps[0] = False             # the observed pattern counts among the patterns: p = (1 + #) / (1 + B)
    grids = [lay.conf, lay.correct, lay.acc]
    a = [g[ia][idx] for g in grids]
    b = [g[ib][idx] for g in grids]
    rows = [np.concatenate([np.where(swaps, y, x), np.where(swaps, x, y)]) for x, y in zip(a, b)]
    vals = stats.bootstrap_metrics(np.ones((1, n)), *rows, np.ones_like(rows[0], dtype=bool))[metric][0]
    k = swaps.shape[0]
    d = vals[k:] - vals[:k]
    obs = d[0]
    d = d[np.isfinite(d)]
    if not np.isfinite(obs) or not d.size:
        return float("nan")
    return float((np.abs(d) >= abs(obs) - 1e-12).sum() / d.size)


def coverage(qt: pd.DataFrame, conditions: list[str], base: str = "base",
             pairs: list[tuple[str, str]] = ()) -> pd.DataFrame:
    """What :func:`compare` can estimate, per model: every listed condition
    against ``base``, then ``pairs``, with the questions answered under each
    side and the items answered under both (``paired items``, the n of the
    comparison); ``status`` is "ok" or names what is missing — "no answers
    under +homo", or "no item answered under both". A partial run (an import
    of some conditions or items) has empty rows in the seed tables exactly
    where this says why."""
    rows = []
    for model, g in qt.groupby("model", sort=False):
        have = {c: set(x["item_id"]) for c, x in g.groupby("condition")}
        for a, b in [(base, c) for c in conditions if c != base] + list(pairs):
            ia, ib = have.get(a, set()), have.get(b, set())
            lacking = [c for c, i in ((a, ia), (b, ib)) if not i]
            rows.append({"model": model, "comparison": f"{b} vs {a}", "items a": len(ia),
                         "items b": len(ib), "paired items": len(ia & ib),
                         "status": ("ok" if ia & ib else f"no answers under {', '.join(lacking)}" if lacking
                                    else "no item answered under both")})
    return pd.DataFrame(rows, columns=["model", "comparison", "items a", "items b", "paired items", "status"])


def joint_vs_single(qt: pd.DataFrame, conditions: list[str], n_boot: int, seed: int, base: str = "base",
                    orientation: str = "+homo", margin: float = MARGIN) -> pd.DataFrame:
    """Seed 000 §3's test of a compounding effect: "For Bio-Medical-Llama-3-8B,
    the accuracy drop for +homo+Cat (-5.58) is significantly larger than the
    drops for +homo (-2.37) or +Cat (-1.10) alone." Per model and joint
    condition ``orientation`` + religion of ``conditions`` whose parts are
    there too: the joint condition against each single one on the same items
    (the joint drop minus the single drop is joint − single accuracy; McNemar,
    as for every accuracy comparison). Columns: model, joint, single, joint Δ,
    single Δ (points vs ``base``), joint − single, its covering 95 % interval
    (ci_lo, ci_hi, points), p (McNemar), p_holm (within the table), joint
    drop larger (joint − single < 0 and p ≤ 0.05 on enough items), margin and
    verdict (:func:`covered`). The
    interaction model (:func:`stats.nonadditivity_test`) asks a different
    question (the joint effect against the *sum* of the single effects)."""
    have = set(qt["condition"]) & set(conditions)
    jobs = [(c, part) for c in conditions if c.startswith(orientation) and c != orientation and c in have
            for part in (orientation, c[len(orientation):]) if part in have and base in have]
    cols = ["model", "joint", "single", "joint Δ", "single Δ", "joint − single", "ci_lo", "ci_hi", "p", "p_holm",
            "joint drop larger", "margin", "verdict"]
    if not jobs:
        return pd.DataFrame(columns=cols)
    pairs = [(single, joint) for joint, single in jobs]
    diff = stats.adjust_pvalues(covered(stats.paired_bootstrap(qt, pairs=pairs, n_boot=n_boot, seed=seed,
                                                               metrics=("accuracy",)), qt, margin))
    vs_base = stats.paired_bootstrap(qt, base=base, conditions=sorted({c for p in pairs for c in p}),
                                     n_boot=n_boot, seed=seed, metrics=("accuracy",), mcnemar=False)
    units = [u for u in ("model", "prompt_format") if u in diff.columns]
    d_base = vs_base.set_index([*units, "cond_b"])["delta"]
    key = lambda r, c: (*[r[u] for u in units], r[c])                  # noqa: E731
    out = pd.DataFrame({**{u: diff[u] for u in units}, "joint": diff["cond_b"], "single": diff["cond_a"],
                        "joint Δ": [100 * d_base[key(r, "cond_b")] for _, r in diff.iterrows()],
                        "single Δ": [100 * d_base[key(r, "cond_a")] for _, r in diff.iterrows()],
                        "joint − single": 100 * diff["delta"], "ci_lo": 100 * diff["ci_lo"],
                        "ci_hi": 100 * diff["ci_hi"], "p": diff["p"], "p_holm": diff["p_holm"],
                        "margin": diff["margin"], "verdict": diff["verdict"]})
    out["joint drop larger"] = ((out["joint − single"] < 0) & (out["p"] <= 0.05)
                                & diff["n_items"].map(intervals.can_tell).to_numpy())
    return out[[*units, *cols[1:]]].reset_index(drop=True)


def nonadditivity_shown(fits: dict) -> tuple[pd.DataFrame | None, list[str]]:
    """What notebook 04 shows of :func:`nonadditivity_test`
    per model (``fits``: model → result): the coefficients of the models it
    could estimate (None when none), and a sentence for each it could not,
    with its counts and why. A model that cannot be estimated has no
    coefficients to show (a table of NaN said nothing)."""
    ok = {m: f["coefficients"] for m, f in fits.items() if f["estimable"]}
    notes = [f"{m}: the interaction model cannot be estimated on {f['n_items']} questions "
             f"({f['n_items_informative']} whose correctness varies across conditions): {f['reason']}; "
             "no coefficient is shown." for m, f in fits.items() if not f["estimable"]]
    return (pd.concat(ok) if ok else None), notes


def seed_tables(res: pd.DataFrame, pair_res: pd.DataFrame | None, layout: dict, profile: str,
                prefix: str, note: str = "") -> dict[str, pd.DataFrame]:
    """Save each panel of a seed-000 table; returns the marked text tables.
    ``note`` is appended to every caption (e.g. :func:`unparsed_note`)."""
    out = {}
    for panel, (metric, relative, scale, better, caption) in layout.items():
        pair = {}
        if pair_res is not None:
            pr = pair_res[pair_res["metric"] == metric]
            if len(pr):     # the ‡ mark, and the n and MDE of its own pair
                pair = {f"pair_{k}": pr.pivot(index="model", columns="cond_b", values=v)
                        for k, v in (("p", "p"), ("n", "n_items"), ("mde", "mde"))}
        t = tables.delta_table(res, metric, relative=relative, scale=scale, **pair)
        out[panel] = tables.save_delta_table(t, f"{prefix}_{panel}", profile,
                                             f"{caption} {note}".strip(), better)
    return out


def table9(res: pd.DataFrame, profile: str, note: str = "", conditions: tuple[str, ...] = TABLE9_CONDITIONS,
           prefix: str = "04_table9") -> dict[str, pd.DataFrame]:
    """Seed 000 Table 9 (B.7) from :func:`compare`'s results: "Results
    obtained by replacing 'homosexual' with 'gay' in the injection
    template", panels (A) accuracy, (B) Brier score, (C) confidence as in
    Table 1 (Base absolute, the others Δ vs Base, * where p ≤ 0.05), one row
    per model and the columns Base, +gay, +gay+Cat, +gay+Mus, +gay+Ath in
    the seed's order, whatever order the profile ran them in. Only the
    stand-alone sentence (the seed's Table 9); a condition with no answers
    is left out, and ``{}`` is returned when none of ``conditions`` was
    answered. Saved as ``<prefix>_A`` … ``_C`` (:func:`seed_tables`)."""
    r = res[res["cond_b"].isin(conditions)]
    if r.empty:
        return {}
    order = {c: i for i, c in enumerate(conditions)}
    r = r.sort_values("cond_b", key=lambda s: s.map(order), kind="stable")
    return seed_tables(r, None, TABLE9, profile, prefix, note)


def table9_frame(t9: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The panels of :func:`table9` stacked as the seed prints them: (A),
    then (B), then (C), each with a row per model (index: panel, model)."""
    return pd.concat(t9, names=["panel"]) if t9 else pd.DataFrame()


# --------------------------------------------------------------------------
# non-additivity of orientation × religion (seed 000's factors)

ORIENTATIONS = ("hetero", "homo", "gay", "bi")


RELIGIONS = ("Cat", "Mus", "Ath")


def condition_factors(conditions: Iterable[str], base: str = "base",
                      orientations: Iterable[str] = ORIENTATIONS,
                      religions: Iterable[str] = RELIGIONS) -> pd.DataFrame:
    """(condition, orientation, religion) for the conditions made only of
    known tokens ("+homo+Cat" → homo, Cat; base → none, none); others are
    left out. Absent factors are the string "none"."""
    ori, rel = set(orientations), set(religions)
    rows = []
    for cond in conditions:
        if cond == base:
            rows.append((cond, "none", "none"))
            continue
        toks = [t for t in str(cond).split("+") if t]
        o = [t for t in toks if t in ori]
        r = [t for t in toks if t in rel]
        if toks and len(o) <= 1 and len(r) <= 1 and len(o) + len(r) == len(toks):
            rows.append((cond, o[0] if o else "none", r[0] if r else "none"))
    return pd.DataFrame(rows, columns=["condition", "orientation", "religion"])


def interaction_design(factors: pd.DataFrame) -> pd.DataFrame:
    """Dummy design per condition: one column per non-"none" orientation and
    religion level, and one ``o:r`` column for each joint condition present.
    Index: condition. The base (none, none) row is all zeros."""
    f = factors.set_index("condition")
    cols = {}
    for o in sorted(set(f["orientation"]) - {"none"}):
        cols[o] = (f["orientation"] == o).astype(float)
    for r in sorted(set(f["religion"]) - {"none"}):
        cols[r] = (f["religion"] == r).astype(float)
    for o, r in sorted({(o, r) for o, r in zip(f["orientation"], f["religion"]) if "none" not in (o, r)}):
        cols[f"{o}:{r}"] = ((f["orientation"] == o) & (f["religion"] == r)).astype(float)
    return pd.DataFrame(cols, index=f.index)


def nonadditivity_test(qt: pd.DataFrame, *, outcome: str = "single_correct", method: str = "conditional",
                       factors: pd.DataFrame | None = None, base: str = "base",
                       orientation: str = "homo", level: float = 0.95) -> dict:
    """Is the joint effect of orientation and religion different from the sum
    of the single effects? A logit model of per-question correctness with
    item effects, fitted to ONE model's questions (filter ``qt`` first).

    ``logit P(correct_ic) = α_i + Σ_o β_o·O_o(c) + Σ_r γ_r·R_r(c) + Σ_{o,r} δ_or·O_o(c)·R_r(c)``

    with α_i one effect per item; ``δ_or`` is the non-additivity on the
    log-odds scale: 0 when the joint condition's log-odds shift equals the sum
    of the two single shifts.

    ``method="conditional"`` (default): conditional logit
    (``statsmodels`` ``ConditionalLogit``, groups = items). Conditioning on
    each item's number of correct answers removes α_i exactly, so 2,364 item
    effects need not be estimated: an unconditional logit with that many
    dummies is biased with ~8 observations per item (incidental parameters)
    and fails to converge for the many items answered right (or wrong) under
    every condition, whose α_i is infinite. Those items carry no information
    about the condition effects and drop out (``n_items_informative``).
    ``method="gee"``: a population-averaged logit (GEE, exchangeable
    working correlation within item, robust SEs) as a sensitivity check; its
    coefficients are marginal, hence smaller in magnitude.

    Returns a dict: ``coefficients`` (term, coef, se, ci_lo, ci_hi, p,
    odds_ratio, interaction), ``pooled`` (the mean of the ``orientation:r``
    interactions with its Wald CI and p: one 1-df test of non-additivity
    for ``orientation``), ``joint`` (Wald χ² that all interactions are 0:
    chi2, df, p), and n_obs, n_items, n_items_informative, method,
    converged, max_abs_score (conditional: the largest |gradient| of the
    log-likelihood per observation at the estimate), ``estimable`` and
    ``reason``. Where the model cannot be estimated (no item varies, or too
    few for the terms: a singular information matrix, as in make all's
    default run of 2026-11-26 on 4 questions) ``estimable`` is False, ``reason`` says why, and
    the coefficients are NaN: the table still shows the terms and the counts.
    """
    if factors is None:
        factors = condition_factors(pd.unique(qt["condition"]), base=base)
    design = interaction_design(factors)
    d = qt[qt["condition"].isin(design.index) & qt[outcome].notna()]
    X = design.loc[d["condition"]].to_numpy()
    keep = X.std(axis=0) > 0
    names = list(design.columns[keep])
    X = X[:, keep]
    y = d[outcome].to_numpy(dtype=float)
    groups = pd.factorize(d["item_id"])[0]
    per_item = pd.Series(y).groupby(groups).agg(["min", "max"])
    counts = {"n_obs": int(len(y)), "n_items": int(per_item.shape[0]),
              "n_items_informative": int((per_item["min"] != per_item["max"]).sum()), "method": method}
    reason = "" if counts["n_items_informative"] else "no item's correctness varies across its conditions"
    if not reason:
        try:
            fit, conv, score = fit_logit(y, X, groups, method)
            params = np.asarray(fit.params)[-len(names):]
            cov = np.asarray(fit.cov_params())[-len(names):, -len(names):]
        except (ValueError, np.linalg.LinAlgError) as e:   # a singular information matrix: too few items vary
            counts["error"] = f"{type(e).__name__}: {e}"      # the fitting library's own words, kept for a reader
            reason = (f"{counts['n_items_informative']} informative question(s) for {len(names)} terms, too few "
                      "to estimate every term (the information matrix is singular)")
    if reason:                        # not estimable: the same table, NaN throughout
        params, cov = np.full(len(names), np.nan), np.full((len(names), len(names)), np.nan)
        conv, score = False, np.nan
    se = np.sqrt(np.diag(cov))
    z = sstats.norm.ppf(0.5 + level / 2)
    coef = pd.DataFrame({"term": names, "coef": params, "se": se, "ci_lo": params - z * se,
                         "ci_hi": params + z * se, "p": 2 * sstats.norm.sf(np.abs(params / se)),
                         "odds_ratio": np.exp(params), "interaction": [":" in t for t in names]})
    inter = np.array([":" in t for t in names])
    mine = np.array([t.startswith(f"{orientation}:") for t in names])
    joint = {"chi2": np.nan, "df": 0, "p": np.nan} if reason else wald_test(params[inter], cov[np.ix_(inter, inter)])
    pooled = linear_contrast(params, cov, mine / max(mine.sum(), 1), z) if mine.any() and not reason else None
    return {"coefficients": coef, "pooled": pooled, "joint": joint, **counts, "converged": conv,
            "max_abs_score": score, "estimable": not reason, "reason": reason}


def interaction_contrasts(orientation: str = "+homo", religions: Iterable[str] = ("+Cat", "+Mus", "+Ath"),
                          base: str = "base") -> dict[str, dict[str, float]]:
    """Difference-in-differences contrasts for :func:`bootstrap_contrasts`:
    ``(joint − base) − (orientation − base) − (religion − base)`` per
    religion, i.e. the joint delta minus the sum of the single deltas on the
    metric's own scale (percentage points for accuracy, Brier units …)."""
    return {f"{orientation}{r} − ({orientation}) − ({r})": {base: 1.0, orientation: -1.0, r: -1.0,
                                                            f"{orientation}{r}": 1.0}
            for r in religions}
