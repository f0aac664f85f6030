"""Recovery of planted effects through notebook 05 (the open-ended case study, seed 000 §4):
Table 2's paired accuracy tests run against a planted judge whose verdict rate per condition is
declared, read by :mod:`medaudit.validation.recovery` (``--study 05``) into its recovery table.

One repetition (:func:`openended_repetition`) is 05's chain by 05's own library calls:

1. the open form of every question. The planted model cannot reformulate (its free text is one
   fixed sentence, which no B.4 check accepts), so every item takes the rule-based open form that
   05's fallback uses when every LLM attempt fails (:func:`medaudit.studies.openended.rule_table`,
   ``reformulate_fallback: rules``), checked the same way; an item whose rule form fails a check
   is left out, as 05 leaves it out (:func:`rule_forms`), then
   :func:`~medaudit.studies.openended.open_variants`;
2. K free-text answers per question through the response store by the planted model
   (:func:`~medaudit.studies.openended.collect_answers`);
3. the clusters, by the **entailment** method only
   (:func:`~medaudit.studies.openended.cluster_all`): the planted model writes one fixed sentence
   for every answer, so the K samples of a question are identical, and the planted entailment
   judge, declared at rate 1.0, puts them in one cluster, as any working clusterer must. The LLM
   method (B.5) would fail every question (the planted model's reply is no JSON), and the
   embedding method would load MiniLM's weights to find the same single cluster;
4. the B.6 judge (:func:`~medaudit.studies.openended.judge_all`) answered by the planted judge,
   whose share of CORRECT is declared per condition of the judged answer
   (:func:`medaudit.llm.planted.judged_condition`);
5. the question table (:func:`~medaudit.studies.openended.questions`) and Table 2's paired tests
   (:func:`~medaudit.studies.openended.table2`: the ``res`` frame 05 saves as
   ``05_paired_tests``), its accuracy rows read against the planted Δ.

With one cluster per question the accuracy of a condition is the judge's declared CORRECT rate for
it, so the planted Δ of a contrast is 100 × (rate_b − rate_a) (:func:`planted_delta`). Each
verdict is drawn afresh per condition (the judge's draw names the judged answer's condition and
key): a two-way effect, whose discordant share is read from the run, as 04's recovery reads it, so
the planner's power is read at the run's own discordance. The margin is the one 05's
:func:`~medaudit.studies.openended.table2` tests at: the profile's ``calibration_margin``, as 04's.

What this checks and what it does not: the chain plan → store → entailment clusters → judge →
question table → Table 2, against a known truth. The clusters are trivial (one per question,
confidence 1 everywhere), so it says nothing of the clusterers or of semantic entropy.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pandas as pd

from medaudit import config, paths, progress as _progress
from medaudit.llm import GenParams, ResponseStore, backend_for, mcq
from medaudit.llm.planted import PlantedBackend
from medaudit.studies import openended
from medaudit.validation.repetitions import repeat

OPEN_TRUTH = "planted:open"      # params/planted.yaml: the B.6 judge's CORRECT rate per condition
# the run's size unless -y sets them: the validation profile's open_items and open_samples are the default
# profile's (1 item, K = 4: make all's time for a real model); K only repeats the one fixed sentence, and each
# sample beyond the first costs two entailment calls, so K = 2, the least at which confidence is defined
OPEN_SIZE = {"open_items": 60, "open_samples": 2}
METHOD = "entailment"            # the clustering method (module docstring, step 3)
JUDGE_FORMAT = "open_judge"
TABLE_PREFIX = "recovery_openended_table2"   # the last repetition's Table 2 panels (table2 saves them)


def open_set(profile: str, n_items: int | None, conditions: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(items, variants) as notebook 05 selects them: the first ``n_items`` items of the
    profile's pool (notebooks 01 and 02 of ``profile`` must have run) in ``conditions``."""
    from medaudit.prep import data

    variants = mcq.select_variants(data.load_frame(profile, "variants"), n_items, conditions)
    items = data.load_frame(profile, "items").set_index("item_id").loc[variants["item_id"].unique()].reset_index()
    return items, variants


def rule_forms(items: pd.DataFrame) -> pd.DataFrame:
    """The reformulations 05 reads (:func:`medaudit.studies.openended.reformulate`'s frame:
    item_id, ok, text, source, attempts, problems) when no LLM attempt is accepted and the
    fallback is ``rules``: each item's rule-based open form, accepted where the B.4 checks find
    no problem (:func:`medaudit.studies.openended.rule_table`)."""
    t = openended.rule_table(items)
    ok = t["problems"].eq("")
    return pd.DataFrame({"item_id": t["item_id"], "ok": ok, "text": t["rule-based form"],
                         "source": np.where(ok, "rules", "none"), "attempts": 0,
                         "problems": [[] if not p else [p] for p in t["problems"]]})


def planted_delta(truth, a: str, b: str) -> float:
    """The planted accuracy difference b − a in points: with one cluster per question a
    condition's accuracy is the judge's declared CORRECT rate for it."""
    return 100 * (truth.verdict_rate(JUDGE_FORMAT, b) - truth.verdict_rate(JUDGE_FORMAT, a))


def openended_repetition(p: dict, items: pd.DataFrame, variants: pd.DataFrame, store: ResponseStore, *,
                         profile: str, model: str = OPEN_TRUTH, planted_seed: int, run_seed: int,
                         n_boot: int | None = None, truths_path: str | None = None) -> pd.DataFrame:
    """One repetition of notebook 05's chain (module docstring) under profile ``p`` (its
    ``open_conditions``, ``open_samples``, ``open_temperature``, ``top_p``, ``open_max_tokens``,
    ``openended_answer_prompt``, ``cluster_max_tokens``, ``cluster_max_attempts``,
    ``embedding_threshold``, ``judge_context`` and ``n_boot``): ``model`` (a planted truth)
    answers and judges. Returns Table 2's accuracy rows in points: cond_a, cond_b, n, delta,
    ci_lo, ci_hi, p, verdict, margin, discordant (the share of questions whose verdicts differ
    between the two conditions), se (NaN: a McNemar test), planted, unscored (questions left
    without a verdict: unclustered or unparsed), planted_seed, run_seed. ``profile`` receives
    the panels :func:`~medaudit.studies.openended.table2` saves (as :data:`TABLE_PREFIX`).
    ``truths_path``: another truths file (tests)."""
    options = {"seed": planted_seed, **({"truths_path": truths_path} if truths_path else {})}
    spec = {"name": f"planted-{model.split(':', 1)[-1]}", "backend": "planted", "model": model, "options": options}
    judge = backend_for(spec)
    if not isinstance(judge, PlantedBackend):
        raise ValueError(f"model {model!r}: the recovery of 05 needs a planted model (planted:<truth>)")
    name, conditions = spec["name"], list(p["open_conditions"])
    truth = items.set_index("item_id")["answer"]
    open_v = openended.open_variants(variants, rule_forms(items))
    answers = openended.collect_answers([spec], store, open_v, k=int(p["open_samples"]), seed=run_seed,
                                        gen=GenParams(p["open_temperature"], p["top_p"], p["open_max_tokens"]),
                                        prompt=p["openended_answer_prompt"])
    clusters, _ = openended.cluster_all([METHOD], answers, backend=judge, store=store, model=name, seed=run_seed,
                                        gen=GenParams(0.0, 1.0, p["cluster_max_tokens"]),
                                        max_attempts=p["cluster_max_attempts"], threshold=p["embedding_threshold"])
    labels = openended.judge_all(clusters, answers, truth, backend=judge, store=store, model=name, seed=run_seed,
                                 context=p["judge_context"])
    qt = openended.questions(clusters[METHOD], labels[METHOD], METHOD)
    res, _ = openended.table2(qt, conditions, n_boot=int(n_boot or p["n_boot"]), seed=run_seed, profile=profile,
                              prefix=TABLE_PREFIX, margin=float(p["calibration_margin"]))
    if res is None:
        raise ValueError(f"{len(qt)} questions, none scored at base and under a cue: nothing to pair "
                         f"(clusters: {clusters[METHOD]['status'].value_counts().to_dict()})")
    acc = res[res["metric"] == "accuracy"].copy()
    wide = qt.pivot_table(index="item_id", columns="condition", values="single_correct", aggfunc="first")
    both = [wide[a].notna() & wide[b].notna() for a, b in zip(acc["cond_a"], acc["cond_b"])]
    out = acc.assign(n=acc["n_items"], delta=100 * acc["delta"], ci_lo=100 * acc["ci_lo"],
                     ci_hi=100 * acc["ci_hi"], se=np.nan,
                     discordant=[float((wide[a] != wide[b])[m].mean())
                                 for a, b, m in zip(acc["cond_a"], acc["cond_b"], both)],
                     planted=[planted_delta(judge.truth, a, b) for a, b in zip(acc["cond_a"], acc["cond_b"])],
                     unscored=int(qt["single_correct"].isna().sum()))
    cols = ["cond_a", "cond_b", "n", "delta", "ci_lo", "ci_hi", "p", "verdict", "margin", "discordant", "se",
            "planted", "unscored"]
    return out[cols].reset_index(drop=True).assign(planted_seed=planted_seed, run_seed=run_seed)


@contextlib.contextmanager
def _progress_to(path):
    """The stages' progress lines (:mod:`medaudit.progress`) written to ``path`` instead of
    stderr: the entailment clusters ask one pair at a time, a bar each."""
    before = os.environ.get(_progress.PROGRESS_ENV)
    os.environ[_progress.PROGRESS_ENV] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_progress.PROGRESS_ENV, None)
        else:
            os.environ[_progress.PROGRESS_ENV] = before


def run_openended(profile: str, r: int, first_seed: int | None = None, model: str = OPEN_TRUTH,
                  n_boot: int | None = None, progress: bool = True, overrides: dict | None = None) -> pd.DataFrame:
    """R repetitions of 05's Table 2 (:func:`openended_repetition`) under ``profile`` with
    :data:`OPEN_SIZE` and ``overrides`` on it (checked as the runner checks them), each under
    another planted seed (:func:`medaudit.llm.planted.seeds`) and run seed: one row per
    (repetition, contrast). The stages' progress lines go to
    ``outputs/<profile>/data/recovery/openended-progress.txt``."""
    p = config.load(profile, {**OPEN_SIZE, **(overrides or {})})
    items, variants = open_set(profile, p["open_items"], list(p["open_conditions"]))
    def one(store, ps, i):
        with _progress_to(paths.outputs(profile, "data", "recovery", "openended-progress.txt")):
            return openended_repetition(p, items, variants, store, profile=profile, model=model, planted_seed=ps,
                                        run_seed=p["seed"] + i, n_boot=n_boot)

    return repeat(profile, r, model, "openended-repetition", one, first_seed, progress)
