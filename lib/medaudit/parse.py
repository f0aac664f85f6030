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


PARSERS = {"mcq": parse_bracket_letter, "mcq_explain": parse_answer_is, "mcq_letter": parse_index_letter}
