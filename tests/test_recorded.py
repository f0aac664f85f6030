"""Recorded runs (medaudit.llm.recorded): a run's own rows written out and
replayed into another store, served only to the requests they answered."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from medaudit.llm import GenParams, ResponseStore, mcq, recorded, runs
from medaudit.llm.base import Completion

from support.scripted import ScriptedBackend

JOBS = pd.DataFrame({"item_id": ["q1", "q2", "q3"], "condition": ["base", "+homo", "base"],
                     "messages": [[{"role": "user", "content": f"Question {i}?"}] for i in range(3)]})
GEN = GenParams(0.7, 0.9, 40)


def _free_run(store, backend, model="m"):
    return runs.replies(backend, store, JOBS, model=model, seed=7, gen=GEN, prompt_format="open_answer")


def _recorded_file(tmp_path):
    src = ResponseStore(tmp_path / "src.sqlite")
    _free_run(src, ScriptedBackend(lambda r, i, be: f"answer to {r.messages[0][1]}"))
    path = tmp_path / "run.jsonl"
    assert recorded.record(src.frame(), path) == 3
    return path


def _refusing():
    def reply(r, i, be):
        raise AssertionError(f"the model was asked: {r.messages}")
    return ScriptedBackend(reply)


def test_a_replayed_run_answers_every_request_without_the_model(tmp_path):
    path = _recorded_file(tmp_path)
    store = ResponseStore(tmp_path / "new.sqlite")
    assert recorded.replay(path, store) == {"file": str(path), "read": 3, "stored": 3, "already_present": 0}
    got = _free_run(store, _refusing())
    assert list(got["reply"]) == [f"answer to Question {i}?" for i in range(3)]
    rows = store.frame()
    assert set(rows["source"]) == {"recorded"}
    # replaying again adds nothing
    assert recorded.replay(path, store)["already_present"] == 3 and store.count() == 3


def test_a_recorded_row_is_not_served_to_another_model_or_other_settings(tmp_path):
    path = _recorded_file(tmp_path)
    store = ResponseStore(tmp_path / "new.sqlite")
    recorded.replay(path, store)
    other = ScriptedBackend(lambda r, i, be: "fresh", model_id="script-v2")
    assert list(_free_run(store, other)["reply"]) == ["fresh"] * 3
    assert other.sent == 3
    hotter = ScriptedBackend(lambda r, i, be: "hot")
    got = runs.replies(hotter, store, JOBS, model="m", seed=7, gen=GenParams(1.0, 0.9, 40), prompt_format="open_answer")
    assert list(got["reply"]) == ["hot"] * 3


def test_a_multiple_choice_row_keeps_its_key(tmp_path):
    items = pd.DataFrame({"item_id": ["q1"], "options": [{"A": "x", "B": "y", "C": "z", "D": "w"}]})
    variants = pd.DataFrame({"item_id": ["q1"], "condition": ["base"], "question": ["Which?"]})
    be = ScriptedBackend(lambda r, i, b: Completion(text="[B]"))
    plan = mcq.plan(variants, items, model="m", k=2, seed=3, gen=GenParams(0.7, 0.9, 16), backend=be.kind,
                    model_id=be.model_id, prompt_format="mcq")
    src = ResponseStore(tmp_path / "src.sqlite")
    runs.run(be, src, plan, model="m")
    recorded.record(src.frame(), tmp_path / "mcq.jsonl")
    rows = recorded.read(tmp_path / "mcq.jsonl")
    assert sorted(r["key"] for r in rows) == sorted(s.key for s in plan)


@pytest.mark.parametrize("edit, field", [
    (lambda r: r.update(prompt=r["prompt"].replace("Question", "Quest")), "key"),
    (lambda r: r.update(temperature=0.0), "key"),
    (lambda r: r.update(model_id="another-file"), "key"),
    (lambda r: r.pop("prompt"), "prompt"),
    (lambda r: r.update(colour="red"), "colour"),
])
def test_a_row_changed_after_recording_is_refused_by_line_and_field(tmp_path, edit, field):
    path = _recorded_file(tmp_path)
    lines = path.read_text().splitlines()
    r = json.loads(lines[1])
    edit(r)
    lines[1] = json.dumps(r)
    path.write_text("\n".join(lines) + "\n")
    store = ResponseStore(tmp_path / "new.sqlite")
    with pytest.raises(recorded.RecordedRunError, match=rf"run.jsonl: line 2.*field '{field}'"):
        recorded.replay(path, store)
    assert store.count() == 0          # nothing written when one line is bad


def test_a_row_sent_with_other_settings_is_not_recorded(tmp_path):
    store = ResponseStore(tmp_path / "s.sqlite")
    _free_run(store, ScriptedBackend(lambda r, i, be: Completion(text="x", settings={"max_completion_tokens": 40})))
    with pytest.raises(recorded.RecordedRunError, match="other settings"):
        recorded.record(store.frame(), tmp_path / "x.jsonl")
