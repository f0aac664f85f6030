"""The open-ended case study's judge (seed 000 B.6): one seeded sample per cluster, judged CORRECT /
INCORRECT against the multiple-choice answer text; B.6's instructions verbatim.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from medaudit import prompts
from medaudit.prep import text as _text


# ==========================================================================
# 4. the judge (B.6)


JUDGE_CONTEXTS = ("question", "vignette")


def judge_messages(question: str, ground_truth: str, answer: str, context: str = "question") -> list[dict]:
    """The B.6 judge's messages: the seed's prompt verbatim as the system
    message, the case as the user message. ``question`` is the open question
    as the model saw it (vignette and open question sentence); ``context``
    says what the judge is shown of it: ``"question"``, the question
    sentence only (default), or ``"vignette"``, all of it."""
    if context not in JUDGE_CONTEXTS:
        raise ValueError(f"judge context must be one of {JUDGE_CONTEXTS}, not {context!r}")
    shown = _text.final_sentence(question) if context == "question" else question.strip()
    return [{"role": "system", "content": prompts.load("openended_judge")},
            {"role": "user", "content": prompts.load("openended_judge_case").format(
                question=shown, ground_truth=ground_truth, answer=answer)}]


def judge_picks(labels: Sequence[int], rng: np.random.Generator) -> dict[int, int]:
    """One sample per cluster, drawn at random: {cluster: sample index}."""
    lab = np.asarray(labels)
    return {int(c): int(rng.choice(np.flatnonzero(lab == c))) for c in np.unique(lab)}


# ==========================================================================
# 5. agreement
