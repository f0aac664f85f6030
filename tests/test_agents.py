"""The agent loop (medaudit.studies.agents): cleaning replies, checking, revising,
recording every attempt, resuming from the store; and the cultural augmenter
run for real on the tiny local model."""
from __future__ import annotations

import pandas as pd
import pytest

from medaudit.studies import agents
from medaudit.prep import data, variants
from medaudit import paths
from medaudit.studies import cultural as C
from medaudit.llm import GenParams, ResponseStore
from support.scripted import ScriptedBackend, nth_reply


@pytest.mark.parametrize("raw,clean", [
    ("from a Cree First Nations community", "from a Cree First Nations community"),
    ('"from a Cree First Nations community"', "from a Cree First Nations community"),
    ("“She lives on a reserve.”", "She lives on a reserve."),
    ("Phrase: from a Muslim family", "from a Muslim family"),
    ("**Edited sentence:** Her aunt came with her.", "Her aunt came with her."),
    ("```\nHer aunt came with her.\n```", "Her aunt came with her."),
    ("Her aunt came with her.\n\nNote: this adds no clinical detail.", "Her aunt came with her."),
    ('He said "yes" to the nurse.', 'He said "yes" to the nurse.'),   # inner quotes: not a wrapper
    ("", ""), (None, ""),
])
def test_clean_output(raw, clean):
    assert agents.clean_output(raw) == clean


def _jobs():
    return pd.DataFrame({"item_id": ["a", "b", "c"], "condition": "x",
                         "messages": [[{"role": "user", "content": k}] for k in ("a", "b", "c")]})


def _check(job, text):
    return [] if text.startswith("good") else [f"bad: {text!r} does not start with 'good'"]


@pytest.mark.parametrize("revise", [True, False])
def test_loop_retries_until_accepted_and_records_every_attempt(tmp_path, revise):
    be = ScriptedBackend(nth_reply({"a": ["good a"], "b": ["bad", "'good b'"],
                                    "c": ["bad 1", "bad 2", "bad 3", "good never"]}))
    with ResponseStore(tmp_path / "s.sqlite") as store:
        run = agents.run(be, store, _jobs(), _check, model="m", seed=1, gen=GenParams(0.7, 0.9, 20),
                         prompt_format="agent", max_attempts=3, revise=revise)
        res = run.results.set_index("item_id")
        assert res["ok"].to_dict() == {"a": True, "b": True, "c": False}
        assert res["attempts"].to_dict() == {"a": 1, "b": 2, "c": 3}
        assert res.loc["b", "text"] == "good b" and res.loc["c", "text"] == "bad 3"
        assert res.loc["c", "problems"] == ["bad: 'bad 3' does not start with 'good'"]
        att = run.attempts
        assert len(att) == 6 and list(att.groupby("item_id").size()) == [1, 2, 3]
        assert att["key"].is_unique and store.count() == 6
        summ = run.summary().set_index("what")["value"]
        assert (summ["accepted"], summ["  after a revision"], summ["failed after every attempt"]) == (2, 1, 1)
        assert run.problem_counts().set_index("problem")["attempts"]["bad"] == 4   # b once, c three times
        # the seed of attempt k is its own, whether or not the agent sees its last reply
        seeds = [r.params.seed for r in be.seen if r.messages[0][1] == "c"]
        assert len(set(seeds)) == 3
        revisions = [r for r in be.seen if len(r.messages) > 1]
        if revise:   # the agent gets its own reply back with the problems listed
            assert len(revisions) == 3
            last = revisions[-1].message_dicts()
            assert last[1] == {"role": "assistant", "content": "bad 2"}
            assert "- bad: 'bad 2' does not start with 'good'" in last[2]["content"]
        else:
            assert revisions == []
        # a second run asks for nothing: every attempt comes from the store
        n = len(be.seen)
        again = agents.run(be, store, _jobs(), _check, model="m", seed=1, gen=GenParams(0.7, 0.9, 20),
                           prompt_format="agent", max_attempts=3, revise=revise)
        assert len(be.seen) == n and again.results.equals(run.results)


def test_unreadable_replies_are_counted_and_retried(tmp_path):
    """A ``read`` that raises ValueError fails the attempt as "unreadable"
    (the cleaned reply kept, ``check`` not called); what it returns is what
    is checked and kept."""
    def read(raw):
        if not raw.startswith("{"):
            raise ValueError("no braces")
        return raw.strip("{}")

    checked = []

    def check(job, text):
        checked.append(text)
        return _check(job, text)

    be = ScriptedBackend(nth_reply({"a": ["{good a}"], "b": ["good b", "{good b}"], "c": ["nothing", "{bad}"]}))
    with ResponseStore(tmp_path / "s.sqlite") as store:
        run = agents.run(be, store, _jobs(), check, model="m", seed=1, gen=GenParams(0.7, 0.9, 20),
                         prompt_format="agent", max_attempts=2, revise=False, read=read)
    res = run.results.set_index("item_id")
    assert res["ok"].to_dict() == {"a": True, "b": True, "c": False}
    assert res.loc["a", "text"] == "good a" and res.loc["c", "text"] == "bad"
    first = run.attempts[run.attempts["attempt"] == 0].set_index("item_id")
    assert first.loc["b", "problems"] == ["unreadable: no braces"] and first.loc["b", "text"] == "good b"
    assert sorted(checked) == ["bad", "good a", "good b"]       # unreadable replies are never checked
    assert run.problem_counts().set_index("problem")["attempts"]["unreadable"] == 2


def test_loop_refuses_zero_attempts(tmp_path):
    with ResponseStore(tmp_path / "s.sqlite") as store, pytest.raises(ValueError, match="at least 1"):
        agents.run(ScriptedBackend(nth_reply({})), store, _jobs(), _check, model="m", seed=1, gen=GenParams(),
                   prompt_format="agent", max_attempts=0)


@pytest.mark.recorded
def test_cultural_augmenter_runs_for_real(tmp_path, recording):
    """The few-shot augmenter on real MedQA vignettes over the tiny local
    model's recorded replies (tests/recorded/; live under ``make test-live``):
    every job ends accepted or failed with its attempts recorded,
    every accepted piece passes the checks, every composed variant keeps the
    question sentence and the rest of the vignette, and a rerun is cached."""
    from medaudit.llm.llamacpp import LlamaCppBackend

    cfg = C.load_config()
    sentence = C.neutral_sentence(cfg)
    cs = C.variants(paths.raw(*data.CULTURAL), sentence, forms=("5opt",), config=cfg)
    checked = C.check_variants(cs, cfg)
    items = C.other_items(data.load_medqa(paths.raw(*data.MEDQA5), 5).records, cs, 2, seed=7)
    jobs = C.augment_jobs(items, checked, cfg, cultures=["middle_eastern_muslim"])
    assert len(jobs) == 4 and set(jobs["condition"]) == {"middle_eastern_muslim:identity",
                                                         "middle_eastern_muslim:context"}
    be = LlamaCppBackend("smollm2-135m", n_threads=1)
    check = lambda job, text: C.piece_problems(job, text, cfg)  # noqa: E731
    kw = dict(model="smollm2", seed=5, gen=GenParams(0.7, 0.9, 40), prompt_format="cultural_augment",
              max_attempts=2, revise=False)
    with recording.store(tmp_path / "s.sqlite", "cultural_augmenter") as store:
        run = agents.run(be, store, jobs, check, **kw)
        assert len(run.results) == 4 and run.results["attempts"].between(1, 2).all()
        assert len(run.attempts) == run.results["attempts"].sum() == store.count()
        assert (run.attempts["ok"] == (run.attempts["problems"].str.len() == 0)).all()
        by_job = jobs.set_index(["item_id", "condition"])
        for r in run.results.itertuples():
            assert (check(by_job.loc[(r.item_id, r.condition)], r.text) == []) == r.ok
        var = C.compose_variants(items, run.results, sentence, cfg)
        for v in var[var["kind"] == "cultural"].itertuples():
            q = items.set_index("item_id").loc[v.item_id, "question"]
            assert v.ok and variants.edit_report(q, v.question, {}, ())["final_changed"] is False
            assert len(v.question) > len(q)
        n = store.count()
        again = agents.run(be, store, jobs, check, **kw)
        assert store.count() == n and again.results.equals(run.results)
