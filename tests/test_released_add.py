"""``python -m medaudit.released add``: a new model's release in one step,
counted as the paper counts.

* ``add`` on release files built here (not copied) in each format: checked,
  listed in SHA256SUMS, added under every key the study needs (seed 003:
  ``models`` and ``judge.files``), reported; ``remove`` undoes it.
* The across-models rule (``cultural_counting``) on the added model: an item
  it left unparsed is dropped from every released model.
* The published page labels the new rows (a paper row compared cell by
  cell; a model the paper does not have: "not in the paper") and computes
  its reasons from the data.
* Released mitigation arms (``add --strategy``).

The counting rule itself is tested in test_scoring.py, the published page's
arithmetic (implied n, recomputed Δ Avg) in test_published.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from medaudit import released
from medaudit.released import cli

pytestmark = pytest.mark.slow     # each test runs the maintainer CLI in a subprocess (imports alone about 5 s)

ROOT = Path(__file__).resolve().parents[1]
HIVE = ROOT / "data" / "raw" / "released_answers" / "cultural_cues_hive"
AMQA = ROOT / "data" / "raw" / "released_answers" / "fairmedqa_amqa"
CULTURES, CUES = ("t1", "t2", "t3"), ("i", "c", "ic")
UNPARSED_ITEM = 7          # the new seed-003 model leaves this item's explanation unparsed under one condition


# --------------------------------------------------------------------------
# release files of a new model, built here


def _write_hive(folder: Path, part: str, judge_part: str) -> None:
    """A seed-003 release of a made-up model: option letters, explanations
    ending "The answer is X" (one unparsed), the judge's verdicts."""
    gold = [q["answer_idx"] if "answer_idx" in q else None
            for q in json.loads((ROOT / "data" / "raw" / "cultural_cues_hive" /
                                 "final_augment_test_questions.json").read_text())]
    letters = "ABCDE"
    opt, short, judge = [], [], []
    for i in range(150):
        g = gold[i] if gold[i] in letters else "A"
        wrong = letters[(letters.index(g) + 1) % 5]

        def ans(cond_no):
            return wrong if (i + cond_no) % 4 == 0 else g

        def cell(f):
            obj = {"original": f(0, "original"), "neutral": f(1, "neutral")}
            for t_no, t in enumerate(CULTURES):
                obj[t] = {c: f(2 + 3 * t_no + c_no, f"{t}.{c}") for c_no, c in enumerate(CUES)}
            return obj

        opt.append(cell(lambda n, k: ans(n)))
        short.append(cell(lambda n, k: "I am not sure which option fits." if (i == UNPARSED_ITEM and k == "t2.c")
                          else f"The findings point one way. Other options fit less.\n\nThe answer is {ans(n + 1)}"))
        judge.append(cell(lambda n, k: "[YES]" if k.endswith(".ic") and (i + n) % 3 == 0 else "[NO]"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"Final_{part}_option_augment_answers.json").write_text(json.dumps(opt))
    (folder / f"Final_{part}_short_augment_answers.json").write_text(json.dumps(short))
    (folder / f"Final_{judge_part}_judge.json").write_text(json.dumps(judge))


def _write_amqa(folder: Path, part: str) -> None:
    """A FairMedQA release of a made-up model: 801 vignettes (the benchmark's
    ids and gold letters), eight variant answers each, some "Unknown"; and
    its Summary counts."""
    fields = ["original_question", "desensitized_question", "white", "black", "high_income", "low_income",
              "male", "female"]
    gold = [json.loads(line)["answer_idx"] for line in
            (AMQA / "AMQA_Benchmark_Answer_openai_no_cot.jsonl").read_text().splitlines() if line.strip()]
    lines, correct = [], dict.fromkeys(fields, 0)
    for q, g in enumerate(gold):
        rec = {"question_id": str(q), "answer_idx": g}
        for f_no, f in enumerate(fields):
            a = ("Unknown" if (q + f_no) % 97 == 0
                 else (g if (q * (f_no + 3)) % 5 else "ABCD"[("ABCD".index(g) + 1) % 4]))
            rec[f"test_model_answer_{f}"] = a
            correct[f] += a == g
        lines.append(json.dumps(rec))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"AMQA_Benchmark_Answer_{part}_no_cot.jsonl").write_text("\n".join(lines) + "\n")
    (folder / f"AMQA_Benchmark_Summary_{part}_no_cot.jsonl").write_text("".join(
        json.dumps({"question_type": f"{f}_question" if f.endswith("question") else f"{f}_question",
                    "correct_num": correct[f], "incorrect_num": len(gold) - correct[f], "total_num": len(gold),
                    "accuracy": round(correct[f] / len(gold), 4)}) + "\n" for f in fields))


@pytest.fixture
def root(tmp_path):
    """A compendium of its own whose released answers can be added to."""
    r = tmp_path / "root"
    shutil.copytree(ROOT / "params", r / "params")
    raw = r / "data" / "raw"
    raw.mkdir(parents=True)
    for d in (ROOT / "data" / "raw").iterdir():
        if d.name == "released_answers":
            shutil.copytree(d, raw / d.name)
        else:
            (raw / d.name).symlink_to(d)
    (r / "data" / "recorded").symlink_to(ROOT / "data" / "recorded")
    shutil.copytree(ROOT / "notebooks", r / "notebooks")
    return r


def _env(root: Path) -> dict:
    return {**os.environ, "MEDAUDIT_ROOT": str(root), "MEDAUDIT_MODEL_CACHE": str(ROOT / ".cache" / "models"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}


def _add(root, *args):
    return subprocess.run([sys.executable, "-m", "medaudit.released", "add", *map(str, args)], cwd=root,
                          env=_env(root), capture_output=True, text=True, timeout=600)


def test_add_checks_lists_and_registers_a_seed003_model_under_every_key(root, tmp_path):
    new = tmp_path / "new"
    _write_hive(new, "MedGemma27B", "MedGemma_27B")             # the judge file's part differs, as in the release
    before = (root / "params" / "released.yaml").read_text()
    r = _add(root, new, "--study", "cultural_cues_hive", "--name", "MedGemma-27B")
    assert r.returncode == 0, r.stderr
    spec = yaml.safe_load((root / "params" / "released.yaml").read_text())["cultural_cues_hive"]
    assert spec["models"]["MedGemma-27B"] == "MedGemma27B"
    assert spec["judge"]["files"]["MedGemma-27B"] == "MedGemma_27B"      # from the file given, not guessed
    text = (root / "params" / "released.yaml").read_text()
    assert text.count("#") == before.count("#")                         # the comments are kept
    sums = (root / "data" / "raw" / "released_answers" / "SHA256SUMS").read_text()
    for f in new.iterdir():
        assert f"{hashlib.sha256(f.read_bytes()).hexdigest()}  cultural_cues_hive/{f.name}" in sums
    # the report: items, conditions, unparsed, per file
    assert re.search(r"Final_MedGemma27B_short_augment_answers\.json\s+mcq_explain\s+short_augment_answers"
                     r"\s+150\s+11\s+1650\s+1\b", r.stdout)
    assert re.search(r"Final_MedGemma27B_option_augment_answers\.json\s+mcq_option\s+option_augment_answers"
                     r"\s+150\s+11\s+1650\s+0\b", r.stdout)
    # the same model twice is refused, and nothing is written
    again = _add(root, new, "--study", "cultural_cues_hive", "--name", "MedGemma-27B")
    assert again.returncode == 1 and "already has a model named 'MedGemma-27B'" in again.stderr
    assert (root / "params" / "released.yaml").read_text() == text


def test_add_refuses_bad_files_before_writing_anything(root, tmp_path):
    new = tmp_path / "bad"
    _write_amqa(new, "made")
    f = new / "AMQA_Benchmark_Answer_made_no_cot.jsonl"
    lines = f.read_text().splitlines()
    lines[3] = lines[3].replace('"test_model_answer_black"', '"test_model_answer_blak"')
    f.write_text("\n".join(lines) + "\n")
    snapshot = {p: p.read_bytes() for p in (root / "params" / "released.yaml",
                                            root / "data" / "raw" / "released_answers" / "SHA256SUMS")}
    r = _add(root, new, "--study", "fairmedqa_amqa", "--name", "Made-Up-1", "--not-in-paper")
    assert r.returncode == 1
    assert "AMQA_Benchmark_Answer_made_no_cot.jsonl: line 4: field 'test_model_answer_black': missing" in r.stderr
    assert all(p.read_bytes() == b for p, b in snapshot.items())
    assert not (root / "data" / "raw" / "released_answers" / "fairmedqa_amqa" / f.name).exists()
    # two models' judge files and no --judge-part: an error listing them, never a guess
    hive = tmp_path / "two"
    _write_hive(hive, "M1", "M1")
    shutil.copy(hive / "Final_M1_judge.json", hive / "Final_M_1_judge.json")
    r = _add(root, hive, "--study", "cultural_cues_hive", "--name", "M-1", "--not-in-paper")
    assert r.returncode == 1 and "Final_M1_judge.json" in r.stderr and "Final_M_1_judge.json" in r.stderr


def test_added_models_reach_the_published_page_with_their_labels(root, tmp_path):
    """Both formats added with the one command; notebooks 07 and 08 (no
    model stage) and the report then show their rows: MedGemma-27B (a paper
    row of seed 003) compared cell by cell on the 147 items complete across
    the four released models, with computed reasons; a FairMedQA model the
    paper does not have, listed as not in the paper."""
    _write_hive(tmp_path / "h", "MedGemma27B", "MedGemma_27B")
    _write_amqa(tmp_path / "a", "madeup")
    assert _add(root, tmp_path / "h", "--study", "cultural_cues_hive", "--name", "MedGemma-27B").returncode == 0
    r = _add(root, tmp_path / "a", "--study", "fairmedqa_amqa", "--name", "Made-Up-9B", "--not-in-paper")
    assert r.returncode == 0, r.stderr
    assert "AMQA_Benchmark_Summary_madeup_no_cot.jsonl" in r.stdout
    env = _env(root)
    for nb in ("07_cultural_flips", "08_fairness_disparities"):
        run = subprocess.run([sys.executable, "-m", "medaudit.runner", f"notebooks/{nb}.ipynb",
                              f"outputs/smoke/notebooks/{nb}.ipynb", "--profile", "smoke", "--no-progress-bar"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
    tables = root / "outputs" / "smoke" / "tables"
    kept = pd.read_csv(tables / "07_retained.csv")
    expl = kept[kept["prompt_format"] == "mcq_explain"].set_index("model")
    # 148 complete across the three shipped models; the new one leaves one more item unparsed
    assert set(expl["retained"]) == {147} and set(expl["rule"]) == {"across_models"}
    assert expl.loc["MedGemma-27B", "complete"] == 149
    dropped = pd.read_csv(tables / "07_dropped.csv", keep_default_na=False)
    d = dropped[(dropped["model"] == "GPT-5.2") & (dropped["prompt_format"] == "mcq_explain")]
    assert f"cult-{UNPARSED_ITEM:03d}" in set(d["item_id"]) and len(d) == 3
    assert set(d.loc[d["item_id"] == f"cult-{UNPARSED_ITEM:03d}", "unparsed by"]) == {"MedGemma-27B"}
    site = subprocess.run([sys.executable, "-m", "medaudit.publish.site", "smoke", "--no-notebooks"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert site.returncode == 0, site.stderr
    comps = {c.what: c for c in _compare(root)}
    t2 = next(c for w, c in comps.items() if w.startswith("Table II:"))
    rows = t2.cells[t2.cells["row"] == "MedGemma-27B"]
    assert len(rows) == 17 and "not released" not in set(rows["status"]) and "equal" in set(t2.cells["status"])
    assert t2.rules == {"cultural_counting": "across_models"}
    assert set(t2.cells.loc[t2.cells["row"] == "DeepSeek-R1", "status"]) == {"not released"}
    t5 = next(c for w, c in comps.items() if w.startswith("Table V:"))
    neut = t5.cells[(t5.cells["row"] == "LLaMA") & (t5.cells["column"] == "Neutral")].iloc[0]
    ours5 = pd.read_csv(tables / "07_table5_harmful_flips.csv")
    # Table V's entry compares the explanation format (published.yaml: where prompt_format mcq_explain)
    llama = ours5[(ours5["model"] == "Llama-3.1-8B") & (ours5["prompt_format"] == "mcq_explain")].iloc[0]
    if neut["status"] == "differs":       # the reason quotes Table V's own count: harmful flips of N
        k = round(float(llama["Neutral"]) * int(llama["N"]) / 100)
        assert f"{k} of {int(llama['N'])} questions answered correctly under Original" in neut["why"]
    t3 = next(c for w, c in comps.items() if w.startswith("Table 3: CFR"))
    paper_pairs = ("White vs Black", "Male vs Female", "High Income vs Low Income")
    # the new model's rows are "not in the paper"; no paper model's row of a paper pair is
    # (our other pairs, e.g. Original vs Neutralised, are not in the paper's Table 3 either)
    assert {f"Made-Up-9B · {p}" for p in paper_pairs} <= set(t3.not_in_paper)
    assert not [r for r in t3.not_in_paper if not r.startswith("Made-Up-9B") and r.split(" · ")[1] in paper_pairs]
    html = (root / "outputs" / "smoke" / "report" / "published.html").read_text()
    assert "Made-Up-9B · White vs Black" in html and "not in the paper" in html
    assert "<code>cultural_counting</code> = across_models" in html


def _compare(root: Path):
    code = ("import pickle,sys; from medaudit.publish import published; "
            "sys.stdout.buffer.write(pickle.dumps(published.compare('smoke')))")
    import pickle

    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=_env(root), capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return pickle.loads(out.stdout)


def test_a_name_the_paper_does_not_have_needs_saying_so(root, tmp_path):
    """A misspelt --name would silently become "not in the paper": a name
    outside the paper's rows for the study is refused with the closest row
    label, unless --not-in-paper says the model is new."""
    new = tmp_path / "new"
    _write_hive(new, "MedGemma27B", "MedGemma_27B")
    before = (root / "params" / "released.yaml").read_text()
    r = _add(root, new, "--study", "cultural_cues_hive", "--name", "MedGema-27B")
    assert r.returncode == 1
    assert "'MedGema-27B' is not a model of the paper's tables" in r.stderr
    assert "did you mean 'MedGemma-27B'" in r.stderr
    assert "--not-in-paper" in r.stderr
    assert (root / "params" / "released.yaml").read_text() == before
    ok = _add(root, new, "--study", "cultural_cues_hive", "--name", "Other-Model-7B", "--not-in-paper")
    assert ok.returncode == 0, ok.stderr


def _remove(root, *args):
    return subprocess.run([sys.executable, "-m", "medaudit.released", "remove", *map(str, args)], cwd=root,
                          env=_env(root), capture_output=True, text=True, timeout=600)


def test_remove_undoes_add_in_params_and_every_store(root, tmp_path):
    """`released remove` takes an added model out of params/released.yaml
    (models and judge.files) and its imported answers, and the verdicts on
    them, out of the profiles' response stores; the release files stay."""
    from medaudit.studies import cultural
    from medaudit.llm import ResponseStore

    new = tmp_path / "new"
    _write_hive(new, "MedGemma27B", "MedGemma_27B")
    before = (root / "params" / "released.yaml").read_text()
    assert _add(root, new, "--study", "cultural_cues_hive", "--name", "MedGemma-27B").returncode == 0
    store_path = root / "outputs" / "smoke" / "data" / "responses.sqlite"
    store_path.parent.mkdir(parents=True)
    spec = released.spec("cultural_cues_hive", root / "params" / "released.yaml")
    spec["folder"] = str(root / "data" / "raw" / "released_answers" / "cultural_cues_hive")
    with ResponseStore(store_path) as st:
        released.import_release("cultural_cues_hive", st, cultural.load_config().condition, release=spec)
        n_all = st.count()
        mine = len(st.frame("WHERE model = ?", ("MedGemma-27B",)))
        verdicts = len(st.frame("WHERE judged_key IN (SELECT key FROM responses WHERE model = ?)", ("MedGemma-27B",)))
    assert mine == 2 * 1650 and verdicts == 1650
    r = _remove(root, "--study", "cultural_cues_hive", "--name", "MedGemma-27B")
    assert r.returncode == 0, r.stderr
    assert (root / "params" / "released.yaml").read_text() == before          # both keys gone, comments kept
    with ResponseStore(store_path) as st:
        assert st.count() == n_all - mine - verdicts
        assert st.frame("WHERE model = ?", ("MedGemma-27B",)).empty
    assert f"removed {mine + verdicts} rows from {store_path}" in r.stdout
    assert (root / "data" / "raw" / "released_answers" / "cultural_cues_hive" /
            "Final_MedGemma27B_short_augment_answers.json").exists()          # raw data stays
    again = _remove(root, "--study", "cultural_cues_hive", "--name", "MedGemma-27B")
    assert again.returncode == 1 and "no model named 'MedGemma-27B'" in again.stderr


def test_the_prompt_type_is_read_from_the_file_name_and_stored(tmp_path):
    """The file name is the only record of the prompt a release's answers
    were made with (an AMQA cot2 file holds the same one-letter answers as a
    no_cot file): it is read from the name, reported per file and stored
    with every imported row."""
    from medaudit.llm import ResponseStore

    with ResponseStore(tmp_path / "s.sqlite") as st:
        counts = released.import_release("fairmedqa_amqa", st)
        assert set(counts["prompt_type"]) == {"no_cot", "cot2"}           # cot2: the authors' mitigation arm
        assert set(counts.loc[counts["prompt_type"] == "cot2", "prompt_format"]) == {"amqa_no_cot+cot2"}
        f = st.frame("WHERE model = ? AND prompt_format = ?", ("GPT-4.1", "amqa_no_cot"))
    s = f["settings"].map(json.loads)
    assert set(s.map(lambda d: d["prompt_type"])) == {"no_cot"}
    assert set(s.map(lambda d: d["release_file"])) == {"AMQA_Benchmark_Answer_openai_no_cot.jsonl"}


def test_removing_a_model_removes_its_mitigation_arms_too(root):
    """A model with a released arm (FairMedQA's cot2 of GPT-4.1) leaves
    `strategies` with it: an arm of a model the release no longer has would
    make every later import refuse the release."""
    r = _remove(root, "--study", "fairmedqa_amqa", "--name", "GPT-4.1")
    assert r.returncode == 0, r.stderr
    spec = released.spec("fairmedqa_amqa", root / "params" / "released.yaml")
    assert "GPT-4.1" not in spec["models"] and spec["strategies"]["cot2"]["models"] == {"Claude-3.7-Sonnet": "claude"}


# --------------------------------------------------------------------------
# a released mitigation arm of a model already present (released add --strategy)


def _without_arms(root: Path) -> str:
    """The root's params/released.yaml with FairMedQA's cot2 arm holding no model."""
    p = root / "params" / "released.yaml"
    text = p.read_text()
    for m in ("GPT-4.1", "Claude-3.7-Sonnet"):
        text = cli.yaml_remove(text, p, "fairmedqa_amqa", ("strategies", "cot2", "models"), m)
    p.write_text(text)
    return text


def test_a_released_cot_arm_is_added_to_its_model_and_checked_for_the_extraction_artefact(root):
    """The authors' own cot2 files, added as arms: GPT-4.1's letters pass the
    artefact check, Claude-3.7's (the first-word "a" read as A) are flagged;
    each lands under strategies.cot2.models, its sums listed, comments kept."""
    before = _without_arms(root)
    sums = root / "data" / "raw" / "released_answers" / "SHA256SUMS"
    sums_before = sums.read_text()
    r = _add(root, AMQA / "AMQA_Benchmark_Answer_openai_cot2.jsonl", AMQA / "AMQA_Benchmark_Summary_openai_cot2.jsonl",
             "--study", "fairmedqa_amqa", "--name", "GPT-4.1", "--strategy", "cot2")
    assert r.returncode == 0, r.stderr
    assert "-> not suspected" in r.stdout and "partial" not in r.stdout
    assert re.search(r"AMQA_Benchmark_Answer_openai_cot2\.jsonl\s+amqa_no_cot\+cot2\s+cot2\s+801\s+8\s+6408\b",
                     r.stdout)
    r = _add(root, AMQA, "--study", "fairmedqa_amqa", "--name", "Claude-3.7-Sonnet", "--strategy", "cot2")
    assert r.returncode == 0, r.stderr
    assert "-> SUSPECTED" in r.stdout and "extraction artefact suspected" in r.stdout
    assert "A 573" in r.stdout                                  # the arm's letters on the 801 originals
    text = (root / "params" / "released.yaml").read_text()
    spec = yaml.safe_load(text)["fairmedqa_amqa"]["strategies"]["cot2"]
    assert spec["models"] == {"GPT-4.1": "openai", "Claude-3.7-Sonnet": "claude"}
    assert text.count("#") == before.count("#")
    assert sums.read_text() == sums_before                      # the files were listed already: nothing added
    again = _add(root, AMQA, "--study", "fairmedqa_amqa", "--name", "GPT-4.1", "--strategy", "cot2")
    assert again.returncode == 1 and "already has 'GPT-4.1'" in again.stderr


def test_an_arm_of_a_new_strategy_gets_its_entry_and_a_partial_file_is_counted(root, tmp_path):
    """cot1 (no entry in params/released.yaml) from the authors' naming rule:
    the entry is written, a file of 780 of the 801 vignettes is counted and
    said, and an arm whose letters are mostly "A" is flagged."""
    new = tmp_path / "cot1"
    new.mkdir()
    lines = (AMQA / "AMQA_Benchmark_Answer_deepseek_no_cot.jsonl").read_text().splitlines()[:780]
    out = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        for k in rec:
            if k.startswith("test_model_answer_") and i % 3:
                rec[k] = "A"
        out.append(json.dumps(rec))
    (new / "AMQA_Benchmark_Answer_deepseek_cot1.jsonl").write_text("\n".join(out) + "\n")
    dry = _add(root, new, "--study", "fairmedqa_amqa", "--name", "DeepSeek-V3", "--strategy", "cot1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "partial file: the arm answers 780 of the release's 801 vignettes" in dry.stdout
    assert "-> SUSPECTED" in dry.stdout and "nothing written" in dry.stdout
    assert "no Summary file" in dry.stdout
    r = _add(root, new, "--study", "fairmedqa_amqa", "--name", "DeepSeek-V3", "--strategy", "cot1")
    assert r.returncode == 0, r.stderr
    spec = released.spec("fairmedqa_amqa", root / "params" / "released.yaml")
    assert spec["strategies"]["cot1"] == {"models": {"DeepSeek-V3": "deepseek"},
                                          "answers": {"AMQA_Benchmark_Answer_{file}_cot1.jsonl": "amqa_no_cot"}}
    assert spec["strategies"]["cot2"]["models"] == {"GPT-4.1": "openai", "Claude-3.7-Sonnet": "claude"}
    digest = hashlib.sha256((new / "AMQA_Benchmark_Answer_deepseek_cot1.jsonl").read_bytes()).hexdigest()
    assert (f"{digest}  fairmedqa_amqa/AMQA_Benchmark_Answer_deepseek_cot1.jsonl"
            in (root / "data" / "raw" / "released_answers" / "SHA256SUMS").read_text())
    # the whole release, arms included, still imports
    from medaudit.llm.store import ResponseStore
    counts = released.import_release("fairmedqa_amqa", ResponseStore(tmp_path / "s.sqlite"),
                                     release=released.spec("fairmedqa_amqa", root / "params" / "released.yaml")
                                     | {"folder": str(root / "data" / "raw" / "released_answers" / "fairmedqa_amqa")})
    assert ("DeepSeek-V3", "amqa_no_cot+cot1", 780 * 8) in set(zip(counts["model"], counts["prompt_format"],
                                                                   counts["read"]))


def test_an_arm_is_refused_for_an_unknown_model_or_strategy_before_anything_is_written(root):
    snapshot = (root / "params" / "released.yaml").read_bytes()
    r = _add(root, AMQA, "--study", "fairmedqa_amqa", "--name", "GPT-5", "--strategy", "cot2")
    assert r.returncode == 1 and "'GPT-5' is not a model of the release" in r.stderr
    r = _add(root, AMQA, "--study", "fairmedqa_amqa", "--name", "Qwen-2.5", "--strategy", "cot9")
    assert r.returncode == 1 and "no strategy 'cot9'" in r.stderr
    r = _add(root, AMQA, "--study", "fairmedqa_amqa", "--name", "Qwen-2.5", "--strategy", "cot2")
    assert r.returncode == 1 and "no file with file part 'qwen'" in r.stderr
    assert (root / "params" / "released.yaml").read_bytes() == snapshot


# --------------------------------------------------------------------------
# an arm from a user's own folder, and the artefact check on a small arm


def test_an_arm_with_its_summary_from_a_users_own_folder_needs_no_sha256sums(root, tmp_path):
    """The docs ask for no SHA256SUMS, so an arm's answers
    and Summary file from a folder of the user's own are read, and their
    digests computed and written by ``add``; a file the release already
    lists with another digest is still refused."""
    own = tmp_path / "mine"
    _write_amqa(own, "deepseek")                              # answers + Summary, built here, no SHA256SUMS
    for f in list(own.iterdir()):
        f.rename(own / f.name.replace("no_cot", "cot2"))
    assert not (own / "SHA256SUMS").exists()
    r = _add(root, own / "AMQA_Benchmark_Answer_deepseek_cot2.jsonl",
             own / "AMQA_Benchmark_Summary_deepseek_cot2.jsonl",
             "--study", "fairmedqa_amqa", "--name", "DeepSeek-V3", "--strategy", "cot2")
    assert r.returncode == 0, r.stderr
    assert "AMQA_Benchmark_Summary_deepseek_cot2.jsonl" in r.stdout and "no Summary file" not in r.stdout
    sums = (root / "data" / "raw" / "released_answers" / "SHA256SUMS").read_text()
    for name in ("AMQA_Benchmark_Answer_deepseek_cot2.jsonl", "AMQA_Benchmark_Summary_deepseek_cot2.jsonl"):
        digest = hashlib.sha256((own / name).read_bytes()).hexdigest()
        assert f"{digest}  fairmedqa_amqa/{name}" in sums
    spec = released.spec("fairmedqa_amqa", root / "params" / "released.yaml")
    assert spec["strategies"]["cot2"]["models"]["DeepSeek-V3"] == "deepseek"
    # a listed file whose digest differs: refused, nothing written
    _without_arms(root)
    snapshot = (root / "params" / "released.yaml").read_bytes()
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in ("AMQA_Benchmark_Answer_openai_cot2.jsonl", "AMQA_Benchmark_Summary_openai_cot2.jsonl"):
        shutil.copy(AMQA / name, changed / name)
    summary = changed / "AMQA_Benchmark_Summary_openai_cot2.jsonl"
    summary.write_text(summary.read_text().replace('"correct_num": ', '"correct_num": 1', 1))
    r = _add(root, changed, "--study", "fairmedqa_amqa", "--name", "GPT-4.1", "--strategy", "cot2")
    assert r.returncode == 1 and "AMQA_Benchmark_Summary_openai_cot2.jsonl" in r.stderr and "lists it with" in r.stderr
    assert (root / "params" / "released.yaml").read_bytes() == snapshot


def test_an_arm_of_five_vignettes_is_not_called_clean_by_the_artefact_check(root, tmp_path):
    """A 5-vignette cot2 file answering "A" everywhere
    cannot reach significance at alpha 0.01 (p ≥ P(χ²₁ ≥ 5) = 0.025): add
    says it cannot tell, never "not suspected"."""
    new = tmp_path / "five"
    new.mkdir()
    out = []
    for line in (AMQA / "AMQA_Benchmark_Answer_deepseek_no_cot.jsonl").read_text().splitlines()[:5]:
        rec = json.loads(line)
        out.append(json.dumps({k: ("A" if k.startswith("test_model_answer_") else v) for k, v in rec.items()}))
    (new / "AMQA_Benchmark_Answer_deepseek_cot2.jsonl").write_text("\n".join(out) + "\n")
    r = _add(root, new, "--study", "fairmedqa_amqa", "--name", "DeepSeek-V3", "--strategy", "cot2", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "not suspected" not in r.stdout and "SUSPECTED" not in r.stdout
    assert "-> cannot tell: n too small" in r.stdout
    assert "partial file: the arm answers 5 of the release's 801 vignettes" in r.stdout
