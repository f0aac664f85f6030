"""Templated counterfactual vignettes (seed 000 §2, B.1, B.2, B.7; seed 003 control).

The conditions live in ``params/conditions.yaml``; this module only knows how
to place a sentence (stand-alone, before the question sentence, or at the
start) or a relative clause (embedded in the opening noun phrase) so that
every other character of the vignette is left as it was.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ValidationError, model_validator

from medaudit.prep import text as _text
from medaudit.prep.data import FieldProblem, explain

BASE = "base"
Method = Literal["standalone", "embedded"]
# the embedded form's noun (seed 000 B.1): "patient" (the seed's example) | "vignette" (the item's own)
EmbeddedNoun = Literal["patient", "vignette"]
EMBEDDED_NOUNS = ("patient", "vignette")

# person nouns that head the opening noun phrase of a MedQA vignette
PERSON_NOUNS = (
    "man woman boy girl male female patient gentleman lady infant child toddler "
    "newborn neonate adolescent teenager student primigravida multigravida"
).split()
_PERSON = re.compile(r"\b(" + "|".join(PERSON_NOUNS) + r")\b")
_MAX_OPENING_WORDS = 12


class Control(BaseModel):
    """A control condition (seed 003): a fixed ``sentence`` placed at the vignette's
    start or just before its question sentence."""
    sentence: str
    position: Literal["start", "before_final"] = "start"


class ConditionSet(BaseModel):
    """``params/conditions.yaml``: the templates of each placement method, the conditions'
    attributes that fill them, and the control sentences; checked that every template covers
    every condition and that no name repeats or is the base's."""
    templates: dict[str, dict[str, str]]
    conditions: dict[str, dict[str, str]]
    controls: dict[str, Control] = {}

    @model_validator(mode="after")
    def _templates_cover_conditions(self) -> "ConditionSet":
        for method, tpl in self.templates.items():
            for name, attrs in self.conditions.items():
                key = _template_key(tpl, attrs)
                if key is None:
                    raise FieldProblem(
                        f"conditions.{name}",
                        f"condition '{name}' uses attributes {sorted(attrs)} but templates.{method} "
                        f"has no key for them (have {list(tpl)})")
                try:
                    tpl[key].format(**attrs)
                except KeyError as e:
                    raise FieldProblem(f"templates.{method}.{key}",
                                       f"names {e}, which condition '{name}' lacks") from None
        clash = set(self.conditions) & set(self.controls)
        if clash or BASE in self.conditions or BASE in self.controls:
            raise FieldProblem("conditions", f"names must be unique and not '{BASE}': {sorted(clash)}")
        return self

    def names(self) -> list[str]:
        """Every condition name in order: the base, the templated conditions, then the
        controls."""
        return [BASE, *self.conditions, *self.controls]


def _template_key(tpl: dict[str, str], attrs: dict[str, str]) -> str | None:
    for key in tpl:
        if set(key.split("+")) == set(attrs):
            return key
    return None


def load_conditions(path: str | Path) -> ConditionSet:
    """Read and validate a conditions YAML; errors name the file and field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from None
    try:
        return ConditionSet.model_validate(raw)
    except ValidationError as e:
        field, problem = explain(e)
        raise ValueError(f"{path}: field '{field}': {problem}") from None


# --------------------------------------------------------------------------
# placing text


def insert_before_final(vignette: str, sentence: str) -> str:
    """Insert ``sentence`` as its own sentence just before the question sentence."""
    s = _text.final_sentence_start(vignette)
    return vignette[:s] + sentence + " " + vignette[s:]


def insert_at_start(vignette: str, sentence: str) -> str:
    """Insert ``sentence`` as the vignette's first sentence, after any leading whitespace,
    leaving every other character as it was."""
    lead = len(vignette) - len(vignette.lstrip())
    return vignette[:lead] + sentence + " " + vignette[lead:]


def opening_noun_end(vignette: str) -> int | None:
    """Offset just after the person noun heading the opening noun phrase
    ("A 45-year-old *man* presents …"), or None when the first sentence has
    none within its first words."""
    spans = _text.sentence_spans(vignette)
    if not spans:
        return None
    a, b = spans[0]
    if a >= _text.final_sentence_start(vignette):
        return None  # a one-sentence item: the opening is the question itself
    m = _PERSON.search(_text.fold_homoglyphs(vignette), a, b)  # same offsets after folding
    if not m or len(vignette[a:m.start()].split()) > _MAX_OPENING_WORDS:
        return None
    return m.end()


def opening_noun_span(vignette: str) -> tuple[int, int] | None:
    """(start, end) of the person noun(s) heading the opening noun phrase:
    "man" in "A 45-year-old man presents …", the whole "male newborn" in
    "A 3-week-old male newborn is brought …" (a run of person nouns joined by
    single spaces, so a clause never splits it); None as for
    :func:`opening_noun_end`."""
    end = opening_noun_end(vignette)
    if end is None:
        return None
    folded = _text.fold_homoglyphs(vignette)
    a = _PERSON.search(folded, _text.sentence_spans(vignette)[0][0], end).start()   # the match that gave end
    m = _PERSON.match(folded, end + 1)
    while vignette[end:end + 1] == " " and m:
        end = m.end()
        m = _PERSON.match(folded, end + 1)
    return a, end


def embedded_text(clause: str, noun: EmbeddedNoun = "patient") -> str:
    """The text the embedded form puts in the vignette: under the seed's
    reading the noun "patient" and the clause ("patient who identifies as
    homosexual", replacing the vignette's noun), else the clause alone."""
    _check_noun(noun)
    return f"patient {clause}" if noun == "patient" else clause


def _check_noun(noun: str) -> None:
    if noun not in EMBEDDED_NOUNS:
        raise ValueError(f"embedded_noun must be one of {list(EMBEDDED_NOUNS)}, not {noun!r}")


def embed_in_opening(vignette: str, clause: str, noun: EmbeddedNoun = "patient") -> str | None:
    """Seed 000 B.1's embedded form: the identity as a relative clause on the
    opening noun phrase. The seed's example (App. B.1) reads "A 45-year-old
    patient who identifies as homosexual comes to the physician …", so under
    ``noun="patient"`` (the seed's reading, every shipped profile's
    ``embedded_noun``) the vignette's person noun(s) are replaced:
    "A 45-year-old man presents" → "A 45-year-old patient who identifies as
    homosexual presents". Seed 000 §2 also says the perturbation adds the
    identity and changes nothing else; ``noun="vignette"`` is that reading:
    the noun stays ("A 45-year-old man who identifies as homosexual presents"),
    and with it a sex or a pregnancy the vignette states
    (params/conditions.yaml, docs/perturbations.md)."""
    span = opening_noun_span(vignette)
    if span is None:
        return None
    a, end = span
    if embedded_text(clause, noun) != clause:
        return vignette[:a] + embedded_text(clause, noun) + vignette[end:]
    return vignette[:end] + " " + clause + vignette[end:]


# --------------------------------------------------------------------------
# building the variants table


def inserted_text(cs: ConditionSet, condition: str, method: Method) -> str:
    """The text a templated condition inserts under ``method``: its template filled with
    the condition's attributes."""
    attrs = cs.conditions[condition]
    tpl = cs.templates[method]
    return tpl[_template_key(tpl, attrs)].format(**attrs)


def make_variant(vignette: str, cs: ConditionSet, condition: str,
                 method: Method = "standalone", noun: EmbeddedNoun = "patient") -> tuple[str | None, str]:
    """(variant text or None, inserted text) for one condition; ``noun``: the
    embedded form's reading (:func:`embed_in_opening`)."""
    if condition == BASE:
        return vignette, ""
    if condition in cs.controls:
        c = cs.controls[condition]
        place = insert_at_start if c.position == "start" else insert_before_final
        return place(vignette, c.sentence), c.sentence
    if condition not in cs.conditions:
        raise KeyError(f"unknown condition '{condition}'; defined: {cs.names()}")
    ins = inserted_text(cs, condition, method)
    if method == "standalone":
        return insert_before_final(vignette, ins), ins
    return embed_in_opening(vignette, ins, noun), embedded_text(ins, noun)


def make_variants(items: pd.DataFrame, cs: ConditionSet, conditions: list[str] | None = None,
                  methods: list[str] = ("standalone",), noun: EmbeddedNoun = "patient") -> pd.DataFrame:
    """One row per (item, condition, method) with the variant's question text.

    Base and controls appear once (method ``standalone``; they do not depend on
    the insertion method). Rows whose text could not be built (no opening noun
    phrase for the embedded form) have ``ok`` False and a ``problem``.
    ``noun``: the embedded form's reading (profile key ``embedded_noun``,
    :func:`embed_in_opening`).
    """
    _check_noun(noun)
    conditions = list(conditions) if conditions is not None else cs.names()
    unknown = [c for c in conditions if c not in cs.names()]
    if unknown:
        raise KeyError(f"unknown condition(s) {unknown}; defined: {cs.names()}")
    rows = []
    for item in items.itertuples(index=False):
        for cond in conditions:
            for method in methods:
                if (cond == BASE or cond in cs.controls) and method != "standalone":
                    continue
                new, ins = make_variant(item.question, cs, cond, method, noun)
                rows.append({
                    "item_id": item.item_id, "condition": cond, "method": method,
                    "question": new, "inserted": ins, "ok": new is not None,
                    "problem": "" if new is not None else "no opening noun phrase before the question sentence",
                })
    return pd.DataFrame(rows)


def check_variant(original: str, variant: str, inserted: str) -> list[str]:
    """Invariants of a templated variant; returns the broken ones (empty if fine).

    - the question (final) sentence is unchanged,
    - removing the inserted text (and the one space that joins it) gives the
      original back character for character (for the embedded form under
      the seed's reading, "patient who …": putting the original's opening
      noun(s) back in its place does),
    - for a stand-alone sentence: exactly one more sentence.
    """
    problems = []
    if _text.final_sentence(variant) != _text.final_sentence(original):
        problems.append("final sentence changed")
    restored = None
    for joined in (inserted + " ", " " + inserted):
        i = variant.find(joined)
        if i >= 0 and variant[:i] + variant[i + len(joined):] == original:
            restored = True
            break
    span = opening_noun_span(original)
    if not restored and span and variant == original[:span[0]] + inserted + original[span[1]:]:
        restored = True
    if not restored:
        problems.append("other characters changed")
    if inserted.endswith((".", "?", "!")):
        if len(_text.split_sentences(variant)) != len(_text.split_sentences(original)) + 1:
            problems.append("not exactly one sentence added")
    return problems


def describe_conditions(cs: ConditionSet, conditions: list[str], methods: list[str],
                        noun: EmbeddedNoun = "patient") -> pd.DataFrame:
    """What each condition inserts, per method (the table a reader checks first);
    the embedded form under the seed's reading says it replaces the opening noun."""
    rows = []
    for cond in conditions:
        if cond == BASE:
            rows.append({"condition": cond, **{m: "(original question)" for m in methods}})
        elif cond in cs.controls:
            c = cs.controls[cond]
            rows.append({"condition": cond, **{m: f"{c.sentence}  [{c.position}]" for m in methods}})
        else:
            rows.append({"condition": cond, **{m: _described(inserted_text(cs, cond, m), m, noun) for m in methods}})
    return pd.DataFrame(rows)


def _described(text: str, method: str, noun: EmbeddedNoun) -> str:
    if method != "embedded" or embedded_text(text, noun) == text:
        return text
    return embedded_text(text, noun) + "  [replaces the opening noun]"


def check_variants(items: pd.DataFrame, variants: pd.DataFrame) -> pd.DataFrame:
    """Run :func:`check_variant` on every built variant; adds a ``problems`` column."""
    original = items.set_index("item_id")["question"]
    out = variants.copy()
    out["problems"] = [
        "; ".join(check_variant(original[r.item_id], r.question, r.inserted)) if r.ok and r.inserted
        else ("" if r.ok else r.problem)
        for r in out.itertuples(index=False)
    ]
    return out


def check_summary(checked: pd.DataFrame) -> pd.DataFrame:
    """Per condition and method: variants built, and how many broke an invariant."""
    g = checked.groupby(["method", "condition"], sort=False)
    return pd.DataFrame({
        "items": g.size(),
        "built": g["ok"].sum().astype(int),
        "not built": g["ok"].apply(lambda ok: int((~ok).sum())),
        "invariant broken": g.apply(lambda x: int((x["ok"] & (x["problems"] != "")).sum()),
                                    include_groups=False),
    }).reset_index()


def show_insertion(variant: str, inserted: str, context: int = 90) -> str:
    """The variant around its insertion, the inserted text in «guillemets»."""
    if not inserted:
        return "…" + variant[-context:]
    i = variant.find(inserted)
    a, b = max(0, i - context), min(len(variant), i + len(inserted) + context)
    return (("…" if a else "") + variant[a:i] + "«" + inserted + "»" + variant[i + len(inserted):b]
            + ("…" if b < len(variant) else ""))
