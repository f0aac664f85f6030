"""Neutralised vignettes: every demographic reference of a MedQA vignette removed.

Seed 004 §3.1 "Clinical Vignette Neutralization": "we first construct a
neutralized version of each vignette by removing all explicit references to
demographic characteristics such as race, sex, and socioeconomic status …
personal pronouns (e.g., "he", "she", "white man", "black woman") are
replaced with generic terms such as "patient"" (worked example: seed 001
A.5). :func:`neutralise` is the rule-based rewrite (every replacement
listed); an LLM can neutralise instead (:func:`neutralise_messages`), its
rewrite checked by :func:`neutral_problems`.
"""
from __future__ import annotations

import re
from typing import Sequence

import pandas as pd

from medaudit.prep import perturb
from medaudit import prompts
from medaudit.prep import text as _text


_PRONOUNS = {"he": "they", "she": "they", "him": "them", "his": "their", "hers": "theirs",
             "himself": "themselves", "herself": "themselves"}
_PLURAL = {"is": "are", "was": "were", "has": "have", "does": "do", "isn't": "aren't", "wasn't": "weren't",
           "hasn't": "haven't", "doesn't": "don't", "'s": "'re"}
_ADVERBS = {"also", "still", "never", "often", "always", "now", "recently", "previously", "usually",
            "occasionally", "then", "later", "currently", "frequently", "sometimes", "only", "just", "already"}
_COORD = re.compile(r"\b((?:and|but|or)\s+)((?:also|otherwise|still|now|never|currently)\s+)?"
                    r"(denies|reports|has|is|was|complains|notes|takes|drinks|smokes|works|lives|appears|describes|"
                    r"says|states|endorses|admits|uses|feels|recalls|returns|presents|undergoes|does)\b")
_ED_ADJECTIVES = {"tired", "worried", "concerned", "married", "scared", "depressed", "confused", "interested",
                  "pregnant", "divorced", "retired", "unemployed", "employed", "embarrassed", "frustrated"}
_NOT_VERBS = {"this", "his", "as", "has", "is", "was", "always", "perhaps", "thus", "its", "yes", "less",
              "unless", "across", "plus", "us", "various", "previous", "serious", "analysis", "status"}
_OPEN_NOUN = re.compile(r"\b(man|woman|boy|girl|male|female|gentleman|lady)\b", re.I)
_NOUN = re.compile(r"\b(man|woman|boy|girl|gentleman|lady)\b", re.I)
_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|'s")
_FOLLOW_OBJECT = re.compile(r"^\s*(?:[.,;:!?)]|$|\w{2,}ly\b|a\b|an\b|the\b|some\b|any\b|and\b|or\b|to\b|with\b|"
                            r"for\b|in\b|on\b|at\b|from\b|"
                            r"that\b|as\b|about\b|by\b|after\b|before\b|when\b|if\b|because\b|since\b|"
                            r"again\b|home\b|up\b|down\b|off\b|out\b|back\b|over\b)")


def _case(word: str, like: str) -> str:
    return word[0].upper() + word[1:] if like[:1].isupper() else word


def _plural_verb(w: str) -> str | None:
    lw = w.lower()
    if lw in _PLURAL:
        return _PLURAL[lw]
    if lw in _NOT_VERBS or not lw.endswith("s") or len(lw) < 3 or lw.endswith("ss") or lw.endswith("us"):
        return None
    if lw.endswith("ies") and len(lw) > 4:
        return w[:-3] + "y"
    if re.search(r"(?:sh|ch|x|z|o)es$", lw):
        return w[:-2]
    return w[:-1]


def neutralise(question: str, race_terms: Sequence[str] = ()) -> tuple[str, list[str]]:
    """Seed 001 A.5, rule-based: (neutral question, changes made).

    The final question sentence is neutralised too (A.5's own example turns
    "his ear" into "their ear" throughout); numbers and clinical words are
    never touched. ``race_terms`` (e.g. ``selection.yaml``'s dialog race
    terms, plus "white" and "black") are removed from the opening noun
    phrase only ("a 45-year-old African American man" → "a 45-year-old
    patient"), where they describe the patient.
    """
    changes: list[str] = []
    q = question
    end = perturb.opening_noun_end(q)
    if end is not None:
        start = _text.sentence_spans(q)[0][0]
        opening = q[start:end]
        m = None
        for m in _OPEN_NOUN.finditer(opening):
            pass
        if m is not None:
            new_open = opening[:m.start()] + "patient" + opening[m.end():]
            for t in sorted(race_terms, key=len, reverse=True):
                new_open, n = re.subn(r"(?i)\b" + re.escape(t) + r"\s+(?=\S)", "", new_open)
                if n:
                    changes.append(f"removed '{t}'")
            new_open = re.sub(r"\b([Aa])n(\s+)(?=[^aeiouAEIOU\d])", r"\1\2", new_open)   # "an patient" → "a patient"
            changes.append(f"'{m.group(0)}' → 'patient' (opening)")
            q = q[:start] + new_open + q[end:]

    def noun(mm: re.Match) -> str:
        changes.append(f"'{mm.group(0)}' → 'patient'")
        return _case("patient", mm.group(0))

    q = _NOUN.sub(noun, q)   # later mentions ("the man", "a 61-year-old man" after a clause)
    out, pos = [], 0
    tokens = list(_WORD.finditer(q))
    i = 0
    while i < len(tokens):
        t = tokens[i]
        w = t.group(0)
        lw = w.lower()
        rep = None
        if lw in ("he", "she"):
            rep = _case("they", w)
            # the verb after the subject (an adverb may stand between)
            j = i + 1
            adv = tokens[j].group(0).lower() if j < len(tokens) else ""
            if (adv in _ADVERBS or (adv.endswith("ly") and len(adv) > 4)) and tokens[j].start() - t.end() <= 1:
                j += 1
            if j < len(tokens) and re.fullmatch(r"\s*", q[tokens[j - 1].end():tokens[j].start()]):
                v = tokens[j].group(0)
                pv = _plural_verb(v)
                if pv is not None and pv != v:
                    out.append(q[pos:t.start()] + rep + q[t.end():tokens[j].start()] + pv)
                    changes.append(f"'{w} … {v}' → '{rep} … {pv}'")
                    pos = tokens[j].end()
                    i = j + 1
                    continue
        elif lw in ("he's", "she's"):   # "he's had" → "they've had", "she's tired" → "they're tired"
            nxt = tokens[i + 1].group(0).lower() if i + 1 < len(tokens) else ""
            perfect = (nxt.endswith("ed") and nxt not in _ED_ADJECTIVES) or nxt in (
                "had", "been", "got", "gone", "done", "seen", "taken", "felt", "lost", "never", "always")
            rep = _case("they've" if perfect else "they're", w)
        elif lw == "her":
            rep = _case("them" if _FOLLOW_OBJECT.match(q[t.end():]) else "their", w)
        elif lw in _PRONOUNS:
            rep = _case(_PRONOUNS[lw], w)
        if rep is not None:
            out.append(q[pos:t.start()] + rep)
            changes.append(f"'{w}' → '{rep}'")
            pos = t.end()
        i += 1
    out.append(q[pos:])
    q = "".join(out)
    # a second verb of the same subject: "They reported pain but otherwise denies fever"
    spans = _text.sentence_spans(q)
    for a, b in reversed(spans):
        sent = q[a:b]
        if not re.match(r"\W*They\b", sent):
            continue

        def coord(mm: re.Match) -> str:
            v = mm.group(3)
            pv = _plural_verb(v)
            changes.append(f"'{mm.group(0)}' → second verb of 'They' made plural")
            return mm.group(1) + (mm.group(2) or "") + pv

        sent = _COORD.sub(coord, sent)
        q = q[:a] + sent + q[b:]
    return q, changes


def neutral_vignettes(items: pd.DataFrame, flags: pd.DataFrame, race_terms: Sequence[str], n: int | None,
                      seed: int, max_chars: int | None = None) -> pd.DataFrame:
    """The vignettes of the agent loop: the items the FairMedQA screen keeps
    (``flags`` from :func:`selection.fairmedqa_screen`), at most
    ``max_chars`` long (a CPU budget: the Fusion-Agent rewrites the whole
    vignette), in a seeded random order, the first ``n`` (None: all), each
    neutralised. Columns: item_id, original, question (neutral), options,
    answer, answer_idx, changes (list), problems (list; such vignettes are
    kept and shown, the notebook counts them)."""
    keep = set(flags.loc[~flags["excluded"], "item_id"])
    pool = items[items["item_id"].isin(keep)]
    if max_chars:
        pool = pool[pool["question"].str.len() <= max_chars]
    pool = pool.sample(frac=1.0, random_state=seed)
    pool = pool if n is None else pool.head(n)
    rows = []
    for it in pool.itertuples(index=False):
        q, changes = neutralise(it.question, race_terms)
        rows.append({"item_id": it.item_id, "original": it.question, "question": q, "options": it.options,
                     "answer": it.answer, "answer_idx": it.answer_idx, "changes": changes,
                     "problems": neutral_problems(it.question, q)})
    return pd.DataFrame(rows, columns=["item_id", "original", "question", "options", "answer", "answer_idx",
                                       "changes", "problems"])


def neutralisation_summary(v: pd.DataFrame) -> pd.DataFrame:
    """Counts for the notebook: vignettes, changed, replacements by kind,
    vignettes with a problem left."""
    kinds = v["changes"].explode().dropna().str.extract(r"'([^']*)' →")[0].str.lower()
    kinds = kinds.replace({"he": "he/she", "she": "he/she"})
    rows = [("vignettes", len(v)), ("changed", int((v["original"] != v["question"]).sum())),
            ("replacements", int(v["changes"].str.len().sum())),
            ("with a problem left", int((v["problems"].str.len() > 0).sum()))]
    rows += [(f"  replaced '{k}'", int(c)) for k, c in kinds.value_counts().head(8).items()]
    return pd.DataFrame(rows, columns=["what", "value"])


_GENDERED = re.compile(r"\b(?:he|she|him|his|her|hers|himself|herself|man|woman|boy|girl|gentleman|lady)\b",
                       re.I)


def gendered_left(text_: str) -> list[str]:
    """Gendered words still in a text (a neutral vignette should have none;
    relatives such as "mother" are not counted)."""
    return [m.group(0) for m in _GENDERED.finditer(text_)]


def neutralise_messages(question: str) -> list[dict]:
    """The LLM option: one instruction to rewrite the vignette as A.5 does."""
    return [{"role": "user", "content": prompts.load("fairmedqa_neutralise").format(question=question)}]


_NEUTRAL_WORDS = re.compile(r"\b(?:they|them|their|theirs|themselves|patient)\b", re.I)


def _same_but_pronouns(a: str, b: str) -> bool:
    """The two sentences differ only in gendered/neutral person words and
    in the agreement of a verb ("he was" / "they were")."""
    words = lambda s: _NEUTRAL_WORDS.sub(" ", _GENDERED.sub(" ", s)).split()  # noqa: E731
    wa, wb = words(a), words(b)
    return len(wa) == len(wb) and all(x == y or _plural_verb(x) == y for x, y in zip(wa, wb))


def neutral_problems(original: str, neutral: str) -> list[str]:
    """Why a neutralised vignette cannot be used: gendered words left, the
    question sentence changed beyond the pronouns, or a number lost."""
    problems = []
    left = gendered_left(neutral)
    if left:
        problems.append(f"gendered words left: {', '.join(dict.fromkeys(left))}")
    if not _same_but_pronouns(_text.final_sentence(original), _text.final_sentence(neutral)):
        problems.append("question sentence changed: keep the last sentence, changing only pronouns")
    missing = _text.numbers_missing(original, neutral)
    if missing:
        problems.append(f"numbers changed: keep {', '.join(missing)}")
    return problems
