"""Seed 003's Table III numerators under two gold readings.

* A small release in the authors' format, built here, where dropping partial
  answers shifts the gold: each item's own gold (``own``) and the authors'
  positional reading (``positional``: the p-th kept item against the gold of
  the p-th item of the unfiltered list) are counted through the import path
  and notebook 07's functions, against an oracle written as the misalignment
  arises (answers filtered, gold list not).
* The paper's items are read from its denominators, which do not depend on
  the reading; the published page explains each cell from the item rows.
* The shipped release: the three models' nine cells, as the issue states.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from medaudit import config, paths, released
from medaudit.studies import cultural
from medaudit.studies.cultural import table3
from medaudit.prep import goldreading
from medaudit.llm import judging
from medaudit.publish import published
from medaudit.stats import scoring
from medaudit.llm import ResponseStore

CULTURES, CUES = ("t1", "t2", "t3"), ("i", "c", "ic")
N_ITEMS = 8
MODELS = {"M-1": "M1", "M-2": "M2"}
UNPARSED = {"M-1": (1, "t2", "c"), "M-2": (4, "neutral", None)}   # the explanation without "The answer is X"
WRONG = {("M-2", 6, "t1", "ic"): "D", ("M-1", 2, "t3", "i"): "A"}  # answers other than the item's own gold
PAPER_EXTRA = 3          # a model whose files are not shipped leaves this item partial too


@pytest.fixture(scope="module")
def cfg():
    return cultural.load_config()


@pytest.fixture(scope="module")
def items(cfg):
    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(cfg), forms=("5opt",), config=cfg)
    return cs


def _gold() -> list[str]:
    q = json.loads(paths.raw("cultural_cues_hive", "final_augment_test_questions.json").read_text(encoding="utf-8"))
    return [x["answer_idx"] for x in q[:N_ITEMS]]


def _yes() -> np.ndarray:
    """yes[model, item, culture, cue]: the judge's verdicts of the small release."""
    return np.random.default_rng(7).random((len(MODELS), N_ITEMS, 3, 3)) < 0.5


def _answer(model: str, i: int, culture: str, cue: str | None, gold: list[str]) -> str | None:
    if UNPARSED[model] == (i, culture, cue):
        return None
    return WRONG.get((model, i, culture, cue), gold[i])


def _write_release(folder) -> dict:
    """Answers and verdicts of two models on the first N_ITEMS items, in the
    authors' file format, with their SHA256SUMS; returns the release spec."""
    folder.mkdir()
    gold, yes = _gold(), _yes()
    for m, (name, part) in enumerate(MODELS.items()):
        answers, verdicts = [], []
        for i in range(N_ITEMS):
            def text(culture, cue):
                a = _answer(name, i, culture, cue, gold)
                return "A brief rationale." + ("" if a is None else f"\nThe answer is {a}")
            answers.append({"original": text("original", None), "neutral": text("neutral", None),
                            **{t: {c: text(t, c) for c in CUES} for t in CULTURES}})
            verdicts.append({"original": "[NO]", "neutral": "[NO]",
                             **{t: {c: "Cultural framing. [YES]" if yes[m, i, ti, ci] else "[NO]"
                                    for ci, c in enumerate(CUES)} for ti, t in enumerate(CULTURES)}})
        (folder / f"Final_{part}_short_augment_answers.json").write_text(json.dumps(answers))
        (folder / f"Final_{part}_judge.json").write_text(json.dumps(verdicts))
    sums = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in sorted(folder.iterdir()))
    (folder / "SHA256SUMS").write_text(sums)
    return {"format": "hive", "folder": str(folder), "models": MODELS, "letters": "ABCDE", "item_prefix": "cult-",
            "answers": {"Final_{file}_short_augment_answers.json": "mcq_explain"},
            "judge": {"name": "Judge", "prompt_format": "cultural_judge", "judged_format": "mcq_explain",
                      "pattern": "Final_{file}_judge.json", "files": MODELS}}


def _oracle(dropped: set[int], reading: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(wrong, grounded) per model and cue, written as the authors' counting
    arises: the answers of the items not dropped, in order, zipped with the
    gold list — filtered too (own) or not (positional)."""
    gold, yes = _gold(), _yes()
    kept = [i for i in range(N_ITEMS) if i not in dropped]
    golds = [gold[i] for i in kept] if reading == "own" else gold
    out = {}
    for m, name in enumerate(MODELS):
        for ci, cue in enumerate(CUES):
            wrong = n = 0
            for p, i in enumerate(kept):
                for ti, culture in enumerate(CULTURES):
                    a = _answer(name, i, culture, cue, gold)
                    if yes[m, i, ti, ci] and a is not None:
                        n += 1
                        wrong += a != golds[p]
            out[(name, {"i": "id", "c": "ctx", "ic": "id+ctx"}[cue])] = (wrong, n)
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory, cfg, items):
    """The small release imported and taken through notebook 07's path."""
    tmp = tmp_path_factory.mktemp("t3")
    spec = _write_release(tmp / "hive")
    with ResponseStore(tmp / "s.sqlite") as st:
        released.import_release("cultural_cues_hive", st, cfg.condition, release=spec)
        resp = cultural.stored_responses(st.frame(), items, forms=["5opt"], prompt_formats=["mcq_explain"],
                                         config=cfg)
        labels = cultural.judge_labels(judging.ask(None, st, cultural.judge_jobs(resp), model=None,
                                                   prompt_format="cultural_judge", seed=0, max_tokens=1))
    before = scoring.question_table(resp, items.items["5opt"])
    kept = scoring.drop_incomplete(before, across=list(MODELS))
    order = list(items.items["5opt"].sort_values("index")["item_id"])
    return before, kept.table, labels, order


def test_the_drop_shifts_the_gold_by_the_items_dropped_before(small, cfg):
    before, kept, _, order = small
    assert sorted(kept["item_id"].unique()) == [f"cult-{i:03d}" for i in (0, 2, 3, 5, 6, 7)]
    pos = goldreading.rescore(kept, before, "positional", order)
    src = pos.drop_duplicates(["model", "item_id"]).set_index(["model", "item_id"])["gold_from"]
    # item 0 precedes every drop; after the drops of 1 and 4 an item reads the gold one or two places earlier
    assert src.loc["M-1"].to_dict() == {"cult-000": "cult-000", "cult-002": "cult-001", "cult-003": "cult-002",
                                        "cult-005": "cult-003", "cult-006": "cult-004", "cult-007": "cult-005"}
    gold = _gold()
    assert (pos["gold"] == [gold[int(s[-3:])] for s in pos["gold_from"]]).all()
    own = goldreading.rescore(kept, before, "own", order)
    pd.testing.assert_frame_equal(own.drop(columns="gold_from"), kept)
    # M-2 answered item 6 (gold C) with D under one condition: wrong by its own gold, right by item 4's (D)
    cond = cfg.condition("t1", "ic")
    row = lambda f: f[(f["model"] == "M-2") & (f["item_id"] == "cult-006") & (f["condition"] == cond)]  # noqa: E731
    assert row(own)["correct"].item() == 0 and row(pos)["correct"].item() == 1
    with pytest.raises(ValueError, match="gold reading 'shifted'"):
        goldreading.rescore(kept, before, "shifted", order)


def test_both_readings_of_table3_equal_the_oracle(small, cfg):
    before, kept, labels, order = small
    r = table3.readings(kept, before, labels, cfg, order).set_index(["model", "cue"])
    want = {x: _oracle({1, 4}, x) for x in goldreading.READINGS}
    for (model, cue), (w_own, n) in want["own"].items():
        assert (int(r.loc[(model, cue), "grounded"]), int(r.loc[(model, cue), "wrong (own gold)"])) == (n, w_own)
        assert int(r.loc[(model, cue), "wrong (positional gold)"]) == want["positional"][(model, cue)][0]
    assert set(r["items"]) == {6}
    # the readings differ here, as in the seed: own gold counts only the two answers planted wrong
    assert r["wrong (own gold)"].sum() <= 2 < r["wrong (positional gold)"].sum()
    text = table3.finding(r.reset_index())
    assert "each item's own gold letter" in text and "positional gold" in text


def _published_cells(dropped: set[int]) -> pd.DataFrame:
    """Published-looking cells: the positional oracle on the paper's items."""
    labels = {"id": "Identity", "ctx": "Context", "id+ctx": "Identity + Context"}
    rows = []
    for (model, cue), (w, n) in _oracle(dropped, "positional").items():
        rows.append({"row": model, "column": labels[cue], "model": model, "cue": cue,
                     "published": f"{w} / {n} ({100 * w / n if n else 0:.2f}%)", "wrong": w, "grounded": n})
    return pd.DataFrame(rows)


def test_the_papers_items_are_read_from_its_denominators_and_the_positional_reading_reproduces_it(small, cfg):
    before, kept, labels, order = small
    expl = table3.explanation_rows(kept, before, labels, order)
    assert len(expl) == len(MODELS) * N_ITEMS * 11 and expl["kept"].sum() == len(MODELS) * 6 * 11
    cells = _published_cells({1, 4, PAPER_EXTRA})
    table, found = table3.cell_readings(expl, cells, cfg)
    assert found["extra"] == (f"cult-{PAPER_EXTRA:03d}",) and found["matches"] == 1 and found["kept"] == 5
    assert set(table["reproduced by"]) <= {"positional gold", "own gold and positional gold"}
    assert (table["reproduced by"] != "own gold and positional gold").any()
    # the paper's items are ours: nothing to find, the kept items reproduce
    table0, found0 = table3.cell_readings(expl, _published_cells({1, 4}), cfg)
    assert found0["size"] == 0 and found0["extra"] == () and "neither" not in set(table0["reproduced by"])
    # a model without files: its cells say so
    extra = pd.DataFrame([{"row": "X", "column": "Identity", "model": "X-1", "cue": "id", "published": "1 / 2 (50.00%)",
                           "wrong": 1, "grounded": 2}])
    t, _ = table3.cell_readings(expl, pd.concat([cells, extra], ignore_index=True), cfg)
    assert t.set_index("row").loc["X", "reproduced by"] == "not released"


def test_the_published_page_explains_each_cell_from_the_item_rows(small, cfg, tmp_path, monkeypatch):
    before, kept, labels, order = small
    data = tmp_path / "outputs" / "p" / "data"
    data.mkdir(parents=True)
    table3.explanation_rows(kept, before, labels, order).to_json(data / "07_t3.jsonl", orient="records", lines=True)
    monkeypatch.setattr(paths, "outputs",
                        lambda profile, *parts, mkdir=True: tmp_path.joinpath("outputs", profile, *parts))
    cells = _published_cells({1, 4, PAPER_EXTRA})
    entry = {"rows": {m: m for m in MODELS}, "columns": ["Identity", "Context", "Identity + Context"],
             "published": {m: list(cells[cells["model"] == m]["published"]) for m in MODELS},
             "gold_readings": "07_t3"}
    table, found = published.gold_readings(entry, "p")
    assert found["extra"] == (f"cult-{PAPER_EXTRA:03d}",)
    pub = dict(zip(entry["columns"], entry["published"]["M-1"]))
    why = published.REASONS["gold_reading"](entry, "M-1", "Context", pub, "", "p")
    assert "own gold" in why and "positional" in why and f"ours less cult-{PAPER_EXTRA:03d}" in why
    assert why.endswith("is reproduced by: positional gold.") or "own gold and positional gold" in why
    note = published.readings_note(found)
    assert f"cult-{PAPER_EXTRA:03d}" in note and "exactly one set of 1" in note


def test_the_reading_is_a_profile_parameter_with_each_items_own_gold_the_default():
    for prof in ("smoke", "default", "paper"):
        assert config.load(prof)["cultural_table3_gold"] == "own"
    with pytest.raises(config.ConfigError, match="cultural_table3_gold"):
        config.load("smoke", {"cultural_table3_gold": "shifted"})
    assert set(goldreading.READINGS) == set(config.Profile.model_fields["cultural_table3_gold"].annotation.__args__)
    assert config.load("smoke", {"cultural_table3_gold": "positional"})["cultural_table3_gold"] == "positional"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, cfg, items):
    with ResponseStore(tmp_path_factory.mktemp("ship") / "s.sqlite") as st:
        released.import_release("cultural_cues_hive", st, cfg.condition)
        resp = cultural.stored_responses(st.frame(), items, forms=["5opt"], prompt_formats=["mcq_explain"],
                                         config=cfg)
        labels = cultural.judge_labels(judging.ask(None, st, cultural.judge_jobs(resp), model=None,
                                                   prompt_format="cultural_judge", seed=0, max_tokens=1))
    before = scoring.question_table(resp, items.items["5opt"])
    kept = scoring.drop_incomplete(before, across=released.models("cultural_cues_hive"))
    order = list(items.items["5opt"].sort_values("index")["item_id"])
    return table3.explanation_rows(kept.table, before, labels, order)


def test_shipped_release_the_positional_reading_reproduces_the_nine_cells_on_the_papers_items(shipped, cfg):
    """The three shipped models keep 148 items (MedGemma-4B leaves 36 and 44
    partial); the paper's denominators single out one more item, 43, which a
    model whose files are not shipped left partial; on those 147 the
    positional reading gives every published numerator of the three models
    and each item's own gold none (the issue's counts: Llama 22/63, GPT-5.2
    0/35, …)."""
    entry = next(e for e in published.load() if e["ours"] == "07_table3_judge")
    rows = []
    cue = {cfg.cue_label(q, long=True): q for q in cfg.cue_names}
    for row, vals in entry["published"].items():
        for col, v in zip(entry["columns"], vals):
            w, n = published.numbers(v)[:2]
            rows.append({"row": row, "column": col, "model": entry["rows"][row], "cue": cue[col], "published": v,
                         "wrong": int(w), "grounded": int(n)})
    table, found = table3.cell_readings(shipped, pd.DataFrame(rows), cfg)
    assert found["extra"] == ("cult-043",) and found["matches"] == 1 and found["kept"] == 147
    t = table.set_index(["row", "column"])
    shipped_rows = ["LLaMA", "GPT-5.2", "MedGemma-4B"]
    assert (t.loc[shipped_rows, "reproduced by"] == "positional gold").all()
    assert set(t.loc[["MedGemma-27B", "DeepSeek-R1"], "reproduced by"]) == {"not released"}
    own = t["own gold, paper's items"].to_dict()
    assert [own[("LLaMA", c)] for c in entry["columns"]] == ["22 / 63", "11 / 40", "31 / 82"]
    assert [own[("GPT-5.2", c)] for c in entry["columns"]] == ["0 / 35", "1 / 39", "4 / 43"]
    assert [own[("MedGemma-4B", c)] for c in entry["columns"]] == ["29 / 62", "11 / 34", "41 / 85"]
    # on the 148 items the shipped files keep, neither reading gives a published cell
    assert t.loc[("LLaMA", "Identity"), "positional gold"] == "43 / 65"
    printed = t.loc[shipped_rows, "published"].str.split(" (", regex=False).str[0]
    assert not (t.loc[shipped_rows, "positional gold"] == printed).any()
    # a fourth release that leaves item 43 partial (as the MedGemma-27B does) makes our kept items the
    # paper's: nothing left to find, and the kept items reproduce the nine cells
    fourth = shipped.assign(kept=shipped["kept"] & (shipped["item_id"] != "cult-043"))
    table4, found4 = table3.cell_readings(fourth, pd.DataFrame(rows), cfg)
    assert found4["size"] == 0 and found4["kept"] == 147
    t4 = table4.set_index(["row", "column"]).loc[shipped_rows]
    assert (t4["reproduced by"] == "positional gold").all() and (t4["needs"] == "").all()
    assert "the paper's items are ours" in published.readings_note(found4)
