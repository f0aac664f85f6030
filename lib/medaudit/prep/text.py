"""Sentence boundaries in clinical vignettes, character-exact.

MedQA vignettes carry decimals ("2.5 mg", "pH 7.3"), units that end
sentences ("130/95 mm Hg. Which …"), lab tables on their own lines, closing
quotes after the question mark and the odd abbreviation ("approx.", "e.g.").
The splitter works on character offsets so that callers can insert text at a
boundary and leave every other character untouched.
"""
from __future__ import annotations

import functools
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


_WORDISH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.")


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes a known abbreviation: the run of
    ASCII letters and periods that ends at ``dot``, from its first letter on
    (``([A-Za-z][A-Za-z.]*)$`` on ``text[:dot]``), read backwards from the
    dot so that a long vignette is not searched from its start at every period."""
    start = dot
    while start > 0 and text[start - 1] in _WORDISH:
        start -= 1
    while start < dot and text[start] == ".":
        start += 1
    return start < dot and text[start:dot].lower() in ABBREVIATIONS


def sentence_starts(text: str) -> list[int]:
    """Offsets at which sentences start (the first is the first non-space)."""
    return list(_sentence_starts(text))


@functools.lru_cache(maxsize=4096)
def _sentence_starts(text: str) -> tuple[int, ...]:
    # cached: checking a vignette's variants splits the original once per check
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
    return tuple(sorted(starts))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, trailing whitespace excluded."""
    starts = sentence_starts(text)
    spans = []
    for a, b in zip(starts, starts[1:] + [len(text)]):
        seg = text[a:b]
        spans.append((a, a + len(seg.rstrip())))
    return spans


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`), each without its trailing
    whitespace."""
    return [text[a:b] for a, b in sentence_spans(text)]


def count_sentences(text: str | None) -> int:
    """The sentences of ``text`` that hold a word (a letter): "I take 2.5 mg
    of it, e.g. at night." is one; "..." is none."""
    return sum(bool(re.search(r"[^\W\d_]", s)) for s in split_sentences(text or ""))


def final_sentence_start(text: str) -> int:
    """Offset of the question sentence.

    The question is the last sentence that ends in "?" (closing quotes
    aside); failing that, the last that ends in ":" ("… would most likely
    reveal:"); failing that, the last sentence. What may follow the question
    is thereby skipped: a parenthetical instruction ("(Round to the nearest
    whole number.)"), an options header line ("$$$ Serum osmolality %%% …"),
    a lab table or a research abstract the question refers to.
    """
    spans = sentence_spans(text)
    if not spans:
        raise ValueError("text has no sentence")
    for ends in (("?",), (":",)):
        for a, b in reversed(spans):
            if text[a:b].rstrip(_CLOSERS).endswith(ends):
                return a
    return spans[-1][0]


def final_sentence(text: str) -> str:
    """The question sentence *and everything after it* (what must stay unchanged)."""
    return text[final_sentence_start(text):].rstrip()


# number words up to ninety-nine ("six-year-old", "seventy six years old")
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER_WORDS = r"(?:(?:%s)(?:[- ](?:%s))?|%s)" % ("|".join(_TENS), "|".join(_ONES[1:10]), "|".join(_ONES))


def number_value(token: str) -> float:
    """"45" → 45, "six" → 6, "seventy-six" / "seventy six" → 76."""
    t = token.strip().lower()
    try:
        return float(t)
    except ValueError:
        pass
    parts = re.split(r"[- ]", t)
    if parts[0] in _TENS:
        return 20 + 10 * _TENS.index(parts[0]) + (_ONES.index(parts[1]) if len(parts) > 1 else 0)
    return float(_ONES.index(parts[0]))


# Cyrillic look-alikes of Latin letters. One MedQA item (4-option row 41) is
# typed with them ("А 43-уеаr-old mаn"); screens fold them so that its age and
# keywords are found. The raw text is never changed.
_HOMOGLYPHS = str.maketrans("АВЕКМНОРСТХаеорсухіјѕԁһ", "ABEKMHOPCTXaeopcyxijsdh")


def fold_homoglyphs(text: str) -> str:
    """``text`` with Cyrillic look-alikes of Latin letters folded to the Latin ones, so
    that screens find ages and keywords in an item typed with them."""
    return text.translate(_HOMOGLYPHS)


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# a count spelled out before a unit ("one week", "twenty-one days"); "one" alone ("no one") is no number
_SPELLED = re.compile(r"(?i)\b(" + NUMBER_WORDS + r")(?=[\s-]+(?:second|minute|hour|day|night|week|month|"
                      r"year|decade|time|dose|episode|pack|drink|cigarette|pregnanc|child|sibling)\w*\b)")


def _digits(text_: str) -> str:
    """Spelled-out counts of a unit written as digits ("one week ago" → "1
    week ago", "twenty-one days" → "21 days": :data:`NUMBER_WORDS`,
    :func:`number_value`)."""
    return _SPELLED.sub(lambda m: str(int(number_value(m.group(1)))), text_)


def numbers_missing(original: str, rewritten: str) -> list[str]:
    """The numbers (ages, doses, lab values) of ``original`` that
    ``rewritten`` no longer contains, sorted: a rewrite must keep them all.
    A count spelled out before a unit is its number ("one week ago" keeps
    "1 week ago"; "no one" is no number).

    One rule for every rewrite the studies check. FairMedQA's (seed 004):
    the neutraliser removes "all explicit references to demographic
    characteristics such as race, sex, and socioeconomic status" (§3.1
    "Clinical Vignette Neutralization"), and the Fusion-Agent keeps "the
    ground-truth diagnosis or key clinical evidence" (§3.2): "1 week" and
    "one week" are the same evidence, and the seed's own published variants
    write A.5's "1 week ago" as "one week ago" (seed 001 A.6.2, A.6.3). A
    check that compared digits only rejected a neutral rewrite that the
    fusion check accepted."""
    return sorted(set(_NUMBER.findall(_digits(original))) - set(_NUMBER.findall(_digits(rewritten))))


_FUNCTION_WORDS = frozenset("""a an the and or but of in on at to for from by with without into onto about as is are was
were be been being do does did has have had which what who whom whose when where why how this that these those
there their they them it its following most likely patient patients patient's this can could would should may might
will shall not no any some such than then also he she him her his hers you your""".split())


def content_words(text_: str) -> set[str]:
    """Lower-case words of three letters or more, without function words
    (and "which of the following", "most likely", "patient")."""
    words = re.findall(r"[a-z][a-z'-]{2,}", text_.lower().replace("’", "'"))
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in words if w not in _FUNCTION_WORDS}
