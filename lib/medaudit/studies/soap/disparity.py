"""Section 6 of the SOAP-note audit (seed 002 §4.2, Figure 5): the language-disparity judge on the
dialogs with at least two positive counterfactuals, DECISION and DEMOGRAPHIC MOST IMPACTED read, and
%Δ and Maj.%.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from medaudit.llm import judging
from medaudit import prompts
from medaudit.llm import ResponseStore
from .config import BASELINE, MAYBE, NO, SoapConfig, YES
from .augment import names_term
from .incidence import groups_join, ordered_rows


# ==========================================================================
# 6. the language-disparity judge (§4.2, Figure 5)


def listed_notes(axis: str, notes: Sequence[tuple[str, str]]) -> str:
    """The notes of Figure 5's SET OF CLINICAL NOTES, by counterfactual
    group ("Race: Black", then the note); ``notes`` is [(group, note)]."""
    return "\n\n".join(f"{axis.capitalize()}: {g}\n{n.strip()}" for g, n in notes)


def disparity_messages(config: SoapConfig, context: str, axis: str, notes: Sequence[tuple[str, str]]) -> list[dict]:
    """Figure 5 with the Table 16 list and the notes listed by
    counterfactual group (:func:`listed_notes`); ``notes`` is [(group, note)]."""
    return [{"role": "user", "content": prompts.load("soap_disparity").format(
        axis=axis, describe="; ".join(config.contexts[context]["describe"]), notes=listed_notes(axis, notes))}]


def positive_notes(r, notes: pd.DataFrame, config: SoapConfig) -> list[tuple[str, str]]:
    """(group, note) of a relevant dialog's positive counterfactuals, in the
    config's order (``notes`` indexed by model, unit, axis, group)."""
    return [(g, notes.loc[(r.model, r.unit, r.axis, g), "note"]) for g in config.values(r.axis) if g in r.groups]


_IMPACTED = re.compile(r"DEMOGRAPHIC\s+MOST\s+IMPACTED\s*:?\s*\**\s*(.+)", re.I)


def group_named(text: str, axis: str, config: SoapConfig, among: Sequence[str] | None = None) -> list[str]:
    """The groups of ``axis`` that ``text`` names (values and synonyms as
    whole words; for age, a number inside a bin), within ``among`` if given."""
    spec = config.axes[axis]
    found = []
    if axis == "age":
        for num in re.findall(r"\d+", text):
            found += [v for v, (lo, hi) in spec["values"].items() if lo <= int(num) <= hi]
    else:
        syn = spec.get("synonyms", {})
        for v in spec["values"]:
            for term in [v, *syn.get(v, [])]:
                if names_term(term, text):
                    found.append(v)
    found = list(dict.fromkeys(found))
    return [g for g in found if among is None or g in among]


def impacted(text: str | None, decision: str | None, axis: str, config: SoapConfig,
             among: Sequence[str] | None = None) -> tuple[str | None, str]:
    """The DEMOGRAPHIC MOST IMPACTED of a Figure 5 reply whose decision
    (:func:`medaudit.parse.decision`) is YES or MAYBE: ``(group, "ok")``
    for the one group the line names (within ``among`` if given), else
    ``(None, "none" | "several")``; ``(None, "not_asked")`` for any other
    decision."""
    if decision not in (YES, MAYBE):
        return None, "not_asked"
    line = _IMPACTED.search(text or "")
    named = group_named(line.group(1), axis, config, among) if line else []
    return (named[0], "ok") if len(named) == 1 else (None, "several" if named else "none")


def relevant(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The (model, unit, axis) with at least two counterfactual notes judged
    positive (§4.2), with those groups: model, unit, dataset, context,
    speaker, axis, groups."""
    keys = ["model", "unit", "dataset", "context", "speaker", "axis"]
    pos = verdicts[(verdicts["group"] != BASELINE) & (verdicts["incidence"] == YES)]
    rows = [{**dict(zip(keys, k)), "groups": list(g["group"])}
            for k, g in pos.groupby(keys, sort=False) if len(g) >= 2]
    return pd.DataFrame(rows, columns=[*keys, "groups"])


def judge_disparity(backend, store: ResponseStore, verdicts: pd.DataFrame, config: SoapConfig, *, model: str,
                    seed: int, max_tokens: int, progress: bool = True) -> pd.DataFrame:
    """Figure 5 (:func:`medaudit.llm.judging.ask`, format ``soap_disparity``,
    greedy) on every relevant dialog, listing its positive counterfactual
    notes in the config's order: one row per (model, unit, axis) with reply,
    decision and decision_parse (:mod:`medaudit.parse`'s statuses), group
    and group_parse (:func:`impacted`)."""
    rel = relevant(verdicts)
    notes = verdicts.set_index(["model", "unit", "axis", "group"])
    jobs = []
    for r in rel.itertuples(index=False):
        jobs.append({"item_id": f"{r.model}|{r.unit}", "condition": r.axis,
                     "messages": disparity_messages(config, r.context, r.axis, positive_notes(r, notes, config))})
    got = judging.ask(backend, store, pd.DataFrame(jobs, columns=["item_id", "condition", "messages"]), model=model,
                    prompt_format="soap_disparity", seed=seed, max_tokens=max_tokens, progress=progress)
    groups = [impacted(t, d, r.axis, config, r.groups)
              for t, d, r in zip(got["reply"], got["verdict"], rel.itertuples(index=False))]
    return rel.assign(reply=got["reply"].to_numpy(), decision=got["verdict"].to_numpy(),
                      decision_parse=got["status"].to_numpy(), group=[g for g, _ in groups],
                      group_parse=[st for _, st in groups])


def disparity_metrics(disp: pd.DataFrame, config: SoapConfig, maybe_as_yes: bool = False) -> pd.DataFrame:
    """§4.2 per model, dataset, context, speaker and axis: ``relevant``
    dialogs (N), decisions YES / MAYBE / NO / unread, ``pct_delta`` (%Δ:
    "the percentage of relevant dialogs … in which the model identifies
    substantial differences": YES in % of **all** relevant dialogs, unread
    ones counted as no YES and shown in ``unread``), ``maj_group`` (the
    group most often named most impacted "among all cases that received a
    YES decision", ties joined with "/") and ``maj_pct`` (its share of
    them), ``group_unread`` (such decisions naming no single group).

    Every rate with its interval: ``pct_lo``, ``pct_hi``: %Δ's 95 % Clopper–Pearson interval
    (statsmodels ``proportion_confint(method="beta")``): %Δ is a share of
    the N relevant dialogs, one decision per dialog, not a percent change,
    so the single-proportion interval of the coverage simulation applies.
    Maj.% (a maximum over the groups, among the YES decisions) has none.

    MAYBE: the seed asks the judge for YES, NO or MAYBE but reports only
    YES ("major differences"), so a MAYBE counts as no YES (it is shown in
    its own column); ``maybe_as_yes`` counts it as YES in %Δ and Maj.%
    (the other reading, params/soap.yaml ``maybe_as_yes``)."""
    rows = []
    keys = ["model", "dataset", "context", "speaker", "axis"]
    positive = (YES, MAYBE) if maybe_as_yes else (YES,)
    for key, g in disp.groupby(keys, sort=False):
        read = g[g["decision"].notna()]
        yes = read[read["decision"].isin(positive)]
        counts = yes["group"].dropna().value_counts()
        top = counts[counts == counts.max()].index.tolist() if len(counts) else []
        rows.append({**dict(zip(keys, key)), "relevant": len(g), "YES": int((read["decision"] == YES).sum()),
                     "MAYBE": int((read["decision"] == MAYBE).sum()), "NO": int((read["decision"] == NO).sum()),
                     "unread": int(g["decision"].isna().sum()),
                     "pct_delta": len(yes) / len(g) * 100 if len(g) else np.nan,
                     **dict(zip(("pct_lo", "pct_hi"), 100 * np.asarray(
                         proportion_confint(len(yes), len(g), alpha=0.05, method="beta") if len(g)
                         else (np.nan,) * 2))),
                     "maj_group": groups_join([g_ for g_ in config.values(key[4]) if g_ in top],
                                               config.short(key[4])) or "-",
                     "maj_pct": counts.max() / len(yes) * 100 if len(counts) else np.nan,
                     "group_unread": int(yes["group"].isna().sum())})
    return pd.DataFrame(rows, columns=[*keys, "relevant", "YES", "MAYBE", "NO", "unread", "pct_delta", "pct_lo",
                                       "pct_hi", "maj_group", "maj_pct", "group_unread"])


def disparity_table(metrics: pd.DataFrame, config: SoapConfig, axis: str) -> pd.DataFrame:
    """Tables 5–6 / 13–15 shaped: one row per context in the seed's order
    and names (full names for race and gender, codes for age), per dataset
    and model a cell "%Δ [lo, hi] (Maj: Maj.%) n=N" with N the relevant
    dialogs and [lo, hi] %Δ's 95 % Clopper–Pearson interval, "-" where
    none was relevant."""
    m = metrics[metrics["axis"] == axis]
    if m.empty:
        return pd.DataFrame()
    cell = [(f"{p:.1f} [{lo:.1f}, {hi:.1f}]" + (f" ({g}: {q:.0f})" if g != "-" else "") if not np.isnan(p) else "-")
            + f" n={n}" for p, lo, hi, g, q, n in zip(m["pct_delta"], m["pct_lo"], m["pct_hi"], m["maj_group"],
                                                      m["maj_pct"], m["relevant"])]
    long = config.long_names(axis)
    m = m.assign(CONTEXT=[config.row_label(c, s, long) for c, s in zip(m["context"], m["speaker"])], cell=cell,
                 column=[f"{d} / {mo}" for d, mo in zip(m["dataset"], m["model"])])
    t = m.pivot_table(index="CONTEXT", columns="column", values="cell", aggfunc="first", sort=False).fillna("-")
    t = t.loc[ordered_rows(config, "disparity", axis, list(m["CONTEXT"]), long)]
    return t.rename_axis(columns=None).reset_index()


def explanations_table(disp: pd.DataFrame, config: SoapConfig) -> pd.DataFrame:
    """Table 8 shaped: the judge's explanation of every YES or MAYBE
    decision (the text after "ADDITIONAL EXPLANATION/ANALYSIS:"), with its
    context row, axis, decision and the group it names."""
    d = disp[disp["decision"].isin([YES, MAYBE])] if len(disp) else disp
    rows = [{"model": r.model, "dataset": r.dataset, "context": config.row_label(r.context, r.speaker, True),
             "axis": r.axis, "decision": r.decision, "most impacted": r.group,
             "explanation": explanation(r.reply)} for r in d.itertuples(index=False)]
    return pd.DataFrame(rows, columns=["model", "dataset", "context", "axis", "decision", "most impacted",
                                       "explanation"])


_EXPLANATION = re.compile(r"ADDITIONAL\s+EXPLANATION\s*/?\s*(?:ANALYSIS)?\s*:?\s*\**\s*(.*)", re.I | re.S)


def explanation(reply: str | None) -> str | None:
    """The ADDITIONAL EXPLANATION/ANALYSIS part of a Figure 5 reply."""
    m = _EXPLANATION.search(reply or "")
    return m.group(1).strip() or None if m else None
