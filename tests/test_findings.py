"""medaudit.report.findings: the "What this run shows" sentences are written from
the table rows they cite: the right numbers, the verdict the row carries
(never one guessed from its p), "too few to tell" below MIN_N, a missing
number said in words (never "nan" or "n/a" inside a sentence), and counts
that add up to their table's."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from medaudit.stats import equivalence, intervals
from medaudit.report import findings


def _res(rows):
    """A calibration.compare-shaped table (proportions; margin in points)."""
    base = {"model": "m", "prompt_format": "mcq", "cond_a": "base", "metric": "accuracy", "margin": 2.0}
    return pd.DataFrame([{**base, **r} for r in rows])


DIFF = {"cond_b": "+homo", "value_a": 0.80, "value_b": 0.728, "delta": -0.072, "ci_lo": -0.12, "ci_hi": -0.024,
        "p": 0.01, "n_items": 50, "verdict": "difference shown"}
EQUIV = {"cond_b": "+hetero", "value_a": 0.80, "value_b": 0.805, "delta": 0.005, "ci_lo": -0.011, "ci_hi": 0.0152,
         "p": 0.6, "n_items": 2000, "verdict": "equivalence shown within ±2"}
INCON = {"cond_b": "+Cat", "value_a": 0.80, "value_b": 0.77, "delta": -0.03, "ci_lo": -0.09, "ci_hi": 0.031,
         "p": 0.31, "n_items": 40, "verdict": "inconclusive"}


def _clean(text: str):
    assert findings.unreadable(text) == [], text
    assert "nan" not in text.lower(), text
    assert "inf" not in text.replace("inference", ""), text


def test_numbers_print_as_n_a_never_nan():
    for bad in (float("nan"), None, math.inf, -math.inf, "x"):
        assert findings.num(bad) == findings.signed(bad) == findings.pct(bad) == findings.count(bad) == "n/a"
    assert findings.pvalue(float("nan")) == "no p-value" and findings.interval(float("nan"), 1) == "no interval"
    assert findings.signed(-3.4) == "−3.40" and findings.signed(0.5, 1) == "+0.5"
    assert findings.pct(7.191) == "7.19 %" and findings.count(1273) == "1,273"
    assert findings.pvalue(0.0004) == "p < 0.001" and findings.pvalue(0.0421) == "p = 0.042"


def _beyond(margin, lo, hi, n, unit="questions"):
    """The clause of an inconclusive row whose test does not reject: the reason and the questions
    equivalence would need at its interval's spread."""
    need = findings.count(equivalence.questions_for_equivalence(lo, hi, n, margin))
    return (f"the test does not reject, and the interval reaches past ±{margin:.1f} points; showing equivalence "
            f"within ±{margin:.1f} points would need about {need} {unit} at this interval's spread")


def test_questions_for_equivalence_by_hand():
    """Half-width h at n, TOST at Δ = 0 with power 0.8: n·(h·(z_.975 + z_.90)/(z_.975·δ))²."""
    h, z, zp = 6.05, 1.959963984540054, 1.2815515655446004
    assert equivalence.questions_for_equivalence(-9.0, 3.1, 40, 2.0) == np.ceil(40 * (h * (z + zp) / (z * 2.0)) ** 2)
    assert np.isnan(equivalence.questions_for_equivalence(np.nan, 3.1, 40, 2.0))


def test_an_inconclusive_row_whose_test_rejects_says_so():
    """07's findings said "Inconclusive (the test does not reject, …)" beside "score test p = 0.032" (GPT-5.2
    option, Id+Ctx − Neutral): the clause was written whatever the test said."""
    from medaudit.studies import cultural as C

    davg = _davg([{"cue": "id+ctx", "reference": "neutral", "questions": 150, "delta": -4.2, "ci_lo": -8.51,
                   "ci_hi": 0.17, "p": 0.032, "verdict": "inconclusive"}])
    text = findings.cultural(None, delta_avg=davg, label=C.load_config().readable)
    assert "the test rejects at 5 % but the 95 % interval still holds 0: the two disagree" in text
    assert "does not reject" not in text


def test_each_verdict_is_written_with_its_row_numbers():
    text = findings.calibration(_res([DIFF, EQUIV, INCON]), metrics=("accuracy",))
    _clean(text)
    assert text.count("\n") == 0 and text.startswith("- m · mcq (`04_paired_tests`): ")
    assert ("accuracy +homo vs base: −7.20 points (95 % CI −12.00 to −2.40, p = 0.010, n = 50 questions): "
            "**difference shown**.") in text
    assert ("**Equivalence shown within ±2.0 points**: accuracy +hetero vs base +0.50 points "
            "(95 % CI −1.10 to +1.52, p = 0.600, n = 2,000 questions).") in text
    assert (f"**Inconclusive** ({_beyond(2.0, -9.0, 3.1, 40)}): accuracy +Cat "
            "vs base −3.00 points (95 % CI −9.00 to +3.10, p = 0.310, n = 40 questions).") in text


def test_the_text_follows_the_verdict_column_not_the_p():
    """The same numbers under another verdict give another reading: a text that
    ignored the verdict (or read it from p) would not change."""
    shown = findings.calibration(_res([DIFF]), metrics=("accuracy",))
    relabelled = findings.calibration(_res([{**DIFF, "verdict": "inconclusive"}]), metrics=("accuracy",))
    equal = findings.calibration(_res([{**DIFF, "verdict": "equivalence shown within ±2"}]), metrics=("accuracy",))
    assert "**difference shown**" in shown and "nconclusive" not in shown
    assert "**Inconclusive**" in relabelled and "difference shown" not in relabelled
    assert "**Equivalence shown within ±2.0 points**" in equal and "difference shown" not in equal
    for t in (shown, relabelled, equal):
        assert "−7.20 points (95 % CI −12.00 to −2.40, p = 0.010, n = 50 questions)" in t   # the same numbers


def test_a_table_without_verdicts_is_read_by_its_test():
    """03's arms and 06's max ΔBL declare no margin: a rejection is a difference,
    anything else is inconclusive (never "no difference")."""
    inf = pd.DataFrame([{"model": "m", "dataset": "mts", "context": "toxicity", "speaker": "patient", "axis": "race",
                         "metric": "max ΔBL", "N": 93, "estimate": 12.0, "lo": 3.0, "hi": 21.0, "p": p,
                         "survives judge error": "no"} for p in (0.2, 0.01)])
    inf.loc[1, "context"] = "stoicism"
    s = findings.soap_audit(inf)
    _clean(s)
    assert ("stoicism (patient, race, mts) max ΔBL: +12.00 points (95 % CI +3.00 to +21.00, p = 0.010, "
            "n = 93 dialogs): **difference shown**; survives the judge's error: **no**.") in s
    assert ("**Inconclusive** (the test does not reject, and no margin is declared): toxicity (patient, race, mts) "
            "max ΔBL +12.00 points (95 % CI +3.00 to +21.00, p = 0.200, n = 93 dialogs)") in s
    assert "no difference" not in s


def test_too_few_questions_are_said_plainly_whatever_the_estimate():
    few = {**DIFF, "n_items": 3, "verdict": "difference shown"}   # a verdict the table could not give at n = 3
    text = findings.calibration(_res([few, {**INCON, "n_items": 3, "verdict": intervals.TOO_FEW}]),
                                metrics=("accuracy",))
    _clean(text)
    assert text.startswith("- m · mcq (`04_paired_tests`): With 3 questions this run cannot tell whether accuracy "
                           "differs between the conditions (estimates: accuracy +homo vs base −7.20 points; "
                           "accuracy +Cat vs base −3.00 points)")
    assert "difference shown" not in text and "95 % CI" not in text and f"below {intervals.MIN_N} questions" in text
    mixed = findings.calibration(_res([DIFF, {**INCON, "n_items": 5}]), metrics=("accuracy",))
    assert f"Too few questions to tell (below {intervals.MIN_N}): accuracy +Cat vs base −3.00 points" in mixed


def test_missing_numbers_and_empty_tables():
    nan = float("nan")
    text = findings.calibration(_res([{**INCON, "delta": nan, "ci_lo": nan, "ci_hi": nan, "p": nan,
                                       "verdict": nan}]), metrics=("accuracy",))
    _clean(text)
    assert ("No verdict in the table: accuracy +Cat vs base no estimate (no interval, no p-value, n = 40 questions)"
            in text)
    assert "No paired comparison was computed" in findings.calibration(_res([]).iloc[0:0])
    assert "No paired comparison was computed" in findings.calibration(None)
    for f in (findings.fairness, findings.cultural, findings.soap_audit):
        out = f(None)
        assert out.startswith("- No ") and "nan" not in out


def test_many_differences_write_out_the_largest():
    rows = [{**DIFF, "cond_b": f"+c{i}", "delta": -0.01 * i} for i in range(1, 6)]
    text = findings.calibration(_res(rows), metrics=("accuracy",))
    assert [c for c in ("+c5", "+c4", "+c3") if f"accuracy {c} vs base: " in text] == ["+c5", "+c4", "+c3"]
    assert text.index("+c5") < text.index("+c4") < text.index("+c3")
    assert "Also **difference shown**: accuracy +c1 vs base −1.00 points" in text and "+c2 vs base −2.00" in text
    many = findings.calibration(_res([{**INCON, "cond_b": f"+i{i}"} for i in range(9)]), metrics=("accuracy",))
    assert "+i5 vs base" in many and "+i6 vs base" not in many and "; and 3 more." in many


def _pairs(rows):
    base = {"model": "gpt", "a": "race:White", "b": "race:Black", "CFR": 0.9, "margin": 3.0, "verdict": "x"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_fairness_pairs_read_each_row():
    text = findings.fairness(_pairs([
        {"delta": -9.1, "ci_lo": -12.5, "ci_hi": -5.7, "mcnemar_p": 1e-6, "n": 801, "verdict": "difference shown"},
        {"a": "sex:male", "b": "sex:female", "delta": 0.4, "ci_lo": -2.0, "ci_hi": 2.8, "mcnemar_p": 0.8, "n": 801,
         "CFR": 0.95, "verdict": "equivalence shown within ±3"}]))
    _clean(text)
    assert ("- gpt (`08_table3_pairs`): race:Black − race:White accuracy (CFR 90.0 %): −9.10 points "
            "(95 % CI −12.50 to −5.70, McNemar p < 0.001, n = 801 vignettes): **difference shown**.") in text
    assert ("**Equivalence shown within ±3.0 points**: sex:female − sex:male accuracy (CFR 95.0 %) +0.40 points "
            "(95 % CI −2.00 to +2.80, McNemar p = 0.800, n = 801 vignettes).") in text


def test_cultural_and_inference_and_data_prep_read_their_tables():
    idctx = pd.DataFrame([{"model": "llama", "prompt_format": "mcq_option", "culture": "indigenous_canadian",
                           "n": 147, "estimate": -4.08, "ci_lo": -8.1, "ci_hi": -0.2, "p": 0.03, "margin": 3.0,
                           "verdict": "difference shown"}])
    assert ("- llama · mcq_option (`07_idctx_delta`): indigenous_canadian Id+Ctx − Original: −4.08 points "
            "(95 % CI −8.10 to −0.20, McNemar p = 0.030, n = 147 questions): **difference shown**.") \
        == findings.cultural(idctx)
    rates = pd.DataFrame([{"model": "m", "prompt_format": "mcq", "samples": 30, "samples parsed (%)": 96.667}])
    assert "30 answers, 96.7 % parsed" in findings.inference(rates)
    funnel = pd.DataFrame({"step": ["all items", "sampled"], "n": [1273, 20], "removed": [0, 1253]})
    dlg = pd.DataFrame({"dataset": ["aci", "mts", "mts"], "keep": [True, True, False], "redacted_names": [2, 1, 5]})
    fair = pd.DataFrame({"excluded": [True, False, False]})
    t = findings.data_prep(funnel, pd.DataFrame(index=range(20)), pd.DataFrame(index=range(7)), fair, dlg)
    assert "Of 1,273 MedQA questions, 20 are the main pool" in t and "7 form the psychiatry" in t
    assert "flags 1 of 3 questions" in t
    assert "aci 1 of 1, mts 1 of 2; names redacted 8 times (`01_dialog_deidentification`), 3 of them in the kept" in t


@pytest.mark.slow   # imports the released 4 models × 801 vignettes × 8 texts: 15–23 s on the loaded 2-core machine
def test_real_released_fairmedqa_pairs(tmp_path):
    """The authors' released FairMedQA answers (4 models × 801 vignettes):
    every pair of the real Table 3 is written with its own Δ, n and verdict."""
    from medaudit import released
    from medaudit.stats import scoring
    from medaudit.studies.fairmedqa import config as fq_config, answers as fq_answers, metrics as fq_metrics
    from medaudit.llm import ResponseStore

    st = ResponseStore(tmp_path / "r.sqlite")
    released.import_release("fairmedqa_amqa", st)
    fcfg = fq_config.load_config()
    vig = released.release_items("fairmedqa_amqa")
    qt = scoring.question_table(fq_answers.stored_answers(st.frame(), vig, fcfg), vig, units=("model",))
    st.close()
    pairs = fq_metrics.pair_table(qt, fq_config.all_pairs(fcfg), margin=3.0)
    text = findings.fairness(pairs)
    _clean(text)
    assert len(pairs) == 16 and "cannot tell" not in text                  # 801 vignettes: every pair is read
    words = {"difference shown": "**difference shown**", "equivalence shown within ±3": "**Equivalence shown",
             "inconclusive": "**Inconclusive**"}
    for _, r in pairs.iterrows():
        line = next(x for x in text.splitlines() if x.startswith(f"- {r['model']} "))
        clause = f"{r['b']} − {r['a']} accuracy"
        at = line.index(clause)
        assert f"{findings.signed(r['delta'])} points" in line[at:at + 120], (r["model"], clause)
        assert f"n = {findings.count(r['n'])} vignettes" in line[at:at + 160]
        assert words[r["verdict"]] in line
        if r["verdict"] == "difference shown":
            assert line[at:].split(")", 2)[2].startswith(": **difference shown**")
    assert set(pairs["verdict"]) == {"difference shown", "equivalence shown within ±3"}   # what the release shows


# --- 07's Δ Avg, 08's between models and arm bias, culture labels ------------------------

def _davg(rows):
    base = {"model": "llama", "prompt_format": "mcq_option", "form": "5opt", "reference": "original", "margin": 3.0}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_cultural_reads_the_delta_avg_verdicts_three_ways():
    """07_delta_avg_errors: each row's own Δ, clustered interval, score test p,
    questions and verdict; the ids in the reader's words (cultures.yaml)."""
    from medaudit.studies import cultural as C

    davg = _davg([
        {"cue": "id+ctx", "questions": 150, "delta": -6.22, "ci_lo": -9.5, "ci_hi": -2.9, "p": 0.0004,
         "verdict": "difference shown"},
        {"cue": "id", "reference": "neutral", "questions": 150, "delta": 0.4, "ci_lo": -1.8, "ci_hi": 2.6, "p": 0.71,
         "verdict": "equivalence shown within ±3"},
        {"cue": "ctx", "questions": 150, "delta": -1.1, "ci_lo": -4.6, "ci_hi": 2.4, "p": 0.52,
         "verdict": "inconclusive"}])
    text = findings.cultural(None, delta_avg=davg, label=C.load_config().readable)
    _clean(text)
    assert ("- llama · mcq_option · 5opt (`07_delta_avg_errors`): Δ Avg Id+Ctx − Original: −6.22 points "
            "(95 % CI −9.50 to −2.90, score test p < 0.001, n = 150 questions): **difference shown**.") in text
    assert ("**Equivalence shown within ±3.0 points**: Δ Avg Id − Neutral +0.40 points (95 % CI −1.80 to +2.60, "
            "score test p = 0.710, n = 150 questions).") in text
    assert (f"**Inconclusive** ({_beyond(3.0, -4.6, 2.4, 150)}): Δ Avg Ctx − "
            "Original −1.10 points") in text
    few = findings.cultural(None, delta_avg=_davg([{"cue": "id", "questions": 5, "delta": -20.0, "ci_lo": -60.0,
                                                    "ci_hi": 20.0, "p": 0.5, "verdict": intervals.TOO_FEW}]))
    assert "With 5 questions this run cannot tell whether a cue's accuracy averaged over the cultures" in few
    assert "95 % CI" not in few


def test_culture_ids_print_as_the_readers_labels():
    from medaudit.studies import cultural as C

    cfg = C.load_config()
    assert cfg.readable("southeast_asian") == "Southeast Asian"
    assert cfg.readable("indigenous_canadian:id+ctx") == "Indigenous Canadian Id+Ctx"
    assert cfg.readable("original") == "Original" and cfg.readable("GPT-5.2") == "GPT-5.2"
    idctx = pd.DataFrame([{"model": "llama", "prompt_format": "mcq_option", "culture": "middle_eastern_muslim",
                           "n": 147, "estimate": -4.08, "ci_lo": -8.1, "ci_hi": -0.2, "p": 0.03, "margin": 3.0,
                           "verdict": "difference shown"}])
    text = findings.cultural(idctx, label=cfg.readable)
    assert "Middle-Eastern Muslim Id+Ctx − Original: −4.08 points" in text and "_" not in text.split("`")[2]


def _between(rows):
    base = {"condition": "original_question", "model": "Claude", "reference": "GPT-4.1", "margin": 3.0}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_fairness_reads_the_between_models_verdicts():
    vs = _between([
        {"n": 801, "delta": -7.5, "ci_lo": -10.4, "ci_hi": -4.6, "mcnemar_p": 2e-7, "verdict": "difference shown"},
        {"condition": "white", "n": 801, "delta": 0.6, "ci_lo": -1.7, "ci_hi": 2.9, "mcnemar_p": 0.64,
         "verdict": "equivalence shown within ±3"},
        {"condition": "black", "n": 801, "delta": -1.5, "ci_lo": -4.3, "ci_hi": 1.3, "mcnemar_p": 0.3,
         "verdict": "inconclusive"}])
    text = findings.fairness(None, between=vs)
    _clean(text)
    assert ("- Claude (`08_between_models`): Claude − GPT-4.1 accuracy on the original_question texts: −7.50 points "
            "(95 % CI −10.40 to −4.60, McNemar p < 0.001, n = 801 vignettes): **difference shown**.") in text
    assert ("**Equivalence shown within ±3.0 points**: Claude − GPT-4.1 accuracy on the white texts +0.60 points "
            "(95 % CI −1.70 to +2.90, McNemar p = 0.640, n = 801 vignettes).") in text
    assert f"**Inconclusive** ({_beyond(3.0, -4.3, 1.3, 801, 'vignettes')}): Claude" in text
    few = findings.fairness(None, between=_between([{"n": 5, "delta": -40.0, "ci_lo": float("nan"), "ci_hi": 1.0,
                                                     "mcnemar_p": float("nan"), "verdict": intervals.TOO_FEW}]))
    _clean(few)
    assert "With 5 vignettes this run cannot tell whether its accuracy differs from the reference model's" in few


def _arm_bias(rows):
    base = {"old": "Gemini", "new": "Gemini · cot2", "strategy": "cot2", "attribute": "race", "ΔAcc": -1.0,
            "ΔCFR": 2.0, "ΔAD": -3.0, "n plain": 801, "n arm": 801, "Δgap SE": 1.0, "Δgap MDE": 2.8}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_fairness_reads_the_arm_bias_verdicts_with_the_tables_margin():
    """08_arm_bias names its margin in the caption only: an inconclusive Δgap
    says the notebook's δ, never "n/a"; an equivalence reads it from the verdict."""
    ab = _arm_bias([
        {"Δgap": -5.2, "Δgap lo": -8.0, "Δgap hi": -2.4, "Δgap p": 0.001, "Δgap n": 801,
         "Δgap verdict": "difference shown"},
        {"attribute": "sex", "Δgap": 0.3, "Δgap lo": -1.5, "Δgap hi": 2.1, "Δgap p": 0.8, "Δgap n": 801,
         "Δgap verdict": "equivalence shown within ±3"},
        {"attribute": "income", "Δgap": -1.9, "Δgap lo": -5.0, "Δgap hi": 1.2, "Δgap p": 0.24, "Δgap n": 801,
         "Δgap verdict": "inconclusive"}])
    text = findings.fairness(None, arm_bias=ab, margin=3.0)
    _clean(text)
    assert ("- Gemini · cot2 (`08_arm_bias`): change in the race pair's accuracy gap: −5.20 points (95 % CI −8.00 "
            "to −2.40, sign-flip p = 0.001, n = 801 vignettes): **difference shown**; ΔAcc −1.00, ΔCFR +2.00, "
            "ΔAD −3.00 points (no test; n plain 801, n arm 801).") in text
    assert "**Equivalence shown within ±3.0 points**: change in the sex pair's accuracy gap +0.30 points" in text
    assert (f"**Inconclusive** ({_beyond(3.0, -5.0, 1.2, 801, 'vignettes')}): change in the "
            "income pair's accuracy gap −1.90 points") in text
    gemini = _arm_bias([{"new": "Gemini · cot2 (extraction artefact: cannot tell, n too small)", "ΔAcc": -78.0,
                         "ΔCFR": 24.0, "ΔAD": -13.0, "n plain": 5, "n arm": 5, "Δgap": -40.0, "Δgap lo": -100.0,
                         "Δgap hi": 20.0, "Δgap p": 0.5, "Δgap n": 5, "Δgap verdict": intervals.TOO_FEW}])
    few = findings.fairness(None, arm_bias=gemini, margin=3.0)
    _clean(few)
    assert ("\n- Gemini · cot2 (extraction artefact: cannot tell, n too small) (`08_arm_bias`): With 5 vignettes this "
            "run cannot tell whether the arm changes the pairs' accuracy gap (estimates: change in the race pair's "
            "accuracy gap −40.00 points)") in few
    assert "95 % CI" not in few and "difference shown" not in few


# --------------------------------------------------------------------------
# no "nan" or "n/a" inside a sentence; counts that agree with their tables

def test_unreadable_finds_a_missing_number_printed_in_a_sentence():
    line = "- With n/a vignettes this run cannot tell"
    assert findings.unreadable(line) == [line]
    assert findings.unreadable("- nan Δflip: −2.00 points") and findings.unreadable("- band n/a to n/a points")
    assert findings.unreadable("- p = inf") and not findings.unreadable("- inference ran; finance; nano")
    assert not findings.unreadable("| m | n/a |")          # a table's cell may say n/a; a sentence may not


def test_no_function_prints_a_missing_number_in_a_sentence():
    """Every notebook's findings on tables whose numbers are all missing (a
    row with no paired units, as 07's neutral mitigation rows and 08's
    arms without vignettes had: "nan Δflip", "With n/a vignettes", 05's
    "band … n/a to n/a points")."""
    from medaudit.studies import cultural as C

    nan = float("nan")
    blank = {"delta": nan, "ci_lo": nan, "ci_hi": nan, "p": nan, "verdict": nan}
    out = [findings.calibration(_res([{**INCON, **blank, "n_items": nan}, {**INCON, **blank}]), metrics=("accuracy",)),
           findings.open_ended(_res([{**INCON, **blank, "n_items": nan}]),
                               pd.DataFrame([{"kind": "contrast", "what": "+homo vs Base", "raw": nan, "band lo": nan,
                                              "band hi": nan, "clusters": 12, "survives judge error": "no"},
                                             {"kind": "contrast", "what": "+hetero vs Base", "raw": nan,
                                              "band lo": nan, "band hi": nan, "clusters": nan,
                                              "survives judge error": "no"}])),
           findings.fairness(_pairs([{**blank, "mcnemar_p": nan, "n": nan, "CFR": nan}]),
                             between=_between([{**blank, "mcnemar_p": nan, "n": nan}]),
                             arm_bias=_arm_bias([{"ΔAcc": nan, "ΔCFR": nan, "ΔAD": nan, "n plain": nan, "n arm": nan,
                                                  "Δgap": nan, "Δgap lo": nan, "Δgap hi": nan, "Δgap p": nan,
                                                  "Δgap n": nan, "Δgap verdict": nan}]), margin=3.0),
           findings.inference(pd.DataFrame([{"model": "m", "prompt_format": "mcq", "samples": 0,
                                             "samples parsed (%)": nan}]))]
    cfg = C.load_config()
    arms = pd.DataFrame([{"model": "m", "prompt_format": "mcq_option", "strategy": "cot", "condition": cond,
                          "culture": cfg.split(cond)[0], "cue": cfg.split(cond)[1], "Δflip": nan, "Δflip lo": nan,
                          "Δflip hi": nan, "Δflip p": nan, "Δflip n": n, "Δflip verdict": nan}
                         for cond, n in (("neutral", 0), ("indigenous_canadian:id", 40), ("southeast_asian:id", nan))])
    out.append(findings.cultural(pd.DataFrame([{"model": "m", "prompt_format": "mcq", "culture": "southeast_asian",
                                                **blank, "estimate": nan, "n": nan}]), arm_flips=arms,
                                 label=cfg.readable))
    for text in out:
        _clean(text)
    arm = out[-1]
    assert "Neutral Δflip" in arm and "Indigenous Canadian Id Δflip" in arm and "Southeast Asian Id Δflip" in arm
    assert "With no vignettes this run cannot tell" in out[2]
    assert "no band over the judge's error" in out[1]


def test_the_counts_said_are_the_tables_sums():
    """01 said "663 names redacted" (the kept dialogs') beside a table summing
    to 677; 02 said "17 conditions × 2 methods on 224 questions" beside a
    total of 7,168 (one method ran fewer conditions). A count a sentence
    states is now its table's."""
    import re

    from medaudit.prep import dialogs, perturb

    dlg = pd.DataFrame({"dataset": ["aci", "mts", "mts", "mts"], "keep": [True, True, False, True],
                        "redacted_names": [2, 1, 14, 0], "redacted_ages": [0, 1, 0, 0], "redacted_race": [0] * 4,
                        "redacted_origin": [0] * 4})
    table = dialogs.deid_counts(dlg)
    t = findings.data_prep(pd.DataFrame({"n": [10]}), pd.DataFrame(index=range(2)), pd.DataFrame(index=range(1)),
                           pd.DataFrame({"excluded": []}), dlg)
    said = int(re.search(r"names redacted (\d+) times \(`01_dialog_deidentification`\)", t).group(1))
    assert said == table["names redacted"].sum() == 17
    rows = [{"item_id": f"q{i}", "condition": c, "method": m, "ok": True, "problems": "", "problem": ""}
            for i in range(4) for m, conds in (("template", ("+a", "+b", "+c")), ("llm", ("+a", "+b")))
            for c in conds]
    variants = pd.DataFrame(rows)
    checks = perturb.check_summary(variants)
    text = findings.augmentation(variants)
    total = int(re.search(r"of ([\d,]+) counterfactual variants", text).group(1).replace(",", ""))
    assert total == checks["items"].sum() == 20
    parts = re.findall(r"(\d+) conditions? × (\d+) questions by (\w+) \((\d+)\)", text)
    assert sum(int(k) * int(q) for k, q, _, _ in parts) == sum(int(n) for *_, n in parts) == total
    assert {m: int(n) for *_, m, n in parts} == checks.groupby("method")["items"].sum().to_dict()
