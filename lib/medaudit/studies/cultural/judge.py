"""Section 4 of the cultural-cue study (seed 003): the culture-referential [YES]/[NO] judge, its
requests per explanation, a robust parser joined back to the answers, and Table III's aggregation.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit import prompts
from medaudit.stats.scoring import UNIT_COLS, units_of
from .config import BASELINES, CulturalConfig


# ==========================================================================
# 4. the culture-referential judge

# Verbatim from the authors' repository (HIVE-UofT/Evaluatiog-Cultural-Clues-
# Medical-LLMs@d8ddddc, Code/openai-judge.ipynb, `system_prompt` and
# `user_prompt`), kept in prompts/cultural_judge_{system,user}.txt; the paper
# itself (§III.B) only describes the rubric. The user template ends in a
# newline, which prompts.load strips.
JUDGE_SYSTEM = prompts.load("cultural_judge_system")
JUDGE_USER = prompts.load("cultural_judge_user") + "\n"

def judge_messages(explanation: str, question: str | None = None, include_question: bool = False) -> list[dict]:
    """Chat messages asking the judge whether ``explanation`` is culture-referential.

    The rubric is the authors' own (module constants ``JUDGE_SYSTEM``,
    ``JUDGE_USER``, verbatim from their released judge notebook; the paper
    describes it only as flagging explanations "that reference identity or
    region-specific context"). As in their code the judge sees the model's
    explanation ONLY, not the question: the question variant carries the
    cultural cue by design, and showing it would invite YES for every
    cultural variant. ``question`` is accepted so that a caller can key
    requests by it; ``include_question=True`` prepends it as context (a
    deviation from the seed, labelled as such in the prompt).
    """
    if explanation is None:
        explanation = ""
    body = explanation
    if include_question:
        if not question:
            raise ValueError("include_question=True needs the question")
        body = (f"(Context, not to be judged: the question the description answers)\n{question}\n\n"
                f"(Description to judge)\n{explanation}")
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(medical_diagnosis_description=body)}]


def judge_jobs(responses: pd.DataFrame, include_question: bool = False,
               questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One judge request (:func:`medaudit.llm.judging.ask`, format
    ``cultural_judge``) per explanation: ``responses`` are stored rows (key,
    model, prompt_format, item_id, condition, response_text, and form when
    present). Returns item_id, condition, messages (:func:`judge_messages`
    on the whole response text), ``judged_key`` (the response's key, so an
    imported verdict on it serves the job) and the unit columns."""
    r = responses.reset_index(drop=True)
    q = None
    if include_question:
        if questions is None:
            raise ValueError("include_question=True needs the questions (item_id, condition, question)")
        q = questions.set_index(["item_id", "condition"])["question"]
    msgs = [judge_messages(t, q.get((i, c)) if q is not None else None, include_question)
            for t, i, c in zip(r["response_text"], r["item_id"], r["condition"])]
    keep = [c for c in (*UNIT_COLS, "item_id", "condition") if c in r.columns]
    return r[keep].assign(messages=msgs, judged_key=r["key"].to_numpy())


def judge_labels(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The verdicts of :func:`medaudit.llm.judging.ask` on :func:`judge_jobs`, in
    the columns Table III reads: the unit columns, response_key, judge,
    judge_label (YES | NO | None), judge_status and judge_text. Explanations
    no judge was asked about (the stage is off and no verdict is imported)
    are left out; a judge's failed request stays, with status ``missing``."""
    keep = [c for c in (*UNIT_COLS, "item_id", "condition") if c in verdicts.columns]
    out = verdicts[verdicts["judge"].notna()].rename(columns={"judged_key": "response_key", "verdict": "judge_label",
                                   "status": "judge_status", "reply": "judge_text"})
    return out[[*keep, "response_key", "judge", "judge_label", "judge_status", "judge_text"]].reset_index(drop=True)


def judged(kept: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The kept questions (:func:`medaudit.stats.scoring.drop_incomplete`'s table,
    the ``cultural_counting`` rule of every other table) with their judge
    verdicts (:func:`judge_labels`): Table III counts on them, as seed 003
    counts every table on "147 questions per setting" (§III.A). Counted on
    all 150 items instead, 2 of the paper's 12 denominators differ
    (Llama-3.1-8B, MedGemma-4B)."""
    return kept.merge(labels, on=[c for c in labels.columns if c in kept.columns], how="inner")


def judge_counts(qt: pd.DataFrame, config: CulturalConfig, judge_col: str = "judge_label",
                 units: Sequence[str] | None = None) -> pd.DataFrame:
    """Table III per unit and cue, pooled over the three cultures, plus the
    original and neutral rows.

    ``qt`` has the :func:`medaudit.stats.scoring.question_table` columns and ``judge_col`` (YES |
    NO | None for a judge parse failure). Among the questions with a parsed
    answer: ``judged`` (judge parsed), ``judge_failed``, ``grounded`` (judge
    YES: a culturally grounded explanation), ``grounded_wrong`` (of those,
    ending in an incorrect answer) and ``error_rate`` = grounded_wrong /
    grounded in %. Questions without a parsed answer are counted in
    ``unparsed_answer`` and left out (their correctness is unknown);
    ``grounded_unreadable`` counts the YES verdicts among them (a grounded
    explanation whose answer line could not be read).
    """
    u = units_of(qt, units)
    d = qt.copy()
    d["cue"] = [config.split(c)[1] or (c if c in BASELINES else None) for c in d["condition"]]
    d = d[d["cue"].notna()]
    out = []
    for key, g in d.groupby(u + ["cue"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        scored = g[g["parsed"]]
        lab = scored[judge_col]
        yes = scored[lab == "YES"]
        n_yes, n_wrong = len(yes), int((yes["correct"] == 0).sum())
        out.append({**dict(zip(u + ["cue"], key)), "questions": len(g),
                    "grounded_unreadable": int((g.loc[~g["parsed"], judge_col] == "YES").sum()),
                    "unparsed_answer": int((~g["parsed"]).sum()), "judged": int(lab.isin(["YES", "NO"]).sum()),
                    "judge_failed": int((~lab.isin(["YES", "NO"])).sum()), "grounded": n_yes,
                    "grounded_wrong": n_wrong, "error_rate": 100 * n_wrong / n_yes if n_yes else np.nan})
    return pd.DataFrame(out, columns=[*u, "cue", "questions", "unparsed_answer", "judged", "judge_failed",
                                      "grounded", "grounded_wrong", "error_rate", "grounded_unreadable"])


# the contrasts of Table III the seed reads (§III.B: "identity phrases play a major role")
JUDGE_CONTRASTS = {"id − ctx": {"id": 1, "ctx": -1}, "id+ctx − id": {"id+ctx": 1, "id": -1},
                   "id+ctx − ctx": {"id+ctx": 1, "ctx": -1}}


def judged_units(jqt: pd.DataFrame, config: CulturalConfig) -> pd.DataFrame:
    """Table III's judge-based indicators per explanation with a parsed
    answer (``jqt``: :func:`judged`), for :func:`medaudit.stats.judge_error.judge_table`:
    model, prompt_format, form, item_id, cue (original, neutral or the cue,
    cultures pooled), ``grounded`` (judge YES: 1, NO: 0, unread NaN) and
    ``grounded_wrong`` (YES and the answer wrong)."""
    d = jqt[jqt["parsed"]].copy()
    d["cue"] = [config.split(c)[1] or (c if c in BASELINES else None) for c in d["condition"]]
    d = d[d["cue"].notna()]
    y = d["judge_label"].map({"YES": 1.0, "NO": 0.0})
    d["grounded"] = y
    d["grounded_wrong"] = y * (d["correct"] == 0)
    keep = [c for c in ("model", "prompt_format", "form") if c in d.columns]
    return d[[*keep, "item_id", "cue", "grounded", "grounded_wrong"]].reset_index(drop=True)
