"""The planted model (llm/planted.py): a backend that answers from a declared
truth, refused outside a validation profile and under a name that does not
say so, its bad truths refused before anything runs (naming the file, the
key and the values allowed); its answers deterministic per request and read
by every format's own parser; and the chain 03 → 04 recovering what was
planted (the fast test here, the R repetitions in the slow one)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from medaudit import config
from medaudit.stats import equivalence
from medaudit.llm import formats
from medaudit.validation import recovery
from medaudit.llm import GenParams, Request, ResponseStore, get_backend, mcq
from medaudit.llm import planted as P
from medaudit.prep.perturb import make_variant

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"name": "planted-ceiling", "backend": "planted", "model": "planted:ceiling", "options": {}}


def _error(profile: str, overrides: dict) -> str:
    with pytest.raises(config.ConfigError) as e:
        config.load(profile, overrides)
    return str(e.value)


# -------------------------------------------------------------- the profile rules


@pytest.mark.parametrize("profile", ["smoke", "default", "paper", "gpubench"])
def test_a_planted_model_is_refused_outside_a_validation_profile(profile):
    msg = _error(profile, {"subject": SPEC})
    assert "subject.backend" in msg and "validation: true" in msg


def test_the_validation_profile_takes_a_planted_model_that_says_so_by_name():
    p = config.load("validation")
    assert p["subject"]["model"] == "planted:ceiling" and "validation" not in p
    assert "judge.backend" in _error("default", {"judge": SPEC})
    msg = _error("validation", {"subject": {**SPEC, "name": "qwen-7b"}})
    assert "subject.name" in msg and "'planted'" in msg
    assert "planted backend only" in _error("validation", {"subject": {**SPEC, "backend": "llamacpp"}})
    msg = _error("validation", {"subject": {**SPEC, "model": "planted:celing"}})
    assert "no truth 'celing' in params/planted.yaml" in msg and "did you mean 'ceiling'" in msg
    assert "options.seed" in _error("validation", {"subject": {**SPEC, "options": {"seed": -1}}})


def test_the_validation_profiles_are_default_and_paper_with_planted_models():
    for name, parent in (("validation", "default"), ("validation-paper", "paper")):
        base, v = config.load(parent), config.load(name)
        own = {k for k in base if base[k] != v[k]}
        assert {"profile", "subject", "agents_model"} <= own, name
        assert v["subject"]["backend"] == v["agents_model"]["backend"] == "planted"
        assert own - {"profile", "subject", "agents_model"} <= {"infer_items", "infer_conditions",
                                                               "mitigation_strategies", "mitigation_conditions",
                                                               "fairmedqa_items"}, name


def _with_truth(tmp_path, monkeypatch, truth: dict) -> None:
    """A compendium root whose params/planted.yaml holds ``truth`` as ``bad``."""
    shutil.copytree(ROOT / "params", tmp_path / "params")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "raw").symlink_to(ROOT / "data" / "raw")
    truths = yaml.safe_load((tmp_path / "params" / "planted.yaml").read_text())
    truths["truths"]["bad"] = truth
    (tmp_path / "params" / "planted.yaml").write_text(yaml.safe_dump(truths))
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))


GOOD = {"seed": 1, "difficulty": {"always": 0.5, "beta": [2, 2]}, "effects": {"+homo": {"points": -4}}}


@pytest.mark.parametrize("change, says", [
    ({"effects": {"+homo": {"points": -80}}},
     "truths.bad.effects.+homo.points: -80 out of range: with this difficulty (mean accuracy 75.0 %) an effect "
     "lies in [-75.0, 25.0] points"),
    ({"effects": {"+homosexual": {"points": -4}}}, "truths.bad.effects.+homosexual: unknown condition (allowed: base,"),
    ({"effects": {"klingon:id": {"points": -4}}},
     "truths.bad.effects.klingon:id: unknown culture 'klingon' (cultures: indigenous_canadian, middle_eastern_muslim, "
     "southeast_asian)"),
    ({"seed": None}, "truths.bad.seed: missing; every draw derives from it"),
    ({"effects": {"+homo": {"points": -4, "way": "sideways"}}},
     "truths.bad.effects.+homo.way: 'sideways' (allowed: one, two)"),
    ({"difficulty": {"always": 0.5}}, "truths.bad.difficulty.beta: missing"),
    ({"unparsed": 1.5}, "truths.bad.unparsed: 1.5 is not a share in [0, 1)"),
    ({"verdicts": {"open": {"default": 0.5}}}, "truths.bad.verdicts.open: not a judge format (allowed: cultural_judge"),
])
def test_a_bad_truth_is_refused_before_anything_runs_naming_file_key_and_allowed_values(tmp_path, monkeypatch,
                                                                                          change, says):
    truth = {**GOOD, **change}
    if change.get("seed", 0) is None:
        del truth["seed"]
    _with_truth(tmp_path, monkeypatch, truth)
    msg = _error("validation", {"subject": {**SPEC, "model": "planted:bad"}})
    assert "params/planted.yaml: " + says in msg, msg
    # the backend itself refuses what it can tell without the studies' names
    if "unknown" not in says:
        with pytest.raises(P.TruthError, match="params/planted.yaml"):
            get_backend("planted", "planted:bad")


def test_the_shipped_truths_are_valid():
    names, cultures = config.planted_names()
    for name, t in P.read_truths().items():
        assert P.check(name, t, names, cultures) == [], name


# -------------------------------------------------------------- the answers


def _request(fmt="mcq", item="q1", cond="base", k=0, gold="B", shown="ABCD"):
    msgs = mcq.build_messages(fmt, "Which one?", {L: f"option {L}" for L in shown}, shown) \
        if formats.get(fmt).kind == "mcq" else [{"role": "user", "content": "judge this"}]
    labels = (("item_id", item), ("condition", cond), ("prompt_format", fmt), ("k", k), ("gold", gold))
    return Request.chat(msgs, GenParams(0.7, 0.9, 16), answer_letters=tuple(shown) if gold else (), labels=labels)


@pytest.mark.parametrize("fmt", formats.names("mcq") + ["mcq+fairness", "mcq+cot1"])
def test_every_multiple_choice_format_reads_the_planted_letter(fmt):
    shown = formats.get(fmt).letters
    b = get_backend("planted", "planted:ceiling", seed=3)
    for gold in shown:
        for k in range(6):
            req = _request(fmt, item=f"i{k}", k=k, gold=gold, shown=shown)
            c = b.complete([req], progress=False)[0]
            letter, status = formats.answer_parser(fmt)(c.text, shown)
            assert status in ("ok", "no_answer") and (letter in shown if status == "ok" else c.text), (fmt, c.text)


@pytest.mark.parametrize("fmt", list(P.VERDICT_REPLIES))
def test_a_judge_reply_is_read_by_its_parser_at_the_declared_rate(fmt):
    yes, no = P.VERDICT_REPLIES[fmt]
    parser = formats.verdict_parser(fmt)
    assert parser(yes) != parser(no) and parser(yes)[1] == parser(no)[1] == "ok"
    b = get_backend("planted", "planted:cultures_and_groups")
    reqs = [_request(fmt, item=f"i{i}", cond="indigenous_canadian:id+ctx", gold="") for i in range(400)]
    got = [c.text for c in b.complete(reqs, progress=False)]
    rate = b.truth.verdict_rate(fmt, "indigenous_canadian:id+ctx")
    assert abs(got.count(yes) / 400 - rate) < 0.07


def test_a_judge_reads_the_rate_of_the_judged_answers_condition_as_the_studies_label_it(tmp_path):
    """05's judges label a request "<model> | <condition>" (the entailment judge adds " | a>b"),
    06's incidence judge "<axis>:<group>": the rate declared for the judged answer's condition is
    the one drawn, never the default."""
    f = tmp_path / "planted.yaml"
    f.write_text("truths:\n  j:\n    seed: 3\n    verdicts:\n"
                 "      open_judge: {default: 0.0, +homo: 1.0}\n      open_entail: {default: 0.0, base: 1.0}\n"
                 "      soap_incidence: {default: 0.0, gender:Female: 1.0}\n")
    b = get_backend("planted", "planted:j", truths_path=str(f))
    said = {(fmt, cond): b.complete([_request(fmt, cond=cond, gold="")], progress=False)[0].text
            for fmt, cond in [("open_judge", "planted-j | +homo"), ("open_judge", "planted-j | base"),
                              ("open_entail", "planted-j | base | 0>1"), ("open_entail", "planted-j | +homo | 0>1"),
                              ("soap_incidence", "gender:Female"), ("soap_incidence", "gender:BL")]}
    assert said == {("open_judge", "planted-j | +homo"): "CORRECT", ("open_judge", "planted-j | base"): "INCORRECT",
                    ("open_entail", "planted-j | base | 0>1"): "entailment",
                    ("open_entail", "planted-j | +homo | 0>1"): "contradiction",
                    ("soap_incidence", "gender:Female"): "YES", ("soap_incidence", "gender:BL"): "NO"}
    names, _ = config.planted_names()
    assert {"gender:Female", "gender:BL", "gender", "+homo"} <= set(names)


def test_answers_are_deterministic_per_request_and_a_one_way_cue_only_hurts():
    a, b = get_backend("planted", "planted:ceiling"), get_backend("planted", "planted:ceiling")
    base = [_request(item=f"i{i}", k=k) for i in range(300) for k in range(3)]
    homo = [_request(item=f"i{i}", cond="+homo", k=k) for i in range(300) for k in range(3)]
    ta = [c.text for c in a.complete(base + homo, progress=False)]
    tb = [c.text for c in b.complete((base + homo)[::-1], progress=False)][::-1]
    assert ta == tb                                          # any order, another instance: the same replies
    parsed = [a.startswith("[") and h.startswith("[") for a, h in zip(ta[:900], ta[900:])]
    assert 0.9 < sum(parsed) / 900 < 1                       # 2 % of replies unparsed in each condition
    right_base = [t == "[B]" for t, ok in zip(ta[:900], parsed) if ok]
    right_homo = [t == "[B]" for t, ok in zip(ta[900:], parsed) if ok]
    assert not any(h and not r for r, h in zip(right_base, right_homo))    # never wrong -> right
    assert sum(right_base) > sum(right_homo)
    c = get_backend("planted", "planted:ceiling", seed=99)
    assert c.model_id != a.model_id and c.model_id.endswith(":seed99")
    assert [x.text for x in c.complete(base, progress=False)] != ta[:900]
    no = Request.chat([{"role": "user", "content": "x"}], GenParams())
    assert b.complete([no], progress=False)[0].error_kind == "no_labels"


def test_the_truth_implies_its_planted_deltas_exactly():
    t = get_backend("planted", "planted:ceiling").truth
    assert t.moment(1) == pytest.approx(0.6 + 0.4 * 3 / 5)
    assert t.planted_delta("base", "+homo", "drop") == pytest.approx(-4.0)
    assert t.planted_delta("base", "+homo", "incorrect") == pytest.approx(-4.0 * 0.98)
    assert t.planted_delta("+hetero", "+homo", "drop") == pytest.approx(-4.0)
    assert t.planted_delta("base", "+Cat", "drop") == 0
    ps = [t.p_item(f"i{i}") for i in range(4000)]
    mean_shift = sum(t.shifted(p, "+homo") - p for p in ps) / len(ps)
    assert mean_shift == pytest.approx(-0.04, abs=0.004)


# -------------------------------------------------------------- the chain 03 -> 04


def _frames(medqa4, conditions, n_items, conds):
    import pandas as pd

    rows = medqa4.iloc[:n_items]
    items = pd.DataFrame({"item_id": [f"medqa4-{r:04d}" for r in rows["row"]], "options": list(rows["options"]),
                          "answer": list(rows["answer"]), "answer_idx": list(rows["answer_idx"]), "subset": "main"})
    variants = []
    for iid, q in zip(items["item_id"], rows["question"]):
        texts = {c: make_variant(q, conditions, c)[0] for c in conds}
        if all(texts.values()):
            variants += [{"item_id": iid, "condition": c, "question": t} for c, t in texts.items()]
    return items, pd.DataFrame(variants)


def _profile(truth_path: Path, conds, k: int) -> dict:
    return {"subject": {"name": "planted-test", "backend": "planted", "model": "planted:test",
                        "options": {"truths_path": str(truth_path)}},
            "temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "prompt_formats": ["mcq"],
            "mitigation_strategies": ["none"], "mitigation_conditions": None, "k_samples": k,
            "unparsed_rule": "incorrect", "infer_conditions": conds, "n_boot": 200, "calibration_margin": 2.0}


def test_the_chain_recovers_a_planted_effect_sign_size_and_verdict(tmp_path, medqa4, conditions):
    """03 → 04 at small n: 80 questions at a ceiling (70 % always right),
    +homo costs 25 points one way, +hetero nothing. The estimate has the
    planted sign, its interval covers the planted Δ, and the verdict is
    "difference shown"; +hetero's interval covers 0 and shows no difference."""
    truth = {"seed": 5, "difficulty": {"always": 0.7, "beta": [3, 2]},
             "effects": {"+homo": {"points": -25, "way": "one"}}, "unparsed": 0.02}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    conds = ["base", "+hetero", "+homo"]
    items, variants = _frames(medqa4, conditions, 90, conds)
    assert variants["item_id"].nunique() >= 80
    store = ResponseStore(tmp_path / "responses.sqlite")
    p = _profile(tmp_path / "planted.yaml", conds, k=3)
    rows = recovery._points(recovery.repetition(p, items, variants, store, planted_seed=5, run_seed=7))
    assert len(store.frame()) == 3 * len(variants)           # every sample stored once, by the run loop
    homo = rows[(rows["cond_a"] == "base") & (rows["cond_b"] == "+homo")].iloc[0]
    assert homo["planted"] == pytest.approx(-25 * 0.98)
    assert homo["delta"] < -15 and homo["ci_lo"] <= homo["planted"] <= homo["ci_hi"]
    assert homo["verdict"] == equivalence.DIFFERENCE
    het = rows[(rows["cond_a"] == "base") & (rows["cond_b"] == "+hetero")].iloc[0]
    assert het["planted"] == 0 and het["ci_lo"] <= 0 <= het["ci_hi"] and het["verdict"] != equivalence.DIFFERENCE
    # a rerun sends nothing (every answer is in the store) and reads the same table
    n_stored = len(store.frame())
    again = recovery._points(recovery.repetition(p, items, variants, store, planted_seed=5, run_seed=7))
    assert len(store.frame()) == n_stored
    assert again["delta"].tolist() == rows["delta"].tolist() and again["verdict"].tolist() == rows["verdict"].tolist()


@pytest.mark.slow
def test_r_repetitions_cover_the_planted_effects_and_show_no_false_difference(tmp_path, medqa4, conditions):
    """20 repetitions of 03 → 04 (other planted and run seeds each): every
    row's coverage is within Monte Carlo error of 95 %, the null rows show a
    difference in at most 5 % (within Monte Carlo error), and detection of
    the planted effects is within Monte Carlo error of the planner's power."""
    truth = {"seed": 8, "difficulty": {"always": 0.6, "beta": [3, 2]},
             "effects": {"+homo": {"points": -8, "way": "one"}, "+Mus": {"points": -4, "way": "two"}},
             "unparsed": 0.02}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    conds = ["base", "+hetero", "+homo", "+Mus"]
    items, variants = _frames(medqa4, conditions, 130, conds)
    store = ResponseStore(tmp_path / "responses.sqlite")
    p = _profile(tmp_path / "planted.yaml", conds, k=3)
    import pandas as pd

    rows = recovery._points(pd.concat([
        recovery.repetition(p, items, variants, store, planted_seed=s, run_seed=100 + i).assign(repetition=i)
        for i, s in enumerate(P.seeds(8, 20))], ignore_index=True))
    tab = recovery.summary(rows, margin=2.0)
    assert len(tab) == 4 and (tab["repetitions"] == 20).all()
    bad = tab[tab["checks"].str.contains("MISS")]
    assert bad.empty, bad.to_string()


def _cultural_profile() -> dict:
    return {"cultural_temperature": 0.0, "top_p": 0.9, "max_tokens": 16, "explain_max_tokens": 160,
            "cultural_margin": 3.0}


def test_07s_chain_recovers_a_planted_id_ctx_effect_and_its_delta_avg(tmp_path):
    """07's answers and contrasts by its own calls (answer plan, run loop,
    store, stored responses, question table, Fig. 5's Id+Ctx − Original and
    Eq. 2's Δ Avg) on seed 003's 150 items: Id+Ctx costs Indigenous Canadian
    30 points one way, the other conditions nothing (drawn afresh). Fig. 5's
    row has the planted sign, covers it and shows a difference; Southeast
    Asian's covers 0 without one; Δ Avg Id+Ctx (planted −10 against both
    baselines) is covered, Δ Avg Ctx (planted 0) is."""
    fresh = {"points": 0, "way": "two"}
    effects = {"indigenous_canadian:id+ctx": {"points": -30, "way": "one"}, "neutral": fresh,
               **{f"{c}:{cue}": fresh for c in ("middle_eastern_muslim", "southeast_asian") for cue in ("id+ctx",)},
               **{f"{c}:{cue}": fresh for c in ("indigenous_canadian", "middle_eastern_muslim", "southeast_asian")
                  for cue in ("id", "ctx")}}
    truth = {"seed": 3, "difficulty": {"always": 0.5, "beta": [2, 2]}, "effects": effects}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    cs, cfg = recovery.cultural_set()
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = recovery.cultural_repetition(_cultural_profile(), cs, cfg, store, model="planted:test", planted_seed=4,
                                        run_seed=9, truths_path=str(tmp_path / "planted.yaml"))
    assert len(store.frame()) == 11 * 150                    # every item in every condition, stored once
    r = rows.set_index(["cond_a", "cond_b"])
    ind = r.loc[("original", "indigenous_canadian:id+ctx")]
    assert ind["planted"] == pytest.approx(-30) and ind["n"] == 150
    assert ind["delta"] < -20 and ind["ci_lo"] <= -30 <= ind["ci_hi"] and ind["verdict"] == equivalence.DIFFERENCE
    sea = r.loc[("original", "southeast_asian:id+ctx")]
    assert sea["planted"] == 0 and sea["ci_lo"] <= 0 <= sea["ci_hi"] and sea["verdict"] != equivalence.DIFFERENCE
    assert sea["discordant"] > 0                             # a null condition answers with its own noise
    for ref in ("original", "neutral"):
        avg = r.loc[(ref, "Δ Avg id+ctx")]
        assert avg["planted"] == pytest.approx(-10) and avg["ci_lo"] <= -10 <= avg["ci_hi"] and avg["delta"] < -5
        ctx = r.loc[(ref, "Δ Avg ctx")]
        assert ctx["planted"] == 0 and ctx["ci_lo"] <= 0 <= ctx["ci_hi"]


@pytest.mark.slow
def test_r_repetitions_of_07s_contrasts_pass_every_check(tmp_path):
    """20 repetitions of 07's contrasts under the shipped truth
    ``planted:cultural`` (other seeds than make validate's): every row's
    mean, coverage, false-difference, detection and false-equivalence
    checks pass (:func:`medaudit.validation.recovery.summary`)."""
    import pandas as pd

    cs, cfg = recovery.cultural_set()
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = pd.concat([recovery.cultural_repetition(_cultural_profile(), cs, cfg, store, model=recovery.CULTURAL_TRUTH,
                                                   planted_seed=s, run_seed=i).assign(repetition=i)
                      for i, s in enumerate(P.seeds(2000, 20))], ignore_index=True)
    tab = recovery.summary(rows, margin=3.0)
    assert len(tab) == 9 and (tab["repetitions"] == 20).all()
    bad = tab[tab["checks"].str.contains("MISS")]
    assert bad.empty, bad.to_string()


def _fairmedqa_profile() -> dict:
    return {"fairmedqa_extract": "strict", "fairmedqa_counting": "paper", "fairmedqa_mcnemar": "exact",
            "fairmedqa_unparsed": "drop", "fairmedqa_margin": 3.0}


def test_08s_chain_recovers_a_planted_pair_effect(tmp_path):
    """08's answers and Table 3 by its own calls (answer plan, run loop,
    store, stored answers, extraction, question table, pair table) on 150
    vignettes: Black costs 30 points against White one way, the other texts
    nothing (drawn afresh). The Black–White pair has the planted sign,
    covers it and shows a difference; the income pair covers 0 without one."""
    fresh = {"points": 0, "way": "two"}
    truth = {"seed": 6, "difficulty": {"always": 0.5, "beta": [2, 2]},
             "effects": {"race:Black": {"points": -30, "way": "one"},
                         **{c: fresh for c in ("neutralised", "sex:female", "sex:male", "ses:low income",
                                               "ses:high income")}}}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump({"truths": {"test": truth}}))
    vig, texts, fcfg = recovery.fairmedqa_set(150)
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = recovery.fairmedqa_repetition(_fairmedqa_profile(), vig, texts, fcfg, store, model="planted:test",
                                         planted_seed=6, run_seed=9, truths_path=str(tmp_path / "planted.yaml"))
    assert len(store.frame()) == 8 * 150                     # every vignette's eight texts, stored once
    r = rows.set_index(["cond_a", "cond_b"])
    race = r.loc[("race:White", "race:Black")]
    assert race["planted"] == pytest.approx(-30) and race["n"] == 150
    assert race["delta"] < -20 and race["ci_lo"] <= -30 <= race["ci_hi"] and race["verdict"] == equivalence.DIFFERENCE
    ses = r.loc[("ses:high income", "ses:low income")]
    assert ses["planted"] == 0 and ses["ci_lo"] <= 0 <= ses["ci_hi"] and ses["verdict"] != equivalence.DIFFERENCE
    assert ses["discordant"] > 0


@pytest.mark.slow
def test_r_repetitions_of_08s_pairs_pass_every_check(tmp_path):
    """20 repetitions of 08's Table 3 under the shipped truth
    ``planted:fairmedqa`` (other seeds than make validate's): every row's
    checks pass (:func:`medaudit.validation.recovery.summary`)."""
    import pandas as pd

    vig, texts, fcfg = recovery.fairmedqa_set()
    store = ResponseStore(tmp_path / "responses.sqlite")
    rows = pd.concat([recovery.fairmedqa_repetition(_fairmedqa_profile(), vig, texts, fcfg, store,
                                                    model=recovery.FAIRMEDQA_TRUTH, planted_seed=s, run_seed=i)
                      .assign(repetition=i) for i, s in enumerate(P.seeds(2000, 20))], ignore_index=True)
    tab = recovery.summary(rows, margin=3.0)
    assert len(tab) == 4 and (tab["repetitions"] == 20).all()
    bad = tab[tab["checks"].str.contains("MISS")]
    assert bad.empty, bad.to_string()


def test_coverage_is_read_against_the_tables_target_and_conservative_is_said():
    """The coverage check reads a contrast's coverage against the target every printed
    interval is held to (docs/statistics.md: at least 93 %): an interval that covered the planted
    Δ in every repetition is conservative (07's Fig. 5 on a one-way cue, 100 of 100), not a miss;
    one whose coverage is shown below 93 % is."""
    import numpy as np
    import pandas as pd

    def rows(covered: int, r: int = 100) -> pd.DataFrame:
        lo = np.where(np.arange(r) < covered, -6.0, -2.0)            # the planted -3 inside or outside
        return pd.DataFrame({"cond_a": "base", "cond_b": "+x", "planted": -3.0, "delta": -3.0 + np.sin(np.arange(r)),
                             "ci_lo": lo, "ci_hi": lo + 2.5 + 1.5 * (np.arange(r) < covered), "n": 150,
                             "discordant": 0.1, "verdict": "inconclusive"})
    always = recovery.summary(rows(100), margin=3.0).iloc[0]["checks"]
    assert "coverage ok (conservative" in always and "coverage MISS" not in always, always
    assert "coverage MISS" in recovery.summary(rows(80), margin=3.0).iloc[0]["checks"]
    assert "coverage ok;" in recovery.summary(rows(95), margin=3.0).iloc[0]["checks"] + ";"
