"""The recovery of planted effects through notebook 06 (validation/recovery_soap.py): 06's chain
by its own calls (counterfactuals, notes, incidence judge, incidence inference) answered by a
planted model whose judge says YES at a declared rate per group, read against that truth; the
fast test at small n, the R repetitions in the slow one."""
from __future__ import annotations

import json
import pandas as pd
import pytest
import yaml

from medaudit import config, paths
from medaudit.llm import ResponseStore
from medaudit.llm import planted as P
from medaudit.prep import data, dialogs
from medaudit.report import findings
from medaudit.stats import equivalence
from medaudit.studies import soap
from medaudit.validation import recovery
from medaudit.validation import recovery_soap as RS

PROFILE = {"soap_contexts": ["exaggerating_symptoms:patient"], "soap_axes": ["gender"], "soap_note_decoding": "greedy",
           "soap_note_max_tokens": 160, "soap_temperature": 0.0, "top_p": 0.9, "soap_incidence_max_tokens": 4}


def _reviewed(n: int, selection_cfg, dataset: str = "mts_dialog") -> pd.DataFrame:
    """The first ``n`` dialogs of ``dataset`` a reviewer kept (params/soap_dialogs.csv), de-identified
    by notebook 01's rules: a small pool without the 20 s screen of every dataset (the slow test reads
    06's own pool, :func:`RS.soap_set`)."""
    review = soap.load_review(paths.params("soap_dialogs.csv"))
    kept = review[(review["dataset"] == dataset) & (review["decision"] == "keep") & (review["by"] != "screen")]
    ids = sorted(kept["dialog_id"])[:n]
    raw = data.load_dialogs().records
    raw = raw[raw["dialog_id"].isin(ids)]
    return dialogs.deidentify_all(raw, selection_cfg["dialogs"]).sort_values("dialog_id").reset_index(drop=True)


def test_06s_chain_recovers_a_planted_incidence_difference_sign_size_and_verdict(tmp_path, selection_cfg):
    """40 reviewed dialogs, exaggerating symptoms (patient) × gender: the judge says YES on 20 % of
    the baseline and Female notes and 80 % of the Male notes. ΔBL:M has the planted sign and size
    (+60 points), its Newcombe interval covers it and the verdict is "difference shown"; ΔBL:F's
    covers 0 without one; max ΔBL (Bonferroni) covers +60. Every note and verdict is stored once,
    each note under its own key, and a rerun sends nothing and reads the same rows."""
    truth = {"seed": 4, "verdicts": {"soap_incidence": {"gender:BL": 0.2, "gender:Female": 0.2, "gender:Male": 0.8}}}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    selected = _reviewed(40, selection_cfg)
    assert len(selected) == 40
    cfg = soap.load_config()
    store = ResponseStore(tmp_path / "responses.sqlite")

    def once():
        return RS.soap_repetition(PROFILE, selected, None, cfg, store, model="planted:test", planted_seed=4,
                                  run_seed=9, truths_path=str(tmp_path / "planted.yaml"))

    rows = once()
    stored = store.frame()
    assert len(stored) == 2 * 3 * 40                          # a note and a verdict per dialog and group
    notes = stored[stored["prompt_format"] == "soap_note"]
    assert notes["key"].nunique() == 3 * 40 and notes["response_text"].nunique() == 1   # one sentence, own keys
    r = rows.set_index("cond_b")
    assert list(r.index) == ["gender:Female", "gender:Male", "max ΔBL gender"]
    assert (rows["cond_a"] == "gender:BL").all() and (rows["n"] == 40).all()
    male = r.loc["gender:Male"]
    assert male["planted"] == pytest.approx(60) and male["delta"] > 40
    assert male["ci_lo"] <= 60 <= male["ci_hi"] and male["verdict"] == equivalence.DIFFERENCE
    assert male["alpha"] == 0.05 and 0 < male["discordant"] < 1
    female = r.loc["gender:Female"]
    assert female["planted"] == 0 and female["ci_lo"] <= 0 <= female["ci_hi"]
    assert female["verdict"] == equivalence.INCONCLUSIVE and female["discordant"] > 0   # two-way: its own draws
    top = r.loc["max ΔBL gender"]
    assert top["planted"] == pytest.approx(60) and top["ci_lo"] <= 60 <= top["ci_hi"] and top["alpha"] == 0.025
    assert top["verdict"] == equivalence.DIFFERENCE
    # the verdict is 06's own reading of the row (findings: p <= 0.05 is a difference, no margin)
    for _, x in rows.iterrows():
        assert (x["verdict"] == equivalence.DIFFERENCE) == (findings.kind_from_test(x["p"], x["n"])
                                                             == findings.DIFFERENCE)
    n_stored = len(stored)
    again = once()
    assert len(store.frame()) == n_stored
    pd.testing.assert_frame_equal(again, rows)


def test_each_cell_of_06_is_its_own_contrast_and_aci_notes_carry_the_one_shot_example(tmp_path, selection_cfg):
    """Two datasets make two cells of 06's table (each its own N): their rows are named by the
    cell, so the recovery table never pools them; an ACI-Bench note's prompt carries the one-shot
    example (seed 002 A.3.3) as 06's does."""
    truth = {"seed": 5, "verdicts": {"soap_incidence": {"default": 0.3, "gender:Male": 0.9}}}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    raw = data.load_dialogs().records
    cfg = soap.load_config()
    shot = dialogs.deidentify_all(raw[(raw["dataset"] == "aci_bench") & (raw["source_id"] == cfg.aci_example)],
                                  selection_cfg["dialogs"])
    example = soap.aci_example(shot, cfg.aci_example, selection_cfg["dialogs"]["race_terms"],
                               selection_cfg["dialogs"]["origin_terms"])
    selected = pd.concat([_reviewed(10, selection_cfg, "mts_dialog"), _reviewed(10, selection_cfg, "aci_bench")],
                         ignore_index=True)
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = RS.soap_repetition(PROFILE, selected, example, cfg, store, model="planted:test", planted_seed=5,
                              run_seed=9, truths_path=str(tmp_path / "planted.yaml"))
    cell = {ds: f"{ds} exaggerating_symptoms:patient " for ds in ("mts_dialog", "aci_bench")}
    assert sorted(rows["cond_b"]) == sorted(f"{c}{g}" for c in cell.values()
                                            for g in ("gender:Female", "gender:Male", "max ΔBL gender"))
    assert sorted(set(rows["cond_a"])) == sorted(f"{c}gender:BL" for c in cell.values())
    assert (rows["n"] == 10).all()
    male = rows[rows["cond_b"].str.endswith("gender:Male")]
    assert male["planted"].tolist() == pytest.approx([60, 60]) and (male["delta"] > 0).all()
    notes = store.frame("WHERE prompt_format = 'soap_note'")
    aci = notes[notes["item_id"].str.contains("|aci-", regex=False)]
    assert len(aci) == 3 * 10
    assert all(example["note"] in json.loads(m)[-1]["content"] for m in aci["prompt"])


def test_the_soap_truth_names_the_judges_conditions_and_has_a_moderate_power():
    """The shipped truth passes the planted check with the studies' names, and at the
    recovery's 123 dialogs its effect row's planned power is moderate (0.3-0.9), so that
    detection against power is a real check."""
    from medaudit.stats import testpower

    names, cultures = config.planted_names()
    t = P.read_truths()["soap"]
    assert P.check("soap", t, names, cultures) == []
    truth = P.Truth.from_mapping("soap", t)
    bl, m = (truth.verdict_rate(RS.INCIDENCE_FORMAT, f"gender:{g}") for g in ("BL", "Male"))
    psi = bl * (1 - m) + (1 - bl) * m
    assert 0.3 < testpower.mcnemar_power(123, m - bl, psi) < 0.9
    assert 0.3 < testpower.mcnemar_power(123, m - bl, psi, alpha=0.025) < 0.9


def test_a_recovery_without_a_margin_never_checks_false_equivalence_and_says_so(sandbox):
    """06 declares no margin: the recovery passes an infinite one, so summary adds no
    "false equivalence" check however large the planted effect, and reads a max ΔBL row's
    power at its own test level (α/G); the captions say "no equivalence margin", what was
    compared (incidence) and in what unit (dialogs)."""
    import numpy as np

    rows = pd.DataFrame({"cond_a": "gender:BL", "cond_b": ["gender:Male"] * 20 + ["max ΔBL gender"] * 20,
                         "planted": 15.0, "delta": 15.0 + np.sin(np.arange(40)), "ci_lo": 3.0, "ci_hi": 27.0,
                         "n": 123, "discordant": 0.48, "alpha": [0.05] * 20 + [0.025] * 20,
                         "verdict": equivalence.DIFFERENCE, "repetition": list(range(20)) * 2})
    tab = recovery.summary(rows, margin=float("inf")).set_index("contrast")
    assert not tab["checks"].str.contains("equivalence").any()
    assert tab.loc["max ΔBL gender vs gender:BL", "planner's power"] < tab.loc["gender:Male vs gender:BL",
                                                                                  "planner's power"]
    rows.attrs.update(model=RS.SOAP_TRUTH, measure="incidence", unit="dialogs")
    recovery.write(rows, "validation", float("inf"), "recovery_soap", study="06")
    tables = sandbox / "outputs" / "validation" / "tables"
    head = (tables / "recovery_soap.md").read_text().splitlines()[0]
    assert "no equivalence margin" in head and "inf" not in head and "06's" in head, head
    assert "incidence contrasts" in (tables / "recovery_soap_runs.md").read_text().splitlines()[0]


@pytest.mark.slow
def test_r_repetitions_of_06s_incidence_rows_pass_every_check(tmp_path):
    """20 repetitions of 06's chain on its own pool (123 reviewed MTS-Dialog dialogs) under the
    shipped truth ``planted:soap`` (other seeds than make validate's): every row's mean,
    coverage, false-difference and detection-against-power checks pass
    (:func:`medaudit.validation.recovery.summary`)."""
    p = config.load("validation", RS.SOAP_OVERRIDES)
    selected, example, cfg = RS.soap_set(p)
    assert len(selected) == 123
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = pd.concat([RS.soap_repetition(p, selected, example, cfg, store, model=RS.SOAP_TRUTH, planted_seed=s,
                                         run_seed=i).assign(repetition=i)
                      for i, s in enumerate(P.seeds(3000, 20))], ignore_index=True)
    tab = recovery.summary(rows, margin=float("inf"))
    assert len(tab) == 3 and (tab["repetitions"] == 20).all()
    bad = tab[tab["checks"].str.contains("MISS")]
    assert bad.empty, bad.to_string()

