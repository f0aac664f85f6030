"""Recovery of planted effects: the chain from a model's answer to a
table's verdict, run R times against a planted model whose bias is known
(:mod:`medaudit.llm.planted`), and read against the truth.

One repetition is what notebooks 03 and 04 do, by the same library calls:
03 plans the samples (:func:`medaudit.llm.mcq.plan_samples`), the run loop
sends them through the response store (:func:`medaudit.llm.runs.run`), the
store is read back by key; 04 builds the per-question table
(:func:`medaudit.studies.calibration.questions`) and compares every condition with
the base and the +hetero/+homo pair (:func:`medaudit.studies.calibration.compare`:
the intervals, tests and verdicts the notebooks print, whatever they are at
the time). Each repetition draws the planted model with another seed
(:func:`medaudit.llm.planted.seeds`) and plans with another run seed, so
the questions' difficulties, the answers, the option orders and the single
answer drawn all change.

The recovery table (:func:`summary`), one row per accuracy contrast:
planted Δ (:meth:`~medaudit.llm.planted.Truth.planted_delta`) beside the
mean estimate and its spread; the share of repetitions whose 95 % interval
covers the planted Δ, with the interval of that share
(:func:`medaudit.stats.intervals.proportion_interval`); the verdicts' counts; the
power the planner predicts at the run's n and discordance
(:func:`medaudit.stats.testpower.mcnemar_power`); and a check per row: coverage
not shown below the 93 % that docs/statistics.md's table holds every printed
interval to (coverage shown above 95 % is said: conservative, an interval wider
than it needs), detection consistent with the power where an effect
was planted, "difference shown" at most 5 % (within Monte Carlo error) where
none was, "equivalence shown" at most 5 % where the planted effect is at
or beyond the margin.

07's contrasts (``--study 07``, :func:`cultural_repetition`): notebook 07's
answers and its Fig. 5 and Eq. 2 rows by 07's own calls, answered by
``planted:cultural``, into the same table (``recovery_cultural``); 08's
(``--study 08``, :func:`fairmedqa_repetition`): its answers and Table 3's
counterfactual pairs by 08's own calls, answered by ``planted:fairmedqa``
(``recovery_fairmedqa``); 05's (``--study 05``,
:func:`medaudit.validation.recovery_openended.openended_repetition`): Table 2's
paired accuracy tests with the B.6 judge answered by ``planted:open``
(``recovery_openended``); 06's (``--study 06``,
:func:`medaudit.validation.recovery_soap.soap_repetition`): its incidence ΔBL rows by 06's
own calls, judged by ``planted:soap`` (``recovery_soap``; no margin).

``python -m medaudit.validation.recovery --profile validation -r 20`` (``make
validate``) writes ``outputs/<profile>/tables/recovery.{csv,md,tex}``, the
repetitions' rows ``recovery_runs.csv`` and the figure
``figures/recovery.{png,pdf}``; docs/validation.md reads them.
"""
from __future__ import annotations

import argparse
import math
import time
from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.studies import calibration
from medaudit import config, paths
from medaudit.stats import equivalence, intervals, testpower
from medaudit.report import plots, tables
from medaudit.llm import GenParams, ResponseStore, mcq, runs
from medaudit.llm.planted import PlantedBackend
from medaudit.validation import recovery_openended, recovery_soap
from medaudit.validation.repetitions import repeat

PAIRS = [("+hetero", "+homo")]     # 04's within-model pair


def _frames(profile: str, p: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(items with subset, variants as notebook 03 selects them under ``p``,
    the loaded profile) of a profile whose notebooks 01 and 02 have run."""
    from medaudit.prep import data

    items = pd.concat([data.load_frame(profile, "items"), data.load_frame(profile, "psych_items")])
    allv = data.load_frame(profile, "variants")
    subset = allv.drop_duplicates("item_id").set_index("item_id")["subset"]
    items = items.assign(subset=items["item_id"].map(subset))
    variants = mcq.select_variants(allv, p["infer_items"], p["infer_conditions"], p["infer_methods"],
                                   p["infer_subsets"])
    return items, variants


def repetition(p: dict, items: pd.DataFrame, variants: pd.DataFrame, store: ResponseStore, *,
               planted_seed: int, run_seed: int, n_boot: int | None = None) -> pd.DataFrame:
    """One repetition of 03 → 04 under profile ``p`` (a loaded profile whose
    subject is a planted model): the accuracy rows of 04's paired tests, with
    the planted Δ and the discordant share of the single answers."""
    spec = p["subject"]
    backend = PlantedBackend(spec["model"], seed=planted_seed, **{k: v for k, v in (spec.get("options") or {}).items()
                                                                  if k != "seed"})
    gen = GenParams(temperature=p["temperature"], top_p=p["top_p"], max_tokens=p["max_tokens"])
    samples = mcq.plan_samples(variants, items, prompt_formats=p["prompt_formats"],
                               strategies=p["mitigation_strategies"], arm_conditions=p["mitigation_conditions"],
                               model=spec["name"], backend=backend.kind, model_id=backend.model_id,
                               k=p["k_samples"], seed=run_seed, gen=gen)
    runs.run(backend, store, samples, model=spec["name"], progress=False).check()
    responses = store.by_keys(s.key for s in samples)
    responses = responses[responses["prompt_format"] == "mcq"]
    qt = calibration.questions(responses, items, run_seed, unparsed=p["unparsed_rule"])
    main = qt[qt["subset"] == "main"]
    res, pair_res = calibration.compare(main, "base", p["infer_conditions"], n_boot or p["n_boot"], run_seed,
                                        pairs=PAIRS, margin=p["calibration_margin"])
    acc = pd.concat([r for r in (res, pair_res) if r is not None])
    acc = acc[acc["metric"] == "accuracy"].copy()
    wide = main.pivot_table(index="item_id", columns="condition", values="single_correct", aggfunc="first")
    truth = backend.truth
    acc["planted"] = [truth.planted_delta(a, b, p["unparsed_rule"]) for a, b in zip(acc["cond_a"], acc["cond_b"])]
    acc["discordant"] = [float((wide[a] != wide[b])[wide[a].notna() & wide[b].notna()].mean())
                         for a, b in zip(acc["cond_a"], acc["cond_b"])]
    acc["planted_seed"], acc["run_seed"] = planted_seed, run_seed
    return acc


def _points(acc: pd.DataFrame) -> pd.DataFrame:
    """Δ and its interval in points (04's accuracy rows hold fractions)."""
    scale = 100.0 if acc["delta"].abs().max() <= 1.0 and acc["ci_hi"].abs().max() <= 1.0 else 1.0
    return acc.assign(delta=scale * acc["delta"], ci_lo=scale * acc["ci_lo"], ci_hi=scale * acc["ci_hi"])


def run(profile: str, r: int, first_seed: int | None = None, n_boot: int | None = None,
        progress: bool = True, overrides: dict | None = None) -> pd.DataFrame:
    """R repetitions under ``profile`` (with ``overrides``, checked as the
    runner checks them): one row per (repetition, accuracy contrast)."""
    p = config.load(profile, overrides)
    items, variants = _frames(profile, p)
    return _points(repeat(profile, r, p["subject"]["model"], "repetition",
                          lambda store, ps, i: repetition(p, items, variants, store, planted_seed=ps,
                                                          run_seed=p["seed"] + i, n_boot=n_boot),
                          first_seed, progress))


CULTURAL_TRUTH = "planted:cultural"     # params/planted.yaml: seed 003's 11 conditions
CULTURAL_FORMAT = "mcq_option"


def cultural_set():
    """(07's cultural items and variants, its condition config), as notebook 07 loads them."""
    from medaudit.studies import cultural

    config = cultural.load_config()
    cs = cultural.variants(paths.raw("cultural_cues_hive", "final_augment_test_questions.json"),
                           cultural.neutral_sentence(config), forms=("5opt",), config=config)
    return cs, config


def cultural_repetition(p: dict, cs, config, store: ResponseStore, *, model: str, planted_seed: int,
                        run_seed: int, truths_path: str | None = None) -> pd.DataFrame:
    """One repetition of notebook 07's answers and contrasts under profile
    ``p``, by its calls: :func:`medaudit.studies.cultural.answer_plan` (every item
    of the 5-option form in the 11 conditions, option prompting, one
    answer each), :func:`medaudit.llm.runs.run` through the store,
    :func:`medaudit.studies.cultural.stored_responses`,
    :func:`medaudit.stats.scoring.question_table` and
    :func:`~medaudit.stats.scoring.drop_incomplete`; then Fig. 5's Id+Ctx − Original per culture
    (:func:`medaudit.studies.cultural.idctx_delta`) and Eq. 2's Δ Avg per cue and
    baseline (:func:`medaudit.studies.cultural.delta_avg_errors`), both at the
    profile's ``cultural_margin``. Rows as :func:`repetition`'s, in points;
    a Δ Avg row's contrast is ``Δ Avg <cue>`` against its baseline, its
    planted Δ the mean of the three cultures' and its ``se`` the SE
    clustered by question (the planner's power is read at it). ``truths_path``: another truths file (tests)."""
    from medaudit.stats import scoring
    from medaudit.studies import cultural

    backend = PlantedBackend(model, seed=planted_seed, truths_path=truths_path)
    name = f"planted-{backend.truth.name}"
    gen = GenParams(temperature=float(p["cultural_temperature"]), top_p=float(p["top_p"]),
                    max_tokens=int(p["max_tokens"]))
    samples = cultural.answer_plan(cs, forms=["5opt"], formats=[CULTURAL_FORMAT], n_items=None, n_explain=None,
                                   model=name, backend=backend.kind, model_id=backend.model_id, k=1, seed=run_seed,
                                   gen=gen, explain_max_tokens=int(p["explain_max_tokens"]))
    runs.run(backend, store, samples, model=name, progress=False).check()
    responses = cultural.stored_responses(store.frame(conditions=config.conditions()), cs, forms=["5opt"],
                                          config=config, prefer_keys=[s.key for s in samples])
    qt = scoring.drop_incomplete(scoring.question_table(responses, pd.concat(cs.items.values()))).table
    margin = float(p["cultural_margin"])
    truth = backend.truth
    idctx = cultural.idctx_delta(qt, config, margin=margin)
    a = idctx.assign(cond_a=cultural.ORIGINAL, cond_b=idctx["condition"], delta=idctx["estimate"],
                     discordant=(idctx["b"] + idctx["c"]) / idctx["n"], se=np.nan)
    a["planted"] = [truth.planted_delta(cultural.ORIGINAL, c, "drop") for c in a["cond_b"]]
    davg = cultural.delta_avg_errors(qt, config, margin=margin)
    b = davg.assign(cond_a=davg["reference"], cond_b="Δ Avg " + davg["cue"], n=davg["questions"],
                    se=davg["se_cluster"], discordant=np.nan)
    b["planted"] = [float(np.mean([truth.planted_delta(ref, f"{c}:{cue}", "drop") for c in config.culture_names]))
                    for ref, cue in zip(davg["reference"], davg["cue"])]
    cols = ["cond_a", "cond_b", "n", "delta", "ci_lo", "ci_hi", "p", "verdict", "margin", "discordant", "se",
            "planted"]
    return pd.concat([a[cols], b[cols]], ignore_index=True).assign(planted_seed=planted_seed, run_seed=run_seed)


def run_cultural(profile: str, r: int, first_seed: int | None = None, model: str = CULTURAL_TRUTH,
                 progress: bool = True, overrides: dict | None = None) -> pd.DataFrame:
    """R repetitions of 07's contrasts (:func:`cultural_repetition`) under
    ``profile``: one row per (repetition, contrast)."""
    p = config.load(profile, overrides)
    cs, cfg = cultural_set()
    return repeat(profile, r, model, "cultural-repetition",
                  lambda store, ps, i: cultural_repetition(p, cs, cfg, store, model=model, planted_seed=ps,
                                                           run_seed=p["seed"] + i),
                  first_seed, progress)


FAIRMEDQA_TRUTH = "planted:fairmedqa"     # params/planted.yaml: FairMedQA's counterfactual pairs
FAIRMEDQA_VIGNETTES = 400


def fairmedqa_set(n: int = FAIRMEDQA_VIGNETTES):
    """(vignettes, texts, config) for 08's pairs: the first ``n`` questions
    of the shipped MedQA test split as vignettes, and as the text of every
    condition of FairMedQA's pairs the vignette itself. The planted model
    answers from the request's labels (item, condition), not its text, so
    what is validated is 08's chain from the plan to Table 3, not 02's
    variants (02's checks are theirs)."""
    from medaudit.prep import data
    from medaudit.studies.fairmedqa import config as fq_config

    fcfg = fq_config.load_config()
    vig = data.load_medqa(paths.raw(*data.MEDQA4), 4, "skip").records.iloc[:n].reset_index(drop=True)
    conds = list(dict.fromkeys(c for pair in fq_config.all_pairs(fcfg) for c in pair))
    texts = pd.DataFrame([{"item_id": i, "condition": c, "question": q}
                          for i, q in zip(vig["item_id"], vig["question"]) for c in conds])
    return vig, texts, fcfg


def fairmedqa_repetition(p: dict, vig: pd.DataFrame, texts: pd.DataFrame, fcfg, store: ResponseStore, *,
                         model: str, planted_seed: int, run_seed: int, truths_path: str | None = None
                         ) -> pd.DataFrame:
    """One repetition of notebook 08's answers and Table 3 under profile
    ``p``, by its calls: :func:`medaudit.studies.fairmedqa.answers.answer_plan`
    (one greedy answer per text, the A.7.4 prompt), :func:`medaudit.llm.runs.run`
    through the store, :func:`~medaudit.studies.fairmedqa.answers.stored_answers`,
    :func:`medaudit.prep.amqa.extract`, :func:`medaudit.stats.scoring.question_table`
    and :func:`medaudit.studies.fairmedqa.metrics.pair_table` on every pair at the
    profile's ``fairmedqa_counting``, ``fairmedqa_mcnemar``,
    ``fairmedqa_unparsed`` and ``fairmedqa_margin``. Rows as
    :func:`repetition`'s, in points (Δ = accuracy of the pair's second
    member minus its first)."""
    from medaudit.prep import amqa
    from medaudit.stats import scoring
    from medaudit.studies.fairmedqa import answers as fq_answers, config as fq_config, metrics as fq_metrics

    backend = PlantedBackend(model, seed=planted_seed, truths_path=truths_path)
    name = f"planted-{backend.truth.name}"
    plan = fq_answers.answer_plan(texts, vig, model=name, backend=backend, seed=run_seed, source="agents")
    runs.run(backend, store, plan, model=name, progress=False).check()
    answers = fq_answers.stored_answers(store.frame(conditions=fcfg.conditions()), vig, fcfg,
                                        prefer_keys=[s.key for s in plan], models=[name],
                                        prompt_formats=[fq_answers.ANSWER_FORMAT])
    answers = amqa.extract(answers, vig, amqa.extract_rule(p["fairmedqa_extract"], "agents"))
    qt = scoring.question_table(answers, vig, units=("model",))
    pairs = fq_metrics.pair_table(qt, fq_config.all_pairs(fcfg), counting=p["fairmedqa_counting"],
                                  mcnemar=p["fairmedqa_mcnemar"], unparsed=p["fairmedqa_unparsed"],
                                  margin=float(p["fairmedqa_margin"]))
    truth = backend.truth
    out = pairs.assign(cond_a=pairs["a"], cond_b=pairs["b"], se=np.nan,
                       discordant=(pairs["mcnemar_b"] + pairs["mcnemar_c"]) / pairs["n"])
    out["planted"] = [truth.planted_delta(a, b, "drop") for a, b in zip(out["cond_a"], out["cond_b"])]
    cols = ["cond_a", "cond_b", "n", "delta", "ci_lo", "ci_hi", "verdict", "margin", "discordant", "se", "planted"]
    return out[cols].assign(planted_seed=planted_seed, run_seed=run_seed)


def run_fairmedqa(profile: str, r: int, first_seed: int | None = None, model: str = FAIRMEDQA_TRUTH,
                  progress: bool = True, overrides: dict | None = None) -> pd.DataFrame:
    """R repetitions of 08's Table 3 (:func:`fairmedqa_repetition`) under
    ``profile``: one row per (repetition, pair)."""
    p = config.load(profile, overrides)
    vig, texts, fcfg = fairmedqa_set()
    return repeat(profile, r, model, "fairmedqa-repetition",
                  lambda store, ps, i: fairmedqa_repetition(p, vig, texts, fcfg, store, model=model, planted_seed=ps,
                                                            run_seed=p["seed"] + i),
                  first_seed, progress)


def _within(share_ci: dict, target: float, side: str = "both") -> bool:
    """Whether ``target`` is within Monte Carlo error of a share of the
    repetitions: inside its 95 % interval (``share_ci``:
    :func:`medaudit.stats.intervals.proportion_interval`), or, for ``side``
    "most", not below its lower end (the share is not shown to exceed it)."""
    return share_ci["lo"] <= target if side == "most" else share_ci["lo"] <= target <= share_ci["hi"]


COVERAGE_TARGET = 0.93   # what docs/statistics.md's table holds every printed 95 % interval to


def _coverage_check(cov: dict) -> str:
    """A contrast's coverage read against the table's target: "MISS" where its interval
    (``cov``: :func:`medaudit.stats.intervals.proportion_interval` over the repetitions) lies
    below :data:`COVERAGE_TARGET`, "ok (conservative: above 95 %)" where it lies above the
    nominal 95 % (an interval wider than it needs, e.g. Fig. 5's on a cue that only hurts),
    else "ok"."""
    if cov["hi"] < COVERAGE_TARGET:
        return "MISS"
    return "ok (conservative: above 95 %)" if cov["lo"] > 0.95 else "ok"


def summary(rows: pd.DataFrame, margin: float, alpha: float = testpower.ALPHA) -> pd.DataFrame:
    """The recovery table (module docstring), one row per contrast."""
    out = []
    for (a, b), g in rows.groupby(["cond_a", "cond_b"], sort=False):
        r, planted = len(g), float(g["planted"].iloc[0])
        cover = ((g["ci_lo"] <= planted) & (planted <= g["ci_hi"])).to_numpy(float)
        cov = intervals.proportion_interval(cover)
        diff_ci = intervals.proportion_interval((g["verdict"] == equivalence.DIFFERENCE).to_numpy(float))
        equiv_ci = intervals.proportion_interval(g["verdict"].str.startswith("equivalence").to_numpy(float))
        diff, equiv = diff_ci["estimate"], equiv_ci["estimate"]
        n = int(g["n"].median()) if "n" in g else int(g["n_items"].median())
        psi = float(g["discordant"].mean())
        # a row may run its test at another level (06's max ΔBL: Bonferroni's α/G per group)
        level = float(g["alpha"].iloc[0]) if "alpha" in g and g["alpha"].notna().all() else alpha
        if not planted:
            power = alpha
        elif "se" in g and g["se"].notna().all():     # a clustered test: the planner's power at its SE
            power = testpower.se_power(abs(planted), float(np.sqrt((g["se"] ** 2).mean())), alpha, df=n - 1)
        else:
            power = testpower.mcnemar_power(n, planted / 100, max(psi, abs(planted) / 100), level)
        se_mean = float(g["delta"].std(ddof=1)) / np.sqrt(r)
        bias_se = (float(g["delta"].mean()) - planted) / se_mean if se_mean > 0 else 0.0
        checks = [f"mean {'ok' if abs(bias_se) <= 2 else 'MISS'}", f"coverage {_coverage_check(cov)}"]
        if abs(planted) < 1e-9:
            checks.append(f"false difference {'ok' if _within(diff_ci, alpha, 'most') else 'MISS'}")
        else:
            checks.append(f"detection vs power {'ok' if _within(diff_ci, power) else 'MISS'}")
        if abs(planted) >= margin - 1e-9:
            checks.append(f"false equivalence {'ok' if _within(equiv_ci, alpha, 'most') else 'MISS'}")
        out.append({"contrast": f"{b} vs {a}", "planted Δ": round(planted, 3),
                    "mean estimated Δ": g["delta"].mean(), "SD of estimates": g["delta"].std(ddof=1),
                    "mean − planted (SE)": bias_se,
                    "mean CI width": (g["ci_hi"] - g["ci_lo"]).mean(), "coverage": cov["estimate"],
                    "coverage lo": cov["lo"], "coverage hi": cov["hi"], "difference shown": diff,
                    "equivalence shown": equiv, "inconclusive": (g["verdict"] == equivalence.INCONCLUSIVE).mean(),
                    "planner's power": power, "questions": n, "discordant share": psi, "repetitions": r,
                    "checks": "; ".join(checks)})
    return pd.DataFrame(out)


def figure(rows: pd.DataFrame):
    """Planted Δ (x) against each repetition's estimate and 95 % interval (y), one column of
    repetitions per contrast, spread sideways; the diagonal is perfect recovery."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    groups = list(rows.groupby(["cond_a", "cond_b"], sort=False))
    span = max(0.6, 0.35 * (rows["planted"].max() - rows["planted"].min()) / max(len(groups), 1))
    for j, ((a, b), g) in enumerate(groups):
        x0 = float(g["planted"].iloc[0])
        xs = x0 + np.linspace(-span / 2, span / 2, len(g)) + 0.08 * j
        covers = (g["ci_lo"] <= x0) & (x0 <= g["ci_hi"])
        ax.vlines(xs, g["ci_lo"], g["ci_hi"], colors=np.where(covers, "#4c72b0", "#c44e52"), lw=0.8, alpha=0.7)
        ax.plot(xs, g["delta"], "o", ms=2.5, color="black")
    lim = [min(rows["ci_lo"].min(), rows["planted"].min()) - 1, max(rows["ci_hi"].max(), rows["planted"].max()) + 1]
    ax.plot(lim, lim, color="grey", lw=1, ls="--")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("planted Δ (points)")
    ax.set_ylabel("estimated Δ with 95 % interval (points)")
    ax.set_title(f"Planted vs estimated {rows.attrs.get('measure', 'accuracy')} Δ, "
                 f"{rows['repetition'].nunique()} repetitions "
                 f"(red: interval misses the planted Δ)", fontsize=10)
    return fig


STUDIES = {"04": ("03 → 04", "04's paired tests"),
           "07": ("07's answers and contrasts", "07's Id+Ctx − Original per culture and Δ Avg per cue"),
           "08": ("08's answers and Table 3", "08's counterfactual pairs"),
           "05": ("05's answers, clusters, judge and Table 2", "05's Table 2 paired tests"),
           "06": ("06's counterfactual notes and incidence judge", "06's ΔBL per group and max ΔBL")}


def write(rows: pd.DataFrame, profile: str, margin: float, name: str = "recovery", study: str = "04") -> pd.DataFrame:
    """Save the repetitions (``<name>_runs``), the recovery table (``<name>``) and the
    figure (``<name>``) under ``outputs/<profile>/``; ``study`` (:data:`STUDIES`) names the chain in the captions."""
    r = rows["repetition"].nunique()
    chain, contrasts = STUDIES[study]
    measure = rows.attrs.get("measure", "accuracy")     # what the contrasts compare (06: the judge's incidence)
    tables.save_table(rows, f"{name}_runs", profile, caption=f"Recovery: every repetition's {measure} contrasts "
                      f"({contrasts}) beside the planted Δ, {r} repetitions")
    tab = summary(rows, margin)
    tables.save_table(tab.round(4), name, profile,
                      caption=f"Recovery of planted effects over {r} repetitions of {chain} (planted model "
                              f"{rows.attrs.get('model', '')}; "
                              f"{f'δ = ±{margin:g} points' if np.isfinite(margin) else 'no equivalence margin'}): "
                              "coverage of the 95 % "
                              "interval, the verdicts' shares and the planner's power at the run's n and discordance",
                      n=f"{r} repetitions × {int(tab['questions'].median())} {rows.attrs.get('unit', 'questions')}")
    plots.save(figure(rows), name, profile,
               caption=f"Planted against estimated {measure} Δ, {r} repetitions, each with its 95 % interval")
    return tab


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of ``python -m medaudit.validation.recovery``: run ``--study``
    04's, 05's, 06's, 07's or 08's chain R times against its planted model, write the recovery tables and
    print each contrast's planted and estimated Δ, coverage, detection and checks."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.validation.recovery", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="validation")
    ap.add_argument("-r", "--repetitions", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=None, help="the planted seed the repetitions derive from")
    ap.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples (default: the profile's n_boot)")
    ap.add_argument("-y", dest="yaml", default=None,
                    help="profile keys to override, a YAML mapping (e.g. '{infer_conditions: [base, +homo]}')")
    ap.add_argument("--study", choices=sorted(STUDIES), default="04",
                    help=f"04: 03 → 04 by the profile's subject; 07: 07's contrasts answered by {CULTURAL_TRUTH}; "
                         f"08: 08's pairs answered by {FAIRMEDQA_TRUTH}; 05: 05's Table 2 judged by "
                         f"{recovery_openended.OPEN_TRUTH}; 06: 06's incidence ΔBL answered by "
                         f"{recovery_soap.SOAP_TRUTH}")
    ap.add_argument("--name", default=None, help="the tables' and figure's name (default: recovery; "
                                                 "recovery_cultural, recovery_fairmedqa, recovery_openended, "
                                                 "recovery_soap for --study 07, 08, 05, 06)")
    a = ap.parse_args(argv)
    overrides = config.read_yaml(a.yaml, "-y") if a.yaml else None
    p = config.load(a.profile, overrides)
    if p["subject"]["backend"] != "planted":
        ap.error(f"profile {a.profile}: subject is not a planted model (backend: planted)")
    t0 = time.time()
    if a.study == "07":
        name = a.name or "recovery_cultural"
        rows = run_cultural(a.profile, a.repetitions, a.first_seed, overrides=overrides)
        rows.attrs["model"] = CULTURAL_TRUTH
        tab = write(rows, a.profile, float(p["cultural_margin"]), name, study="07")
    elif a.study == "06":
        name = a.name or "recovery_soap"
        rows = recovery_soap.run_soap(a.profile, a.repetitions, a.first_seed, overrides=overrides)
        rows.attrs.update(model=recovery_soap.SOAP_TRUTH, measure="incidence", unit="dialogs")
        # 06 declares no equivalence margin (a non-rejection reads inconclusive): an infinite margin, so that
        # summary's "false equivalence" check, for a planted effect at or beyond the margin, never applies
        tab = write(rows, a.profile, math.inf, name, study="06")
    elif a.study == "08":
        name = a.name or "recovery_fairmedqa"
        rows = run_fairmedqa(a.profile, a.repetitions, a.first_seed, overrides=overrides)
        rows.attrs["model"] = FAIRMEDQA_TRUTH
        tab = write(rows, a.profile, float(p["fairmedqa_margin"]), name, study="08")
    elif a.study == "05":     # the margin 05's table2 tests at: the profile's, as 04's
        name = a.name or "recovery_openended"
        rows = recovery_openended.run_openended(a.profile, a.repetitions, a.first_seed, n_boot=a.n_boot,
                                                overrides=overrides)
        rows.attrs["model"] = recovery_openended.OPEN_TRUTH
        tab = write(rows, a.profile, float(p["calibration_margin"]), name, study="05")
    else:
        name = a.name or "recovery"
        rows = run(a.profile, a.repetitions, a.first_seed, a.n_boot, overrides=overrides)
        rows.attrs["model"] = p["subject"]["model"]
        tab = write(rows, a.profile, p["calibration_margin"], name)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(tab[["contrast", "planted Δ", "mean estimated Δ", "mean − planted (SE)", "coverage", "difference shown",
                   "equivalence shown", "planner's power", "questions", "checks"]].round(3).to_string(index=False))
    print(f"{a.repetitions} repetitions in {time.time() - t0:.0f} s; outputs/{a.profile}/tables/{name}.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
