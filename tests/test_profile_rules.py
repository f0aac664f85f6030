"""The rule parameters of a profile (medqa_files, unparsed_rule,
judge_context) are checked like every other key."""
from __future__ import annotations

import pytest

from medaudit import config
from medaudit.studies import openended
from medaudit.stats import uncertainty


def test_fixed_name_sets_follow_the_library():
    assert config.JUDGE_CONTEXTS == openended.JUDGE_CONTEXTS
    assert set(config.UNPARSED_RULES) == set(uncertainty.UNPARSED_RULES)


def test_the_profiles_vocabulary_is_the_librarys():
    """The names a profile may give are the ones the library uses: imported
    where config can import their home cheaply (the data loaders' SOAP
    datasets, perturb's base condition), else kept equal here (a study's
    option forms: config cannot import a study)."""
    from typing import get_args

    from medaudit.prep import amqa, data, goldreading, perturb, selection
    from medaudit.studies import cultural, soap
    from medaudit.stats import scoring

    assert config.SOAP_DATASETS is data.SOAP_DATASETS and config.BASE is perturb.BASE
    assert config.CULTURAL_FORMS == cultural.FORMS
    allowed = {k: get_args(f.annotation) for k, f in config.Profile.model_fields.items()}
    assert allowed["cultural_decoding"] == cultural.DECODINGS
    assert allowed["soap_note_decoding"] == soap.DECODINGS
    assert allowed["openended_answer_prompt"] == openended.ANSWER_PROMPTS
    assert allowed["cultural_table3_gold"] == goldreading.READINGS
    assert allowed["cultural_counting"] == scoring.COUNTING_RULES
    assert allowed["psychiatry_subset"] == tuple(selection.PSYCHIATRY_SUBSETS)
    assert get_args(allowed["fairmedqa_extract"][0]) == amqa.EXTRACT
    with pytest.raises(ValueError, match="use '5opt' and/or '4opt'"):
        cultural.variants("unused.json", "", forms=("6opt",), config=None)


def test_model_stages_are_the_stages_the_notebooks_test_for():
    """``model_stages`` switches off what notebooks 07 and 08 guard with
    ``if "<stage>" in model_stages``: the profile's names and the notebooks'
    are the same set (a stage renamed on one side would never run or never stop)."""
    import re
    from pathlib import Path

    import nbformat

    root = Path(__file__).resolve().parents[1] / "notebooks"
    used = set()
    for nb in ("07_cultural_flips.ipynb", "08_fairness_disparities.ipynb"):
        code = "\n".join(c.source for c in nbformat.read(root / nb, as_version=4).cells if c.cell_type == "code")
        used |= set(re.findall(r"""["']([a-z_]+)["'] in model_stages""", code))
    assert used == set(config.MODEL_STAGES), used ^ set(config.MODEL_STAGES)


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
    from medaudit.prep import data
    from medaudit import paths
    f = tmp_path / "phrases_no_exclude_dev.jsonl"
    f.write_text(paths.raw(*data.MEDQA4).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert config.load("smoke", {"medqa_files": [str(f), *data.MEDQA4_FILES]})["medqa_files"][0] == str(f)
