"""The power planner: how many questions (and samples per question) a new
audit needs, before it spends money.

    python -m medaudit.validation.power --delta 5 --profile default
    python -m medaudit.validation.power --delta 5 --released fairmedqa_amqa
    python -m medaudit.validation.power --delta 5 --discordance 0.12 --within 0.15 --between 0.05 --rho 0.6

Given a target difference Δ (in points), α and power, and pilot estimates,
it prints per design the questions needed and what the paper's n can detect:

* **paired binary designs**, planned for the McNemar test each notebook
  runs, by exact enumeration of its power (:mod:`medaudit.stats.testpower`):
  MCQ flips (seed 000, notebook 04: exact below 25 discordant pairs, else
  corrected χ²), cultural flips (seed 003, 07: the bootstrap interval,
  whose large-sample form is the uncorrected z test), FairMedQA pairs (seed
  004, 08: exact) and SOAP %dlg (seed 002, 06: a dialog's verdicts under
  two counterfactuals; 06 runs no test, planned for the exact one). The
  pilot is the discordant share ψ of the comparison the notebook makes:
  each cue against base (04), each condition against the original (07),
  the counterfactual pairs of ``params/fairmedqa.yaml`` (White vs Black,
  …; 08 tests those, not each variant against the original). From a response store
  it is the share of questions whose *correctness* differs where the gold
  answer is known, else the share whose *answer* changes — an upper bound on
  the correctness discordance (a change between two wrong options is not
  one), so the planned n errs on the large side. With no pilot, n is shown
  for a grid of ψ.
* **K-sample means** (Miller 2024; :func:`medaudit.stats.testpower.mean_n`): a
  question's score is the mean of K samples; the variance decomposition
  (:func:`medaudit.stats.paired.variance_components`) gives the variance across
  questions, the mean within-question variance and the K it suggests, and
  the questions needed at K = 1, the pilot's K and the suggested K.

Pure pandas / scipy / statsmodels: no model library is loaded.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from medaudit.stats import equivalence, paired as stats, testpower

# The designs: the reference condition each study compares against, and the
# paper's n (the unit that repeats: question / vignette / dialog).
#   seed 000 abstract: "2,364 medical questions" (K = 10 samples each, §2)
#   seed 003 §III: "retained 147 questions per setting"
#   seed 004 §3: "801 valid clinical vignettes"
#   seed 002 §3: "93 dialogs from MTS-Dialog and 47 dialogs from ACI-Bench" (140)


@dataclass(frozen=True)
class Design:
    """One study design the planner plans for: its notebook, reference condition, the
    paper's n and K, the unit, the prompt formats of the store that feed it, the McNemar test the
    notebook runs, and whether the pilot compares the study's counterfactual pairs."""
    name: str
    notebook: str
    reference: str | None        # None: the store's most common condition of that format
    paper_n: int
    paper_k: int
    unit: str
    formats: tuple[str, ...]     # prompt formats of the store that feed it
    test: str                    # the McNemar test the notebook runs (medaudit.stats.testpower.TESTS)
    pairs: bool = False          # the pilot's comparisons: the study's counterfactual pairs, not vs reference


DESIGNS = (
    Design("MCQ flips", "04", "base", 2364, 10, "questions", ("mcq",), "auto"),
    Design("cultural flips", "07", "original", 147, 1, "questions", ("mcq_option", "mcq", "mcq_explain"), "z"),
    Design("FairMedQA pairs", "08", None, 801, 1, "vignettes", ("mcq_letter", "amqa_no_cot"), "exact", pairs=True),
    Design("SOAP %dlg", "06", None, 140, 1, "dialogs", ("soap_incidence", "soap_disparity"), "exact"),
)


def fairmedqa_pairs() -> list[tuple[str, str]]:
    """The counterfactual pairs notebook 08 tests (``params/fairmedqa.yaml``)."""
    from medaudit.studies.fairmedqa.config import load_config

    return [tuple(p) for p in load_config().pairs]
PSI_GRID = (0.05, 0.10, 0.20, 0.30)
GOLD_COLUMNS = ("answer_idx", "gold", "answer")


# --------------------------------------------------------------------------
# pilot estimates from a response store


def gold_from_profile(profile: str) -> dict[str, str]:
    """item_id → gold letter from every table under outputs/<profile>/data
    that has an item_id and a gold-letter column (items, psych_items,
    FairMedQA vignettes ...)."""
    from medaudit import paths

    out: dict[str, str] = {}
    folder = paths.outputs(profile, "data", mkdir=False)
    for f in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        try:
            head = pd.read_json(f, orient="records", lines=True, dtype=False, nrows=1)
        except ValueError:
            continue
        col = next((c for c in GOLD_COLUMNS if c in head.columns), None)
        if "item_id" not in head.columns or col is None:
            continue
        df = pd.read_json(f, orient="records", lines=True, dtype=False)
        ok = df[col].map(lambda x: isinstance(x, str) and len(x) == 1)
        out.update(dict(zip(df.loc[ok, "item_id"].astype(str), df.loc[ok, col])))
    return out


def released_frame(name: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """(answers, item_id → gold) of a shipped release (``params/released.yaml``:
    cultural_cues_hive, fairmedqa_amqa), imported into a throw-away store.
    The HIVE release carries no gold letters here: its pilot is the answer
    changes (an upper bound on the correctness discordance)."""
    import tempfile

    from medaudit import released
    from medaudit.llm.store import ResponseStore

    spec = released.spec(name)
    cond = None
    if spec.get("format") == "hive":
        from medaudit.studies.cultural import load_config

        cond = load_config().condition
    with tempfile.TemporaryDirectory() as tmp:
        store = ResponseStore(Path(tmp) / "released.sqlite")
        try:
            released.import_release(name, store, cond)
            frame = store.frame()
            # a mitigation arm (<format>+<strategy>) is another experiment: the plain prompt's answers only
            from medaudit.llm.mitigations import split_format

            frame = frame[[split_format(f)[1] == "none" for f in frame["prompt_format"]]]
        finally:
            store.close()
    gold = {}
    if spec.get("format") == "amqa":
        items = released.release_items(name)
        gold = dict(zip(items["item_id"].astype(str), items["answer_idx"]))
    return frame, gold


def read_store(path: str | Path) -> pd.DataFrame:
    """The analysed rows of a response store (:func:`medaudit.llm.store.current`)."""
    from medaudit.llm.store import ResponseStore, current

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"power: no response store at {p}")
    store = ResponseStore(p)
    try:
        return current(store.frame())
    finally:
        store.close()


def pilot(frame: pd.DataFrame, gold: Mapping[str, str] | None = None,
          references: Sequence[str] = ("base", "original"),
          pairs: Sequence[tuple[str, str]] | None = None) -> pd.DataFrame:
    """Pilot estimates per model, prompt format and condition against each
    reference condition present (``references``; a format with none of them:
    its most common condition), on the questions answered under both, and
    for each pair (a, b) of ``pairs`` present (default: FairMedQA's
    counterfactual pairs, :func:`fairmedqa_pairs`) b against a, marked
    ``comparison`` = "pair" (the others: "reference").

    Columns: model, prompt_format, comparison, reference, condition, n (questions with a
    parsed answer under both, first sample), psi_answer (answer changed),
    psi_correct (correctness differs; NaN without gold), rho (correlation of
    the correctness, first sample), k (samples per question), and, with
    gold and K > 1, var_between, within (mean within-question variance of
    the K-sample correctness, pooled over both conditions), var_a, var_b,
    cov_ab (of the questions' K-sample mean correctness)."""
    gold = dict(gold or {})
    pairs = fairmedqa_pairs() if pairs is None else [tuple(p) for p in pairs]
    f = frame[frame["parsed_answer"].notna() & (frame["parsed_answer"].astype(str) != "")].copy()
    f["item_id"] = f["item_id"].astype(str)
    f["correct"] = [float(a == gold[i]) if i in gold else np.nan for i, a in zip(f["item_id"], f["parsed_answer"])]
    rows = []
    for (model, fmt), g in f.groupby(["model", "prompt_format"], sort=True):
        conds = g["condition"].value_counts()
        refs = [r for r in references if r in conds.index] or [conds.index[0]]
        first = g.sort_values("sample").drop_duplicates(["item_id", "condition"])
        ans = first.pivot(index="item_id", columns="condition", values="parsed_answer")
        cor = first.pivot(index="item_id", columns="condition", values="correct")
        kmean = g.groupby(["item_id", "condition"])["correct"].mean().unstack()
        k = int(g.groupby(["item_id", "condition"]).size().median())
        jobs = [("reference", r, c) for r in refs for c in conds.index if c not in refs]
        jobs += [("pair", a, b) for a, b in pairs if a in conds.index and b in conds.index]
        for comparison, ref, cond in jobs:
            both = ans[ref].notna() & ans[cond].notna()
            n = int(both.sum())
            if n == 0:
                continue
            ca, cb = cor.loc[both, ref], cor.loc[both, cond]
            known = ca.notna() & cb.notna()
            row = {"model": model, "prompt_format": fmt, "comparison": comparison, "reference": ref,
                   "condition": cond, "n": n,
                   "psi_answer": float((ans.loc[both, ref] != ans.loc[both, cond]).mean()),
                   "psi_correct": float((ca[known] != cb[known]).mean()) if known.any() else np.nan,
                   "rho": (stats.paired_delta(ca[known], cb[known])["rho"] if known.sum() > 1 else np.nan),
                   "k": k}
            if k > 1 and known.any():
                items = known[known].index
                long = g[g["item_id"].isin(items) & g["condition"].isin([ref, cond])]
                vc = [stats.variance_components(long[long["condition"] == c].rename(
                    columns={"item_id": "question", "correct": "value"})) for c in (ref, cond)]
                ma, mb = kmean.loc[items, ref], kmean.loc[items, cond]
                row.update(var_between=float(np.mean([v["between"] for v in vc])),
                           within=float(np.mean([v["within"] for v in vc])),
                           var_a=float(ma.var(ddof=1)), var_b=float(mb.var(ddof=1)),
                           cov_ab=float(np.cov(ma, mb, ddof=1)[0, 1]) if len(items) > 1 else np.nan)
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=PILOT_COLUMNS)


PILOT_COLUMNS = ["model", "prompt_format", "comparison", "reference", "condition", "n", "psi_answer", "psi_correct",
                 "rho", "k", "var_between", "within", "var_a", "var_b", "cov_ab"]


# --------------------------------------------------------------------------
# plans


def plan_mcnemar(delta: float, psi: float, alpha: float = stats.ALPHA, power: float = stats.POWER,
                 paper_n: int | None = None, test: str = "exact") -> dict:
    """Pairs needed for the McNemar ``test`` to detect ``delta`` (a
    proportion) at discordance ``psi`` with ``power`` (the smallest n whose
    exactly enumerated power reaches it, :func:`medaudit.stats.testpower.mcnemar_n`),
    the power at that n, and the MDE at ``paper_n`` under the same test
    (``inf``: none detectable)."""
    d = abs(delta)
    n = testpower.mcnemar_n(d, psi, alpha, power, test) if 0 < d <= psi else None
    return {"psi": psi, "n": n, "feasible": n is not None, "test": test,
            "power_at_n": testpower.mcnemar_power(n, d, psi, alpha, test) if n else np.nan,
            "mde_paper": testpower.mcnemar_mde(paper_n, psi, alpha, power, test) if paper_n else np.nan}


def plan_means(delta: float, var_a: float, var_b: float, cov_ab: float, within: float, ks: Sequence[int],
               alpha: float = stats.ALPHA, power: float = stats.POWER) -> pd.DataFrame:
    """Questions needed per K (Miller 2024) for K-sample means. ``var_a``,
    ``var_b``, ``cov_ab``: across questions of the TRUE scores (the pilot's
    variance of question means less their sampling noise); ``within``: the
    mean within-question variance of one sample."""
    rows = []
    for k in sorted(set(int(k) for k in ks if k and k >= 1)):
        w = testpower.omega2(var_a, var_b, cov_ab, within, within, k)
        q = math.ceil(testpower.mean_n(delta, w, alpha, power))
        rows.append({"K": k, "omega2": w, "questions": q, "samples": k * q})
    return pd.DataFrame(rows)


def _pts(x: float) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "n/a"
    return "none" if np.isinf(x) else f"{100 * x:.1f}"


def binary_table(delta: float, alpha: float, power: float, pil: pd.DataFrame | None,
                 discordance: float | None = None, margin: float | None = None) -> pd.DataFrame:
    """One row per design (and per ψ of the grid where no pilot is known).
    ``margin`` (points): also the questions that show equivalence within ±δ
    with ``power`` when the true change is 0, at the row's ψ
    (:func:`medaudit.stats.equivalence.equivalence_n`, exact for one answer per
    question and condition)."""
    rows = []
    for d in DESIGNS:
        sources = []
        if discordance is not None:
            sources.append(("given", discordance))
        elif pil is not None and len(pil):
            p = pil[pil["prompt_format"].isin(d.formats)]
            comp = p["comparison"] if "comparison" in p else pd.Series("reference", index=p.index)
            p = p[comp == ("pair" if d.pairs else "reference")]
            p = p[p["reference"] == d.reference] if d.reference else p
            if len(p):
                use_c = p["psi_correct"].notna().all()
                psi = float(np.average(p["psi_correct" if use_c else "psi_answer"], weights=p["n"]))
                what = "correctness" if use_c else "answer changes (upper bound)"
                of = "counterfactual pairs" if d.pairs else f"vs {d.reference or 'reference'}"
                sources.append((f"{what}, {of}; {len(p)} comparisons, n={int(p['n'].max())}", psi))
        if not sources:
            sources = [("grid (no pilot)", x) for x in PSI_GRID]
        for src, psi in sources:
            pl = (plan_mcnemar(delta, psi, alpha, power, d.paper_n, d.test) if psi > 0
                  else {"n": None, "mde_paper": np.nan, "power_at_n": np.nan})
            rows.append({"design": d.name, "notebook": d.notebook, "test": d.test, "pilot ψ": round(psi, 4),
                         "pilot from": src,
                         "needed": pl["n"] if pl["n"] is not None else ("Δ > ψ: not reachable" if psi > 0 else "ψ = 0"),
                         "power at needed": round(pl["power_at_n"], 3) if np.isfinite(pl["power_at_n"]) else "",
                         "unit": d.unit, "paper n": d.paper_n, "MDE at paper n (pts)": _pts(pl["mde_paper"])})
            if margin:
                rows[-1][f"equivalence ±{margin:g} needs (Δ = 0)"] = (
                    equivalence.equivalence_n(psi, margin, alpha, power))
    return pd.DataFrame(rows)


def _estimable(pil: pd.DataFrame) -> pd.Series:
    """The pilot rows whose variances are numbers (two or more questions)."""
    return pil[["within", "var_a", "var_b"]].notna().all(axis=1)


def means_section(delta: float, alpha: float, power: float, pil: pd.DataFrame | None, *, between=None,
                  within=None, rho=None, k: int = 10, cost_ratio: float = 1.0) -> str:
    """The K-sample-means plan as text (pilot from the K > 1 rows of ``pil``, or the numbers given)."""
    if between is not None and within is not None:
        va = vb = between
        cov = (rho or 0.0) * between
        k0, src = k, "given"
    elif pil is not None and "within" in pil and (ok := _estimable(pil)).any():
        p = pil[ok]
        wts = p["n"].to_numpy(float)
        # the true-score variances: the question means' variance less their sampling noise within/K
        k0 = int(p["k"].median())
        noise = np.average(p["within"], weights=wts) / k0
        va = max(float(np.average(p["var_a"], weights=wts)) - noise, 0.0)
        vb = max(float(np.average(p["var_b"], weights=wts)) - noise, 0.0)
        # the two conditions' sampling noise is independent, so the covariance of the question means is
        # that of the true scores; clipped to what the (noise-corrected) variances allow
        cov = float(np.clip(np.average(p["cov_ab"].fillna(0), weights=wts), -math.sqrt(va * vb), math.sqrt(va * vb)))
        within = float(np.average(p["within"], weights=wts))
        src = f"the pilot's {len(p)} comparisons with K = {k0}"
    elif pil is not None and "within" in pil and pil["within"].notna().any():
        return ("K-sample means (Miller 2024): the pilot's comparisons rest on fewer than two questions each, too "
                "few for a variance across questions (a partial run); give --between and --within (and --rho).")
    else:
        return ("K-sample means (Miller 2024): no pilot (the store has no K > 1 answers with a gold answer); "
                "give --between and --within (and --rho).")
    between = (va + vb) / 2
    k_s = (math.ceil(math.sqrt(cost_ratio * within / between)) if between > 0 else None)
    ks = [1, k0, k, *([k_s] if k_s else [])]
    tab = plan_means(delta, va, vb, cov, within, ks, alpha, power).round({"omega2": 4})
    w_paper = testpower.omega2(va, vb, cov, within, within, 10)
    icc = between / (between + within) if between + within > 0 else float("nan")
    lines = [f"K-sample means (Miller 2024), pilot from {src}:",
             f"  variance across questions (true scores) {between:.4f}; mean within-question variance "
             f"{within:.4f} (ICC {icc:.2f}); paired covariance {cov:.4f}",
             (f"  suggested K = √({cost_ratio:g} · within / between) = {k_s} (past it more questions buy more "
              "than more samples; --cost-ratio: a question's cost in samples)" if k_s else
              "  no K is suggested: the pilot shows no variance across questions (between = 0), so more samples "
              "per question cannot be weighed against more questions"),
             tab.to_string(index=False),
             f"  MDE at the paper's 2,364 questions and K = 10 (seed 000): "
             f"{100 * testpower.mean_mde(2364, w_paper, alpha, power):.2f} pts"]
    return "\n".join(lines)


def plan_report(delta_pts: float, alpha: float = stats.ALPHA, power: float = stats.POWER,
                pil: pd.DataFrame | None = None, source: str = "", *, discordance: float | None = None,
                between: float | None = None, within: float | None = None, rho: float | None = None,
                k: int = 10, cost_ratio: float = 1.0, show_pilot: bool = False, margin: float | None = None) -> str:
    """The planner's text: the paired binary designs, then K-sample means;
    ``margin`` adds the questions equivalence within ±δ needs."""
    delta = delta_pts / 100.0
    head = f"Power plan: Δ = {delta_pts:g} points, two-sided α = {alpha:g}, power = {power:g}\n{source}\n"
    tab = binary_table(delta, alpha, power, pil, discordance, margin)
    parts = [head, "Paired binary designs (the McNemar test each notebook runs; power by exact enumeration; "
                   "MDE 'none': no effect reaches the power at that n):", tab.to_string(index=False), "",
             means_section(delta, alpha, power, pil, between=between, within=within, rho=rho, k=k,
                           cost_ratio=cost_ratio)]
    if show_pilot and pil is not None:
        parts += ["", "Pilot estimates:", pil.round(4).to_string(index=False)]
    return "\n".join(parts)


def report(args) -> str:
    """The planner's report for the parsed command line: the pilot read from a release,
    a store or a profile's store (else the numbers given), then :func:`plan_report`."""
    pil = None
    if args.released:
        frame, gold = released_frame(args.released)
        pil = pilot(frame, gold)
        src = (f"pilot: released answers '{args.released}' ({len(pil)} comparisons, gold answers for "
               f"{len(gold)} items)")
    elif args.store or args.profile:
        from medaudit import paths

        path = Path(args.store) if args.store else paths.outputs(args.profile, "data", "responses.sqlite",
                                                                  mkdir=False)
        gold = gold_from_profile(args.profile) if args.profile else {}
        pil = pilot(read_store(path), gold)
        src = f"pilot: {path} ({len(pil)} comparisons, gold answers for {len(gold)} items)"
    else:
        src = "pilot: the numbers given on the command line"
    return plan_report(args.delta, args.alpha, args.power, pil, src, discordance=args.discordance,
                       between=args.between, within=args.within, rho=args.rho, k=args.k,
                       cost_ratio=args.cost_ratio, show_pilot=args.show_pilot, margin=args.margin)


def pilot_from_questions(qt: pd.DataFrame, base: str = "base", prompt_format: str = "mcq") -> pd.DataFrame:
    """Pilot estimates (the columns of :func:`pilot`) from notebook 04's
    per-question table (:func:`medaudit.stats.uncertainty.questions`): ψ and ρ of
    the single-sample correctness against ``base``; with K > 1 the K-sample
    correctness p_i (the share of a question's samples on the gold letter),
    its within-question variance p_i(1 − p_i)·K/(K − 1) and the questions'
    variances and covariance."""
    rows = []
    units = [u for u in ("model", "prompt_format") if u in qt.columns]
    for key, g in qt.groupby(units, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        info = dict(zip(units, key))
        kq = g["n_samples"].astype(float)
        pk = [(p or {}).get(gd, 0.0) if isinstance(p, dict) else np.nan for p, gd in zip(g["p"], g["gold"])]
        g = g.assign(_p=pk, _w=np.where(kq > 1, np.asarray(pk) * (1 - np.asarray(pk)) * kq / (kq - 1), np.nan))
        single = g.pivot(index="item_id", columns="condition", values="single_correct")
        pmean = g.pivot(index="item_id", columns="condition", values="_p")
        wv = g.pivot(index="item_id", columns="condition", values="_w")
        if base not in single.columns:
            continue
        k = int(kq.median())
        for cond in single.columns:
            if cond == base:
                continue
            both = single[base].notna() & single[cond].notna()
            n = int(both.sum())
            if n == 0:
                continue
            e = stats.paired_delta(single.loc[both, base], single.loc[both, cond])
            row = {"model": info.get("model"), "prompt_format": info.get("prompt_format", prompt_format),
                   "comparison": "reference", "reference": base, "condition": cond, "n": n,
                   "psi_answer": np.nan,
                   "psi_correct": float((single.loc[both, base] != single.loc[both, cond]).mean()),
                   "rho": e["rho"], "k": k}
            if k > 1:
                ma, mb = pmean.loc[both, base], pmean.loc[both, cond]
                within = float(pd.concat([wv.loc[both, base], wv.loc[both, cond]]).mean())
                row.update(var_between=float((ma.var(ddof=1) + mb.var(ddof=1)) / 2 - within / k), within=within,
                           var_a=float(ma.var(ddof=1)), var_b=float(mb.var(ddof=1)),
                           cov_ab=float(np.cov(ma, mb, ddof=1)[0, 1]) if n > 1 else np.nan)
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=PILOT_COLUMNS)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of ``python -m medaudit.validation.power``: check the target
    difference, α, power and discordance, and print the plan (:func:`report`)."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.validation.power", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delta", type=float, required=True, help="target difference in points (5 = 5 pp)")
    ap.add_argument("--alpha", type=float, default=stats.ALPHA, help="two-sided level (default 0.05)")
    ap.add_argument("--power", type=float, default=stats.POWER, help="target power (default 0.8)")
    src = ap.add_argument_group("pilot from a store")
    src.add_argument("--profile", help="read outputs/<profile>/data/responses.sqlite and the gold answers there")
    src.add_argument("--store", help="a response store (sqlite) to read instead")
    src.add_argument("--released", help="a shipped release of real models' answers (params/released.yaml: "
                                        "fairmedqa_amqa, cultural_cues_hive)")
    src.add_argument("--show-pilot", action="store_true", help="print the pilot estimates per comparison")
    num = ap.add_argument_group("pilot given as numbers")
    num.add_argument("--discordance", type=float, help="discordant share ψ of paired binary outcomes")
    num.add_argument("--between", type=float, help="variance of the questions' true scores")
    num.add_argument("--within", type=float, help="mean within-question variance of one sample")
    num.add_argument("--rho", type=float, help="correlation of the paired true scores (default 0)")
    ap.add_argument("--margin", type=float, default=None,
                    help="also the questions that show equivalence within ±MARGIN points at each ψ (Δ = 0)")
    ap.add_argument("--k", type=int, default=10, help="samples per question to plan for (default 10)")
    ap.add_argument("--cost-ratio", type=float, default=1.0,
                    help="a new question's cost in samples, for the suggested K (default 1)")
    args = ap.parse_args(argv)
    if args.delta <= 0 or args.delta >= 100:
        ap.error("--delta must be in (0, 100) points")
    if not (0 < args.alpha < 1 and 0 < args.power < 1):
        ap.error("--alpha and --power must be in (0, 1)")
    if args.discordance is not None and not 0 < args.discordance <= 1:
        ap.error("--discordance must be in (0, 1]")
    try:
        print(report(args))
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
