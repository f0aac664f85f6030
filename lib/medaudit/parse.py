"""Parsing model answers. A response that cannot be parsed is *recorded as
unparsed* with the reason; it is never silently scored as wrong."""
from __future__ import annotations

import re

OK, NO_ANSWER, MULTIPLE, EMPTY = "ok", "no_answer", "multiple", "empty"


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


PARSERS = {"mcq": parse_bracket_letter, "mcq_explain": parse_answer_is}
