"""The dispatch policies of the run loop (medaudit.llm.dispatch): what
runs.run does with the requests the store lacks, chosen by the caller or
read from the environment a notebook's kernel was started with."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from medaudit.llm import GenParams, ResponseStore, dispatch, runs
from support.scripted import ScriptedBackend

JOBS = pd.DataFrame({"item_id": ["q1", "q2", "q3", "q4"], "condition": ["base"] * 4,
                     "messages": [[{"role": "user", "content": f"Question {i}?"}] for i in range(4)]})


def _plan(be):
    return runs.plan_free(JOBS, backend=be.kind, model_id=be.model_id, k=2, seed=7, gen=GenParams(0.7, 0.9, 20),
                          prompt_format="open")


def _backend():
    return ScriptedBackend(lambda r, i, be: f"reply to {r.messages[-1][1]}")


@pytest.mark.parametrize("env, policy", [
    ({}, dispatch.Direct()),
    ({"MEDAUDIT_STORED_ONLY": "0"}, dispatch.Direct()),
    ({"MEDAUDIT_STORED_ONLY": "1"}, dispatch.StoredOnly("")),
    ({"MEDAUDIT_STORED_ONLY": "record with make record"}, dispatch.StoredOnly("record with make record")),
    ({"MEDAUDIT_SHARD": "1/3"}, dispatch.Shard(1, 3)),
    ({"MEDAUDIT_BATCH_COLLECT": "/tmp/b", "MEDAUDIT_BATCH_FINGERPRINT": "f"}, dispatch.Collect(Path("/tmp/b"), "f")),
])
def test_the_environment_names_the_policy(env, policy):
    got = dispatch.from_env(env)
    assert type(got) is type(policy) and got == policy


def test_two_policies_at_once_are_refused():
    with pytest.raises(ValueError, match="MEDAUDIT_BATCH_COLLECT and MEDAUDIT_STORED_ONLY"):
        dispatch.from_env({"MEDAUDIT_BATCH_COLLECT": "/tmp/b", "MEDAUDIT_STORED_ONLY": "1"})
    with pytest.raises(ValueError, match="i/N"):
        dispatch.from_env({"MEDAUDIT_SHARD": "one of three"})


def test_stored_only_sends_nothing_and_names_the_first_missing_request(tmp_path):
    be = _backend()
    plan = _plan(be)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        runs.run(be, store, plan[:5], model="m", progress=False)          # 5 of 8 stored
        assert be.sent == 5
        with pytest.raises(dispatch.NotStored, match=r"3 requests of m \(open\) have no stored or recorded answer, "
                                                     r"first q3 / base / open k=1 .*record it again \(redo it\)"):
            runs.run(be, store, plan, model="m", progress=False, dispatch=dispatch.StoredOnly("redo it"))
        assert be.sent == 5 and store.count() == 5
        # everything stored: the stored-only run is an ordinary cached run
        rep = runs.run(be, store, plan[:5], model="m", progress=False, dispatch=dispatch.StoredOnly())
        assert rep.cached == 5 and be.sent == 5


def test_stored_only_from_the_environment(tmp_path, monkeypatch):
    be = _backend()
    monkeypatch.setenv(dispatch.ENV_STORED_ONLY, "1")
    with ResponseStore(tmp_path / "s.sqlite") as store, pytest.raises(dispatch.NotStored):
        runs.replies(be, store, JOBS, model="m", seed=1, gen=GenParams(0.0, 1.0, 8), prompt_format="open")
    assert be.sent == 0


def test_collect_writes_the_pending_requests_and_stops(tmp_path):
    be = _backend()
    plan = _plan(be)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        runs.run(be, store, plan[:2], model="m", progress=False)
        with pytest.raises(dispatch.BatchCollected, match="6 pending requests of m"):
            runs.run(be, store, plan, model="m", progress=False,
                     dispatch=dispatch.Collect(tmp_path / "b", "fp", "vllm"))
    lines = [json.loads(x) for x in (tmp_path / "b" / dispatch.MANIFEST).read_text().splitlines()]
    assert sorted(d["key"] for d in lines) == sorted(s.key for s in plan[2:]) and be.sent == 2
    assert {d["fingerprint"] for d in lines} == {"fp"}
    assert all(d["body"]["messages"] == [{"role": "user", "content": d["messages"][0][1]}] for d in lines)


def test_shards_split_the_pending_requests_and_stop_after_their_part(tmp_path):
    be = _backend()
    plan = _plan(be)
    mine = [s for s in plan if dispatch.in_shard(s.key, 0, 2)]
    assert 0 < len(mine) < len(plan)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(dispatch.ShardDone, match=f"shard 0/2: sent {len(mine)} of the stage's 8"):
            runs.run(be, store, plan, model="m", progress=False, dispatch=dispatch.Shard(0, 2))
        assert store.has(s.key for s in plan) == {s.key for s in mine}


def test_a_stop_is_told_apart_by_its_type():
    for cls in (dispatch.BatchCollected, dispatch.ShardDone, dispatch.NotStored):
        assert issubclass(cls, dispatch.DispatchStop)


def test_a_missing_request_names_the_recording_that_holds_its_format(tmp_path):
    """A replayed recording whose prompt changed since: the stop names the file to record again."""
    from medaudit.llm import recorded

    be = _backend()
    plan = _plan(be)
    with ResponseStore(tmp_path / "src.sqlite") as src:
        runs.run(be, src, plan, model="m", progress=False)
        recorded.record(src.frame(), tmp_path / "run.jsonl")
    changed = JOBS.assign(messages=[[{"role": "user", "content": f"Question {i}, reworded?"}] for i in range(4)])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        recorded.replay(tmp_path / "run.jsonl", store)
        again = runs.plan_free(changed, backend=be.kind, model_id=be.model_id, k=2, seed=7,
                               gen=GenParams(0.7, 0.9, 20), prompt_format="open")
        with pytest.raises(dispatch.NotStored, match=r"run\.jsonl holds this format\): record it again"):
            runs.run(be, store, again, model="m", progress=False, dispatch=dispatch.StoredOnly())
