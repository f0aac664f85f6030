"""Seed 000 A.4's psychiatry subset as the paper profile draws it:
"423 questions identified via keywords spanning neurocognitive
conditions and substance use"."""
from __future__ import annotations

import pytest
import yaml

from medaudit import data, paths, selection


@pytest.fixture(scope="module")
def pool():
    medqa = data.load_medqa(paths.raw(*data.MEDQA4)).records
    return medqa, selection.load_selection(paths.params("selection.yaml"))


def test_the_a4_reading_draws_the_subset_from_neurocognitive_and_substance_terms_only(pool):
    medqa, cfg = pool
    _, main_b, psych_b = selection.funnel(medqa, cfg, n_sample=None, seed=1)
    _, main_a, psych_a = selection.funnel(medqa, {**cfg, "psychiatry_subset": "a4"}, n_sample=None, seed=1)
    assert len(psych_b) == 164                       # the broad list: 12.9 % of the 1,273 test items
    assert 0 < len(psych_a) < len(psych_b)
    assert set(psych_a["item_id"]) <= set(psych_b["item_id"])
    # every A.4 item is flagged by a neurocognitive or substance-use term; the others return to the main pool
    cmp = selection.psychiatry_comparison(psych_b, cfg)
    assert set(psych_a["item_id"]) == set(cmp.loc[cmp["a4_scope"], "item_id"])
    assert len(main_a) == len(main_b) + len(psych_b) - len(psych_a)
    with pytest.raises(ValueError, match="psychiatry_subset"):
        selection.funnel(medqa, {**cfg, "psychiatry_subset": "narrow"}, n_sample=None, seed=1)


def test_the_paper_profile_uses_the_a4_terms_and_the_others_keep_theirs():
    read = lambda p: yaml.safe_load(paths.params(f"{p}.yaml").read_text(encoding="utf-8"))   # noqa: E731
    assert read("paper")["psychiatry_subset"] == "a4"
    assert read("smoke")["psychiatry_subset"] == read("default")["psychiatry_subset"] == "broad"
