"""Semantic clusters of the open-ended answers (seed 000 §4, B.5), one label per sample (0..n-1, in
order of first appearance): the LLM's JSON checked strictly and repaired when it must be, bidirectional
entailment (Kuhn et al. 2023; Farquhar et al. 2024), or MiniLM embeddings cut at a cosine distance;
semantic entropy, and confidence 1 - entropy / log K.
"""
from __future__ import annotations

import json
import math
from typing import Callable, Sequence

import numpy as np

from medaudit.studies import agents
from medaudit import prompts


# ==========================================================================
# 3. semantic clusters


def relabel(labels: Sequence[int]) -> np.ndarray:
    """Cluster ids renumbered 0..n−1 in order of first appearance, so two
    labelings of the same partition are equal arrays."""
    seen: dict = {}
    return np.array([seen.setdefault(x, len(seen)) for x in labels], dtype=int)


def cluster_messages(question: str, answers: Sequence[str]) -> list[dict]:
    """The clustering request (seed 000 B.5, ``prompts/openended_cluster.txt``): the
    question and its answers numbered from 0."""
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
    """The request asking whether answer ``a`` entails answer ``b`` for the question
    (``prompts/openended_entail.txt``), one direction of :func:`entailment_clusters`' test."""
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
