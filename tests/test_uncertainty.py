"""Per-question confidence, majority vote, single sample, log-prob and
exact-letter estimates (medaudit.stats.uncertainty) on hand-made response tables."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax
from scipy.stats import entropy

from medaudit.stats import uncertainty as U

LOG4 = math.log(4)


def responses(spec: dict, model: str = "m", fmt: str = "mcq", logprobs: dict | None = None) -> pd.DataFrame:
    """{(item, condition): [answer or None, …]} → a long responses table."""
    rows = []
    for (item, cond), answers in spec.items():
        for k, a in enumerate(answers):
            rows.append({"model": model, "item_id": item, "condition": cond, "prompt_format": fmt,
                         "sample": k, "parsed_answer": a,
                         "answer_logprob": None if logprobs is None else logprobs.get((item, cond, k)),
                         "letter_logprobs": None})
    return pd.DataFrame(rows)


def items(gold: dict) -> pd.DataFrame:
    return pd.DataFrame({"item_id": list(gold), "answer_idx": list(gold.values())})


def row(qt: pd.DataFrame, item: str, cond: str = "base") -> pd.Series:
    r = qt[(qt.item_id == item) & (qt.condition == cond)]
    assert len(r) == 1
    return r.iloc[0]


# ------------------------------------------------------------------ arrays

def test_normalized_entropy_matches_scipy():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4) * 0.5, size=50)
    p[0] = [1, 0, 0, 0]
    p[1] = [0.5, 0.5, 0, 0]
    want = np.array([entropy(r) for r in p]) / LOG4
    np.testing.assert_allclose(U.normalized_entropy(p, 4), want, atol=1e-12)
    assert U.normalized_entropy(np.full((1, 4), 0.25), 4)[0] == pytest.approx(1.0)
    assert U.normalized_entropy(np.array([[1.0, 0, 0, 0]]), 4)[0] == 0.0


def test_confidence_from_counts_hand():
    p, c = U.confidence_from_counts(np.array([[10, 0, 0, 0], [5, 5, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]), 4)
    assert c[0] == 1.0
    assert c[1] == pytest.approx(0.5)            # H = log 2 = ½ log 4
    assert np.isnan(c[2]) and np.isnan(p[2]).all()
    assert c[3] == pytest.approx(0.0, abs=1e-12)


def test_majority_vote_tiebreak_and_empty():
    counts = np.array([[3, 3, 1, 0], [0, 0, 0, 0], [1, 4, 4, 4]])
    keys = np.array([[0.2, 0.9, 0.99, 0.5], [0.1, 0.2, 0.3, 0.4], [0.99, 0.1, 0.7, 0.3]])
    win, tied = U.majority_vote(counts, keys)
    # row 0: A and B tie, B has the larger key (C's key is larger but C is not tied)
    assert win.tolist() == [1, -1, 2]
    assert tied.tolist() == [True, False, True]


def test_softmax_rows_missing_letters_and_temperature():
    lp = np.array([[-0.1, -2.0, -np.inf, -3.0], [np.nan] * 4])
    q = U.softmax_rows(lp)
    np.testing.assert_allclose(q[0, [0, 1, 3]], softmax([-0.1, -2.0, -3.0]))
    assert q[0, 2] == 0.0 and np.isnan(q[1]).all()
    np.testing.assert_allclose(U.softmax_rows(lp[:1], 0.5)[0, [0, 1, 3]], softmax(np.array([-0.1, -2.0, -3.0]) / 0.5))


# ------------------------------------------------------------------ the table

def test_questions_hand_case_with_unparsed():
    r = responses({("q1", "base"): ["A", "A", "B", None],
                   ("q2", "base"): [None, None, None],
                   ("q3", "base"): ["C"] * 10,
                   ("q4", "base"): ["A", "B", "C", "D"]})
    qt = U.questions(r, items({"q1": "A", "q2": "B", "q3": "D", "q4": "C"}), seed=0)
    assert len(qt) == 4
    q1 = row(qt, "q1")
    assert (q1.n_samples, q1.n_parsed, q1.n_unparsed) == (4, 3, 1)
    assert q1.p == pytest.approx({"A": 2 / 3, "B": 1 / 3, "C": 0.0, "D": 0.0})
    assert q1.confidence == pytest.approx(1 - entropy([2, 1, 0, 0]) / LOG4)
    assert q1.majority == "A" and q1.majority_correct == 1.0 and not q1.majority_tied
    assert q1.single in ("A", "B") and q1.single_sample != 3          # never the unparsed sample
    assert q1.single_correct == float(q1.single == "A")
    assert q1.gold == "A" and q1.n_options == 4

    q2 = row(qt, "q2")  # nothing parsed: reported, not scored wrong
    assert q2.n_parsed == 0 and q2.p == {} and np.isnan(q2.confidence)
    assert pd.isna(q2.majority) and np.isnan(q2.majority_correct)
    assert pd.isna(q2.single) and np.isnan(q2.single_correct)

    q3 = row(qt, "q3")
    assert q3.confidence == 1.0 and q3.majority == "C" and q3.majority_correct == 0.0 and q3.single_correct == 0.0
    q4 = row(qt, "q4")
    assert q4.confidence == pytest.approx(0.0, abs=1e-12) and q4.majority_tied


def test_single_from_all_scores_an_unparsed_draw_wrong():
    r = responses({("q2", "base"): [None, None], ("q1", "base"): ["A", None]})
    qt = U.questions(r, items({"q1": "A", "q2": "A"}), seed=0, single_from="all")
    assert row(qt, "q2").single_correct == 0.0 and pd.isna(row(qt, "q2").single)
    # over questions, q1-like draws hit the unparsed sample about half the time, scored 0
    many = responses({(f"t{i}", "base"): ["A", None] for i in range(400)})
    qt2 = U.questions(many, items({f"t{i}": "A" for i in range(400)}), seed=0, single_from="all")
    assert 0.4 < qt2["single_correct"].mean() < 0.6
    assert (qt2["single_correct"] == (qt2["single_sample"] == 0)).all()
    with pytest.raises(ValueError):
        U.questions(r, items({"q1": "A", "q2": "A"}), seed=0, single_from="some")


def test_tie_break_is_seeded_uniform_and_order_free():
    spec = {("q1", "base"): ["A", "A", "B", "B", None]}
    gold = items({"q1": "A", "q9": "B"})
    wins = [row(U.questions(responses(spec), gold, seed=s), "q1").majority for s in range(30)]
    assert set(wins) == {"A", "B"}                    # the seed moves the draw
    # across 600 questions with the same A/B tie the draw is close to a fair coin
    many = responses({(f"t{i}", "base"): ["A", "A", "B", "B", None] for i in range(600)})
    qt = U.questions(many, items({f"t{i}": "A" for i in range(600)}), seed=0)
    assert qt["majority_tied"].all() and set(qt["majority"]) == {"A", "B"}
    assert 0.44 < (qt["majority"] == "A").mean() < 0.56
    # same seed → same winner; independent of row order and of other questions in the table
    base = U.questions(responses(spec), gold, seed=7)
    bigger = responses({**spec, ("q9", "base"): ["B", "C"], ("q1", "+homo"): ["A", "B"]})
    shuffled = bigger.sample(frac=1.0, random_state=3)
    again = U.questions(shuffled, gold, seed=7)
    assert row(again, "q1").majority == row(base, "q1").majority
    assert row(again, "q1").single_sample == row(base, "q1").single_sample
    assert row(again, "q1").majority_tied


def test_single_sample_uniform_over_parsed_samples():
    many = responses({(f"t{i}", "base"): ["A", None, "B", "C", None] for i in range(900)})
    qt = U.questions(many, items({f"t{i}": "A" for i in range(900)}), seed=0)
    counts = qt["single_sample"].value_counts()
    assert set(counts.index) == {0, 2, 3}            # parsed samples only
    assert counts.min() > 300 * 0.85 and counts.max() < 300 * 1.15
    assert (qt["single"] == qt["single_sample"].map({0: "A", 2: "B", 3: "C"})).all()


def test_single_and_majority_independent_per_condition_and_model():
    spec = {("q1", c): list("ABCDABCDAB") for c in ("base", "+homo", "+hetero", "+Cat")}
    r = pd.concat([responses(spec, model=m) for m in ("m1", "m2", "m3")])
    qt = U.questions(r, items({"q1": "A"}), seed=1)
    assert len(qt) == 12
    assert qt["single_sample"].nunique() > 1          # not one sample index reused everywhere


def test_options_column_sets_the_option_count():
    it = pd.DataFrame({"item_id": ["q5", "q4"], "answer_idx": ["E", "A"],
                       "options": [dict.fromkeys("ABCDE", "x"), dict.fromkeys("ABCD", "x")]})
    r = responses({("q5", "base"): list("ABCDE"), ("q4", "base"): list("ABCD")})
    qt = U.questions(r, it, seed=0)
    assert row(qt, "q5").confidence == pytest.approx(0.0, abs=1e-12)
    assert row(qt, "q5").n_options == 5 and set(row(qt, "q5").p) == set("ABCDE")
    assert row(qt, "q4").confidence == pytest.approx(0.0, abs=1e-12)
    r2 = responses({("q5", "base"): list("ABCD")})
    assert row(U.questions(r2, it, seed=0), "q5").confidence == pytest.approx(1 - math.log(4) / math.log(5))
    bad = responses({("q4", "base"): ["E"], ("q5", "base"): ["A"]})
    with pytest.raises(ValueError, match="does not have"):
        U.questions(bad, it, seed=0)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="outside"):
        U.questions(responses({("q1", "base"): ["Z"]}), items({"q1": "A"}), seed=0)
    with pytest.raises(ValueError, match="not in items"):
        U.questions(responses({("q2", "base"): ["A"]}), items({"q1": "A"}), seed=0)


def test_logprob_baseline():
    lps = {("q1", "base", 0): math.log(0.9), ("q1", "base", 1): math.log(0.6),
           ("q1", "base", 2): math.log(0.3), ("q1", "base", 3): math.log(0.99)}
    r = responses({("q1", "base"): ["A", "A", "B", None]}, logprobs=lps)
    qt = U.questions(r, items({"q1": "A"}), seed=0)
    q = row(qt, "q1")
    assert q.logprob_confidence == pytest.approx((0.9 + 0.6 + 0.3) / 3)   # the unparsed sample is left out
    assert q.n_logprob_samples == 3
    assert q.single_logprob_confidence == pytest.approx([0.9, 0.6, 0.3][q.single_sample])
    no_lp = responses({("q1", "base"): ["A"]})
    assert np.isnan(row(U.questions(no_lp, items({"q1": "A"}), seed=0), "q1").logprob_confidence)


def test_exact_letter_distribution_matches_scipy():
    d0 = {"A": -0.2, "B": -2.0, "C": -3.0, "D": -4.0}
    d1 = {"A": -1.5, "B": -0.4, "C": -3.0}             # D missing (top-k backend): probability 0
    r = responses({("q1", "base"): ["A", "B", None], ("q2", "base"): ["C"]})
    r["letter_logprobs"] = [d0, d1, None, None]
    it = items({"q1": "B", "q2": "C"})
    qt = U.questions(r, it, seed=0)
    q0 = softmax(list(d0.values()))
    q1 = np.r_[softmax(list(d1.values())), 0.0]
    q = (q0 + q1) / 2
    got = row(qt, "q1")
    assert got.exact_confidence == pytest.approx(1 - entropy(q) / LOG4)
    assert got.exact_majority == "ABCD"[int(np.argmax(q))]
    assert got.exact_correct == float("ABCD"[int(np.argmax(q))] == "B")
    assert np.isnan(row(qt, "q2").exact_confidence) and pd.isna(row(qt, "q2").exact_majority)
    # temperature
    qt05 = U.questions(r, it, seed=0, exact_temperature=0.5)
    qT = (softmax(np.array(list(d0.values())) / 0.5) + np.r_[softmax(np.array(list(d1.values())) / 0.5), 0]) / 2
    assert row(qt05, "q1").exact_confidence == pytest.approx(1 - entropy(qT) / LOG4)
    # the raw store column (JSON text) decodes to the same
    r_json = r.assign(letter_logprobs=[json.dumps(d0), json.dumps(d1), None, None])
    assert row(U.questions(r_json, it, seed=0), "q1").exact_confidence == pytest.approx(got.exact_confidence)


def test_estimate_gap_hand():
    qt = pd.DataFrame({"model": "m", "condition": "base", "confidence": [0.5, 0.8, np.nan, 0.2],
                       "exact_confidence": [0.4, 1.0, 0.3, np.nan], "majority": ["A", "B", None, "C"],
                       "exact_majority": ["A", "C", "A", "C"]})
    g = U.estimate_gap(qt).iloc[0]
    assert g.n == 2
    assert g.mean_abs_conf_diff == pytest.approx((0.1 + 0.2) / 2)
    assert g.mean_conf_diff == pytest.approx((0.1 - 0.2) / 2)
    assert g.prediction_disagreement == 0.5


def test_parse_summary_counts():
    r = responses({("q1", "base"): ["A", None, None, None, None, "A", "A", "A", "A", "A"],
                   ("q2", "base"): [None] * 10, ("q3", "base"): ["B"] * 10})
    qt = U.questions(r, items({"q1": "A", "q2": "A", "q3": "A"}), seed=0)
    s = U.parse_summary(qt).iloc[0]
    assert (s.questions, s.unscored, s.samples, s.parsed) == (3, 1, 30, 16)
    assert s.ok_questions == pytest.approx(2 / 3)       # q1 (6/10) and q3 reach 5 of 10
    assert s.sample_parse_rate == pytest.approx(16 / 30)


def test_vectorised_table_equals_a_naive_per_question_loop():
    rng = np.random.default_rng(5)
    spec, gold = {}, {}
    for i in range(120):
        gold[f"q{i}"] = "ABCD"[rng.integers(4)]
        for cond in ("base", "+homo"):
            k = int(rng.integers(1, 11))
            spec[(f"q{i}", cond)] = [None if rng.random() < 0.15 else "ABCD"[rng.integers(4)] for _ in range(k)]
    r = pd.concat([responses(spec, model=m) for m in ("m1", "m2")], ignore_index=True)
    qt = U.questions(r, items(gold), seed=3)
    assert len(qt) == 480
    for q in qt.sample(80, random_state=0).itertuples():
        ans = [a for a in spec[(q.item_id, q.condition)] if a is not None]
        assert q.n_parsed == len(ans)
        if not ans:
            assert np.isnan(q.confidence)
            continue
        cnt = pd.Series(ans).value_counts()
        assert q.confidence == pytest.approx(1 - entropy(cnt.to_numpy()) / LOG4)
        top = sorted(cnt[cnt == cnt.max()].index)
        assert q.majority in top and q.majority_tied == (len(top) > 1)
        assert q.majority_correct == float(q.majority == gold[q.item_id])
        assert spec[(q.item_id, q.condition)][q.single_sample] == q.single


def test_reads_the_response_store_round_trip(tmp_path):
    """The store's own frame (NULL answers and log-probs read back as missing
    values under pandas 3) goes straight into questions."""
    from medaudit.llm.store import ResponseStore

    rows = []
    for k, (a, lp) in enumerate([("A", {"A": -0.1, "B": -2.5, "C": -4.0, "D": -5.0}), (None, None),
                                 ("B", {"A": -1.0, "B": -0.5, "C": -3.0, "D": -3.0})]):
        rows.append({"key": f"k{k}", "source": "generated", "model": "m", "item_id": "q1", "condition": "base",
                     "prompt_format": "mcq", "sample": k, "parsed_answer": a,
                     "parse_status": "ok" if a else "no_answer", "letter_logprobs": lp,
                     "answer_logprob": None if lp is None else lp[a]})
    with ResponseStore(tmp_path / "r.sqlite") as st:
        st.put_many(rows)
        frame = st.frame()
    qt = U.questions(frame, items({"q1": "B"}), seed=0)
    q = row(qt, "q1")
    assert (q.n_samples, q.n_parsed) == (3, 2) and q.majority_tied and q.majority in ("A", "B")
    assert q.logprob_confidence == pytest.approx((math.exp(-0.1) + math.exp(-0.5)) / 2)
    qq = (softmax([-0.1, -2.5, -4.0, -5.0]) + softmax([-1.0, -0.5, -3.0, -3.0])) / 2
    assert q.exact_confidence == pytest.approx(1 - entropy(qq) / LOG4)
    assert q.n_logprob_samples == 2


# ------------------------------------------------------------------ the seed's rule for unparsed answers


def test_unparsed_incorrect_is_the_seeds_rule():
    """Seed 000 §2: "We extract the selected option using a regular
    expression and mark predictions that do not match the ground truth as
    incorrect." Under ``unparsed="incorrect"`` an unparsed answer is a
    prediction that does not match: the single draw is among all K samples
    and an unparsed draw scores 0; a question with no parsed sample has no
    prediction (majority 0) and no preferred option (confidence 0)."""
    r = responses({("q1", "base"): ["A", None], ("q2", "base"): [None, None, None],
                   ("q3", "base"): ["B", "B", "B"]})
    gold = items({"q1": "A", "q2": "B", "q3": "B"})
    drop = U.questions(r, gold, seed=0, unparsed="drop")
    seed = U.questions(r, gold, seed=0, unparsed="incorrect")
    assert np.isnan(row(drop, "q2").majority_correct) and np.isnan(row(drop, "q2").single_correct)
    q2 = row(seed, "q2")
    assert (q2.majority_correct, q2.single_correct, q2.confidence) == (0.0, 0.0, 0.0)
    assert q2.n_parsed == 0 and pd.isna(q2.majority)               # still reported as unparsed
    assert row(seed, "q3").single_correct == 1.0 and row(seed, "q3").confidence == 1.0
    many = responses({(f"t{i}", "base"): ["A", None] for i in range(400)})
    g = items({f"t{i}": "A" for i in range(400)})
    assert U.questions(many, g, seed=0, unparsed="drop")["single_correct"].mean() == 1.0
    assert 0.4 < U.questions(many, g, seed=0, unparsed="incorrect")["single_correct"].mean() < 0.6
    with pytest.raises(ValueError):
        U.questions(r, gold, seed=0, unparsed="skip")
