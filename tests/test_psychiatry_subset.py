"""Seed 000 A.4's psychiatry subset as the paper profile draws it:
"423 questions identified via keywords spanning neurocognitive
conditions and substance use"."""
from __future__ import annotations

import pytest
import yaml

from medaudit.prep import data, selection
from medaudit import paths


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
    assert len(psych_a) == 75
    # seed 000 §2 excludes psychiatry from the main pool whatever A.4's subset is:
    # the 89 broad-only items stay out of the pool (789, not 878)
    assert len(main_a) == len(main_b) == 789
    assert list(main_a["item_id"]) == list(main_b["item_id"])
    assert set(psych_b["item_id"]).isdisjoint(main_a["item_id"])
    # the subset's rows carry the A.4 term that drew them
    assert set(psych_a["psychiatry_hit"].str.lower()) <= {t.lower() for t in _hits(psych_a, cfg)}
    with pytest.raises(ValueError, match="psychiatry_subset"):
        selection.funnel(medqa, {**cfg, "psychiatry_subset": "narrow"}, n_sample=None, seed=1)


def test_the_paper_profile_uses_the_a4_terms_and_the_others_keep_theirs():
    read = lambda p: yaml.safe_load(paths.params(f"{p}.yaml").read_text(encoding="utf-8"))   # noqa: E731
    assert read("paper")["psychiatry_subset"] == "a4"
    assert read("smoke")["psychiatry_subset"] == read("default")["psychiatry_subset"] == "broad"


def _hits(psych, cfg):
    a4 = selection.first_affirmed_match(psych, cfg["psychiatry_a4_terms"], cfg.get("psychiatry_exclude", ()),
                                        cfg.get("negation"))
    assert (a4 != "").all()
    return set(a4)


def test_the_subset_share_is_reported_against_the_seeds(pool):
    """Seed 000 A.4: 423 questions of MedQA-USMLE (12,723 items: train
    10,178 + dev 1,272 + test 1,273); the a4 terms on the test split draw
    75 of 1,273, 1.8 times the seed's rate."""
    medqa, cfg = pool
    _, _, psych = selection.funnel(medqa, {**cfg, "psychiatry_subset": "a4"}, n_sample=None, seed=1)
    t = selection.psychiatry_share(psych, len(medqa)).set_index("selection")
    assert (t.loc["seed 000 A.4", "n"], t.loc["seed 000 A.4", "of"]) == (423, 12723)
    assert (t.loc["this selection", "n"], t.loc["this selection", "of"]) == (75, 1273)
    assert t.loc["this selection", "share %"] == pytest.approx(5.89, abs=0.01)
    assert t.loc["this selection", "vs seed"] == pytest.approx(1.77, abs=0.01)
