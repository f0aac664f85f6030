"""medaudit.engines.harness: lm-eval and HELM logs imported through the importer's
one path, and our variants exported as an lm-eval task.

The logs are golden files constructed here from each harness's documented
per-sample format (lm-eval ``--log_samples``: doc_id, doc, arguments,
resps/filtered_resps, repeats; HELM ``scenario_state.json``:
request_states with instance id, perturbation, train_trial_index and the
result's completions) for a constructed run of the smoke 03 design; the same
answers are written as the importer's CSV, and every path must give the same
tables.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from medaudit import checksum
from medaudit.engines import harness
from medaudit.llm import importer, mcq
from medaudit.llm.store import ResponseStore
from support.smoke import smoke_frames

ROOT_TESTS = Path(__file__).resolve().parent

MODEL = "other-harness-model"
K = 3


def constructed_run(variants):
    """Per variant: four log-likelihoods (choice A..D) and K generated answers,
    varied by item and condition so that conditions differ."""
    run = []
    for i, v in enumerate(variants.itertuples(index=False)):
        lls = [-1.0 - ((i * 7 + j * 3) % 5) * 0.6 for j in range(4)]
        gens = [f"[{'ABCD'[(i + k) % 4]}]" if (i + k) % 5 else "I am not sure" for k in range(K)]
        run.append((v, lls, gens))
    return run


def write_map(path, variants, fmt, ids=None, perturbation=None):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source_id", "item_id", "condition", "prompt_format"] + (["perturbation"] if perturbation else []))
        for i, v in enumerate(variants.itertuples(index=False)):
            sid = ids[i] if ids else str(i)
            w.writerow([sid, v.item_id, v.condition, fmt] + ([perturbation(v)] if perturbation else []))
    return path


def normalised(lls):
    z = max(lls) + math.log(sum(math.exp(x - max(lls)) for x in lls))
    return {L: x - z for L, x in zip("ABCD", lls)}


def csv_of(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def tables(store, fmt):
    df = store.frame("WHERE prompt_format = ?", (fmt,))
    return [mcq.parse_rates(df, threshold=2).to_csv(), mcq.parse_rates_by_condition(df).to_csv(),
            df.sort_values(["item_id", "condition", "sample"])[
                ["item_id", "condition", "sample", "response_text", "parsed_answer", "parse_status"]
            ].reset_index(drop=True).to_csv()]


@pytest.fixture()
def design(medqa4, conditions):
    variants, items = smoke_frames(medqa4, conditions)
    return variants, items, constructed_run(variants)


def lm_eval_mc_line(i, v, lls, strings=True):
    resp = [[str((x, False))] if strings else [[x, False]] for x in lls]
    return {"doc_id": i, "doc": {"question": v.question}, "target": 0,
            "arguments": {f"gen_args_{j}": {"arg_0": v.question, "arg_1": f" {L}"} for j, L in enumerate("ABCD")},
            "resps": resp, "filtered_resps": [r[0] for r in resp], "filter": "none", "metrics": ["acc"],
            "doc_hash": "x", "prompt_hash": "y", "target_hash": "z"}


def test_lm_eval_multiple_choice_log_equals_the_csv(tmp_path, design):
    variants, items, run = design
    log = tmp_path / "samples_medaudit_mcq_2026-11-24T00-00-00.jsonl"
    log.write_text("".join(json.dumps(lm_eval_mc_line(i, v, lls, strings=i % 2 == 0)) + "\n"
                           for i, (v, lls, _) in enumerate(run)))
    mp = write_map(tmp_path / "map.csv", variants, "mcq")
    rows = []
    for v, lls, _ in run:
        lp = normalised(lls)
        best = max(lp, key=lp.get)
        rows.append({"model": MODEL, "item_id": v.item_id, "condition": v.condition, "prompt_format": "mcq",
                     "sample": 0, "response_text": f"[{best}]", "parsed_answer": best,
                     "answer_logprob": lp[best], "letter_logprobs": json.dumps(lp)})
    with ResponseStore(tmp_path / "a.sqlite") as a, ResponseStore(tmp_path / "b.sqlite") as b:
        got = harness.import_log("lm-eval", log, mp, a, model=MODEL, harness_version="0.4.8", options_by_item=items)
        assert (got["read"], got["stored"], got["unpaired"]) == (9, 9, [])
        importer.import_responses(csv_of(tmp_path / "same.csv", rows), b, options_by_item=items)
        assert tables(a, "mcq") == tables(b, "mcq")
        fa = a.frame().sort_values(["item_id", "condition"]).reset_index(drop=True)
        fb = b.frame().sort_values(["item_id", "condition"]).reset_index(drop=True)
        for x, y in zip(fa["letter_logprobs"], fb["letter_logprobs"]):
            assert x == pytest.approx(y)
        assert (fa["parsed_answer"] == fb["parsed_answer"]).all()
        # imported again: idempotent
        assert harness.import_log("lm-eval", log, mp, a, model=MODEL)["stored"] == 0
    prov = [json.loads(x) for x in (tmp_path / "harness_imports.jsonl").read_text().splitlines()]
    assert prov[0]["sha256"] == checksum.sha256_file(log) and prov[0]["harness_version"] == "0.4.8"


def test_lm_eval_generation_repeats_are_k_samples_and_unpaired_are_reported(tmp_path, design):
    variants, items, run = design
    lines = [{"doc_id": i, "doc": {"question": v.question}, "arguments": {"gen_args_0": {"arg_0": v.question,
              "arg_1": {"until": ["\n"], "do_sample": True, "temperature": 0.7}}},
              # as lm-eval writes a `repeats: K` line: every repeat in resps, the first in filtered_resps
              "resps": [gens], "filtered_resps": gens[:1], "filter": "none", "metrics": ["exact_match"]}
             for i, (v, _, gens) in enumerate(run)]
    lines.append({**lines[0], "doc_id": 99})                       # a document the map does not pair
    log = tmp_path / "samples_medaudit_gen_2026-11-24T00-00-00.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    mp = write_map(tmp_path / "map.csv", variants, "mcq")
    rows = [{"model": MODEL, "item_id": v.item_id, "condition": v.condition, "prompt_format": "mcq", "sample": k,
             "response_text": t} for v, _, gens in run for k, t in enumerate(gens)]
    with ResponseStore(tmp_path / "a.sqlite") as a, ResponseStore(tmp_path / "b.sqlite") as b:
        got = harness.import_log("lm-eval", log, mp, a, model=MODEL, options_by_item=items)
        assert (got["read"], got["unpaired"]) == (9 * K, ["99"])
        importer.import_responses(csv_of(tmp_path / "same.csv", rows), b, options_by_item=items)
        assert tables(a, "mcq") == tables(b, "mcq")
        assert a.frame()["parse_status"].ne("ok").sum() > 0            # the unsure answers: parse failures


def test_helm_scenario_state_equals_the_csv(tmp_path, design):
    variants, items, run = design
    states = []
    for i, (v, _, gens) in enumerate(run):
        for trial, g in enumerate(gens):
            letter = g.strip("[]") if g.startswith("[") else "unsure"
            states.append({"instance": {"input": {"text": v.question}, "references": [], "split": "test",
                                        "id": f"id{i}", "perturbation": {"name": "identity"} if i % 2 else None},
                           "train_trial_index": trial, "output_mapping": {L: L for L in "ABCD"},
                           "request": {"model": "x/y", "temperature": 0.7, "num_completions": 1},
                           "result": {"success": True, "completions": [{"text": f" {letter}", "logprob": -0.5}]},
                           "num_train_instances": 0, "prompt_truncated": False})
    log = tmp_path / "scenario_state.json"
    log.write_text(json.dumps({"adapter_spec": {"method": "multiple_choice_joint"}, "request_states": states}))
    mp = write_map(tmp_path / "map.csv", variants, "mcq", ids=[f"id{i}" for i in range(len(run))],
                   perturbation=lambda v: "identity" if list(variants["item_id"] + variants["condition"]).index(
                       v.item_id + v.condition) % 2 else "")
    rows = []
    for v, _, gens in run:
        for k, g in enumerate(gens):
            text = g.strip("[]") if g.startswith("[") else "unsure"
            r = {"model": MODEL, "item_id": v.item_id, "condition": v.condition, "prompt_format": "mcq",
                 "sample": k, "response_text": text}
            if len(text) == 1:
                r["parsed_answer"] = text
            rows.append(r)
    with ResponseStore(tmp_path / "a.sqlite") as a, ResponseStore(tmp_path / "b.sqlite") as b:
        got = harness.import_log("helm", log, mp, a, model=MODEL, harness_version="0.5.4", options_by_item=items)
        assert (got["stored"], got["unpaired"]) == (9 * K, [])
        importer.import_responses(csv_of(tmp_path / "same.csv", rows), b, options_by_item=items)
        assert tables(a, "mcq") == tables(b, "mcq")
    # a perturbation the map does not know: reported by id
    states[0]["instance"]["perturbation"] = {"name": "typos"}
    log.write_text(json.dumps({"request_states": states}))
    with ResponseStore(tmp_path / "c.sqlite") as c:
        assert harness.import_log("helm", log, mp, c, model=MODEL)["unpaired"] == ["id0 (typos)"]


def test_bad_map_and_log_are_named(tmp_path, design):
    variants, _, _ = design
    bad = tmp_path / "map.csv"
    bad.write_text("source_id,item_id,condition\n0,a,base\n")
    with pytest.raises(harness.HarnessError, match="lacks the columns \\['prompt_format'\\]"):
        harness.read_map(bad)
    dup = write_map(tmp_path / "m2.csv", pd.concat([variants.head(1), variants.head(1)]), "mcq", ids=["0", "0"])
    with pytest.raises(harness.HarnessError, match="row 3: source_id '0'.*mapped twice"):
        harness.read_map(dup)
    log = tmp_path / "samples_x.jsonl"
    log.write_text('{"doc": {}}\n')
    with pytest.raises(harness.HarnessError, match="line 1: not an lm-eval sample with doc_id"):
        harness.lm_eval_records(log, {}, MODEL)


def test_lm_eval_task_export_round_trips_through_its_map(tmp_path, design):
    variants, items, run = design
    yaml, data, mp = harness.export_lm_eval_task(variants, items, tmp_path / "task")
    docs = [json.loads(x) for x in data.read_text().splitlines()]
    assert len(docs) == 9 and docs[4]["question"] == variants["question"][4]
    assert docs[0]["choices"] == [items["options"][0][L] for L in "ABCD"]
    assert "output_type: multiple_choice" in yaml.read_text() and data.name in yaml.read_text()
    # lm-eval's log of that task (doc_id = the line) comes back paired with our items and conditions
    log = tmp_path / "samples_medaudit_mcq_2026.jsonl"
    log.write_text("".join(json.dumps(lm_eval_mc_line(i, v, lls)) + "\n" for i, (v, lls, _) in enumerate(run)))
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, mp, s, model=MODEL, options_by_item=items)
        assert got["stored"] == 9 and got["unpaired"] == []
        f = s.frame()
        assert sorted(zip(f["item_id"], f["condition"])) == sorted(zip(variants["item_id"], variants["condition"]))


def inspect_log(run, epochs=K):
    """An EvalLog as inspect_ai.log.read_eval_log returns it (the attributes
    the import reads: eval.packages, samples[].id/epoch/output.completion),
    for the constructed run: Inspect's multiple_choice solver answers
    "ANSWER: X"."""
    samples = []
    for i, (v, _, gens) in enumerate(run):
        for e in range(1, epochs + 1):
            g = gens[e - 1]
            text = f"ANSWER: {g.strip('[]')}" if g.startswith("[") else "I am not sure"
            samples.append(SimpleNamespace(id=str(i), epoch=e, input=v.question,
                                           output=SimpleNamespace(completion=text)))
    return SimpleNamespace(version=2, status="success", samples=samples,
                           eval=SimpleNamespace(task="medaudit_mcq", packages={"inspect_ai": "0.3.99"}))


def test_inspect_log_epochs_are_k_samples_and_equal_the_csv(tmp_path, design):
    """Inspect's multiple_choice template answers "ANSWER: X": stored under its own format,
    read as Inspect reads it (case-insensitive, the last ANSWER line)."""
    variants, items, run = design
    log = inspect_log(run)
    log.samples[0].output.completion = "ANSWER: b\nOn reflection,\nanswer: C"     # the last line wins, any case
    run[0][2][0] = "[C]"
    log.samples.append(SimpleNamespace(id="77", epoch=1, output=SimpleNamespace(completion="ANSWER: A")))
    path = tmp_path / "2026-11-24_medaudit-mcq.eval"
    path.write_bytes(b"constructed")                               # its sha256 is recorded
    mp = write_map(tmp_path / "map.csv", variants, harness.INSPECT_FORMAT)
    rows = []
    texts = {(smp.id, smp.epoch): smp.output.completion for smp in log.samples}
    for i, (v, _, gens) in enumerate(run):
        for k, g in enumerate(gens):
            r = {"model": MODEL, "item_id": v.item_id, "condition": v.condition,
                 "prompt_format": harness.INSPECT_FORMAT,
                 "sample": k, "response_text": texts[(str(i), k + 1)]}
            if g.startswith("["):
                r["parsed_answer"] = g.strip("[]")
            rows.append(r)
    with ResponseStore(tmp_path / "a.sqlite") as a, ResponseStore(tmp_path / "b.sqlite") as b:
        got = harness.import_log("inspect", path, mp, a, model=MODEL, options_by_item=items, log=log)
        assert (got["stored"], got["unpaired"]) == (9 * K, ["77 (epoch 1)"])
        importer.import_responses(csv_of(tmp_path / "same.csv", rows), b, options_by_item=items)
        assert tables(a, harness.INSPECT_FORMAT) == tables(b, harness.INSPECT_FORMAT)
        assert sorted(a.frame()["sample"].unique()) == [0, 1, 2]
    prov = json.loads((tmp_path / "harness_imports.jsonl").read_text().splitlines()[0])
    assert prov["harness_version"] == "0.3.99" and prov["sha256"] == checksum.sha256_file(path)


def test_inspect_needs_its_package_or_says_so(tmp_path, design, monkeypatch):
    variants, _, _ = design
    mp = write_map(tmp_path / "map.csv", variants, "mcq")
    monkeypatch.setitem(sys.modules, "inspect_ai", None)           # as where it is not installed
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    with ResponseStore(tmp_path / "a.sqlite") as a:
        with pytest.raises(harness.HarnessError, match=r"pip install -e '\.\[inspect\]' in the project's venv"):
            harness.import_log("inspect", tmp_path / "x.eval", mp, a, model=MODEL)


def test_inspect_task_export(tmp_path, design):
    variants, items, _ = design
    task, data, mp = harness.export_inspect_task(variants, items, tmp_path / "t", epochs=5)
    tree = ast.parse(task.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "medaudit_mcq" for n in tree.body)
    assert "epochs: int = 5" in task.read_text() and data.name in task.read_text()
    docs = [json.loads(x) for x in data.read_text().splitlines()]
    m = pd.read_csv(mp, dtype=str)
    assert [d["id"] for d in docs] == list(m["source_id"])
    assert [(d["metadata"]["item_id"], d["metadata"]["condition"]) for d in docs] == list(
        zip(m["item_id"], m["condition"]))
    assert all(d["target"] in "ABCD" for d in docs)


def test_cli_imports_and_reports_unpaired(tmp_path, design):
    import subprocess

    variants, items, run = design
    log = tmp_path / "samples_medaudit_mcq_2026.jsonl"
    log.write_text("".join(json.dumps(lm_eval_mc_line(i, v, lls)) + "\n" for i, (v, lls, _) in enumerate(run))
                   + json.dumps(lm_eval_mc_line(42, run[0][0], run[0][1])) + "\n")
    mp = write_map(tmp_path / "map.csv", variants, "mcq")
    cmd = [sys.executable, "-m", "medaudit.engines.harness", "import", "lm-eval", str(log), "--map", str(mp), "--model",
           MODEL, "--profile", "smoke", "--store", str(tmp_path / "s.sqlite"), "--version", "0.4.8"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"stored": 9' in r.stdout and "1 log rows not in the map (not stored): 42" in r.stdout
    r = subprocess.run(cmd + ["--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr


# -- defects found with the real harnesses (tests/fixtures/harness_logs/, written by
#    lm-eval 0.4.13 and inspect-ai 0.3.285 against the embedded model; PROVENANCE.md there)

REAL = ROOT_TESTS / "fixtures" / "harness_logs"


def test_exported_targets_are_the_gold_letters(tmp_path, design):
    """The gold is the item's answer_idx (a letter), not its answer text: every target was "A" before."""
    variants, items, _ = design
    gold = dict(zip(items["item_id"], items["answer_idx"]))
    assert set(gold.values()) - {"A"}, "the smoke items have golds other than A"
    _, data, _ = harness.export_lm_eval_task(variants, items, tmp_path / "task")
    docs = [json.loads(x) for x in data.read_text().splitlines()]
    assert [d["letters"][d["target"]] for d in docs] == [gold[v] for v in variants["item_id"]]
    _, inspect_data, _ = harness.export_inspect_task(variants, items, tmp_path / "t")
    assert [json.loads(x)["target"] for x in inspect_data.read_text().splitlines()] == [
        gold[v] for v in variants["item_id"]]
    # the answer text alone finds its letter; no answer at all is an error, never a silent "A"
    by_text = items.drop(columns="answer_idx")
    _, data2, _ = harness.export_lm_eval_task(variants, by_text, tmp_path / "task2")
    assert data2.read_text() == data.read_text()
    with pytest.raises(harness.HarnessError, match="medqa4-0309.*gold"):
        harness.export_lm_eval_task(variants, items.drop(columns=["answer", "answer_idx"]), tmp_path / "task3")


def test_the_exported_task_finds_its_data_from_any_folder(tmp_path, design):
    """lm-eval resolves data_files against the working directory: the path is absolute."""
    import yaml as _yaml

    variants, items, _ = design
    task, data, _ = harness.export_lm_eval_task(variants, items, tmp_path / "task")
    path = Path(_yaml.safe_load(task.read_text())["dataset_kwargs"]["data_files"]["test"])
    assert path.is_absolute() and path == data.resolve()


def test_every_repeat_of_a_real_lm_eval_generation_log_is_imported(tmp_path):
    """A real `repeats: 2` log: resps holds both answers, filtered_resps only the first
    (lm-eval's take-first filter). Both are K samples, none is lost."""
    log = REAL / "lmeval_generate_repeats2_samples.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert all(len(d["resps"][0]) == 2 and len(d["filtered_resps"]) == 1 for d in lines)
    mp = write_map(tmp_path / "map.csv", pd.DataFrame(
        [{"item_id": d["doc"]["item_id"], "condition": d["doc"]["condition"]} for d in lines]), "mcq_letter")
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, mp, s, model=MODEL)
        assert got["stored"] == 6 and got["unpaired"] == []
        f = s.frame().sort_values(["condition", "sample"])
    assert list(f["sample"]) == [0, 1] * 3
    assert list(f["response_text"]) == [r for d in sorted(lines, key=lambda d: d["doc"]["condition"])
                                        for r in d["resps"][0]]


def test_a_tie_in_a_real_lm_eval_multiple_choice_line_is_no_answer(tmp_path, design):
    """The real log's four choices all score 0 (the server's echoed log-probs): a tie is
    stored as no answer (a parse failure, counted), not as a confident "A"."""
    _, items, _ = design
    log = REAL / "lmeval_multiple_choice_samples.jsonl"
    d = json.loads(log.read_text().splitlines()[0])
    assert [harness._pair(r, "x") for r in d["resps"]] == [0.0] * 4
    mp = write_map(tmp_path / "map.csv", pd.DataFrame([{"item_id": d["doc"]["item_id"],
                                                         "condition": d["doc"]["condition"]}]), "mcq")
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, mp, s, model=MODEL, options_by_item=items)
        row = s.frame().iloc[0]
    assert got["stored"] == 1 and got["parse_failures"] == 1
    assert row["parsed_answer"] is None and row["parse_status"] == "multiple"
    assert row["letter_logprobs"] == pytest.approx({L: math.log(0.25) for L in "ABCD"})


def _imported_questions(tmp_path, log, items):
    """A real lm-eval log imported as `mcq` answers, read back as notebook 04 reads a store."""
    from medaudit.studies import calibration

    lines = [json.loads(x) for x in log.read_text().splitlines()]
    mp = write_map(tmp_path / "map.csv", pd.DataFrame(
        [{"item_id": d["doc"]["item_id"], "condition": d["doc"]["condition"]} for d in lines]), "mcq")
    with ResponseStore(tmp_path / "s.sqlite") as s:
        harness.import_log("lm-eval", log, mp, s, model=MODEL, options_by_item=items)
        responses = s.frame()
    qt = calibration.questions(responses, items.assign(subset="main"), seed=1, unparsed="incorrect")
    return qt


@pytest.mark.parametrize("log", ["lmeval_multiple_choice_samples.jsonl", "lmeval_generate_repeats2_samples.jsonl"])
def test_a_partial_import_gives_the_complete_tables_and_says_what_is_missing(tmp_path, design, log):
    """Item 7: notebook 04 on the one-question lm-eval import stopped with 'no unit has all the
    conditions of any contrast'; on one item under three conditions its power cell stopped with
    'cannot convert float NaN to integer'. Now: the comparisons that have paired items are
    estimated, the others are named with what they lack, and the power plan says its pilot is too
    small."""
    from medaudit.studies import calibration
    from medaudit.validation import power
    from medaudit.report import tables

    _, items, _ = design
    qt = _imported_questions(tmp_path, REAL / log, items)
    conds = ["base", "+hetero", "+homo"]
    res, pair_res = calibration.compare(qt, "base", conds, 50, 1, pairs=[("+hetero", "+homo")])
    cov = calibration.coverage(qt, conds, pairs=[("+hetero", "+homo")])
    assert list(cov["comparison"]) == ["+hetero vs base", "+homo vs base", "+homo vs +hetero"]
    if log.startswith("lmeval_multiple"):        # base only: nothing to compare, and each gap named
        assert res.empty and {"delta", "p", "mde", "cond_b"} <= set(res.columns)
        assert list(cov["status"]) == ["no answers under +hetero", "no answers under +homo",
                                       "no answers under +hetero, +homo"]
        t = tables.delta_table(res, "accuracy")
        assert t["text"].empty
    else:                                        # one item under all three: every comparison on 1 item
        assert set(res["n_items"]) == {1} and set(cov["paired items"]) == {1} and set(cov["status"]) == {"ok"}
        assert len(tables.delta_table(res, "accuracy")["text"]) == 1
    text = power.plan_report(5, pil=power.pilot_from_questions(qt), source="pilot: the import")
    assert "Power plan" in text
    assert ("fewer than two questions" in text) or ("no pilot" in text)


# -- HELM, constructed cases. These scenario_state.json files follow HELM's source
#    (PerturbationDescription / GenderPerturbation.Description fields, the RequestState fields
#    train_trial_index and reference_index, Request.temperature and prompt); the real logs follow below.

def _helm_state(iid, perturbation, trial=0, text=" B", temperature=0.7, prompt="Q?", **extra):
    return {"instance": {"input": {"text": prompt}, "references": [], "split": "test", "id": iid,
                         "perturbation": perturbation},
            "train_trial_index": trial, "request": {"model": "x/y", "temperature": temperature, "prompt": prompt,
                                                    "num_completions": 1},
            "result": {"success": True, "completions": [{"text": text, "logprob": -0.5}]},
            "num_train_instances": 0, "prompt_truncated": False, **extra}


def _gender(source, target):
    return {"name": "gender", "robustness": False, "fairness": True, "computed_on": "perturbed", "mode": "pronouns",
            "prob": 1.0, "source_class": source, "target_class": target, "bidirectional": False}


def _helm_log(tmp_path, states):
    log = tmp_path / "scenario_state.json"
    log.write_text(json.dumps({"adapter_spec": {"method": "multiple_choice_joint"}, "request_states": states}))
    return log


def test_helm_perturbations_of_one_name_are_told_apart_by_their_fields(tmp_path):
    """HELM's gender perturbations all have the name "gender": two perturbed copies of an
    instance (male→female, female→male) collided on a map keyed by the name. A map keyed by the
    name alone is refused where copies differ, naming the fields that tell them apart; a map with
    perturbation.<field> columns pairs each copy with its own condition."""
    states = [_helm_state("id0", None, text=" A"), _helm_state("id0", _gender("male", "female"), text=" B"),
              _helm_state("id0", _gender("female", "male"), text=" C")]
    log = _helm_log(tmp_path, states)
    by_name = csv_of(tmp_path / "by_name.csv", [
        {"source_id": "id0", "item_id": "medqa4-0309", "condition": "base", "prompt_format": "mcq", "perturbation": ""},
        {"source_id": "id0", "item_id": "medqa4-0309", "condition": "+female", "prompt_format": "mcq",
         "perturbation": "gender"}])
    with ResponseStore(tmp_path / "a.sqlite") as s:
        with pytest.raises(harness.HarnessError, match=r"id0.*gender.*source_class.*target_class"):
            harness.import_log("helm", log, by_name, s, model=MODEL)
        assert s.frame().empty                          # nothing stored from a refused log
    by_fields = csv_of(tmp_path / "by_fields.csv", [
        {"source_id": "id0", "item_id": "medqa4-0309", "condition": c, "prompt_format": "mcq", "perturbation": p,
         "perturbation.source_class": src, "perturbation.target_class": tgt}
        for c, p, src, tgt in [("base", "", "", ""), ("+female", "gender", "male", "female"),
                               ("+male", "gender", "female", "male")]])
    with ResponseStore(tmp_path / "b.sqlite") as s:
        got = harness.import_log("helm", log, by_fields, s, model=MODEL)
        f = s.frame().set_index("condition")
    assert got["stored"] == 3 and got["unpaired"] == []
    assert f.loc["base", "response_text"] == "A" and f.loc["+female", "response_text"] == "B"
    assert f.loc["+male", "response_text"] == "C"
    # a copy whose fields the map does not list is unpaired, named with them
    states.append(_helm_state("id0", _gender("neutral", "female")))
    with ResponseStore(tmp_path / "c.sqlite") as s:
        got = harness.import_log("helm", _helm_log(tmp_path, states), by_fields, s, model=MODEL)
    assert got["unpaired"] == ["id0 (gender[source_class=neutral,target_class=female])"]


def test_helm_deterministic_trials_are_not_k_samples(tmp_path):
    """train_trial_index is a repeat of the prompt with another set of in-context examples; in a
    zero-shot run at temperature 0 the trials are one deterministic answer K times, not K
    samples: refused, saying so."""
    mp = csv_of(tmp_path / "map.csv", [{"source_id": "id0", "item_id": "medqa4-0309", "condition": "base",
                                        "prompt_format": "mcq"}])
    same = [_helm_state("id0", None, trial=t, temperature=0.0) for t in range(3)]
    with ResponseStore(tmp_path / "a.sqlite") as s:
        with pytest.raises(harness.HarnessError, match=r"id0.*3 trials.*temperature 0.*same prompt"):
            harness.import_log("helm", _helm_log(tmp_path, same), mp, s, model=MODEL)
    sampled = [_helm_state("id0", None, trial=t, temperature=0.7) for t in range(3)]
    with ResponseStore(tmp_path / "b.sqlite") as s:
        assert harness.import_log("helm", _helm_log(tmp_path, sampled), mp, s, model=MODEL)["stored"] == 3


def test_helm_separate_reference_adapters_are_refused(tmp_path):
    """multiple_choice_separate_* adapters send one request per option (reference_index set):
    a completion there scores one option, it is not an answer; refused by name."""
    mp = csv_of(tmp_path / "map.csv", [{"source_id": "id0", "item_id": "medqa4-0309", "condition": "base",
                                        "prompt_format": "mcq"}])
    states = [_helm_state("id0", None, reference_index=j) for j in range(4)]
    with ResponseStore(tmp_path / "a.sqlite") as s:
        with pytest.raises(harness.HarnessError, match=r"reference_index.*multiple_choice_joint"):
            harness.import_log("helm", _helm_log(tmp_path, states), mp, s, model=MODEL)


# -- HELM on real HELM logs: crfm-helm 0.5.16 run against the embedded model behind
#    llama_cpp.server (tests/fixtures/harness_logs/PROVENANCE.md; tests/support/helm_roundtrip.sh)

HELM_LOGS = ROOT_TESTS / "fixtures" / "harness_logs"


def test_a_real_helm_gender_run_imports_every_copy_and_lists_the_copies_helm_skipped(tmp_path):
    """The real gender run: 4 items, two GenderPerturbation copies each named "gender"
    (male→female, female→male), the originals included. With perturbation.<field> columns every
    request state is stored under its own condition; the copies HELM skipped because the
    perturbation left the text unchanged are map rows without an answer, listed (not silent)."""
    log = HELM_LOGS / "helm_gender_scenario_state.json"
    states = json.loads(log.read_text())["request_states"]
    assert {s["instance"]["perturbation"]["name"] for s in states if "perturbation" in s["instance"]} == {"gender"}
    with ResponseStore(tmp_path / "a.sqlite") as s:
        got = harness.import_log("helm", log, HELM_LOGS / "helm_gender_map.csv", s, model=MODEL)
        f = s.frame()
    assert got["stored"] == len(states) == 9 and got["unpaired"] == [] and got["parse_failures"] == 0
    assert got["missing"] == ["medqa4-0572 (gender[source_class=female,target_class=male])",
                              "medqa4-0834 (gender[source_class=male,target_class=female])",
                              "medqa4-0858 (gender[source_class=male,target_class=female])"]
    # each copy's answer is the completion of its own request state
    want = {(s["instance"]["id"], "base" if "perturbation" not in s["instance"] else
             {"male": "gender_m2f", "female": "gender_f2m"}[s["instance"]["perturbation"]["source_class"]]):
            s["result"]["completions"][0]["text"] for s in states}
    assert {(r.item_id, r.condition): r.parsed_answer for r in f.itertuples()} == want
    assert set(f["sample"]) == {0}
    # keyed by the name alone, the real copies collide: refused, naming the fields that differ
    with ResponseStore(tmp_path / "b.sqlite") as s:
        with pytest.raises(harness.HarnessError, match=r"medqa4-0390: 2 perturbed copies.*source_class, target_class"):
            harness.import_log("helm", log, HELM_LOGS / "helm_gender_map_name_only.csv", s, model=MODEL)
        assert s.frame().empty


def test_real_helm_trials_at_temperature_0_are_refused_as_k_samples(tmp_path):
    """Real --num-train-trials 2 runs at temperature 0: with one in-context example per trial
    the two trials' prompts differ (HELM draws another example), with one train item they are the
    same prompt. Neither is K samples of one prompt: both refused before anything is stored."""
    same = HELM_LOGS / "helm_trials_same_scenario_state.json"
    diff = HELM_LOGS / "helm_trials_scenario_state.json"
    states = json.loads(diff.read_text())["request_states"]
    assert {s["train_trial_index"] for s in states} == {0, 1}
    assert len({s["request"]["prompt"] for s in states}) == 4                  # four different prompts
    assert {s["request"]["temperature"] for s in states} == {0.0}
    with ResponseStore(tmp_path / "a.sqlite") as s:
        with pytest.raises(harness.HarnessError, match=r"medqa4-0834.*2 trials at temperature 0 with the same prompt"):
            harness.import_log("helm", same, HELM_LOGS / "helm_trials_same_map.csv", s, model=MODEL)
        with pytest.raises(harness.HarnessError, match=r"2 trials at temperature 0 with different in-context "
                                                       r"examples.*different prompts"):
            harness.import_log("helm", diff, HELM_LOGS / "helm_trials_map.csv", s, model=MODEL)
        assert s.frame().empty


def test_a_helm_import_says_when_no_version_is_known(tmp_path, capsys):
    """HELM writes its version nowhere in the run folder: the import says to pass --version."""
    log = HELM_LOGS / "helm_gender_scenario_state.json"
    assert "0.5.16" not in log.read_text() and "version" not in (HELM_LOGS / "helm_gender_run_spec.json").read_text()
    args = ["import", "helm", str(log), "--map", str(HELM_LOGS / "helm_gender_map.csv"), "--model", MODEL,
            "--profile", "smoke"]
    assert harness.main(args + ["--store", str(tmp_path / "a.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "no harness version" in out and "--version" in out
    assert "3 map rows have no answer in the log" in out
    assert harness.main(args + ["--store", str(tmp_path / "b.sqlite"), "--version", "0.5.16"]) == 0
    assert "no harness version" not in capsys.readouterr().out
    prov = [json.loads(x) for x in (tmp_path / "harness_imports.jsonl").read_text().splitlines()]
    assert [p["harness_version"] for p in prov] == ["", "0.5.16"]


# -- the design exported as it runs

def _design_samples(design, k=3):
    from medaudit.llm import GenParams

    variants, items, _ = design
    return mcq.plan(variants, items, model="export", backend="export", model_id="export", k=k, seed=7,
                    gen=GenParams(0.7, 0.9, 16)), items


def test_the_design_export_is_the_study_as_it_runs(tmp_path, design):
    """One document per sample: our chat prompt for its own option order, its gold as shown,
    the samples' sampling settings, repeats 1; the map carries sample and option order."""
    import yaml as _yaml

    samples, items = _design_samples(design)
    files = harness.export_design(samples, items, tmp_path / "x")
    names = [f.name for f in files]
    assert names == ["medaudit_mcq.yaml", "medaudit_mcq.jsonl", "medaudit_mcq_inspect.py",
                     "medaudit_mcq_inspect.jsonl", "medaudit_mcq_map.csv"]        # the bracket prompt: no system turn
    task = _yaml.safe_load(files[0].read_text())
    assert task["output_type"] == "generate_until" and task["repeats"] == 1
    assert task["generation_kwargs"] == {"until": [], "do_sample": True, "temperature": 0.7, "top_p": 0.9,
                                         "max_gen_toks": 16}
    docs = [json.loads(x) for x in files[1].read_text().splitlines()]
    gold = dict(zip(items["item_id"], items["answer_idx"]))
    assert len(docs) == len(samples) == 9 * 3
    for d, smp in zip(docs, samples):
        assert d["prompt"] == smp.request.messages[-1][1]          # the user turn our backends send
        assert smp.perm["ABCD".index(d["target"])] == gold[smp.item_id]
    assert len({d["permutation"] for d in docs}) > 1               # the option orders differ per sample
    m = pd.read_csv(files[-1], dtype=str)
    assert list(m.columns) == ["source_id", "item_id", "condition", "prompt_format", "sample", "permutation"]
    assert set(m["prompt_format"]) == {"mcq"}
    tree = ast.parse(files[2].read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "medaudit_mcq" for n in tree.body)
    assert "generate()" in files[2].read_text() and "epochs=1" in files[2].read_text()


def test_a_design_log_comes_back_as_every_sample_through_the_option_orders(tmp_path, design):
    """An lm-eval generate_until log (the real format: resps [[text]], filtered_resps [text])
    answering each document with its target *as shown* imports as every sample, read by the
    project's bracket parser and mapped back through its option order to the gold letter; a
    log with two responses for one sample is refused."""
    samples, items = _design_samples(design)
    files = harness.export_design(samples, items, tmp_path / "x")
    docs = [json.loads(x) for x in files[1].read_text().splitlines()]
    lines = [{"doc_id": i, "doc": d, "target": d["target"], "arguments": {"gen_args_0": {"arg_0": d["prompt"]}},
              "resps": [[f" [{d['target']}]"]], "filtered_resps": [f" [{d['target']}]"], "filter": "none",
              "metrics": ["exact_match"]} for i, d in enumerate(docs)]
    log = tmp_path / "samples_medaudit_mcq.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, files[-1], s, model=MODEL, options_by_item=items)
        f = s.frame()
    assert got["stored"] == 27 and got["parse_failures"] == 0 and got["unpaired"] == []
    gold = dict(zip(items["item_id"], items["answer_idx"]))
    assert (f["parsed_answer"] == f["item_id"].map(gold)).all()    # shown letters mapped back to the originals
    assert sorted(zip(f["item_id"], f["condition"], f["sample"], f["permutation"])) == sorted(
        (smp.item_id, smp.condition, smp.k, smp.perm) for smp in samples)
    lines[0]["resps"] = [[" [A]", " [B]"]]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with ResponseStore(tmp_path / "t.sqlite") as s:
        with pytest.raises(harness.HarnessError, match="more than one response for one sample"):
            harness.import_log("lm-eval", log, files[-1], s, model=MODEL, options_by_item=items)


def test_a_real_inspect_run_of_the_design_export_comes_back_as_every_sample(tmp_path, design):
    """inspect-ai 0.3.285 ran the exported design (27 samples, each its own option order) against
    the embedded model: the log imports as 27 samples, each read by the project's bracket parser
    and mapped back through its option order, and our correctness agrees with Inspect's own
    scorer (on the letters as shown) on every sample. The samples are read from the converted log
    (_samples.json; PROVENANCE.md) as read_eval_log gives them."""
    _, items, _ = design
    real = json.loads((REAL / "inspect_design_export_samples.json").read_text())
    log = SimpleNamespace(eval=SimpleNamespace(packages=real["eval"]["packages"]), samples=[
        SimpleNamespace(id=s["id"], epoch=s["epoch"], output=SimpleNamespace(completion=s["completion"]))
        for s in real["samples"]])
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("inspect", REAL / "inspect_design_export.eval", REAL / "inspect_design_export_map.csv",
                                 s, model=MODEL, options_by_item=items, log=log)
        f = s.frame()
    assert got["stored"] == 27 and got["unpaired"] == [] and got["parse_failures"] == 0
    m = pd.read_csv(REAL / "inspect_design_export_map.csv", dtype=str).set_index("source_id")
    gold = dict(zip(items["item_id"], items["answer_idx"]))
    by_key = f.set_index(["item_id", "condition", "sample"])
    agree = 0
    for smp in real["samples"]:
        row = m.loc[str(smp["id"])]
        ours = by_key.loc[(row["item_id"], row["condition"], int(row["sample"]))]
        assert ours["permutation"] == row["permutation"]
        agree += (ours["parsed_answer"] == gold[row["item_id"]]) == (smp["score"] == "C")
    assert agree == 27
    assert sum(s["score"] == "C" for s in real["samples"]) == round(real["results"]["accuracy"] * 27) == 8


def test_a_real_lm_eval_run_of_the_design_export_comes_back_as_every_sample(tmp_path, design):
    """lm-eval 0.4.13 ran the exported design with --apply_chat_template against the embedded
    model: it sent each document's chat messages exactly (27/27), and its log imports as all 27
    samples, read by the project's parser through each option order (7 correct: the 7 replies
    that bracket the target as shown)."""
    _, items, _ = design
    log = REAL / "lmeval_design_export_samples.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert all(json.loads(x["arguments"]["gen_args_0"]["arg_0"][0]) == x["doc"]["messages"] for x in lines)
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, REAL / "inspect_design_export_map.csv", s, model=MODEL,
                                 options_by_item=items)
        f = s.frame()
    assert got["stored"] == 27 and got["parse_failures"] == 0 and got["unpaired"] == []
    gold = dict(zip(items["item_id"], items["answer_idx"]))
    shown_right = sum(f"[{x['target']}]" in x["resps"][0][0] for x in lines)
    assert int((f["parsed_answer"] == f["item_id"].map(gold)).sum()) == shown_right == 7
    m = pd.read_csv(REAL / "inspect_design_export_map.csv", dtype=str)
    assert sorted(zip(f["item_id"], f["condition"], f["sample"].astype(str), f["permutation"])) == sorted(
        zip(m["item_id"], m["condition"], m["sample"], m["permutation"]))


# -- what the harnesses themselves report about our exports equals our accuracy

def _edge_replies(target: str) -> list[str]:
    """Replies that tell the rules apart, for a document whose target (as shown) is ``target``:
    the bracket, lower case, two letters, the same letter twice, another letter with blanks, the
    bare letter, nothing, a sentence around the bracket."""
    other = "B" if target != "B" else "C"
    return [f"[{target}]", f"[{target.lower()}]", f"[{target}] or [{other}]", f"[{target}] and again [{target}]",
            f"[ {other} ]", target, "", f"The answer is [ {target} ]."]


def _lm_eval_filter(task: dict):
    """The exported task's filter_list as lm-eval 0.4.13 applies it to one reply
    (lm_eval/filters/extraction.py RegexFilter: re.findall, the group_select-th match, a tuple
    reduced to its first non-empty group, stripped; the fallback where nothing matches; then
    take_first). No filter_list: lm-eval's default, the reply as it is."""
    import re

    flist = task.get("filter_list") or []
    if not flist:
        return lambda text: text
    (f,) = flist
    steps = [s["function"] for s in f["filter"]]
    assert steps == ["regex", "take_first"], steps
    rx = f["filter"][0]
    pat, sel, fallback = re.compile(rx["regex_pattern"]), rx.get("group_select", 0), rx.get("fallback", "[invalid]")

    def apply(text):
        m = pat.findall(text)
        if not m:
            return fallback
        m = m[sel]
        if isinstance(m, tuple):
            m = next((x for x in m if x), fallback)
        return m.strip()
    return apply


def test_lm_evals_exact_match_on_the_design_export_is_our_accuracy(tmp_path, design):
    """The design export's task compared the whole reply "[B]" with the target "B":
    lm-eval reported exact_match 0 on the real run where 7 of 27 replies were right. The task
    now takes the letter out with a regex filter that is our parser's rule: on the 27 real
    replies lm-eval's exact_match is our 7/27, and on replies that tell rules apart (lower case,
    two letters, a bare letter) it counts exactly what our parser counts."""
    import yaml as _yaml

    from medaudit import parse

    samples, items = _design_samples(design)
    files = harness.export_design(samples, items, tmp_path / "x")
    task = _yaml.safe_load(files[0].read_text())
    lm_eval_reads = _lm_eval_filter(task)
    assert task["metric_list"] == [{"metric": "exact_match"}]
    # the real run's replies (lm-eval 0.4.13, PROVENANCE.md): lm-eval said 0, our import 7/27
    lines = [json.loads(x) for x in (REAL / "lmeval_design_export_samples.jsonl").read_text().splitlines()]
    assert harness.reported_accuracy("lm-eval", REAL / "lmeval_design_export_results.json") == (0.0, 27)
    with ResponseStore(tmp_path / "s.sqlite") as s:
        harness.import_log("lm-eval", REAL / "lmeval_design_export_samples.jsonl",
                           REAL / "inspect_design_export_map.csv", s, model=MODEL, options_by_item=items)
        ours = harness.our_accuracy(s, MODEL, items)
    theirs = sum(lm_eval_reads(x["resps"][0][0]) == x["target"] for x in lines)
    assert ours == (7 / 27, 27) and theirs == 7
    # replies that tell the rules apart: lm-eval's exact match is our parser's "right" on every one
    for target in "ABCD":
        for reply in _edge_replies(target):
            letter, _ = parse.parse_bracket_letter(reply)
            assert (lm_eval_reads(reply) == target) == (letter == target), (target, reply)


def _inspect_scorer(task_file: Path):
    """The exported Inspect task's scorer as inspect-ai 0.3.285's pattern() scores one reply
    (inspect_ai/scorer/_pattern.py: re.search with IGNORECASE unless ignore_case=False, the first
    group that matches the target, compared in lower case when ignoring case)."""
    import re

    tree = ast.parse(task_file.read_text())
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              for t in n.targets if isinstance(t, ast.Name)}
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "pattern")
    arg = call.args[0]
    pat = arg.value if isinstance(arg, ast.Constant) else consts[arg.id]
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    ignore_case = kw.get("ignore_case", True)

    def correct(text, target):
        m = re.search(pat, text, re.IGNORECASE if ignore_case else 0)
        if not m:
            return False
        norm = (lambda x: x.lower()) if ignore_case else (lambda x: x)
        return any(isinstance(g, str) and norm(g) == norm(target) for g in m.groups())
    return correct


def test_inspects_scorer_on_the_design_export_is_our_parsers_rule(tmp_path, design):
    """The exported Inspect scorer ignored case and took the first bracket, so
    "[b]" and "[B] or [C]" scored right where our parser reads no answer. Now one rule: Inspect's
    pattern scorer, case-sensitive, with the parser's rule as its expression, is right exactly
    where our parser reads the target. (Through the real Inspect: test_harness_tools.py, run by
    make harness-check.)"""
    from medaudit import parse

    samples, items = _design_samples(design)
    files = harness.export_design(samples, items, tmp_path / "x")
    inspect_says = _inspect_scorer(files[2])
    for target in "ABCD":
        for reply in _edge_replies(target):
            letter, _ = parse.parse_bracket_letter(reply)
            assert inspect_says(reply, target) == (letter == target), (target, reply)
    # the real run's 27 replies: Inspect's scores there (8/27) agreed with ours; they still do
    real = json.loads((REAL / "inspect_design_export_samples.json").read_text())
    assert [inspect_says(s["completion"], s["target"]) for s in real["samples"]] == [
        s["score"] == "C" for s in real["samples"]]
    assert sum(s["score"] == "C" for s in real["samples"]) == 8


def test_the_parsers_rules_as_one_expression_read_what_the_parsers_read():
    """parse.pattern_of: the bracket, "answer is" and one-letter rules as one regular expression
    (findall's first match and search's group 1) give the parser's letter on every reply of a
    seeded random sample of short replies built from the characters that matter, and none where
    the parser reads none."""
    import random
    import re

    from medaudit import parse

    rng = random.Random(55)
    bits = ["[", "]", " ", "A", "B", "C", "D", "E", "a", "b", "\n", "x", "answer is", "The Answer is ", "(", "*", "."]
    for parser, letters in [(parse.parse_bracket_letter, "ABCD"), (parse.parse_answer_is, "ABCDE"),
                            (parse.parse_one_letter, "ABCDE")]:
        rx = re.compile(parse.pattern_of(parser, letters))
        for _ in range(20000):
            text = "".join(rng.choice(bits) for _ in range(rng.randint(0, 8)))
            want, _ = parser(text, letters)
            found = rx.findall(text)
            m = rx.search(text)
            assert (found[0] if found else None) == (m.group(1) if m else None) == want, (parser.__name__, text)
    assert parse.pattern_of(parse.parse_index_letter, "ABCD") is None


def test_a_format_without_one_expression_is_not_exported_as_a_design(tmp_path, design):
    """parse_index_letter reads in two steps, which no one regular expression reproduces: its
    export is refused, naming the formats that can be exported, rather than letting the
    harnesses score other replies right than we do."""
    from medaudit.llm import GenParams

    variants, items, _ = design
    samples = mcq.plan(variants, items, model="export", backend="export", model_id="export", k=1, seed=7,
                       gen=GenParams(0.7, 0.9, 16), prompt_format="mcq_letter")
    with pytest.raises(harness.HarnessError, match=r"'mcq_letter' is read by parse_index_letter.*'mcq'"):
        harness.export_design(samples, items, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_export_form_harness_writes_one_map_per_format(tmp_path, design, monkeypatch, capsys):
    """`export --form harness` wrote the lm-eval map, then the Inspect pass wrote
    over it, so every row said mcq_inspect and a real lm-eval log-likelihood log imported with it
    was stored as mcq_inspect. Now each harness has its own map, and the real log is stored as
    mcq_lmeval_loglik."""
    from medaudit.prep import data

    variants, items, _ = design
    frames = {"items": items, "psych_items": items.iloc[0:0],
              "variants": variants.assign(ok=True, subset="main", method="standalone")}
    monkeypatch.setattr(data, "load_frame", lambda profile, name: frames[name])
    out = tmp_path / "harness"
    assert harness.main(["export", "--profile", "smoke", "--out", str(out), "--form", "harness", "--epochs", "2"]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == len(set(printed))                       # no file written twice
    lm_map = pd.read_csv(out / "medaudit_mcq_map.csv", dtype=str)
    in_map = pd.read_csv(out / "medaudit_mcq_inspect_map.csv", dtype=str)
    assert set(lm_map["prompt_format"]) == {harness.LOGLIK_FORMAT} and set(in_map["prompt_format"]) == {
        harness.INSPECT_FORMAT}
    assert len(lm_map) == len(in_map) == 9
    # the real lm-eval log-likelihood log (its doc 0 is the map's row 0) is stored under lm-eval's format
    log = REAL / "lmeval_multiple_choice_samples.jsonl"
    doc = json.loads(log.read_text().splitlines()[0])
    assert (doc["doc_id"], doc["doc"]["item_id"], doc["doc"]["condition"]) == (
        0, lm_map["item_id"][0], lm_map["condition"][0])
    with ResponseStore(tmp_path / "s.sqlite") as s:
        got = harness.import_log("lm-eval", log, out / "medaudit_mcq_map.csv", s, model=MODEL, options_by_item=items)
        f = s.frame()
    assert got["stored"] == 1 and list(f["prompt_format"]) == [harness.LOGLIK_FORMAT]
    # and an Inspect log of the harness form comes back under Inspect's
    path = tmp_path / "harness-form.eval"
    path.write_bytes(b"constructed")
    with ResponseStore(tmp_path / "t.sqlite") as s:
        got = harness.import_log("inspect", path, out / "medaudit_mcq_inspect_map.csv", s, model=MODEL,
                                 options_by_item=items, log=inspect_log(design[2], epochs=2))
        assert got["stored"] == 18 and set(s.frame()["prompt_format"]) == {harness.INSPECT_FORMAT}


def test_agree_says_when_a_harnesss_own_accuracy_is_not_ours(tmp_path, design, monkeypatch, capsys):
    """`harness agree` (what make harness-check asserts): the real lm-eval run of the old export
    reported exact_match 0 where our parser, on the same 27 replies, reads 7 right: exit 1, both
    numbers said; our accuracy against itself (a results file saying 7/27): exit 0."""
    from medaudit.prep import data

    _, items, _ = design
    monkeypatch.setattr(data, "load_frame",
                        lambda profile, name: {"items": items, "psych_items": items.iloc[0:0]}[name])
    store = tmp_path / "s.sqlite"
    with ResponseStore(store) as s:
        harness.import_log("lm-eval", REAL / "lmeval_design_export_samples.jsonl",
                           REAL / "inspect_design_export_map.csv",
                           s, model=MODEL, options_by_item=items)
    args = ["--model", MODEL, "--profile", "smoke", "--store", str(store)]
    assert harness.main(["agree", "lm-eval", str(REAL / "lmeval_design_export_results.json"), *args]) == 1
    out = capsys.readouterr().out
    assert "lm-eval reports accuracy 0.0000 on 27 samples; our parser 0.2593 on 27 (7 correct): NOT equal" in out
    res = json.loads((REAL / "lmeval_design_export_results.json").read_text())
    res["results"]["medaudit_mcq"][f"exact_match,{harness.FILTER}"] = 7 / 27
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert harness.main(["agree", "lm-eval", str(tmp_path / "results.json"), *args]) == 0
    assert capsys.readouterr().out.rstrip().endswith(": equal")
    with pytest.raises(harness.HarnessError, match="no answers of model 'nobody'"):
        with ResponseStore(store) as s:
            harness.our_accuracy(s, "nobody", items)


def test_export_and_agree_read_the_run_their_overrides_name(tmp_path, design, monkeypatch, capsys):
    """The design export read the default run's variants and planned with the profile's own
    parameters whatever the run: `-p k_samples 2` exported K=3 samples of the default run's
    variants. Now the overrides name the run as the runner names it: its own variants (a run that
    reran 02 wrote them) and its parameters; without overrides, the default run's."""
    from medaudit.prep import data
    from medaudit import paths, runner
    from support.sandbox import compendium_root

    variants, items, _ = design
    compendium_root(tmp_path / "root")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path / "root"))
    monkeypatch.delenv(paths.RUN_ENV, raising=False)
    full = variants.assign(ok=True, subset="main", method="standalone")
    for name, df in (("items", items), ("psych_items", items.iloc[0:0]), ("variants", full)):
        data.save_frame(df, "smoke", name)
    run = runner.resolve_run("smoke", [("-p", ["k_samples", "2"])])[0]
    assert run.startswith("k_samples-2.")
    with paths.in_run(run):                              # the run's own variants: the base condition only
        data.save_frame(full[full["condition"] == "base"], "smoke", "variants")
    assert harness.main(["export", "--profile", "smoke", "--out", str(tmp_path / "default")]) == 0
    assert harness.main(["export", "--profile", "smoke", "--out", str(tmp_path / "run"), "-p", "k_samples", "2"]) == 0
    capsys.readouterr()
    by_default = pd.read_csv(tmp_path / "default" / "medaudit_mcq_map.csv", dtype=str)
    in_run = pd.read_csv(tmp_path / "run" / "medaudit_mcq_map.csv", dtype=str)
    assert len(by_default) == len(full) * 3 and set(by_default["condition"]) == set(full["condition"])
    assert len(in_run) == 3 * 2 and set(in_run["condition"]) == {"base"}
    assert sorted(in_run["sample"].unique()) == ["0", "1"]
    assert paths.RUN_ENV not in os.environ                       # the command's run ends with it
    assert harness.main(["export", "--profile", "smoke", "--out", str(tmp_path / "x"), "--run", "../up"]) == 2
    assert "run name '../up'" in capsys.readouterr().err
