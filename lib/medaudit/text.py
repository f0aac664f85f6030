"""Sentence boundaries in clinical vignettes, character-exact.

MedQA vignettes carry decimals ("2.5 mg", "pH 7.3"), units that end
sentences ("130/95 mm Hg. Which …"), lab tables on their own lines, closing
quotes after the question mark and the odd abbreviation ("approx.", "e.g.").
The splitter works on character offsets so that callers can insert text at a
boundary and leave every other character untouched.
"""
from __future__ import annotations

import re

# Tokens that end in a period without ending a sentence. Units ("mm Hg.",
# "mg/dL.") are *not* listed: in MedQA they end sentences.
ABBREVIATIONS = frozenset(
    "dr mr mrs ms prof st vs e.g i.e approx fig jr sr inc al u.s".split()
)

_CLOSERS = "\"'”’)]"
# a candidate boundary: terminal punctuation, optional closers, whitespace
_TERMINAL = re.compile(r"[.?!][" + re.escape(_CLOSERS) + r"]*(?P<ws>\s+)")
_NEWLINE = re.compile(r"[ \t]*\n\s*")
_OPENERS = "\"'“‘([$"


def _starts_sentence(ch: str) -> bool:
    # any script's capitals: one MedQA item is typed in Cyrillic look-alikes
    return ch.isupper() or ch.isdigit() or ch in _OPENERS


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes a known abbreviation."""
    m = re.search(r"([A-Za-z][A-Za-z.]*)$", text[:dot])
    return bool(m) and m.group(1).lower() in ABBREVIATIONS


def sentence_starts(text: str) -> list[int]:
    """Offsets at which sentences start (the first is the first non-space)."""
    first = len(text) - len(text.lstrip())
    starts = {first} if text.strip() else set()
    for m in _TERMINAL.finditer(text):
        nxt = m.end()
        if nxt >= len(text) or not _starts_sentence(text[nxt]):
            continue
        if text[m.start()] == "." and _is_abbreviation(text, m.start()):
            continue
        starts.add(nxt)
    for m in _NEWLINE.finditer(text):  # a line break always ends a sentence
        if m.end() < len(text) and m.start() > first:
            starts.add(m.end())
    return sorted(starts)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, trailing whitespace excluded."""
    starts = sentence_starts(text)
    spans = []
    for a, b in zip(starts, starts[1:] + [len(text)]):
        seg = text[a:b]
        spans.append((a, a + len(seg.rstrip())))
    return spans


def split_sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


def final_sentence_start(text: str) -> int:
    """Offset of the question sentence.

    That is the last sentence, unless what follows the question is not part of
    it: a parenthetical instruction ("(Round to the nearest whole number.)")
    or a table header line for the options ("$$$ Serum osmolality %%% …").
    Then it is the last sentence ending in "?" or ":" among the final three.
    """
    spans = sentence_spans(text)
    if not spans:
        raise ValueError("text has no sentence")
    last = len(spans) - 1
    for i in range(last, max(-1, last - 3), -1):
        a, b = spans[i]
        if text[a:b].rstrip(_CLOSERS).endswith(("?", ":")):
            return a
    return spans[last][0]


def final_sentence(text: str) -> str:
    return text[final_sentence_start(text):].rstrip()


# Cyrillic look-alikes of Latin letters. One MedQA item (4-option row 41) is
# typed with them ("А 43-уеаr-old mаn"); screens fold them so that its age and
# keywords are found. The raw text is never changed.
_HOMOGLYPHS = str.maketrans("АВЕКМНОРСТХаеорсухіјѕԁһ", "ABEKMHOPCTXaeopcyxijsdh")


def fold_homoglyphs(text: str) -> str:
    return text.translate(_HOMOGLYPHS)
