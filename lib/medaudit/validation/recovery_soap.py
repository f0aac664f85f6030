"""Recovery of planted effects through notebook 06, the SOAP-note audit
(seed 002 §3-§4.1): the chain from the dialogs to the incidence table's
ΔBL rows, run R times against a planted model whose judge says YES at a
declared rate per counterfactual group (``planted:soap``,
params/planted.yaml), and read against that truth.

One repetition (:func:`soap_repetition`) is what notebook 06 does, by its
own library calls and in its order: the reviewed pool of dialogs
(:func:`soap_set`: the de-identified dialogs, the screen, the review list,
the ACI-Bench one-shot example and the seeded sample, as 06 selects them),
:func:`medaudit.studies.soap.counterfactuals`, the notes
(:func:`medaudit.studies.soap.generate_notes`), the incidence judge
(:func:`medaudit.studies.soap.judge_incidence`) and
:func:`medaudit.studies.soap.inference.incidence_inference`, whose rows
"ΔBL:<group>" (each group's incidence − BL: Newcombe's paired interval and
the exact McNemar test) and "max ΔBL" (Bonferroni over the G groups) are
read against the planted Δ = 100 × (rate of the group − rate of BL).

What is skipped, and why: the stereotype augmentation. The planted model
cannot write the sentences an augmentation appends (its free text is one
fixed sentence, which the augmenter's checks would refuse), so each
dialog is taken as its own augmented dialog (``ok`` True), as 08's
recovery takes the vignette as every condition's text. The notes are that
one fixed sentence too, each under its own store key (the request names
the dialog, the context and the group), and the planted judge draws its
verdict from the judged note's key: so the verdicts of a dialog's groups
are independent draws (the discordant share is two-way). What this checks
is the wiring plan → store → judge → incidence inference → verdict, not
the note writer or the augmenter.

06 declares no equivalence margin: a row reads "difference shown" when its
test's p ≤ α and "inconclusive" otherwise, by the rule
:func:`medaudit.report.findings.kind_from_test` reads 06's rows with, in
the names of :mod:`medaudit.stats.equivalence`. A max ΔBL row's test runs
each group at α/G (its ``alpha`` column): the planner's power is read for
the group with the largest planted ΔBL at that level (a lower bound by at
most the other groups' false-positive share, within Monte Carlo error at
R = 20).

``python -m medaudit.validation.recovery --profile validation --study 06
-r 20`` writes ``outputs/<profile>/tables/recovery_soap.{csv,md,tex}``;
docs/validation.md reads it.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from medaudit import config, paths
from medaudit.llm import ResponseStore
from medaudit.llm.planted import PlantedBackend
from medaudit.report import findings
from medaudit.stats import equivalence, intervals
from medaudit.validation.repetitions import repeat

SOAP_TRUTH = "planted:soap"       # params/planted.yaml: the incidence judge's YES rate per "<axis>:<group>"
# the recovery's own choice of what 06 audits (a -y override wins): every dialog of MTS-Dialog's reviewed pool
# (123), one context and speaker, one axis: one cell whose ΔBL rows share one n
SOAP_OVERRIDES = {"soap_datasets": {"mts_dialog": None}, "soap_contexts": ["exaggerating_symptoms:patient"],
                  "soap_axes": ["gender"]}
INCIDENCE_FORMAT = "soap_incidence"
# the reading of 06's rows (report.findings) in the names every recovery table counts
VERDICTS = {findings.DIFFERENCE: equivalence.DIFFERENCE, findings.INCONCLUSIVE: equivalence.INCONCLUSIVE,
            findings.TOO_FEW: intervals.TOO_FEW, findings.NO_VERDICT: "no verdict"}


def soap_set(p: dict):
    """(the dialogs 06 audits, the one-shot example, the SOAP config) under profile ``p``, as
    notebook 06 selects them: notebook 01's de-identification of every dialog, the screen, the
    review list (params/soap_dialogs.csv; only a reviewer's keep counts when params/soap.yaml
    says ``pool_needs_review``), the ACI-Bench example, and the seeded sample of
    ``soap_datasets`` (null: every dialog of the pool)."""
    from medaudit.prep import data, dialogs, selection
    from medaudit.studies import soap

    cfg = soap.load_config()
    dialog_cfg = selection.load_selection(paths.params("selection.yaml"))["dialogs"]
    dlg_all = dialogs.deidentify_all(data.load_dialogs().records, dialog_cfg)
    review_path = paths.params("soap_dialogs.csv")
    reviewed = soap.apply_review(soap.screen(dlg_all, cfg), soap.load_review(review_path), review_path,
                                 needs_review=cfg.pool_needs_review)
    example = soap.aci_example(dlg_all, cfg.aci_example, dialog_cfg["race_terms"], dialog_cfg["origin_terms"],
                               cfg.screen)
    selected = soap.select_dialogs(reviewed, p["soap_datasets"], p["seed"], exclude=[example["dialog_id"]])
    return selected, example, cfg


def as_augmented(selected: pd.DataFrame, units, cfg) -> pd.DataFrame:
    """The augmentation table 06's next steps read (:func:`medaudit.studies.soap.augment`'s
    columns), each dialog taken as its own augmented dialog under every augmentation job of
    ``units`` (``ok`` True, no addition): the planted model writes no additions (module docstring)."""
    rows = [{"dialog_id": r.dialog_id, "dataset": r.dataset, "context": ctx, "speaker": sp, "aug_axis": aug_axis,
             "ok": True, "additions": [], "dialogue": r.dialogue_deid, "dialogue_aug": r.dialogue_deid,
             "attempts": 0, "problems": []}
            for r in selected.itertuples(index=False) for ctx, sp, aug_axis in cfg.augmentations(units)]
    return pd.DataFrame(rows, columns=["dialog_id", "dataset", "context", "speaker", "aug_axis", "ok", "additions",
                                       "dialogue", "dialogue_aug", "attempts", "problems"])


def _verdict(p: float, n) -> str:
    """06's reading of a row (:func:`medaudit.report.findings.kind_from_test`), named as
    :mod:`medaudit.stats.equivalence` names verdicts."""
    return VERDICTS[findings.kind_from_test(p, n)]


def soap_repetition(p: dict, selected: pd.DataFrame, example: dict, cfg, store: ResponseStore, *, model: str,
                    planted_seed: int, run_seed: int, truths_path: str | None = None) -> pd.DataFrame:
    """One repetition of notebook 06's chain under profile ``p`` (its ``soap_contexts``,
    ``soap_axes``, ``soap_note_decoding``, ``soap_note_max_tokens``, ``soap_temperature``,
    ``top_p`` and ``soap_incidence_max_tokens``), the planted model ``model`` writing the notes
    and judging them: :func:`as_augmented` (the augmentation skipped: the module docstring),
    :func:`medaudit.studies.soap.counterfactuals`, :func:`~medaudit.studies.soap.generate_notes`,
    :func:`~medaudit.studies.soap.judge_incidence` and
    :func:`medaudit.studies.soap.inference.incidence_inference`. Returns its ΔBL rows and max
    ΔBL row per cell as recovery rows, in points: cond_a (``<axis>:BL``), cond_b
    (``<axis>:<group>``, or ``max ΔBL <axis>``), n (dialogs), delta, ci_lo, ci_hi, p, verdict,
    margin (none: NaN), discordant (the share of dialogs whose two verdicts differ), se (NaN),
    alpha (the level each group's test runs at: α, or α/G for max ΔBL), planted, planted_seed,
    run_seed. With more than one cell (dataset, context, speaker) the conditions are prefixed
    with it. ``truths_path``: another truths file (tests)."""
    from medaudit.studies import soap
    from medaudit.studies.soap import inference as soap_inference

    backend = PlantedBackend(model, seed=planted_seed, truths_path=truths_path)
    name = f"planted-{backend.truth.name}"
    spec = {"name": name, "backend": backend.kind, "model": model}
    units = cfg.units(p["soap_contexts"], p["soap_axes"])
    aug = as_augmented(selected, units, cfg)
    cf = soap.counterfactuals(aug, units, cfg, run_seed)
    gen = soap.note_gen(p["soap_note_decoding"], spec, cfg, max_tokens=int(p["soap_note_max_tokens"]),
                        temperature=float(p["soap_temperature"]), top_p=float(p["top_p"]))
    notes = soap.generate_notes([spec], cf, example=example, seed=run_seed, gen={name: gen}, store=store,
                                backend_for=lambda _spec: backend, progress=False)
    verdicts = soap.judge_incidence(backend, store, notes, cfg, model=name, seed=run_seed,
                                    max_tokens=int(p["soap_incidence_max_tokens"]), progress=False)
    inf = soap_inference.incidence_inference(verdicts, cfg, aug)
    truth = backend.truth

    def rate(axis: str, group: str) -> float:
        return truth.verdict_rate(INCIDENCE_FORMAT, f"{axis}:{group}")

    keys = ["dataset", "context", "speaker", "axis"]
    cells = inf[keys[:3]].drop_duplicates()
    rows = []
    for (ds, ctx, sp, ax), g in inf.groupby(keys, sort=False):
        prefix = f"{ds} {ctx}:{sp} " if len(cells) > 1 else ""
        pos = verdicts[(verdicts["dataset"] == ds) & (verdicts["context"] == ctx) & (verdicts["speaker"] == sp)
                       & (verdicts["axis"] == ax)]
        wide = pos.assign(yes=(pos["incidence"] == soap.YES).astype(int)).pivot_table(
            index="unit", columns="group", values="yes", aggfunc="max")
        by_short = {cfg.short(ax).get(v, v): v for v in cfg.values(ax)}
        base = {"cond_a": f"{prefix}{ax}:{soap.BASELINE}", "margin": np.nan, "se": np.nan}
        planted, psi = {}, {}
        groups = []
        for r in g[g["metric"].str.startswith("ΔBL:")].itertuples(index=False):
            grp = by_short[r.metric.split(":", 1)[1]]
            groups.append(grp)
            planted[grp] = 100 * (rate(ax, grp) - rate(ax, soap.BASELINE))
            psi[grp] = float((wide[grp] != wide[soap.BASELINE]).sum() / r.N)
            rows.append({**base, "cond_b": f"{prefix}{ax}:{grp}", "n": int(r.N), "delta": r.estimate, "ci_lo": r.lo,
                         "ci_hi": r.hi, "p": r.p, "verdict": _verdict(r.p, r.N), "discordant": psi[grp],
                         "alpha": soap_inference.ALPHA, "planted": planted[grp]})
        mx = g[g["metric"] == "max ΔBL"]
        if len(mx) and groups:
            r = mx.iloc[0]
            top = max(groups, key=lambda x: planted[x])
            rows.append({**base, "cond_b": f"{prefix}max ΔBL {ax}", "n": int(r["N"]), "delta": r["estimate"],
                         "ci_lo": r["lo"], "ci_hi": r["hi"], "p": r["p"], "verdict": _verdict(r["p"], r["N"]),
                         "discordant": psi[top], "alpha": soap_inference.ALPHA / len(groups),
                         "planted": planted[top]})
    cols = ["cond_a", "cond_b", "n", "delta", "ci_lo", "ci_hi", "p", "verdict", "margin", "discordant", "se",
            "alpha", "planted"]
    return pd.DataFrame(rows, columns=cols).assign(planted_seed=planted_seed, run_seed=run_seed)


def run_soap(profile: str, r: int, first_seed: int | None = None, model: str = SOAP_TRUTH, progress: bool = True,
             overrides: dict | None = None) -> pd.DataFrame:
    """R repetitions of 06's incidence rows (:func:`soap_repetition`) under ``profile``, with
    :data:`SOAP_OVERRIDES` under the caller's ``overrides`` (checked as the runner checks
    them): one row per (repetition, contrast). The pool is read once; each repetition has
    its own planted seed, run seed and store."""
    p = config.load(profile, {**SOAP_OVERRIDES, **(overrides or {})})
    selected, example, cfg = soap_set(p)
    if progress:
        per = ", ".join(f"{d} {n}" for d, n in selected["dataset"].value_counts().items())
        print(f"06's pool: {len(selected)} dialogs ({per})", file=sys.stderr, flush=True)
    return repeat(profile, r, model, "soap-repetition",
                  lambda store, ps, i: soap_repetition(p, selected, example, cfg, store, model=model, planted_seed=ps,
                                                       run_seed=p["seed"] + i),
                  first_seed, progress)
