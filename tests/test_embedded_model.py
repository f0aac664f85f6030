"""The embedded default model answers real requests in every `make test-slow` (CI runs it).

Notebook 03's smoke stage is planned here by the code the notebook runs
(mcq.plan over the variants notebook 02 makes) for the embedded
Qwen2.5-Coder-1.5B through the llama.cpp backend: the plan's keys are
exactly the keys of the recorded run nbval replays
(data/recorded/smoke_03_mcq_run.jsonl), so the recording answers exactly
what a live run would ask; then two of those requests are sent to the
model itself and stored under those keys.
"""
from __future__ import annotations

import json

import pytest
from support.threads import per_worker

from medaudit import paths
from medaudit.llm import ResponseStore, mcq, runs
from support.smoke import GEN, SEED, smoke_frames

pytestmark = pytest.mark.slow     # the embedded 1.5B model answers the recorded requests, about 25 s

EMBEDDED = "qwen2.5-coder-1.5b"
RECORDING = "smoke_03_mcq_run.jsonl"



@pytest.fixture(scope="module")
def embedded():
    from medaudit.llm.llamacpp import LlamaCppBackend

    return LlamaCppBackend(EMBEDDED, n_ctx=4096, n_threads=per_worker())


def test_the_embedded_model_answers_the_recorded_requests(embedded, medqa4, conditions, tmp_path):
    variants, items = smoke_frames(medqa4, conditions)
    plan = mcq.plan(variants, items, model=EMBEDDED, backend=embedded.kind, model_id=embedded.model_id, k=3,
                    seed=SEED, gen=GEN)
    recorded = {json.loads(x)["key"]: json.loads(x)
                for x in paths.data("recorded", RECORDING).read_text().splitlines() if x.strip()}
    assert {s.key for s in plan} == set(recorded)          # the recording answers exactly this plan
    assert not embedded.loaded                               # planning loads no weights
    two = [s for s in plan if s.item_id == plan[0].item_id and s.condition == "base"][:2]
    with ResponseStore(tmp_path / "s.sqlite") as store:
        rep = runs.run(embedded, store, two, model=EMBEDDED, progress=False).check()
        assert (rep.generated, rep.cached) == (2, 0) and embedded.loaded
        got = store.by_keys(s.key for s in two).set_index("key")
    for s in two:
        row = got.loc[s.key]
        assert row["response_text"] and row["tokens_out"] > 0 and row["model_id"] == recorded[s.key]["model_id"]
        assert row["parse_status"] in ("ok", "no_answer", "multiple", "empty")
        if row["parse_status"] == "ok":
            assert row["parsed_answer"] in "ABCD" and set(row["letter_logprobs"]) <= set("ABCD")
