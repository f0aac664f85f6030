"""The one judge stage (medaudit.llm.judging) and the verdict parsers it reads
replies with (medaudit.parse), in their one status vocabulary.

The stage is tested once, with the shared scripted backend of
tests/support/scripted.py (a test double for what is sent, stored and
served, not for judging); every study's judge goes through it."""
from __future__ import annotations

import pandas as pd
import pytest

from medaudit.llm import formats, judging
from medaudit import parse
from medaudit.llm import ResponseStore, importer
from medaudit.llm.base import Completion

from support.scripted import ScriptedBackend

# ------------------------------------------------------------------ the parsers


@pytest.mark.parametrize("reply,want", [
    ("[YES]", ("YES", "ok")), ("[NO]", ("NO", "ok")), ("[no]", ("NO", "ok")), ("[ Yes ]", ("YES", "ok")),
    ("Mentions Ramadan fasting as a cultural practice. [YES]", ("YES", "ok")),
    ("References the patient’s First Nations community. [YES]\n", ("YES", "ok")),
    ("**[NO]**", ("NO", "ok")), ("[**YES**]", ("YES", "ok")), ("(NO)", ("NO", "ok")),
    ("[YES] ... [YES]", ("YES", "ok")), ("NO", ("NO", "ok")), (" yes. ", ("YES", "ok")), ("No.", ("NO", "ok")),
    ("[YES] [NO]", (None, "multiple")), ("Cultural signs: [no] ... final: [Yes]", (None, "multiple")),
    ("No cultural signs are present.", (None, "no_answer")),
    ("YES, the description mentions a mosque", (None, "no_answer")),
    ("[MAYBE]", (None, "no_answer")), ("[YESS]", (None, "no_answer")), ("", (None, "empty")),
    ("   ", (None, "empty")), (None, (None, "empty")),
])
def test_yes_no_tag(reply, want):
    """Seed 003's judge: the bracketed tag (the authors' rubric asks for "[YES]" / "[NO]")."""
    assert parse.yes_no_tag(reply) == want


@pytest.mark.parametrize("reply,want", [
    ("YES", ("YES", "ok")), ("no.", ("NO", "ok")), ("Answer: NO", ("NO", "ok")),
    ("YES. No other issues are mentioned.", ("YES", "ok")), ("It is mentioned, so yes", ("YES", "ok")),
    ("The answer is YES or NO", (None, "multiple")), ("I cannot tell", (None, "no_answer")),
    (None, (None, "empty")), ("Nobody knows", (None, "no_answer")),
])
def test_first_word(reply, want):
    assert parse.first_word(reply) == want


@pytest.mark.parametrize("reply,want", [
    ("CORRECT", ("CORRECT", "ok")), ("incorrect.", ("INCORRECT", "ok")), ("**Correct**", ("CORRECT", "ok")),
    ("The answer is not correct", ("INCORRECT", "ok")),
    ("Verdict: INCORRECT - the model says gout", ("INCORRECT", "ok")),
    ("CORRECT or INCORRECT", (None, "multiple")), ("I cannot tell", (None, "no_answer")), (None, (None, "empty"))])
def test_correct_incorrect(reply, want):
    assert parse.correct_incorrect(reply) == want


@pytest.mark.parametrize("reply,want", [
    ("entailment", "entailment"), ("Entails.", "entailment"), ("The answer is: contradiction", "contradiction"),
    ("neutral", "neutral"), ("They contradict each other; not entailment", "contradiction"), ("yes", None),
    ("", None)])
def test_entailment(reply, want):
    got = parse.entailment(reply)
    assert got[0] == want and got[1] == ("ok" if want else "empty" if not reply else "no_answer")


@pytest.mark.parametrize("reply,want", [
    ("DECISION: YES\nDEMOGRAPHIC MOST IMPACTED: Black", ("YES", "ok")), ("**DECISION:** maybe", ("MAYBE", "ok")),
    ("There are no differences.", (None, "no_answer")), ("", (None, "empty"))])
def test_decision(reply, want):
    assert parse.decision(reply) == want


def test_every_judge_format_has_a_parser_in_the_one_vocabulary():
    for name in formats.names("verdict"):
        p = formats.verdict_parser(name)
        for reply in ("", "gibberish ∅", "[YES] CORRECT entailment DECISION: NO"):
            assert p(reply)[1] in parse.STATUSES, (name, reply)
    assert parse.read([None, "[YES]"], parse.yes_no_tag) == [(None, "missing"), ("YES", "ok")]
    with pytest.raises(ValueError, match="not a judge's"):
        formats.verdict_parser("mcq")


# ------------------------------------------------------------------ the stage


def _jobs(n=3, judged=True):
    j = pd.DataFrame({"item_id": [f"q{i}" for i in range(n)], "condition": "c",
                      "messages": [[{"role": "user", "content": f"judge answer {i}"}] for i in range(n)]})
    return j.assign(judged_key=[f"answer-{i}" for i in range(n)]) if judged else j


def _tag_by_index(request, i, backend):
    """[YES] for even answers, [NO] for odd ones, an unreadable reply for answer 3."""
    n = int(request.messages[-1][1].rsplit(" ", 1)[1])
    return "I am not sure" if n == 3 else ("[YES]" if n % 2 == 0 else "[NO]")


def test_ask_stores_verdicts_with_what_they_judged_and_serves_them_again(tmp_path):
    b = ScriptedBackend(_tag_by_index, model_id="judge-v1")
    with ResponseStore(tmp_path / "s.sqlite") as store:
        got = judging.ask(b, store, _jobs(4), model="J", prompt_format="cultural_judge", seed=1, max_tokens=8)
        assert list(got["verdict"]) == ["YES", "NO", "YES", None]
        assert list(got["status"]) == ["ok", "ok", "ok", "no_answer"]
        assert list(got["judge"]) == ["J"] * 4 and list(got["source"]) == ["generated"] * 4
        assert list(got.columns) == ["item_id", "condition", "judged_key", *judging.COLUMNS]
        rows = store.frame().set_index("item_id")
        assert rows.loc["q2", "judged_key"] == "answer-2" and rows.loc["q2", "temperature"] == 0.0
        assert list(got["key"]) == [rows.loc[f"q{i}", "key"] for i in range(4)]   # each verdict names its request
        sent = len(b.seen)
        again = judging.ask(b, store, _jobs(4), model="J", prompt_format="cultural_judge", seed=1, max_tokens=8)
        assert len(b.seen) == sent and again.equals(got)
        # another judge (another model identity) is asked afresh, never served another judge's verdicts
        other = ScriptedBackend(lambda r, i, be: "[NO]", model_id="judge-v2")
        got2 = judging.ask(other, store, _jobs(4), model="J2", prompt_format="cultural_judge", seed=1, max_tokens=8)
        assert len(other.seen) == 4 and list(got2["verdict"]) == ["NO"] * 4


def test_imported_verdicts_serve_their_jobs_and_the_model_is_asked_only_for_the_rest(tmp_path):
    b = ScriptedBackend(_tag_by_index)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        answers = [{"model": "M", "item_id": f"q{i}", "condition": "c", "prompt_format": "mcq_explain",
                    "sample": 0, "response_text": f"The answer is A ({i})"} for i in range(3)]
        importer.import_records(tmp_path / "a.jsonl", [(f"line {i + 1}", r) for i, r in enumerate(answers)], store)
        keys = store.frame().set_index("item_id")["key"]
        verdicts = [{"model": "Authors' judge", "item_id": "q1", "condition": "c", "prompt_format": "cultural_judge",
                     "sample": 0, "response_text": "[YES]", "judged_model": "M", "judged_format": "mcq_explain"}]
        importer.import_records(tmp_path / "v.jsonl", [("line 1", verdicts[0])], store)
        jobs = _jobs(3).assign(judged_key=[keys[f"q{i}"] for i in range(3)])
        assert list(judging.unserved(store, "cultural_judge", jobs)) == [True, False, True]
        # the stage off: only the imported verdict, the others missing, nothing asked
        off = judging.ask(None, store, jobs, model=None, prompt_format="cultural_judge", seed=1, max_tokens=8)
        assert list(off["status"]) == ["missing", "ok", "missing"] and b.seen == []
        assert list(off["judge"]) == [None, "Authors' judge", None]
        got = judging.ask(b, store, jobs, model="J", prompt_format="cultural_judge", seed=1, max_tokens=8)
        assert len(b.seen) == 2 and list(got["item_id"]) == ["q0", "q1", "q2"]
        assert list(got["judge"]) == ["J", "Authors' judge", "J"]
        assert list(got["source"]) == ["generated", "imported", "generated"]
        assert got["key"].isna().tolist() == [False, True, False] and off["key"].isna().all()
        assert list(got["verdict"]) == ["YES", "YES", "YES"]
        # use_imported=False asks the model for every job
        own = judging.ask(b, store, jobs, model="J", prompt_format="cultural_judge", seed=1, max_tokens=8,
                          use_imported=False)
        assert list(own["judge"]) == ["J"] * 3 and list(own["verdict"]) == ["YES", "NO", "YES"]


def test_a_failed_request_is_missing_and_asked_again_on_the_next_run(tmp_path):
    fail = {"on": True}

    def reply(request, i, backend):
        if fail["on"] and request.messages[-1][1].endswith(" 1"):
            return Completion(text="", error="HTTP 500: upstream exploded", error_kind="http_500")
        return "[NO]"

    b = ScriptedBackend(reply)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        got = judging.ask(b, store, _jobs(3, judged=False), model="J", prompt_format="cultural_judge", seed=1,
                          max_tokens=8)
        assert list(got["status"]) == ["ok", "missing", "ok"] and got["source"].iloc[1] is None
        assert store.count() == 2
        fail["on"] = False
        again = judging.ask(b, store, _jobs(3, judged=False), model="J", prompt_format="cultural_judge", seed=1,
                            max_tokens=8)
        assert list(again["status"]) == ["ok"] * 3 and len(b.seen) == 4


def test_ask_refuses_a_format_that_is_not_a_judges(tmp_path):
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(ValueError, match="unknown prompt_format 'judge'"):
            judging.ask(None, store, _jobs(1), model=None, prompt_format="judge", seed=1, max_tokens=8)
        with pytest.raises(ValueError, match="not a judge's"):
            judging.ask(None, store, _jobs(1), model=None, prompt_format="soap_note", seed=1, max_tokens=8)
