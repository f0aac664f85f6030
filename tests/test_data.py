"""Data loaders: broken fixture files (tests/fixtures/, built by
make_fixtures.py from real records) and the real shipped files."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from medaudit.prep import data
from medaudit import paths

FIX = Path(__file__).resolve().parent / "fixtures"
SKIPPED_COLUMNS = ["file", "record", "field", "problem"]


def load_m4(path, errors="raise"):
    return data.load_medqa(path, 4, errors)


def load_mts(path, errors="raise"):
    return data.load_mts_dialog(path, errors)


# --------------------------------------------------------------------------
# the good fixtures load completely (so the broken ones fail for their break)


def test_good_medqa_fixture_loads_four_real_records():
    df, skipped = data.load_medqa(FIX / "medqa4_good.jsonl", 4, "skip")
    assert len(df) == 4 and skipped.empty
    real = data.load_medqa(paths.raw(*data.MEDQA4)).records.iloc[:4]
    assert list(df["question"]) == list(real["question"])
    assert list(df["item_id"]) == ["medqa4-0000", "medqa4-0001", "medqa4-0002", "medqa4-0003"]


def test_good_mts_fixture_loads_four_real_records():
    df, skipped = load_mts(FIX / "mts_good.csv", "skip")
    real = load_mts(paths.raw("mts_dialog", "MTS-Dialog-ValidationSet.csv")).records.iloc[:4]
    assert skipped.empty
    assert list(df["dialogue"]) == list(real["dialogue"])
    assert list(df["source_id"]) == list(real["source_id"])


# --------------------------------------------------------------------------
# one bad record per file: (fixture, loader, record, field, words in problem, good ids)

BROKEN = [
    pytest.param("medqa4_truncated_line3.jsonl", load_m4, "line 3", "(json)", ["JSON"],
                 ["medqa4-0000", "medqa4-0001", "medqa4-0003"], id="truncated-json"),
    pytest.param("medqa4_missing_option_C_line2.jsonl", load_m4, "line 2", "options", ["'C'"],
                 ["medqa4-0000", "medqa4-0002", "medqa4-0003"], id="missing-option-C"),
    pytest.param("medqa4_answer_E_line4.jsonl", load_m4, "line 4", "answer_idx", ["'E'"],
                 ["medqa4-0000", "medqa4-0001", "medqa4-0002"], id="answer-letter-E"),
    pytest.param("medqa4_answer_differs_line3.jsonl", load_m4, "line 3", "answer", ["differs", "option B"],
                 ["medqa4-0000", "medqa4-0001", "medqa4-0003"], id="answer-differs-from-option"),
    pytest.param("medqa4_empty_question_line2.jsonl", load_m4, "line 2", "question", ["empty"],
                 ["medqa4-0000", "medqa4-0002", "medqa4-0003"], id="empty-question"),
    pytest.param("mts_empty_dialogue_row4.csv", load_mts, "row 4", "dialogue", ["empty"],
                 ["0", "1", "3"], id="mts-empty-dialogue"),
]

ENCODING = [
    pytest.param("medqa4_latin1_line2.jsonl", load_m4, "line 2", "(encoding)", ["UTF-8"],
                 ["medqa4-0000", "medqa4-0002", "medqa4-0003"], id="latin1-encoding"),
]
FILE_LEVEL = [
    pytest.param("medqa4_empty.jsonl", load_m4, "(file)", "(file)", ["empty"], [], id="empty-file"),
    pytest.param("mts_missing_dialogue_column.csv", load_mts, "header", "dialogue", ["missing"], [],
                 id="mts-missing-dialogue-column"),
]


def _ids(df: pd.DataFrame) -> list[str]:
    if df.empty:
        return []
    return list(df["item_id"] if "item_id" in df else df["source_id"])


@pytest.mark.parametrize("name, load, record, field, words, good", BROKEN + ENCODING + FILE_LEVEL)
def test_raise_names_file_record_and_field(name, load, record, field, words, good):
    path = FIX / name
    with pytest.raises(data.DataError) as ei:
        load(path)
    e = ei.value
    msg = str(e)
    assert str(path) in msg
    assert f"{record}:" in msg
    assert f"field '{field}'" in msg
    assert (e.file, e.record, e.field) == (str(path), record, field)
    for w in words:
        assert w in e.problem


@pytest.mark.parametrize("name, load, record, field, words, good", BROKEN)
def test_skip_keeps_good_records_and_lists_exactly_the_bad(name, load, record, field, words, good):
    path = FIX / name
    loaded = load(path, "skip")
    assert isinstance(loaded, data.Loaded)
    assert _ids(loaded.records) == good
    sk = loaded.skipped
    assert list(sk.columns) == SKIPPED_COLUMNS
    assert len(sk) == 1
    row = sk.iloc[0]
    assert (row["file"], row["record"], row["field"]) == (str(path), record, field)
    assert all(w in row["problem"] for w in words)


def _check_skip(path, loaded, record, field, words, good):
    assert _ids(loaded.records) == good
    sk = loaded.skipped
    assert list(sk.columns) == SKIPPED_COLUMNS and len(sk) == 1
    row = sk.iloc[0]
    assert (row["file"], row["record"], row["field"]) == (str(path), record, field)
    assert all(w in row["problem"] for w in words)


@pytest.mark.parametrize("name, load, record, field, words, good", ENCODING)
def test_skip_leaves_out_only_the_badly_encoded_line(name, load, record, field, words, good):
    path = FIX / name
    _check_skip(path, load(path, "skip"), record, field, words, good)


@pytest.mark.parametrize("name, load, record, field, words, good", FILE_LEVEL)
def test_skip_reports_file_level_problems(name, load, record, field, words, good):
    path = FIX / name
    _check_skip(path, load(path, "skip"), record, field, words, good)


def test_latin1_fixture_really_is_latin1_in_a_question():
    raw = (FIX / "medqa4_latin1_line2.jsonl").read_bytes()
    line2 = raw.split(b"\n")[1]
    with pytest.raises(UnicodeDecodeError):
        line2.decode("utf-8")
    assert b"fianc\xe9" in line2
    # with the one byte re-encoded as UTF-8 it is the real record again
    fixed = json.loads(line2.replace(b"\xe9", "é".encode("utf-8")).decode("utf-8"))
    assert "fiancé" in fixed["question"]


def test_errors_argument_is_checked():
    with pytest.raises(ValueError, match="errors must be"):
        data.load_medqa(FIX / "medqa4_good.jsonl", 4, errors="ignore")


def test_missing_file_raises_dataerror(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.load_medqa(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------
# the real files


def test_medqa4_real_count_and_answer_letters(medqa4):
    assert len(medqa4) == 1273
    assert medqa4["answer_idx"].value_counts().to_dict() == {"A": 353, "B": 309, "C": 346, "D": 265}
    assert medqa4["item_id"].is_unique
    assert all(list(o) == ["A", "B", "C", "D"] for o in medqa4["options"])
    assert all(o[k] == a for o, k, a in zip(medqa4["options"], medqa4["answer_idx"], medqa4["answer"]))


def test_medqa5_real_count_and_options():
    df, skipped = data.load_medqa(paths.raw(*data.MEDQA5), 5, "skip")
    assert len(df) == 1273 and skipped.empty
    assert all(list(o) == ["A", "B", "C", "D", "E"] for o in df["options"])
    assert set(df["answer_idx"]) == set("ABCDE")
    assert df["item_id"].iloc[0] == "medqa5-0000"


def test_medqa5_file_is_not_valid_as_four_options():
    # the option count is really checked: the 5-option file fails as a 4-option set
    df, skipped = data.load_medqa(paths.raw(*data.MEDQA5), 4, "skip")
    assert len(df) == 0 and len(skipped) == 1273
    assert set(skipped["field"]) == {"options"}


@pytest.mark.parametrize("fname, n", [
    ("MTS-Dialog-TrainingSet.csv", 1201),
    ("MTS-Dialog-ValidationSet.csv", 100),
    ("MTS-Dialog-TestSet-1-MEDIQA-Chat-2023.csv", 200),
    ("MTS-Dialog-TestSet-2-MEDIQA-Sum-2023.csv", 200),
])
def test_mts_real_counts(fname, n):
    df, skipped = load_mts(paths.raw("mts_dialog", fname), "skip")
    assert len(df) == n and skipped.empty
    assert df["dialog_id"].is_unique
    assert (df["dialogue"].str.strip() != "").all()


ACI_COUNTS = {"train": 67, "valid": 20, "clinicalnlp_taskB_test1": 40,
              "clinicalnlp_taskC_test2": 40, "clef_taskC_test3": 40}


@pytest.mark.parametrize("split, n", ACI_COUNTS.items())
def test_aci_real_counts(split, n):
    df, skipped = data.load_aci_bench(paths.raw("aci_bench", "challenge_data", f"{split}.csv"),
                                      errors="skip")
    assert len(df) == n and skipped.empty
    assert (df["split"] == split).all()


def test_aci_total_and_gender_stripped():
    d = data.load_dialogs().records
    aci = d[d["dataset"] == "aci_bench"]
    assert len(aci) == sum(ACI_COUNTS.values()) == 207
    assert len(d[d["dataset"] == "mts_dialog"]) == 1201 + 100 + 200 + 200
    # the raw metadata really has a trailing space ...
    raw_meta = pd.read_csv(paths.raw("aci_bench", "challenge_data", "train_metadata.csv"),
                           dtype=str, keep_default_na=False)
    assert (raw_meta["patient_gender"] == "female ").any()
    # ... and the loaded table has none
    g = aci["patient_gender"]
    assert (g == g.str.strip()).all()
    assert set(g) <= {"female", "male", ""}
    assert (g == "female").sum() > 0 and (g == "male").sum() > 0


def test_aci_names_from_metadata(aci_train):
    first = aci_train.iloc[0]
    assert first["source_id"] == "D2N001"
    assert first["names"] == ["Martha", "Collins"]
    assert first["patient_age"] == "50"


def test_cultural_augments_real():
    df, skipped = data.load_cultural_augments(paths.raw(*data.CULTURAL), "skip")
    assert len(df) == 150 and skipped.empty
    want = {(t, c) for t in ("t1", "t2", "t3") for c in ("i", "c", "ic")}
    assert all(set(v) == want for v in df["variants"])
    assert all(list(o) == ["A", "B", "C", "D", "E"] for o in df["options"])


def test_load_summary_zero_skipped_everywhere():
    s = data.load_summary()
    assert list(s.columns) == ["dataset", "file", "records", "skipped"]
    assert len(s) == 2 + 4 + 5 + 1
    assert (s["skipped"] == 0).all()
    counts = dict(zip(s["file"], s["records"]))
    assert counts["medqa_usmle_4options/phrases_no_exclude_test.jsonl"] == 1273
    assert counts["medqa_usmle_5options/test.jsonl"] == 1273
    assert counts["mts_dialog/MTS-Dialog-TrainingSet.csv"] == 1201
    assert counts["aci_bench/challenge_data/train.csv"] == 67
    assert counts["cultural_cues_hive/final_augment_test_questions.json"] == 150
    assert s["records"].sum() == 1273 * 2 + 1701 + 207 + 150


# --------------------------------------------------------------------------
# the MedQA files are a profile parameter


def test_medqa_files_default_is_the_shipped_test_split():
    import yaml
    for prof in ("smoke", "default", "paper"):
        p = yaml.safe_load((paths.project_root() / "params" / f"{prof}.yaml").read_text())
        assert p["medqa_files"] == ["medqa_usmle_4options/phrases_no_exclude_test.jsonl"], prof
    got = data.load_medqa_files(["medqa_usmle_4options/phrases_no_exclude_test.jsonl"]).records
    real = data.load_medqa(paths.raw(*data.MEDQA4)).records
    assert list(got["item_id"]) == list(real["item_id"]) and list(got["row"]) == list(real["row"])
    assert (got["source"] == "medqa_usmle_4options/phrases_no_exclude_test.jsonl").all()


def test_medqa_files_train_dev_test(tmp_path):
    """A researcher with MedQA's train and dev files lists them beside the
    test file (absolute paths, or relative to data/raw/): ids stay unique
    and the test items keep their ids (medqa4-0229 is medqa4-0229)."""
    lines = paths.raw(*data.MEDQA4).read_text(encoding="utf-8").splitlines()
    (tmp_path / "phrases_no_exclude_train.jsonl").write_text("\n".join(lines[:5]) + "\n", encoding="utf-8")
    (tmp_path / "phrases_no_exclude_dev.jsonl").write_text("\n".join(lines[5:8]) + "\n", encoding="utf-8")
    files = [str(tmp_path / "phrases_no_exclude_train.jsonl"), str(tmp_path / "phrases_no_exclude_dev.jsonl"),
             "medqa_usmle_4options/phrases_no_exclude_test.jsonl"]
    df = data.load_medqa_files(files).records
    assert len(df) == 5 + 3 + 1273 and df["item_id"].is_unique and df["row"].is_unique
    assert list(df["item_id"][:2]) == ["medqa4-train-0000", "medqa4-train-0001"]
    assert df["item_id"].iloc[5] == "medqa4-dev-0000"
    assert "medqa4-0229" in set(df["item_id"]) and df["row"].is_monotonic_increasing
    with pytest.raises(ValueError, match="two files"):
        data.load_medqa_files([files[0], files[0]])
