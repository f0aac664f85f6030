"""Section 5 of the SOAP-note audit (seed 002 §3.4, §4.1): the YES/NO incidence judge on the
Table 16 list with two in-context examples, and its metrics: BL(%), max ΔBL with its group, ΔCF and %dlg.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.llm import judging
from medaudit import parse, prompts
from medaudit.llm import ResponseStore
from .config import BASELINE, NO, SPEAKERS, SoapConfig, YES


# ==========================================================================
# 5. the incidence judge (§3.4) and its metrics (§4.1)


def describe_list(config: SoapConfig, context: str) -> str:
    """The incidence judge's list of what marks ``context`` (Table 16), lettered
    "a) …", "b) …", one a line."""
    return "\n".join(f"{chr(97 + i)}) {d}" for i, d in enumerate(config.contexts[context]["describe"]))


def incidence_messages(config: SoapConfig, context: str, note: str) -> tuple[list[dict], int]:
    """(messages, stem_chars): the Table 16 list, two in-context examples
    and the note (last, so the rest is shared by every note of a context)."""
    ex = config.contexts[context]["examples"]
    text = prompts.load("soap_incidence").format(describe=describe_list(config, context), example_yes=ex["positive"],
                                                 example_no=ex["negative"], note=note)
    return [{"role": "user", "content": text}], text.rindex(note) if note else len(text)


def judge_incidence(backend, store: ResponseStore, notes: pd.DataFrame, config: SoapConfig, *, model: str, seed: int,
                    max_tokens: int, use_imported: bool = True, progress: bool = True) -> pd.DataFrame:
    """The incidence verdict of every note (:func:`medaudit.llm.judging.ask`,
    format ``soap_incidence``, greedy): notes' columns plus reply, incidence
    (YES | NO | None) and parse (:mod:`medaudit.parse`'s statuses;
    ``missing``: no note or no reply). A verdict imported for a note (by its
    ``note_key``) serves it, unless ``use_imported`` is False (a second
    judge, ``soap_judge_b``, is asked itself). ``backend`` None: imported
    verdicts only."""
    have = notes[notes["note"].notna()]
    jobs = []
    for r in have.itertuples(index=False):
        msgs, stem = incidence_messages(config, r.context, r.note)
        jobs.append({"item_id": f"{r.model}|{r.unit}", "condition": f"{r.axis}:{r.group}", "messages": msgs,
                     "stem_chars": stem, "judged_key": getattr(r, "note_key", None)})
    got = judging.ask(backend, store, pd.DataFrame(jobs, columns=["item_id", "condition", "messages", "stem_chars",
                                                                "judged_key"]),
                    model=model, prompt_format="soap_incidence", seed=seed, max_tokens=max_tokens,
                    use_imported=use_imported, progress=progress)
    if len(got) != len(jobs):
        raise ValueError("several judges' incidence verdicts are imported for the same notes; this audit takes one")
    by = dict(zip(have.index, got[["reply", "verdict", "status"]].itertuples(index=False)))
    out = notes.copy()
    out["reply"] = [by[i][0] if i in by else None for i in out.index]
    out["incidence"] = [by[i][1] if i in by else None for i in out.index]
    out["parse"] = [by[i][2] if i in by else parse.MISSING for i in out.index]
    return out


def groups_join(groups: Sequence[str], short: dict) -> str:
    """Groups joined by "/" in their short names (a name without one as it is)."""
    return "/".join(short.get(g, g) for g in groups)


def incidence_metrics(verdicts: pd.DataFrame, config: SoapConfig, aug: pd.DataFrame | None = None) -> pd.DataFrame:
    """§4.1 per model, dataset, context, speaker and axis. Every rate is in
    % of **all** the cell's dialogs (seed §4.1: "BL(%) … expressed as a
    percentage of the total dialogs"; "%dlg denotes the proportion of
    dialogs in each dataset where at least one counterfactual diverges"): a
    verdict that could not be read counts as no YES there, and is shown in
    ``unread`` and ``dialogs_unread`` instead of shrinking the denominator.

    - ``dialogs`` (N): every dialog of the dataset in the run (with
      ``aug``: its rows for the cell's context and speaker, a failed
      augmentation included; without it: the cell's own dialogs), the
      denominator of every rate; ``augmented``: those with notes;
      ``not_augmented``: those whose augmentation never passed, counted
      as no YES (a failed augmentation no longer shrinks the
      denominator);
    - ``BL``: YES on the baseline notes;
    - ``max_dBL`` / ``max_dBL_group``: the largest increase of a
      counterfactual's incidence over BL in points, and its group(s) (ties
      joined with "/"); NaN and "-" when none increases;
    - ``dCF``: the range (max − min) of incidence over the counterfactuals;
    - ``pct_dlg``: dialogs whose read counterfactual verdicts are not all
      the same, in % of all dialogs; ``pct_dlg_read``: the same in % of the
      dialogs with every counterfactual verdict read (the former rule);
    - ``unread``, ``dialogs_unread``: verdicts, and dialogs with one, that
      could not be read (or whose note is missing).
    """
    rows = []
    keys = ["model", "dataset", "context", "speaker", "axis"]
    failed = {}
    if aug is not None and len(aug):
        f = aug if "aug_axis" in aug.columns else aug.assign(aug_axis="")
        f = f[~f["ok"].astype(bool)]
        failed = f.groupby(["dataset", "context", "speaker", "aug_axis"]).size().to_dict()
    for key, g in verdicts.groupby(keys, sort=False):
        ax = key[4]
        n_aug = g["unit"].nunique()
        n_failed = int(failed.get((key[1], key[2], key[3], config.aug_axis(key[2], ax)), 0))
        n = n_aug + n_failed
        y = g.assign(pos=g["incidence"].map({YES: 1.0, NO: 0.0}))
        rate = y.groupby("group")["pos"].apply(lambda s: (s == 1.0).sum()) / n * 100
        bl = rate.get(BASELINE, np.nan)
        cfs = [v for v in config.values(ax) if v in rate.index]
        cf_rate = rate[cfs] if cfs else pd.Series(dtype=float)
        d = (cf_rate - bl) if cfs else pd.Series(dtype=float)
        up = d[d > 1e-9]
        best = up[np.isclose(up, up.max())].index.tolist() if len(up) else []
        wide = y[y["group"] != BASELINE].pivot_table(index="unit", columns="group", values="pos")
        wide = wide.reindex(sorted(g["unit"].unique()))
        diverge = wide.nunique(axis=1) > 1
        complete = wide.dropna()
        unread_units = g.loc[g["incidence"].isna(), "unit"].nunique()
        rows.append({**dict(zip(keys, key)), "dialogs": n, "augmented": n_aug, "not_augmented": n_failed,
                     "unread": int(g["incidence"].isna().sum()), "dialogs_unread": int(unread_units),
                     "BL": bl, "max_dBL": up.max() if len(up) else np.nan,
                     "max_dBL_group": groups_join(best, config.short(ax)) if best else "-",
                     "dCF": (cf_rate.max() - cf_rate.min()) if cfs else np.nan,
                     "pct_dlg": diverge.sum() / n * 100 if n else np.nan,
                     "pct_dlg_read": (complete.nunique(axis=1) > 1).mean() * 100 if len(complete) else np.nan})
    return pd.DataFrame(rows, columns=[*keys, "dialogs", "augmented", "not_augmented", "unread", "dialogs_unread",
                                       "BL", "max_dBL",
                                       "max_dBL_group", "dCF", "pct_dlg", "pct_dlg_read"])


def ordered_rows(config: SoapConfig, kind: str, axis: str, present: Sequence[str], long: bool = False) -> list[str]:
    """The seed's row order: its contexts of ``axis`` for the doctor, then
    for the patient; rows not among ``present`` are left out."""
    order = [config.row_label(c, sp, long) for sp in SPEAKERS for c in config.row_order(kind, axis)]
    return [r for r in order if r in set(present)] + [r for r in dict.fromkeys(present) if r not in order]


def incidence_table(metrics: pd.DataFrame, config: SoapConfig, dataset: str, axis: str) -> pd.DataFrame:
    """Tables 2–4 / 10–12 shaped: one row per context ("D: Poverty") in the
    seed's order and names, per model the columns N (the dataset's dialogs
    in the run, the rates' denominator), BL(%), max ΔBL ("B(5.4)"), ΔCF,
    %dlg, unread (verdicts not read) and not aug. (dialogs of N whose
    augmentation failed: no YES)."""
    m = metrics[(metrics["dataset"] == dataset) & (metrics["axis"] == axis)]
    if m.empty:
        return pd.DataFrame()
    m = m.assign(CONTEXT=[config.row_label(c, s) for c, s in zip(m["context"], m["speaker"])])
    cols = ("N", "BL(%)", "max ΔBL", "ΔCF", "%dlg", "unread", "not aug.")
    cells = m.assign(**{
        "N": m["dialogs"].astype(int), "unread": m["unread"].astype(int),
        "not aug.": m["not_augmented"].astype(int),
        "BL(%)": m["BL"].round(1),
        "max ΔBL": [f"{g}({v:.1f})" if g != "-" else "-" for g, v in zip(m["max_dBL_group"], m["max_dBL"])],
        "ΔCF": m["dCF"].round(1), "%dlg": m["pct_dlg"].round(1)})
    t = cells.pivot_table(index="CONTEXT", columns="model", values=list(cols), aggfunc="first", sort=False)
    t = t.swaplevel(0, 1, axis=1)
    models = list(dict.fromkeys(m["model"]))
    t = t[[(mo, c) for mo in models for c in cols]]
    return t.loc[ordered_rows(config, "incidence", axis, list(cells["CONTEXT"]))].reset_index()
