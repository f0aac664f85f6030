"""The rule parameters of a profile (medqa_files, unparsed_rule,
judge_context) are checked like every other key."""
from __future__ import annotations

import pytest

from medaudit import config, openended, uncertainty


def test_fixed_name_sets_follow_the_library():
    assert config.JUDGE_CONTEXTS == openended.JUDGE_CONTEXTS
    assert set(config.UNPARSED_RULES) == set(uncertainty.UNPARSED_RULES)


def test_paper_profile_uses_the_seeds_rules():
    p = config.load("paper")
    assert p["unparsed_rule"] == "incorrect" and p["judge_context"] == "question"


@pytest.mark.parametrize("key, value, expect", [
    ("medqa_files", ["medqa_usmle_4options/phrases_no_exclude_train.jsonl"], "no such file"),
    ("medqa_files", [], "at least 1"),
    ("unparsed_rule", "skip", "incorrect"),
    ("judge_context", "options", "question"),
    ("fairmedqa_margin", 0, "greater than 0"),          # an equivalence margin is a positive number
    ("cultural_margin", 150, "less than or equal to 100"),
    ("calibration_margin", "two", "valid number"),
])
def test_bad_values_are_errors(key, value, expect):
    with pytest.raises(config.ConfigError, match=expect):
        config.load("smoke", {key: value})


def test_an_absolute_medqa_file_is_accepted(tmp_path):
    from medaudit import data, paths
    f = tmp_path / "phrases_no_exclude_dev.jsonl"
    f.write_text(paths.raw(*data.MEDQA4).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert config.load("smoke", {"medqa_files": [str(f), *data.MEDQA4_FILES]})["medqa_files"][0] == str(f)
