"""Free-text answers of the open-ended case study (seed 000 §4): K samples per item and condition
through the response store (``prompt_format="open"``).
"""
from __future__ import annotations


import pandas as pd

from medaudit import prompts
from medaudit.llm import GenParams, runs


# ==========================================================================
# 2. free-text answers


ANSWER_PROMPTS = ("neutral", "single")


def answer_messages(question: str, prompt: str = "neutral") -> list[dict]:
    """The open-ended answer request. Seed 000 gives no answer prompt (its §4 and B.4-B.6 give the
    reformulation, clustering and judge prompts), so both are the project's: ``neutral`` (prompts/
    openended_answer_neutral.txt) asks for an answer and rules nothing out, as B.6 credits "additional
    acceptable options"; ``single`` (openended_answer_single.txt) asks for the single most likely
    answer and "Do not list alternatives" (the smoke profile's recorded runs)."""
    if prompt not in ANSWER_PROMPTS:
        raise ValueError(f"openended_answer_prompt must be one of {ANSWER_PROMPTS}, not {prompt!r}")
    return [{"role": "system", "content": prompts.load(f"openended_answer_{prompt}")},
            {"role": "user", "content": question}]


def plan_answers(open_v: pd.DataFrame, *, backend, k: int, seed: int, gen: GenParams,
                 prompt: str = "neutral") -> list[runs.Sample]:
    """The free-text answer samples: K per item and condition of ``open_v``, each asked
    with the ``prompt`` answer request (:func:`answer_messages`), planned through the response
    store under ``prompt_format="open"``."""
    msgs = open_v.assign(messages=[answer_messages(q, prompt) for q in open_v["question"]])
    return runs.plan_free(msgs[["item_id", "condition", "messages"]], backend=backend.kind,
                         model_id=backend.model_id, k=k, seed=seed, gen=gen, prompt_format="open")


def answer_text(raw: str | None) -> str:
    """The answer as judged and clustered: the reply stripped, one line."""
    return " ".join((raw or "").split())
