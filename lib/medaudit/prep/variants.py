"""Checks of an edited vignette against its original, shared by every study
that edits vignettes (the cultural cues of seed 003, the FairMedQA agents,
the open-ended reformulation): what the edit added, removed or respelled,
which option texts or clinical terms it brought in, and whether it touched
the question sentence or appended options.

(The templated counterfactuals of seed 000 have their own invariant check,
:func:`medaudit.prep.perturb.check_variant`, which knows the inserted sentence.)
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable

from medaudit.prep import text as _text

_OPTION_LINE = re.compile(r"(?m)^\s*\(?[A-E][.):]\s+\S")
_OPTIONS_HEADER = re.compile(r"(?i)\b(?:options|answer choices)\s*:")
_CLOSERS = "\"'”’"


def added_text(original: str, variant: str, edit_ratio: float = 0.8, merge_gap: int = 3) -> dict:
    """What the variant adds to the original, by a word-level diff.

    Both texts are split on whitespace (so re-spaced lines do not count);
    :class:`difflib.SequenceMatcher` aligns the words. Inserted words are
    new; a replaced run is new (its original side *removed*) unless the two
    runs are near-identical strings (ratio ≥ ``edit_ratio``: a spelling fix
    such as "catherization" → "catheterization", a dropped stray quote),
    which is an *edit*. Runs of new words separated by at most ``merge_gap``
    unchanged words are merged into one readable passage (a rewritten
    sentence keeps a few of its old words: "The [pain] started suddenly …").

    Returns ``added`` (the passages joined by " "), ``segments`` (the
    passages), ``n_new_words`` (new words only, before merging), ``removed``
    (list) and ``edits`` (list of (old, new)).
    """
    a, b = original.split(), variant.split()
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    spans, removed, edits = [], [], []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        old, new = " ".join(a[i1:i2]), " ".join(b[j1:j2])
        if op == "insert":
            spans.append([j1, j2])
        elif op == "delete":
            removed.append(old)
        elif op == "replace":
            if difflib.SequenceMatcher(None, old, new, autojunk=False).ratio() >= edit_ratio:
                edits.append((old, new))
            else:
                spans.append([j1, j2])
                removed.append(old)
    n_new = sum(j2 - j1 for j1, j2 in spans)
    merged: list[list[int]] = []
    for j1, j2 in spans:
        if merged and j1 - merged[-1][1] <= merge_gap:
            merged[-1][1] = j2
        else:
            merged.append([j1, j2])
    segments = [" ".join(b[j1:j2]) for j1, j2 in merged]
    return {"added": " ".join(segments), "segments": segments, "n_new_words": n_new,
            "removed": removed, "edits": edits}


def _count(pattern: str, text_: str) -> int:
    return len(re.findall(r"(?i)\b(?:" + pattern + ")", text_))


def clinical_terms_added(original: str, variant: str, terms: Iterable[str]) -> list[str]:
    """Term patterns (regex, case-insensitive, at a word start) that occur
    MORE often in the variant than in the original: clinical words the
    augmentation brought in. Counting, not diffing, so that a sentence
    rewritten around an existing "pain" does not flag it."""
    return [t for t in terms if _count(t, variant) > _count(t, original)]


def options_added(original: str, variant: str, options: dict) -> list[str]:
    """Letters of the options whose full text (≥ 4 characters, as words,
    case-insensitive) occurs more often in the variant than in the original."""
    out = []
    for L, opt in options.items():
        o = opt.strip()
        if len(o) < 4:
            continue
        rx = r"(?i)(?<!\w)" + re.escape(o) + r"(?!\w)"
        if len(re.findall(rx, variant)) > len(re.findall(rx, original)):
            out.append(L)
    return out


def _strip_closers(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().rstrip(_CLOSERS).strip()


def edit_report(original: str, variant: str, options: dict, terms: Iterable[str] = ()) -> dict:
    """The checks of one variant against its original.

    * ``same_as_original``: the texts are identical;
    * ``final_changed``: :func:`text.final_sentence` differs character for
      character; ``final_changed_words``: it differs beyond whitespace and
      closing quotes (the first released original ends in a stray ``"``);
    * ``options_appended``: the variant has more lettered option lines
      ("A. …", "(B) …") or "Options:"/"Answer choices:" headers than the
      original, or all but at most one option text newly occurs in it (an
      appended option list);
    * ``added``, ``n_new_words``, ``removed``, ``edits``: :func:`added_text`;
    * ``options_in_added``: letters of the options whose text the variant
      brings in (:func:`options_added`; for review: a cue naming an answer);
    * ``clinical_terms``: :func:`clinical_terms_added` with ``terms``;
    * ``review``: clinical terms or option texts were brought in.
    """
    fo, fv = _text.final_sentence(original), _text.final_sentence(variant)
    opts = options_added(original, variant, options)
    appended = (len(_OPTION_LINE.findall(variant)) > len(_OPTION_LINE.findall(original))
                or len(_OPTIONS_HEADER.findall(variant)) > len(_OPTIONS_HEADER.findall(original))
                or len(opts) >= max(2, len(options) - 1))
    d = added_text(original, variant)
    terms_found = clinical_terms_added(original, variant, terms)
    return {
        "same_as_original": variant == original,
        "final_changed": fo != fv,
        "final_changed_words": _strip_closers(fo) != _strip_closers(fv),
        "options_appended": bool(appended),
        "added": d["added"], "n_new_words": d["n_new_words"],
        "removed": " | ".join(d["removed"]), "edits": "; ".join(f"{o} → {n}" for o, n in d["edits"]),
        "options_in_added": "".join(opts),
        "clinical_terms": ", ".join(terms_found),
        "review": bool(terms_found or opts),
    }
