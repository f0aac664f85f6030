"""The open-ended case study (seed 000 §4, appendices B.4–B.6).

1. **Reformulation** (B.4, verbatim): an LLM rewrites each item's final
   multiple-choice question as one open-ended sentence. The open variant of
   every condition is its vignette with the question sentence replaced, so
   the vignette (and the identity sentence of +hetero / +homo) cannot
   change. Checks (:func:`reformulation_problems`): one sentence, a
   question, no option text, no number of the vignette.
2. **Free-text answers**: K samples per item and condition through the
   response store (``prompt_format="open"``).
3. **Semantic clusters**, three interchangeable methods, each returning one
   label per sample (0..n−1, in order of first appearance):

   * ``llm``: the B.5 prompt, the JSON checked strictly
     (:func:`cluster_problems`: every sample index exactly once, ids
     0..n−1 without gaps); an invalid reply is retried with the problems
     listed, and after the last attempt a reply that parsed is *repaired*
     (:func:`repair_clusters`: missing samples become their own clusters,
     repeats keep their first cluster, ids renumbered) and counted as such.
     A reply cut by the token limit (``finish_reason`` "length") cannot
     parse and leaves its question unscored; such replies are counted apart
     (:func:`problem_counts`, :func:`method_table`), and the limit is sized
     to fit the longest reply the format allows for K answers
     (:func:`cluster_token_budget`);
   * ``entailment``: bidirectional entailment with an LLM as the judge
     (Kuhn et al. 2023; Farquhar et al. 2024): a sample joins the first
     cluster whose first member it entails and is entailed by;
   * ``embedding``: all-MiniLM-L6-v2 sentence embeddings, average-linkage
     clusters cut at a cosine distance threshold.

   Semantic entropy is the entropy of the cluster frequencies; confidence
   is 1 − entropy / log K (:func:`confidence`), as seed 000 normalises the
   option entropy.
4. **The judge** (B.6): one sample per cluster, drawn with a seeded
   generator, is judged CORRECT / INCORRECT against the multiple-choice
   answer text; the verdict is given to the whole cluster. The judge's
   instructions are B.6 verbatim, to its last sentence ("… should be
   considered correct as long as it is not contradicted.") and its output
   line ("Output only one label (no additional explanation): CORRECT or
   INCORRECT"); the paper typesets its Table 9 inside that sentence, which
   is why it can look cut off. They are the system message; the case
   (question, ground truth, answer; ``openended_judge_case``, ours: B.6
   omits how the case is laid out) is the user message. What the judge
   sees of the question is the ``judge_context`` parameter: B.6 names only
   "a model's open-ended answer" and "a ground-truth answer from the
   dataset", judged against "the medical knowledge required for the
   question type", and §4 describes the task as "comparing open-ended
   outputs to the corresponding multiple-choice ground-truth labels": no
   vignette is mentioned, so ``"question"`` (the open question sentence) is
   the default and ``"vignette"`` (the whole open question the model
   answered) the other reading. The entailment judge sees the question
   sentence. Unparsed verdicts are counted, and a cluster without a
   verdict leaves its samples unlabelled (never wrong).
5. **Agreement** between any two label sources (:func:`agreement`: raw
   agreement and Cohen's kappa) and between two partitions of the same
   samples (:func:`partition_agreement`: adjusted Rand index, and the
   agreement on every pair of samples being together or apart).

The question table (:func:`questions`) has the columns of the
multiple-choice one (:func:`medaudit.studies.calibration.questions`: confidence,
majority_correct, single_correct), so the paired tests and seed tables of
notebook 04 serve Table 2 unchanged.
"""
from __future__ import annotations

import json
import math
import re
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from medaudit.llm import judging
from medaudit.studies import agents
from medaudit import parse, prompts
from medaudit.prep import text as _text
from medaudit.prep.text import content_words
from medaudit.prep.labels import HUMAN_COLUMNS
from medaudit.stats.paired import agreement, partition_agreement
from medaudit.prep.variants import options_added
from medaudit.llm import GenParams, ResponseStore, mcq, runs

METHODS = ("llm", "entailment", "embedding")
CORRECT, INCORRECT = "CORRECT", "INCORRECT"
# the problem of a reply that ended at the token limit (finish_reason "length")
TRUNCATED = "cut by the token limit"


# ==========================================================================
# 1. reformulation (B.4)


def reformulate_messages(question: str, options: dict) -> list[dict]:
    return [{"role": "user", "content": prompts.load("openended_reformulate").format(
        question=question, options=mcq.options_text(options))}]


def reformulation_problems(job, text_: str, min_kept: float = 0.5) -> list[str]:
    """Checks of a reformulated question sentence against the item
    (``job``: question, options), after B.4's rules: one sentence, ending in
    "?", no option text that the original question sentence lacks, no
    detail of the vignette (a number, or a content word of the vignette
    that the question sentence does not use), and at least ``min_kept`` of
    the question sentence's content words kept ("as close as possible to
    the multiple-choice version", no new terminology)."""
    t = text_.strip()
    if not t:
        return ["empty: write the question sentence"]
    problems = []
    n = len(_text.split_sentences(t))
    if n != 1:
        problems.append(f"not one sentence: write only the question sentence (got {n})")
    if not t.rstrip("\"'”’ ").endswith("?"):
        problems.append("not a question: end with a question mark")
    final = _text.final_sentence(job["question"])
    leaked = options_added(final, t, job["options"])
    if leaked:
        problems.append(f"option text: do not name answer options ({', '.join(leaked)})")
    body = job["question"][:_text.final_sentence_start(job["question"])]
    own, new = content_words(final), content_words(t)
    details = _text.numbers_missing(t, final) + sorted((new - own) & content_words(body))
    if details:
        problems.append(f"vignette detail: do not repeat details of the vignette ({', '.join(details)})")
    if own and len(own & new) < min_kept * len(own):
        problems.append(f"drifted: stay close to the question sentence (keep {', '.join(sorted(own - new))})")
    return problems


_WHICH = re.compile(r"\b([Ww])hich of the following\b\s*", re.I)
_GIVEN = re.compile(r"(?i)^(?:given|from|of) the following(?: options| choices| answers)?,\s*")
_AUX = frozenset("is are was were be would could should will can may might does do did has have had best most "
                 "likely".split())
_KEEP_PLURAL = frozenset("are were have do".split())


def _singular(word: str) -> str:
    if re.search(r"(?i)(?:ss|us|is)$", word):
        return word
    if re.search(r"(?i)(?:ches|shes|sses|xes)$", word):
        return word[:-2]
    return word[:-1] if word.lower().endswith("s") else word


def rule_reformulation(final: str) -> str:
    """A rule-based open form of a question sentence: "Which of the
    following is …" → "What is …", "Which of the following drugs is …" →
    "Which drug is …", "… to show which of the following?" → "… to show
    what?", a leading "Given the following options," dropped, stray quotes
    after the "?" dropped; a sentence without such a phrase is kept as it
    is (B.4: "If the original final sentence already works as an open-ended
    question, keep it unchanged")."""
    t = final.strip().rstrip("\"'”’ ").strip()
    g = _GIVEN.match(t)
    if g:
        t = t[g.end()].upper() + t[g.end() + 1:]
    m = _WHICH.search(t)
    if not m:
        return t
    head, rest, w = t[:m.start()], t[m.end():], m.group(1)
    what = ("W" if w == "W" else "w") + "hat"
    words = rest.split(" ")
    first = words[0].rstrip("?")
    second = words[1].lower() if len(words) > 1 else ""
    if not first or first.lower() in _AUX:
        return head + what + (" " + rest if first else rest)
    if second in _AUX:                                  # "drugs is …": a noun, then its verb
        noun = first if second in _KEEP_PLURAL else _singular(first)
        return head + w + "hich " + " ".join([noun, *words[1:]])
    if first.lower().endswith("s"):                     # "explains …", "describes …": a verb
        return head + what + " " + rest
    return head + w + "hich " + rest                    # "types of …", "statement …"


def rule_table(items: pd.DataFrame) -> pd.DataFrame:
    """Per item: the question sentence, its rule-based open form and the
    problems the B.4 checks find in it (none = usable as the fallback)."""
    finals = [_text.final_sentence(q) for q in items["question"]]
    forms = [rule_reformulation(f) for f in finals]
    return pd.DataFrame({"item_id": items["item_id"], "question sentence": finals, "rule-based form": forms,
                         "problems": ["; ".join(reformulation_problems({"question": q, "options": o}, t))
                                      for q, o, t in zip(items["question"], items["options"], forms)]})


def reformulate(backend, store: ResponseStore, items: pd.DataFrame, *, model: str, seed: int, gen: GenParams,
                max_attempts: int = 3, fallback: str | None = "rules") -> tuple[pd.DataFrame, agents.AgentRun]:
    """B.4 for every item (item_id, question, options), retried with a new
    seed when a check fails. With ``fallback="rules"`` an item whose every
    attempt failed gets :func:`rule_reformulation`, checked the same way.
    Returns (one row per item: item_id, ok, text, source llm | rules |
    none, attempts, problems) and the agent run with every attempt."""
    if fallback not in (None, "none", "rules"):
        raise ValueError(f"reformulation fallback must be 'rules' or None, not {fallback!r}")
    jobs = items[["item_id", "question", "options"]].assign(
        condition="base", messages=[reformulate_messages(q, o) for q, o in zip(items["question"], items["options"])])
    run = agents.run(backend, store, jobs, reformulation_problems, model=model, seed=seed, gen=gen,
                     prompt_format="open_reformulate", max_attempts=max_attempts, revise=False)
    res = run.results.set_index("item_id")
    rows = []
    for j in jobs.itertuples(index=False):
        r = res.loc[j.item_id]
        row = {"item_id": j.item_id, "ok": bool(r["ok"]), "text": r["text"], "source": "llm" if r["ok"] else "none",
               "attempts": int(r["attempts"]), "problems": list(r["problems"])}
        if not r["ok"] and fallback == "rules":
            t = rule_reformulation(_text.final_sentence(j.question))
            p = reformulation_problems({"question": j.question, "options": j.options}, t)
            if not p:
                row.update(ok=True, text=t, source="rules")
        rows.append(row)
    return pd.DataFrame(rows), run


def open_variants(variants: pd.DataFrame, reformulated: pd.DataFrame) -> pd.DataFrame:
    """The open-ended form of every variant (item_id, condition, question):
    the question sentence replaced by the item's accepted reformulation.
    Items whose reformulation failed every attempt are left out (and
    listed by the caller from ``reformulated``)."""
    ok = reformulated[reformulated["ok"]].set_index("item_id")["text"]
    v = variants[variants["item_id"].isin(ok.index)].copy()
    v["question"] = [q[:_text.final_sentence_start(q)] + ok[i] for q, i in zip(v["question"], v["item_id"])]
    return v.reset_index(drop=True)


# ==========================================================================
# 2. free-text answers


ANSWER_PROMPTS = ("neutral", "single")


def answer_messages(question: str, prompt: str = "neutral") -> list[dict]:
    """The open-ended answer request. Seed 000 gives no answer prompt (its §4 and B.4-B.6 give the
    reformulation, clustering and judge prompts), so both are the project's: ``neutral`` (prompts/
    openended_answer_neutral.txt) asks for an answer and rules nothing out, as B.6 credits "additional
    acceptable options"; ``single`` (openended_answer_single.txt) asks for the single most likely
    answer and "Do not list alternatives" (the smoke profile's recorded runs)."""
    if prompt not in ANSWER_PROMPTS:
        raise ValueError(f"openended_answer_prompt must be one of {ANSWER_PROMPTS}, not {prompt!r}")
    return [{"role": "system", "content": prompts.load(f"openended_answer_{prompt}")},
            {"role": "user", "content": question}]


def plan_answers(open_v: pd.DataFrame, *, backend, k: int, seed: int, gen: GenParams,
                 prompt: str = "neutral") -> list[runs.Sample]:
    msgs = open_v.assign(messages=[answer_messages(q, prompt) for q in open_v["question"]])
    return runs.plan_free(msgs[["item_id", "condition", "messages"]], backend=backend.kind,
                         model_id=backend.model_id, k=k, seed=seed, gen=gen, prompt_format="open")


def answer_text(raw: str | None) -> str:
    """The answer as judged and clustered: the reply stripped, one line."""
    return " ".join((raw or "").split())


# ==========================================================================
# 3. semantic clusters


def relabel(labels: Sequence[int]) -> np.ndarray:
    """Cluster ids renumbered 0..n−1 in order of first appearance, so two
    labelings of the same partition are equal arrays."""
    seen: dict = {}
    return np.array([seen.setdefault(x, len(seen)) for x in labels], dtype=int)


def cluster_messages(question: str, answers: Sequence[str]) -> list[dict]:
    listed = "\n".join(f"{i}: {a}" for i, a in enumerate(answers))
    return [{"role": "user", "content": prompts.load("openended_cluster").format(question=question,
                                                                                 answers=listed)}]


def read_clusters(raw: str) -> dict:
    """The JSON object of a B.5 reply (:func:`agents.json_object`)."""
    return agents.json_object(raw)


def _cluster_list(obj: dict) -> list | None:
    c = obj.get("clusters")
    if not isinstance(c, list) or not all(isinstance(x, dict) for x in c):
        return None
    return c


def cluster_problems(obj: dict, n: int) -> list[str]:
    """Strict validation of a B.5 object for ``n`` samples: a "clusters"
    list of {cluster_id, cluster_indices} with nothing else, ids exactly
    0..m−1, every index an integer in 0..n−1 appearing exactly once."""
    clusters = _cluster_list(obj)
    if clusters is None:
        return ['schema: the object must be {"clusters": [{"cluster_id": …, "cluster_indices": […]}, …]}']
    problems = []
    extra = set(obj) - {"clusters"} | {k for c in clusters for k in c if k not in ("cluster_id", "cluster_indices")}
    if extra:
        problems.append(f"extra fields: remove {sorted(map(str, extra))}")
    ids = [c.get("cluster_id") for c in clusters]
    if sorted(i for i in ids if isinstance(i, int)) != list(range(len(clusters))) or \
            not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        problems.append(f"cluster ids: use exactly 0..{len(clusters) - 1} without gaps (got {ids})")
    idx = [i for c in clusters for i in (c.get("cluster_indices") if isinstance(c.get("cluster_indices"), list)
                                          else [None])]
    bad = [i for i in idx if not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n)]
    if bad:
        problems.append(f"unknown sample_index: use only 0..{n - 1} (got {bad})")
    good = [i for i in idx if i not in bad]
    dup = sorted({i for i in good if good.count(i) > 1})
    if dup:
        problems.append(f"repeated sample_index: each must appear once ({dup})")
    missing = sorted(set(range(n)) - set(good))
    if missing:
        problems.append(f"missing sample_index: every sample must be in a cluster ({missing})")
    return problems


def longest_cluster_reply(k: int, indent: int | None = 2, fence: bool = True) -> str:
    """The longest complete reply B.5's format allows for ``k`` answers:
    every answer its own cluster (``k`` clusters; merging answers into one
    cluster only removes an id and a list), written as JSON with ``indent``
    (None: on one line, as the prompt shows it; 2: indented, as chat models
    tend to write it, the longer form) and, with ``fence``, inside a
    ```json code fence (which :func:`read_clusters` reads around)."""
    obj = {"clusters": [{"cluster_id": i, "cluster_indices": [i]} for i in range(k)]}
    body = json.dumps(obj, indent=indent)
    return f"```json\n{body}\n```" if fence else body


def cluster_token_budget(k: int, count_tokens: Callable[[str], int], margin: float = 1.25, step: int = 32) -> int:
    """The reply budget (``cluster_max_tokens``) for clustering ``k``
    answers: the tokens of the longest complete reply
    (:func:`longest_cluster_reply`, the most of its one-line and indented
    forms, fenced), counted with the clustering model's tokenizer
    (``count_tokens``: text -> tokens, e.g. :func:`gguf_token_counter`),
    times ``margin`` (other whitespace, a stray word around the object),
    rounded up to a multiple of ``step``. A reply that needs more was cut
    by the limit; those are the questions with the most clusters, the
    least confident ones, and leaving them unscored biases confidence up."""
    need = max(count_tokens(longest_cluster_reply(k, indent)) for indent in (None, 2, 4))
    return int(math.ceil(need * margin / step) * step)


def gguf_token_counter(model: str) -> Callable[[str], int]:
    """Text -> tokens with the tokenizer of a registry GGUF model
    (``params/models.yaml``), loaded without its weights."""
    import contextlib
    import os

    from medaudit.llm import models
    from medaudit.llm.llamacpp import load_llama

    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        llm = load_llama()(str(models.model_path(model)), vocab_only=True, verbose=False)
    return lambda s: len(llm.tokenize(s.encode("utf-8"), add_bos=False, special=False))


def labels_from_clusters(obj: dict, n: int) -> np.ndarray:
    """Labels of a *valid* B.5 object (see :func:`cluster_problems`)."""
    lab = np.full(n, -1)
    for c in _cluster_list(obj):
        lab[c["cluster_indices"]] = c["cluster_id"]
    return relabel(lab)


def repair_clusters(obj: dict, n: int) -> tuple[np.ndarray | None, list[str]]:
    """Labels from an invalid B.5 object, and what was repaired: indices
    outside 0..n−1 dropped, a repeated index kept in its first cluster, a
    missing index put in a cluster of its own, ids renumbered. None when
    the object has no usable clusters list."""
    clusters = _cluster_list(obj)
    if clusters is None:
        return None, ["no clusters list"]
    lab, repairs, next_id = np.full(n, -1), [], 0
    for c in clusters:
        members = c.get("cluster_indices")
        members = members if isinstance(members, list) else []
        placed = False
        for i in members:
            if not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n):
                repairs.append(f"dropped unknown index {i!r}")
            elif lab[i] >= 0:
                repairs.append(f"index {i} repeated: kept in its first cluster")
            else:
                lab[i], placed = next_id, True
        next_id += placed
    for i in np.flatnonzero(lab < 0):
        lab[i], next_id = next_id, next_id + 1
        repairs.append(f"index {i} missing: own cluster")
    return relabel(lab), repairs


def entailment_clusters(n: int, entails: Callable[[int, int], bool | None]) -> np.ndarray:
    """Bidirectional-entailment clustering of samples 0..n−1: each sample
    joins the first cluster whose first member it entails and is entailed
    by, else opens a new one. ``entails(i, j)`` says whether sample i
    entails sample j (None when the judge's reply did not parse: counted by
    the caller, treated as no entailment)."""
    firsts, lab = [], np.full(n, -1)
    for i in range(n):
        for c, f in enumerate(firsts):
            if entails(i, f) and entails(f, i):
                lab[i] = c
                break
        else:
            lab[i] = len(firsts)
            firsts.append(i)
    return lab


def entailment_messages(question: str, a: str, b: str) -> list[dict]:
    return [{"role": "user", "content": prompts.load("openended_entail").format(question=question, a=a, b=b)}]


def embedding_clusters(emb: np.ndarray, threshold: float) -> np.ndarray:
    """Average-linkage clusters of unit embeddings, cut where the mean
    cosine distance between clusters exceeds ``threshold``."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    e = np.asarray(emb, dtype=float)
    if len(e) < 2:
        return np.zeros(len(e), dtype=int)
    d = np.clip(pdist(e, "cosine"), 0, None)
    return relabel(fcluster(linkage(d, "average"), t=threshold, criterion="distance"))


def semantic_entropy(labels: Sequence[int]) -> float:
    """Entropy (nats) of the cluster frequencies."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def confidence(labels: Sequence[int]) -> float:
    """1 − semantic entropy / log K over K samples (1 when all agree, 0
    when every sample is its own cluster); NaN below two samples."""
    k = len(labels)
    return np.nan if k < 2 else 1.0 - semantic_entropy(labels) / np.log(k)


# ==========================================================================
# 4. the judge (B.6)


JUDGE_CONTEXTS = ("question", "vignette")


def judge_messages(question: str, ground_truth: str, answer: str, context: str = "question") -> list[dict]:
    """The B.6 judge's messages: the seed's prompt verbatim as the system
    message, the case as the user message. ``question`` is the open question
    as the model saw it (vignette and open question sentence); ``context``
    says what the judge is shown of it: ``"question"``, the question
    sentence only (default), or ``"vignette"``, all of it."""
    if context not in JUDGE_CONTEXTS:
        raise ValueError(f"judge context must be one of {JUDGE_CONTEXTS}, not {context!r}")
    shown = _text.final_sentence(question) if context == "question" else question.strip()
    return [{"role": "system", "content": prompts.load("openended_judge")},
            {"role": "user", "content": prompts.load("openended_judge_case").format(
                question=shown, ground_truth=ground_truth, answer=answer)}]


def judge_picks(labels: Sequence[int], rng: np.random.Generator) -> dict[int, int]:
    """One sample per cluster, drawn at random: {cluster: sample index}."""
    lab = np.asarray(labels)
    return {int(c): int(rng.choice(np.flatnonzero(lab == c))) for c in np.unique(lab)}


# ==========================================================================
# 5. agreement


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


# ==========================================================================
# comparing methods, human labels, failure cases

def human_template(answers: pd.DataFrame, labels: pd.DataFrame, ground_truth: pd.Series) -> pd.DataFrame:
    """The CSV a clinician fills: one row per judged sample (one per
    cluster), with the question, the ground truth and the answer, and an
    empty ``label`` (CORRECT or INCORRECT), ``annotator`` and ``note``. The
    judge's verdict is not shown."""
    j = labels[labels["sample"] == labels["judged_sample"]]
    a = answers.set_index(["model", "item_id", "condition", "sample"])
    rows = [{"model": r.model, "item_id": r.item_id, "condition": r.condition, "sample": r.sample,
             "question": a.loc[(r.model, r.item_id, r.condition, r.sample), "question"],
             "ground_truth": ground_truth[r.item_id],
             "answer": a.loc[(r.model, r.item_id, r.condition, r.sample), "answer"],
             "label": "", "annotator": "", "note": ""} for r in j.itertuples(index=False)]
    return pd.DataFrame(rows, columns=["model", *HUMAN_COLUMNS])


def judged_units(labels: pd.DataFrame, human: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 2's accuracy unit with the people's word where given: one row
    per question (model, item_id, condition) with ``judge`` = the verdict on
    sample 0's cluster (1 CORRECT, 0 INCORRECT, NaN unread: Table 2's
    single_correct) and ``human`` = the label of that cluster's judged
    answer in the filled template (:func:`human_template`;
    :func:`medaudit.prep.labels.load_human_labels`), NaN where none. A label
    names the answer the judge read, so it labels the cluster; input for
    :func:`medaudit.stats.judge_error.judge_table`."""
    s0 = labels[labels["sample"] == 0]
    out = pd.DataFrame({"model": s0["model"].to_numpy(), "item_id": s0["item_id"].to_numpy(),
                        "condition": s0["condition"].to_numpy(),
                        "judge": s0["verdict"].map({CORRECT: 1.0, INCORRECT: 0.0}).to_numpy(), "human": np.nan})
    if human is not None and len(human):
        h = human.assign(sample=human["sample"].astype(int)).set_index(["model", "item_id", "condition", "sample"])
        h = h[~h.index.duplicated()]["label"]
        keys = zip(s0["model"], s0["item_id"], s0["condition"], s0["judged_sample"].astype(int))
        out["human"] = [{CORRECT: 1.0, INCORRECT: 0.0}.get(h.get(k), np.nan) for k in keys]
    return out


def method_table(clusters: dict[str, pd.DataFrame], labels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The clustering methods side by side on the same samples: questions
    clustered / repaired / failed, mean clusters per question, mean
    confidence, and the share of samples judged correct."""
    rows = []
    for m, cl in clusters.items():
        ok = cl[cl["labels"].notna()]
        lab = labels.get(m, pd.DataFrame(columns=["verdict"]))
        failed = cl["labels"].isna()
        cut = cl["truncated"].astype(bool) if m == "llm" and "truncated" in cl else pd.Series(False, index=cl.index)
        rows.append({"method": m, "questions": len(cl), "clustered": len(ok),
                     "repaired": int((cl.get("status") == "repaired").sum()),
                     "failed": int(failed.sum()),
                     "failed: reply cut by the token limit": int((failed & cut).sum()),
                     "failed: other": int((failed & ~cut).sum()),
                     "replies cut by the token limit": _cut_replies(m, cl),
                     "mean clusters": float(np.mean([len(set(x)) for x in ok["labels"]])) if len(ok) else np.nan,
                     "mean confidence": float(np.mean([confidence(x) for x in ok["labels"]])) if len(ok) else np.nan,
                     "judged correct (% of samples)": 100 * float((lab["verdict"] == CORRECT).mean())
                     if len(lab) else np.nan,
                     "unjudged samples": int(lab["verdict"].isna().sum()) if len(lab) else 0})
    return pd.DataFrame(rows)


def _cut_replies(method: str, cl: pd.DataFrame) -> int:
    """Replies of one method's run that ended at the token limit."""
    col = {"llm": "truncated_attempts", "entailment": "truncated"}.get(method)
    return int(cl[col].sum()) if col in cl else 0


def problem_counts(clusters: dict[str, pd.DataFrame], llm_run: agents.AgentRun | None = None) -> pd.DataFrame:
    """Per clustering method, what went wrong in its replies, a reply cut by
    the token limit (``finish_reason`` "length") counted as
    :data:`TRUNCATED` and under no other problem: ``llm``, over every
    attempt of ``llm_run`` (from :func:`llm_clusters`), the kind of each
    problem (the text before the first ":"; a cut attempt counts once, as
    cut); ``entailment``, the replies cut and the other replies with no
    verdict ("unparsed verdict"); ``embedding`` sends no reply. Columns:
    method, problem, replies (problems that occurred only)."""
    rows = []
    for m, cl in clusters.items():
        if m == "llm" and llm_run is not None and len(llm_run.attempts):
            a = llm_run.attempts
            cut = a["truncated"] if "truncated" in a else pd.Series(False, index=a.index)
            kinds = agents.AgentRun(a[~cut], llm_run.results).problem_counts()
            rows += [(m, TRUNCATED, int(cut.sum())),
                     *((m, k, int(v)) for k, v in zip(kinds["problem"], kinds["attempts"]))]
        elif m == "entailment" and len(cl):
            cut = int(cl["truncated"].sum()) if "truncated" in cl else 0
            cut_unparsed = int(cl["unparsed_truncated"].sum()) if "unparsed_truncated" in cl else 0
            rows += [(m, TRUNCATED, cut), (m, "unparsed verdict", int(cl["unparsed"].sum()) - cut_unparsed)]
    out = pd.DataFrame(rows, columns=["method", "problem", "replies"])
    return out[out["replies"] > 0].reset_index(drop=True)


def method_agreement(clusters: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every pair of methods: mean adjusted Rand index and pooled
    same-cluster agreement / kappa over the questions both clustered."""
    names, rows = list(clusters), []
    for x in range(len(names)):
        for y in range(x + 1, len(names)):
            a = clusters[names[x]].set_index(["model", "item_id", "condition"])["labels"]
            b = clusters[names[y]].set_index(["model", "item_id", "condition"])["labels"]
            both = [k for k in a.index if k in b.index and a[k] is not None and b[k] is not None]
            aris = [partition_agreement(a[k], b[k])["ari"] for k in both]
            same_a = np.concatenate([_same_pairs(a[k]) for k in both]) if both else np.array([])
            same_b = np.concatenate([_same_pairs(b[k]) for k in both]) if both else np.array([])
            pair = agreement(same_a, same_b)
            rows.append({"method a": names[x], "method b": names[y], "questions": len(both),
                         "mean ARI": float(np.nanmean(aris)) if aris else np.nan,
                         "sample pairs": pair["n"], "pair agreement": pair["agreement"], "pair kappa": pair["kappa"]})
    return pd.DataFrame(rows)


def _same_pairs(labels) -> np.ndarray:
    lab = np.asarray(labels)
    return (lab[:, None] == lab[None, :])[np.triu_indices(len(lab), 1)]


def failure_cases(qt: pd.DataFrame, answers: pd.DataFrame, labels: pd.DataFrame, base: str = "base",
                  conditions: Sequence[str] = ("+homo",), min_confidence: float = 0.5, n: int = 5) -> pd.DataFrame:
    """Figure 2-style cases: questions answered correctly at ``base`` (the
    majority cluster judged CORRECT) and wrongly under an identity
    condition with confidence ≥ ``min_confidence``, most confident first.
    Shows the majority answer under both."""
    key = ["model", "method", "item_id"]
    b = qt[(qt["condition"] == base) & (qt["majority_correct"] == 1.0)]
    w = qt[qt["condition"].isin(conditions) & (qt["majority_correct"] == 0.0) & (qt["confidence"] >= min_confidence)]
    m = w.merge(b[key + ["confidence"]], on=key, suffixes=("", "_base"))
    if m.empty:
        return pd.DataFrame(columns=[*key, "condition", "confidence_base", "confidence", "answer_base", "answer"])

    def majority_answer(model, item, cond):
        lab = labels[(labels["model"] == model) & (labels["item_id"] == item) & (labels["condition"] == cond)]
        top = lab["cluster"].value_counts().sort_index().idxmax()   # largest; ties to the first cluster
        s = lab.loc[lab["cluster"] == top, "sample"].min()
        a = answers[(answers["model"] == model) & (answers["item_id"] == item) & (answers["condition"] == cond)]
        return a.loc[a["sample"] == s, "answer"].iloc[0]

    m = m.sort_values("confidence", ascending=False).head(n)
    m["answer_base"] = [majority_answer(r.model, r.item_id, base) for r in m.itertuples()]
    m["answer"] = [majority_answer(r.model, r.item_id, r.condition) for r in m.itertuples()]
    return m[[*key, "condition", "confidence_base", "confidence", "answer_base", "answer"]].reset_index(drop=True)


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
           base: str = "base", prefix: str = "05_table2") -> tuple[pd.DataFrame | None, dict]:
    """Seed 000 Table 2 from one method's scored questions: the paired tests
    of every condition against ``base`` (and +homo against +hetero) and
    the three panels, saved. ``(None, {})`` when no question is scored both
    at ``base`` and under another condition (nothing to pair)."""
    from medaudit.studies import calibration

    scored = qt.dropna(subset=["confidence", "majority_correct"])
    at_base = set(scored.loc[scored["condition"] == base, "item_id"])
    if not (scored["condition"].ne(base) & scored["item_id"].isin(at_base)).any():
        return None, {}
    res, pair_res = calibration.compare(scored, base, list(conditions), n_boot, seed, pairs=[("+hetero", "+homo")])
    return res, calibration.seed_tables(res, pair_res, calibration.TABLE1, profile, prefix)


def judge_parse_table(labels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per method: judged samples (one per cluster) and the parse outcome
    of their verdicts."""
    rows = []
    for m, lab in labels.items():
        j = lab[lab["sample"] == lab["judged_sample"]]
        rows.append({"method": m, "verdicts": len(j), **j["judge_status"].value_counts().to_dict()})
    return pd.DataFrame(rows).fillna(0)
