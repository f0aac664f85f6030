"""What ``python -m medaudit.released`` (:mod:`medaudit.released.cli`) shows and checks.

* ``list`` shows each model's plain answers and arms (strategy, file,
  rows) and whether each file's counts equal the authors' Summary.
* An arm's Summary file is read: its counts are checked against the arm's
  own answers, and a mismatch is said.
* ``add`` with a paper row name compares the file's Table 3 numbers (CFR,
  AD per pair) with the paper's row and warns when far; the rule's
  false-alarm rate is checked by simulation.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from medaudit.stats import distance
from medaudit.released import cli

ROOT = Path(__file__).resolve().parents[1]
AMQA = ROOT / "data" / "raw" / "released_answers" / "fairmedqa_amqa"


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A compendium of its own: params and the shipped released answers."""
    r = tmp_path / "root"
    shutil.copytree(ROOT / "params", r / "params")
    shutil.copytree(ROOT / "data" / "raw" / "released_answers", r / "data" / "raw" / "released_answers")
    for d in (ROOT / "data" / "raw").iterdir():             # the questions files, read only
        if d.name != "released_answers":
            (r / "data" / "raw" / d.name).symlink_to(d)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(r))
    return r


def test_list_shows_each_models_arms_with_file_rows_and_summary(root, capsys):
    """`list` shows more than the model names (it once showed only those)."""
    t = cli.listing("fairmedqa_amqa")
    arm = t[(t["model"] == "GPT-4.1") & (t["strategy"] == "cot2")].iloc[0]
    assert arm["file"] == "AMQA_Benchmark_Answer_openai_cot2.jsonl" and arm["rows"] == 801
    assert arm["summary"] == "equal in all 8 texts"
    assert list(t["model"] + " " + t["strategy"]) == [
        "GPT-4.1 none", "GPT-4.1 cot2", "Claude-3.7-Sonnet none", "Claude-3.7-Sonnet cot2", "Qwen-2.5 none",
        "DeepSeek-V3 none"]                                   # the paper's row order, each model's arms after it
    assert set(t["summary"]) == {"equal in all 8 texts"}     # every shipped Summary equals its answers
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "AMQA_Benchmark_Answer_claude_cot2.jsonl" in out and "Final_GPT5.2_short_augment_answers.json" in out


def _deepseek_arm(folder: Path, change_summary: bool) -> None:
    """DeepSeek-V3's plain answers and Summary renamed as a cot2 arm; the
    Summary's count of Black variants changed when asked."""
    folder.mkdir()
    shutil.copy(AMQA / "AMQA_Benchmark_Answer_deepseek_no_cot.jsonl",
                folder / "AMQA_Benchmark_Answer_deepseek_cot2.jsonl")
    lines = [json.loads(ln) for ln in (AMQA / "AMQA_Benchmark_Summary_deepseek_no_cot.jsonl").read_text().splitlines()]
    if change_summary:
        rec = next(r for r in lines if r["question_type"] == "black_question")
        rec["correct_num"] += 7
    (folder / "AMQA_Benchmark_Summary_deepseek_cot2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_an_arms_summary_is_read_and_checked_against_its_answers(root, tmp_path):
    """The arm's Summary (once copied and never read) is read:
    its counts are compared with the arm's answers (the authors' rule:
    "Unknown" counts wrong) and a difference is said, naming the text."""
    _deepseek_arm(tmp_path / "same", change_summary=False)
    res = cli.add_arm([tmp_path / "same"], "fairmedqa_amqa", "DeepSeek-V3", "cot2", dry_run=True)
    assert bool(res["summary check"]["equal"].all()) and len(res["summary check"]) == 8
    assert not [n for n in res["notes"] if "SUMMARY" in n]
    _deepseek_arm(tmp_path / "other", change_summary=True)
    res = cli.add_arm([tmp_path / "other"], "fairmedqa_amqa", "DeepSeek-V3", "cot2", dry_run=True)
    check = res["summary check"].set_index("condition")
    assert list(check.index[~check["equal"]]) == ["race:Black"]
    assert check.loc["race:Black", "authors correct"] == check.loc["race:Black", "correct"] + 7
    note = next(n for n in res["notes"] if "SUMMARY MISMATCH" in n)
    assert "in 1 of 8 texts" in note and "race:Black" in note


def test_a_paper_row_name_is_compared_with_the_papers_row(root, tmp_path, capsys):
    """A file added under a paper row's name whose
    numbers are far from that row (here Claude-3.7-Sonnet's answers named
    GPT-4.1-Mini: White vs Black CFR 0.8315 vs the paper's 0.7703) is
    warned about; the model's own file (GPT-4.1's, re-added) is at distance 0."""
    mini = tmp_path / "mini"
    mini.mkdir()
    shutil.copy(AMQA / "AMQA_Benchmark_Answer_claude_no_cot.jsonl", mini / "AMQA_Benchmark_Answer_mini_no_cot.jsonl")
    res = cli.add([mini], "fairmedqa_amqa", "GPT-4.1-Mini", dry_run=True)
    comp = res["paper"].set_index(["seed_pair", "measure"])
    assert len(comp) == 6
    wb = comp.loc[("White vs Black", "CFR")]
    assert round(wb["ours"], 4) == 0.8315 and wb["paper"] == 0.7703 and wb["far"]
    assert any("WARNING: FAR FROM THE PAPER'S ROW 'GPT-4.1-Mini'" in n for n in res["notes"])
    assert cli.main(["add", str(mini), "--study", "fairmedqa_amqa", "--name", "GPT-4.1-Mini", "--dry-run"]) == 0
    assert "White vs Black CFR: ours 0.8315, paper 0.7703, difference +0.0612" in capsys.readouterr().out
    # the model the paper measured, its own file: equal to the fourth decimal, not far
    cli.remove("fairmedqa_amqa", "GPT-4.1", stores=[])
    res = cli.add([AMQA / "AMQA_Benchmark_Answer_openai_no_cot.jsonl"], "fairmedqa_amqa", "GPT-4.1", dry_run=True)
    assert (res["paper"]["difference"].abs() < 5e-5).all() and not res["paper"]["far"].any()
    assert any("close to the paper's row 'GPT-4.1' in all 6 cells" in n for n in res["notes"])
    # a model the paper does not have is not compared
    res = cli.add([mini], "fairmedqa_amqa", "Mini-Other", dry_run=True, not_in_paper=True)
    assert res["paper"] is None


def test_far_calls_a_rerun_of_the_same_model_far_in_at_most_five_percent():
    """The "far" rule by simulation: two independent runs of one model on
    801 vignettes (each member correct with its probability, a wrong answer
    one of the three other letters), the second compared with the first as
    if the first were the paper's row: about FAR_ALPHA of the reruns are
    called far in any of the 6 cells (the Monte Carlo error of 400 runs is
    ±0.011, so the bound is FAR_ALPHA + 0.015)."""
    rng = np.random.default_rng(51)
    n, sims, pairs = 801, 400, {"White vs Black": (0.93, 0.84), "Male vs Female": (0.93, 0.86),
                                "High Income vs Low Income": (0.92, 0.82)}

    def run():
        rows = []
        for pair, (pa, pb) in pairs.items():
            ya, yb = rng.random(n) < pa, rng.random(n) < pb
            wa, wb = rng.integers(1, 4, n), rng.integers(1, 4, n)         # the wrong letter chosen
            la, lb = np.where(ya, 0, wa), np.where(yb, 0, wb)
            d = ya.astype(float) - yb
            rows.append({"seed_pair": pair, "n": n, "CFR": float((la == lb).mean()), "AD": abs(d.mean()),
                         "se_paired": 100 * d.std(ddof=1) / np.sqrt(n)})
        return pd.DataFrame(rows)

    far = 0
    for _ in range(sims):
        first = run()
        paper = {(r["seed_pair"], m): r[m] for r in first.to_dict("records") for m in ("CFR", "AD")}
        far += bool(distance.distance(run(), paper)["far"].any())
    assert far / sims <= distance.FAR_ALPHA + 0.015, far / sims


def test_a_seed003_paper_row_name_is_compared_with_table_I(root, tmp_path):
    """Seed 003: GPT-5.2's option answers named
    MedGemma-27B (a paper row without released answers) are far from its
    Table I row (Orig. 92.67 vs 72.00); GPT-5.2's own files under its name
    equal the paper's row as printed (two decimals) in all 11 cells."""
    hive = ROOT / "data" / "raw" / "released_answers" / "cultural_cues_hive"
    other = tmp_path / "other"
    other.mkdir()
    for kind in ("option", "short"):
        shutil.copy(hive / f"Final_GPT5.2_{kind}_augment_answers.json",
                    other / f"Final_MedGemma27B_{kind}_augment_answers.json")
    res = cli.add([other], "cultural_cues_hive", "MedGemma-27B", dry_run=True)
    comp = res["paper"].set_index("column")
    assert len(comp) == 11 and comp["far"].all()
    assert comp.loc["Baselines · Orig.", "paper"] == 72.0 and round(comp.loc["Baselines · Orig.", "ours"], 2) == 92.67
    assert any("WARNING: FAR FROM THE PAPER'S ROW 'MedGemma-27B' in 11 of 11 cells" in n for n in res["notes"])
    cli.remove("cultural_cues_hive", "GPT-5.2", stores=[])
    res = cli.add([hive / "Final_GPT5.2_option_augment_answers.json",
                        hive / "Final_GPT5.2_short_augment_answers.json", hive / "Final_GPT5.1_judge.json"],
                       "cultural_cues_hive", "GPT-5.2", dry_run=True)
    assert (res["paper"]["difference"].abs() < 0.005).all() and not res["paper"]["far"].any()


def test_the_library_never_imports_the_command_line():
    """``medaudit.released`` (what notebooks 07/08 read) imports nothing of
    ``medaudit.released.cli`` (the maintainer's add/remove/list); the CLI
    imports the library. Read from the source, lazy imports included."""
    import ast

    from medaudit import released

    def imported(path: Path) -> set[str]:
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                out |= {f"{'.' * node.level}{node.module or ''}:{a.name}" for a in node.names}
        return out

    lib = Path(released.__file__)
    assert not {i for i in imported(lib) if "cli" in i or i.startswith(".:")}, imported(lib)
    assert all(any(i.startswith("medaudit.released:") for i in imported(p))       # the library's names
               for p in (lib.parent / "cli").glob("[!_]*.py"))
    assert not hasattr(released, "add") and callable(cli.add)
