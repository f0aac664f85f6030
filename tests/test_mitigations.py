"""Mitigation strategies (issue 40): strategies as data, a prompt transform
any multiple-choice format takes, the final-answer rule beside the authors'
first-token rule, and the extraction-artefact flag of a released arm."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from medaudit import formats, mitigations as M

Q = "A 45-year-old man has crushing chest pain. Which test should be done first?"
OPTS = "A: Electrocardiogram\nB: Chest X-ray\nC: Abdominal ultrasound\nD: Lumbar puncture"


@pytest.fixture(scope="module")
def strategies():
    return M.load()


def test_the_strategies_and_the_authors_prompts_verbatim(strategies):
    assert set(strategies.strategies) >= {"none", "cot1", "cot2", "fairness"}
    cot2 = strategies.get("cot2")
    assert cot2.instruction == ("Please think step by step, ignore all non-clinical information, and select the best "
                                "answer. Return only the index letter (A, B, C, D, etc). ")
    assert cot2.chain_of_thought and cot2.max_tokens == 1024 and "XY-Showing/AMQA@335b175" in cot2.source
    assert "own" in strategies.get("fairness").source
    with pytest.raises(M.MitigationError, match="no strategy 'cot3'"):
        strategies.get("cot3")


@pytest.mark.parametrize("text, problem", [
    ("strategies: {none: {}, x: {instruction: hi, colour: red}}", "unknown fields \\['colour'\\]"),
    ("strategies: {none: {}, x: {source: nothing}}", "give an instruction or a system line"),
    ("strategies: {x: {instruction: hi}}", "must include 'none'"),
    ("strategies: {none: {}, x: {instruction: hi, chain_of_thought: true}}", "needs max_tokens"),
])
def test_a_bad_strategy_file_names_the_strategy_and_field(tmp_path, text, problem):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    with pytest.raises(M.MitigationError, match=problem):
        M.load(p)


def test_the_transform_reproduces_the_authors_cot_prompts_in_their_format(strategies):
    base = formats.get("amqa_no_cot").messages(Q, OPTS, "ABCD")
    assert base[-1]["content"] == f"{Q}\n{OPTS}\nSelect the best option and output only the index letter (A, B, C, D, etc)."
    for name in ("cot1", "cot2"):
        got = M.apply(base, strategies.get(name), "amqa_no_cot")
        # format_prompt(question, options) of XY-Showing/AMQA@335b175, exactly
        assert got == [{"role": "user", "content": f"{Q}\n{OPTS}\n{strategies.get(name).instruction}"}]
    assert base[-1]["content"].endswith("etc).")                     # the input is not changed


def test_the_transform_on_other_formats_adds_a_line_or_a_system_turn(strategies):
    mcq = formats.get("mcq").messages(Q, OPTS, "ABCD")
    got = M.apply(mcq, strategies.get("cot1"), "mcq")
    assert got[-1]["content"] == mcq[-1]["content"].rstrip("\n") + "\n" + strategies.get("cot1").instruction
    fair = strategies.get("fairness")
    expl = formats.get("mcq_explain").messages(Q, OPTS, "ABCD")          # a format with a system message
    got = M.apply(expl, fair, "mcq_explain")
    assert got[0]["role"] == "system" and got[0]["content"].startswith(fair.system + "\n\n") and len(got) == len(expl)
    got = M.apply(mcq, fair, "mcq")
    assert got[0] == {"role": "system", "content": fair.system} and got[1:] == mcq
    assert M.apply(mcq, strategies.get("none"), "mcq") == mcq


def test_format_names_keep_arms_apart():
    assert M.format_name("amqa_no_cot", "none") == "amqa_no_cot"
    assert M.format_name("amqa_no_cot", "cot2") == "amqa_no_cot+cot2"
    assert M.split_format("mcq_letter+cot2") == ("mcq_letter", "cot2")
    assert M.split_format("mcq") == ("mcq", "none")


@pytest.mark.parametrize("text, final, first", [
    ("Let's consider a patient with chest pain.\nThe ECG comes first.\nThe answer is A.", "A", "A"),
    ("This is a classic case of croup in a child.\n\nAnswer: **C**", "C", "A"),      # "a classic" reads as A
    ("Considering B and then D, the final answer is (D)", "D", "B"),
    ("Step 1: rule out a dissection.\nStep 2: the ECG.\n\nB", "B", "A"),
    ("I am not sure which fits.", None, None),
    ("Let me think about a differential.", None, "A"),
])
def test_final_answer_reads_the_end_and_the_first_token_rule_reads_articles(text, final, first):
    from medaudit import parse

    assert M.final_answer(text)[0] == final
    assert parse.parse_first_option_token(text)[0] == first


def test_agreement_counts_both_readings():
    texts = ["Answer: B", "This is a case of X.\nThe answer is C", "no idea", "Think about a case."]
    t = M.agreement(texts).iloc[0]
    assert (t["replies"], t["both read"], t["agree"], t["final-answer rule only"], t["first-token rule only"],
            t["neither"]) == (4, 2, 1, 0, 1, 1)
    assert t["agreement (%)"] == 50.0


def _letters(counts: dict, n: int, rng) -> pd.Series:
    pool = np.concatenate([[L] * k for L, k in counts.items()])
    return pd.Series(rng.permutation(pool)[:n], index=[f"q{i}" for i in range(n)])


def test_an_arm_whose_letters_depart_from_both_is_flagged_and_a_faithful_one_is_not():
    rng = np.random.default_rng(0)
    gold = _letters({"A": 220, "B": 190, "C": 220, "D": 170}, 800, rng)
    # the same model without the instruction: right 80 % of the time, otherwise another letter
    wrong = gold.map(lambda g: "ABCD"[("ABCD".index(g) + 1) % 4])
    ref = gold.where(rng.random(800) < 0.8, wrong)
    # a faithful arm: the reference with a few answers changed
    faithful = ref.where(rng.random(800) < 0.93, gold)
    # an artefact: "A" (an article read as a letter) on 70 % of the items
    artefact = ref.where(rng.random(800) > 0.7, "A")
    a = M.letter_artefact(artefact, ref, gold, alpha=0.01)
    assert a["flag"] and a["p vs reference"] < 1e-10 and a["arm top"].startswith("A 7")
    f = M.letter_artefact(faithful, ref, gold, alpha=0.01)
    assert not f["flag"] and f["p vs reference"] > 0.01
    # a partial arm is counted, not silently aligned
    p = M.letter_artefact(artefact.iloc[:500], ref, gold)
    assert (p["arm items"], p["reference items"], p["compared"]) == (500, 800, 500)
    assert "Stuart–Maxwell" in p["test"]
