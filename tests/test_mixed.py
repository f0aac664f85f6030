"""The mixed-effects logistic model per cue: recovers a
known model, and on the released answers agrees with the conditional logit
(the same conditional odds ratio) and with the GEE (the marginal one, nearer
1 by the logistic-normal factor)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from medaudit.studies import cultural
from medaudit.stats import mixed, scoring
from medaudit import paths, released
from medaudit.stats import regression as S
from medaudit.llm import ResponseStore

CUES = ["original", "id", "ctx", "id+ctx"]


def _simulated(n_q=300, sigma=1.5, beta=(0.0, -0.4, -0.8), seed=0, models=None):
    rng = np.random.default_rng(seed)
    u = rng.normal(0, sigma, n_q)
    rows = []
    for m, shift in (models or {"m": 0.0}).items():
        for c, b in zip(CUES, (0.0, *beta)):
            y = rng.random(n_q) < expit(1.0 + shift + b + u)
            rows += [{"model": m, "item_id": f"q{i}", "cue": c, "correct": float(v)} for i, v in enumerate(y)]
    return pd.DataFrame(rows)


def test_recovers_a_known_random_intercept_model():
    d = _simulated()
    r = mixed.cue_glmm(d, "correct", "cue", "item_id", reference="original").set_index("cue")
    for c, b in zip(CUES[1:], (0.0, -0.4, -0.8)):
        assert abs(r.loc[c, "coef"] - b) < 3 * r.loc[c, "se"]
    assert abs(r["sd_question"].iloc[0] - 1.5) < 3 * r["sd_question_se"].iloc[0]
    assert r["converged"].all() and (r["n_groups"] == 300).all()


def test_laplace_and_quadrature_agree_at_moderate_sigma():
    d = _simulated(n_q=200, sigma=0.8, seed=1)
    a = mixed.cue_glmm(d, "correct", reference="original", n_agq=1).set_index("cue")
    b = mixed.cue_glmm(d, "correct", reference="original", n_agq=15).set_index("cue")
    assert np.allclose(a["coef"], b["coef"], atol=0.05)


def test_pooled_models_get_a_question_intercept_each():
    d = _simulated(n_q=150, seed=2, models={"a": 0.0, "b": -1.0})
    r = mixed.cue_glmm(d, "correct", reference="original", pooled="model").set_index("cue")
    assert abs(r.loc["id+ctx", "coef"] + 0.8) < 3 * r.loc["id+ctx", "se"]
    assert (r["n_obs"] == len(d)).all() and (r["n_groups"] == 300).all()


def test_bad_input_is_named():
    d = _simulated(n_q=20)
    with pytest.raises(ValueError, match="no column"):
        mixed.cue_glmm(d, "nope")
    with pytest.raises(ValueError, match="reference 'x'"):
        mixed.cue_glmm(d, "correct", reference="x")
    with pytest.raises(ValueError, match="must be 0 or 1"):
        mixed.cue_glmm(d.assign(correct=2.0), "correct")


@pytest.fixture(scope="module")
def released_qt(tmp_path_factory):
    cfg = cultural.load_config()
    st = ResponseStore(tmp_path_factory.mktemp("mixed") / "r.sqlite")
    released.import_release("cultural_cues_hive", st, cfg.condition)
    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(cfg), forms=("5opt",), config=cfg)
    resp = cultural.stored_responses(st.frame(), cs, forms=["5opt"], config=cfg)
    qt = scoring.drop_incomplete(scoring.question_table(resp, cs.items["5opt"]),
                                 across=released.models("cultural_cues_hive")).table
    st.close()
    q = qt[qt["parsed"] & (qt["prompt_format"] == "mcq_option")].copy()
    q["cue"] = [c if c in ("original", "neutral") else cfg.split(c)[1] for c in q["condition"]]
    return q[q["cue"] != "neutral"]


@pytest.mark.slow   # about 25 s on 2 cores: three models' released answers, three fits each
def test_on_the_released_answers_glmm_matches_conditional_logit_and_gee_is_its_marginal(released_qt):
    """Seed 003's released option answers (GPT-5.2, Llama-3.1-8B,
    MedGemma-4B; 147 questions × 10 conditions each, correctness ~ cue vs
    Original): the GLMM's log odds ratio is the conditional logit's within a
    quarter of its SE and with the same SE to 10% (both conditional on the
    question); the GEE's has the same sign and is smaller, by about the
    logistic-normal factor 1/√(1 + 0.346 σ²) (within a factor of two where
    the effect is clear, 2 SE)."""
    for model, g in released_qt.groupby("model"):
        gl = mixed.cue_glmm(g, "correct", "cue", "item_id", reference="original").set_index("cue")
        # the model-based SE, as the GLMM's (07's table clusters the conditional logit's by question)
        cl = S.cue_regression(g, "correct", "cue", "item_id", reference="original", se="model").set_index("cue")
        ge = S.cue_regression(g, "correct", "cue", "item_id", reference="original", method="gee").set_index("cue")
        assert gl["converged"].all(), model
        for c in ("id", "ctx", "id+ctx"):
            assert abs(gl.loc[c, "coef"] - cl.loc[c, "coef"]) < 0.25 * cl.loc[c, "se"], (model, c)
            assert gl.loc[c, "se"] == pytest.approx(cl.loc[c, "se"], rel=0.1), (model, c)
            assert abs(ge.loc[c, "coef"]) <= abs(gl.loc[c, "coef"]) + 1e-9, (model, c)
            if abs(gl.loc[c, "coef"]) > 2 * gl.loc[c, "se"]:
                marginal = gl.loc[c, "coef"] / np.sqrt(1 + 0.346 * gl.loc[c, "sd_question"] ** 2)
                assert 0.5 < ge.loc[c, "coef"] / marginal < 2, (model, c, ge.loc[c, "coef"], marginal)
    pooled = mixed.cue_glmm(released_qt, "correct", "cue", "item_id", reference="original",
                            pooled="model").set_index("cue")
    strata = released_qt.assign(stratum=released_qt["model"] + "|" + released_qt["item_id"])
    cl = S.cue_regression(strata, "correct", "cue", "stratum", reference="original", se="model").set_index("cue")
    for c in ("id", "ctx", "id+ctx"):
        assert abs(pooled.loc[c, "coef"] - cl.loc[c, "coef"]) < 0.5 * cl.loc[c, "se"], c
