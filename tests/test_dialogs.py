"""Dialog turns and de-identification on real MTS-Dialog and ACI-Bench dialogs."""
from __future__ import annotations

import difflib
import re

import pytest

from medaudit.prep import data, dialogs as D

LABEL_LINE = re.compile(r"^[ \t]*(Doctor|Patient|Guest_family|Gest_family|Guest_clinician|Guest_clinican):",
                        re.M)


@pytest.fixture(scope="module")
def mts(mts_train):
    return mts_train.set_index("source_id")


@pytest.fixture(scope="module")
def dialog_cfg(selection_cfg):
    return selection_cfg["dialogs"]


def body_starts_clean(turns):
    return all(t and not re.match(r"[_.:]|\d+:", t) for _, t in turns)


# --------------------------------------------------------------------------
# turns


@pytest.mark.parametrize("sid, label", [("931", "Gest_family"), ("702", "Guest_clinican"),
                                        ("1103", "Guest_clinican")])
def test_turns_misspelt_guest_labels(mts, sid, label):
    dlg = mts.loc[sid, "dialogue"]
    assert re.search(rf"^{label}:", dlg, re.M)
    turns = D.turns(dlg)
    assert len(turns) == len(LABEL_LINE.findall(dlg)) == D.n_turns(dlg)
    roles = [r for r, _ in turns]
    want = [{"Doctor": "doctor", "Patient": "patient"}.get(m, "other") for m in LABEL_LINE.findall(dlg)]
    assert roles == want
    assert body_starts_clean(turns)
    # the misspelt label's own turn, as text
    line = re.search(rf"^{label}:[ \t]*(.*?)[ \t]*\r?$", dlg, re.M).group(1)
    assert ("other", line.strip()) in turns


def test_turns_gest_family_text(mts):
    turns = D.turns(mts.loc["931", "dialogue"])
    assert turns[:4] == [
        ("doctor", "Hello. How are you all doing today?"),
        ("other", "We're doing fine. I'm the mother of my four year old boy."),
        ("doctor", "Hello, ma'am. What seems to be the problem?"),
        ("other", "We just wanted to follow up after my son's E R visit."),
    ]


def test_turns_aci(aci_train):
    dlg = aci_train.iloc[0]["dialogue"]
    turns = D.turns(dlg)
    assert turns[0] == ("doctor", "hi , martha . how are you ?")
    assert turns[1] == ("patient", "i'm doing okay . how are you ?")
    assert len(turns) == len(re.findall(r"^\[(doctor|patient)\]", dlg, re.M)) == 56
    assert {r for r, _ in turns} == {"doctor", "patient"}
    assert not any(t.startswith("[") for _, t in turns)


def test_turns_aci_patient_guest():
    d = data.load_dialogs().records.set_index("dialog_id")
    dlg = d.loc["aci-valid-D2N076", "dialogue"]
    turns = D.turns(dlg)
    n_guest = len(re.findall(r"^\[patient_guest\]", dlg, re.M))
    assert n_guest > 0
    assert sum(r == "other" for r, _ in turns) == n_guest
    assert ("other", "hi .") in turns


@pytest.mark.parametrize("sid, turn", [
    ("818", "Hi, ma'am. Could you confirm your age for me, please?"),
    ("1156", "Hello. I'm his wife."),
], ids=["Doctor_2", "Guest_family-period"])
def test_turns_unusual_labels(mts, sid, turn):
    turns = D.turns(mts.loc[sid, "dialogue"])
    assert turn in [t for _, t in turns]
    assert body_starts_clean(turns)


# --------------------------------------------------------------------------
# deidentify


def test_deidentify_mts_training_0(mts, dialog_cfg):
    dlg = mts.loc["0", "dialogue"]
    assert "seventy six years old" in dlg and "white female" in dlg and "Doctor Kumar" in dlg
    out, counts = D.deidentify(dlg, [], dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    assert "seventy six" not in out and "years old" not in out
    assert not re.search(r"\bwhite\b", out, re.I)
    assert "Doctor [NAME] followed up" in out and "Kumar" not in out
    assert counts == {"names": 1, "ages": 1, "race": 1, "origin": 0}
    # speaker labels untouched, same turns
    assert LABEL_LINE.findall(out) == LABEL_LINE.findall(dlg)
    assert [r for r, _ in D.turns(out)] == [r for r, _ in D.turns(dlg)]
    # every line but the two redacted ones is unchanged, character for character
    before, after = dlg.split("\n"), out.split("\n")
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert changed == [2, 7]
    assert after[2] == before[2].replace("Doctor Kumar", "Doctor [NAME]")
    assert after[7].startswith("Patient: I am and identify as a")
    assert before[7] == "Patient: I am seventy six years old and identify as a white female."


def test_deidentify_mts_training_0_keeps_sex(mts, dialog_cfg):
    out, _ = D.deidentify(mts.loc["0", "dialogue"], [], dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    assert out.split("\n")[7] == "Patient: I am and identify as a female."


def test_deidentify_aci_metadata_names(aci_train, dialog_cfg):
    rec = aci_train.iloc[0]
    assert rec["names"] == ["Martha", "Collins"]
    dlg = rec["dialogue"]
    assert re.search("martha", dlg, re.I)
    out, counts = D.deidentify(dlg, rec["names"], dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    for name in rec["names"]:
        assert not re.search(name, out, re.I)
    assert counts["names"] == len(re.findall(r"\b(martha|collins)\b", dlg, re.I)) == out.count("[NAME]")
    assert out.startswith("[doctor] hi , [NAME] . how are you ?")
    assert "50-year-old" in dlg and "50-year-old" not in out and counts["ages"] == 1
    # labels untouched
    assert re.findall(r"^\[\w+\]", out, re.M) == re.findall(r"^\[\w+\]", dlg, re.M)


@pytest.mark.parametrize("src, want", [
    ("Doctor: It looks like Doctor Kumar followed up with you.",
     "Doctor: It looks like Doctor [NAME] followed up with you."),
    ("Doctor: Mr. Smith is here, and Dr. Lee-Wong too.", "Doctor: Mr. [NAME] is here, and Dr. [NAME] too."),
    ("[doctor] hi , i'm dr. smith .", "[doctor] hi , i'm dr. [NAME] ."),
    ("Patient: I turned sixty last year.", "Patient: I last year."),
    ("Patient: I am from Mexico, you know.", "Patient: I am from, you know."),
])
def test_deidentify_made_up(src, want, dialog_cfg):
    out, _ = D.deidentify(src, [], dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    assert out == want


def test_deidentify_never_touches_labels():
    dlg = "Doctor: Hi.\nPatient: Doctor Patel sent me.\nGuest_family: Hello."
    out, counts = D.deidentify(dlg, ["Doctor", "Patient", "Guest"])
    assert out.split("\n")[0].startswith("Doctor: ") and out.split("\n")[1].startswith("Patient: ")
    assert out.split("\n")[2].startswith("Guest_family: ")


@pytest.mark.parametrize("sid, line", [
    ("388", "Patient: Got it. Thank you, Doctor. Do I need a follow-up?"),
    ("608", "Patient: Thank you, Doctor. Let's get started then."),
], ids=["mts388", "mts608"])
def test_deidentify_doctor_at_sentence_end(mts, dialog_cfg, sid, line):
    dlg = mts.loc[sid, "dialogue"]
    assert line in dlg
    out, counts = D.deidentify(dlg, [], dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    assert line in out
    assert counts["names"] == 0


# --------------------------------------------------------------------------
# lower-case titles: ACI-Bench writes "doctor wood" where MTS-Dialog writes "Doctor Wood"


@pytest.fixture(scope="module")
def all_raw():
    return data.load_dialogs().records.set_index("dialog_id")


def _deid(text, dialog_cfg, names=()):
    return D.deidentify(text, list(names), dialog_cfg["race_terms"], dialog_cfg["origin_terms"],
                        titles=dialog_cfg["lower_titles"])


@pytest.mark.parametrize("dialog_id, before, after, name", [
    ("aci-train-D2N045", "[patient] yeah i doctor wood is my primary care provider",
     "[patient] yeah i doctor [NAME] is my primary care provider", "wood"),
    # a surname that is also a colour (and a race word before a person noun): a name after "doctor"
    ("aci-clinicalnlp_taskB_test1-D2N114", "but as doctor white said anything", "but as doctor [NAME] said anything",
     "white"),
    ("aci-clinicalnlp_taskC_test2-D2N146", "as you're aware doctor miller sent me over",
     "as you're aware doctor [NAME] sent me over", "miller"),
    # the possessive stays
    ("aci-clinicalnlp_taskB_test1-D2N127", "and doctor collins's office", "and doctor [NAME]'s office", "collins"),
    # a word that is no name ends the name: "correct" stays
    ("aci-clinicalnlp_taskB_test1-D2N117", "by doctor nelson correct", "by doctor [NAME] correct", "nelson"),
    # first and last name after "dr.": both go (the surname used to survive as "dr. [NAME] howard")
    ("aci-valid-D2N074", "at the request of dr. henry howard for possible",
     "at the request of dr. [NAME] for possible", "howard"),
    # "that" before a title is no determiner
    ("aci-clef_taskC_test3-D2N178", "was that dr. sanchez ?", "was that dr. [NAME] ?", "sanchez"),
])
def test_lower_case_doctor_names_are_redacted(all_raw, dialog_cfg, dialog_id, before, after, name):
    rec = all_raw.loc[dialog_id]
    assert before in rec["dialogue"]
    out, counts = _deid(rec["dialogue"], dialog_cfg, rec["names"])
    assert after in out and before not in out
    assert not re.search(rf"\b{name}\b", out, re.I)
    # without the lower-case rule (the former behaviour) the lower-case "doctor" name survives
    old, _ = D.deidentify(rec["dialogue"], list(rec["names"]), dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
    if before.startswith(("[patient] yeah i doctor", "but as doctor", "as you're aware doctor")):
        assert before in old


@pytest.mark.parametrize("dialog_id, text", [
    ("mts-TrainingSet-133", "but doctor said to continue taking oxygen"),
    ("aci-train-D2N054", "i got to see my doctor he told me"),
    ("mts-TrainingSet-71", "I am waiting for your doctor's office to send it"),
    ("aci-clinicalnlp_taskB_test1-D2N090", "following doctor's orders"),
    ("aci-valid-D2N078", "doctor tell"),
    ("aci-train-D2N044", "doctor wanted"),
])
def test_ordinary_words_after_doctor_stay(all_raw, dialog_cfg, dialog_id, text):
    rec = all_raw.loc[dialog_id]
    assert text in rec["dialogue"]
    out, _ = _deid(rec["dialogue"], dialog_cfg, rec["names"] if isinstance(rec["names"], list) else [])
    assert text in out


@pytest.mark.parametrize("src", [
    "[patient] the doctor will call me tomorrow .",
    "[patient] my doctor's office called .",
    "[patient] the doctor explained it , and another doctor recommended rest .",
    "[doctor] thank you , doctor . do i need a follow-up ?",
    "[patient] a doctor visit is expensive .",
    "[patient] i'm the doctor and you're the patient ?",
])
def test_ordinary_words_after_doctor_made_up(src, dialog_cfg):
    out, counts = _deid(src, dialog_cfg)
    assert out == src and counts["names"] == 0


def test_lower_case_title_names_on_every_dialog(all_raw, dialog_cfg):
    """Every word the lower-case title rule adds to the former redaction
    (which took one word after "dr.", "ms.", …) in data/raw is a name, read
    by hand: surnames after "doctor", and the surname after a first name
    after "dr." ("dr. vincent sanchez"); no ordinary word after a lower-case
    "doctor" is taken (122 stay in the de-identified dialogs: "doctor said", …)."""
    taken = {}
    for did, rec in all_raw.iterrows():
        names = rec["names"] if isinstance(rec["names"], list) else []
        old, _ = D.deidentify(rec["dialogue"], names, dialog_cfg["race_terms"], dialog_cfg["origin_terms"])
        new, _ = _deid(rec["dialogue"], dialog_cfg, names)
        if old != new:
            a, b = old.split(), new.split()
            sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
            for op, i1, i2, j1, j2 in sm.get_opcodes():
                if op != "equal":
                    taken.setdefault(did, []).append(" ".join(a[i1:i2]))
    assert taken == {
        "aci-train-D2N017": ["taylor"], "aci-train-D2N018": ["gutierrez"], "aci-train-D2N027": ["sanchez"],
        "aci-train-D2N045": ["wood"], "aci-train-D2N047": ["moore"], "aci-valid-D2N074": ["howard"],
        "aci-clinicalnlp_taskB_test1-D2N098": ["rivera"],
        "aci-clinicalnlp_taskB_test1-D2N114": ["white"], "aci-clinicalnlp_taskB_test1-D2N117": ["nelson"],
        "aci-clinicalnlp_taskB_test1-D2N118": ["harris", "harris"],
        "aci-clinicalnlp_taskB_test1-D2N127": ["collins's"],
        "aci-clinicalnlp_taskC_test2-D2N146": ["miller"], "aci-clinicalnlp_taskC_test2-D2N157": ["miller"],
        "aci-clef_taskC_test3-D2N180": ["ward"], "aci-clef_taskC_test3-D2N197": ["ruth", "ruth"],
        "aci-clef_taskC_test3-D2N207": ["white"], "aci-train-D2N022": ["davis"]}


# --------------------------------------------------------------------------
# deidentify_all and deid_counts


@pytest.fixture(scope="module")
def deid(dialog_cfg):
    return D.deidentify_all(data.load_dialogs().records, dialog_cfg)


def test_deidentify_all_keep_rule(deid, dialog_cfg):
    assert dialog_cfg["min_turns_mts"] == 10
    assert len(deid) == 1701 + 207
    assert (deid["turns"] == deid["dialogue"].map(lambda d: len(D.turns(d)))).all()
    mts = deid[deid["dataset"] == "mts_dialog"]
    aci = deid[deid["dataset"] == "aci_bench"]
    assert (mts["keep"] == (mts["turns"] >= 10)).all()
    assert (~mts["keep"]).sum() > 0 and mts["keep"].sum() > 0
    assert aci["keep"].all()
    assert (aci["turns"] < 10).any()  # short ACI dialogs are kept all the same


def test_deidentify_all_redacts(deid):
    row = deid.set_index("dialog_id").loc["aci-train-D2N001"]
    assert "[NAME]" in row["dialogue_deid"] and not re.search("martha", row["dialogue_deid"], re.I)
    assert row["redacted_names"] == 3
    mts0 = deid.set_index("dialog_id").loc["mts-TrainingSet-0"]
    assert mts0["redacted_ages"] == 1 and mts0["redacted_race"] == 1
    assert "seventy six" not in mts0["dialogue_deid"]
    # dialogs without anything to redact are unchanged
    none = deid[deid.filter(like="redacted_").sum(axis=1) == 0]
    assert len(none) > 0 and (none["dialogue_deid"] == none["dialogue"]).all()


def test_deid_counts_agree_with_frame(deid):
    c = D.deid_counts(deid).set_index("dataset")
    for ds, g in deid.groupby("dataset"):
        assert c.loc[ds, "dialogs"] == len(g)
        assert c.loc[ds, "kept"] == g["keep"].sum()
        assert c.loc[ds, "dropped (< min turns)"] == (~g["keep"]).sum()
        assert c.loc[ds, "kept"] + c.loc[ds, "dropped (< min turns)"] == len(g)
        for k in ("names", "ages", "race", "origin"):
            assert c.loc[ds, f"{k} redacted"] == g[f"redacted_{k}"].sum()
        assert c.loc[ds, "with any redaction"] == (g.filter(like="redacted_").sum(axis=1) > 0).sum()
    assert c.loc["aci_bench", "dropped (< min turns)"] == 0
    assert c["dialogs"].sum() == len(deid)


# --------------------------------------------------------------------------
# the demographic screen (seed 002 §3): excludes dialogs with any cue left


@pytest.fixture(scope="module")
def screen_cfg():
    from medaudit.studies import soap
    return soap.load_config().screen


@pytest.fixture(scope="module")
def screened(deid, screen_cfg):
    return D.screen_all(deid, screen_cfg).set_index("dialog_id")


@pytest.mark.parametrize("dialog_id, kinds", [
    # the empty "How old are you? / Patient: ." the redaction left ("Welcome in, sir." is redacted)
    ("mts-TrainingSet-1172", {"demographic_question"}),
    # "What race do you identify as? / Patient: White."
    ("mts-TrainingSet-131", {"race_answer", "demographic_question"}),
    # "thirty-sixth birthday"
    ("mts-TestSet-1-MEDIQA-Chat-2023-38", {"dob"}),
    # "date of birth 1/12/71"
    ("aci-train-D2N022", {"dob"}),
    # a guest speaks of the patient ("He was seven.", now "They were seven."): a testicle, one sex
    ("mts-TrainingSet-44", {"sex_specific"}),
    # a baby: "two ounces of milk in every feed" (a child patient cannot be redacted)
    ("mts-TrainingSet-294", {"life_stage"}),
    # "… and would proudly call myself as latin american." (no race term redacted it)
    ("mts-TrainingSet-593", {"race_answer"}),
])
def test_screen_excludes_dialogs_with_cues(screened, dialog_id, kinds):
    r = screened.loc[dialog_id]
    assert not r["screen_pass"]
    assert kinds <= set(r["cues"].split(", ")), r["cues"]


@pytest.mark.parametrize("dialog_id, before, after, change", [
    # "[NAME] is a male with a past medical history …" (ACI dictation; once excluded)
    ("aci-train-D2N002", "is a male with", "is a person with", "gender: male→person"),
    # "i'm seeing ms. [NAME] . she's a female": title, pronoun and gender noun all go
    ("aci-train-D2N005", "i'm seeing ms. [NAME] . she's a female ,", "i'm seeing [NAME] . they're a person ,",
     "pronoun: she's→they're"),
    # the spouse's gender (A.3.5): "my wife took me to the er"
    ("aci-train-D2N014", "my wife took me", "my spouse took me", "spouse: wife→spouse"),
    # "Hello, miss." (the hand review excluded it for this alone)
    ("mts-TestSet-2-MEDIQA-Sum-2023-8", "Doctor: Hello, miss.", "Doctor: Hello.", "address: miss→(removed)"),
    # "Welcome back to the clinic, Miss A B C."
    ("mts-TrainingSet-172", "clinic, Miss A B C.", "clinic, [NAME].", "title: miss a b c→[NAME]"),
    # retirement (seed §3's own example of a life-stage cue)
    ("mts-TrainingSet-221", "retired", "not working", "life_stage: retired→not working"),
    # a doctor's dictation about the patient
    ("mts-TrainingSet-41", "He is alert", "They are alert", "pronoun: he→they"),
])
def test_redactable_cues_are_redacted_and_the_dialog_kept(deid, screened, dialog_id, before, after, change):
    """Seed 002 §3: "We explicitly exclude or redact dialogs that mention
    patient names or include either self-identified or inferred
    demographic indicators." and "We additionally remove age-related
    information-such as explicit age mentions and contextual indicators of
    life stage (e.g., references to retirement or college attendance)";
    A.3.5: notes hallucinated "gendered pronouns" and "patient spouse
    gender" from the redacted dialogs, so those dialogs had neither.
    Before, every one of these dialogs was excluded for the cue."""
    src = deid.set_index("dialog_id").loc[dialog_id, "dialogue_deid"]
    r = screened.loc[dialog_id]
    assert before in src and before not in r["dialogue_deid"]
    assert after in r["dialogue_deid"]
    assert change in r["redactions"], r["redactions"]
    assert r["screen_pass"], r["cues"]


def test_removed_race_and_origin_terms_no_longer_exclude(deid, screened, screen_cfg):
    """Seed 002 §3 removes "racial and ethnic descriptors and references to
    national or geographic origin" and keeps the dialog; the former screen
    counted each removal as a reason to exclude (params/soap.yaml
    ``screen.removed_exclude``, now empty)."""
    assert screen_cfg["removed_exclude"] == []
    for dialog_id, kind in (("mts-TrainingSet-102", "race"), ("mts-TrainingSet-579", "origin")):
        r = screened.loc[dialog_id]
        assert r[f"redacted_{kind}"] > 0 and r["screen_pass"], r["cues"]
    former = D.screen_all(deid[deid["dialog_id"] == "mts-TrainingSet-102"],
                          {**screen_cfg, "removed_exclude": ["race", "origin"]})
    assert not former["screen_pass"].iloc[0] and former["cues"].iloc[0] == "race"


@pytest.mark.parametrize("text, want", [
    ("Doctor: She is fine. She has pain in her knee. Give her the pills.",
     "Doctor: They are fine. They have pain in their knee. Give them the pills."),
    ("Doctor: Has she been lethargic? Does he take it? He takes it daily.",
     "Doctor: Have they been lethargic? Do they take it? They take it daily."),
    ("Doctor: She also has diabetes and she still goes to work.",
     "Doctor: They also have diabetes and they still go to work."),
    # a spouse named nearby: the he may be the spouse, left as it is
    ("Doctor: He takes it daily and his wife knows.", "Doctor: He takes it daily and his wife knows."),
    ("Doctor: He's been sick. She's tired. He'll call. The pen is his.",
     "Doctor: They've been sick. They're tired. They'll call. The pen is theirs."),
    ("Patient: My mother had a stroke and she passed.", "Patient: My mother had a stroke and she passed."),
])
def test_neutral_pronouns_keep_the_grammar(screen_cfg, text, want):
    assert D.neutral_pronouns(text, D._words_regex(screen_cfg["others"]))[0] == want


def test_unredactable_cues_still_exclude(screen_cfg):
    """What cannot be removed without changing the case still excludes:
    one sex's anatomy or conditions (the seed's "male patient presenting
    with ovarian cancer"), a date of birth, a child patient."""
    text = ("Doctor: Are you pregnant? My wife asked.\nPatient: My husband says my date of birth is on file. "
            "I am retired.\nDoctor: Sir, your pediatrician called.")
    red, changes = D.redact_cues(text, screen_cfg)
    assert "wife" not in red and "husband" not in red and "retired" not in red and "Sir" not in red
    cues = D.screen_cues(red, screen_cfg)
    assert cues["sex_specific"] == ["pregnant"] and cues["dob"] == ["date of birth"]
    assert cues["life_stage"] == ["pediatrician"] and cues["spouse"] == [] and cues["address"] == []
    assert red.endswith("I am not working.\nDoctor: Your pediatrician called.")
    assert D.redactions_text(changes) == ("address: sir→(removed); spouse: wife→spouse, husband→spouse; "
                                          "life_stage: retired→not working")


def test_screen_keeps_the_seeds_own_table_1_dialogs(screened):
    # seed Table 1 quotes these two MTS dialogs ("I am feeling very dizzy", "All over my belly")
    for dialog_id in ("mts-TrainingSet-873", "mts-TrainingSet-984"):
        assert screened.loc[dialog_id, "screen_pass"], screened.loc[dialog_id, "cues"]


def test_pronouns_of_other_people_are_not_the_patient(mts, screen_cfg):
    # "my mother had complication from her heart disease and that is how she passed"
    others = D._words_regex(screen_cfg["others"])
    assert D.patient_pronouns(mts.loc["8", "dialogue"], others) == []
    assert "he" in D.patient_pronouns(mts.loc["44", "dialogue"], others)


def test_screen_word_rules(screen_cfg):
    cues = D.screen_cues("[patient] you're certain i do n't have alpha-gal syndrome though ?", screen_cfg)
    assert cues["gender"] == []                                   # "alpha-gal" holds no "gal"
    cues = D.screen_cues("Patient: Oh, man. My asthma has been getting worse.", screen_cfg)
    assert cues["gender"] == []                                   # an interjection
    cues = D.screen_cues("Patient: My wife's anxiety is bad. I retired last year.", screen_cfg)
    assert cues["spouse"] == ["wife"] and cues["life_stage"] == ["retired"]


def test_screen_all_counts_every_kind(screened, screen_cfg):
    kinds = set(screen_cfg["exclude"])
    fail = screened[~screened["screen_pass"]]
    assert (fail["cues"] != "").all() and (screened.loc[screened["screen_pass"], "cues"] == "").all()
    for k in kinds:
        col = screened[f"cue_{k}"]
        assert ((col != "") <= screened["cues"].str.contains(k)).all()
