"""The recovery of planted effects through notebook 05 (validation/recovery_openended.py): 05's
chain by its own calls (rule-based open forms, free-text answers through the store, entailment
clusters, the B.6 judge, the question table, Table 2's paired tests) answered and judged by a
planted model whose CORRECT rate per condition is declared, read against the planted Δ (the fast
test here at small n, the R repetitions in the slow one)."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from medaudit.llm import ResponseStore
from medaudit.llm import planted as P
from medaudit.prep.perturb import make_variant
from medaudit.stats import equivalence
from medaudit.validation import recovery, recovery_openended as RO
from medaudit.studies import calibration

CONDS = ["base", "+hetero", "+homo"]


def _frames(medqa4, conditions, n_items: int):
    """(items, variants) as 05 reads them from 01 and 02: the first ``n_items`` MedQA questions
    with their question, options and answer text, and the Base, +hetero and +homo vignettes."""
    rows = medqa4.iloc[:n_items]
    items = pd.DataFrame({"item_id": [f"medqa4-{r:04d}" for r in rows["row"]], "question": list(rows["question"]),
                          "options": list(rows["options"]), "answer": list(rows["answer"])})
    variants = [{"item_id": i, "condition": c, "question": make_variant(q, conditions, c)[0]}
                for i, q in zip(items["item_id"], rows["question"]) for c in CONDS]
    variants = pd.DataFrame(variants)
    assert variants["question"].map(bool).all()
    return items, variants


def _profile(k: int = 2, margin: float = calibration.MARGIN) -> dict:
    return {"open_conditions": CONDS, "open_samples": k, "open_temperature": 0.7, "top_p": 0.9,
            "open_max_tokens": 48, "openended_answer_prompt": "single", "cluster_max_tokens": 160,
            "cluster_max_attempts": 2, "embedding_threshold": 0.35, "judge_context": "question", "n_boot": 200,
            "calibration_margin": margin}


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """Table 2's panels (saved by 05's table2) written to a staging folder under tmp_path."""
    monkeypatch.setenv("MEDAUDIT_STAGE", str(tmp_path / "stage"))
    return tmp_path


def test_05s_chain_recovers_a_planted_judge_effect_sign_size_and_verdict(staged, medqa4, conditions):
    """One repetition at small n: 24 questions, K = 2; the judge says CORRECT to 90 % of the
    answers at base and under +hetero, to 30 % under +homo (−60 points). +homo's estimate has the
    planted sign and size, its interval covers −60 and the verdict is "difference shown";
    +hetero's covers 0 without one. Every question is one cluster, every verdict parsed; a rerun
    sends nothing and reads the same table."""
    truth = {"seed": 4, "verdicts": {"open_judge": {"base": 0.9, "+hetero": 0.9, "+homo": 0.3},
                                     "open_entail": {"default": 1.0}}}
    (staged / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    items, variants = _frames(medqa4, conditions, 24)
    store = ResponseStore(staged / "responses.sqlite")
    kw = dict(profile="recovery-test", model="planted:test", planted_seed=4, run_seed=9,
              truths_path=str(staged / "planted.yaml"))
    rows = RO.openended_repetition(_profile(margin=3.5), items, variants, store, **kw)
    stored = store.frame()
    n = int(rows["n"].iloc[0])
    assert n >= 20 and (rows["unscored"] == 0).all()
    # K answers, one entailment pair both ways and one verdict per question, each stored once
    assert stored["prompt_format"].value_counts().to_dict() == {"open": 2 * 3 * n, "open_entail": 2 * 3 * n,
                                                                "open_judge": 3 * n}
    r = rows.set_index(["cond_a", "cond_b"])
    homo = r.loc[("base", "+homo")]
    assert homo["planted"] == pytest.approx(-60)
    assert -80 < homo["delta"] < -40 and homo["ci_lo"] <= -60 <= homo["ci_hi"]
    assert homo["verdict"] == equivalence.DIFFERENCE
    het = r.loc[("base", "+hetero")]
    assert het["planted"] == 0 and het["ci_lo"] <= 0 <= het["ci_hi"] and het["verdict"] != equivalence.DIFFERENCE
    assert het["discordant"] > 0                     # each condition's verdicts drawn afresh: a two-way effect
    assert (rows["margin"] == 3.5).all()             # the profile's calibration_margin, which 05's table2 tests at
    assert (staged / "stage" / "tables" / f"{RO.TABLE_PREFIX}_A.csv").exists()
    again = RO.openended_repetition(_profile(margin=3.5), items, variants, store, **kw)
    assert len(store.frame()) == len(stored)
    assert again["delta"].tolist() == rows["delta"].tolist() and again["verdict"].tolist() == rows["verdict"].tolist()


def test_the_rows_say_what_the_recovery_table_needs(staged, medqa4, conditions):
    """A repetition's rows carry every column :func:`medaudit.validation.recovery.summary` reads
    (in points), one row per contrast of Table 2 against base, and the summary reads them."""
    items, variants = _frames(medqa4, conditions, 12)
    store = ResponseStore(staged / "responses.sqlite")
    rows = RO.openended_repetition(_profile(), items, variants, store, profile="recovery-test",
                                   planted_seed=1, run_seed=2)
    assert {"cond_a", "cond_b", "n", "delta", "ci_lo", "ci_hi", "verdict", "margin", "discordant", "se", "planted",
            "planted_seed", "run_seed"} <= set(rows.columns)
    assert [tuple(x) for x in rows[["cond_a", "cond_b"]].to_numpy()] == [("base", "+hetero"), ("base", "+homo")]
    assert rows["planted"].tolist() == pytest.approx([0.0, -20.0])      # params/planted.yaml: truths.open
    assert (rows["ci_lo"] <= rows["delta"]).all() and (rows["delta"] <= rows["ci_hi"]).all()
    assert rows["delta"].abs().max() > 1                                  # points, not fractions
    tab = recovery.summary(rows.assign(repetition=0), margin=calibration.MARGIN)
    assert tab["contrast"].tolist() == ["+hetero vs base", "+homo vs base"]
    assert (tab["questions"] == rows["n"].to_numpy()).all()


def test_a_model_that_is_not_planted_is_refused(staged, medqa4, conditions):
    items, variants = _frames(medqa4, conditions, 2)
    store = ResponseStore(staged / "responses.sqlite")
    with pytest.raises(ValueError, match="planted:<truth>"):
        RO.openended_repetition(_profile(), items, variants, store, profile="recovery-test", model="random:x",
                                planted_seed=1, run_seed=2)


@pytest.mark.slow
def test_r_repetitions_of_05s_table2_pass_every_check(staged, medqa4, conditions):
    """20 repetitions of 05's Table 2 under the shipped truth ``planted:open`` (60 questions,
    K = 2, a store per repetition as the command keeps, other seeds than make validate's): every
    row's mean, coverage, false-difference, detection and false-equivalence checks pass
    (:func:`medaudit.validation.recovery.summary`)."""
    items, variants = _frames(medqa4, conditions, 60)
    rows = pd.concat([RO.openended_repetition(_profile(), items, variants, ResponseStore(staged / f"r{i}.sqlite"),
                                              profile="recovery-test", planted_seed=s, run_seed=i).assign(repetition=i)
                      for i, s in enumerate(P.seeds(3000, 20))], ignore_index=True)
    tab = recovery.summary(rows, margin=calibration.MARGIN)
    assert len(tab) == 2 and (tab["repetitions"] == 20).all()
    bad = tab[tab["checks"].str.contains("MISS")]
    assert bad.empty, bad.to_string()
