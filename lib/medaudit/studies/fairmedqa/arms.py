"""Mitigation arms: a strategy's answers beside the same model's plain ones.

Not a section of seed 004, whose Conclusion leaves "bias mitigation" to
future research: the project's prompting strategies (``params/mitigations.yaml``,
:mod:`medaudit.llm.mitigations`) run on FairMedQA's texts and measured with the
seed's own metrics (§4.1: accuracy, CFR, AD per counterfactual pair), each
arm against its model's plain prompt; an arm whose letters look like an
extraction artefact is flagged (:func:`arm_artefacts`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.stats import equivalence as _equivalence
from medaudit.studies.fairmedqa.answers import ANSWER_FORMAT, BENCHMARK_FORMATS, stored_answers
from medaudit.studies.fairmedqa.config import ORIGINAL, FairMedQAConfig
from medaudit.studies.fairmedqa.metrics import MARGIN, accuracy_table, between_models, pair_table
from medaudit.studies.fairmedqa.versions import version_table


ARTEFACT_MARK = "extraction artefact suspected"
ARTEFACT_UNDECIDED = "extraction artefact: cannot tell, n too small"


def arm_label(model: str, strategy: str, flagged: bool | str = False) -> str:
    """The row label of ``model``'s answers under ``strategy`` in every table:
    ``flagged`` True adds :data:`ARTEFACT_MARK`, a text adds that text."""
    mark = ARTEFACT_MARK if flagged is True else (flagged or "")
    return f"{model} · {strategy}" + (f" ({mark})" if mark else "")


def artefact_verdict(check: dict, alpha: float) -> tuple[str, float]:
    """(verdict, smallest p) of a :func:`medaudit.llm.mitigations.letter_artefact`
    result: "suspected" (``flag``: both tests reject at ``alpha`` and the
    arm answers A more often than the plain answers and the gold letters),
    "not suspected: other letters …" (both reject, but the shift is not
    toward A: not the article-"a" artefact), "cannot
    tell: n too small (...)" when the ``compared`` vignettes cannot give a
    p below ``alpha`` at all, else "not suspected" (but see the end). The Stuart–Maxwell statistic
    (a score test, like McNemar's) cannot exceed the number of pairs
    compared, and it has at least 1 degree of freedom, so no p falls below
    P(χ²₁ ≥ compared) (``smallest p``): 0.025 at 5 vignettes, so with
    ``alpha`` 0.01 six vignettes or fewer can never be suspected and a
    "not suspected" there would be read as a clean arm. A test
    without p (:func:`medaudit.stats.paired.stuart_maxwell` returns NaN for a
    singular table) decides nothing: "not suspected" needs a test that
    keeps the arm, else "cannot tell"."""
    from scipy.stats import chi2

    n = int(check["compared"])
    smallest = float(chi2.sf(n, 1)) if n else 1.0
    if check["flag"]:
        return "suspected", smallest
    if str(check.get("shift", "")).startswith("other"):      # both tests reject, but not toward A
        return f"not suspected: {check['shift']}", smallest
    if smallest >= alpha:
        return (f"cannot tell: n too small ({n} vignettes compared; the smallest p they can give is "
                f"{smallest:.2g}, not below alpha {alpha:g})"), smallest
    ps = [float(check[f"p vs {w}"]) for w in ("reference", "gold")]
    if any(np.isfinite(p) and p >= alpha for p in ps):     # one test keeps the arm: the flag needs both
        return "not suspected", smallest
    return "cannot tell: a test has no p (its table cannot be inverted)", smallest


def arm_answers(frame: pd.DataFrame, vig: pd.DataFrame, config: FairMedQAConfig, strategies: Sequence[str],
                base_formats: Sequence[str] | None = None, prefer_keys: Sequence[str] = (),
                models: Sequence[str] | None = None) -> pd.DataFrame:
    """The stored answers of the mitigation ``strategies`` (stored under
    ``<format>+<strategy>``: :func:`medaudit.llm.mitigations.format_name`) to
    these vignettes, as :func:`~medaudit.studies.fairmedqa.answers.stored_answers` reads the plain ones, each
    row labelled :func:`arm_label` with its ``strategy`` and the model it
    is an arm of (``arm_of``). ``base_formats``: the plain formats the arms
    are of (default: :data:`~medaudit.studies.fairmedqa.answers.ANSWER_FORMAT` and
    every prompt of the published benchmark's releases,
    :data:`~medaudit.studies.fairmedqa.answers.BENCHMARK_FORMATS`)."""
    from medaudit.llm import mitigations

    base_formats = base_formats or (ANSWER_FORMAT, *BENCHMARK_FORMATS)
    out = []
    for s in strategies:
        a = stored_answers(frame, vig, config, prefer_keys, prompt_formats=[mitigations.format_name(b, s)
                                                                            for b in base_formats], models=models)
        out.append(a.assign(strategy=s, arm_of=a["model"], model=[arm_label(m, s) for m in a["model"]]))
    cols = list(frame.columns) + ["strategy", "arm_of"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=cols)


def arm_artefacts(plain: pd.DataFrame, arms: pd.DataFrame, vig: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per arm: :func:`medaudit.llm.mitigations.letter_artefact` on the original
    vignettes (the arm's letters against the same model's plain letters and
    the gold letters), one row each with the counts, both tests and
    ``flag``, and :func:`artefact_verdict`'s ``verdict`` and ``smallest p``
    (an arm too small for the test is "cannot tell", never "not
    suspected")."""
    from medaudit.llm import mitigations

    gold = vig.set_index("item_id")["answer_idx"]
    rows = []
    for (model, s), g in arms.groupby(["arm_of", "strategy"], sort=False):
        arm = g[g["condition"] == ORIGINAL].set_index("item_id")["parsed_answer"]
        ref = plain[(plain["model"] == model) & (plain["condition"] == ORIGINAL)].set_index("item_id")["parsed_answer"]
        check = mitigations.letter_artefact(arm, ref, gold, alpha=alpha)
        verdict, smallest = artefact_verdict(check, alpha)
        rows.append({"model": model, "strategy": s, **check, "verdict": verdict, "smallest p": smallest})
    return pd.DataFrame(rows)


def flag_arms(arms: pd.DataFrame, artefacts: pd.DataFrame) -> pd.DataFrame:
    """The arms relabelled where :func:`arm_artefacts` flags them
    (:data:`ARTEFACT_MARK`) or cannot tell (:data:`ARTEFACT_UNDECIDED`)."""
    marks = {}
    for r in artefacts.to_dict("records"):
        verdict = str(r.get("verdict", ""))
        marks[(r["model"], r["strategy"])] = (True if r["flag"] else
                                              ARTEFACT_UNDECIDED if verdict.startswith("cannot tell") else False)
    return arms.assign(model=[arm_label(m, s, marks.get((m, s), False))
                              for m, s in zip(arms["arm_of"], arms["strategy"])])


def arm_tables(qt: pd.DataFrame, pairs_: pd.DataFrame, arms: pd.DataFrame, config: FairMedQAConfig,
               mcnemar: str = "exact", unparsed: str = "drop",
               margin: float = MARGIN) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each arm against its model's plain answers on the same vignettes:
    (bias, accuracy). ``bias``: per attribute, ΔAcc, ΔCFR and ΔAD in points
    (:func:`~medaudit.studies.fairmedqa.versions.version_table` with the plain answers as old and the arm as
    new: the arm's change in the bias measures), and the change in the
    pair's signed gap with its clustered SE, MDE, p, n, interval and verdict
    at ``margin`` (:func:`gap_change`); ``accuracy``: per text,
    both accuracies, Δ, McNemar and its MDE (:func:`~medaudit.studies.fairmedqa.metrics.between_models`), with
    p Holm-adjusted across the model's strategies per text (``p_holm``).
    ``qt``/``pairs_`` hold the plain and the arm rows (arm rows labelled by
    :func:`flag_arms`). A partial arm (a file answering fewer vignettes) is
    paired only on the vignettes both it and the plain answers have: where
    they differ, both sides' pair rows are recomputed on those vignettes
    (:func:`_shared_pairs`), so ΔAcc, ΔCFR, ΔAD and each side's N
    compare the same vignettes."""
    from medaudit.stats.paired import holm

    pairs_all = pairs_
    labels = arms[["model", "arm_of", "strategy"]].drop_duplicates()
    pair_of = {tuple(p): config.groups[p[0]]["attribute"] for p in config.pairs}
    bias, acc = [], []
    for r in labels.itertuples(index=False):
        pairs_ = _shared_pairs(qt, pairs_all, r.arm_of, r.model, mcnemar, margin)
        b = version_table(pairs_, r.arm_of, r.model, config)
        # each side's N: the vignettes answered under both members of the attribute's pair
        n = {(m, pair_of[(a, bb)]): int(x)
             for m, a, bb, x in zip(pairs_["model"], pairs_["a"], pairs_["b"], pairs_["n"])
             if m in (r.arm_of, r.model) and (a, bb) in pair_of}
        b["n plain"] = [n.get((r.arm_of, at)) for at in b["attribute"]]
        b["n arm"] = [n.get((r.model, at)) for at in b["attribute"]]
        b = b.merge(gap_change(qt, r.arm_of, r.model, config, margin), on="attribute", how="left")
        bias.append(b.assign(strategy=r.strategy, **{"tokens per answer": arm_tokens(arms[arms["model"] == r.model])}))
        sub_qt = qt[qt["model"].isin([r.arm_of, r.model])]
        a = between_models(sub_qt, r.arm_of, config.conditions(), mcnemar=mcnemar, unparsed=unparsed, margin=margin)
        acc.append(a.assign(strategy=r.strategy))
    bias = pd.concat(bias, ignore_index=True) if bias else pd.DataFrame()
    acc = pd.concat(acc, ignore_index=True) if acc else pd.DataFrame()
    if len(acc):
        acc["p_holm"] = np.nan
        for _, g in acc.groupby(["reference", "condition"], sort=False):
            ok = g["mcnemar_p"].notna()
            if ok.any():
                acc.loc[g.index[ok], "p_holm"] = holm(g.loc[ok, "mcnemar_p"])
    return bias, acc


def _shared_pairs(qt: pd.DataFrame, pairs_: pd.DataFrame, plain: str, arm: str, mcnemar: str = "exact",
                  margin: float = MARGIN) -> pd.DataFrame:
    """``pairs_`` (:func:`~medaudit.studies.fairmedqa.metrics.pair_table` rows) with the rows of ``plain`` and
    ``arm`` recomputed on the vignettes both answered (any text), with the
    counting and unparsed rules ``pairs_`` was made with; ``pairs_`` itself
    when both answered the same vignettes."""
    own = {m: set(qt.loc[qt["model"] == m, "item_id"]) for m in (plain, arm)}
    if own[plain] == own[arm]:
        return pairs_
    mine = pairs_[pairs_["model"].isin([plain, arm])]
    if not len(mine):
        return pairs_
    shared = own[plain] & own[arm]
    sub = qt[qt["model"].isin([plain, arm]) & qt["item_id"].isin(shared)]
    pairs = list(dict.fromkeys(zip(mine["a"], mine["b"])))
    again = pair_table(sub, pairs, units=("model",), counting=mine["counting"].iloc[0], mcnemar=mcnemar,
                       unparsed=mine["unparsed"].iloc[0], margin=margin)
    return pd.concat([pairs_[~pairs_["model"].isin([plain, arm])], again], ignore_index=True)


def gap_change(qt: pd.DataFrame, plain: str, arm: str, config: FairMedQAConfig,
               margin: float = MARGIN) -> pd.DataFrame:
    """How much an arm moves each counterfactual pair's accuracy gap, with
    its error: per attribute pair (a, b), on the vignettes answered (parsed)
    under a and b by both the plain model and the arm, the per-vignette
    change d = (correct_a − correct_b)[arm] − (correct_a − correct_b)[plain];
    ``Δgap`` = 100 · mean(d) (points; the signed gap a − b, so that a gap
    that flips side is not read as a shrinking |AD|), ``Δgap SE`` its
    standard error clustered by vignette (one d per vignette: sd/√n),
    ``Δgap MDE`` the smallest |Δgap| these n vignettes detect (t on n − 1
    degrees of freedom, α 0.05, power 0.8; :func:`medaudit.stats.testpower.
    mde_from_se`), ``Δgap p`` the exact sign-flip test, ``Δgap n``, the
    covering interval ``Δgap lo`` / ``Δgap hi`` (a change of gaps lies in
    [−2, 2]) and ``Δgap verdict`` at ``margin`` points
    (:func:`medaudit.stats.equivalence.delta_columns`)."""
    g = qt[qt["model"].isin([plain, arm]) & qt["parsed_answer"].notna()]
    cor = g.pivot_table(index="item_id", columns=["model", "condition"], values="correct", aggfunc="first")
    rows = []
    for a, b in config.pairs:
        cols = [(m, c) for m in (arm, plain) for c in (a, b)]
        if not all(c in cor.columns for c in cols):
            continue
        x = cor[cols].dropna()
        # each side's gap per vignette; the change is their paired difference, clustered by vignette
        rows.append({"attribute": config.groups[a]["attribute"],
                     **_equivalence.delta_columns((x[cols[2]] - x[cols[3]]).to_numpy(),
                                                  (x[cols[0]] - x[cols[1]]).to_numpy(), x.index.to_numpy(), "Δgap",
                                                  margin, bound=2.0)})
    return pd.DataFrame(rows, columns=["attribute", *_equivalence.delta_names("Δgap")])


def with_arm_counts(acc: pd.DataFrame, aqt: pd.DataFrame | None, arms: pd.DataFrame, config: FairMedQAConfig,
                    unparsed: str = "drop") -> pd.DataFrame:
    """``acc`` (the plain answers' :func:`~medaudit.studies.fairmedqa.metrics.accuracy_table`, strategy ``none``)
    with each arm's own accuracy counts on its rows of ``aqt``, under the
    model it is an arm of and its ``strategy``: what
    :func:`~medaudit.studies.fairmedqa.answers.released_check` sets beside the
    authors' Summary of every model and arm."""
    out = [acc.assign(strategy="none")]
    if aqt is not None and len(arms):
        a = accuracy_table(aqt[aqt["model"].isin(arms["model"])], conditions=config.conditions(), unparsed=unparsed)
        of = arms.drop_duplicates("model").set_index("model")
        out.append(a.assign(strategy=a["model"].map(of["strategy"]), model=a["model"].map(of["arm_of"])))
    return pd.concat(out, ignore_index=True)


def arm_tokens(rows: pd.DataFrame) -> float:
    """An arm's cost: its mean output tokens per stored answer (``tokens_out``);
    NaN where no answer has a count (a release keeps only the letters)."""
    t = pd.to_numeric(rows["tokens_out"], errors="coerce") if "tokens_out" in rows else pd.Series(dtype=float)
    return float(t.mean()) if t.notna().any() else np.nan
