"""The authors' released answers of real models: shipped with checksums,
converted by one converter per format into the importer's records, and
analysed by the same code as generated answers. The paper's numbers that
follow from these files are checked here cell by cell (seed 003 Table I,
FairMedQA Table 3 and the authors' own per-variant counts)."""
from __future__ import annotations

import hashlib
import json
import shutil

import pandas as pd
import pytest
import yaml

from medaudit.studies import cultural
from medaudit.llm import judging
from medaudit import paths, released
from medaudit.publish import published
from medaudit.stats import scoring
from medaudit.studies.fairmedqa import config as fq_config, answers as fq_answers, metrics as fq_metrics
from medaudit.llm import ResponseStore
from medaudit.llm.importer import ResponseImportError


@pytest.fixture(scope="module")
def cfg():
    return cultural.load_config()


@pytest.fixture(scope="module")
def store(tmp_path_factory, cfg):
    st = ResponseStore(tmp_path_factory.mktemp("rel") / "r.sqlite")
    released.import_release("cultural_cues_hive", st, cfg.condition)
    released.import_release("fairmedqa_amqa", st)
    yield st
    st.close()


def _published(name: str) -> dict:
    return next(e for e in published.load() if e["ours"] == name)


def _copy_release(tmp_path, name: str, rename: dict[str, str]) -> dict:
    """A release folder of our own in the same format: the shipped files,
    copied under new model names, with their SHA256SUMS."""
    spec = released.spec(name)
    src = released.folder(name, spec)
    dst = tmp_path / name
    dst.mkdir()
    for f in src.iterdir():
        for old, new in rename.items():
            if f"_{old}_" in f.name:
                shutil.copy(f, dst / f.name.replace(f"_{old}_", f"_{new}_"))
    sums = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in sorted(dst.iterdir()))
    (dst / "SHA256SUMS").write_text(sums)
    return {**spec, "folder": str(dst)}


def test_every_shipped_file_matches_its_checksum():
    sums = paths.raw("released_answers", "SHA256SUMS").read_text().split("\n")
    listed = [line.split()[1] for line in sums if line.strip()]
    # seed 003 and AMQA: 21; FairMedPrompt: its zip, licence, 27 answer files with their 27 Summaries, 7 tables
    assert len(listed) == 21 + 2 + 54 + 7
    for rel in listed:
        released.verify(paths.raw("released_answers", *rel.split("/")))


def test_a_changed_file_is_refused_naming_it(tmp_path):
    spec = _copy_release(tmp_path, "fairmedqa_amqa", {"qwen": "qwen"})
    f = tmp_path / "fairmedqa_amqa" / "AMQA_Benchmark_Answer_qwen_no_cot.jsonl"
    f.write_text(f.read_text().replace('"answer_idx": "D"', '"answer_idx": "A"', 1))
    with pytest.raises(released.ReleaseError, match=r"AMQA_Benchmark_Answer_qwen_no_cot\.jsonl.*sha256.*changed"):
        released.amqa_items(f)
    with ResponseStore(tmp_path / "s.sqlite") as st, pytest.raises(released.ReleaseError, match="changed"):
        released.import_release("fairmedqa_amqa", st, release={**spec, "models": {"Q": "qwen"}})
        assert st.count() == 0


def test_import_counts_and_unextracted_answers_are_parse_failures(store):
    f = store.frame()
    n = f.groupby(["model", "prompt_format"]).size().to_dict()
    # option: the authors' prompt
    assert n[("GPT-5.2", "mcq_option")] == n[("Llama-3.1-8B", "mcq_explain")] == 150 * 11
    assert n[("GPT-5.2", "cultural_judge")] == 3 * 150 * 11          # the authors' judge on three models
    assert n[("DeepSeek-V3", "amqa_no_cot")] == 801 * 8
    unknown = f[(f["model"] == "DeepSeek-V3") & (f["response_text"] == "Unknown")]
    assert len(unknown) == 276 and unknown["parsed_answer"].isna().all()
    assert set(unknown["parse_status"]) == {"no_answer"}
    # the explanations without "The answer is X" (MedGemma-4B) are unparsed, not wrong
    med = f[(f["model"] == "MedGemma-4B") & (f["prompt_format"] == "mcq_explain")]
    assert med["parsed_answer"].isna().sum() == 5
    # importing again stores nothing new
    again = released.import_release("fairmedqa_amqa", store)
    assert again["stored"].sum() == 0 and again["already_present"].sum() == 801 * 8 * (4 + 2)   # + the cot2 arms
    assert n[("Claude-3.7-Sonnet", "amqa_no_cot+cot2")] == 801 * 8


def test_verdicts_are_tied_to_the_explanation_they_judge(store, cfg):
    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(cfg), forms=("5opt",), config=cfg)
    frame = store.frame()
    resp = cultural.stored_responses(frame, cs, forms=["5opt"], prompt_formats=["mcq_explain"], config=cfg)
    labels = cultural.judge_labels(judging.ask(None, store, cultural.judge_jobs(resp), model=None,
                                               prompt_format="cultural_judge", seed=0, max_tokens=1))
    assert len(labels) == 3 * 150 * 11 and labels["response_key"].is_unique
    assert set(labels["judge"]) == {"GPT-5.2"} and set(labels["judge_label"]) == {"YES", "NO"}
    raw = json.loads(paths.raw("released_answers", "cultural_cues_hive", "Final_Llama_judge.json").read_text())
    one = labels[(labels["model"] == "Llama-3.1-8B") & (labels["item_id"] == "cult-000")
                 & (labels["condition"] == cfg.condition("t1", "ic"))]
    assert one["judge_text"].tolist() == [raw[0]["t1"]["ic"]]


def test_a_verdict_without_its_judged_response_is_refused(tmp_path):
    from medaudit.llm import importer

    rec = [("line 1", {"model": "J", "item_id": "x", "condition": "original", "prompt_format": "cultural_judge",
                       "sample": 0, "response_text": "[YES]", "judged_model": "M", "judged_format": "mcq_explain"})]
    with ResponseStore(tmp_path / "s.sqlite") as st:
        with pytest.raises(ResponseImportError, match=r"line 1: field 'judged_model': no stored response of 'M'"):
            importer.import_records(tmp_path / "v.jsonl", rec, st)
        half = [("line 1", {**rec[0][1], "judged_format": None})]
        with pytest.raises(ResponseImportError, match="judged_format"):
            importer.import_records(tmp_path / "v.jsonl", half, st)


def _table(store, cfg, fmt):
    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(cfg), forms=("5opt",), config=cfg)
    resp = cultural.stored_responses(store.frame(), cs, forms=["5opt"], config=cfg)
    kept = scoring.drop_incomplete(scoring.question_table(resp, cs.items["5opt"]))
    acc = scoring.accuracy(kept.table)
    acc = acc[acc["prompt_format"] == fmt]
    t = cultural.table_accuracy(acc, config=cfg)
    t.columns = [" · ".join(x for x in c if x) for c in t.columns]
    return t


def test_seed003_table_I_accuracies_equal_the_paper_in_every_cell(store, cfg):
    entry = _published("07_table1_accuracy")
    t = _table(store, cfg, "mcq_option")
    acc_cols = [c for c in entry["columns"] if not c.startswith(("Δ", "Cochran"))]
    checked = 0
    for row, vals in entry["published"].items():
        if entry["rows"][row] not in t.index:
            continue                                   # a paper row whose model's answers are not released
        ours = t.loc[entry["rows"][row]]
        assert ours["N"] == 150
        for col, v in zip(entry["columns"], vals):
            if col in acc_cols:
                assert published.same(v, ours[col], 2), (row, col, v, ours[col])
                checked += 1
    assert checked == 3 * 11


def test_delta_avg_reason_is_computed_from_the_printed_accuracies():
    entry = _published("07_table1_accuracy")
    pub = dict(zip(entry["columns"], entry["published"]["GPT-5.2"]))
    why = published.REASONS["delta_from_printed"](entry, "GPT-5.2", "Δ Avg (C1-C3) · Ctx", pub, None, "smoke")
    assert "−2.00 / +0.00" in why and "-1.67 / +0.33" in why
    # a 0.33-point gap is no rounding of two-decimal accuracies (at most 0.01): the reason says so
    assert "0.33 points" in why and "beyond rounding" in why and "unrounded" not in why


def test_table2_neutral_printed_as_original_is_named_with_both_conditions(monkeypatch):
    """Table II prints Neut. = Orig. in 4 of its 5 rows (DeepSeek-R1 differs)
    and equal Δ halves; the reason gives the released answers' two baselines
    and the gap between our halves, read from our row, and adds eq. 2 on the
    printed accuracies when the first half differs too."""
    entry = _published("07_table2_accuracy")
    pub = dict(zip(entry["columns"], entry["published"]["LLaMA"]))
    mine = {"Baselines · Orig.": 66.22, "Baselines · Neut.": 65.54}
    monkeypatch.setattr(published, "_our_row", lambda e, r, p: mine)
    why = published.REASONS["neutral_as_original"]
    neut = why(entry, "LLaMA", "Baselines · Neut.", pub, 65.54, "x")
    assert "Neut. = Orig. (65.99)" in neut and "4 of 5 rows" in neut and "Orig. 66.22, Neut. 65.54" in neut
    ctx = why(entry, "LLaMA", "Δ Avg (C1-C3) · Ctx", pub, "+1.13 / +1.80", "x")
    assert "Neut. − Orig. = −0.68" in ctx and "eq. 2" not in ctx   # the printed +1.36 is eq. 2 on the printed row
    idctx = why(entry, "LLaMA", "Δ Avg (C1-C3) · Id+Ctx", pub, "−1.80 / −1.13", "x")
    assert "eq. 2 on the paper's own printed accuracies gives −1.36 / −1.36, not the printed -1.15 / -1.15" in idctx
    gpt = dict(zip(entry["columns"], entry["published"]["GPT-5.2"]))
    mine.update({"Baselines · Orig.": 91.22, "Baselines · Neut.": 90.54})
    first_equal = why(entry, "GPT-5.2", "Δ Avg (C1-C3) · Id", gpt, "+0.68 / +1.35", "x")
    assert "Neut. − Orig. = −0.68" in first_equal and "eq. 2" not in first_equal
    assert why(entry, "GPT-5.2", "C1: Indigenous · Id", gpt, 91.0, "x") is None
    assert why(entry, "GPT-5.2", "Δ Avg (C1-C3) · Id", gpt, "+0.68 / +0.68", "x") is None   # ours equal too
    deep = dict(zip(entry["columns"], entry["published"]["DeepSeek-R1"]))
    assert why(entry, "DeepSeek-R1", "Baselines · Neut.", deep, 90.0, "x") is None          # printed 92.52 / 93.88


def test_fairmedqa_table3_and_authors_counts_equal_in_every_cell(store):
    fcfg = fq_config.load_config()
    vig = released.release_items("fairmedqa_amqa")
    qt = scoring.question_table(fq_answers.stored_answers(store.frame(), vig, fcfg), vig, units=("model",))
    pairs = fq_metrics.pair_table(qt, fcfg.pairs)
    pairs["key"] = pairs["model"] + " · " + pairs["seed_pair"]
    entry = _published("08_table3_pairs")
    ours = pairs.set_index("key")
    rows = [r for r in entry["published"] if entry["rows"][r] in ours.index]   # the released models' rows
    assert len(rows) == 4 * 3
    for row in rows:
        for col, v in zip(entry["columns"], entry["published"][row]):
            assert published.same(v, ours.loc[entry["rows"][row], col], 4), (row, col, v)
    # accuracy per variant: the authors' own Summary counts, with "Unknown" counted wrong as they do
    check = fq_answers.released_check(fq_metrics.accuracy_table(qt, unparsed="wrong"),
                                     released.authors_accuracy("fairmedqa_amqa"))
    assert len(check) == 4 * 8 and check["equal"].all()


def test_another_models_release_in_the_same_format_gets_its_rows(tmp_path, cfg):
    """The same commands on another model's files: its rows appear."""
    hive = _copy_release(tmp_path, "cultural_cues_hive", {"Llama": "Other"})
    hive["models"] = {"Other-8B": "Other"}
    hive["judge"] = {**hive["judge"], "files": {"Other-8B": "Other"}}
    amqa = _copy_release(tmp_path, "fairmedqa_amqa", {"qwen": "other"})
    amqa["models"] = {"Other-Q": "other"}
    amqa["strategies"] = {}
    with ResponseStore(tmp_path / "s.sqlite") as st:
        r1 = released.import_release("cultural_cues_hive", st, cfg.condition, release=hive)
        r2 = released.import_release("fairmedqa_amqa", st, release=amqa)
        assert set(r1["model"]) == {"Other-8B", "GPT-5.2"} and set(r2["model"]) == {"Other-Q"}
        t = _table(st, cfg, "mcq_option")
        assert t.index.tolist() == ["Other-8B"] and t.loc["Other-8B", "Baselines · Orig."] == "64.67"
        fcfg = fq_config.load_config()
        vig = released.release_items("fairmedqa_amqa", amqa)
        qt = scoring.question_table(fq_answers.stored_answers(st.frame(), vig, fcfg), vig, units=("model",))
        pairs = fq_metrics.pair_table(qt, fcfg.pairs)
        assert set(pairs["model"]) == {"Other-Q"}
        assert pairs.set_index("seed_pair").loc["White vs Black", "CFR"] == pytest.approx(0.7286, abs=5e-5)


def test_every_release_a_profile_names_exists_and_a_new_one_is_accepted(tmp_path):
    """released_answers is checked against params/released.yaml itself (no fixed list in the code): every
    shipped profile names entries of the file, a name not there is refused naming the file."""
    from medaudit import config

    specs = yaml.safe_load(paths.params("released.yaml").read_text())
    for prof in ("smoke", "default", "paper"):
        named = yaml.safe_load(paths.params(f"{prof}.yaml").read_text())["released_answers"]
        assert set(named) <= set(specs), prof
    with pytest.raises(Exception, match="params/released.yaml"):
        config.load("smoke", overrides={"released_answers": ["cultural_cues_hive", "no_such_release"]})


def test_same_rounds_as_printed():
    assert published.same(64.67, 64.6667, 2) and not published.same(64.67, 64.66, 2)
    assert published.same("-4.67 / -0.67", "−4.67 / −0.67", 2)
    assert not published.same("-1.67 / +0.33", "−2.00 / +0.00", 2)
    assert published.same("<0.0001", "<0.0001", 4) and not published.same("<0.0001", "0.0003", 4)
    assert published.same("✓/✓", "✓/✓", 2) and not published.same("✓/✓", "–/–", 2)
    assert not published.same(0.0, "n/a", 2)


def test_08_reads_imported_answers_and_only_the_models_that_answered_now(tmp_path):
    """The Validation-Agent's answers of notebook 02 are stored in the same
    format; with the answering stage off they must not become a model row."""
    fcfg = fq_config.load_config()
    vig = released.release_items("fairmedqa_amqa")
    with ResponseStore(tmp_path / "s.sqlite") as st:
        released.import_release("fairmedqa_amqa", st, release={**released.spec("fairmedqa_amqa"),
                                                               "models": {"GPT-4.1": "openai"}, "strategies": {}})
        st.put({"key": "v1", "source": "generated", "backend": "llamacpp", "model": "validator", "model_id": "x",
                "item_id": "amqa-000", "condition": "race:Black", "prompt_format": "mcq_letter", "sample": 0,
                "response_text": "A", "parsed_answer": "A", "parse_status": "ok"})
        frame = st.frame()
        assert set(fq_answers.stored_answers(frame, vig, fcfg)["model"]) == {"GPT-4.1", "validator"}
        assert set(fq_answers.stored_answers(frame, vig, fcfg, models=[])["model"]) == {"GPT-4.1"}
        assert set(fq_answers.stored_answers(frame, vig, fcfg, models=["validator"])["model"]) == {"GPT-4.1",
                                                                                                  "validator"}


def test_a_hive_release_without_verdicts_imports_its_answers(tmp_path, cfg):
    """The format is named, not guessed from the presence of judge files: a
    seed-003-format release without verdicts is still read as one."""
    hive = _copy_release(tmp_path, "cultural_cues_hive", {"Llama": "Other"})
    hive = {k: v for k, v in hive.items() if k != "judge"} | {"models": {"Other-8B": "Other"}}
    with ResponseStore(tmp_path / "s.sqlite") as st:
        r = released.import_release("cultural_cues_hive", st, cfg.condition, release=hive)
        assert r["prompt_format"].tolist() == ["mcq_option", "mcq_explain"] and r["read"].tolist() == [1650, 1650]
        with pytest.raises(released.ReleaseError, match="format"):
            released.import_release("cultural_cues_hive", st, cfg.condition, release={**hive, "format": "csv"})


def test_seed003_table_III_denominators_equal_the_paper_on_the_kept_items(store, cfg):
    """Table III counts the judge's verdicts on the items kept for every table
    ("we removed partial answers and retained 147 questions per setting",
    §III.A), not on all 150. The three released models keep 148 (the paper's
    147 also drop an item left partial by a model whose answers are not
    shipped): GPT-5.2's and MedGemma-4B's six denominators then equal the
    paper's (on all 150, MedGemma-4B's Identity + Context is 86, not 85), and
    Llama-3.1-8B's exceed them by no more than that one item's three
    conditions per cue."""
    import re

    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(cfg), forms=("5opt",), config=cfg)
    resp = cultural.stored_responses(store.frame(), cs, forms=["5opt"], prompt_formats=["mcq_explain"], config=cfg)
    labels = cultural.judge_labels(judging.ask(None, store, cultural.judge_jobs(resp), model=None,
                                               prompt_format="cultural_judge", seed=0, max_tokens=1))
    kept = scoring.drop_incomplete(scoring.question_table(resp, cs.items["5opt"]),
                                   across=released.models("cultural_cues_hive"))
    t = cultural.table_judge(cultural.judge_counts(cultural.judged(kept.table, labels), cfg), cfg)
    entry = _published("07_table3_judge")
    assert kept.summary["retained"].tolist() == [148, 148, 148]
    den = lambda s: int(re.search(r"/ (\d+)", s).group(1))  # noqa: E731
    checked = 0
    for row, vals in entry["published"].items():
        if entry["rows"][row] not in t.index:
            continue
        for col, v in zip(entry["columns"], vals):
            ours = den(t.loc[entry["rows"][row], col])
            if row == "LLaMA":
                assert den(v) <= ours <= den(v) + 3, (row, col, v, ours)
            else:
                assert ours == den(v), (row, col, v, ours)
            checked += 1
    assert checked == 3 * 3


def test_table3_reason_counts_unreadable_answers_apart(monkeypatch):
    """A YES verdict on an explanation whose answer line cannot be read is a
    grounded explanation the error rate cannot score: the reason gives both
    counts (48 explanations, 47 with a readable answer), not 47 alone."""
    entry = _published("07_table3_judge")
    counts = pd.DataFrame({"model": ["MedGemma-4B"], "cue": ["ctx"], "grounded_unreadable": [1]})
    monkeypatch.setattr(published, "_our_table", lambda profile, name: counts if name == "07_table3_counts" else None)
    pub = dict(zip(entry["columns"], entry["published"]["MedGemma-4B"]))
    why = published.REASONS["judge_counts"](entry, "MedGemma-4B", "Context", pub, "11 / 47 (23.40%)", "x")
    assert "48 culture-referential explanations (47 with a readable answer) (paper 34)" in why
    plain = published.REASONS["judge_counts"](entry, "MedGemma-4B", "Identity", pub, "29 / 62 (46.77%)", "x")
    assert plain.startswith("the authors' released verdicts give the same number")
