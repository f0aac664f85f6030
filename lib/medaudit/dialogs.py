"""Doctor–patient dialogs: turns and de-identification (seed 002 §3).

MTS-Dialog writes turns as ``Doctor: …`` / ``Patient: …`` lines (with a few
misspelt guest labels such as ``Gest_family``); ACI-Bench as ``[doctor] …`` /
``[patient] …``. De-identification replaces names with ``[NAME]`` and removes
age, race/ethnicity and national-origin mentions; every removal is counted so
the reader sees how much each dialog was changed.
"""
from __future__ import annotations

import re

import pandas as pd

from .selection import keyword_regex

_TURN = re.compile(
    r"^[ \t]*(?:\[(?P<b>doctor|patient|patient_guest|doctor_guest|guest\w*)\]"
    r"|(?P<c>Doctor|Patient|G(?:u)?est_\w+))[ \t]*:?[ \t]*",
    re.M | re.I,
)


def speaker_role(label: str) -> str:
    label = label.lower()
    if label == "doctor":
        return "doctor"
    if label == "patient":
        return "patient"
    return "other"


def turns(dialogue: str) -> list[tuple[str, str]]:
    """(role, text) per turn; role is doctor, patient or other."""
    ms = list(_TURN.finditer(dialogue))
    out = []
    for m, nxt in zip(ms, ms[1:] + [None]):
        label = m.group("b") or m.group("c")
        end = nxt.start() if nxt else len(dialogue)
        out.append((speaker_role(label), dialogue[m.end():end].strip()))
    return out


def n_turns(dialogue: str) -> int:
    return len(_TURN.findall(dialogue))


# --------------------------------------------------------------------------
# de-identification

_ONES = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen " \
        "fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMWORD = r"(?:(?:%s)(?:[- ](?:%s))?|%s|a hundred(?: and \w+)?)" % (
    "|".join(_TENS), "|".join(_ONES[:9]), "|".join(_ONES))
_NUMBER = r"(?:\d{1,3}|" + _NUMWORD + r")"
_AGE_RES = [
    re.compile(r"\b" + _NUMBER + r"[- ](?:years?|yrs?)[- ]old\b", re.I),
    re.compile(r"\b" + _NUMBER + r" years? of age\b", re.I),
    re.compile(r"\b(?:aged?|age of)\s+" + _NUMBER + r"\b", re.I),
    re.compile(r"\bturned\s+" + _NUMBER + r"\b", re.I),
    re.compile(r"\b(?:I am|I'm|she is|he is|she's|he's)\s+(" + _NUMBER + r")\b(?=\s*(?:[.,!?]|and|now|$))", re.I),
    re.compile(r"\bin (?:his|her|my|their) (?:early |mid |late |mid-)?(?:twenties|thirties|forties|fifties|sixties|seventies|eighties|nineties|\d0s)\b", re.I),
]
_TITLE_NAME = re.compile(r"\b(Mr|Mrs|Ms|Miss|Dr|Doctor)(\.?)\s+(?!\[)([A-Z][a-z]+(?:[- ][A-Z][a-z]+)?)")
_LOWER_DR = re.compile(r"\b(dr)(\.?)\s+(?!\[)([a-z]+)\b")
_GONE = "\x00"  # marks removed text until the surrounding spaces are tidied
_GONE_BEFORE_PUNCT = re.compile(r"[ \t]*\x00+[ \t]*(?=[,.?!;:])")
_GONE_ELSEWHERE = re.compile(r"[ \t]*\x00+[ \t]*")


def deidentify(dialogue: str, names: list[str] = (), race_terms: list[str] = (),
               origin_terms: list[str] = ()) -> tuple[str, dict[str, int]]:
    """Redact one dialog. Returns (text, counts per kind of change).

    Names (given, e.g. from ACI-Bench metadata, and any capitalised word after
    a title such as "Mr." or "Doctor") become ``[NAME]``; ages, race and
    ethnicity terms and national-origin terms are removed. Speaker labels are
    never touched.
    """
    counts = {"names": 0, "ages": 0, "race": 0, "origin": 0}
    # protect speaker labels by working on the turn bodies only
    pieces, last = [], 0
    for m in _TURN.finditer(dialogue):
        pieces.append(("body", dialogue[last:m.start()]))
        pieces.append(("label", m.group(0)))
        last = m.end()
    pieces.append(("body", dialogue[last:]))

    name_rx = keyword_regex([n for n in names if len(n) > 1]) if names else None
    race_rx = keyword_regex(list(race_terms)) if race_terms else None
    origin_rx = keyword_regex(list(origin_terms)) if origin_terms else None

    out = []
    for kind, s in pieces:
        if kind == "label":
            out.append(s)
            continue
        if name_rx is not None:
            s, n = name_rx.subn("[NAME]", s)
            counts["names"] += n
        s, n = _TITLE_NAME.subn(lambda m: f"{m.group(1)}{m.group(2)} [NAME]", s)
        counts["names"] += n
        s, n = _LOWER_DR.subn(lambda m: f"{m.group(1)}{m.group(2)} [NAME]", s)
        counts["names"] += n
        for rx in _AGE_RES:
            s, n = rx.subn(_GONE, s)
            counts["ages"] += n
        if race_rx is not None:
            s, n = race_rx.subn(_GONE, s)
            counts["race"] += n
        if origin_rx is not None:
            s, n = origin_rx.subn(_GONE, s)
            counts["origin"] += n
        # only the spaces around a removal change; the rest stays as it was
        s = _GONE_ELSEWHERE.sub(" ", _GONE_BEFORE_PUNCT.sub("", s))
        out.append(s)
    return "".join(out), counts


def deidentify_all(dialogs: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """De-identify every dialog and add turn counts, redaction counts and a
    ``keep`` flag (MTS dialogs need at least ``min_turns_mts`` turns)."""
    rows = []
    for rec in dialogs.to_dict("records"):
        names = rec.get("names")
        text, counts = deidentify(rec["dialogue"], names if isinstance(names, list) else [],
                                  cfg.get("race_terms", []), cfg.get("origin_terms", []))
        nt = n_turns(rec["dialogue"])
        short = rec["dataset"] == "mts_dialog" and nt < cfg.get("min_turns_mts", 10)
        rows.append({**rec, "dialogue_deid": text, "turns": nt,
                     **{f"redacted_{k}": v for k, v in counts.items()},
                     "keep": not short})
    return pd.DataFrame(rows)


def deid_counts(d: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: dialogs, dropped for length, kept, and redactions made."""
    g = d.groupby("dataset")
    out = pd.DataFrame({
        "dialogs": g.size(),
        "dropped (< min turns)": g["keep"].apply(lambda k: int((~k).sum())),
        "kept": g["keep"].sum().astype(int),
        "with any redaction": g.apply(lambda x: int((x.filter(like="redacted_").sum(axis=1) > 0).sum()),
                                      include_groups=False),
    })
    for c in ("names", "ages", "race", "origin"):
        out[f"{c} redacted"] = g[f"redacted_{c}"].sum().astype(int)
    return out.reset_index()
