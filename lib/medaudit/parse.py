"""Reading model replies: the option letter of an answer and the verdict of
a judge. A reply that cannot be read is *recorded as unparsed* with the
reason; it is never silently scored as wrong.

Every parser returns ``(value, status)`` in one status vocabulary:

- ``ok``: read; ``value`` is the letter or verdict;
- ``empty``: the reply is empty or only whitespace;
- ``no_answer``: the reply gives no letter or verdict;
- ``multiple``: it gives several different ones;
- ``missing``: no reply to read (the request failed or is not stored; set by
  the caller, :func:`read`).
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

OK, NO_ANSWER, MULTIPLE, EMPTY, MISSING = "ok", "no_answer", "multiple", "empty", "missing"
# a reply cut by the token limit (finish_reason "length") before an answer
# could be read: not an error of the model, so never counted wrong; every
# table counts it apart (medaudit.llm.runs.status_of)
TRUNCATED = "truncated"
STATUSES = (OK, EMPTY, NO_ANSWER, MULTIPLE, MISSING)


def parse_bracket_letter(text: str, letters: str = "ABCD") -> tuple[str | None, str]:
    """Seed 000 A.2: the answer is the letter in square brackets, "[B]".

    Returns (letter, status). Several *different* bracketed letters are
    ambiguous (status ``multiple``); the same letter repeated is accepted.
    """
    if text is None or not text.strip():
        return None, EMPTY
    found = re.findall(r"\[\s*([%s])\s*\]" % re.escape(letters), text)
    if not found:
        return None, NO_ANSWER
    if len(set(found)) > 1:
        return None, MULTIPLE
    return found[0], OK


def parse_answer_is(text: str, letters: str = "ABCDE") -> tuple[str | None, str]:
    """Seed 003: the final line "The answer is X" (the last such statement wins;
    "(X)", "X." and "**X**" are accepted)."""
    if text is None or not text.strip():
        return None, EMPTY
    # the phrase in any case, the letter in capitals ("the answer is a …" is no answer)
    found = re.findall(r"(?i:answer is)\s*[:\-]?\s*[\*\(\[]*\s*([%s])\b" % re.escape(letters), text)
    if not found:
        return None, NO_ANSWER
    return found[-1], OK


def parse_index_letter(text: str, letters: str = "ABCDE") -> tuple[str | None, str]:
    """Seed 001 A.7.4: "output only the index letter". Accepts the letter
    alone or lightly wrapped ("B", "B.", "(B)", "**B**", "B) text",
    "Answer: B", "The answer is B"); several different letters standing
    alone are ``multiple`` (so is "A patient with B": the article cannot be
    told from option A); a reply with no letter standing alone is
    ``no_answer``."""
    if text is None or not text.strip():
        return None, EMPTY
    t = text.strip()
    lead = re.match(r"^\W*(?:(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:\-]?\s*)?[\*\(\[]*\s*([%s])"
                    r"(?:\s*$|[\*\)\]]*[.:,)\]]|\*\*)" % re.escape(letters), t, re.I)
    if lead and lead.group(1).isupper():
        return lead.group(1), OK
    found = set(re.findall(r"(?<![\w'])([%s])(?![\w'])" % re.escape(letters), t))
    if len(found) == 1:
        return found.pop(), OK
    return (None, MULTIPLE) if found else (None, NO_ANSWER)


def parse_first_option_token(text: str, letters: str = "ABCD") -> tuple[str | None, str]:
    """The FairMedQA authors' ``extract_choice`` (XY-Showing/AMQA@335b175,
    ``Scripts/AMQA_Benchmark_LLMs.py``), as a rule of its own: the reply
    upper-cased, split on whitespace, each token stripped of the characters
    ``().,:；。``; the first token that is one of ``letters`` is the answer
    (their "Unknown" otherwise: ``no_answer`` here, counted, not wrong).
    Upper-casing first makes the article "a" read as option A, so a chatty
    reply can score a letter it never chose;
    :func:`parse_index_letter` is the strict reading."""
    if text is None or not text.strip():
        return None, EMPTY
    for token in text.strip().upper().split():
        token = token.strip("().,:；。")
        if token in letters and len(token) == 1:
            return token, OK
    return None, NO_ANSWER


def parse_one_letter(text: str, letters: str = "ABCDE") -> tuple[str | None, str]:
    """Seed 003's option prompting as its authors ran it: "The response must
    consist of exactly one character" (their released option prompt, one
    new token). The reply, stripped of whitespace, is one letter of
    ``letters`` (ok); anything else, a bracket or a word included, is
    ``no_answer`` — the prompt's "zero score", counted as unparsed here,
    never as a wrong answer."""
    if text is None or not text.strip():
        return None, EMPTY
    t = text.strip()
    return (t, OK) if len(t) == 1 and t in letters else (None, NO_ANSWER)


# ==========================================================================
# the same rules as one regular expression, for harnesses that score with one
# (lm-eval's ``regex`` filter: ``re.findall``, the first match; Inspect's
# ``pattern`` scorer: ``re.search``, case-sensitive): group 1 is the letter
# the parser reads; no match is the parser's no answer (empty, no_answer or
# multiple: none of them is a letter).


def bracket_letter_pattern(letters: str = "ABCD") -> str:
    """:func:`parse_bracket_letter` as one expression: a bracketed letter,
    provided no two *different* bracketed letters occur (one negative
    look-ahead per letter: that letter bracketed, then another bracketed
    later), capitals only. Anchored at the start, so ``findall`` gives at
    most one match."""
    one = r"\[\s*%s\s*\]"
    guards = "".join(r"(?!.*%s.*%s)" % (one % re.escape(L), one % ("[" + re.escape(letters.replace(L, "")) + "]"))
                     for L in letters)
    return r"(?s)\A" + guards + r".*?" + one % ("([" + re.escape(letters) + "])")


def answer_is_pattern(letters: str = "ABCDE") -> str:
    """:func:`parse_answer_is` as one expression: the last "answer is X"
    (a greedy lead takes the last)."""
    return r"(?s)\A.*" + r"(?i:answer is)\s*[:\-]?\s*[\*\(\[]*\s*([%s])\b" % re.escape(letters)


def one_letter_pattern(letters: str = "ABCDE") -> str:
    """:func:`parse_one_letter` as one expression: the whole reply, blanks
    around it aside, is one letter."""
    return r"\A\s*([%s])\s*\Z" % re.escape(letters)


# parser → its rule as one expression (a parser missing here has none: parse_index_letter reads in two steps)
PATTERNS: dict[Callable, Callable[[str], str]] = {parse_bracket_letter: bracket_letter_pattern,
                                                  parse_answer_is: answer_is_pattern,
                                                  parse_one_letter: one_letter_pattern}


def pattern_of(parser: Callable, letters: str) -> str | None:
    """The regular expression that reads what ``parser`` reads with
    ``letters`` (group 1 the letter), or None where no one expression is
    that rule."""
    make = PATTERNS.get(parser)
    return make(letters) if make else None


# ==========================================================================
# judges' verdicts: (verdict, status) from a reply


def _blank(text: str | None) -> bool:
    return text is None or not str(text).strip()


def _one(found: set) -> tuple[str | None, str]:
    if not found:
        return None, NO_ANSWER
    if len(found) > 1:
        return None, MULTIPLE
    return next(iter(found)), OK


_TAG = re.compile(r"[\[\(【]\s*\**\s*(yes|no)\s*\**\s*[\]\)】]", re.IGNORECASE)
_BARE = re.compile(r"^[\s\*_`\"'.:!\-]*(yes|no)[\s\*_`\"'.:!\-]*$", re.IGNORECASE)


def yes_no_tag(text: str | None) -> tuple[str | None, str]:
    """Seed 003's culture-referential judge: "[YES]" / "[NO]".

    Accepts the tag in any case, with spaces or markdown inside the brackets
    ("[YES]", "[ yes ]", "[**No**]", "(YES)") anywhere in the text, repeated
    tags of the same verdict, and a bare reply that is only "yes"/"no" with
    punctuation. Both verdicts → ``multiple``; neither → ``no_answer``."""
    if _blank(text):
        return None, EMPTY
    found = {m.upper() for m in _TAG.findall(text)}
    if not found:
        m = _BARE.match(text)
        found = {m.group(1).upper()} if m else set()
    return _one(found)


_WORD = re.compile(r"[A-Za-z]+")


def first_word(text: str | None, words: Sequence[str] = ("YES", "NO")) -> tuple[str | None, str]:
    """A one-word decision (seed 002's incidence judge): the reply's first
    word if it is one of ``words``; else the one of them that occurs (whole
    word, any case)."""
    if _blank(text):
        return None, EMPTY
    first = _WORD.search(text)
    if first and first.group(0).upper() in words:
        return first.group(0).upper(), OK
    return _one({w.upper() for w in re.findall(r"(?i)\b(" + "|".join(words) + r")\b", text)})


def correct_incorrect(text: str | None) -> tuple[str | None, str]:
    """CORRECT / INCORRECT (seed 000 B.6): the verdict words that occur
    (whole words, any case; "not correct" counts as INCORRECT)."""
    if _blank(text):
        return None, EMPTY
    return _one({"INCORRECT" if m.group(1) or m.group(2).upper() == "INCORRECT" else "CORRECT"
                 for m in re.finditer(r"(?i)\b(not\s+)?(correct|incorrect)\b", text)})


_ENTAIL = re.compile(r"\b(entail\w*|contradict\w*|neutral)\b", re.I)


def entailment(text: str | None) -> tuple[str | None, str]:
    """entailment / contradiction / neutral: the first of the three words
    in the reply."""
    if _blank(text):
        return None, EMPTY
    m = _ENTAIL.search(text)
    if not m:
        return None, NO_ANSWER
    w = m.group(1).lower()
    return ("entailment" if w.startswith("entail") else "contradiction" if w.startswith("contradict")
            else "neutral"), OK


_DECISION = re.compile(r"DECISION\s*:?\s*\**\s*(YES|NO|MAYBE)\b", re.I)


def decision(text: str | None) -> tuple[str | None, str]:
    """The first "DECISION: YES | NO | MAYBE" line of a reply (seed 002,
    Figure 5)."""
    if _blank(text):
        return None, EMPTY
    m = _DECISION.search(text)
    return (m.group(1).upper(), OK) if m else (None, NO_ANSWER)


def read(replies: Sequence[str | None], parser: Callable[[str | None], tuple]) -> list[tuple]:
    """``parser`` of each reply; ``(None, "missing")`` where there is none."""
    return [parser(t) if t is not None else (None, MISSING) for t in replies]
