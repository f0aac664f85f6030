"""The rule for unparsed answers is a parameter, the
seed's rule by default in the paper profile, and the accuracy table shows
the parse rates beside the accuracy, with the rule in its caption."""
from __future__ import annotations

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint
import yaml

from medaudit.studies import calibration
from medaudit import paths


@pytest.fixture(scope="module")
def real_responses(medqa4):
    """Three real MedQA items, K = 4 samples at base and +homo: the first
    always right, the second right twice and unparsed twice, the third never
    parsed under +homo."""
    it = medqa4.iloc[[0, 1, 2]].assign(subset="main")
    g = dict(zip(it["item_id"], it["answer_idx"]))
    i0, i1, i2 = it["item_id"]
    spec = {(i0, "base"): [g[i0]] * 4, (i0, "+homo"): [g[i0]] * 4,
            (i1, "base"): [g[i1]] * 4, (i1, "+homo"): [g[i1], None, g[i1], None],
            (i2, "base"): [g[i2]] * 4, (i2, "+homo"): [None] * 4}
    rows = [{"model": "m", "item_id": i, "condition": c, "prompt_format": "mcq", "sample": k,
             "parsed_answer": a, "answer_logprob": None, "letter_logprobs": None}
            for (i, c), ans in spec.items() for k, a in enumerate(ans)]
    return pd.DataFrame(rows), it


def test_questions_follow_the_rule(real_responses):
    r, it = real_responses
    seed = calibration.questions(r, it, seed=0, unparsed="incorrect")
    drop = calibration.questions(r, it, seed=0, unparsed="drop")
    homo = lambda qt: qt[qt["condition"] == "+homo"].set_index("item_id")      # noqa: E731
    i2 = it["item_id"].iloc[2]
    assert homo(seed).loc[i2, "single_correct"] == 0.0 and pd.isna(homo(drop).loc[i2, "single_correct"])


def test_accuracy_table_shows_parse_rates_and_the_rule(real_responses):
    r, it = real_responses
    t = calibration.accuracy_table(calibration.questions(r, it, seed=0, unparsed="incorrect"), "incorrect")
    homo = t[t["condition"] == "+homo"].iloc[0]
    assert homo["questions"] == 3 and homo["scored"] == 3
    assert homo["samples parsed (%)"] == pytest.approx(100 * 6 / 12)
    assert homo["questions ≥ half parsed (%)"] == pytest.approx(100 * 2 / 3)   # seed Table 3's measure
    assert homo["no parsed sample"] == 1
    # each rate with its N and a 95 % interval that covers (Korn–Graubard: 12 samples of 3 questions)
    from medaudit.stats import intervals
    assert homo["samples"] == 12 and homo["samples parsed lo"] < 50 < homo["samples parsed hi"]
    cp = proportion_confint(2, 3, method="beta")
    assert (homo["questions ≥ half parsed lo"], homo["questions ≥ half parsed hi"]) == pytest.approx(
        (100 * cp[0], 100 * cp[1]))
    q = calibration.questions(r, it, seed=0, unparsed="incorrect")
    acc = intervals.proportion_interval(q.loc[q["condition"] == "+homo", "single_correct"].to_numpy(float))
    assert (homo["accuracy lo"], homo["accuracy hi"]) == pytest.approx((100 * acc["lo"], 100 * acc["hi"]))
    base = t[t["condition"] == "base"].iloc[0]
    assert base["accuracy (%)"] == 100.0 and base["samples parsed (%)"] == 100.0
    d = calibration.accuracy_table(calibration.questions(r, it, seed=0, unparsed="drop"), "drop")
    assert d[d["condition"] == "+homo"].iloc[0]["scored"] < 3
    assert "incorrect" in calibration.unparsed_note("incorrect") and "left out" in calibration.unparsed_note("drop")
    with pytest.raises(ValueError):
        calibration.unparsed_note("skip")


# ------------------------------------------------------------------ the token-probability baseline (B.3)


@pytest.fixture(scope="module")
def qt_joint(medqa4):
    """A question table on 60 real item ids: correctness drops by 10 items
    under +homo, by 5 under +Cat and by 30 under +homo+Cat; the token
    probability confidence differs from the entropy one."""
    ids = list(medqa4["item_id"][:60])
    wrong = {"base": 0, "+homo": 10, "+Cat": 5, "+homo+Cat": 30}
    rows = []
    for c, k in wrong.items():
        for j, i in enumerate(ids):
            ok = float(j >= k)
            rows.append({"model": "m", "prompt_format": "mcq", "item_id": i, "condition": c,
                         "confidence": 0.9 if ok else 0.5, "logprob_confidence": 0.8 if ok else 0.7,
                         "majority_correct": ok, "single_correct": ok})
    return pd.DataFrame(rows)


def test_table7_per_condition_from_the_logprob_baseline(qt_joint, tmp_path, monkeypatch):
    """Seed 000 B.3, Table 7: Brier, confidence and AUROC of the token
    probability "of the token corresponding to the model's selected option
    letter", per condition with Δ vs Base and significance."""
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    (tmp_path / "params").mkdir(); (tmp_path / "data" / "raw").mkdir(parents=True)
    conds = ["+homo", "+Cat", "+homo+Cat"]
    ent, _ = calibration.compare(qt_joint, "base", conds, 200, 0)
    lp, _ = calibration.compare(qt_joint, "base", conds, 200, 0, confidence="logprob_confidence")
    conf = lambda r: r[(r["metric"] == "confidence") & (r["cond_b"] == "+homo+Cat")]["value_a"].iloc[0]  # noqa: E731
    assert conf(ent) == pytest.approx(0.9) and conf(lp) == pytest.approx(0.8)
    t7 = calibration.seed_tables(lp, None, calibration.TABLE7, "t", "04_table7")
    assert set(t7) == {"A", "B", "C"} and list(t7["A"].columns) == ["Base", *conds]
    assert (tmp_path / "outputs" / "t" / "tables" / "04_table7_C.md").exists()


def test_joint_drop_against_each_single_drop(qt_joint):
    """Seed 000 §3: "the accuracy drop for +homo+Cat (-5.58) is significantly
    larger than the drops for +homo (-2.37) or +Cat (-1.10) alone": the joint
    condition against each single one on the same items (McNemar)."""
    t = calibration.joint_vs_single(qt_joint, ["base", "+homo", "+Cat", "+homo+Cat"], n_boot=200, seed=0)
    assert list(t["single"]) == ["+homo", "+Cat"] and (t["joint"] == "+homo+Cat").all()
    r = t.set_index("single")
    assert r.loc["+homo", "joint Δ"] == pytest.approx(-50.0) and r.loc["+homo", "single Δ"] == pytest.approx(-100 / 6)
    assert r.loc["+Cat", "joint − single"] == pytest.approx(-100 * 25 / 60)
    assert (r["p"] < 0.05).all() and r["joint drop larger"].all()
    assert (r["verdict"] == "difference shown").all() and (r["ci_lo"] <= r["joint − single"]).all()


# ------------------------------------------------------------------ Table 9 (B.7)

TABLE9_COLUMNS = ["Base", "+gay", "+gay+Cat", "+gay+Mus", "+gay+Ath"]     # seed 000 Table 9, as printed


@pytest.fixture(scope="module")
def qt_gay(medqa4):
    """Two models on 40 real item ids; under each "gay" condition a model
    gets a known number of items wrong (and +homo too, which Table 9 does
    not show)."""
    ids = list(medqa4["item_id"][:40])
    wrong = {"base": 0, "+gay": 4, "+gay+Cat": 2, "+gay+Mus": 8, "+gay+Ath": 6, "+homo": 10}
    rows = [{"model": m, "prompt_format": "mcq", "item_id": i, "condition": c,
             "confidence": 0.9 if j >= k else 0.5, "majority_correct": float(j >= k), "single_correct": float(j >= k)}
            for m in ("m1", "m2") for c, k in wrong.items() for j, i in enumerate(ids)]
    return pd.DataFrame(rows)


def test_table9_has_the_seeds_columns_with_delta_vs_base(qt_gay, tmp_path, monkeypatch):
    """Seed 000 B.7: "We additionally replace 'homosexual' with the more
    contemporary umbrella term 'gay' and re-run the analysis. Table 9 shows
    that the overall patterns remain unchanged"; Table 9: panels (A)
    accuracy, (B) Brier score, (C) confidence, columns Base, +gay, +gay+Cat,
    +gay+Mus, +gay+Ath, one row per model, "Base in %, others: Δ vs. Base"."""
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    (tmp_path / "params").mkdir(); (tmp_path / "data" / "raw").mkdir(parents=True)
    # the profile's order of conditions is not the seed's: the table is
    order = ["base", "+homo", "+gay+Ath", "+gay", "+gay+Mus", "+gay+Cat"]
    res, _ = calibration.compare(qt_gay, "base", order, 200, 0, pairs=[("+hetero", "+homo")])
    t9 = calibration.table9(res, "t", note=calibration.unparsed_note("incorrect"))
    assert set(t9) == {"A", "B", "C"}
    for panel in t9.values():
        assert list(panel.columns) == TABLE9_COLUMNS and list(panel.index) == ["m1", "m2"]
    a = t9["A"].loc["m1"]
    assert a["Base"] == "100.00" and a["+gay"].startswith("-10.00") and a["+gay+Mus"].startswith("-20.00")
    assert t9["B"].loc["m2", "+gay"].startswith("+") and "%" in t9["B"].loc["m2", "+gay"]    # relative change
    for panel in "ABC":
        f = tmp_path / "outputs" / "t" / "tables" / f"04_table9_{panel}.md"
        assert f.exists() and "gay" in f.read_text(encoding="utf-8")
    # the seed's layout: the three panels stacked, as the notebook shows them
    stacked = calibration.table9_frame(t9)
    assert list(stacked.columns) == TABLE9_COLUMNS and len(stacked) == 6
    assert list(stacked.index.get_level_values(0).unique()) == ["A", "B", "C"]


def test_table9_only_with_answers_under_gay(qt_gay, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    (tmp_path / "params").mkdir(); (tmp_path / "data" / "raw").mkdir(parents=True)
    res, _ = calibration.compare(qt_gay, "base", ["+homo"], 200, 0)
    assert calibration.table9(res, "t") == {}
    part, _ = calibration.compare(qt_gay[qt_gay["condition"].isin(["base", "+gay", "+gay+Mus"])], "base",
                                  ["+gay", "+gay+Cat", "+gay+Mus", "+gay+Ath"], 200, 0)
    assert list(calibration.table9(part, "t")["A"].columns) == ["Base", "+gay", "+gay+Mus"]


@pytest.mark.parametrize("profile", ["default", "paper"])
def test_profiles_build_the_table9_conditions_beside_gay(profile):
    """Where a profile lists +gay it lists Table 9's joint conditions after it."""
    prof = yaml.safe_load(paths.params(f"{profile}.yaml").read_text(encoding="utf-8"))
    for key in ("conditions", "infer_conditions"):
        if "+gay" in prof[key]:
            i = prof[key].index("+gay")
            assert prof[key][i:i + 4] == ["+gay", "+gay+Cat", "+gay+Mus", "+gay+Ath"], key
    assert "+gay+Mus" in prof["conditions"]


def test_load_keeps_03s_answers_after_07_answered_in_the_same_format(tmp_path, monkeypatch):
    """Notebook 07's option-only answers are `mcq` rows of the same model,
    stored after 03's with other settings (temperature 0) and other
    conditions. Rerunning 04 after 07 (make nb NB=04, or make all rerunning
    04 only) read 07's run as the model's most recent one and found none of
    its conditions (default profile: 'no unit has all the conditions'). The
    conditions are chosen before the run is."""
    import time as _time

    from medaudit.llm import ResponseStore

    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    (tmp_path / "params").mkdir(); (tmp_path / "data" / "raw").mkdir(parents=True)
    base = {"source": "generated", "backend": "llamacpp", "model": "m", "model_id": "sha", "prompt_format": "mcq",
            "permutation": "ABCD", "top_p": 0.9, "max_tokens": 16, "prompt": "[]", "response_text": "[B]",
            "parsed_answer": "B", "parse_status": "ok", "tokens_in": 1, "tokens_out": 1, "latency_s": 0.0,
            "retries": 0, "cost_usd": 0.0}
    store = ResponseStore(tmp_path / "outputs" / "p" / "data" / "responses.sqlite")
    for i, (item, cond) in enumerate([(f"medqa4-{j:04d}", c) for j in range(3) for c in ("base", "+homo")]):
        store.put({**base, "key": f"k03-{i}", "item_id": item, "condition": cond, "sample": 0, "seed": i,
                   "temperature": 0.7})
    _time.sleep(0.01)
    for i in range(4):     # 07: cultural items and conditions, greedy
        store.put({**base, "key": f"k07-{i}", "item_id": f"cult-{i:03d}", "condition": "C1 · Id", "sample": 0,
                   "seed": i, "temperature": 0.0})
    store.close()
    items = pd.DataFrame({"item_id": [f"medqa4-{j:04d}" for j in range(3)]})
    variants = items.assign(subset="main")
    frames = {"items": items, "psych_items": items.iloc[:0], "variants": variants}
    monkeypatch.setattr(calibration.data, "load_frame", lambda profile, name: frames[name])
    r, _ = calibration.load("p", ["base", "+homo"])
    assert len(r) == 6 and set(r["condition"]) == {"base", "+homo"} and set(r["temperature"]) == {0.7}


# ------------------------------------------------------------------ which p is exact


def _continuous(ids, seed=3):
    """Base and +homo on ``ids``: every answer right, a confidence drawn per
    item and condition (continuous, so no two item differences lie on a grid)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"model": "m", "prompt_format": "mcq", "item_id": i, "condition": c,
                          "confidence": float(rng.uniform(0.3, 0.99)), "majority_correct": 1.0,
                          "single_correct": 1.0} for c in ("base", "+homo") for i in ids])


@pytest.mark.parametrize("n_items, words", [(12, "exact sign-flip p = "),
                                            (40, "from 20,000 random flips")])
def test_the_confidence_p_says_whether_it_is_exact(medqa4, n_items, words):
    """04's confidence and Brier p is the sign-flip test: exact up to 16
    questions with a non-zero difference, a Monte Carlo estimate from 20,000
    random flips above (continuous scores have no common grid). The table's
    ``p_method``, its caption's note and the findings sentence say which."""
    from medaudit.report import findings
    from medaudit.stats import intervals

    res, _ = calibration.compare(_continuous(list(medqa4["item_id"][:n_items])), "base", ["+homo"], 200, 0)
    conf = res[res["metric"] == "confidence"].iloc[0]
    exact = n_items <= intervals.EXACT_UP_TO
    assert conf["p_method"] == ("exact sign-flip" if exact else "sign-flip from 20,000 random flips")
    assert res[res["metric"] == "accuracy"].iloc[0]["p_method"] == "McNemar"
    swap = res[res["metric"] == "ece"].iloc[0]["p_method"]
    assert swap == ("swap from 200 random swaps" if n_items > 10 else "exact swap")
    note = calibration.p_note(res)
    assert conf["p_method"] in note and "McNemar (accuracy)" in note
    text = findings.calibration(res)
    assert words in text
    if not exact:
        assert "exact sign-flip" not in text
