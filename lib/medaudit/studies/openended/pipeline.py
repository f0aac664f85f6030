"""The open-ended case study as notebook 05 runs it: one call per stage, and its tables.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.llm import judging
from medaudit.studies import agents
from medaudit.prep import text as _text
from medaudit.stats.agreement import agreement
from medaudit.llm import GenParams, ResponseStore, runs
from .reformulation import CORRECT, INCORRECT, METHODS
from .answers import plan_answers
from .judge import judge_messages
from .stages import answers_frame, embedding_run, entailment_run, judge_run, llm_clusters


# ==========================================================================
# the notebook's stages, one call each


def reformulation_table(items: pd.DataFrame, reformulated: pd.DataFrame) -> pd.DataFrame:
    """Per item: the original question sentence, the open form used (or the
    last LLM attempt's, marked not ok), where it came from (llm | rules |
    none), the LLM attempts and the last attempt's problems."""
    r = reformulated.set_index("item_id")
    ids = list(items["item_id"])
    return pd.DataFrame({"item_id": ids,
                         "question sentence": [_text.final_sentence(q) for q in items["question"]],
                         "open-ended": [r.loc[i, "text"] for i in ids], "ok": [bool(r.loc[i, "ok"]) for i in ids],
                         "source": [r.loc[i, "source"] for i in ids],
                         "LLM attempts": [int(r.loc[i, "attempts"]) for i in ids],
                         "problems": ["; ".join(r.loc[i, "problems"]) for i in ids]})


def collect_answers(models: Sequence[dict], store: ResponseStore, open_v: pd.DataFrame, *, k: int, seed: int,
                    gen: GenParams, prompt: str = "neutral") -> pd.DataFrame:
    """K free-text answers per question from every model spec ({name,
    backend, model, options}); drawn where not yet stored."""
    from medaudit.llm import backend_for

    out = []
    for m in models:
        be = backend_for(m)
        samples = plan_answers(open_v, backend=be, k=k, seed=seed, gen=gen, prompt=prompt)
        runs.run(be, store, samples, model=m["name"])
        out.append(answers_frame(store, samples, open_v, m["name"]))
    return pd.concat(out, ignore_index=True)


def cluster_all(methods: Sequence[str], answers: pd.DataFrame, *, backend, store: ResponseStore, model: str,
                seed: int, gen: GenParams, max_attempts: int, threshold: float
                ) -> tuple[dict[str, pd.DataFrame], agents.AgentRun | None]:
    """Every method of ``methods`` on the same answers: {method: clusters},
    and the LLM clustering's agent run (None when ``llm`` is not listed)."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown clustering method(s) {sorted(unknown)}; have {list(METHODS)}")
    out, run = {}, None
    if answers.empty:      # nothing to cluster (every reformulation failed): empty tables, not an error
        return {m: pd.DataFrame(columns=["model", "item_id", "condition", "labels", "status"]) for m in methods}, None
    for m in methods:
        if m == "llm":
            out[m], run = llm_clusters(backend, store, answers, model=model, seed=seed, gen=gen,
                                       max_attempts=max_attempts)
        elif m == "entailment":
            out[m] = entailment_run(backend, store, answers, model=model, seed=seed)
        else:
            out[m] = embedding_run(answers, threshold)
    return out, run


def judge_all(clusters: dict[str, pd.DataFrame], answers: pd.DataFrame, ground_truth: pd.Series, *, backend,
              store: ResponseStore, model: str, seed: int, context: str = "question") -> dict[str, pd.DataFrame]:
    """:func:`judge_run` for every method's clusters."""
    return {m: judge_run(backend, store, answers, cl, ground_truth, model=model, seed=seed, context=context)
            for m, cl in clusters.items()}


def judge_controls(backend, store: ResponseStore, open_v: pd.DataFrame, items: pd.DataFrame, *, model: str,
                   seed: int, max_tokens: int = 8, context: str = "question") -> pd.DataFrame:
    """A known-label check of the judge, needing no human: per item, the
    ground-truth option text (expected CORRECT) and one other option drawn
    at random (expected INCORRECT) are judged as answers to the Base open
    question. One row per control: item_id, kind, answer, expected,
    verdict, judge_status."""
    rng = np.random.default_rng(seed)
    base = open_v[open_v["condition"] == "base"].set_index("item_id")["question"]
    rows = []
    for it in items[items["item_id"].isin(base.index)].itertuples(index=False):
        wrong = [v for k, v in sorted(it.options.items()) if v != it.answer]
        rows += [{"item_id": it.item_id, "kind": "ground truth", "answer": it.answer, "expected": CORRECT},
                 {"item_id": it.item_id, "kind": "other option", "answer": wrong[rng.integers(len(wrong))],
                  "expected": INCORRECT}]
    c = pd.DataFrame(rows, columns=["item_id", "kind", "answer", "expected"])
    if c.empty:
        return c.assign(verdict=None, judge_status=None)
    truth = items.set_index("item_id")["answer"]
    jobs = c.assign(condition="control: " + c["kind"], k=0,
                    messages=[judge_messages(base[i], truth[i], a, context)
                              for i, a in zip(c["item_id"], c["answer"])])
    got = judging.ask(backend, store, jobs[["item_id", "condition", "k", "messages"]], model=model,
                    prompt_format="open_judge", seed=seed, max_tokens=max_tokens)
    return c.assign(verdict=got["verdict"].to_numpy(), judge_status=got["status"].to_numpy())


def control_table(controls: pd.DataFrame) -> pd.DataFrame:
    """The judge on its controls: per kind and overall, verdicts parsed,
    the share as expected, and Cohen's kappa overall."""
    rows = []
    for kind, g in [*controls.groupby("kind", sort=False), ("all", controls)]:
        r = agreement(g["expected"], g["verdict"])
        rows.append({"controls": kind, "n": len(g), "parsed": r["n"], "as expected (%)": 100 * r["agreement"],
                     "kappa": r["kappa"] if kind == "all" else np.nan})
    return pd.DataFrame(rows)


def table2(qt: pd.DataFrame, conditions: Sequence[str], *, n_boot: int, seed: int, profile: str,
           base: str = "base", prefix: str = "05_table2", margin: float | None = None
           ) -> tuple[pd.DataFrame | None, dict]:
    """Seed 000 Table 2 from one method's scored questions: the paired tests
    of every condition against ``base`` (and +homo against +hetero) and
    the three panels, saved. ``(None, {})`` when no question is scored both
    at ``base`` and under another condition (nothing to pair). ``margin``: δ
    of the verdicts, in points (the profile's ``calibration_margin``, as 04's;
    None: :data:`medaudit.studies.calibration.MARGIN`)."""
    from medaudit.studies import calibration

    scored = qt.dropna(subset=["confidence", "majority_correct"])
    at_base = set(scored.loc[scored["condition"] == base, "item_id"])
    if not (scored["condition"].ne(base) & scored["item_id"].isin(at_base)).any():
        return None, {}
    res, pair_res = calibration.compare(scored, base, list(conditions), n_boot, seed, pairs=[("+hetero", "+homo")],
                                        margin=calibration.MARGIN if margin is None else margin)
    return res, calibration.seed_tables(res, pair_res, calibration.TABLE1, profile, prefix)


def judge_parse_table(labels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per method: judged samples (one per cluster) and the parse outcome
    of their verdicts."""
    rows = []
    for m, lab in labels.items():
        j = lab[lab["sample"] == lab["judged_sample"]]
        rows.append({"method": m, "verdicts": len(j), **j["judge_status"].value_counts().to_dict()})
    return pd.DataFrame(rows).fillna(0)
