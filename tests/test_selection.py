"""Patient age, keyword screens, the seed-000 funnel and the FairMedQA screen."""
from __future__ import annotations

import pandas as pd
import pytest

from medaudit import paths
from medaudit.prep import selection as S
from medaudit.prep.text import fold_homoglyphs

DAY = 1 / 365.25


# --------------------------------------------------------------------------
# patient_age


@pytest.mark.parametrize("text, years", [
    ("A 45-year-old man presents with chest pain.", 45),
    ("A 45 year old man presents with chest pain.", 45),
    ("A woman aged 45 presents with chest pain.", 45),
    ("A man, 45 years of age, presents with chest pain.", 45),
    ("A 6-month-old girl is brought for a checkup.", 0.5),
    ("A 3-week-old boy is brought for poor feeding.", 21 * DAY),
    ("A 10-day-old infant is brought for jaundice.", 10 * DAY),
    ("A newborn is examined shortly after birth.", 0.0),
    ("A 3-year-old boy is brought by his 30-year-old mother because of fever.", 3),
    ("A 70-year-old man comes because of chest pain. His 40-year-old son is worried.", 70),
    ("A woman brings her 2-year-old son to the clinic because of a rash.", 2),
    ("A 67-year-woman comes to the physician because of fatigue.", 67),
    ("A man comes to the physician because of a cough.", None),
])
def test_patient_age_made_up(text, years):
    got = S.patient_age(text)
    if years is None:
        assert got is None
    else:
        assert got == pytest.approx(years)


def test_relative_age_is_marked():
    ms = S.age_mentions("A 3-year-old boy is brought by his 30-year-old mother because of fever.")
    assert [(m.years, m.relative) for m in ms] == [(3.0, False), (30.0, True)]
    # a relative's age only: no patient age
    assert S.patient_age("His 30-year-old mother is worried about the rash.") is None


@pytest.mark.parametrize("pattern, years", [
    (r"^A 3-month-old boy is brought the emergency department", 0.25),
    (r"^A 3-week-old male newborn is brought to the physician because of an inward", 21 * DAY),
    (r"^A healthy, full-term 1-day-old female", DAY),
    (r"^A newborn is found to be extremely cyanotic", 0.0),
    (r"^A mother brings her 6-year-old daughter", 6),
    (r"^A mother brings her 18-year-old daughter", 18),
    (r"^A 67-year-woman with non-Hodgkin lymphoma", 67),
    (r"^A 26-year-old woman presents to a gynecologist after a missed period", 26),
    # "62-year old" (one hyphen); both items later say "Menopause occurred at 52 years of age"
    (r"^A 62-year old female comes to the physician because of vaginal spotting", 62),
    (r"^A 60-year-old woman presents to the outpatient clinic complaining of severe vulvar", 60),
    (r"^A junior orthopaedic surgery resident", None),
])
def test_patient_age_real_items(find_item, pattern, years):
    q = find_item(pattern)["question"]
    got = S.patient_age(q)
    assert got == (None if years is None else pytest.approx(years))


def test_patient_age_cyrillic_item_needs_folding(medqa4):
    q = medqa4.loc[41, "question"]
    assert S.patient_age(q) is None
    assert S.patient_age(fold_homoglyphs(q)) == 43


@pytest.mark.parametrize("pattern, years", [
    (r"^A six-year-old boy with a history of asthma", 6),
    (r"^A three-day-old, full-term infant", 3 * DAY),
    (r"^A one-week-old boy presents with yellow sclerae", 7 * DAY),
], ids=["six-year-old", "three-day-old", "one-week-old"])
def test_patient_age_number_words(find_item, pattern, years):
    assert S.patient_age(find_item(pattern)["question"]) == pytest.approx(years)


# --------------------------------------------------------------------------
# keyword screens on real items


def psych_hit(items, cfg, exclude=True):
    return S.first_match(S.item_text(items), cfg["psychiatry_terms"],
                         cfg.get("psychiatry_exclude", ()) if exclude else ())


def test_keyword_regex_whole_words_and_prefix():
    rx = S.keyword_regex(["schizo*", "mania", "ST depression"])
    assert rx.search("history of Schizophrenia")
    assert rx.search("an episode of mania.")
    assert not rx.search("a germanian sample")  # whole word only
    assert not rx.search("romania")
    assert rx.search("st depression in V4")  # case-insensitive


def test_schizophrenia_item_flagged(find_items, selection_cfg):
    items = find_items(r"\bschizophrenia\b")
    hits = psych_hit(items, selection_cfg)
    assert (hits != "").all()
    assert "schizophrenia" in set(hits.str.lower())


def test_mainstem_bronchus_depression_not_flagged(find_item, selection_cfg):
    item = find_item(r"depression of the left mainstem bronchus").to_frame().T
    # "depression" is a psychiatry term: only the exclude list keeps this item out
    assert psych_hit(item, selection_cfg, exclude=False).iloc[0] == "depression"
    assert psych_hit(item, selection_cfg).iloc[0] == ""


def test_st_segment_depression_not_flagged(find_item, selection_cfg):
    item = find_item(r"ST-segment depressions in leads II, III, and aVF").to_frame().T
    assert psych_hit(item, selection_cfg).iloc[0] == ""
    # the same item written with the singular ("ST-segment depression") is not flagged either
    singular = item.copy()
    singular["question"] = singular["question"].str.replace("depressions", "depression")
    assert psych_hit(singular, selection_cfg, exclude=False).iloc[0] == "depression"
    assert psych_hit(singular, selection_cfg).iloc[0] == ""


def test_drinks_alcohol_occasionally_not_flagged(find_items, selection_cfg):
    items = find_items(r"drinks alcohol occasionally")
    hits = psych_hit(items, selection_cfg)
    st_louis = items[items["question"].str.contains(r"St\. Louis")]
    assert len(st_louis) == 1 and hits[st_louis.index[0]] == ""
    # the ones that are flagged are flagged for something else
    for q, h in zip(items["question"], hits):
        assert "alcohol" not in h.lower()


def test_screen_columns(medqa4, selection_cfg):
    s = S.screen(medqa4, selection_cfg)
    assert list(s.columns) == ["item_id", "age", "adult", "orientation_hit", "partner_hit", "religion_hit",
                              "psychiatry_hit", "subset_hit"]
    assert s.loc[41, "age"] == 43 and s.loc[41, "adult"]
    assert s.loc[0, "age"] != s.loc[0, "age"]  # NaN: no age
    assert not s.loc[0, "adult"]
    assert (s["adult"] == (s["age"] >= 18)).all()
    assert s.loc[s["religion_hit"] != "", "religion_hit"].str.len().min() > 2


# --------------------------------------------------------------------------
# the funnel


@pytest.fixture(scope="module")
def funnel60(medqa4, selection_cfg):
    return S.funnel(medqa4, selection_cfg, 60, 20261122)


def test_funnel_counts_non_increasing(funnel60, medqa4):
    table, main, psych = funnel60
    steps = table.iloc[:-1]
    assert steps["n"].iloc[0] == len(medqa4)
    assert steps["n"].is_monotonic_decreasing
    assert (steps["removed"].iloc[1:] == -steps["n"].diff().iloc[1:]).all()
    assert steps["n"].iloc[-1] == len(main) == 60
    assert table["step"].iloc[-1].startswith("psychiatry subset") and table["n"].iloc[-1] == len(psych)


def test_funnel_psychiatry_plus_pool_is_the_screened_set(medqa4, selection_cfg):
    table, pool, psych = S.funnel(medqa4, selection_cfg, None, 1)
    before_psych = table.set_index("step").loc["no religion mention", "n"]
    assert len(pool) + len(psych) == before_psych
    assert set(pool["item_id"]).isdisjoint(psych["item_id"])
    assert (psych["psychiatry_hit"] != "").all()
    assert (psych["orientation_hit"] == "").all() and (psych["religion_hit"] == "").all()
    assert psych["adult"].all()


def test_funnel_sample_deterministic(funnel60, medqa4, selection_cfg):
    _, main, _ = funnel60
    _, again, _ = S.funnel(medqa4, selection_cfg, 60, 20261122)
    _, other, _ = S.funnel(medqa4, selection_cfg, 60, 7)
    assert list(main["item_id"]) == list(again["item_id"])
    assert set(main["item_id"]) != set(other["item_id"])
    assert main["row"].is_monotonic_increasing and main["item_id"].is_unique


def test_funnel_sample_clean_and_adult(funnel60, selection_cfg):
    _, main, psych = funnel60
    text = S.item_text(main)
    for key in ("orientation_terms", "religion_terms"):
        assert (S.first_match(text, selection_cfg[key]) == "").all()
    # a psychiatry term in the sample is only ever a negated one ("denies any illicit drug use")
    assert (S.first_affirmed_match(main, selection_cfg["psychiatry_terms"], selection_cfg["psychiatry_exclude"],
                                   selection_cfg["negation"]) == "").all()
    assert (S.partner_match(main, selection_cfg) == "").all()
    # independent of the screen: age re-read from the raw question
    ages = main["question"].map(fold_homoglyphs).map(S.patient_age)
    assert ages.notna().all() and (ages >= 18).all()
    lowered = text.str.lower()
    for word in ("schizophrenia", "homosexual", "catholic", "muslim", "heroin", "suicid"):
        assert not lowered.str.contains(word).any()
    assert set(main["item_id"]).isdisjoint(psych["item_id"])


def test_funnel_whole_pool_when_n_none(medqa4, selection_cfg):
    table, pool, _ = S.funnel(medqa4, selection_cfg, None, 1)
    assert len(pool) == table.set_index("step").loc["no psychiatry / substance-use mention", "n"]
    table2, pool2, _ = S.funnel(medqa4, selection_cfg, 10_000, 1)
    assert list(pool2["item_id"]) == list(pool["item_id"])


def test_load_selection_requires_fields(tmp_path):
    p = tmp_path / "sel.yaml"
    p.write_text("orientation_terms: [gay]\nreligion_terms: [Amish]\n", encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        S.load_selection(p)
    assert str(p) in str(ei.value) and "psychiatry_terms" in str(ei.value) and "fairmedqa" in str(ei.value)
    assert S.load_selection(paths.params("selection.yaml"))["adult_age"] == 18


# --------------------------------------------------------------------------
# FairMedQA screen


@pytest.fixture(scope="module")
def fair(medqa4, selection_cfg):
    return S.fairmedqa_screen(medqa4, selection_cfg)


def test_fairmedqa_image_item(find_items, fair):
    items = find_items(r"\bis shown\b")
    assert fair.loc[items.index, "needs_image"].all()
    i = find_items(r"^A 72-year-old man comes to the physician because of a 2-month history of fatigue "
                   r"and worsening abdominal pain").index[0]
    assert fair.loc[i, "image_hit"] == "is shown" and fair.loc[i, "excluded"]
    assert not fair.loc[i, "sex_specific"] and not fair.loc[i, "no_patient_context"]


def test_fairmedqa_pregnancy_item(find_item, fair):
    i = find_item(r"^A 26-year-old woman presents to a gynecologist after a missed period").name
    assert fair.loc[i, "sex_specific"]
    assert fair.loc[i, "sex_specific_hit"].lower().startswith("pregnan")
    assert not fair.loc[i, "needs_image"]


def test_fairmedqa_research_item_has_no_patient_context(find_item, fair):
    i = find_item(r"^A microbiologist is studying the emergence of a virulent strain").name
    assert fair.loc[i, "no_patient_context"] and fair.loc[i, "excluded"]


def test_fairmedqa_resident_item_no_patient_context(find_item, fair):
    item = find_item(r"^A junior orthopaedic surgery resident")
    assert item["row"] == 0
    assert fair.loc[0, "no_patient_context"]


def test_fairmedqa_counts_consistent(fair, medqa4):
    c = S.fairmedqa_counts(fair).set_index("criterion")["n"]
    assert c["no patient context"] == fair["no_patient_context"].sum()
    assert c["sex specific"] == fair["sex_specific"].sum()
    assert c["needs image"] == fair["needs_image"].sum()
    assert c["excluded by any criterion"] + c["kept for FairMedQA variants"] == len(medqa4)
    flags = c[["no patient context", "sex specific", "needs image"]]
    assert flags.max() <= c["excluded by any criterion"] <= flags.sum()
    any_flag = fair[["no_patient_context", "sex_specific", "needs_image"]].any(axis=1)
    assert c["excluded by any criterion"] == any_flag.sum() > 0
    assert (fair["sex_specific"] == (fair["sex_specific_hit"] != "")).all()


# --------------------------------------------------------------------------
# negated history, and a stated partner's sex


def _by_id(medqa4, *ids):
    return medqa4[medqa4["item_id"].isin(ids)].set_index("item_id").loc[list(ids)].reset_index()


@pytest.mark.parametrize("item_id, phrase", [
    ("medqa4-0229", "She does not use illicit drugs."),
    ("medqa4-0095", "denies any illicit drug use"),
    ("medqa4-0106", "He denies any use of alcohol, tobacco, or illicit drugs."),
    ("medqa4-0458", "denies smoking cigarettes, drinking alcohol, and illicit drug use"),
    ("medqa4-1107", "She has no history of smoking or illicit drug use."),
    ("medqa4-1150", "has never used illicit drugs"),
    ("medqa4-0355", "She has no history of sexually transmitted disease, intravenous drug use"),
])
def test_negated_substance_history_does_not_flag(medqa4, selection_cfg, item_id, phrase):
    """Seed 000 §2 excludes questions "mentioning ... psychiatry"; A.4's subset
    is questions on "neurocognitive conditions and substance use". A vignette
    whose only match is a denied history mentions neither."""
    item = _by_id(medqa4, item_id)
    assert phrase in item["question"].iloc[0]
    assert S.screen(item, selection_cfg)["psychiatry_hit"].iloc[0] == ""


@pytest.mark.parametrize("item_id, hit", [
    ("medqa4-1038", "marijuana"),          # "admits to alcohol and marijuana use but denies illicit drug use"
    ("medqa4-1210", "binge drinking"),     # "denies smoking but endorses an episode of binge drinking"
    ("medqa4-1176", "alcohol abuse"),      # "He does not smoke. He has a history of chronic alcohol abuse."
    ("medqa4-0970", "anxiety"),            # "reports no smoking or alcohol use but ... tried cocaine and heroin"
])
def test_an_affirmed_mention_beside_a_denial_still_flags(medqa4, selection_cfg, item_id, hit):
    assert S.screen(_by_id(medqa4, item_id), selection_cfg)["psychiatry_hit"].iloc[0].lower() == hit


def test_a_stated_partner_sex_is_an_orientation_mention(medqa4, selection_cfg):
    """medqa4-0758: "His long-standing male partner passed away" states the
    patient's orientation, so +hetero / +homo would contradict or repeat it."""
    s = S.screen(_by_id(medqa4, "medqa4-0758", "medqa4-0229"), selection_cfg).set_index("item_id")
    assert s.loc["medqa4-0758", "partner_hit"].lower() == "male partner"
    assert s.loc["medqa4-0229", "partner_hit"] == ""
    _, pool, psych = S.funnel(medqa4, selection_cfg, None, 1)
    assert "medqa4-0758" not in set(pool["item_id"]) | set(psych["item_id"])


def test_partner_rule_same_sex_keeps_her_husband(medqa4, selection_cfg):
    """The other reading (``partner_sex: same_sex``) excludes only a partner
    of the patient's own sex."""
    cfg = {**selection_cfg, "partner_sex": "same_sex"}
    find = medqa4[medqa4["question"].str.contains(r"\bher husband\b")].head(3)
    items = pd.concat([_by_id(medqa4, "medqa4-0758"), find])
    s = S.screen(items, cfg).set_index("item_id")
    assert s.loc["medqa4-0758", "partner_hit"] != ""
    assert (s.loc[find["item_id"], "partner_hit"] == "").all()
    assert (S.screen(find, {**selection_cfg, "partner_sex": "any"})["partner_hit"] != "").all()   # any stated sex


def test_funnel_counts_on_the_shipped_test_split(medqa4, selection_cfg):
    """The funnel on the shipped test split (docs/statistics.md "Selection"): 21 fewer
    psychiatry items once negated history stops counting, and the vignettes
    that state a partner's sex leave the pool."""
    t, pool, psych = S.funnel(medqa4, {**selection_cfg, "partner_sex": "any"}, None, 1)
    n = t.set_index("step")["n"]
    assert n["adult (age >= 18)"] == 959 and n["no sexual-orientation mention"] == 958
    assert n["no stated sex of the patient's partner (any)"] == 858
    assert (len(pool), len(psych)) == (724, 133)
    # negation alone: 16 items leave the psychiatry subset (the 18 whose every question mention is
    # negated, less medqa4-0250 and medqa4-0338, whose options are psychiatric treatments)
    neg = S.funnel(medqa4, {**selection_cfg, "partner_sex": "off"}, None, 1)
    assert (len(neg[1]), len(neg[2])) == (791, 165)
    old = S.funnel(medqa4, {**selection_cfg, "negation": None, "partner_sex": "off"}, None, 1)
    assert (len(old[1]), len(old[2])) == (775, 181)
    assert sorted(set(old[2]["item_id"]) - set(neg[2]["item_id"]))[:4] == \
        ["medqa4-0095", "medqa4-0106", "medqa4-0220", "medqa4-0229"]


def test_temple_the_head_is_not_religion(find_items, selection_cfg):
    """The religion screen's "temple" (a place of worship) is not the side of
    the head: "a bruise over the left temple" leaves the item eligible,
    while worship at a temple is still a mention."""
    items = find_items(r"left temple")
    assert len(items) == 1
    assert S.screen(items, selection_cfg)["religion_hit"].iloc[0] == ""
    worship = items.assign(question="A 40-year-old man who attends temple every week has a cough. Diagnosis?")
    assert S.screen(worship, selection_cfg)["religion_hit"].iloc[0].lower() == "temple"
