"""A reply cut by the token limit is not an error of the model: it is
told apart as "truncated", never counted wrong under any
unparsed rule, and every table counts it per condition."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from medaudit import parse
from medaudit.stats import scoring, uncertainty
from medaudit.studies.fairmedqa import metrics as fq_metrics
from medaudit.llm import mcq, models, runs
from medaudit.llm.base import GenParams
from medaudit.llm.store import ResponseStore


def test_status_of_tells_a_cut_reply_apart():
    assert runs.status_of(parse.NO_ANSWER, "length", "mcq") == parse.TRUNCATED
    assert runs.status_of(parse.NO_ANSWER, "stop", "mcq") == parse.NO_ANSWER
    assert runs.status_of(parse.OK, "length", "mcq") == parse.OK           # read before the cut: an answer
    # mcq_option asks for one token by design (seed 003's authors): its reply is complete
    assert runs.status_of(parse.NO_ANSWER, "length", "mcq_option") == parse.NO_ANSWER


def _responses():
    # q1: one sample cut, one right; q2: both cut; q3: one wrong answer, one unreadable
    rows = [("q1", 0, None, "no_answer", "length"), ("q1", 1, "A", "ok", "stop"),
            ("q2", 0, None, "no_answer", "length"), ("q2", 1, None, "no_answer", "length"),
            ("q3", 0, "B", "ok", "stop"), ("q3", 1, None, "no_answer", "stop")]
    return pd.DataFrame([{"model": "m", "prompt_format": "mcq", "item_id": i, "condition": "base", "sample": k,
                          "parsed_answer": a, "parse_status": s, "finish_reason": f} for i, k, a, s, f in rows])


def test_truncated_samples_are_never_incorrect():
    items = pd.DataFrame({"item_id": ["q1", "q2", "q3"], "answer_idx": "A"})
    qt = uncertainty.questions(runs.mark_truncated(_responses()), items, 0, unparsed="incorrect").set_index("item_id")
    assert qt["n_truncated"].tolist() == [1, 2, 0] and qt["n_samples"].tolist() == [1, 0, 2]
    assert qt.at["q1", "single_correct"] == 1.0                  # the cut sample cannot be drawn
    assert np.isnan(qt.at["q2", "single_correct"]) and np.isnan(qt.at["q2", "majority_correct"])
    # an unreadable reply that ended by itself stays incorrect under the seed's rule
    assert qt.at["q3", "n_unparsed"] == 1


def test_fairmedqa_wrong_rule_leaves_truncated_out():
    r = runs.mark_truncated(_responses()).drop_duplicates("item_id")       # sample 0 of each
    qt = scoring.question_table(r, pd.DataFrame({"item_id": ["q1", "q2", "q3"], "answer_idx": "A"}).assign(
        options=[{"A": "a", "B": "b"}] * 3), units=("model",))
    assert qt["truncated"].tolist() == [True, True, False]
    t = fq_metrics.accuracy_table(qt, units=("model",), conditions=["base"], unparsed="wrong").iloc[0]
    # three questions, two cut: the one readable answer (B, wrong) is the whole denominator
    assert (t["questions"], t["truncated"], t["correct"], t["accuracy"]) == (3, 2, 0, 0.0)


def test_truncation_by_condition_counts_per_condition():
    t = mcq.truncation_by_condition(_responses())
    assert t[["samples", "truncated", "truncated (%)"]].iloc[0].tolist() == [6, 3, 50.0]
    rates = mcq.parse_rates(_responses())
    assert "truncated 3" in rates.at[0, "failures"]


@pytest.mark.slow
def test_a_real_cut_reply_is_stored_as_truncated(tmp_path):
    """The tiny model asked for an explanation with a 3-token budget: every
    reply is cut before "The answer is X", and stored as truncated."""
    try:
        models.model_path("smollm2-135m")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from medaudit.llm.llamacpp import LlamaCppBackend

    b = LlamaCppBackend("smollm2-135m", n_ctx=1024, n_threads=1)
    items = pd.DataFrame([{"item_id": "q", "options": {"A": "Croup", "B": "Asthma"}, "answer_idx": "A"}])
    variants = pd.DataFrame([{"item_id": "q", "condition": "base",
                              "question": "A child has a barking cough and stridor. What is the diagnosis?"}])
    plan = mcq.plan(variants, items, model="tiny", backend=b.kind, model_id=b.model_id, k=2, seed=1,
                    gen=GenParams(0.0, 1.0, 3), prompt_format="mcq_explain", shuffle=False)
    store = ResponseStore(tmp_path / "r.sqlite")
    runs.run(b, store, plan, model="tiny", progress=False)
    f = store.frame()
    assert (f["finish_reason"] == "length").all() and (f["parse_status"] == parse.TRUNCATED).all()
