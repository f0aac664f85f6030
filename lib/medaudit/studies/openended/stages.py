"""The open-ended case study's LLM stages run through the response store (answers, LLM clusters,
entailment, embeddings, the judge), and the question table with the multiple-choice one's columns.
"""
from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from medaudit.llm import judging
from medaudit.studies import agents
from medaudit import parse
from medaudit.prep import text as _text
from medaudit.llm import GenParams, ResponseStore, runs
from .reformulation import CORRECT, INCORRECT
from .answers import answer_text
from .clusters import (cluster_messages, cluster_problems, confidence, embedding_clusters, entailment_clusters,
                       entailment_messages, labels_from_clusters, read_clusters, repair_clusters)
from .judge import judge_messages, judge_picks


# ==========================================================================
# running the LLM stages through the store


def answers_frame(store: ResponseStore, samples: list[runs.Sample], open_v: pd.DataFrame, model: str
                  ) -> pd.DataFrame:
    """The stored answers of ``samples``: model, item_id, condition, sample,
    key, answer (:func:`answer_text`), question (the open form)."""
    got = store.by_keys(s.key for s in samples).set_index("key")
    q = open_v.set_index(["item_id", "condition"])["question"]
    rows = [{"model": model, "item_id": s.item_id, "condition": s.condition, "sample": s.k, "key": s.key,
             "answer": answer_text(got.loc[s.key, "response_text"]), "question": q[(s.item_id, s.condition)]}
            for s in samples if s.key in got.index]
    return pd.DataFrame(rows, columns=["model", "item_id", "condition", "sample", "key", "answer", "question"])


def _groups(answers: pd.DataFrame):
    return answers.sort_values("sample").groupby(["model", "item_id", "condition"], sort=False)


def llm_clusters(backend, store: ResponseStore, answers: pd.DataFrame, *, model: str, seed: int, gen: GenParams,
                 max_attempts: int = 2) -> tuple[pd.DataFrame, agents.AgentRun]:
    """B.5 clustering of every question's samples (``answers`` from
    :func:`answers_frame`). Returns (one row per question: model, item_id,
    condition, labels, status ok | repaired | failed, attempts, repairs,
    truncated_attempts: its replies that ended at the token limit,
    truncated: its last reply did) and the agent run with every attempt
    (``attempts`` gains truncated: its ``finish_reason`` is "length").
    Invalid replies are sent back with their problems (up to
    ``max_attempts``), then repaired; a reply cut by ``gen.max_tokens`` is
    not valid JSON, so its question fails unless a later attempt fits."""
    jobs = []
    for (m, i, c), g in _groups(answers):
        jobs.append({"item_id": i, "condition": f"{m} | {c}", "unit": (m, i, c), "n": len(g),
                     "messages": cluster_messages(g["question"].iloc[0], list(g["answer"]))})
    jobs = pd.DataFrame(jobs)
    run = agents.run(backend, store, jobs, lambda job, t: cluster_problems(json.loads(t), job["n"]),
                     model=model, seed=seed, gen=gen, prompt_format="open_cluster", max_attempts=max_attempts,
                     revise=True, read=lambda raw: json.dumps(read_clusters(raw)))
    res = run.results.set_index(["item_id", "condition"])
    run.attempts["truncated"] = run.attempts["finish_reason"].eq("length")   # replies cut by the token limit
    by_job = run.attempts.groupby(["item_id", "condition"], sort=False)
    cut = by_job["truncated"].sum()
    last_cut = run.attempts.sort_values("attempt").groupby(["item_id", "condition"], sort=False)["truncated"].last()
    rows = []
    for j in jobs.itertuples(index=False):
        r = res.loc[(j.item_id, j.condition)]
        labels, status, repairs = None, "failed", []
        if r["ok"]:
            labels, status = labels_from_clusters(json.loads(r["text"]), j.n), "ok"
        elif not any(p.startswith("unreadable") for p in r["problems"]):
            labels, repairs = repair_clusters(json.loads(r["text"]), j.n)
            status = "repaired" if labels is not None else "failed"
        m, i, c = j.unit
        rows.append({"model": m, "item_id": i, "condition": c, "labels": labels, "status": status,
                     "attempts": int(r["attempts"]), "repairs": repairs,
                     "truncated_attempts": int(cut[(j.item_id, j.condition)]),
                     "truncated": bool(last_cut[(j.item_id, j.condition)])})
    return pd.DataFrame(rows), run


def entailment_run(backend, store: ResponseStore, answers: pd.DataFrame, *, model: str, seed: int,
                   max_tokens: int = 8) -> pd.DataFrame:
    """Bidirectional-entailment clusters of every question's samples, the
    entailment judge (:func:`medaudit.llm.judging.ask`, format ``open_entail``)
    answering greedily. One row per question: model, item_id, condition,
    labels, calls, unparsed (replies with no verdict, counted as no
    entailment), truncated (replies that ended at the token limit),
    unparsed_truncated (those of them with no verdict), status ok | failed
    (a reply missing from the store)."""
    rows = []
    for (m, i, c), g in _groups(answers):
        texts, question, n = list(g["answer"]), _text.final_sentence(g["question"].iloc[0]), len(g)
        seen: dict = {}

        def entails(a: int, b: int) -> bool | None:
            if (a, b) not in seen:
                job = pd.DataFrame([{"item_id": i, "condition": f"{m} | {c} | {a}>{b}", "k": 0,
                                     "messages": entailment_messages(question, texts[a], texts[b])}])
                seen[(a, b)] = judging.ask(backend, store, job, model=model, prompt_format="open_entail", seed=seed,
                                           max_tokens=max_tokens).iloc[0].to_dict()
            return seen[(a, b)]["verdict"] == "entailment"

        labels = entailment_clusters(n, entails)
        status = [v["status"] for v in seen.values()]
        missing = status.count(parse.MISSING)
        cut = [v["finish_reason"] == "length" for v in seen.values()]
        rows.append({"model": m, "item_id": i, "condition": c, "labels": labels if not missing else None,
                     "calls": len(seen), "unparsed": len(status) - missing - status.count(parse.OK),
                     "truncated": sum(cut),
                     "unparsed_truncated": sum(x and st not in (parse.OK, parse.MISSING) for x, st in zip(cut, status)),
                     "status": "ok" if not missing else "failed"})
    return pd.DataFrame(rows)


def embedding_run(answers: pd.DataFrame, threshold: float,
                  embed: Callable[[Sequence[str]], np.ndarray] | None = None) -> pd.DataFrame:
    """Embedding clusters of every question's samples (``embed`` defaults
    to all-MiniLM-L6-v2). One row per question: model, item_id, condition,
    labels, status."""
    from medaudit.llm.embeddings import minilm_embed

    embed = embed or minilm_embed
    a = answers.sort_values(["model", "item_id", "condition", "sample"]).reset_index(drop=True)
    emb = embed(list(a["answer"])) if len(a) else np.zeros((0, 384))
    rows = []
    for (m, i, c), g in a.groupby(["model", "item_id", "condition"], sort=False):
        rows.append({"model": m, "item_id": i, "condition": c, "labels": embedding_clusters(emb[g.index], threshold),
                     "status": "ok"})
    return pd.DataFrame(rows)


def judge_run(backend, store: ResponseStore, answers: pd.DataFrame, clusters: pd.DataFrame,
              ground_truth: pd.Series, *, model: str, seed: int, max_tokens: int = 8,
              context: str = "question") -> pd.DataFrame:
    """B.6 (:func:`medaudit.llm.judging.ask`, format ``open_judge``) on one random
    sample per cluster of every clustered question (``clusters``: one
    method's rows, with labels). The verdict goes to every sample of the
    cluster. Returns one row per sample: model, item_id, condition, sample,
    cluster, judged_sample, verdict (CORRECT | INCORRECT | None),
    judge_status. A judge request is named by its question and sample, so a
    sample judged for another method is served from the store; it carries
    the judged answer's key, so an imported verdict on that answer serves
    it too. ``context``: what the judge sees of the question
    (:func:`judge_messages`)."""
    rng = np.random.default_rng(seed)
    by_q = {k: g.sort_values("sample") for k, g in _groups(answers)}
    picks, jobs = [], []
    for r in clusters.itertuples(index=False):
        if r.labels is None:
            continue
        g = by_q[(r.model, r.item_id, r.condition)]
        for c, s in judge_picks(r.labels, rng).items():
            row = g.iloc[s]
            picks.append((r.model, r.item_id, r.condition, c, int(row["sample"])))
            jobs.append({"item_id": r.item_id, "condition": f"{r.model} | {r.condition}", "k": int(row["sample"]),
                         "judged_key": row.get("key"),
                         "messages": judge_messages(row["question"], ground_truth[r.item_id], row["answer"],
                                                    context)})
    got = (judging.ask(backend, store, pd.DataFrame(jobs), model=model, prompt_format="open_judge", seed=seed,
                     max_tokens=max_tokens) if jobs else None)
    if got is not None and len(got) != len(jobs):
        raise ValueError("several judges' verdicts are imported for the same answers; the B.6 judge takes one "
                         "(import each judge's verdicts into a store of its own)")
    verdict = {p[:4]: (p[4], v, st) for p, v, st in
               zip(picks, *(([], []) if got is None else (got["verdict"], got["status"])))}
    rows = []
    for r in clusters.itertuples(index=False):
        if r.labels is None:
            continue
        g = by_q[(r.model, r.item_id, r.condition)]
        for s, c in zip(g["sample"], r.labels):
            judged, v, st = verdict[(r.model, r.item_id, r.condition, int(c))]
            rows.append({"model": r.model, "item_id": r.item_id, "condition": r.condition, "sample": int(s),
                         "cluster": int(c), "judged_sample": judged, "verdict": v, "judge_status": st})
    return pd.DataFrame(rows, columns=["model", "item_id", "condition", "sample", "cluster", "judged_sample",
                                       "verdict", "judge_status"])


def questions(clusters: pd.DataFrame, labels: pd.DataFrame, method: str) -> pd.DataFrame:
    """One row per question (model, method, condition, item_id): n_samples,
    n_clusters, confidence (:func:`confidence`), majority_correct (the
    verdict on the largest cluster; ties go to the cluster that appears
    first), single_correct (the verdict on sample 0's cluster), 1.0 / 0.0,
    NaN where that cluster has no verdict or the question was not
    clustered."""
    v = labels.set_index(["model", "item_id", "condition", "cluster"])["verdict"]
    v = v[~v.index.duplicated()]
    rows = []
    for r in clusters.itertuples(index=False):
        row = {"model": r.model, "method": method, "prompt_format": "open", "condition": r.condition,
               "item_id": r.item_id, "n_samples": np.nan, "n_clusters": np.nan, "confidence": np.nan,
               "majority_correct": np.nan, "single_correct": np.nan}
        if r.labels is not None:
            lab = np.asarray(r.labels)
            counts = np.bincount(lab)
            score = {CORRECT: 1.0, INCORRECT: 0.0}

            def verdict_of(c):
                return score.get(v.get((r.model, r.item_id, r.condition, int(c))), np.nan)

            row.update(n_samples=len(lab), n_clusters=len(counts), confidence=confidence(lab),
                       majority_correct=verdict_of(int(np.argmax(counts))), single_correct=verdict_of(lab[0]))
        rows.append(row)
    return pd.DataFrame(rows)
