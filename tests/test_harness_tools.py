"""The design export scored by the real harnesses: lm-eval 0.4.13
and inspect-ai 0.3.285 run the exported tasks as they are written, their
model replaced by one that replays chosen replies (no server, no model), and
what each harness *itself* reports — lm-eval's ``exact_match,medaudit``,
Inspect's ``accuracy`` — must equal our accuracy on the same replies, read
back from the log the harness wrote through the project's importer.

The replies tell the rules apart: the bracketed target, lower case ("[b]"),
two letters ("[B] or [C]"), the same letter twice, another letter with
blanks, the bare letter, nothing, a sentence around the bracket.

These need lm-eval and inspect-ai, which the project does not install (they
pin their own torch and dozens of packages): ``make harness-check`` runs this
file in its side venv (``.cache/harness-venv``) before the model runs; here,
without them, each test is skipped and says so.
"""
from __future__ import annotations

import json
import os

import pytest

from medaudit.engines import harness
from medaudit.llm import GenParams, mcq
from medaudit.llm.store import ResponseStore
from support.smoke import smoke_frames

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")       # the task's data is a local JSON file: nothing to download

NEED = "run by make harness-check in its side venv (.cache/harness-venv)"


def _reply(index: int, target: str) -> str:
    """The index-th kind of reply (cycling through eight) to a document whose target is ``target``."""
    other = "B" if target != "B" else "C"
    kinds = [f"[{target}]", f"[{target.lower()}]", f"[{target}] or [{other}]", f"[{target}] and again [{target}]",
             f"[ {other} ]", target, "", f"The answer is [ {target} ]."]
    return kinds[index % len(kinds)]


@pytest.fixture()
def exported(tmp_path, medqa4, conditions):
    """The smoke design (3 items x 3 conditions x K = 3) exported as it runs, and each
    document's reply keyed by its user turn (the same prompt gets the same reply)."""
    variants, items = smoke_frames(medqa4, conditions)
    samples = mcq.plan(variants, items, model="export", backend="export", model_id="export", k=3, seed=7,
                       gen=GenParams(0.7, 0.9, 16))
    files = harness.export_design(samples, items, tmp_path / "export")
    docs = [json.loads(x) for x in files[1].read_text().splitlines()]
    replies: dict[str, str] = {}
    for i, d in enumerate(docs):
        replies.setdefault(d["prompt"], _reply(i, d["target"]))
    kinds = {r.replace(d["target"], "T") for d in docs for r in [replies[d["prompt"]]]}
    assert len(kinds) >= 6, kinds                       # the replies cover the cases that tell rules apart
    return {"dir": tmp_path / "export", "items": items, "replies": replies, "map": files[-1], "inspect": files[2]}


def _ours(tmp_path, kind, path, exported, name, **kw):
    """(our accuracy, samples) on the harness's log imported back, and each source id's
    parse status."""
    import pandas as pd

    with ResponseStore(tmp_path / f"{name}.sqlite") as s:
        got = harness.import_log(kind, path, exported["map"], s, model=name, options_by_item=exported["items"], **kw)
        assert got["stored"] == 27 and got["unpaired"] == [] and got["missing"] == []
        status = s.frame().set_index(["item_id", "condition", "sample"])["parse_status"]
        m = pd.read_csv(exported["map"], dtype=str)
        by_id = {r.source_id: status[(r.item_id, r.condition, int(r.sample))] for r in m.itertuples()}
        return harness.our_accuracy(s, name, exported["items"]), by_id


def test_lm_evals_own_exact_match_is_our_accuracy(tmp_path, exported):
    pytest.importorskip("lm_eval", reason=NEED)
    import lm_eval
    from lm_eval.api.model import LM
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    replies = exported["replies"]

    class Replay(LM):
        """generate_until answers each document's prompt with its chosen reply."""
        def generate_until(self, requests, disable_tqdm=False):
            return [replies[r.doc["prompt"]] for r in requests]

        def loglikelihood(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

    results = lm_eval.simple_evaluate(model=Replay(), tasks=["medaudit_mcq"], log_samples=True,
                                      task_manager=TaskManager(include_path=str(exported["dir"])))
    # written as the lm_eval command writes them (--output_path, --log_samples)
    tracker = EvaluationTracker(output_path=str(tmp_path / "lm-eval"))
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    tracker.save_results_samples(task_name="medaudit_mcq", samples=samples["medaudit_mcq"])
    [log] = tmp_path.glob("lm-eval/**/samples_medaudit_mcq_*.jsonl")
    [res] = tmp_path.glob("lm-eval/**/results_*.json")
    theirs = harness.reported_accuracy("lm-eval", res)
    ours, status = _ours(tmp_path, "lm-eval", log, exported, "replay-lm-eval")
    assert f"exact_match,{harness.FILTER}" in results["results"]["medaudit_mcq"]
    assert theirs == pytest.approx(ours) and 0 < ours[0] < 1
    # sample by sample: lm-eval's filter finds no letter exactly where our parser reads none
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 27
    for d in lines:
        assert (d["filtered_resps"] == [harness.NO_LETTER]) == (status[str(d["doc_id"])] != "ok"), d["resps"]


def test_inspects_own_accuracy_is_our_accuracy(tmp_path, exported, monkeypatch):
    pytest.importorskip("inspect_ai", reason=NEED)
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    replies = exported["replies"]

    def answer(messages, tools, tool_choice, config):
        prompt = next(m.text for m in messages if m.role == "user")
        out = ModelOutput.from_content(model="replay", content=replies[prompt])
        # a usage given: mockllm would count tokens with tiktoken, which downloads its encoding
        out.usage = ModelUsage(input_tokens=len(prompt.split()), output_tokens=len(out.completion.split()),
                               total_tokens=len(prompt.split()) + len(out.completion.split()))
        return out

    monkeypatch.chdir(exported["dir"])                 # inspect takes a task file by a relative path
    [log] = inspect_eval(exported["inspect"].name, model=get_model("mockllm/model", custom_outputs=answer),
                         log_dir=str(tmp_path / "inspect"), display="none")
    assert log.status == "success"
    theirs = harness.reported_accuracy("inspect", log.location)
    full = read_eval_log(log.location)
    ours, status = _ours(tmp_path, "inspect", log.location, exported, "replay-inspect", log=full)
    assert theirs == pytest.approx(ours) and 0 < ours[0] < 1
    # sample by sample: Inspect says the reply is malformed (no_response where it is empty) exactly where our
    # parser reads no letter (empty where it is empty) -- "[b]" and "[B] or [C]" included
    assert len(full.samples) == 27
    for smp in full.samples:
        score, ours_status = smp.scores["pattern"], status[str(smp.id)]
        assert (score.reason in ("invalid_response_format", "no_response")) == (ours_status != "ok"), smp.output
        assert (score.reason == "no_response") == (ours_status == "empty")
        t = smp.output.completion
        if t.startswith("[") and (t[1].islower() or " or [" in t):
            assert score.value == "I" and ours_status != "ok"
