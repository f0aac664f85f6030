"""Comparing the open-ended case study's clustering methods, human labels of the judge, and its
failure cases.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.studies import agents
from medaudit.prep.labels import HUMAN_COLUMNS
from medaudit.stats.agreement import agreement, partition_agreement
from .reformulation import CORRECT, INCORRECT, TRUNCATED
from .clusters import confidence


# ==========================================================================
# comparing methods, human labels, failure cases

def human_template(answers: pd.DataFrame, labels: pd.DataFrame, ground_truth: pd.Series) -> pd.DataFrame:
    """The CSV a clinician fills: one row per judged sample (one per
    cluster), with the question, the ground truth and the answer, and an
    empty ``label`` (CORRECT or INCORRECT), ``annotator`` and ``note``. The
    judge's verdict is not shown."""
    j = labels[labels["sample"] == labels["judged_sample"]]
    a = answers.set_index(["model", "item_id", "condition", "sample"])
    rows = [{"model": r.model, "item_id": r.item_id, "condition": r.condition, "sample": r.sample,
             "question": a.loc[(r.model, r.item_id, r.condition, r.sample), "question"],
             "ground_truth": ground_truth[r.item_id],
             "answer": a.loc[(r.model, r.item_id, r.condition, r.sample), "answer"],
             "label": "", "annotator": "", "note": ""} for r in j.itertuples(index=False)]
    return pd.DataFrame(rows, columns=["model", *HUMAN_COLUMNS])


def judged_units(labels: pd.DataFrame, human: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 2's accuracy unit with the people's word where given: one row
    per question (model, item_id, condition) with ``judge`` = the verdict on
    sample 0's cluster (1 CORRECT, 0 INCORRECT, NaN unread: Table 2's
    single_correct) and ``human`` = the label of that cluster's judged
    answer in the filled template (:func:`human_template`;
    :func:`medaudit.prep.labels.load_human_labels`), NaN where none. A label
    names the answer the judge read, so it labels the cluster; input for
    :func:`medaudit.stats.judge_error.judge_table`."""
    s0 = labels[labels["sample"] == 0]
    out = pd.DataFrame({"model": s0["model"].to_numpy(), "item_id": s0["item_id"].to_numpy(),
                        "condition": s0["condition"].to_numpy(),
                        "judge": s0["verdict"].map({CORRECT: 1.0, INCORRECT: 0.0}).to_numpy(), "human": np.nan})
    if human is not None and len(human):
        h = human.assign(sample=human["sample"].astype(int)).set_index(["model", "item_id", "condition", "sample"])
        h = h[~h.index.duplicated()]["label"]
        keys = zip(s0["model"], s0["item_id"], s0["condition"], s0["judged_sample"].astype(int))
        out["human"] = [{CORRECT: 1.0, INCORRECT: 0.0}.get(h.get(k), np.nan) for k in keys]
    return out


def method_table(clusters: dict[str, pd.DataFrame], labels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The clustering methods side by side on the same samples: questions
    clustered / repaired / failed, mean clusters per question, mean
    confidence, and the share of samples judged correct."""
    rows = []
    for m, cl in clusters.items():
        ok = cl[cl["labels"].notna()]
        lab = labels.get(m, pd.DataFrame(columns=["verdict"]))
        failed = cl["labels"].isna()
        cut = cl["truncated"].astype(bool) if m == "llm" and "truncated" in cl else pd.Series(False, index=cl.index)
        rows.append({"method": m, "questions": len(cl), "clustered": len(ok),
                     "repaired": int((cl.get("status") == "repaired").sum()),
                     "failed": int(failed.sum()),
                     "failed: reply cut by the token limit": int((failed & cut).sum()),
                     "failed: other": int((failed & ~cut).sum()),
                     "replies cut by the token limit": _cut_replies(m, cl),
                     "mean clusters": float(np.mean([len(set(x)) for x in ok["labels"]])) if len(ok) else np.nan,
                     "mean confidence": float(np.mean([confidence(x) for x in ok["labels"]])) if len(ok) else np.nan,
                     "judged correct (% of samples)": 100 * float((lab["verdict"] == CORRECT).mean())
                     if len(lab) else np.nan,
                     "unjudged samples": int(lab["verdict"].isna().sum()) if len(lab) else 0})
    return pd.DataFrame(rows)


def _cut_replies(method: str, cl: pd.DataFrame) -> int:
    """Replies of one method's run that ended at the token limit."""
    col = {"llm": "truncated_attempts", "entailment": "truncated"}.get(method)
    return int(cl[col].sum()) if col in cl else 0


def problem_counts(clusters: dict[str, pd.DataFrame], llm_run: agents.AgentRun | None = None) -> pd.DataFrame:
    """Per clustering method, what went wrong in its replies, a reply cut by
    the token limit (``finish_reason`` "length") counted as
    :data:`TRUNCATED` and under no other problem: ``llm``, over every
    attempt of ``llm_run`` (from :func:`llm_clusters`), the kind of each
    problem (the text before the first ":"; a cut attempt counts once, as
    cut); ``entailment``, the replies cut and the other replies with no
    verdict ("unparsed verdict"); ``embedding`` sends no reply. Columns:
    method, problem, replies (problems that occurred only)."""
    rows = []
    for m, cl in clusters.items():
        if m == "llm" and llm_run is not None and len(llm_run.attempts):
            a = llm_run.attempts
            cut = a["truncated"] if "truncated" in a else pd.Series(False, index=a.index)
            kinds = agents.AgentRun(a[~cut], llm_run.results).problem_counts()
            rows += [(m, TRUNCATED, int(cut.sum())),
                     *((m, k, int(v)) for k, v in zip(kinds["problem"], kinds["attempts"]))]
        elif m == "entailment" and len(cl):
            cut = int(cl["truncated"].sum()) if "truncated" in cl else 0
            cut_unparsed = int(cl["unparsed_truncated"].sum()) if "unparsed_truncated" in cl else 0
            rows += [(m, TRUNCATED, cut), (m, "unparsed verdict", int(cl["unparsed"].sum()) - cut_unparsed)]
    out = pd.DataFrame(rows, columns=["method", "problem", "replies"])
    return out[out["replies"] > 0].reset_index(drop=True)


def method_agreement(clusters: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every pair of methods: mean adjusted Rand index and pooled
    same-cluster agreement / kappa over the questions both clustered."""
    names, rows = list(clusters), []
    for x in range(len(names)):
        for y in range(x + 1, len(names)):
            a = clusters[names[x]].set_index(["model", "item_id", "condition"])["labels"]
            b = clusters[names[y]].set_index(["model", "item_id", "condition"])["labels"]
            both = [k for k in a.index if k in b.index and a[k] is not None and b[k] is not None]
            aris = [partition_agreement(a[k], b[k])["ari"] for k in both]
            same_a = np.concatenate([_same_pairs(a[k]) for k in both]) if both else np.array([])
            same_b = np.concatenate([_same_pairs(b[k]) for k in both]) if both else np.array([])
            pair = agreement(same_a, same_b)
            rows.append({"method a": names[x], "method b": names[y], "questions": len(both),
                         "mean ARI": float(np.nanmean(aris)) if aris else np.nan,
                         "sample pairs": pair["n"], "pair agreement": pair["agreement"], "pair kappa": pair["kappa"]})
    return pd.DataFrame(rows)


def _same_pairs(labels) -> np.ndarray:
    lab = np.asarray(labels)
    return (lab[:, None] == lab[None, :])[np.triu_indices(len(lab), 1)]


def failure_cases(qt: pd.DataFrame, answers: pd.DataFrame, labels: pd.DataFrame, base: str = "base",
                  conditions: Sequence[str] = ("+homo",), min_confidence: float = 0.5, n: int = 5) -> pd.DataFrame:
    """Figure 2-style cases: questions answered correctly at ``base`` (the
    majority cluster judged CORRECT) and wrongly under an identity
    condition with confidence ≥ ``min_confidence``, most confident first.
    Shows the majority answer under both."""
    key = ["model", "method", "item_id"]
    b = qt[(qt["condition"] == base) & (qt["majority_correct"] == 1.0)]
    w = qt[qt["condition"].isin(conditions) & (qt["majority_correct"] == 0.0) & (qt["confidence"] >= min_confidence)]
    m = w.merge(b[key + ["confidence"]], on=key, suffixes=("", "_base"))
    if m.empty:
        return pd.DataFrame(columns=[*key, "condition", "confidence_base", "confidence", "answer_base", "answer"])

    def majority_answer(model, item, cond):
        lab = labels[(labels["model"] == model) & (labels["item_id"] == item) & (labels["condition"] == cond)]
        top = lab["cluster"].value_counts().sort_index().idxmax()   # largest; ties to the first cluster
        s = lab.loc[lab["cluster"] == top, "sample"].min()
        a = answers[(answers["model"] == model) & (answers["item_id"] == item) & (answers["condition"] == cond)]
        return a.loc[a["sample"] == s, "answer"].iloc[0]

    m = m.sort_values("confidence", ascending=False).head(n)
    m["answer_base"] = [majority_answer(r.model, r.item_id, base) for r in m.itertuples()]
    m["answer"] = [majority_answer(r.model, r.item_id, r.condition) for r in m.itertuples()]
    return m[[*key, "condition", "confidence_base", "confidence", "answer_base", "answer"]].reset_index(drop=True)
