"""Selecting items: patient age, keyword screens, the seed-000 funnel and the
first automatic pass of the FairMedQA exclusion criteria (seed 001 §3).

Keyword lists are not hard-coded here: they come from ``params/selection.yaml``
so that a reader can see and change them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from medaudit.prep.text import NUMBER_WORDS, fold_homoglyphs, number_value, sentence_spans

_NUM = r"(\d+(?:\.\d+)?|\b" + NUMBER_WORDS + r")"
_UNIT = r"(years?|yrs?|months?|mos?|weeks?|wks?|days?|hours?)"
_AGE_PATTERNS = [
    re.compile(_NUM + r"[- ]" + _UNIT + r"[- ]old\b", re.I),      # 45-year-old, 45 year old, 3-week-old
    re.compile(_NUM + r"\s+" + _UNIT + r"\s+of\s+age\b", re.I),    # 45 years of age
    re.compile(_NUM + r"-(year)-(?=(?:man|woman|boy|girl)\b)", re.I),  # the typo "67-year-woman"
    re.compile(r"\baged?\s+" + _NUM + r"(?:\s+" + _UNIT + r")?\b", re.I),  # aged 45, age 45 (years)
]
_NEWBORN = re.compile(r"\b(newborn|neonate)\b", re.I)
_PER_YEAR = {"y": 1.0, "m": 1 / 12, "w": 7 / 365.25, "d": 1 / 365.25, "h": 1 / (24 * 365.25)}

RELATIVES = set(
    "mother father sister brother son daughter husband wife partner boyfriend girlfriend "
    "grandmother grandfather grandson granddaughter aunt uncle cousin sibling siblings twin "
    "niece nephew friend roommate neighbor neighbour spouse fiance fiancee baby".split()
)
_BROUGHT = re.compile(r"\b(brings|brought|bring|bringing)\s+(in\s+)?(her|his|their)\s*$", re.I)


@dataclass(frozen=True)
class AgeMention:
    """One stated age in a text: in years, the matched text and where it starts, and
    whether it is a relative's rather than the patient's."""
    years: float
    text: str
    start: int
    relative: bool


def age_mentions(text: str) -> list[AgeMention]:
    """Every stated age in ``text`` in order, each marked as a relative's or not.

    A mention is a relative's when the next word is a relation ("his
    30-year-old *mother*"), unless the vignette says the relative was brought
    in ("brings her 3-year-old son"), which makes that person the patient.
    """
    found: dict[int, AgeMention] = {}
    for pat in _AGE_PATTERNS:
        for m in pat.finditer(text):
            if any(m.start() < f.start + len(f.text) and f.start < m.end() for f in found.values()):
                continue
            value = number_value(m.group(1))
            unit = (m.group(2) or "y").lower()[0]
            nxt = re.match(r"[\s,]*([A-Za-z']+)", text[m.end():])
            next_word = nxt.group(1).lower() if nxt else ""
            brought = bool(_BROUGHT.search(text[max(0, m.start() - 40):m.start()]))
            relative = next_word in RELATIVES and not brought
            found[m.start()] = AgeMention(value * _PER_YEAR[unit], m.group(0), m.start(), relative)
    for m in _NEWBORN.finditer(text):
        if not any(f.start <= m.start() < f.start + len(f.text) + 20 for f in found.values()):
            found[m.start()] = AgeMention(0.0, m.group(0), m.start(), False)
    return [found[k] for k in sorted(found)]


def patient_age(text: str) -> float | None:
    """The patient's age in years (first mention that is not a relative's), or None."""
    for m in age_mentions(text):
        if not m.relative:
            return m.years
    return None


# --------------------------------------------------------------------------
# keyword screens


def load_selection(path: str | Path) -> dict:
    """``params/selection.yaml``: the keyword lists of the screens; a missing list is a
    ``ValueError`` naming the file and the fields."""
    path = Path(path)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    need = ["orientation_terms", "religion_terms", "psychiatry_terms", "fairmedqa"]
    missing = [k for k in need if k not in (cfg or {})]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}")
    return cfg


def keyword_regex(terms: list[str]) -> re.Pattern:
    """Case-insensitive whole-word match of any term; a trailing ``*`` is a prefix."""
    parts = []
    for t in terms:
        t = t.strip()
        if t.endswith("*"):
            parts.append(r"\b" + re.escape(t[:-1]) + r"\w*")
        else:
            parts.append(r"\b" + re.escape(t) + r"\b")
    return re.compile("|".join(parts), re.I)


def item_text(items: pd.DataFrame, with_options: bool = True) -> pd.Series:
    """Each item's text the keyword screens read: the question, and with ``with_options``
    its option texts one a line after it."""
    if not with_options:
        return items["question"]
    return items["question"] + "\n" + items["options"].map(lambda o: "\n".join(o.values()))


def first_match(texts: pd.Series, terms: list[str], exclude: list[str] = ()) -> pd.Series:
    """The first matching term per text ('' when none). Phrases in
    ``exclude`` are blanked out first (e.g. "ST depression" before
    matching "depression")."""
    rx = keyword_regex(terms)
    ex = keyword_regex(list(exclude)) if exclude else None
    texts = texts.map(fold_homoglyphs)
    if ex is not None:
        texts = texts.map(lambda s: ex.sub(" ", s))
    return texts.map(lambda s: (m.group(0) if (m := rx.search(s)) else ""))


def negated(text: str, start: int, neg: dict) -> bool:
    """Whether the term at ``start`` of ``text`` sits in a negated clause: a
    cue of ``neg["cues"]`` ("denies", "does not use", "no history of", …)
    earlier in the same sentence, at most ``neg["window"]`` words before
    the term, with no ``neg["terminators"]`` ("but", "endorses", ";", …)
    in between (a NegEx-style scope; Chapman et al. 2001). Seed 000 gives
    no negation rule; the lists are ours, in params/selection.yaml, and
    tested on real items (tests/test_selection.py)."""
    sent = next(((a, b) for a, b in sentence_spans(text) if a <= start < max(b, a + 1)), (0, len(text)))
    before = text[sent[0]:start]
    cues = list(keyword_regex(neg["cues"]).finditer(before))
    if not cues:
        return False
    between = before[cues[-1].end():]
    stops = neg.get("terminators") or []
    words = [t for t in stops if re.search(r"\w", t)]
    if any(t in between for t in stops if not re.search(r"\w", t)) or \
            (words and keyword_regex(words).search(between)):
        return False
    return len(re.findall(r"[A-Za-z0-9']+", between)) <= int(neg.get("window", 8))


def first_affirmed_match(items: pd.DataFrame, terms: list[str], exclude: list[str] = (),
                         neg: dict | None = None) -> pd.Series:
    """:func:`first_match` where a match in a negated clause of the question
    (:func:`negated`) does not count; the options are never negated."""
    if not neg:
        return first_match(item_text(items), terms, exclude)
    rx = keyword_regex(terms)
    ex = keyword_regex(list(exclude)) if exclude else None
    out = []
    for q, o in zip(items["question"], items["options"]):
        q = fold_homoglyphs(q)
        opts = fold_homoglyphs("\n".join(o.values()))
        if ex is not None:
            q, opts = ex.sub(" ", q), ex.sub(" ", opts)
        hit = next((m.group(0) for m in rx.finditer(q) if not negated(q, m.start(), neg)), "")
        if not hit and (m := rx.search(opts)):
            hit = m.group(0)
        out.append(hit)
    return pd.Series(out, index=items.index, dtype=object)


_MALE_PARTNER = re.compile(r"\b(husband|boyfriend|fianc[eé]|male)\b", re.I)
_MALE_PATIENT = re.compile(r"\b(man|male|boy|gentleman|he|his|him)\b", re.I)
_FEMALE_PATIENT = re.compile(r"\b(woman|female|girl|lady|she|her)\b", re.I)


def patient_sex(text: str) -> str | None:
    """"male" / "female" from the first sentence's person noun or pronoun
    ("A 45-year-old man …"), None when it names neither."""
    spans = sentence_spans(text)
    first = text[slice(*spans[0])] if spans else text
    m, f = _MALE_PATIENT.search(first), _FEMALE_PATIENT.search(first)
    if m and (not f or m.start() < f.start()):
        return "male"
    return "female" if f else None


def partner_match(items: pd.DataFrame, cfg: dict) -> pd.Series:
    """The first phrase stating the sex of the patient's partner ("His
    long-standing male partner", "her husband", "sexually active with one
    male partner"; ``partner_sex_terms``, after blanking
    ``partner_sex_exclude`` such as "mother's boyfriend"), '' when none.

    ``cfg["partner_sex"]`` picks the reading of seed 000 §2, "excluding
    questions already mentioning sexual orientation":
    ``same_sex`` (default) counts only a partner of the patient's own sex
    (a stated same-sex partner mentions the orientation the +homo sentence
    states; a husband of a female patient names no orientation term);
    ``any`` counts every stated partner's sex; ``off`` counts none (the
    seed's literal orientation terms only)."""
    rule = cfg.get("partner_sex", "same_sex")
    if rule not in ("any", "same_sex", "off"):
        raise ValueError(f"partner_sex must be any, same_sex or off, not {rule!r}")
    if rule == "off" or not cfg.get("partner_sex_terms"):
        return pd.Series("", index=items.index, dtype=object)
    q = items["question"].map(fold_homoglyphs)
    hits = first_match(q, cfg["partner_sex_terms"], cfg.get("partner_sex_exclude", ()))
    if rule == "same_sex":
        def same(text, hit):
            if not hit:
                return ""
            partner = "male" if _MALE_PARTNER.search(hit) else "female"
            return hit if patient_sex(text) == partner else ""
        hits = pd.Series([same(t, h) for t, h in zip(q, hits)], index=items.index, dtype=object)
    return hits


def screen(items: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Per-item screening columns: age, adult, and the first matching keyword
    for orientation, a stated partner's sex (:func:`partner_match`),
    religion and psychiatry (question and options; a psychiatry or
    substance term in a negated clause of the question, "She does not use
    illicit drugs", does not count: :func:`negated`, ``cfg["negation"]``).
    ``psychiatry_hit`` is the main pool's exclusion (seed 000 §2: the broad
    ``psychiatry_terms``, whatever the subset's terms); ``subset_hit`` the
    term that puts an item in A.4's subset (:func:`psychiatry_terms_key`)."""
    out = items[["item_id"]].copy()
    out["age"] = items["question"].map(fold_homoglyphs).map(patient_age)
    out["adult"] = out["age"].ge(cfg.get("adult_age", 18)).fillna(False).astype(bool)
    full = item_text(items)
    out["orientation_hit"] = first_match(full, cfg["orientation_terms"])
    out["partner_hit"] = partner_match(items, cfg)
    out["religion_hit"] = first_match(full, cfg["religion_terms"], cfg.get("religion_exclude", ()))
    excl, neg = cfg.get("psychiatry_exclude", ()), cfg.get("negation")
    out["psychiatry_hit"] = first_affirmed_match(items, cfg["psychiatry_terms"], excl, neg)
    key = psychiatry_terms_key(cfg)
    out["subset_hit"] = (out["psychiatry_hit"] if key == "psychiatry_terms"
                         else first_affirmed_match(items, cfg[key], excl, neg))
    return out


PSYCHIATRY_SUBSETS = {"broad": "psychiatry_terms", "a4": "psychiatry_a4_terms"}


def psychiatry_terms_key(cfg: dict) -> str:
    """The term list that draws seed 000 A.4's subset: ``psychiatry_subset``
    ``broad`` (``psychiatry_terms``: psychiatry, mood, anxiety, psychosis,
    personality, eating, neurocognitive and substance use; the default) or
    ``a4`` (``psychiatry_a4_terms``: A.4's own wording, "keywords spanning
    neurocognitive conditions and substance use"; the paper profile's)."""
    rule = cfg.get("psychiatry_subset", "broad")
    if rule not in PSYCHIATRY_SUBSETS:
        raise ValueError(f"psychiatry_subset must be one of {sorted(PSYCHIATRY_SUBSETS)}, not {rule!r}")
    return PSYCHIATRY_SUBSETS[rule]


def funnel(items: pd.DataFrame, cfg: dict, n_sample: int | None,
           seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The seed-000 selection, step by step.

    Returns (funnel table, main sample, psychiatry subset). Each funnel row is
    one step with the count remaining after it. The main pool excludes every
    item the broad ``psychiatry_terms`` flag (seed 000 §2: "excluding
    questions already mentioning sexual orientation, religion, or
    psychiatry"), under either subset rule. The psychiatry subset is the
    adult items without orientation/religion mentions that match the
    subset's own terms (seed 000 A.4, :func:`psychiatry_terms_key`; its
    ``psychiatry_hit`` column is the term that drew it): under ``a4`` a part
    of the excluded items, the rest (psychiatry outside A.4's wording) in
    neither.
    """
    s = screen(items, cfg)
    steps = [("all items", np.ones(len(s), bool))]
    keep = np.ones(len(s), bool)

    def step(label, mask):
        nonlocal keep
        keep = keep & mask
        steps.append((label, keep.copy()))

    step("patient age stated", s["age"].notna().to_numpy())
    step(f"adult (age >= {cfg.get('adult_age', 18)})", s["adult"].to_numpy())
    step("no sexual-orientation mention", (s["orientation_hit"] == "").to_numpy())
    step(f"no stated sex of the patient's partner ({cfg.get('partner_sex', 'same_sex')})",
         (s["partner_hit"] == "").to_numpy())
    step("no religion mention", (s["religion_hit"] == "").to_numpy())
    psych = keep & (s["subset_hit"] != "").to_numpy()
    step("no psychiatry / substance-use mention", (s["psychiatry_hit"] == "").to_numpy())
    pool = items[keep]
    if n_sample is not None and n_sample < len(pool):
        sample = pool.sample(n=n_sample, random_state=seed).sort_values("row")
    else:
        sample = pool
    steps.append((f"sampled (seed {seed})", items["item_id"].isin(sample["item_id"]).to_numpy()))
    table = pd.DataFrame({"step": [a for a, _ in steps], "n": [int(m.sum()) for _, m in steps]})
    table["removed"] = (-table["n"].diff()).fillna(0).astype(int)
    broad = psychiatry_terms_key(cfg) == "psychiatry_terms"
    table.loc[len(table)] = ["psychiatry subset (A.4, analysed separately)" if broad else
                             "psychiatry subset (A.4's neurocognitive / substance-use terms, analysed separately)",
                             int(psych.sum()), 0]
    main = sample.merge(s.drop(columns=["orientation_hit", "partner_hit", "religion_hit", "subset_hit"]),
                        on="item_id")
    psych_items = items[psych].merge(s.assign(psychiatry_hit=s["subset_hit"]).drop(columns=["subset_hit"]),
                                     on="item_id")
    return table, main.reset_index(drop=True), psych_items.reset_index(drop=True)


# seed 000 A.4: "a psychiatry-related subset of MedQA-USMLE, comprising 423 questions"; MedQA-USMLE
# 4 options (Jin et al. 2021, as Baker 2023 distributes it): train 10,178 + dev 1,272 + test 1,273
SEED_A4_SUBSET = (423, 12723)


def psychiatry_share(psych: pd.DataFrame, n_all: int) -> pd.DataFrame:
    """The subset's share of the items it was drawn from, beside seed 000
    A.4's 423 of MedQA-USMLE's 12,723: columns selection, n, of, share %,
    vs seed (this share over the seed's; 1 for the seed's row)."""
    seed_share = SEED_A4_SUBSET[0] / SEED_A4_SUBSET[1]
    rows = [("this selection", len(psych), int(n_all)), ("seed 000 A.4", *SEED_A4_SUBSET)]
    t = pd.DataFrame(rows, columns=["selection", "n", "of"])
    share = t["n"] / t["of"]
    return t.assign(**{"share %": (100 * share).round(2), "vs seed": (share / seed_share).round(2)})


def psychiatry_comparison(psych: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """The psychiatry subset (:func:`funnel`'s third frame) against seed 000
    A.4's narrower wording: "a psychiatry-related subset of MedQA-USMLE,
    comprising 423 questions identified via keywords spanning neurocognitive
    conditions and substance use". Per item: our first psychiatry term and the
    first of ``psychiatry_a4_terms`` (neurocognitive or substance use; '' when
    none, i.e. an item ours flags for mood, anxiety, psychosis, personality,
    eating or psychotherapy terms only). ``a4_scope`` is True where both agree."""
    a4 = first_affirmed_match(psych, cfg["psychiatry_a4_terms"], cfg.get("psychiatry_exclude", ()),
                              cfg.get("negation"))
    return pd.DataFrame({"item_id": psych["item_id"].to_numpy(), "psychiatry_hit": psych["psychiatry_hit"].to_numpy(),
                         "a4_hit": a4.to_numpy(), "a4_scope": (a4 != "").to_numpy()})


# --------------------------------------------------------------------------
# FairMedQA exclusion criteria (seed 001 §3), first automatic pass


def fairmedqa_screen(items: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Flags for the three FairMedQA exclusion criteria, with the evidence.

    - ``no_patient_context``: no stated age and no person noun in the opening
      sentence (a case that starts "A junior surgery resident is …" is about
      the professional, even if a patient is mentioned later);
    - ``sex_specific``: a sex-specific condition term in question or options;
    - ``needs_image``: the question points at an image or figure.
    A manual review is still needed (the seed's authors reviewed all items);
    this pass is what a reviewer starts from.
    """
    f = cfg["fairmedqa"]
    person = keyword_regex(f["person_terms"])
    q = items["question"]
    out = items[["item_id"]].copy()
    q = q.map(fold_homoglyphs)
    has_age = q.map(patient_age).notna()
    opening = q.map(lambda t: t[slice(*sentence_spans(t)[0])] if t.strip() else "")
    out["no_patient_context"] = ~has_age & ~opening.str.contains(person)
    out["sex_specific_hit"] = first_match(item_text(items), f["sex_specific_terms"])
    out["image_hit"] = first_match(q, f["image_terms"])
    out["sex_specific"] = out["sex_specific_hit"] != ""
    out["needs_image"] = out["image_hit"] != ""
    out["excluded"] = out[["no_patient_context", "sex_specific", "needs_image"]].any(axis=1)
    return out


def fairmedqa_counts(flags: pd.DataFrame) -> pd.DataFrame:
    """The FairMedQA screen's counts (:func:`fairmedqa_screen`'s flags): items caught by
    each exclusion criterion, excluded by any, and kept."""
    rows = [(c.replace("_", " "), int(flags[c].sum())) for c in
            ("no_patient_context", "sex_specific", "needs_image")]
    rows.append(("excluded by any criterion", int(flags["excluded"].sum())))
    rows.append(("kept for FairMedQA variants", int((~flags["excluded"]).sum())))
    return pd.DataFrame(rows, columns=["criterion", "n"])
