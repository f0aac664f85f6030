"""Per-question confidence from K option-shuffled samples (seed 000 §2, A.3, B.3).

One row of :func:`questions` summarises the K samples of one
(model, prompt_format, item, condition):

* **empirical option distribution** ``p``: the share of the *parsed* samples
  that chose each original option letter. Unparsed samples (``parsed_answer``
  NULL) are left out of ``p`` and counted in ``n_unparsed``: they say nothing
  about which option the model prefers, and counting them as a fifth "option"
  would make the entropy depend on the parser. A question with no parsed
  sample has ``p`` empty, NaN confidence, no prediction and NaN correctness:
  it is *reported* (``n_parsed == 0``), not scored wrong.
* **confidence** ``c = 1 - H(p) / log(n)`` with ``H`` the natural-log Shannon
  entropy and ``n`` the number of options of the item (4 for MedQA-4).
* **majority** prediction (used for Brier, ECE, AUROC, seed 000 A.3): the most
  frequent parsed letter. A tie is broken *at random but reproducibly*: each
  candidate letter gets a uniform key derived from sha256(seed, model,
  prompt_format, item, condition) and the letter's index, and the candidate
  with the largest key wins. The choice is therefore a uniform draw among the
  tied letters that depends on nothing but the question and the seed (not on
  the row order, nor on which other questions are in the table).
  ``majority_tied`` marks the questions where this happened.
* **single** answer (the accuracy tables, seed 000 A.3): ONE sample per
  question chosen uniformly at random among the parsed samples, again keyed
  on (seed, question, sample index). It measures the accuracy of a single
  answer, as deployed, not of a K-sample majority vote (which is an ensemble
  and flatters accuracy). With ``single_from="all"`` the draw is among all K
  samples and an unparsed draw is scored wrong — the paper's literal rule
  ("predictions that do not match the ground truth are incorrect"); the
  default follows the parsed-only convention used for ``p``.
* **the rule for unparsed answers** (``unparsed``):
  ``"drop"`` (the library default, as above: an unparsed answer is left
  out, never wrong) or ``"incorrect"``, seed 000 §2: "We extract the
  selected option using a regular expression and mark predictions that do
  not match the ground truth as incorrect." Under ``"incorrect"`` the
  single answer is drawn among all K samples (``single_from="all"``) and an
  unparsed draw scores 0, and a question with no parsed sample has no
  prediction, so ``majority_correct`` = ``single_correct`` = 0, and no
  preferred option, so ``confidence`` = 0 (the uniform distribution; the
  seed does not say what confidence such a question gets: this is ours).
  ``n_parsed`` / ``n_unparsed`` report the parsing under either rule.
* **log-prob baseline** (seed 000 B.3: "the log-likelihood of the token
  corresponding to the model's selected option letter"):
  ``logprob_confidence`` is the mean over the parsed samples of
  ``exp(answer_logprob)``, each sample's probability of the letter it chose;
  ``single_logprob_confidence`` is that probability for the single sample.
* **exact letter distribution** (a lower-variance estimate of ``p``): at each
  sample the backend stores the log-probs of every option letter at the answer
  position (``letter_logprobs``, keyed by original letter). ``q_k =
  softmax(letter_logprobs_k / T)`` renormalised over the item's letters is the
  model's distribution over options for permutation k *without* sampling
  noise; ``q`` is its mean over the K permutations (which averages out
  position bias the way the shuffling does). ``exact_confidence = 1 -
  H(q)/log n``, ``exact_majority = argmax q``. A letter missing from a
  sample's dict (API backends keep only the top 20 tokens) gets probability 0
  there. ``T`` defaults to 1 (the model's own distribution); pass the
  sampling temperature (0.7) to target the distribution the samples were
  drawn from (top-p truncation is not replayed). NaN where no sample has
  log-probs. :func:`estimate_gap` reports how far the K-sample estimate sits
  from this one.
"""
from __future__ import annotations

import hashlib
import json
import string
from typing import Iterable

import numpy as np
import pandas as pd
from scipy.special import entr

from medaudit.parse import TRUNCATED

KEYS = ["model", "prompt_format", "item_id", "condition"]
UNPARSED_RULES = ("drop", "incorrect")     # see "the rule for unparsed answers" above
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# --------------------------------------------------------------------------
# array-level building blocks


def normalized_entropy(p: np.ndarray, n_options: np.ndarray | int) -> np.ndarray:
    """``H(p) / log(n)`` row-wise for a (rows, letters) probability array.

    ``0 log 0 = 0``; rows that are all NaN give NaN. ``n_options`` is a scalar
    or one value per row (the entropy is normalised by the item's own option
    count, so a 5-option item at uniform also scores 1).
    """
    p = np.asarray(p, dtype=float)
    h = entr(p).sum(axis=-1)
    h[np.isnan(p).all(axis=-1)] = np.nan
    return h / np.log(np.asarray(n_options, dtype=float))


def confidence_from_counts(counts: np.ndarray, n_options: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(p, confidence) from a (questions, letters) array of answer counts.

    ``confidence = 1 - H(p)/log(n)``; NaN (and a NaN row of ``p``) where a
    question has no counted answer.
    """
    counts = np.asarray(counts, dtype=float)
    tot = counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(tot > 0, counts / tot, np.nan)
    return p, 1.0 - normalized_entropy(p, n_options)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays (wrap-around arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _uniform(x: np.ndarray) -> np.ndarray:
    """uint64 → uniform float in [0, 1) (top 53 bits)."""
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def question_hashes(keys: pd.DataFrame, seed: int) -> np.ndarray:
    """One 64-bit hash per row of ``keys``: sha256 of the seed and the row's
    values joined by U+001F (the convention of ``llm.base.derive_seed``)."""
    cols = [keys[c].astype(str).tolist() for c in keys.columns]
    out = np.empty(len(keys), dtype=np.uint64)
    s = str(seed)
    for i, parts in enumerate(zip(*cols)):
        h = hashlib.sha256("\x1f".join((s, *parts)).encode()).digest()
        out[i] = int.from_bytes(h[:8], "big")
    return out


def majority_vote(counts: np.ndarray, tiebreak: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(winning letter index or -1, tied?) per row of a counts array.

    Among the letters with the largest count the one with the largest
    ``tiebreak`` key wins (keys uniform in [0, 1) make this a uniform draw
    among the tied letters). Rows with no counts give -1.
    """
    counts = np.asarray(counts)
    top = counts.max(axis=1, keepdims=True)
    cand = (counts == top) & (top > 0)
    win = np.where(cand, tiebreak, -1.0).argmax(axis=1)
    has = cand.any(axis=1)
    return np.where(has, win, -1), cand.sum(axis=1) > 1


def softmax_rows(lp: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of log-probs over the letters; ``-inf`` (missing
    letter) gets 0; a row with no finite entry gives NaN."""
    lp = np.asarray(lp, dtype=float) / temperature
    m = np.max(np.where(np.isfinite(lp), lp, -np.inf), axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.where(np.isfinite(lp), np.exp(lp - m), 0.0)
        s = e.sum(axis=1, keepdims=True)
        return np.where(s > 0, e / s, np.nan)


# --------------------------------------------------------------------------
# the per-question table


def _letter_codes(answers: pd.Series, letters: list[str]) -> np.ndarray:
    """Original letter → 0-based index; -1 for NULL. Unknown letters raise."""
    codes = pd.Index(letters).get_indexer(answers.to_numpy(dtype=object)).astype(np.int64)
    bad = (codes < 0) & answers.notna().to_numpy()
    if bad.any():
        raise ValueError(f"parsed_answer has letters outside {letters}: {sorted(set(answers[bad]))[:5]}")
    return codes


def _logprob_matrix(col: pd.Series, letters: list[str]) -> np.ndarray:
    """(rows, letters) array of letter log-probs; -inf for a letter missing
    from a row's dict, NaN for a row without a dict. JSON strings (the raw
    store column) are decoded."""
    vals = col.tolist()
    first = next((v for v in vals if v is not None and v == v), None)
    if isinstance(first, str):
        vals = [json.loads(v) if isinstance(v, str) and v else None for v in vals]
    dicts = [d if type(d) is dict else {} for d in vals]
    out = pd.DataFrame(dicts, columns=letters, dtype=float).to_numpy(dtype=float, copy=True)
    has = ~np.isnan(out).all(axis=1)
    out[np.isnan(out)] = -np.inf
    out[~has] = np.nan
    return out


def _item_info(items: pd.DataFrame, n_options: int | None) -> pd.DataFrame:
    """item_id → gold letter and option count (``options`` column if present,
    else ``n_options``, else 4)."""
    info = items[["item_id", "answer_idx"]].copy()
    if n_options is not None:
        info["n_options"] = int(n_options)
    elif "options" in items.columns:
        info["n_options"] = items["options"].map(len).astype(int).to_numpy()
    else:
        info["n_options"] = 4
    if info["item_id"].duplicated().any():
        raise ValueError("items has duplicate item_id")
    return info


def _group_sum(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    return np.bincount(codes, weights=values, minlength=n_groups)


def _pick_single(g: np.ndarray, sample: np.ndarray, eligible: np.ndarray, qhash: np.ndarray,
                 n_groups: int) -> np.ndarray:
    """Row index of the chosen sample per group (-1 if none eligible): the
    eligible row with the smallest key splitmix64(question hash ^
    splitmix64(sample + 1)) — a uniform draw that depends only on the
    question, the seed and the sample index (equal keys: the earlier row)."""
    key = _splitmix64(qhash[g] ^ _splitmix64(sample.astype(np.uint64) + np.uint64(1)))
    key = np.where(eligible, key, _MASK64)
    lowest = np.full(n_groups, _MASK64, dtype=np.uint64)
    np.minimum.at(lowest, g, key)
    rows = np.flatnonzero(eligible & (key == lowest[g]))
    pick = np.full(n_groups, len(g), dtype=np.int64)
    np.minimum.at(pick, g[rows], rows)
    return np.where(pick < len(g), pick, -1)


def questions(responses: pd.DataFrame, items: pd.DataFrame, seed: int, *,
                   n_options: int | None = None, single_from: str = "parsed",
                   exact_temperature: float = 1.0, unparsed: str = "drop") -> pd.DataFrame:
    """One row per (model, prompt_format, item_id, condition) of ``responses``.

    ``responses``: the store's long table (columns model, item_id, condition,
    prompt_format, sample, parsed_answer; optionally answer_logprob and
    letter_logprobs). ``items``: item_id, answer_idx (gold letter) and
    optionally options (dict, gives the option count). See the module
    docstring for every definition; columns:

    n_samples, n_parsed, n_unparsed, n_truncated (samples cut by the token
    limit, ``parse_status`` "truncated": not counted in n_samples, never
    incorrect under either rule), p (dict letter → share, all letters),
    entropy (normalised), confidence, majority, majority_tied,
    majority_correct, single, single_sample, single_correct,
    logprob_confidence, single_logprob_confidence, n_logprob_samples,
    exact_confidence, exact_majority, exact_correct, gold, n_options.
    Correctness columns are floats (1.0/0.0, NaN where there is no
    prediction); letter columns (majority, single, exact_majority) are
    missing (NaN) there. ``exact_majority`` ties (improbable with continuous
    log-probs) go to the earlier letter. Pair ``confidence``,
    ``logprob_confidence`` and ``exact_confidence`` with ``majority_correct``,
    ``majority_correct`` and ``exact_correct`` respectively,
    ``single_logprob_confidence`` with ``single_correct``.

    Note: the plug-in entropy of K = 10 samples is biased low, so
    ``confidence`` sits above ``exact_confidence`` on average for uncertain
    questions (:func:`estimate_gap` shows by how much).
    """
    if single_from not in ("parsed", "all"):
        raise ValueError("single_from must be 'parsed' or 'all'")
    if unparsed not in UNPARSED_RULES:
        raise ValueError(f"unparsed must be one of {UNPARSED_RULES}, not {unparsed!r}")
    if unparsed == "incorrect":
        single_from = "all"
    info = _item_info(items, n_options)
    missing = set(responses["item_id"].unique()) - set(info["item_id"])
    if missing:
        raise ValueError(f"{len(missing)} item_id(s) of responses are not in items, e.g. {sorted(missing)[:3]}")

    r = responses.reset_index(drop=True)
    g = r.groupby(KEYS, sort=True, observed=True).ngroup().to_numpy()
    n_groups = int(g.max()) + 1 if len(g) else 0
    _, first = np.unique(g, return_index=True)
    out = r.loc[first, KEYS].reset_index(drop=True)
    out = out.merge(info, on="item_id", how="left", validate="many_to_one")
    n_opt = out["n_options"].to_numpy()
    letters = list(string.ascii_uppercase[: int(n_opt.max()) if n_groups else 4])
    width = len(letters)
    gold_code = _letter_codes(out["answer_idx"], letters)
    if (gold_code < 0).any() or (gold_code >= n_opt).any():
        raise ValueError("items.answer_idx is missing or names an option the item does not have")

    code = _letter_codes(r["parsed_answer"], letters)
    parsed = code >= 0
    if (parsed & (code >= n_opt[g])).any():
        raise ValueError("a parsed_answer names an option the item does not have")
    counts = np.bincount(g[parsed] * width + code[parsed], minlength=n_groups * width)
    counts = counts.reshape(n_groups, width).astype(float)
    # a reply cut by the token limit is no answer of the model's: left out of
    # the samples under either rule, and counted apart
    trunc = (r["parse_status"].eq(TRUNCATED).to_numpy() if "parse_status" in r else np.zeros(len(r), bool))
    n_truncated = np.bincount(g[trunc], minlength=n_groups)
    n_samples = np.bincount(g, minlength=n_groups) - n_truncated
    n_parsed = counts.sum(axis=1).astype(int)
    p, conf = confidence_from_counts(counts, n_opt)

    qhash = question_hashes(out[KEYS], seed)
    tiebreak = _uniform(_splitmix64(qhash[:, None] + np.arange(1, width + 1, dtype=np.uint64)[None, :]))
    maj, tied = majority_vote(counts, tiebreak)

    sample = pd.to_numeric(r["sample"]).to_numpy().astype(np.int64)
    pick = _pick_single(g, sample, parsed if single_from == "parsed" else ~trunc, qhash, n_groups)
    single = np.where(pick >= 0, code[np.maximum(pick, 0)], -1)
    single_ok = pick >= 0 if single_from == "parsed" else n_samples > 0

    # log-prob baseline (B.3)
    alp = (pd.to_numeric(r["answer_logprob"], errors="coerce").to_numpy(dtype=float)
           if "answer_logprob" in r else np.full(len(r), np.nan))
    use = parsed & np.isfinite(alp)
    n_lp = np.bincount(g[use], minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        lp_conf = _group_sum(g[use], np.exp(alp[use]), n_groups) / n_lp
    single_lp = np.where(pick >= 0, np.exp(alp[np.maximum(pick, 0)]), np.nan)
    single_lp[(pick >= 0) & ~parsed[np.maximum(pick, 0)]] = np.nan

    # exact letter distribution, averaged over the permutations
    exact_conf = np.full(n_groups, np.nan)
    exact_maj = np.full(n_groups, -1)
    if "letter_logprobs" in r:
        lpm = _logprob_matrix(r["letter_logprobs"], letters)
        lpm[np.arange(width)[None, :] >= n_opt[g][:, None]] = -np.inf
        q_rows = softmax_rows(lpm, exact_temperature)
        ok = ~np.isnan(q_rows).any(axis=1)
        nq = np.bincount(g[ok], minlength=n_groups)
        qsum = np.zeros((n_groups, width))
        for j in range(width):
            qsum[:, j] = _group_sum(g[ok], q_rows[ok, j], n_groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            q = qsum / nq[:, None]
        q[nq == 0] = np.nan
        exact_conf = 1.0 - normalized_entropy(q, n_opt)
        exact_maj = np.where(nq > 0, np.nan_to_num(q, nan=-1.0).argmax(axis=1), -1)

    def letter(ix: np.ndarray) -> np.ndarray:
        arr = np.array(letters + [None], dtype=object)
        return arr[np.where(ix >= 0, ix, width)]

    def correct(ix: np.ndarray, defined: np.ndarray) -> np.ndarray:
        return np.where(defined, (ix == gold_code).astype(float), np.nan)

    out["n_samples"] = n_samples
    out["n_parsed"] = n_parsed
    out["n_unparsed"] = n_samples - n_parsed
    out["n_truncated"] = n_truncated
    out["p"] = [dict(zip(letters[:k], row[:k])) if t > 0 else {}
                for row, k, t in zip(p.tolist(), n_opt.tolist(), n_parsed.tolist())]
    out["entropy"] = 1.0 - conf
    out["confidence"] = conf
    out["majority"] = letter(maj)
    out["majority_tied"] = tied
    out["majority_correct"] = correct(maj, maj >= 0)
    out["single"] = letter(single)
    out["single_sample"] = np.where(pick >= 0, sample[np.maximum(pick, 0)], -1)
    out["single_correct"] = correct(single, single_ok)
    if unparsed == "incorrect":                  # seed 000 §2: no matching prediction is an incorrect one
        none = (n_parsed == 0) & (n_samples > 0)
        out.loc[none, "majority_correct"] = 0.0
        out.loc[none, "confidence"] = 0.0
        out.loc[none, "entropy"] = 1.0
    out["logprob_confidence"] = lp_conf
    out["single_logprob_confidence"] = single_lp
    out["n_logprob_samples"] = n_lp
    out["exact_confidence"] = exact_conf
    out["exact_majority"] = letter(exact_maj)
    out["exact_correct"] = correct(exact_maj, exact_maj >= 0)
    out["gold"] = out.pop("answer_idx")
    n_col = out.pop("n_options")
    out["n_options"] = n_col
    return out


# --------------------------------------------------------------------------
# summaries


def parse_summary(qt: pd.DataFrame, by: Iterable[str] = ("model", "condition"), min_parsed: int = 5) -> pd.DataFrame:
    """Per group: questions, questions with no parsed sample (unscored), share
    of samples parsed, and the share of questions with at least ``min_parsed``
    parsed samples (seed 000 Table 3 reports this with 5 of 10)."""
    by = list(by)
    g = qt.groupby(by, sort=False, observed=True)
    return g.agg(questions=("n_samples", "size"),
                 unscored=("n_parsed", lambda s: int((s == 0).sum())),
                 samples=("n_samples", "sum"),
                 parsed=("n_parsed", "sum"),
                 ok_questions=("n_parsed", lambda s: float((s >= min_parsed).mean()))).assign(
        sample_parse_rate=lambda d: d["parsed"] / d["samples"]).reset_index()


def estimate_gap(qt: pd.DataFrame, by: Iterable[str] = ("model", "condition")) -> pd.DataFrame:
    """How far the K-sample estimate sits from the exact-letter estimate.

    Per group, over questions where both exist: ``n``, ``mean_abs_conf_diff``
    = mean |confidence − exact_confidence|, ``mean_conf_diff`` (signed:
    K-sample minus exact), and ``prediction_disagreement`` = share of
    questions whose majority letter differs from argmax q (the mean absolute
    difference of the predicted option as a 0/1 indicator).
    """
    by = list(by)
    ok = qt["confidence"].notna() & qt["exact_confidence"].notna()
    d = qt.loc[ok, by].copy()
    d["abs"] = (qt.loc[ok, "confidence"] - qt.loc[ok, "exact_confidence"]).abs()
    d["signed"] = qt.loc[ok, "confidence"] - qt.loc[ok, "exact_confidence"]
    d["dis"] = (qt.loc[ok, "majority"] != qt.loc[ok, "exact_majority"]).astype(float)
    return d.groupby(by, sort=False, observed=True).agg(
        n=("abs", "size"), mean_abs_conf_diff=("abs", "mean"),
        mean_conf_diff=("signed", "mean"), prediction_disagreement=("dis", "mean")).reset_index()
