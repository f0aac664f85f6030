"""The released answers' command line round trips (add, remove, add again).

* ``add`` → ``remove`` (a model, or one arm with ``--strategy``) leaves
  ``params/released.yaml`` as it was, byte for byte, and notebook 08's
  released-answer tables (computed here with the library functions the
  notebook calls, in its order) byte-identical; so does ``remove`` → ``add``
  again, whose rows used to move to the end (the tables followed the order
  of the store's rows and of ``params``; now :func:`released.model_key`).
* ``list`` shows each model's arms; an arm's Summary file is read (checked
  against the arm's own counts); ``add`` with a paper row name compares the
  file's Table 3 numbers with the paper's row and warns when far.

The release here is the shipped FairMedQA one cut to its first vignettes
(with its own SHA256SUMS), so that every step takes seconds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from medaudit.prep import amqa
from medaudit.llm import mitigations
from medaudit import released
from medaudit.stats import scoring
from medaudit.studies.fairmedqa import answers as fq_answers
from medaudit.studies.fairmedqa import arms as fq_arms
from medaudit.studies.fairmedqa import config as fq_config
from medaudit.studies.fairmedqa import metrics as fq_metrics
from medaudit.released import cli
from medaudit.llm import ResponseStore

ROOT = Path(__file__).resolve().parents[1]
AMQA = ROOT / "data" / "raw" / "released_answers" / "fairmedqa_amqa"
N = 40                      # vignettes kept of the 801


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A compendium of its own (params and the released answers), its
    FairMedQA answer files cut to the first N vignettes."""
    r = tmp_path / "root"
    shutil.copytree(ROOT / "params", r / "params")
    rel = r / "data" / "raw" / "released_answers"
    shutil.copytree(ROOT / "data" / "raw" / "released_answers", rel)
    sums = []
    for f in sorted((rel / "fairmedqa_amqa").iterdir()):
        if "_Answer_" in f.name:
            f.write_text("".join(f.read_text().splitlines(keepends=True)[:N]))
        sums.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  fairmedqa_amqa/{f.name}\n")
    old = [ln for ln in (rel / "SHA256SUMS").read_text().splitlines(keepends=True) if "fairmedqa_amqa/" not in ln]
    (rel / "SHA256SUMS").write_text("".join(old + sums))
    monkeypatch.setenv("MEDAUDIT_ROOT", str(r))
    return r


def _tables(store: ResponseStore, full: bool = False) -> dict[str, str]:
    """Notebook 08's released-answer tables (cells 4, 11-18, stored answers
    only) as the CSV text they are saved as. Without ``full``: the question
    tables every 08 table is computed from (plain answers and arms, in the
    notebook's order) and the cheap tables (accuracy, the check against the
    authors' Summary counts, the arms' artefact check); ``full`` adds the
    pair, between-model and arm tables (about 15 s on a loaded machine)."""
    released.import_release("fairmedqa_amqa", store)
    fcfg = fq_config.load_config()
    vig = released.release_items("fairmedqa_amqa")
    frame = store.frame()
    answers = fq_answers.stored_answers(frame, vig, fcfg, models=[])
    answers = released.in_order(amqa.extract(answers, vig, "strict"), "fairmedqa_amqa")
    qt = scoring.question_table(answers, vig, units=("model",))
    arms = released.in_order(fq_arms.arm_answers(frame, vig, fcfg, ["cot2", "cot1"], models=[]),
                             "fairmedqa_amqa", column="arm_of", group="strategy")
    check = fq_arms.arm_artefacts(answers, arms, vig, mitigations.default().artefact_alpha)
    arms = fq_arms.flag_arms(arms, check)
    aqt = pd.concat([qt, scoring.question_table(amqa.extract(arms, vig, "strict"), vig, units=("model",))],
                    ignore_index=True)
    acc = fq_metrics.accuracy_table(qt, conditions=fcfg.conditions(), unparsed="drop")
    out = {"question table": aqt, "08_fig3_accuracy": acc.round(2), "08_arm_artefacts": check,
           "08_released_check": fq_answers.released_check(acc, released.authors_accuracy("fairmedqa_amqa"))}
    if full:
        out["08_table3_pairs"] = fq_metrics.pair_table(qt, fq_config.all_pairs(fcfg), counting="paper",
                                                      mcnemar="exact", unparsed="drop", margin=3.0).round(4)
        present = list(pd.unique(qt["model"]))
        reference = next(m for m in present if m in released.models("fairmedqa_amqa"))
        out["08_between_models"] = fq_metrics.between_models(qt, reference, list(amqa.FIELDS.values()),
                                                            mcnemar="exact", unparsed="drop", margin=3.0).round(4)
        apairs = fq_metrics.pair_table(aqt, fq_config.all_pairs(fcfg), counting="paper", mcnemar="exact",
                                      unparsed="drop")
        bias, accs = fq_arms.arm_tables(aqt, apairs, arms, fcfg, mcnemar="exact", unparsed="drop", margin=3.0)
        out["08_arm_bias"], out["08_arm_accuracy"] = bias.round(2), accs.round(4)
    return {k: v.to_csv(index=False) for k, v in out.items()}


def _state(root: Path) -> bytes:
    return (root / "params" / "released.yaml").read_bytes()


def _arm_file(folder: Path, source: str, part: str, strategy: str, flip_every: int = 3) -> Path:
    """An arm's answer file built from a plain one: every ``flip_every``-th
    vignette answered "A" under every text."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, line in enumerate((AMQA / f"AMQA_Benchmark_Answer_{source}_no_cot.jsonl").read_text().splitlines()[:N]):
        rec = json.loads(line)
        out.append(json.dumps({k: ("A" if k.startswith("test_model_answer_") and i % flip_every == 0 else v)
                               for k, v in rec.items()}))
    path = folder / f"AMQA_Benchmark_Answer_{part}_{strategy}.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)])   # slow: notebook 08's
def test_remove_then_add_again_gives_the_same_tables_byte_for_byte(root, tmp_path, full):   # pair and arm tables
    """Claude-3.7-Sonnet (plain answers and its cot2 arm)
    removed and added back: before the fix its rows moved to the end of
    08_fig3_accuracy, 08_table3_pairs, 08_released_check and
    08_between_models (the order of the store's rows and of params)."""
    store = ResponseStore(tmp_path / "s.sqlite")
    before = _tables(store, full)
    rel = root / "data" / "raw" / "released_answers" / "fairmedqa_amqa"
    cli.remove("fairmedqa_amqa", "Claude-3.7-Sonnet", stores=[tmp_path / "s.sqlite"])
    assert "Claude-3.7-Sonnet" not in _tables(store)["08_fig3_accuracy"]
    cli.add([rel / "AMQA_Benchmark_Answer_claude_no_cot.jsonl",
                  rel / "AMQA_Benchmark_Summary_claude_no_cot.jsonl"],
                  "fairmedqa_amqa", "Claude-3.7-Sonnet")
    cli.add_arm([rel / "AMQA_Benchmark_Answer_claude_cot2.jsonl"], "fairmedqa_amqa", "Claude-3.7-Sonnet", "cot2")
    after = _tables(store, full)
    assert [k for k in before if before[k] != after[k]] == []
    # the paper's row order: GPT-4.1, Claude-3.7-Sonnet, Qwen-2.5, DeepSeek-V3 (seed 004 Table 3)
    assert list(pd.unique(pd.read_csv(pd.io.common.StringIO(after["08_fig3_accuracy"]))["model"])) == [
        "GPT-4.1", "Claude-3.7-Sonnet", "Qwen-2.5", "DeepSeek-V3"]


def test_add_then_remove_an_arm_restores_params_store_and_tables(root, tmp_path):
    """``remove --strategy`` takes one arm away: an arm
    of a strategy the file had no entry for (cot1: the entry is written by
    add, and removed again) and an arm of the listed cot2; params, the
    store and the tables are as before the add, the plain answers stay."""
    store = ResponseStore(tmp_path / "s.sqlite")
    before, params, rows = _tables(store), _state(root), store.count()
    for strategy in ("cot1", "cot2"):
        f = _arm_file(tmp_path / strategy, "deepseek", "deepseek", strategy)
        cli.add_arm([f], "fairmedqa_amqa", "DeepSeek-V3", strategy)
        assert f"DeepSeek-V3 · {strategy}" in _tables(store)["question table"]
        assert store.count() == rows + N * 8
        res = cli.remove_arm("fairmedqa_amqa", "DeepSeek-V3", strategy, stores=[tmp_path / "s.sqlite"])
        assert res["stores"][str(tmp_path / "s.sqlite")] == N * 8
        assert _state(root) == params, strategy
        assert store.count() == rows
        after = _tables(store)
        assert [k for k in before if before[k] != after[k]] == [], strategy
    with pytest.raises(released.ReleaseError, match="has no model named 'DeepSeek-V3'"):
        cli.remove_arm("fairmedqa_amqa", "DeepSeek-V3", "cot2", stores=[])
    with pytest.raises(released.ReleaseError, match="no arm 'cot1'"):
        cli.remove_arm("fairmedqa_amqa", "DeepSeek-V3", "cot1", stores=[])


def test_add_then_remove_a_new_model_with_an_arm_restores_everything(root, tmp_path):
    """A model the paper does not have, with an arm of a new strategy:
    removing the model takes its arm's written entry with it."""
    store = ResponseStore(tmp_path / "s.sqlite")
    before, params, rows = _tables(store), _state(root), store.count()
    new = tmp_path / "new"
    new.mkdir()
    src = (AMQA / "AMQA_Benchmark_Answer_qwen_no_cot.jsonl").read_text().splitlines()[:N]
    (new / "AMQA_Benchmark_Answer_madeup_no_cot.jsonl").write_text("\n".join(src) + "\n")
    cli.add([new / "AMQA_Benchmark_Answer_madeup_no_cot.jsonl"], "fairmedqa_amqa", "Made-Up-1",
                  not_in_paper=True)
    cli.add_arm([_arm_file(tmp_path / "arm", "qwen", "madeup", "cot1")], "fairmedqa_amqa", "Made-Up-1", "cot1")
    mid = _tables(store)
    assert "Made-Up-1 · cot1" in mid["question table"] and "Made-Up-1" in mid["08_fig3_accuracy"]
    cli.remove("fairmedqa_amqa", "Made-Up-1", stores=[tmp_path / "s.sqlite"])
    assert _state(root) == params and store.count() == rows
    after = _tables(store)
    assert [k for k in before if before[k] != after[k]] == []
