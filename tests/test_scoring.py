"""The counting rules of medaudit.stats.scoring (``cultural_counting``): per model,
only a model's own incomplete items go; across models, an item one released
model left unparsed is dropped from every released model, and only such items."""
from __future__ import annotations

import pandas as pd
import pytest

from medaudit.stats import scoring


def _qt(unparsed: dict[str, set[tuple[str, str]]]) -> pd.DataFrame:
    rows = []
    for model in ("A", "B", "own"):
        for item in ("q1", "q2", "q3"):
            if model == "own" and item == "q3":
                continue                                  # the profile's own model answers a subset
            for cond in ("original", "neutral", "x:id"):
                bad = (item, cond) in unparsed.get(model, set())
                rows.append({"model": model, "prompt_format": "mcq_explain", "item_id": item, "condition": cond,
                             "parsed_answer": None if bad else "A", "gold": "A", "parsed": not bad,
                             "correct": float("nan") if bad else 1.0})
    return pd.DataFrame(rows)


def test_across_models_drops_exactly_the_items_some_released_model_left_unparsed():
    qt = _qt({"B": {("q2", "neutral")}, "own": {("q1", "x:id")}})
    across = scoring.drop_incomplete(qt, across=["A", "B"])
    kept = across.table.groupby("model")["item_id"].unique().map(sorted).to_dict()
    assert kept == {"A": ["q1", "q3"], "B": ["q1", "q3"], "own": ["q2"]}
    s = across.summary.set_index("model")
    assert s.loc["A", "complete"] == 3 and s.loc["A", "retained"] == 2 and s.loc["A", "rule"] == "across_models"
    assert s.loc["own", "rule"] == "per_model" and s.loc["own", "retained"] == 1
    d = across.dropped.set_index(["model", "item_id"])
    assert d.loc[("A", "q2"), "unparsed by"] == "B" and d.loc[("A", "q2"), "unparsed"] == ""
    assert d.loc[("B", "q2"), "unparsed"] == "neutral"
    # per model: only each model's own incomplete items go
    per = scoring.drop_incomplete(qt)
    assert per.table.groupby("model")["item_id"].nunique().to_dict() == {"A": 3, "B": 2, "own": 1}
    assert set(per.summary["rule"]) == {"per_model"}
    # nothing unparsed: both rules keep everything
    assert len(scoring.drop_incomplete(_qt({}), across=["A", "B"]).table) == len(_qt({}))


def test_the_counting_rule_is_a_profile_parameter_with_the_paper_default():
    from medaudit import config

    for prof in ("smoke", "default", "paper"):
        assert config.load(prof)["cultural_counting"] == "across_models"
    with pytest.raises(config.ConfigError, match="cultural_counting"):
        config.load("smoke", {"cultural_counting": "per_item"})
    assert set(scoring.COUNTING_RULES) == set(config.Profile.model_fields["cultural_counting"].annotation.__args__)
