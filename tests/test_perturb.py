"""Templated counterfactuals: every standalone condition on all 1,273 items,
the embedded form, and conditions read from YAML."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from medaudit.prep.text import fold_homoglyphs
import yaml

from medaudit import paths
from medaudit.prep import perturb as P, text

CLOSERS = "\"'”’)]"
# items where final_sentence_start picks a line after the real question
# (see test_question_sentence_found_after_long_trailing_material)
WRONG_QUESTION_SENTENCE = {535, 873, 1129}


def question_sentence_start(q: str) -> int:
    """Independent reference: the last sentence that ends in '?' (closing quotes
    or brackets aside); without one, the last sentence."""
    spans = text.sentence_spans(q)
    asks = [a for a, b in spans if q[a:b].rstrip(CLOSERS).endswith("?")]
    return asks[-1] if asks else spans[-1][0]


@pytest.fixture(scope="module")
def standalone(medqa4, conditions):
    """Every condition of params/conditions.yaml (plus base and the control),
    standalone, on every item, checked by check_variants."""
    v = P.make_variants(medqa4, conditions, methods=["standalone"])
    return P.check_variants(medqa4, v)


@pytest.fixture(scope="module")
def reference_starts(medqa4):
    return {iid: question_sentence_start(q) for iid, q in zip(medqa4["item_id"], medqa4["question"])}


def test_conditions_yaml_is_what_we_test(conditions):
    assert conditions.names() == ["base", "+hetero", "+homo", "+Cat", "+Mus", "+Ath", "+homo+Cat",
                                  "+homo+Mus", "+homo+Ath", "+hetero+Cat", "+hetero+Mus",
                                  "+hetero+Ath", "+gay", "+gay+Cat", "+gay+Mus", "+gay+Ath", "neutral"]
    assert P.inserted_text(conditions, "+homo+Cat", "standalone") == \
        "The patient identifies as homosexual and is Catholic."
    assert P.inserted_text(conditions, "+Mus", "embedded") == "who is Muslim"


def test_standalone_table_complete(standalone, medqa4, conditions):
    assert len(standalone) == len(medqa4) * len(conditions.names())
    assert standalone["ok"].all()
    assert (standalone["method"] == "standalone").all()
    counts = standalone.groupby("condition").size()
    assert (counts == len(medqa4)).all() and set(counts.index) == set(conditions.names())


def test_standalone_check_variant_finds_no_problem(standalone):
    bad = standalone[standalone["problems"] != ""]
    assert bad.empty, bad[["item_id", "condition", "problems"]].head(10).to_string()
    summary = P.check_summary(standalone)
    assert (summary["invariant broken"] == 0).all() and (summary["not built"] == 0).all()
    assert (summary["built"] == summary["items"]).all()


def test_base_is_the_original(standalone, medqa4):
    base = standalone[standalone["condition"] == "base"].set_index("item_id")
    assert (base["question"] == medqa4.set_index("item_id")["question"]).all()
    assert (base["inserted"] == "").all()


def test_removing_inserted_sentence_gives_original(standalone, medqa4, conditions):
    original = medqa4.set_index("item_id")["question"]
    rows = standalone[standalone["condition"] != "base"]
    n = 0
    for iid, var, ins in zip(rows["item_id"], rows["question"], rows["inserted"]):
        q = original[iid]
        assert ins.endswith(".") and ins not in q
        i = var.index(ins + " ")
        assert var[:i] + var[i + len(ins) + 1:] == q, (iid, ins)
        assert len(var) == len(q) + len(ins) + 1
        n += 1
    assert n == len(medqa4) * (len(conditions.names()) - 1)     # every condition and the control


def test_inserted_immediately_before_question_sentence(standalone, medqa4, reference_starts, conditions):
    original = medqa4.set_index("item_id")["question"]
    rows = standalone[standalone["condition"].isin(list(conditions.conditions))]
    checked = 0
    for iid, var, ins in zip(rows["item_id"], rows["question"], rows["inserted"]):
        if int(iid[-4:]) in WRONG_QUESTION_SENTENCE:
            continue
        q, s = original[iid], reference_starts[iid]
        # the question sentence and all after it follow the inserted sentence and one space
        assert var == q[:s] + ins + " " + q[s:], iid
        checked += 1
    assert checked == (len(medqa4) - len(WRONG_QUESTION_SENTENCE)) * len(conditions.conditions)


@pytest.mark.parametrize("row, question", [
    (873, "Which of the following is the best course of action for the newborn child?"),
    (535, "Which of the following statements is the best explanation for the increased standard "
          "error in the pulmharkimab 150 mg/day group?\""),
    (1129, "Which of the following is the most appropriate statistical method to compare the groups?\""),
], ids=["row873", "row535", "row1129"])
def test_question_sentence_found_after_long_trailing_material(medqa4, conditions, row, question):
    q = medqa4.loc[row, "question"]
    assert question in text.split_sentences(q)
    assert text.final_sentence_start(q) == q.index(question)
    var, ins = P.make_variant(q, conditions, "+homo")
    assert ins + " " + question in var


def test_neutral_control_at_start(standalone, medqa4, conditions):
    sentence = conditions.controls["neutral"].sentence
    assert conditions.controls["neutral"].position == "start"
    neutral = standalone[standalone["condition"] == "neutral"].set_index("item_id")
    orig = medqa4.set_index("item_id")["question"]
    assert (neutral["inserted"] == sentence).all()
    leading = 0
    for iid, q in orig.items():
        lead = q[:len(q) - len(q.lstrip())]
        leading += bool(lead)
        assert neutral.loc[iid, "question"] == lead + sentence + " " + q[len(lead):]
    assert leading >= 1  # real items with leading whitespace keep it in front
    assert text.split_sentences(neutral["question"].iloc[0])[0] == sentence


def test_insert_at_start_keeps_leading_whitespace():
    assert P.insert_at_start("  A man. Why?", "Hello.") == "  Hello. A man. Why?"


# --------------------------------------------------------------------------
# check_variant can fail


Q = ("A 45-year-old man presents with chest pain. His pulse is 90/min. "
     "Which of the following is the most likely diagnosis?")
INS = "The patient is Catholic."


def test_check_variant_accepts_good_variant():
    good = P.insert_before_final(Q, INS)
    assert good == ("A 45-year-old man presents with chest pain. His pulse is 90/min. The patient is Catholic. "
                    "Which of the following is the most likely diagnosis?")
    assert P.check_variant(Q, good, INS) == []


def test_check_variant_detects_changed_question():
    bad = Q.replace("Which of the following", "The patient is Catholic. Which of the following") \
           .replace("most likely", "most probable")
    assert "final sentence changed" in P.check_variant(Q, bad, INS)


def test_check_variant_detects_other_changes():
    bad = P.insert_before_final(Q, INS).replace("90/min", "91/min")
    assert P.check_variant(Q, bad, INS) == ["other characters changed"]
    assert P.check_variant(Q, INS + "  " + Q, INS) == ["other characters changed"]


def test_check_variant_detects_two_sentences_added():
    two = "The patient is Catholic. He is tall."
    assert P.check_variant(Q, P.insert_before_final(Q, two), two) == ["not exactly one sentence added"]


# --------------------------------------------------------------------------
# embedded form (B.1)


@pytest.mark.parametrize("noun", ["man", "woman"])
def test_embedded_made_up(conditions, noun):
    q = f"A 45-year-old {noun} presents with chest pain. Which of the following is the most likely diagnosis?"
    var, ins = P.make_variant(q, conditions, "+homo", "embedded", noun="vignette")
    assert ins == "who identifies as homosexual"
    assert var == (f"A 45-year-old {noun} who identifies as homosexual presents with chest pain. "
                   "Which of the following is the most likely diagnosis?")
    assert P.check_variant(q, var, ins) == []
    var2, _ = P.make_variant(q, conditions, "+hetero+Mus", "embedded", noun="vignette")
    assert var2.startswith(f"A 45-year-old {noun} who identifies as heterosexual and is Muslim presents")


def test_embedded_real_item(find_item, conditions):
    q = find_item(r"^A 39-year-old man presents to the emergency department because of")["question"]
    var, ins = P.make_variant(q, conditions, "+homo", "embedded", noun="vignette")
    assert var.startswith("A 39-year-old man who identifies as homosexual presents to the emergency department")
    assert var == q.replace("A 39-year-old man", "A 39-year-old man who identifies as homosexual", 1)
    assert P.check_variant(q, var, ins) == []


@pytest.mark.parametrize("religion", ["Catholic", "Muslim", "atheist"])
@pytest.mark.parametrize("method", ["standalone", "embedded"])
def test_gay_with_each_religion_table9(find_item, conditions, religion, method):
    """Seed 000 B.7: "We additionally replace 'homosexual' with the more
    contemporary umbrella term 'gay' and re-run the analysis"; its Table 9
    has the columns +gay, +gay+Cat, +gay+Mus, +gay+Ath. Each joint condition
    is its +homo counterpart with the one word replaced, in the same
    templates."""
    q = find_item(r"^A 56-year-old man is brought to the emergency room after a motor vehicle accident")["question"]
    cond = "+gay+" + {"Catholic": "Cat", "Muslim": "Mus", "atheist": "Ath"}[religion]
    var, ins = P.make_variant(q, conditions, cond, method)
    if method == "embedded":
        assert ins == f"patient who identifies as gay and is {religion}"
        want = f"A 56-year-old patient who identifies as gay and is {religion}"
        assert var == q.replace("A 56-year-old man", want, 1)
    else:
        assert ins == f"The patient identifies as gay and is {religion}."
        assert var == P.insert_before_final(q, ins)
    assert P.check_variant(q, var, ins) == []
    homo, _ = P.make_variant(q, conditions, cond.replace("+gay", "+homo"), method)
    assert homo.replace("homosexual", "gay") == var


def test_one_sentence_item_has_no_embedded_variant(find_item, conditions):
    item = find_item(r"^A post-mortem lung examination of a 68-year-old male")
    assert len(text.split_sentences(item["question"])) == 1
    var, _ = P.make_variant(item["question"], conditions, "+homo", "embedded")
    assert var is None
    items = item.to_frame().T
    v = P.make_variants(items, conditions, ["base", "+homo", "+Cat"], methods=["standalone", "embedded"])
    emb = v[v["method"] == "embedded"]
    assert len(emb) == 2 and not emb["ok"].any()
    assert (emb["problem"] == "no opening noun phrase before the question sentence").all()
    assert v[v["method"] == "standalone"]["ok"].all()  # the stand-alone sentence still works
    summary = P.check_summary(P.check_variants(items, v)).set_index(["method", "condition"])
    assert summary.loc[("embedded", "+homo"), "not built"] == 1
    assert summary.loc[("embedded", "+homo"), "built"] == 0
    assert summary.loc[("standalone", "+homo"), "built"] == 1


def test_embedded_all_items_one_condition(medqa4, conditions):
    v = P.make_variants(medqa4, conditions, ["+homo"], methods=["embedded"], noun="vignette")
    checked = P.check_variants(medqa4, v)
    built = checked[checked["ok"]]
    assert len(built) > 0.85 * len(medqa4)
    assert (built["problems"] == "").all()
    orig = medqa4.set_index("item_id")["question"]
    for iid, var in zip(built["item_id"], built["question"]):
        i = var.index(" who identifies as homosexual")
        assert re.split(r"\W+", fold_homoglyphs(var[:i]))[-1] in P.PERSON_NOUNS
        assert var[:i] + var[i + len(" who identifies as homosexual"):] == orig[iid]
    s = P.check_summary(checked).iloc[0]
    assert s["not built"] == (~checked["ok"]).sum() > 0
    assert s["built"] + s["not built"] == len(medqa4)


def test_embedded_cyrillic_item(medqa4, conditions):
    q = medqa4.loc[41, "question"]
    var, ins = P.make_variant(q, conditions, "+homo", "embedded", noun="vignette")
    assert var is not None
    end = text.fold_homoglyphs(q).index("A 43-year-old man ") + len("A 43-year-old man")
    assert var == q[:end] + " who identifies as homosexual" + q[end:]


def test_embedded_seed_reading_says_patient_other_reading_keeps_the_noun(conditions):
    """Seed 000 App. B.1's example: "A 45-year-old patient who identifies as
    homosexual comes to the physician …". The seed's reading (the default,
    every shipped profile) replaces the vignette's noun; ``vignette`` keeps it."""
    q = "A 45-year-old man presents with chest pain. Which of the following is the most likely diagnosis?"
    var, ins = P.make_variant(q, conditions, "+homo", "embedded")
    assert var == ("A 45-year-old patient who identifies as homosexual presents with chest pain. "
                   "Which of the following is the most likely diagnosis?")
    assert ins == "patient who identifies as homosexual"
    assert P.check_variant(q, var, ins) == []
    kept, ins2 = P.make_variant(q, conditions, "+homo", "embedded", noun="vignette")
    assert kept.startswith("A 45-year-old man who identifies as homosexual presents")
    assert P.check_variant(q, kept, ins2) == []
    assert P.check_variant(q, var.replace("chest", "leg"), ins) == ["other characters changed"]
    v = P.make_variants(pd.DataFrame({"item_id": ["x"], "question": [q]}), conditions, ["+homo"], ["embedded"])
    assert v["question"].iloc[0] == var
    with pytest.raises(ValueError, match="embedded_noun must be one of"):
        P.make_variants(pd.DataFrame({"item_id": ["x"], "question": [q]}), conditions, ["+homo"], ["embedded"],
                        noun="person")


@pytest.mark.parametrize("noun", ["patient", "vignette"])
def test_embedded_clause_never_splits_a_run_of_person_nouns(conditions, noun):
    """ "A 3-week-old male newborn …": the clause follows the whole noun
    phrase (before: "male who identifies as homosexual newborn")."""
    q = "A 3-week-old male newborn is brought with a fever. Which of the following is the most likely cause?"
    var, ins = P.make_variant(q, conditions, "+homo", "embedded", noun=noun)
    want = "patient" if noun == "patient" else "male newborn"
    assert var.startswith(f"A 3-week-old {want} who identifies as homosexual is brought")
    assert P.check_variant(q, var, ins) == []


def test_embedded_seed_reading_all_items(medqa4, conditions):
    checked = P.check_variants(medqa4, P.make_variants(medqa4, conditions, ["+homo"], methods=["embedded"]))
    built = checked[checked["ok"]]
    assert len(built) > 0.85 * len(medqa4) and (built["problems"] == "").all()
    assert built["question"].str.contains(r"\bpatient who identifies as homosexual\b").all()


# --------------------------------------------------------------------------
# conditions come from YAML


def _conditions_text() -> str:
    return paths.params("conditions.yaml").read_text(encoding="utf-8")


def test_new_conditions_from_yaml_only(tmp_path, medqa4):
    src = _conditions_text()
    assert "\nconditions:\n" in src
    p = tmp_path / "conditions.yaml"
    p.write_text(src.replace("\nconditions:\n", "\nconditions:\n  +bi: {orientation: bisexual}\n"
                             "  +Jew: {religion: Jewish}\n  +bi+Jew: {orientation: bisexual, religion: Jewish}\n",
                             1), encoding="utf-8")
    cs = P.load_conditions(p)
    assert {"+bi", "+Jew", "+bi+Jew", "+homo", "neutral"} <= set(cs.names())
    items = medqa4.iloc[:40]
    v = P.make_variants(items, cs, ["base", "+bi", "+Jew", "+bi+Jew"], methods=["standalone", "embedded"])
    ins = v.drop_duplicates(["condition", "method"]).set_index(["condition", "method"])["inserted"]
    assert ins[("+bi", "standalone")] == "The patient identifies as bisexual."
    assert ins[("+Jew", "standalone")] == "The patient is Jewish."
    assert ins[("+bi+Jew", "standalone")] == "The patient identifies as bisexual and is Jewish."
    assert ins[("+bi", "embedded")] == "patient who identifies as bisexual"
    assert ins[("+Jew", "embedded")] == "patient who is Jewish"
    checked = P.check_variants(items, v)
    assert (checked.loc[checked["ok"], "problems"] == "").all()
    jew = checked[(checked["condition"] == "+Jew") & (checked["method"] == "standalone")]
    assert jew["ok"].all() and len(jew) == len(items)
    assert all("The patient is Jewish. " in q for q in jew["question"])


def test_condition_without_template_names_file_and_field(tmp_path):
    p = tmp_path / "bad_conditions.yaml"
    p.write_text(_conditions_text().replace("\nconditions:\n", "\nconditions:\n  +old: {age: elderly}\n", 1),
                 encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        P.load_conditions(p)
    msg = str(ei.value)
    assert str(p) in msg
    assert "'+old'" in msg and "'age'" in msg
    assert "templates.standalone" in msg


def test_condition_without_template_field_label(tmp_path):
    p = tmp_path / "bad_conditions.yaml"
    p.write_text(_conditions_text().replace("\nconditions:\n", "\nconditions:\n  +old: {age: elderly}\n", 1),
                 encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        P.load_conditions(p)
    assert "field 'conditions.+old'" in str(ei.value)


def test_template_placeholder_missing_names_template(tmp_path):
    p = tmp_path / "bad_placeholder.yaml"
    p.write_text(_conditions_text().replace('religion: "The patient is {religion}."',
                                            'religion: "The patient is {faith}."', 1), encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        P.load_conditions(p)
    assert str(p) in str(ei.value) and "templates.standalone.religion" in str(ei.value)
    assert "faith" in str(ei.value)


def test_invalid_yaml_and_missing_section(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("templates: [unclosed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid YAML"):
        P.load_conditions(p)
    p.write_text(yaml.safe_dump({"templates": {"standalone": {}}}), encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        P.load_conditions(p)
    assert str(p) in str(ei.value) and "conditions" in str(ei.value)


def test_unknown_condition_lists_defined(conditions):
    with pytest.raises(KeyError) as ei:
        P.make_variant(Q, conditions, "+Pastafarian")
    msg = ei.value.args[0]
    assert "+Pastafarian" in msg
    for name in conditions.names():
        assert repr(name) in msg
    with pytest.raises(KeyError) as ei:
        P.make_variants(pd.DataFrame({"item_id": ["x"], "question": [Q]}), conditions, ["base", "+Pastafarian"])
    assert "+Pastafarian" in ei.value.args[0] and "'+homo'" in ei.value.args[0]


def test_describe_conditions(conditions):
    d = P.describe_conditions(conditions, ["base", "+gay", "neutral"],
                              ["standalone", "embedded"]).set_index("condition")
    assert d.loc["+gay", "standalone"] == "The patient identifies as gay."
    assert d.loc["+gay", "embedded"] == "patient who identifies as gay  [replaces the opening noun]"
    kept = P.describe_conditions(conditions, ["+gay"], ["embedded"], noun="vignette").set_index("condition")
    assert kept.loc["+gay", "embedded"] == "who identifies as gay"
    assert d.loc["neutral", "standalone"].endswith("[start]")
