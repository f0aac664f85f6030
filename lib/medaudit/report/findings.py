"""What this run shows: a few sentences of Markdown per notebook, written
from the tables the notebook has just computed.

Every sentence is built from the table row it cites: the estimate, its 95 %
interval, the test's p, the N and the verdict column
(:func:`medaudit.stats.equivalence.verdict`: *difference shown*, *equivalence
shown within ±δ*, *inconclusive*, *too few to tell*). Nothing here computes
a statistic: a table without a verdict column is read by its own p and N
(the test the table ran), and a contrast on fewer than
:data:`medaudit.stats.intervals.MIN_N` questions (or with no rows at all) is said
to be one this run cannot tell, whatever its estimate. A missing number is
never printed inside a sentence (no "nan", no "n/a"): the clause says what
is missing ("no estimate", "no p-value", "no interval", "no vignettes"), or
is left out, and :func:`unreadable` finds any that slips through (the tests
run every function here on tables with missing cells). A count a sentence
states is the sum its table shows. One function per notebook; each takes the frames the
notebook has in its namespace and returns Markdown (the notebook displays it
with ``IPython.display.Markdown``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from medaudit.stats import equivalence, intervals

NA = "n/a"
DIFFERENCE, EQUIVALENCE, INCONCLUSIVE, TOO_FEW, NO_VERDICT = (
    "difference", "equivalence", "inconclusive", "too few", "no verdict")
MAX_DETAILS = 3      # contrasts with a difference shown written out per group; the rest are listed short
MAX_LISTED = 6       # contrasts listed under one reading; past it, "and k more" (the table has them all)


# --- numbers ---------------------------------------------------------------

def finite(x) -> bool:
    """A number that can be printed (not None, NaN or ±inf)."""
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def num(x, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals, or "n/a"."""
    return f"{float(x):.{digits}f}" if finite(x) else NA


def signed(x, digits: int = 2) -> str:
    """``x`` with its sign ("+3.40", "−1.20"; the minus sign), or "n/a"."""
    return f"{float(x):+.{digits}f}".replace("-", "−") if finite(x) else NA


def pct(x, digits: int = 2) -> str:
    """A percentage ("7.19 %"), or "n/a"."""
    return f"{num(x, digits)} %" if finite(x) else NA


def count(n) -> str:
    """A count ("147"), or "n/a"."""
    return f"{round(float(n)):,}" if finite(n) else NA


def pvalue(p) -> str:
    """"p = 0.042", "p < 0.001", or "no p-value"."""
    if not finite(p):
        return "no p-value"
    return "p < 0.001" if float(p) < 0.001 else f"p = {float(p):.3f}"


def interval(lo, hi, digits: int = 2) -> str:
    """"95 % CI −4.10 to 2.30", or "no interval" when either end is missing."""
    if not (finite(lo) and finite(hi)):
        return "no interval"
    return f"95 % CI {signed(lo, digits)} to {signed(hi, digits)}"


# --- verdicts ----------------------------------------------------------------

def kind(verdict, n) -> str:
    """Which reading a row's verdict column gives: :data:`DIFFERENCE`,
    :data:`EQUIVALENCE`, :data:`INCONCLUSIVE`, :data:`TOO_FEW` (fewer than
    :data:`medaudit.stats.intervals.MIN_N` units whatever the column says, or the
    column says so) or :data:`NO_VERDICT` (the column is empty)."""
    if not intervals.can_tell(n if finite(n) else None):
        return TOO_FEW
    v = str(verdict) if isinstance(verdict, str) else ""
    if v.startswith(equivalence.DIFFERENCE):
        return DIFFERENCE
    if v.startswith("equivalence shown"):
        return EQUIVALENCE
    if v.startswith(equivalence.INCONCLUSIVE):
        return INCONCLUSIVE
    if v.startswith(intervals.TOO_FEW):
        return TOO_FEW
    return NO_VERDICT


def kind_from_test(p, n, alpha: float = 0.05) -> str:
    """The reading of a table that runs a test but declares no margin: a
    rejection is a difference shown; no rejection is :data:`INCONCLUSIVE`
    (without a margin "no difference" cannot be read)."""
    if not intervals.can_tell(n if finite(n) else None):
        return TOO_FEW
    if finite(p) and float(p) <= alpha:
        return DIFFERENCE
    return INCONCLUSIVE if finite(p) else NO_VERDICT


_WITHIN = re.compile(r"within ±([0-9.]+)")


def margin_in(verdict) -> float | None:
    """The margin an "equivalence shown within ±δ" verdict names (tables
    whose verdict column is the only place the margin is written)."""
    m = _WITHIN.search(verdict) if isinstance(verdict, str) else None
    return float(m.group(1)) if m else None


def reading(k: str, margin=None) -> str:
    """The words of a reading, in bold: what a reader may conclude."""
    if k == DIFFERENCE:
        return "**difference shown**"
    if k == EQUIVALENCE:
        return f"**equivalence shown within ±{num(margin, 1)} points** (the whole interval lies inside the margin)"
    if k == INCONCLUSIVE:
        if finite(margin):
            return (f"**inconclusive**: the test does not reject, and a difference of ±{num(margin, 1)} points or "
                    "more is still possible")
        return ("**inconclusive**: the test does not reject, and no margin is declared to show the absence of "
                "a difference")
    if k == TOO_FEW:
        return f"**too few to tell** (below {intervals.MIN_N})"
    return "**no verdict** in the table"


def units_phrase(n, unit: str) -> str:
    """"n = 147 questions" ("no questions paired" when the table has no n)."""
    return f"n = {count(n)} {unit_of(n, unit)}" if finite(n) else f"no {unit} paired"


def unit_of(n, unit: str) -> str:
    """``unit`` in the singular for one ("1 dialog"), else as given."""
    return unit[:-1] if finite(n) and float(n) == 1 and unit.endswith("s") else unit


class Columns:
    """Where a contrast table keeps its numbers: ``name(row)`` names the
    contrast; the estimate, interval ends, p and n columns; ``scale``
    multiplies the estimate and interval (100: a proportion shown in points);
    ``test`` names the test before its p (a text, or ``test(row)``: a text
    with "{p}" where the p goes, e.g. "sign-flip {p} from 20,000 random
    flips"); ``note(row)`` adds a clause."""

    def __init__(self, name, delta="delta", lo="ci_lo", hi="ci_hi", p="p", n="n", verdict="verdict",
                 margin="margin", scale=1.0, unit="points", digits=2, test="", note=None):
        self.name, self.delta, self.lo, self.hi, self.p, self.n = name, delta, lo, hi, p, n
        self.verdict, self.margin, self.scale, self.unit, self.digits, self.test = (
            verdict, margin, scale, unit, digits, test)
        self.note = note or (lambda r: "")     # a clause after the reading (e.g. the judge-error band)

    def get(self, r, col):
        """The number in column ``col`` of row ``r`` times ``scale``; None when the column is
        unnamed or the value not finite."""
        x = r.get(col) if col else None
        return self.scale * float(x) if finite(x) else None

    def estimate(self, r) -> str:
        """"−7.20 points", or "no estimate"."""
        x = self.get(r, self.delta)
        return f"{signed(x, self.digits)}{' ' + self.unit if self.unit else ''}" if finite(x) else "no estimate"

    def numbers(self, r, unit: str) -> str:
        """"95 % CI −12.00 to −2.40, p = 0.010, n = 50 questions"."""
        test = self.test(r) if callable(self.test) else self.test
        if "{p}" in test:
            p = test.replace("{p}", pvalue(r.get(self.p)) if finite(r.get(self.p)) else "(no p-value)")
        else:
            test = test + " " if test else ""
            p = f"{test}{pvalue(r.get(self.p))}" if finite(r.get(self.p)) else f"no {test}p-value"
        return (f"{interval(self.get(r, self.lo), self.get(r, self.hi), self.digits)}, {p}, "
                f"{units_phrase(r.get(self.n), unit)}")

    def margin_of(self, r):
        """The row's margin: its margin column, else the one its verdict names."""
        if isinstance(self.margin, (int, float)) and not isinstance(self.margin, bool):
            return float(self.margin)        # a margin the table states once (its caption), not per row
        m = r.get(self.margin) if self.margin else None
        return m if finite(m) else margin_in(r.get(self.verdict) if self.verdict else None)

    def full(self, r, k, unit: str) -> str:
        """A contrast in full: name, estimate, interval, p, n and its reading."""
        return (f"{self.name(r)}: {self.estimate(r)} ({self.numbers(r, unit)}): "
                f"{reading(k, self.margin_of(r))}{self.note(r)}.")

    def short(self, r, unit: str) -> str:
        """A contrast in one clause (its reading said by the sentence it is listed in)."""
        return f"{self.name(r)} {self.estimate(r)} ({self.numbers(r, unit)}){self.note(r)}"


def too_few(what: str, n, unit: str, shown: str = "") -> str:
    """The sentence for contrasts this run cannot tell; ``n`` a count or the
    counts' text ("3 or 5"); ``shown`` the estimates, for the record."""
    ns = n if isinstance(n, str) else count(n) if finite(n) and float(n) > 0 else "no"
    u = unit if isinstance(n, str) else unit_of(n, unit)
    tail = f" (estimates: {shown})" if shown else ""
    return (f"With {ns} {u} this run cannot tell whether {what}{tail}: below {intervals.MIN_N} {unit} no "
            "interval or test is vouched for (docs/statistics.md).")


def _label(row, cols) -> str:
    return " · ".join(str(row[c]) for c in cols if c in row and pd.notna(row[c]) and str(row[c]) != "")


def _need(rows: pd.DataFrame, cols, margin, unit: str = "questions") -> str:
    """"; showing equivalence within ±3.0 points would need about 1,200 questions at this spread" for
    the rows whose interval reaches past the margin (:func:`medaudit.stats.equivalence.questions_for_equivalence`
    of each row), or "" where none can be computed."""
    if not finite(margin):
        return ""
    need = [equivalence.questions_for_equivalence(cols.get(r, cols.lo) if cols.lo else np.nan,
                                                  cols.get(r, cols.hi) if cols.hi else np.nan,
                                                  r.get(cols.n), float(margin)) for _, r in rows.iterrows()]
    need = sorted(x for x in (np.nan if v is None else v for v in need) if finite(x))
    if not need:
        return ""
    span = count(need[0]) if need[0] == need[-1] else f"{count(need[0])} to {count(need[-1])}"
    return (f"; showing equivalence within ±{num(margin, 1)} points would need about {span} {unit} at "
            f"{'this interval' + chr(39) + 's' if len(need) == 1 else 'these intervals' + chr(39)} spread")


def why_inconclusive(r, cols, margin) -> str:
    """The reason an inconclusive row reads so, re-derived from its own numbers
    (:func:`medaudit.stats.equivalence.reason`): "disagree" (the test rejects, the
    interval holds 0), "beyond margin", "no margin"; "table" where the
    table's verdict column and its numbers do not give one of these."""
    lo = cols.get(r, cols.lo) if cols.lo else None
    hi = cols.get(r, cols.hi) if cols.hi else None
    p = r.get(cols.p) if cols.p else None
    why = equivalence.reason(float(p) if finite(p) else np.nan, np.nan if lo is None else lo,
                             np.nan if hi is None else hi, float(margin) if finite(margin) else None,
                             r.get(cols.n))
    return why if why in ("disagree", "beyond margin", "no margin") else "table"


def _rest(k: str, items: str, margin, unit: str, why: str = "", need: str = "") -> str:
    """One sentence for the contrasts of reading ``k`` not written out in full; for
    :data:`INCONCLUSIVE`, ``why`` (:func:`why_inconclusive`) says which reason and ``need`` adds the
    questions equivalence would need."""
    if k == DIFFERENCE:
        return f"Also **difference shown**: {items}."
    if k == EQUIVALENCE:
        return f"**Equivalence shown within ±{num(margin, 1)} points**: {items}."
    if k == INCONCLUSIVE:
        words = {"disagree": "the test rejects at 5 % but the 95 % interval still holds 0: the two disagree",
                 "beyond margin": f"the test does not reject, and the interval reaches past ±{num(margin, 1)} "
                                  f"points{need}",
                 "no margin": "the test does not reject, and no margin is declared",
                 "table": "as the table reads"}
        return f"**Inconclusive** ({words.get(why or ('beyond margin' if finite(margin) else 'no margin'))}): {items}."
    if k == TOO_FEW:
        return f"Too few {unit} to tell (below {intervals.MIN_N}): {items}."
    return f"No verdict in the table: {items}."


def contrasts(rows: pd.DataFrame | None, cols: Columns, *, what: str, unit: str, group: list[str],
              table: str = "") -> list[str]:
    """One sentence group per ``group`` (e.g. model) of ``rows``. A group
    whose contrasts all rest on fewer than :data:`medaudit.stats.intervals.MIN_N`
    units gets one too-few sentence (``what`` completes "this run cannot
    tell whether …") naming each estimate; else each contrast with a
    difference shown is written out in full (largest |Δ| first, at most
    :data:`MAX_DETAILS`) and the others are listed under their reading (at
    most :data:`MAX_LISTED` each, then how many more). The
    reading is the row's verdict column (:func:`kind`), or, where the table
    has none (``cols.verdict=None``), its test's p (:func:`kind_from_test`)."""
    out = []
    if rows is None or not len(rows):
        return out
    group = [c for c in group if c in rows.columns]
    has_verdict = bool(cols.verdict) and cols.verdict in rows.columns
    for _, g in (rows.groupby(group, sort=False, dropna=False) if group else [((), rows)]):
        g = g.assign(_kind=[kind(r[cols.verdict], r.get(cols.n)) if has_verdict
                            else kind_from_test(r.get(cols.p), r.get(cols.n)) for _, r in g.iterrows()])
        head = f"{_label(g.iloc[0], group)}" + (f" (`{table}`)" if table else "")
        head = f"{head}: " if head else ""
        if (g["_kind"] == TOO_FEW).all():
            ns = list(dict.fromkeys(int(x) if finite(x) else 0 for x in g[cols.n]))
            shown = "; ".join(f"{cols.name(r)} {cols.estimate(r)}" for _, r in g.iterrows())
            out.append(head + too_few(what, ns[0] if len(ns) == 1 else " or ".join(map(count, ns)), unit, shown))
            continue
        margins = [m for m in (cols.margin_of(r) for _, r in g.iterrows()) if finite(m)]
        margin = margins[0] if margins else None
        diff = g[g["_kind"] == DIFFERENCE]
        diff = diff.loc[diff[cols.delta].abs().sort_values(ascending=False).index].head(MAX_DETAILS)
        parts = [cols.full(r, DIFFERENCE, unit) for _, r in diff.iterrows()]
        rest = g.drop(index=diff.index)
        for k in (DIFFERENCE, EQUIVALENCE, INCONCLUSIVE, TOO_FEW, NO_VERDICT):
            sub = rest[rest["_kind"] == k]
            whys = ([why_inconclusive(r, cols, margin) for _, r in sub.iterrows()] if k == INCONCLUSIVE
                    else [""] * len(sub))
            for why in dict.fromkeys(whys):
                part = sub[[w == why for w in whys]]
                items = "; ".join(cols.short(r, unit) for _, r in part.head(MAX_LISTED).iterrows())
                more = f"; and {len(part) - MAX_LISTED} more" if len(part) > MAX_LISTED else ""
                need = _need(part, cols, margin, unit) if why == "beyond margin" else ""
                parts.append(_rest(k, items + more, margin, unit, why, need))
        out.append(head + " ".join(parts))
    return out


_UNREADABLE = re.compile(r"(?<![\w/])(nan|NaN|n/a|N/A|inf|-inf|None)(?![\w/])")


def unreadable(md: str) -> list[str]:
    """The sentences of ``md`` (its bullets and lines, table rows excepted)
    that print a missing number as "nan", "n/a", "inf" or "None": each must
    say what is missing in words instead."""
    return [line for line in md.splitlines() if not line.lstrip().startswith("|") and _UNREADABLE.search(line)]


def markdown(sentences: Iterable[str]) -> str:
    """The section's Markdown: one bullet per sentence."""
    s = [x for x in sentences if x]
    return "\n".join(f"- {x}" for x in s) if s else "- This run computed no table to read."


# --- 01 ---------------------------------------------------------------------

def data_prep(funnel: pd.DataFrame, items: pd.DataFrame, psych: pd.DataFrame, fair: pd.DataFrame,
              dlg: pd.DataFrame) -> str:
    """Notebook 01: what it prepared, with counts (the funnel's first row, the
    main pool, the psychiatry subset, the FairMedQA flags, the dialogs kept)."""
    s = []
    total = funnel["n"].iloc[0] if len(funnel) else None
    s.append(f"Of {count(total)} MedQA questions, {count(len(items))} are the main pool the counterfactuals "
             f"start from and {count(len(psych))} form the psychiatry and substance-use subset "
             f"(`01_selection_funnel`: {len(funnel)} steps).")
    if len(fair):
        s.append(f"The FairMedQA first pass flags {count(fair['excluded'].sum())} of {count(len(fair))} questions "
                 "for a reviewer (`01_fairmedqa_exclusions`).")
    if len(dlg):
        kept = dlg.groupby("dataset", sort=True)["keep"].agg(["sum", "size"])
        per = ", ".join(f"{ds} {count(k)} of {count(n)}" for ds, (k, n) in kept.iterrows())
        names, kept_names = dlg["redacted_names"].sum(), dlg.loc[dlg["keep"], "redacted_names"].sum()
        s.append(f"Dialogs kept after de-identification: {per}; names redacted {count(names)} times "
                 f"(`01_dialog_deidentification`), {count(kept_names)} of them in the kept dialogs.")
    return markdown(s)


# --- 02 ---------------------------------------------------------------------

def augmentation(variants: pd.DataFrame, vignettes: pd.DataFrame | None = None,
                 agent_variants: pd.DataFrame | None = None) -> str:
    """Notebook 02: variants built and checked; the FairMedQA vignettes and
    the agents' variants (usable, and how many triggered the validator)."""
    s = []
    if len(variants):
        ok = variants["ok"].astype(bool)
        broken = int((ok & (variants["problems"].fillna("") != "")).sum())
        s.append(f"{count(ok.sum())} of {count(len(variants))} counterfactual variants were built "
                 f"({_design(variants)}); {count((~ok).sum())} could not be built and "
                 f"{count(broken)} broke an invariant (`02_variant_checks`).")
        if (~ok).any():
            why = variants.loc[~ok, "problem"].value_counts()
            s.append("Not built: " + "; ".join(f"{count(c)} × {p}" for p, c in why.items()) + ".")
    else:
        s.append("No counterfactual variant was built in this run.")
    if vignettes is not None:
        s.append(f"FairMedQA: {count(len(vignettes))} vignette(s) neutralised.")
    if agent_variants is not None and len(agent_variants):
        n, usable = len(agent_variants), int(agent_variants["usable"].sum())
        hit = int(agent_variants["success"].sum())
        line = (f"The agents wrote {count(n)} adversarial variant(s): {count(usable)} usable, {count(hit)} triggered "
                f"the validator's bias (`02_fairmedqa_trigger_rates`).")
        if not intervals.can_tell(n):
            line += (f" With {count(n)} variants this run cannot tell how often the agents trigger the bias "
                     f"(below {intervals.MIN_N} no rate is read).")
        s.append(line)
    return markdown(s)


def _design(variants: pd.DataFrame) -> str:
    """How the variants add up, per method as ``02_variant_checks`` counts
    them: "17 conditions × 224 questions by template (3,808) and 15 conditions
    × 224 questions by llm (3,360)" (a method need not run every condition,
    so conditions × methods × questions is not the total)."""
    parts = []
    for method, g in variants.groupby("method", sort=False):
        per = g.groupby("condition", sort=False).size()
        q = count(per.iloc[0]) if per.nunique() == 1 else f"{count(per.min())}–{count(per.max())}"
        parts.append(f"{len(per)} condition{'s' if len(per) != 1 else ''} × {q} questions by {method} "
                     f"({count(len(g))})")
    return " and ".join(parts) + f", on {count(variants['item_id'].nunique())} questions in all"


# --- 03 ---------------------------------------------------------------------

def inference(rates: pd.DataFrame, arm_table: pd.DataFrame | None = None) -> str:
    """Notebook 03: answers stored and parsed per format (``03_parse_rates``);
    each mitigation arm's change of a cue's effect on accuracy (``03_arms``:
    Δ change, its p and n; the table declares no margin and no interval, so
    a non-rejection reads inconclusive)."""
    s = [f"{r['model']} · {r['prompt_format']}: {count(r['samples'])} answers, "
         + (f"{pct(r['samples parsed (%)'], 1)} parsed" if finite(r['samples parsed (%)']) else "none to parse")
         + " (`03_parse_rates`)." for _, r in rates.iterrows()]
    if arm_table is not None and len(arm_table) and "Δ change n" in arm_table:
        cols = Columns(lambda r: f"{r['strategy']} arm, change of the {r['condition']} effect", delta="Δ change",
                       lo=None, hi=None, p="Δ change p", n="Δ change n", verdict=None, margin=None)
        s += contrasts(arm_table[arm_table["Δ change n"].notna()], cols, table="03_arms", unit="questions",
                       what="a mitigation arm changes a cue's effect on accuracy", group=["model", "format"])
    return markdown(s)


# --- 04 and 05 --------------------------------------------------------------

POINTS = {"accuracy": 100, "majority_accuracy": 100, "confidence": 100}   # proportions shown ×100, in points
LABELS = {"accuracy": "accuracy", "confidence": "confidence", "brier": "Brier score",
          "majority_accuracy": "majority accuracy", "ece": "ECE", "auroc": "AUROC"}


def _p_how(r) -> str:
    """The test before a p, from the row's ``p_method``
    (:func:`medaudit.studies.calibration.p_method`): "exact sign-flip", or, where the p
    is a Monte Carlo estimate, "sign-flip {p} from 20,000 random flips"."""
    how = r.get("p_method")
    if not isinstance(how, str) or not how:
        return ""
    test, sep, source = how.partition(" from ")
    return f"{test} {{p}} from {source}" if sep else how


def _paired(res: pd.DataFrame | None, metric: str, label: str, table: str) -> list[str]:
    """Sentences for ``metric``'s rows of a :func:`medaudit.studies.calibration.compare`
    table (proportions, shown in points where :data:`POINTS` says so)."""
    if res is None or not len(res):
        return []
    k = POINTS.get(metric, 1)
    cols = Columns(lambda r: f"{label} {r['cond_b']} vs {r['cond_a']}", n="n_items", scale=k,
                   unit="points" if k == 100 else "", digits=2 if k == 100 else 3, test=_p_how)
    return contrasts(res[res["metric"] == metric], cols, table=table, unit="questions",
                     what=f"{label} differs between the conditions", group=["model", "prompt_format"])


def calibration(res: pd.DataFrame | None, pair_res: pd.DataFrame | None = None,
                metrics: Iterable[str] = ("accuracy", "confidence")) -> str:
    """Notebook 04: each cue against base (and the pairs, +homo against
    +hetero) in accuracy and confidence (``04_paired_tests``): Δ, interval,
    p, n and the verdict at ±δ."""
    frames = [x for x in (res, pair_res) if x is not None and len(x)]
    both = pd.concat(frames, ignore_index=True) if frames else None
    s = [x for m in metrics for x in _paired(both, m, LABELS.get(m, m), "04_paired_tests")]
    return markdown(s or ["No paired comparison was computed in this run (no question answered under base and a cue)."])


def open_ended(res: pd.DataFrame | None, judge_table: pd.DataFrame | None = None) -> str:
    """Notebook 05: Table 2's accuracy against Base from the judge's verdicts
    (``05_paired_tests``), then whether each contrast survives the judge's
    error band (``05_judge_error``)."""
    s = _paired(res, "accuracy", "open-ended accuracy", "05_paired_tests") or [
        "No question was scored at Base and under a cue: Table 2 has nothing to compare."]
    rows = judge_table[judge_table["kind"] == "contrast"] if judge_table is not None and len(judge_table) else []
    for _, r in (rows.iterrows() if len(rows) else []):
        n = r.get("clusters", r.get("n"))
        band = (f"band over the judge's error {signed(r['band lo'])} to {signed(r['band hi'])} points"
                if finite(r.get("band lo")) and finite(r.get("band hi")) else
                "no band over the judge's error: the contrast has no sampling interval in this run to widen")
        if not intervals.can_tell(n if finite(n) else None):
            s.append(f"{r['what']} (`05_judge_error`): with {count(n) if finite(n) else 'no'} "
                     f"{unit_of(n, 'questions')} this run cannot "
                     f"tell whether it survives the judge's error ({band}).")
        else:
            raw = f"{signed(r['raw'])} points" if finite(r.get("raw")) else "no estimate"
            s.append(f"{r['what']} (`05_judge_error`): {raw} from the judge's verdicts ({band}, "
                     f"{units_phrase(n, 'questions')}); survives the judge's error: **{r['survives judge error']}**.")
    return markdown(s)


# --- 06 ---------------------------------------------------------------------

def soap_audit(inference: pd.DataFrame | None) -> str:
    """Notebook 06: per cell (model, dataset, context, speaker, axis) the
    largest change from the baseline, max ΔBL (Bonferroni over the groups;
    ``06_incidence_inference``): estimate, interval, p, N dialogs, whether
    it survives the judge's error. The SOAP study declares no margin, so a
    non-rejection reads inconclusive."""
    if inference is None or not len(inference):
        return markdown(["No note was judged in this run: no incidence to read."])

    def band(r):
        b = r.get("survives judge error")
        return f"; survives the judge's error: **{b}**" if isinstance(b, str) and b else ""

    cols = Columns(lambda r: f"{r['context']} ({r['speaker']}, {r['axis']}, {r['dataset']}) max ΔBL",
                   delta="estimate", lo="lo", hi="hi", n="N", verdict=None, margin=None, note=band)
    return markdown(contrasts(inference[inference["metric"] == "max ΔBL"], cols, table="06_incidence_inference",
                              unit="dialogs", what="a counterfactual changes the incidence", group=["model"]))


# --- 07 ---------------------------------------------------------------------

def _same(x: str) -> str:
    return x


def cultural(idctx: pd.DataFrame | None, arm_flips: pd.DataFrame | None = None,
             delta_avg: pd.DataFrame | None = None, label: Callable[[str], str] | None = None) -> str:
    """Notebook 07: Id+Ctx − Original accuracy per model, format and culture
    (Fig. 5, ``07_idctx_delta``: estimate, interval, exact McNemar p, n,
    verdict at ±δ); Eq. 2's Δ Avg per cue against each baseline
    (``07_delta_avg_errors``: Δ, the interval clustered by question, its
    score test's p, the questions and the verdict at ±δ); then the
    mitigation arms' change in each flip rate (``07_arm_flips``: every
    ``<measure> verdict`` column) where the run has them. ``label`` turns a
    culture, cue or baseline id into the words a reader meets
    (:meth:`medaudit.studies.cultural.CulturalConfig.readable`); the tables keep the ids."""
    label = label or _same
    if idctx is None or not len(idctx):
        s = ["No question was scored under Original and every culture's Id+Ctx: Fig. 5 is empty."]
    else:
        cols = Columns(lambda r: f"{label(r['culture'])} Id+Ctx − Original", delta="estimate", test="McNemar")
        s = contrasts(idctx, cols, table="07_idctx_delta", unit="questions", group=["model", "prompt_format", "form"],
                      what="Id+Ctx changes accuracy against Original")
    if delta_avg is not None and len(delta_avg):
        davg = Columns(lambda r: f"Δ Avg {label(r['cue'])} − {label(r['reference'])}", n="questions",
                       test="score test")
        s += contrasts(delta_avg, davg, table="07_delta_avg_errors", unit="questions",
                       group=["model", "prompt_format", "form"],
                       what="a cue's accuracy averaged over the cultures differs from the baseline's")
    for v in [c for c in (arm_flips.columns if arm_flips is not None else []) if c.endswith(" verdict")]:
        m = v[: -len(" verdict")]
        arm = Columns(lambda r, m=m: f"{label(str(r.get('condition', '')))} {m}", delta=m, lo=f"{m} lo", hi=f"{m} hi",
                      p=f"{m} p", n=f"{m} n", verdict=v)
        s += contrasts(arm_flips, arm, table="07_arm_flips", unit="questions", what=f"a mitigation arm changes {m}",
                       group=["model", "prompt_format", "strategy"])
    return markdown(s)


# --- 08 ---------------------------------------------------------------------

def fairness(pairs: pd.DataFrame | None, between: pd.DataFrame | None = None,
             arm_bias: pd.DataFrame | None = None, margin: float | None = None) -> str:
    """Notebook 08: each counterfactual pair's accuracy difference b − a on
    the vignettes answered under both (``08_table3_pairs``: Δ, interval,
    exact McNemar p, n and the verdict at ±δ), with the pair's CFR; each
    model against the reference model on the same vignettes, per text
    (``08_between_models``: Δ, interval, McNemar p, n, verdict); each
    mitigation arm's change in a pair's signed accuracy gap against its
    model's plain prompt (``08_arm_bias``: Δgap, its interval, the exact
    sign-flip p, n and verdict, with the table's ΔAcc, ΔCFR and ΔAD, which
    carry no test). ``margin``: the δ the notebook gave ``arm_bias``'s
    verdicts (its caption's), for the words of an inconclusive row."""
    if pairs is None or not len(pairs):
        s = ["No counterfactual pair was answered in this run."]
    else:
        def name(r):
            cfr = f" (CFR {pct(100 * r['CFR'], 1)})" if finite(r.get("CFR")) else ""
            return f"{r['b']} − {r['a']} accuracy{cfr}"

        s = contrasts(pairs, Columns(name, p="mcnemar_p", test="McNemar"), table="08_table3_pairs",
                      unit="vignettes", group=["model"], what="the two groups' accuracy differs")
    if between is not None and len(between):
        vs = Columns(lambda r: f"{r['model']} − {r['reference']} accuracy on the {r['condition']} texts",
                     p="mcnemar_p", test="McNemar")
        s += contrasts(between, vs, table="08_between_models", unit="vignettes", group=["model"],
                       what="its accuracy differs from the reference model's")
    if arm_bias is not None and len(arm_bias) and "Δgap" in arm_bias:
        def measures(r):
            shown = ", ".join(f"{k} {signed(r.get(k))}" for k in ("ΔAcc", "ΔCFR", "ΔAD") if finite(r.get(k)))
            ns = ", ".join(f"{k} {count(r.get(k))}" for k in ("n plain", "n arm") if finite(r.get(k)))
            return (f"; {shown} points" if shown else "") + (f" (no test; {ns})" if shown and ns else
                                                              " (no test)" if shown else "")

        gap = Columns(lambda r: f"change in the {r['attribute']} pair's accuracy gap", delta="Δgap", lo="Δgap lo",
                      hi="Δgap hi", p="Δgap p", n="Δgap n", verdict="Δgap verdict", margin=margin,
                      test="sign-flip", note=measures)
        s += contrasts(arm_bias, gap, table="08_arm_bias", unit="vignettes", group=["new"],
                       what="the arm changes the pairs' accuracy gap")
    return markdown(s)
