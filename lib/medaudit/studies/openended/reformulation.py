"""The open-ended case study's reformulation (seed 000 B.4, verbatim): an LLM rewrites each item's
final multiple-choice question as one open-ended sentence, checked (:func:`reformulation_problems`:
one sentence, a question, no option text, no number of the vignette), with a rule-based rewrite beside
it; the open variant of every condition is its vignette with that sentence replaced.
"""
from __future__ import annotations

import re

import pandas as pd

from medaudit.studies import agents
from medaudit import prompts
from medaudit.prep import text as _text
from medaudit.prep.text import content_words
from medaudit.prep.variants import options_added
from medaudit.llm import GenParams, ResponseStore, mcq


METHODS = ("llm", "entailment", "embedding")
CORRECT, INCORRECT = "CORRECT", "INCORRECT"
# the problem of a reply that ended at the token limit (finish_reason "length")
TRUNCATED = "cut by the token limit"


# ==========================================================================
# 1. reformulation (B.4)


def reformulate_messages(question: str, options: dict) -> list[dict]:
    """The reformulation request (seed 000 B.4, ``prompts/openended_reformulate.txt``):
    the item's question and its options, to be rewritten as one open-ended question."""
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
