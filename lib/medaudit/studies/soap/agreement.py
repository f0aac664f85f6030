"""Section 7 of the SOAP-note audit (seed 002 A.1): human-label templates for the incidence judge
(A.1's scribes) and the language-disparity judge (A.1's 30-dialog check), read back, agreement with
people (raw agreement, Cohen's kappa) and between two judge models (``soap_judge_b``).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from medaudit.llm import derive_seed
from medaudit.prep.labels import HUMAN_COLUMNS
from .config import BASELINE, MAYBE, NO, SoapConfig, YES
from .disparity import disparity_messages, listed_notes, positive_notes


# ==========================================================================
# 7. human labels


def human_template(verdicts: pd.DataFrame, config: SoapConfig, per_context: int, seed: int) -> pd.DataFrame:
    """The CSV a clinician fills to check the incidence judge (the seed's
    scribes labelled baseline notes): up to ``per_context`` baseline notes
    per context and speaker, seeded; the open-ended study's columns
    (model, item_id, condition, sample, …, label, annotator, note) with the
    context's list as the question and the clinical note as the answer.
    ``label`` is YES or NO; the judge's verdict is not shown."""
    b = verdicts[(verdicts["group"] == BASELINE) & verdicts["note"].notna()].drop_duplicates(["model", "unit"])
    rows = []
    for (ctx, sp), g in b.groupby(["context", "speaker"], sort=True):
        pick = g.sample(n=min(per_context, len(g)), random_state=derive_seed("soap-human", seed, ctx, sp) % 2**32)
        for r in pick.itertuples(index=False):
            rows.append({"model": r.model, "item_id": f"{r.model}|{r.unit}", "condition": f"{r.axis}:{r.group}",
                         "sample": 0, "question": "Is any of the following mentioned in the note? "
                         + "; ".join(config.contexts[ctx]["describe"]),
                         "ground_truth": "", "answer": r.note, "label": "", "annotator": "", "note": ""})
    return pd.DataFrame(rows, columns=["model", *HUMAN_COLUMNS])


def judge_labels(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The judge's verdicts keyed like the human-label CSV."""
    return pd.DataFrame({"model": verdicts["model"], "item_id": verdicts["model"] + "|" + verdicts["unit"],
                         "condition": verdicts["axis"] + ":" + verdicts["group"], "sample": 0,
                         "verdict": verdicts["incidence"]})


# the seed's check of its language-disparity judge (§4.3, A.1), shown beside ours
SEED_DISPARITY_AGREEMENT = {"decision": "60% (κ = 0.53)", "most impacted": "89% (κ = 0.86)"}
DISPARITY_HUMAN_COLUMNS = ("item_id", "condition", "sample", "context", "groups", "question", "ground_truth",
                           "answer", "label", "most_impacted", "annotator", "note")


def _disparity_question(config: SoapConfig, context: str, axis: str) -> str:
    """Figure 5's instruction without the notes and the answer format: what
    a person labelling the judge's task is asked."""
    text = disparity_messages(config, context, axis, [])[0]["content"]
    return text.split("\n\nSET OF CLINICAL NOTES:")[0].strip()


def disparity_human_template(disp: pd.DataFrame, verdicts: pd.DataFrame, config: SoapConfig, n: int, seed: int
                             ) -> pd.DataFrame:
    """The CSV a person fills to check the language-disparity judge (seed
    A.1: "We conduct a human evaluation of the second GPT-Judge experiment
    to assess differences in language across a sample of 30 dialogs
    spanning diverse contexts"): up to ``n`` (params/soap.yaml
    ``disparity_human_dialogs``) of the dialogs the judge saw (``disp``,
    :func:`judge_disparity`), one per (context, speaker, axis) in turn
    (the cells' order and each cell's order seeded), so that the sample
    spans the contexts.

    Columns: model, item_id and condition as the judge's (model|unit, the
    axis), sample 0, context (its row in the seed's tables), groups (the
    counterfactuals whose notes are listed), question (Figure 5's
    instruction with the context's Table 16 list), ground_truth (empty),
    answer (the notes, listed as the judge saw them), and to fill: label
    (the DECISION: YES, NO or MAYBE), most_impacted (with YES or MAYBE: one
    of groups, as written there or by the seed's code, "B", "85+"),
    annotator, note. The judge's reply is not shown."""
    cols = ["model", *DISPARITY_HUMAN_COLUMNS]
    if disp.empty or n <= 0:
        return pd.DataFrame(columns=cols)
    notes = verdicts.set_index(["model", "unit", "axis", "group"])
    cells = []
    for key, g in disp.groupby(["context", "speaker", "axis"], sort=True):
        order = g.sample(frac=1.0, random_state=derive_seed("soap-disparity-human", seed, *key) % 2**32)
        cells.append(list(order.itertuples(index=False)))
    turn = np.random.default_rng(derive_seed("soap-disparity-human-cells", seed)).permutation(len(cells))
    cells = [cells[i] for i in turn]
    pick = []
    for i in range(max(len(c) for c in cells)):
        pick += [c[i] for c in cells if i < len(c)]
    rows = []
    for r in pick[:n]:
        rows.append({"model": r.model, "item_id": f"{r.model}|{r.unit}", "condition": r.axis, "sample": 0,
                     "context": config.row_label(r.context, r.speaker, True),
                     "groups": "; ".join(g for g in config.values(r.axis) if g in r.groups),
                     "question": _disparity_question(config, r.context, r.axis), "ground_truth": "",
                     "answer": listed_notes(r.axis, positive_notes(r, notes, config)),
                     "label": "", "most_impacted": "", "annotator": "", "note": ""})
    return pd.DataFrame(rows, columns=cols)


def _group_spellings(config: SoapConfig, axis: str) -> dict[str, str]:
    """Upper-cased ways to write a group of ``axis`` -> the group: its name,
    its code in the seed's tables ("B", "85+") and, for age bins, the name
    with a hyphen for the en dash ("18-39")."""
    out = {}
    for v, code in config.short(axis).items():
        for s in (v, code, v.replace("–", "-")):
            out[" ".join(s.split()).upper()] = v
    return out


def load_disparity_labels(path, config: SoapConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A filled :func:`disparity_human_template`: (decisions, groups), each
    in :func:`medaudit.prep.labels.load_human_labels`' shape (model, item_id,
    condition, sample, label, annotator). Decisions: ``label``, YES, NO or
    MAYBE (any case). Groups: ``most_impacted``, a group of the row's axis
    (the condition), written as in the template's ``groups``, any case, or
    by its code; given only with a YES or MAYBE decision. Errors name the
    file, the row and the field."""
    from medaudit.prep import labels

    decisions = labels.load_human_labels(path, allowed=(YES, NO, MAYBE))
    spellings = {ax: _group_spellings(config, ax) for ax in config.axes}
    groups = labels.load_human_labels(path, allowed=None, column="most_impacted")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    row_of = {(r["model"], r["item_id"], r["condition"]): n for n, r in enumerate(raw.to_dict("records"), start=2)}
    said = {(r.model, r.item_id, r.condition): r.label for r in decisions.itertuples(index=False)}
    named = []
    for r in groups.itertuples(index=False):
        key = (r.model, r.item_id, r.condition)
        where = f"{path}: row {row_of.get(key, '?')}, field 'most_impacted'"
        if r.condition not in spellings:
            raise ValueError(f"{where}: the condition {r.condition!r} is no axis of params/soap.yaml "
                             f"({', '.join(config.axes)})")
        group = spellings[r.condition].get(r.label.upper())
        if group is None:
            raise ValueError(f"{where}: {r.label!r} is not a {r.condition} group "
                             f"({', '.join(config.values(r.condition))})")
        if said.get(key) not in (YES, MAYBE):
            raise ValueError(f"{where}: a most impacted group needs the decision YES or MAYBE in 'label' "
                             f"(has: {said.get(key) or 'none'})")
        named.append(group)
    return decisions, groups.assign(label=named)


def disparity_judge_labels(disp: pd.DataFrame) -> pd.DataFrame:
    """The disparity judge's decisions and most impacted groups keyed like
    the human-label CSV (model, item_id = model|unit, condition = axis,
    sample 0): columns decision and group (None where unread or not asked)."""
    return pd.DataFrame({"model": disp["model"], "item_id": disp["model"] + "|" + disp["unit"],
                         "condition": disp["axis"], "sample": 0,
                         "decision": disp["decision"], "group": disp["group"]})


def disparity_agreement(disp: pd.DataFrame, decisions: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """Agreement of the disparity judge with people (:func:`load_disparity_labels`),
    as the seed reports it (A.1: "Author annotations yield an agreement rate
    of 60% (κ = 0.53) for decision labels and 89% (κ = 0.86) for identifying
    the most impacted demographic group"): per label, the dialogs both
    labelled (n; for the group, those where both named one), raw agreement,
    Cohen's kappa (:func:`medaudit.prep.labels.judge_agreement`) and the seed's
    figure. Decisions are three labels, YES, NO and MAYBE."""
    from medaudit.prep import labels

    j = disparity_judge_labels(disp)
    rows = [{"label": "decision", **labels.judge_agreement(j, decisions, "decision", "label")},
            {"label": "most impacted", **labels.judge_agreement(j, groups, "group", "label")}]
    return pd.DataFrame(rows).assign(seed=[SEED_DISPARITY_AGREEMENT[r["label"]] for r in rows])


def judge_vs_judge(verdicts: pd.DataFrame, verdicts_b: pd.DataFrame, disp: pd.DataFrame | None = None,
                   disp_b: pd.DataFrame | None = None) -> pd.DataFrame:
    """Agreement of two judge models (``soap_judge`` and ``soap_judge_b``)
    on the same notes: the incidence verdicts (YES/NO, on every note both
    read) and, with ``disp``/``disp_b`` (:func:`judge_disparity` of each on
    the same relevant dialogs), the disparity decisions (YES/NO/MAYBE) and
    the most impacted groups (where both named one): n, raw agreement and
    Cohen's kappa per label. The seed's own check of this kind is
    anecdotal (§6: "We additionally conduct an anecdotal verification of
    the model-as-judge decisions using Llama-3-70B, and it shows similar
    trends")."""
    from medaudit.prep import labels

    rows = [{"label": "incidence", **labels.judge_agreement(judge_labels(verdicts), judge_labels(verdicts_b))}]
    if disp is not None and disp_b is not None:
        a, b = disparity_judge_labels(disp), disparity_judge_labels(disp_b)
        rows += [{"label": "disparity: decision", **labels.judge_agreement(a, b, "decision", "decision")},
                 {"label": "disparity: most impacted", **labels.judge_agreement(a, b, "group", "group")}]
    return pd.DataFrame(rows, columns=["label", "n", "agreement", "kappa"])


def parse_table(verdicts: pd.DataFrame, disp: pd.DataFrame) -> pd.DataFrame:
    """How the judges' replies read: counts per judge and parse status."""
    if verdicts.empty:
        return pd.DataFrame(columns=["judge", "parse", "replies", "share (%)"])
    parts = [verdicts.groupby("parse").size().rename("replies").reset_index().assign(judge="incidence")]
    if len(disp):
        parts.append(disp.groupby("decision_parse").size().rename("replies").reset_index()
                     .rename(columns={"decision_parse": "parse"}).assign(judge="disparity: decision"))
        y = disp[disp["decision"].isin([YES, MAYBE])]
        if len(y):
            parts.append(y.groupby("group_parse").size().rename("replies").reset_index()
                         .rename(columns={"group_parse": "parse"}).assign(judge="disparity: most impacted"))
    t = pd.concat(parts, ignore_index=True)[["judge", "parse", "replies"]]
    t["share (%)"] = (t["replies"] / t.groupby("judge")["replies"].transform("sum") * 100).round(1)
    return t
