"""The cultural-cue study (seed 003: Rezaei & Shakeri 2026, "Counterfactual
Cultural Cues Reduce Medical QA Accuracy in LLMs: Identifier vs Context
Effects").

Sections, in the order a notebook uses them:

1. **Variants.** :func:`variants` reads the 150 released items (5 options
   A–E), rebuilds the unreleased neutral control from the sentence of
   ``params/conditions.yaml`` (``controls.neutral``, at the start), names the
   9 released variants per item ``"<culture>:<cue>"`` (names from
   ``params/cultures.yaml``) and maps every item onto the 4-option MedQA file
   by question text and option *text* (the letters differ). Each option form
   has its own item ids (``cult-007``, ``cult4-007``); :func:`answer_plan`
   lists the answers to draw and :func:`stored_responses` reads back every
   stored answer, generated or imported, of any model.
2. **Checks.** :func:`check_variants` diffs each variant against its original
   (word level, :mod:`difflib`), extracts the added text, and flags changed
   question sentences, appended options and clinical words in the added text.
3. **Metrics.** Accuracy per condition after the seed's drop of incomplete
   outputs (:func:`medaudit.stats.scoring.drop_incomplete`), Δ against Original and Neutral averaged
   over cultures (eq. 2), Cochran's Q (:func:`cochran_q`), flip and harmful
   flip (eqs. 3–4), accuracy with Clopper–Pearson intervals (Fig. 3; the
   seed's bootstrap does not cover at our n), Id+Ctx − Original
   with an interval that covers, the exact McNemar test and a verdict
   (Fig. 5) and the component analysis (Fig. 4).
4. **Judge.** The culture-referential [YES]/[NO] rubric
   (``prompts/cultural_judge_*.txt``), the requests per explanation
   (:func:`judge_jobs`), a robust parser joined back to the answers
   (:func:`judge_labels`) and the Table III aggregation.
5. **Diversity.** Mean pairwise cosine similarity of the added texts with
   all-MiniLM-L6-v2 (mean pooling + L2 normalisation, as sentence-transformers
   does, without needing that package).
6. **Tables and figures** shaped like Tables I–V and Figs. 3–5.
7. **Augmenting other MedQA items.** An LLM writes an identity phrase and a
   context sentence per item and culture, with examples from the released
   variants (:func:`augment_jobs`); :func:`piece_problems` checks them for
   the loop of :mod:`medaudit.studies.agents`; :func:`compose_variants` places the
   accepted ones (Id, Ctx, Id+Ctx) with :mod:`medaudit.prep.perturb`, so the
   options and the question sentence cannot change.

The study's definitions are one :class:`CulturalConfig`, read from
``params/cultures.yaml`` by :func:`load_config` and passed explicitly to
every function that needs them; no function reads that file by itself. The
functions read only their arguments, except the loaders — :func:`load_config`,
:func:`neutral_sentence` (``params/conditions.yaml``) and :func:`variants`
(the released items and the 4-option MedQA file under ``data/raw/``) — and
two that use shipped resources: :func:`piece_messages` (the prompt templates
of :mod:`medaudit.prompts`) and :func:`diversity` (the MiniLM model, unless
``embed`` is given). The model calls live in the notebook and in
:mod:`medaudit.studies.agents`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Iterable, Literal, Sequence

import numpy as np
import pandas as pd
from pydantic import AfterValidator, Field, NonNegativeInt, PositiveInt, model_validator
from scipy import stats as sstats
from typing_extensions import NotRequired, TypedDict

from medaudit.prep import data as _data
from medaudit.prep import definitions, perturb
from medaudit import paths, prompts
from medaudit.prep.definitions import FieldProblem, Regex
from medaudit.stats import equivalence as _equivalence
from medaudit.stats import intervals as _intervals
from medaudit.stats import paired as _stats
from medaudit.llm.embeddings import minilm_embed
from medaudit.stats.scoring import UNIT_COLS, units_of
from medaudit.stats.testpower import mcnemar_mde, mde_from_se
from medaudit.prep.variants import edit_report
from medaudit.prep import text as _text

# NEUTRAL: seed 003's neutral control (params/conditions.yaml `controls: neutral`: the same added length, no
# identity); not FairMedQA's neutralised vignette (medaudit.studies.fairmedqa.config.NEUTRALISED, demographics removed)
ORIGINAL, NEUTRAL = "original", "neutral"
BASELINES = (ORIGINAL, NEUTRAL)
# the option forms of the items (:func:`variants`): the study's own A–E, and the same questions in 4-option MedQA;
# the profile key cultural_forms takes these names (medaudit.config.CULTURAL_FORMS, kept equal by the tests)
FORMS = ("5opt", "4opt")


# ==========================================================================
# configuration (params/cultures.yaml)


def _no_colon(name: str) -> str:
    if ":" in name:
        raise ValueError("may not contain ':' (a condition is named '<culture name>:<cue name>')")
    return name


_Name = Annotated[str, AfterValidator(_no_colon)]


@definitions.entry
class _Culture(TypedDict):
    name: _Name
    label: str                       # column group of Tables I, II, IV, V
    long: str
    description: NotRequired[str]    # what the augmenter is told about the culture
    identifiers: NotRequired[Regex]  # must match an identity phrase, must not match a context sentence


@definitions.entry
class _Cue(TypedDict):
    name: _Name
    label: str
    long: str
    pieces: NotRequired[list[Literal["identity", "context"]]]   # what the augmenter writes (PIECES)


@definitions.entry
class _Baseline(TypedDict):
    label: str


@definitions.entry
class _KnownIdentical(TypedDict):
    index: NonNegativeInt
    culture: str
    cue: str


@definitions.entry
class _IdentityPiece(TypedDict):
    max_words: PositiveInt
    openers: list[str]


@definitions.entry
class _ContextPiece(TypedDict):
    max_words: PositiveInt


@definitions.entry
class _Augment(TypedDict):
    shots: NotRequired[PositiveInt]
    identity: NotRequired[_IdentityPiece]
    context: NotRequired[_ContextPiece]


class CulturalConfig(definitions.Definitions):
    """``params/cultures.yaml``: culture and cue names, labels, review terms.
    Read once by :func:`load_config` and passed to every function that needs it."""

    cultures: Annotated[dict[str, _Culture], Field(min_length=1)]   # JSON key (t1..t3) -> {name, label, long}
    cues: Annotated[dict[str, _Cue], Field(min_length=1)]           # JSON key (i, c, ic) -> {name, label, long}
    baselines: dict[str, _Baseline]          # original/neutral -> {label}
    neutral_control: str                     # name of the control in params/conditions.yaml
    known_identical: tuple[_KnownIdentical, ...] = Field((), alias="known_identical_to_original")
    n_boot: PositiveInt = 2000
    boot_seed: NonNegativeInt = 0
    clinical_terms: tuple[Regex, ...]
    augment: _Augment = {}

    @model_validator(mode="after")
    def _cross_checks(self) -> "CulturalConfig":
        missing = [b for b in BASELINES if b not in self.baselines]
        if missing:
            raise FieldProblem("baselines", f"lacks {missing} (the tables label both baselines)")
        for group in ("cultures", "cues"):
            names = [v["name"] for v in getattr(self, group).values()]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise FieldProblem(group, f"names {twice} more than once")
        for i, k in enumerate(self.known_identical):
            for part, keys in (("culture", self.cultures), ("cue", self.cues)):
                if k[part] not in keys:
                    raise FieldProblem(f"known_identical_to_original[{i}].{part}",
                                       f"'{k[part]}' is no key of `{part}s` (have: {', '.join(keys)})")
        return self

    def condition(self, culture_key: str, cue_key: str) -> str:
        """Condition name of a released variant: ``"<culture name>:<cue name>"``."""
        return f"{self.cultures[culture_key]['name']}:{self.cues[cue_key]['name']}"

    @property
    def culture_names(self) -> list[str]:
        return [c["name"] for c in self.cultures.values()]

    @property
    def cue_names(self) -> list[str]:
        return [c["name"] for c in self.cues.values()]

    def cultural_conditions(self) -> list[str]:
        """The 9 cultural conditions, culture-major (t1 i, c, ic, t2 …)."""
        return [self.condition(t, q) for t in self.cultures for q in self.cues]

    def conditions(self) -> list[str]:
        """All 11 conditions: original, neutral, then the cultural ones."""
        return [ORIGINAL, NEUTRAL, *self.cultural_conditions()]

    def split(self, condition: str) -> tuple[str | None, str | None]:
        """(culture name, cue name) of a cultural condition; (None, None) otherwise."""
        if ":" not in condition:
            return None, None
        culture, cue = condition.split(":", 1)
        if culture not in self.culture_names or cue not in self.cue_names:
            return None, None
        return culture, cue

    def culture_label(self, name: str) -> str:
        return next(c["label"] for c in self.cultures.values() if c["name"] == name)

    def cue_label(self, name: str, long: bool = False) -> str:
        return next(c["long" if long else "label"] for c in self.cues.values() if c["name"] == name)

    def readable(self, name: str) -> str:
        """A culture, cue, baseline or condition id as a reader meets it in
        words: "southeast_asian" → "Southeast Asian" (the culture's ``long``),
        "id+ctx" → "Id+Ctx" (the cue's ``label``), "original" → "Original",
        "southeast_asian:id+ctx" → "Southeast Asian Id+Ctx"; anything else as
        given. The one mapping is params/cultures.yaml's; CSV columns and
        stored data keep the ids."""
        name = str(name)
        cultures = {c["name"]: c["long"] for c in self.cultures.values()}
        cues = {c["name"]: c["label"] for c in self.cues.values()}
        if name in cultures:
            return cultures[name]
        if name in cues:
            return cues[name]
        if name in BASELINES:
            return name.capitalize()
        culture, cue = self.split(name)
        return f"{cultures[culture]} {cues[cue]}" if culture else name

    def display_labels(self) -> dict[str, str]:
        """Every culture and cultural-condition id with its :meth:`readable`
        label, for the tables a notebook shows (:func:`medaudit.report.exhibits.display_labels`)."""
        ids = [*self.culture_names, *self.cultural_conditions()]
        return {i: self.readable(i) for i in ids}


def load_config(path: str | Path | None = None) -> CulturalConfig:
    """Read and check ``params/cultures.yaml`` (or ``path``); errors name the
    file and the field (:class:`medaudit.prep.definitions.DefinitionError`)."""
    return definitions.load(CulturalConfig, path or paths.params("cultures.yaml"))


def neutral_sentence(config: CulturalConfig, conditions_path: str | Path | None = None) -> str:
    """The neutral control sentence: the control named by ``neutral_control``
    of ``config``, read from ``conditions_path`` (default
    ``params/conditions.yaml``; a loader: it reads that file)."""
    cs = perturb.load_conditions(conditions_path or paths.params("conditions.yaml"))
    control = cs.controls[config.neutral_control]
    if control.position != "start":
        raise ValueError("seed 003 puts the neutral sentence at the start of the question")
    return control.sentence


# ==========================================================================
# 1. variants and items


@dataclass
class CulturalSet:
    """What :func:`variants` builds.

    ``variants``: one row per (item, condition): item_id, index (0-based in
    the JSON), condition, kind (original | neutral | cultural), culture and
    cue (names; None for the baselines), question, inserted (the neutral
    sentence, else ""), source (released | rebuilt), same_as_original,
    problems (perturb.check_variant of the rebuilt neutral), ok.
    ``items``: form ("5opt", "4opt") → items table (item_id, question,
    options, answer, answer_idx, form) for :func:`medaudit.llm.mcq.plan`;
    the 4-option table holds only the items that map without a problem
    (all 150 for the shipped files) and its letters are the 4-option
    file's own, so gold letters must come from the same form. Each form has
    its own item ids (``cult-007`` / ``cult4-007``, :func:`form_item_id`),
    so responses of both forms live side by side in one store and an
    imported response names its form by its item id;
    :func:`form_variants` gives the variants under a form's ids.
    ``mapping``: per item, how it maps onto the 4-option MedQA file.
    ``report``: counts (what, value) for the notebook.
    """

    variants: pd.DataFrame
    items: dict
    mapping: pd.DataFrame
    report: pd.DataFrame


def _baseline_rows(base: dict, question: str, neutral_sentence: str, source: str) -> list[dict]:
    """The original and the rebuilt neutral-control rows of one item's
    variants (the neutral one checked with :func:`perturb.check_variant`)."""
    nq = perturb.insert_at_start(question, neutral_sentence)
    return [{**base, "condition": ORIGINAL, "kind": ORIGINAL, "culture": None, "cue": None, "question": question,
             "inserted": "", "source": source, "same_as_original": True, "problems": ""},
            {**base, "condition": NEUTRAL, "kind": NEUTRAL, "culture": None, "cue": None, "question": nq,
             "inserted": neutral_sentence, "source": "rebuilt", "same_as_original": nq == question,
             "problems": "; ".join(perturb.check_variant(question, nq, neutral_sentence))}]


def variants(items_json_path: str | Path, neutral_sentence: str, forms: Sequence[str] = FORMS,
             *, config: CulturalConfig, medqa4_path: str | Path | None = None) -> CulturalSet:
    """Build the 1,650 variants of seed 003 and the items of each option form.

    * ``original``: the released ``original_question``;
    * ``neutral``: ``neutral_sentence`` inserted at the start
      (:func:`perturb.insert_at_start`), checked with
      :func:`perturb.check_variant` (problems listed per row);
    * ``<culture>:<cue>``: the released t1..t3 × i/c/ic texts, unchanged.
      A released text identical to its original (item 90, t3 identifier) is
      kept and flagged ``same_as_original``.

    ``forms``: "5opt" (the study's own options A–E) and/or "4opt" (the same
    150 questions in the 4-option MedQA file, mapped by question text and
    option text; see :func:`map_four_option`).
    """
    unknown = set(forms) - set(FORMS)
    if unknown:
        raise ValueError(f"unknown form(s) {sorted(unknown)}; use {' and/or '.join(map(repr, FORMS))}")
    loaded = _data.load_cultural_augments(items_json_path).records
    rows = []
    for it in loaded.itertuples(index=False):
        q = it.question
        base = {"item_id": it.item_id, "index": it.index}
        rows += _baseline_rows(base, q, neutral_sentence, source="released")
        for t, tinfo in config.cultures.items():
            for c, cinfo in config.cues.items():
                v = it.variants[(t, c)]
                rows.append({**base, "condition": config.condition(t, c), "kind": "cultural",
                             "culture": tinfo["name"], "cue": cinfo["name"], "question": v,
                             "inserted": "", "source": "released", "same_as_original": v == q,
                             "problems": ""})
    var = pd.DataFrame(rows)
    var["ok"] = True

    items5 = loaded[["item_id", "index", "question", "options", "answer", "answer_idx"]].assign(form="5opt")
    items: dict[str, pd.DataFrame] = {}
    if "5opt" in forms:
        items["5opt"] = items5.reset_index(drop=True)
    mapping = pd.DataFrame()
    if "4opt" in forms:
        medqa4 = _data.load_medqa(medqa4_path or paths.raw(*_data.MEDQA4), 4).records
        mapping = map_four_option(items5, medqa4)
        ok = mapping[mapping["ok"]]
        m4 = medqa4.set_index("row")
        items["4opt"] = pd.DataFrame({
            "item_id": [form_item_id(i, "4opt") for i in ok["item_id"]], "item_id5": ok["item_id"].to_numpy(),
            "index": ok["index"].to_numpy(),
            "question": items5.set_index("item_id").loc[ok["item_id"], "question"].to_numpy(),
            "options": [m4.loc[r, "options"] for r in ok["row4"]],
            "answer": [m4.loc[r, "answer"] for r in ok["row4"]],
            "answer_idx": [m4.loc[r, "answer_idx"] for r in ok["row4"]],
            "form": "4opt", "medqa4_row": ok["row4"].astype(int).to_numpy(),
        })
    return CulturalSet(var, items, mapping, _variant_report(var, mapping, config))


FORM_PREFIX = {"5opt": "cult-", "4opt": "cult4-"}


def form_item_id(item_id: str, form: str) -> str:
    """The id of a released item under an option form: ``cult-007`` (5
    options, the study's) or ``cult4-007`` (the 4-option MedQA file)."""
    return FORM_PREFIX[form] + item_id.split("-", 1)[1]


def form_of(item_id: str) -> str | None:
    """The option form of a released item id (None for other items)."""
    return next((f for f, p in FORM_PREFIX.items() if item_id.startswith(p)), None)


def form_variants(cs: CulturalSet, form: str, item_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """``cs.variants`` under the ids of ``form`` (only the items that form
    has), optionally only the released items ``item_ids`` (5-option ids)."""
    v = cs.variants if item_ids is None else cs.variants[cs.variants["item_id"].isin(list(item_ids))]
    v = v.assign(item_id=[form_item_id(i, form) for i in v["item_id"]])
    return v[v["item_id"].isin(cs.items[form]["item_id"])].reset_index(drop=True)


def stored_responses(frame: pd.DataFrame, cs: CulturalSet, forms: Sequence[str] = ("5opt",),
                     prompt_formats: Sequence[str] | None = None, *, config: CulturalConfig,
                     prefer_keys: Iterable[str] = ()) -> pd.DataFrame:
    """Every stored answer to the items of ``forms`` in the 11 conditions,
    whatever its model and source (generated here or imported), with a
    ``form`` column. ``prompt_formats``: the answer formats to keep (default:
    the multiple-choice formats of :data:`medaudit.llm.formats.FORMATS`; judge verdicts on
    the same items are not answers). Of several runs of one model, the
    current one (:func:`medaudit.llm.store.current`: this notebook's
    ``prefer_keys``, else the most recent settings)."""
    from medaudit.llm.store import current
    from medaudit.llm import formats

    ids = {i: f for f in forms for i in cs.items[f]["item_id"]}
    r = frame[frame["item_id"].isin(list(ids)) & frame["condition"].isin(config.conditions())
              & frame["prompt_format"].isin(list(prompt_formats or formats.names("mcq")))]
    from medaudit.llm.runs import mark_truncated

    r = mark_truncated(current(r, prefer_keys))
    return r.assign(form=r["item_id"].map(ids)).reset_index(drop=True)


# seed 003's authors' explanation budget: ``pipe(chats, max_new_tokens=4096)``
# (HIVE-UofT/Evaluatiog-Cultural-Clues-Medical-LLMs@d8ddddc, Code/*_short_diagnose.py);
# their option scripts ask for one token (``max_new_tokens=1``, the mcq_option format's own limit)
AUTHORS_EXPLAIN_MAX_TOKENS = 4096
# their API model (GPT-5.2): ``client.chat.completions.create(model="gpt-5.2", messages=messages,
# temperature = 0.0)``, no token limit, in both forms (same commit, Code/opena-option-diagnose.ipynb
# and Code/openai-short-diagnose.ipynb)
AUTHORS_API_TEMPERATURE = 0.0
DECODINGS = ("authors", "greedy")


def answer_gen(decoding: str, model: dict, *, temperature: float, top_p: float, max_tokens: int,
               explain_max_tokens: int):
    """(the answers' sampling settings, the explanation budget) under
    ``cultural_decoding``:

    - ``authors``, as seed 003's authors ran their models. A local model
      (a transformers pipeline given only a token budget): its own
      generation config (:func:`medaudit.llm.decoding.own`), one token for an
      option (the format's limit) and 4096 for an explanation. An API model
      (:func:`medaudit.llm.decoding.is_hosted_api`): ``temperature = 0.0`` and no token limit in
      either form (``GenParams.NO_LIMIT``), as their OpenAI notebooks
      called GPT-5.2 (module constants above cite the files).
    - ``greedy``, the profile's ``cultural_temperature`` (0: one answer per
      question whose flips come from the text alone, not from sampling) and
      ``explain_max_tokens``."""
    from medaudit.llm import decoding as _decoding
    from medaudit.llm import GenParams

    if decoding == "authors":
        if _decoding.is_hosted_api(model):
            return GenParams(AUTHORS_API_TEMPERATURE, None, GenParams.NO_LIMIT), GenParams.NO_LIMIT
        return _decoding.own_params(model, max_tokens), AUTHORS_EXPLAIN_MAX_TOKENS
    if decoding == "greedy":
        return GenParams(float(temperature), float(top_p), int(max_tokens)), int(explain_max_tokens)
    raise ValueError(f"cultural_decoding {decoding!r}: use one of {', '.join(DECODINGS)}")


def answer_plan(cs: CulturalSet, *, forms: Sequence[str], formats: Sequence[str], n_items: int | None,
                n_explain: int | None, model: str, backend: str, model_id: str, k: int, seed: int,
                gen, explain_max_tokens: int, strategies: Sequence[str] = ("none",),
                n_arm_items: int | None = None) -> list:
    """Every answer to draw (:func:`medaudit.llm.mcq.plan`): the first
    ``n_items`` items of ``cs`` (None: all) in every condition, under each
    option form and prompt format, ``k`` answers per question, options in
    their A–E order as the seed showed them. The explanation format
    (``mcq_explain``) runs on the first ``n_explain`` of those items only,
    with ``explain_max_tokens``; ``gen`` (a GenParams) holds the sampling
    settings of the option-only format. ``strategies``: the mitigation arms
    (``params/mitigations.yaml``; ``none`` the plain prompt), each stored
    under ``<format>+<strategy>`` (a chain of thought with its own budget),
    the arms other than ``none`` on the first ``n_arm_items`` items (None:
    all of them) in every condition, so that each arm's flips pair with
    the plain prompt's (:func:`arm_flips`)."""
    from dataclasses import replace

    from medaudit.llm import mcq
    from medaudit.llm.mitigations import NONE, format_name

    first = cs.items["5opt"]["item_id"] if "5opt" in cs.items else cs.variants["item_id"].drop_duplicates()
    ids = list(first[: n_items or len(first)])
    out = []
    for strategy in strategies:
        arm_ids = ids if strategy == NONE else ids[: n_arm_items or len(ids)]
        for fmt in formats:
            use = arm_ids[: n_explain or len(arm_ids)] if fmt == "mcq_explain" else arm_ids
            g = replace(gen, max_tokens=explain_max_tokens) if fmt == "mcq_explain" else gen
            for form in forms:
                v = cs.variants[cs.variants["item_id"].isin(use)] if form == "5opt" else form_variants(cs, form, use)
                out += mcq.plan(v, cs.items[form], model=model, backend=backend, model_id=model_id, k=k, seed=seed,
                                gen=g, prompt_format=format_name(fmt, strategy), shuffle=False)
    return out


def _normalise(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().casefold()


def map_four_option(items5: pd.DataFrame, medqa4: pd.DataFrame) -> pd.DataFrame:
    """Map each 5-option item onto the 4-option MedQA file, by TEXT only.

    The question is looked up by its exact text (then by whitespace- and
    case-normalised text); each of the 4 options is matched to the 5-option
    option with the same text. Letters are never compared except to report
    how often they agree. One row per item: item_id, index, row4 (0-based
    line of the 4-option file, NaN if not found), match (exact | normalised
    | none), option_map (4-option letter → 5-option letter), dropped_option
    (the 5-option letter absent from the 4-option form), answer_text,
    answer5_idx, answer4_idx, letters_agree, answer_text_equal, ok, problem.
    """
    exact = {q: r for q, r in zip(medqa4["question"], medqa4["row"])}
    norm = {}
    for q, r in zip(medqa4["question"], medqa4["row"]):
        norm.setdefault(_normalise(q), r)
    m4 = medqa4.set_index("row")
    out = []
    for it in items5.itertuples(index=False):
        rec = {"item_id": it.item_id, "index": it.index, "row4": np.nan, "match": "none",
               "option_map": {}, "dropped_option": None, "answer_text": it.answer,
               "answer5_idx": it.answer_idx, "answer4_idx": None, "letters_agree": False,
               "answer_text_equal": False, "ok": False, "problem": ""}
        r = exact.get(it.question)
        if r is not None:
            rec["match"] = "exact"
        else:
            r = norm.get(_normalise(it.question))
            rec["match"] = "normalised" if r is not None else "none"
        if r is None:
            rec["problem"] = "question not found in the 4-option file"
            out.append(rec)
            continue
        rec["row4"] = r
        row = m4.loc[r]
        problems = []
        by_text = {}
        for L5, t5 in it.options.items():
            by_text.setdefault(_normalise(t5), []).append(L5)
        omap = {}
        for L4, t4 in row["options"].items():
            hits = [L5 for L5, t5 in it.options.items() if t5 == t4] or by_text.get(_normalise(t4), [])
            if len(hits) != 1:
                problems.append(f"4-option {L4} '{t4}' matches {len(hits)} of the 5 options")
            else:
                omap[L4] = hits[0]
        rec["option_map"] = omap
        left = sorted(set(it.options) - set(omap.values()))
        rec["dropped_option"] = left[0] if len(left) == 1 else None
        rec["answer4_idx"] = row["answer_idx"]
        rec["letters_agree"] = row["answer_idx"] == it.answer_idx
        rec["answer_text_equal"] = row["answer"] == it.answer
        if not rec["answer_text_equal"]:
            problems.append(f"answer text differs: 4-option '{row['answer']}' vs 5-option '{it.answer}'")
        elif omap.get(row["answer_idx"]) != it.answer_idx:
            problems.append("the 4-option answer letter does not map to the 5-option answer letter")
        rec["problem"] = "; ".join(problems)
        rec["ok"] = not problems
        out.append(rec)
    return pd.DataFrame(out)


def _variant_report(var: pd.DataFrame, mapping: pd.DataFrame, config: CulturalConfig) -> pd.DataFrame:
    cult = var[var["kind"] == "cultural"]
    neut = var[var["kind"] == NEUTRAL]
    same = cult[cult["same_as_original"]]
    known = {(k["index"], config.cultures[k["culture"]]["name"], config.cues[k["cue"]]["name"])
             for k in config.known_identical}
    found = set(zip(same["index"], same["culture"], same["cue"]))
    rows = [
        ("items", var["item_id"].nunique()),
        ("variants, all conditions", len(var)),
        ("released cultural variants", len(cult)),
        ("rebuilt neutral variants", len(neut)),
        ("rebuilt neutral variants failing check_variant", int((neut["problems"] != "").sum())),
        ("released variants identical to their original", len(same)),
        ("  which (item index, culture, cue)", "; ".join(f"{i} {c} {q}" for i, c, q in sorted(found)) or "none"),
        ("  of the known quirks in cultures.yaml, found", f"{len(known & found)} of {len(known)}"),
        ("  not listed as known quirks", len(found - known)),
    ]
    if len(mapping):
        rows += [
            ("4-option: items mapped by question text", int(mapping["row4"].notna().sum())),
            ("4-option: rows", f"{int(mapping['row4'].min())}–{int(mapping['row4'].max())}"
             if mapping["row4"].notna().any() else "none"),
            ("4-option: rows contiguous in item order",
             bool((mapping["row4"].diff().dropna() == 1).all())),
            ("4-option: answer text equal to the 5-option answer", int(mapping["answer_text_equal"].sum())),
            ("4-option: items mapped without problems", int(mapping["ok"].sum())),
            ("4-option: items with a problem", int((~mapping["ok"]).sum())),
            ("4-option: answer letter the same as in the 5-option form", int(mapping["letters_agree"].sum())),
        ]
    return pd.DataFrame(rows, columns=["what", "value"])


# ==========================================================================
# 2. checking released / generated variants

def check_variants(cs: CulturalSet, config: CulturalConfig, form: str = "5opt") -> pd.DataFrame:
    """:func:`variants.edit_report` on every non-original variant of ``cs``
    (released and rebuilt), against the options of ``form``. One row per
    variant: item_id, index, condition, culture, cue, source, question and
    the check columns."""
    items = cs.items[form].set_index("item_id")
    var = cs.variants
    orig = var[var["kind"] == ORIGINAL].set_index("item_id")["question"]
    rows = []
    for v in var[var["kind"] != ORIGINAL].itertuples(index=False):
        r = edit_report(orig[v.item_id], v.question, items.loc[v.item_id, "options"], config.clinical_terms)
        rows.append({"item_id": v.item_id, "index": v.index, "condition": v.condition, "kind": v.kind,
                     "culture": v.culture, "cue": v.cue, "source": v.source, "question": v.question, **r})
    return pd.DataFrame(rows)


def check_summary(checked: pd.DataFrame) -> pd.DataFrame:
    """Counts per condition (order of appearance): variants, identical to
    the original, final sentence changed (exactly / beyond whitespace and
    quotes), options appended, no added text, flagged for review (clinical
    terms or an option's text brought in), median number of new words."""
    g = checked.groupby("condition", sort=False)
    return pd.DataFrame({
        "variants": g.size(),
        "identical to original": g["same_as_original"].sum().astype(int),
        "final sentence changed": g["final_changed"].sum().astype(int),
        "final sentence changed (words)": g["final_changed_words"].sum().astype(int),
        "options appended": g["options_appended"].sum().astype(int),
        "no added text": g["added"].apply(lambda s: int((s.str.strip() == "").sum())),
        "clinical terms in added text": g["clinical_terms"].apply(lambda s: int((s != "").sum())),
        "option text in added text": g["options_in_added"].apply(lambda s: int((s != "").sum())),
        "flagged for review": g["review"].sum().astype(int),
        "median new words": g["n_new_words"].median(),
    }).reset_index()


# ==========================================================================
# 3. metrics


def delta_avg(acc: pd.DataFrame, config: CulturalConfig, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Eq. 2 per unit and cue: ``mean_acc`` (over cultures), ``delta_orig =
    mean_acc − Acc_original``, ``delta_neutral = mean_acc − Acc_neutral``,
    in percentage points, from an accuracy table (condition, accuracy in %).
    ``n_cultures`` tells how many cultures entered the mean."""
    u = units_of(acc, units)
    out = []
    for key, g in acc.groupby(u, sort=False) if u else [((), acc)]:
        key = key if isinstance(key, tuple) else (key,)
        a = g.set_index("condition")["accuracy"]
        for cue in config.cue_names:
            vals = [a[f"{c}:{cue}"] for c in config.culture_names if f"{c}:{cue}" in a.index]
            m = float(np.mean(vals)) if vals else np.nan
            out.append({**dict(zip(u, key)), "cue": cue, "n_cultures": len(vals), "mean_acc": m,
                        "acc_original": a.get(ORIGINAL, np.nan), "acc_neutral": a.get(NEUTRAL, np.nan),
                        "delta_orig": m - a.get(ORIGINAL, np.nan), "delta_neutral": m - a.get(NEUTRAL, np.nan)})
    return pd.DataFrame(out, columns=[*u, "cue", "n_cultures", "mean_acc", "acc_original", "acc_neutral",
                                      "delta_orig", "delta_neutral"])


def cochran_q(x) -> dict:
    """Cochran's Q for an (n subjects × k conditions) 0/1 matrix.

    ``Q = (k − 1) · (k Σ_j C_j² − T²) / (k T − Σ_i R_i²)`` with C_j the
    column (condition) totals, R_i the row (question) totals and T the
    grand total; under H0 (same success rate in every condition) Q ~ χ² with
    k − 1 df. Rows with a missing value are dropped. When every row is all
    0 or all 1 the denominator is 0 and so is the numerator: there is no
    discordance at all and we return Q = 0, p = 1 (statsmodels returns NaN).
    Returns q, df, p, n, k.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2:
        raise ValueError("x must be a 2-d (subjects × conditions) array")
    x = x[~np.isnan(x).any(axis=1)]
    if not np.isin(x, (0.0, 1.0)).all():
        raise ValueError("x must be 0/1")
    n, k = x.shape
    C, R = x.sum(axis=0), x.sum(axis=1)
    T = R.sum()
    num = (k - 1) * (k * (C ** 2).sum() - T ** 2)
    den = k * T - (R ** 2).sum()
    if den == 0:
        return {"q": 0.0, "df": k - 1, "p": 1.0, "n": n, "k": k}
    q = float(num / den)
    return {"q": q, "df": k - 1, "p": float(sstats.chi2.sf(q, k - 1)), "n": n, "k": k}


def _grid(qt: pd.DataFrame, conditions: Sequence[str], value: str = "correct") -> pd.DataFrame:
    """item × condition table of ``value`` for one unit (complete cases only)."""
    w = qt[qt["condition"].isin(conditions)].pivot(index="item_id", columns="condition", values=value)
    w = w.reindex(columns=list(conditions))
    return w.dropna()


def cochran_table(qt: pd.DataFrame, config: CulturalConfig, references: Sequence[str] = BASELINES,
                  units: Sequence[str] | None = None) -> pd.DataFrame:
    """Cochran's Q per unit, cue and reference baseline, as Tables I–II's
    last column group reads: for cue t and reference r the k = 4 conditions
    are r and the three cultures' t-variants (e.g. original,
    indigenous_canadian:id, middle_eastern_muslim:id, southeast_asian:id),
    on the questions scored in all four. Columns: unit columns, cue,
    reference, n, k, q, df, p, and mde: the smallest Δ Avg (pp)
    these n questions detect with power 0.8 at α = 0.05 under the t test of
    Δ Avg on C − 1 df, its SE clustered by question (:func:`delta_avg_errors`;
    NaN where that SE is 0: every paired difference equal)."""
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        for cue in config.cue_names:
            for ref in references:
                conds = [ref] + [f"{c}:{cue}" for c in config.culture_names]
                w = _grid(g, conds)
                r = cochran_q(w.to_numpy()) if len(w) else {"q": np.nan, "df": len(conds) - 1, "p": np.nan,
                                                           "n": 0, "k": len(conds)}
                e = _stats.paired_delta(np.tile(w[ref].to_numpy(), len(conds) - 1),
                                        np.concatenate([w[c].to_numpy() for c in conds[1:]]),
                                        np.tile(w.index.to_numpy(), len(conds) - 1))
                out.append({**dict(zip(u, key)), "cue": cue, "reference": ref, **r,
                            "mde": 100 * mde_from_se(e["se_cluster"], df=e["n_clusters"] - 1)})
    # no question scored (a model whose every answer was dropped): the same columns, no rows
    return (pd.DataFrame(out) if out
            else pd.DataFrame(columns=[*u, "cue", "reference", "q", "df", "p", "n", "k", "mde"]))


def flip_rates(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
               units: Sequence[str] | None = None) -> pd.DataFrame:
    """Eqs. 3–4 per unit and condition s (neutral and every cultural one).

    * Flip (eq. 3): share of questions whose answer under s differs from the
      answer under the ORIGINAL question, ``Σ 1[ŷ(x_s) ≠ ŷ(x_0)] / N_s``,
      right or wrong alike (a change between two wrong options counts).
    * Harmful flip (eq. 4): among the questions answered CORRECTLY under the
      original, the share answered incorrectly under s:
      ``Σ 1[ŷ(x_0) = y]·1[ŷ(x_s) ≠ y] / Σ 1[ŷ(x_0) = y]``. The denominator is
      the originally-correct questions, not N_s (Table V's values are
      multiples of 1/97 for LLaMA, 97 = 65.99 % of 147).

    N_s: questions with a parsed answer under both the reference and s.
    Columns: unit columns, condition, culture, cue, n, flips, flip (%),
    flip_lo, flip_hi, n_ref_correct, harmful, hflip (%), hflip_lo,
    hflip_hi, and the Stuart–Maxwell test of the answers' marginal
    homogeneity (do the answers shift among the options, not only
    right/wrong; :func:`stats.stuart_maxwell`): stuart_maxwell, sm_df, sm_p.

    Each rate has its 95 % Clopper–Pearson interval in %
    (:func:`rate_interval`, one answer per question; N is ``n`` for the
    flip rate, ``n_ref_correct`` for the harmful one); the coverage
    simulation checks both intervals and the Stuart–Maxwell test's size
    (docs/statistics.md).
    """
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        p = g[g["parsed"]]
        ans = p.pivot(index="item_id", columns="condition", values="parsed_answer")
        cor = p.pivot(index="item_id", columns="condition", values="correct")
        if reference not in ans.columns:
            continue
        for cond in [NEUTRAL, *config.cultural_conditions()]:
            if cond == reference or cond not in ans.columns:
                continue
            both = ans[reference].notna() & ans[cond].notna()
            a0, a1 = ans.loc[both, reference], ans.loc[both, cond]
            c0, c1 = cor.loc[both, reference] == 1, cor.loc[both, cond] == 1
            n, flips = int(both.sum()), int((a0 != a1).sum())
            n0, harm = int(c0.sum()), int((c0 & ~c1).sum())
            culture, cue = config.split(cond)
            sm = _stats.stuart_maxwell(a0, a1)
            out.append({**dict(zip(u, key)), "condition": cond, "culture": culture, "cue": cue,
                        "n": n, "flips": flips, "flip": 100 * flips / n if n else np.nan,
                        **dict(zip(("flip_lo", "flip_hi"), rate_interval((a0 != a1).to_numpy(float)))),
                        "n_ref_correct": n0, "harmful": harm, "hflip": 100 * harm / n0 if n0 else np.nan,
                        **dict(zip(("hflip_lo", "hflip_hi"), rate_interval((~c1[c0]).to_numpy(float)))),
                        "stuart_maxwell": sm["statistic"], "sm_df": sm["df"], "sm_p": sm["p"]})
    return pd.DataFrame(out, columns=[*u, "condition", "culture", "cue", "n", "flips", "flip", "flip_lo", "flip_hi",
                                      "n_ref_correct", "harmful", "hflip", "hflip_lo", "hflip_hi", "stuart_maxwell",
                                      "sm_df", "sm_p"])


def rate_interval(y, clusters=None) -> tuple[float, float]:
    """(lo, hi): the 95 % interval of a rate in % over 0/1 rows ``y``
    (:func:`medaudit.stats.intervals.proportion_interval`: Clopper–Pearson,
    clustered by question where a question has several rows); NaN with no
    row."""
    r = _intervals.proportion_interval(np.asarray(y, dtype=float), clusters)
    return 100 * r["lo"], 100 * r["hi"]


MARGIN = 3.0   # points: the default δ of 07's verdicts (profile key cultural_margin; docs/statistics.md)


def idctx_delta(qt: pd.DataFrame, config: CulturalConfig, cue: str = "id+ctx", reference: str = ORIGINAL,
                margin: float = MARGIN, level: float = 0.95, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 5: accuracy of ``<culture>:<cue>`` minus ``reference``, in
    percentage points, per unit and culture, on the questions scored under
    the reference and all three cultures' ``cue`` variants.

    The seed's percentile bootstrap covered 47–74 % at n = 3 and
    77–90 % at n = 8, and its test rejected a true null too often; the
    interval is now :func:`medaudit.stats.intervals.paired_interval` and the test
    the exact McNemar test (:func:`medaudit.stats.intervals.signflip_p` on one 0/1
    row per question), both holding from 8 questions on (docs/statistics.md).
    Columns: unit columns, culture, condition, n, estimate, ci_lo, ci_hi, p,
    significant (p ≤ 0.05 on at least :data:`medaudit.stats.intervals.MIN_N`
    questions), margin, verdict (:func:`medaudit.stats.equivalence.verdict`), and
    (:func:`stats.paired_delta`, pp) se_paired, se_cluster (by
    question; one row per question here, so equal), rho, b, c (questions
    right only under the reference / only under the variant) and mde, the
    smallest |Δ| these n questions detect with power 0.8 at α = 0.05 under
    the exact McNemar test (exact power at the observed discordance
    (b + c)/n, :func:`medaudit.stats.testpower.mcnemar_mde`; ``inf``: none
    detectable).
    """
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        conds = [reference] + [f"{c}:{cue}" for c in config.culture_names]
        w = _grid(g, conds)
        if not len(w):
            continue
        base = w[reference].to_numpy()
        for c, cond in zip(config.culture_names, conds[1:]):
            y = w[cond].to_numpy()
            e = _stats.paired_delta(base, y, w.index.to_numpy())
            ci = _intervals.paired_interval(base, y, w.index.to_numpy(), level)
            p = _intervals.signflip_p(base, y, w.index.to_numpy())
            lo, hi = 100 * ci["lo"], 100 * ci["hi"]
            b, cc = int(((base == 1) & (y == 0)).sum()), int(((base == 0) & (y == 1)).sum())
            out.append({**dict(zip(u, key)), "culture": c, "condition": cond, "n": len(w),
                        "estimate": 100 * e["delta"], "ci_lo": lo, "ci_hi": hi, "p": p,
                        "significant": bool(p <= 0.05 and _intervals.can_tell(len(w))), "margin": margin,
                        "verdict": _equivalence.verdict(p, lo, hi, margin, len(w)),
                        "se_paired": 100 * e["se_paired"], "se_cluster": 100 * e["se_cluster"], "rho": e["rho"],
                        "b": b, "c": cc, "mde": 100 * mcnemar_mde(len(w), (b + cc) / len(w), test="exact")})
    return pd.DataFrame(out, columns=[*u, "culture", "condition", "n", "estimate", "ci_lo", "ci_hi", "p",
                                      "significant", "margin", "verdict", "se_paired", "se_cluster", "rho", "b", "c",
                                      "mde"])


def delta_avg_errors(qt: pd.DataFrame, config: CulturalConfig, references: Sequence[str] = BASELINES,
                     units: Sequence[str] | None = None, level: float = 0.95, margin: float = MARGIN) -> pd.DataFrame:
    """Eq. 2's Δ Avg (the cue's accuracy averaged over the cultures minus
    the reference's) with the error a reviewer asks for: the
    three cultures' variants of ONE question are not three independent
    questions. Per unit, cue and reference, one row per question × culture,
    d = correct(culture:cue) − correct(reference), on the questions scored
    under the reference and all three cultures; ``delta`` is mean d (pp,
    Δ Avg on those questions); ``se_naive`` treats the rows as independent
    (n = 3 × questions, df n − 1), ``se_cluster`` clusters them by question
    (:func:`stats.paired_delta`: C/(C − 1), df C − 1) and ``design_effect``;
    ``mde``: the Δ that a t test on it detects with power 0.8 at α = 0.05
    (pp; noncentral t on C − 1 df, :func:`medaudit.stats.testpower.mde_from_se`;
    NaN where se_cluster is 0). ``ci_lo`` / ``ci_hi`` the interval
    that covers at these n (:func:`medaudit.stats.intervals.paired_interval`:
    the score interval on the discordant rows with the question design
    effect), ``p`` that interval's own score test of Δ Avg = 0
    (``p_score``): the three cultures' variants carry the same cue phrase
    and move together, and the relabelling test that treats the four
    conditions as exchangeable (:func:`medaudit.stats.intervals.relabel_p`)
    rejected a true Δ Avg = 0 in 7–15.5 % of simulated data sets where they
    shared the cue effect (docs/statistics.md),
    ``margin`` and ``verdict`` (:func:`medaudit.stats.equivalence.verdict`)."""
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        for cue in config.cue_names:
            for ref in references:
                conds = [ref] + [f"{c}:{cue}" for c in config.culture_names]
                w = _grid(g, conds)
                if not len(w):
                    continue
                ya = np.tile(w[ref].to_numpy(), len(conds) - 1)
                yb = np.concatenate([w[c].to_numpy() for c in conds[1:]])
                q = np.tile(w.index.to_numpy(), len(conds) - 1)
                e = _stats.paired_delta(ya, yb, q, level)
                ci = _intervals.paired_interval(ya, yb, q, level)
                p = ci["p_score"]
                lo, hi = 100 * ci["lo"], 100 * ci["hi"]
                out.append({**dict(zip(u, key)), "cue": cue, "reference": ref, "questions": e["n_clusters"],
                            "rows": e["n"], "delta": 100 * e["delta"], "se_naive": 100 * e["se_paired"],
                            "se_cluster": 100 * e["se_cluster"], "design_effect": e["design_effect"],
                            "ci_lo": lo, "ci_hi": hi, "p": p,
                            "mde": 100 * mde_from_se(e["se_cluster"], df=e["n_clusters"] - 1), "margin": margin,
                            "verdict": _equivalence.verdict(p, lo, hi, margin, e["n_clusters"])})
    cols = [*u, "cue", "reference", "questions", "rows", "delta", "se_naive", "se_cluster", "design_effect",
            "ci_lo", "ci_hi", "p", "mde", "margin", "verdict"]
    return pd.DataFrame(out, columns=cols)


def cue_regressions(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
                    units: Sequence[str] | None = None, method: str = "conditional") -> pd.DataFrame:
    """One regression across cues per unit, the question as the matched set
    (:func:`stats.cue_regression`, conditional logit = the
    regression form of McNemar): ``correct ~ cue`` on the reference and
    every cultural condition (the three cultures of a cue pooled; odds
    ratio of each cue against the reference), and ``flip ~ cue`` (the
    answer differs from the reference's) on neutral and the cultural
    conditions, neutral being the reference there. Holm and BH across the
    cues of one unit and outcome. Columns: unit columns, outcome, cue, and
    those of :func:`stats.cue_regression`."""
    u = units_of(qt, units)
    parts = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        p = g[g["parsed"]].copy()
        p["cue"] = [reference if c == reference else (NEUTRAL if c == NEUTRAL else config.split(c)[1])
                    for c in p["condition"]]
        p = p[p["cue"].notna()]
        ref_ans = p[p["condition"] == reference].set_index("item_id")["parsed_answer"]
        p["flip"] = np.where(p["item_id"].isin(ref_ans.index),
                             (p["parsed_answer"] != p["item_id"].map(ref_ans)).astype(float), np.nan)
        for outcome, rows, ref in (("correct", p[p["cue"] != NEUTRAL], reference),
                                   ("flip", p[p["cue"] != reference], NEUTRAL)):
            if rows["cue"].nunique() < 2 or ref not in set(rows["cue"]):
                continue
            r = _stats.cue_regression(rows, outcome, "cue", "item_id", reference=ref, method=method)
            parts.append(r.assign(**dict(zip(u, key)), outcome=outcome))
    if not parts:
        return pd.DataFrame(columns=[*u, "outcome", "cue"])
    out = pd.concat(parts, ignore_index=True)
    return out[[*u, "outcome", *[c for c in out.columns if c not in (*u, "outcome")]]]


def cue_models(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
               units: Sequence[str] | None = None, pooled: bool = True) -> pd.DataFrame:
    """Correctness ~ cue (vs ``reference``; the three cultures of a cue
    pooled, the question as the unit that repeats) by three models side by
    side: the conditional logit and the GEE of
    :func:`stats.cue_regression` and the mixed-effects logit with a random
    intercept per question (:func:`medaudit.stats.mixed.cue_glmm`), one row per
    unit and cue: the odds ratio with its 95% interval under each, p of
    the GLMM with Holm across the cues, σ (the between-question SD of the
    log-odds), n_obs and n_groups. ``pooled``: one more row set per
    prompt format and form with the models pooled (model intercepts fixed,
    a question intercept per model)."""
    from medaudit.stats import mixed

    u = units_of(qt, units)
    p = qt[qt["parsed"]].copy()
    p["cue"] = [c if c in (reference, NEUTRAL) else config.split(c)[1] for c in p["condition"]]
    p = p[p["cue"].notna() & (p["cue"] != NEUTRAL)]
    sets = [(dict(zip(u, k if isinstance(k, tuple) else (k,))), g, None) for k, g in p.groupby(u, sort=False)]
    rest = [c for c in u if c != "model"]
    if pooled and "model" in u and p["model"].nunique() > 1:
        for k, g in p.groupby(rest, sort=False) if rest else [((), p)]:
            k = k if isinstance(k, tuple) else (k,)
            if g["model"].nunique() > 1:
                sets.append(({"model": "pooled: " + ", ".join(pd.unique(g["model"])), **dict(zip(rest, k))},
                             g, "model"))
    out = []
    for key, g, pool in sets:
        if g["cue"].nunique() < 2 or reference not in set(g["cue"]):
            continue
        strata = g.assign(item_id=g["model"] + "|" + g["item_id"]) if pool else g
        fits = {"clogit": _stats.cue_regression(strata, "correct", "cue", "item_id", reference=reference),
                "gee": _stats.cue_regression(strata, "correct", "cue", "item_id", reference=reference, method="gee"),
                "glmm": mixed.cue_glmm(g, "correct", "cue", "item_id", reference=reference, pooled=pool)}
        f = {k: v.set_index("cue") for k, v in fits.items()}
        for cue in f["glmm"].index:
            row = {**key, "cue": cue}
            for k, v in f.items():
                row[f"OR {k}"] = v.loc[cue, "odds_ratio"]
                row[f"{k} lo"], row[f"{k} hi"] = v.loc[cue, "or_lo"], v.loc[cue, "or_hi"]
            gl = f["glmm"].loc[cue]
            out.append({**row, "p glmm": gl["p"], "p glmm Holm": gl["p_holm"], "σ question": gl["sd_question"],
                        "n_obs": int(gl["n_obs"]), "n_groups": int(gl["n_groups"]),
                        "separation": bool(gl["separation"])})
    return pd.DataFrame(out)


def accuracy_intervals(qt: pd.DataFrame, level: float = 0.95, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 3: accuracy (%) per unit and condition, on the questions scored
    in every condition of the unit, with its Clopper–Pearson interval
    (:func:`medaudit.stats.intervals.proportion_interval`; the seed's
    percentile bootstrap covered 33 % at worst on 8 questions and gave
    [100, 100] for eight right answers). Columns: unit columns, condition,
    n, accuracy, ci_lo, ci_hi, method."""
    u = units_of(qt, units)
    out = []
    for key, g in qt.groupby(u, sort=False) if u else [((), qt)]:
        key = key if isinstance(key, tuple) else (key,)
        conds = list(dict.fromkeys(g["condition"]))
        w = _grid(g, conds)
        if not len(w):
            continue
        for cond in conds:
            r = _intervals.proportion_interval(w[cond].to_numpy(), level=level)
            out.append({**dict(zip(u, key)), "condition": cond, "n": len(w), "accuracy": 100 * r["estimate"],
                        "ci_lo": 100 * r["lo"], "ci_hi": 100 * r["hi"], "method": r["method"]})
    return pd.DataFrame(out, columns=[*u, "condition", "n", "accuracy", "ci_lo", "ci_hi", "method"])


def component_table(acc: pd.DataFrame, config: CulturalConfig, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Fig. 4: Δ accuracy vs Original (pp, averaged over cultures) for Id,
    Ctx and Id+Ctx; rows units, columns the cues' long labels."""
    d = delta_avg(acc, config, units)
    u = units_of(d, units)
    d["component"] = [config.cue_label(c, long=True) for c in d["cue"]]
    w = d.pivot_table(index=u, columns="component", values="delta_orig", sort=False)
    return w.reindex(columns=[config.cue_label(c, long=True) for c in config.cue_names])


# ==========================================================================
# 4. the culture-referential judge

# Verbatim from the authors' repository (HIVE-UofT/Evaluatiog-Cultural-Clues-
# Medical-LLMs@d8ddddc, Code/openai-judge.ipynb, `system_prompt` and
# `user_prompt`), kept in prompts/cultural_judge_{system,user}.txt; the paper
# itself (§III.B) only describes the rubric. The user template ends in a
# newline, which prompts.load strips.
JUDGE_SYSTEM = prompts.load("cultural_judge_system")
JUDGE_USER = prompts.load("cultural_judge_user") + "\n"

def judge_messages(explanation: str, question: str | None = None, include_question: bool = False) -> list[dict]:
    """Chat messages asking the judge whether ``explanation`` is culture-referential.

    The rubric is the authors' own (module constants ``JUDGE_SYSTEM``,
    ``JUDGE_USER``, verbatim from their released judge notebook; the paper
    describes it only as flagging explanations "that reference identity or
    region-specific context"). As in their code the judge sees the model's
    explanation ONLY, not the question: the question variant carries the
    cultural cue by design, and showing it would invite YES for every
    cultural variant. ``question`` is accepted so that a caller can key
    requests by it; ``include_question=True`` prepends it as context (a
    deviation from the seed, labelled as such in the prompt).
    """
    if explanation is None:
        explanation = ""
    body = explanation
    if include_question:
        if not question:
            raise ValueError("include_question=True needs the question")
        body = (f"(Context, not to be judged: the question the description answers)\n{question}\n\n"
                f"(Description to judge)\n{explanation}")
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(medical_diagnosis_description=body)}]


def judge_jobs(responses: pd.DataFrame, include_question: bool = False,
               questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One judge request (:func:`medaudit.llm.judging.ask`, format
    ``cultural_judge``) per explanation: ``responses`` are stored rows (key,
    model, prompt_format, item_id, condition, response_text, and form when
    present). Returns item_id, condition, messages (:func:`judge_messages`
    on the whole response text), ``judged_key`` (the response's key, so an
    imported verdict on it serves the job) and the unit columns."""
    r = responses.reset_index(drop=True)
    q = None
    if include_question:
        if questions is None:
            raise ValueError("include_question=True needs the questions (item_id, condition, question)")
        q = questions.set_index(["item_id", "condition"])["question"]
    msgs = [judge_messages(t, q.get((i, c)) if q is not None else None, include_question)
            for t, i, c in zip(r["response_text"], r["item_id"], r["condition"])]
    keep = [c for c in (*UNIT_COLS, "item_id", "condition") if c in r.columns]
    return r[keep].assign(messages=msgs, judged_key=r["key"].to_numpy())


def judge_labels(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The verdicts of :func:`medaudit.llm.judging.ask` on :func:`judge_jobs`, in
    the columns Table III reads: the unit columns, response_key, judge,
    judge_label (YES | NO | None), judge_status and judge_text. Explanations
    no judge was asked about (the stage is off and no verdict is imported)
    are left out; a judge's failed request stays, with status ``missing``."""
    keep = [c for c in (*UNIT_COLS, "item_id", "condition") if c in verdicts.columns]
    out = verdicts[verdicts["judge"].notna()].rename(columns={"judged_key": "response_key", "verdict": "judge_label",
                                   "status": "judge_status", "reply": "judge_text"})
    return out[[*keep, "response_key", "judge", "judge_label", "judge_status", "judge_text"]].reset_index(drop=True)


def judged(kept: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The kept questions (:func:`medaudit.stats.scoring.drop_incomplete`'s table,
    the ``cultural_counting`` rule of every other table) with their judge
    verdicts (:func:`judge_labels`): Table III counts on them, as seed 003
    counts every table on "147 questions per setting" (§III.A). Counted on
    all 150 items instead, 2 of the paper's 12 denominators differ
    (Llama-3.1-8B, MedGemma-4B)."""
    return kept.merge(labels, on=[c for c in labels.columns if c in kept.columns], how="inner")


def judge_counts(qt: pd.DataFrame, config: CulturalConfig, judge_col: str = "judge_label",
                 units: Sequence[str] | None = None) -> pd.DataFrame:
    """Table III per unit and cue, pooled over the three cultures, plus the
    original and neutral rows.

    ``qt`` has the :func:`medaudit.stats.scoring.question_table` columns and ``judge_col`` (YES |
    NO | None for a judge parse failure). Among the questions with a parsed
    answer: ``judged`` (judge parsed), ``judge_failed``, ``grounded`` (judge
    YES: a culturally grounded explanation), ``grounded_wrong`` (of those,
    ending in an incorrect answer) and ``error_rate`` = grounded_wrong /
    grounded in %. Questions without a parsed answer are counted in
    ``unparsed_answer`` and left out (their correctness is unknown);
    ``grounded_unreadable`` counts the YES verdicts among them (a grounded
    explanation whose answer line could not be read).
    """
    u = units_of(qt, units)
    d = qt.copy()
    d["cue"] = [config.split(c)[1] or (c if c in BASELINES else None) for c in d["condition"]]
    d = d[d["cue"].notna()]
    out = []
    for key, g in d.groupby(u + ["cue"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        scored = g[g["parsed"]]
        lab = scored[judge_col]
        yes = scored[lab == "YES"]
        n_yes, n_wrong = len(yes), int((yes["correct"] == 0).sum())
        out.append({**dict(zip(u + ["cue"], key)), "questions": len(g),
                    "grounded_unreadable": int((g.loc[~g["parsed"], judge_col] == "YES").sum()),
                    "unparsed_answer": int((~g["parsed"]).sum()), "judged": int(lab.isin(["YES", "NO"]).sum()),
                    "judge_failed": int((~lab.isin(["YES", "NO"])).sum()), "grounded": n_yes,
                    "grounded_wrong": n_wrong, "error_rate": 100 * n_wrong / n_yes if n_yes else np.nan})
    return pd.DataFrame(out, columns=[*u, "cue", "questions", "unparsed_answer", "judged", "judge_failed",
                                      "grounded", "grounded_wrong", "error_rate", "grounded_unreadable"])


# the contrasts of Table III the seed reads (§III.B: "identity phrases play a major role")
JUDGE_CONTRASTS = {"id − ctx": {"id": 1, "ctx": -1}, "id+ctx − id": {"id+ctx": 1, "id": -1},
                   "id+ctx − ctx": {"id+ctx": 1, "ctx": -1}}


def judged_units(jqt: pd.DataFrame, config: CulturalConfig) -> pd.DataFrame:
    """Table III's judge-based indicators per explanation with a parsed
    answer (``jqt``: :func:`judged`), for :func:`medaudit.stats.judge_error.judge_table`:
    model, prompt_format, form, item_id, cue (original, neutral or the cue,
    cultures pooled), ``grounded`` (judge YES: 1, NO: 0, unread NaN) and
    ``grounded_wrong`` (YES and the answer wrong)."""
    d = jqt[jqt["parsed"]].copy()
    d["cue"] = [config.split(c)[1] or (c if c in BASELINES else None) for c in d["condition"]]
    d = d[d["cue"].notna()]
    y = d["judge_label"].map({"YES": 1.0, "NO": 0.0})
    d["grounded"] = y
    d["grounded_wrong"] = y * (d["correct"] == 0)
    keep = [c for c in ("model", "prompt_format", "form") if c in d.columns]
    return d[[*keep, "item_id", "cue", "grounded", "grounded_wrong"]].reset_index(drop=True)


# ==========================================================================
# 5. diversity of the added text


def mean_pairwise_cosine(emb: np.ndarray) -> float:
    """Mean cosine similarity over all unordered pairs of rows (NaN below 2 rows)."""
    e = np.asarray(emb, dtype=float)
    n = len(e)
    if n < 2:
        return np.nan
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    s = e @ e.T
    return float((s.sum() - np.trace(s)) / (n * (n - 1)))


def diversity(checked: pd.DataFrame, embed: Callable[[Sequence[str]], np.ndarray] | None = None, *,
              config: CulturalConfig) -> pd.DataFrame:
    """Mean pairwise cosine similarity of the added texts of the released
    cultural variants (``checked`` from :func:`check_variants`), per culture
    × cue and per culture over all cues (cue "all": the seed's "within each
    cultural group", reported as 0.3142). Empty added texts (item 90 t3
    identifier) are left out. ``embed`` maps texts to embeddings (default
    :func:`minilm_embed`)."""
    embed = embed or minilm_embed
    c = checked[(checked["kind"] == "cultural") & (checked["added"].str.strip() != "")].reset_index(drop=True)
    emb = embed(list(c["added"]))
    out = []
    for culture in config.culture_names:
        for cue in [*config.cue_names, "all"]:
            m = (c["culture"] == culture) & ((c["cue"] == cue) if cue != "all" else True)
            out.append({"culture": culture, "cue": cue, "n": int(m.sum()),
                        "mean_cosine": mean_pairwise_cosine(emb[m.to_numpy()])})
    return pd.DataFrame(out)


# ==========================================================================
# 6. tables shaped like Tables I–V, and figures


def _row_key(df: pd.DataFrame, units: Sequence[str] | None = None) -> list[str]:
    """Row index columns: "model", plus any other unit column that varies."""
    u = units_of(df, units)
    return [c for c in u if c == "model" or df[c].nunique() > 1] or u[:1]


def _fmt(v: float, digits: int, sign: bool = False) -> str:
    if pd.isna(v):
        return "n/a"
    s = f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"
    return s.replace("-", "−") if sign else s


OPTION_FORMATS = ("mcq_option", "mcq")
"""Option prompting (seed 003 §II.C, Table I), in order of preference: the
authors' one-character prompt (``mcq_option``, their released answers), then
seed 000's bracket prompt (``mcq``)."""


def option_formats(formats_: Sequence[str]) -> list[str]:
    """The option-prompting formats among a profile's ``cultural_formats``."""
    return [f for f in formats_ if f in OPTION_FORMATS]


def option_prompting(df: pd.DataFrame) -> pd.DataFrame:
    """Table I's rows of a frame with ``model`` and ``prompt_format``: each
    model's option-prompting answers, under the authors' prompt where the
    model has them, else under the bracket prompt (:data:`OPTION_FORMATS`),
    so no model has two rows and each row says its format."""
    a = df[df["prompt_format"].isin(OPTION_FORMATS)]
    rank = a["prompt_format"].map({f: i for i, f in enumerate(OPTION_FORMATS)})
    return a[rank == rank.groupby(a["model"]).transform("min")]


def table_accuracy(acc: pd.DataFrame, cochran: pd.DataFrame | None = None, *, config: CulturalConfig,
                   digits: int = 2, alpha: float = 0.05, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Tables I/II: rows models; columns N (questions scored: the most of
    any condition; after :func:`medaudit.stats.scoring.drop_incomplete` every condition has it),
    (Baselines: Orig., Neut.), per
    culture (Id, Ctx, Id+Ctx), "Δ Avg (C1-C3)" per cue as
    "Δ_Orig / Δ_Neutral", and, with ``cochran`` (:func:`cochran_table`),
    "Cochran's Q" per cue as "✓/✓" (p ≤ alpha vs original / vs neutral; "–"
    otherwise); a ✓ resting on fewer than 30 questions carries its n and
    the MDE of Δ Avg ("✓/– (vs Orig.: n=8, MDE 35.2 pts)").
    Accuracies in %, as text with ``digits`` decimals."""
    rk = _row_key(acc, units)
    d = delta_avg(acc, config, units)
    rows = {}
    for key, g in acc.groupby(rk, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        a = g.set_index("condition")["accuracy"]
        r = {**({("N", ""): int(g["n"].max())} if "n" in g.columns else {}),
             ("Baselines", config.baselines[ORIGINAL]["label"]): _fmt(a.get(ORIGINAL), digits),
             ("Baselines", config.baselines[NEUTRAL]["label"]): _fmt(a.get(NEUTRAL), digits)}
        for t in config.cultures.values():
            for q in config.cues.values():
                r[(t["label"], q["label"])] = _fmt(a.get(f"{t['name']}:{q['name']}"), digits)
        dd = d.set_index(rk + ["cue"]) if rk else d.set_index("cue")
        for q in config.cues.values():
            x = dd.loc[(*key, q["name"])]
            r[("Δ Avg (C1-C3)", q["label"])] = (f"{_fmt(x['delta_orig'], digits, True)} / "
                                                f"{_fmt(x['delta_neutral'], digits, True)}")
        if cochran is not None:
            cq = cochran.set_index(rk + ["cue", "reference"])
            for q in config.cues.values():
                marks = []
                notes = []
                for ref in BASELINES:
                    k = (*key, q["name"], ref)
                    sig = k in cq.index and cq.loc[k, "p"] <= alpha
                    marks.append("✓" if sig else "–")
                    note = (_stats.significance_note(int(cq.loc[k, "n"]), cq.loc[k, "mde"] / 100)
                            if sig and "mde" in cq.columns else "")
                    if note:
                        notes.append(f"{'vs Orig.' if ref == ORIGINAL else 'vs Neut.'}: {note}")
                r[("Cochran's Q", q["label"])] = "/".join(marks) + (f" ({'; '.join(notes)})" if notes else "")
        rows[key if len(key) > 1 else key[0]] = r
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    out.index.names = rk
    return out


def arm_flips(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
              margin: float = MARGIN) -> pd.DataFrame:
    """Each mitigation arm's flips beside the plain prompt's, paired.

    ``qt``: question rows (:func:`medaudit.stats.scoring.question_table`) of the
    plain formats and the arms (``<format>+<strategy>``). Per model, option
    form, plain format, arm and condition s, on the questions parsed under
    the reference and s by both the plain prompt and the arm: the flip rate
    (eq. 3) of each, with its Clopper–Pearson interval (``flip plain lo``,
    ``flip plain hi``, …; :func:`rate_interval`), and the change ``Δflip`` = 100 · mean(d), d = flip_arm −
    flip_plain per question (below 0: the arm flips less), with its SE
    clustered by question (:func:`medaudit.stats.paired.paired_delta`), MDE (t on
    C − 1 df, α 0.05, power 0.8), p (the exact sign-flip test), n, the
    covering interval (lo, hi) and the verdict at ``margin`` points
    (:func:`medaudit.stats.equivalence.delta_columns`); the harmful flip rate (eq. 4) of each on the questions both
    answered correctly under the reference, and its change ``Δhflip`` with the same
    errors. ``p_holm``: Δflip's p Holm-adjusted across the arms of a model,
    form, format and condition."""
    from medaudit.llm.mitigations import NONE, split_format

    q = qt.assign(parsed_answer=qt["parsed_answer"].where(qt["parsed"].astype(bool)))   # unparsed: no answer, n 0
    q = q.assign(base=[split_format(f)[0] for f in q["prompt_format"]],
                 strategy=[split_format(f)[1] for f in q["prompt_format"]],
                 form=q["form"] if "form" in q else "5opt")
    rows = []
    for (m, form, base, s), g in q[q["strategy"] != NONE].groupby(["model", "form", "base", "strategy"], sort=False):
        pl = q[(q["model"] == m) & (q["form"] == form) & (q["base"] == base) & (q["strategy"] == NONE)]
        ans = {w: x.pivot(index="item_id", columns="condition", values="parsed_answer")
               for w, x in (("arm", g), ("plain", pl))}
        cor = {w: x.pivot(index="item_id", columns="condition", values="correct")
               for w, x in (("arm", g), ("plain", pl))}
        for cond in [NEUTRAL, *config.cultural_conditions()]:
            if any(c not in ans[w].columns for w in ans for c in (reference, cond)):
                continue
            items = ans["arm"].index.intersection(ans["plain"].index)
            a = {w: ans[w].loc[items, [reference, cond]] for w in ans}
            ok = a["arm"].notna().all(axis=1) & a["plain"].notna().all(axis=1)
            items = items[ok.to_numpy()]
            flip = {w: (ans[w].loc[items, reference] != ans[w].loc[items, cond]).astype(float) for w in ans}
            right = (cor["arm"].loc[items, reference] == 1) & (cor["plain"].loc[items, reference] == 1)
            harm = {w: (cor[w].loc[items[right.to_numpy()], cond] != 1).astype(float) for w in ans}
            culture, cue = config.split(cond)
            row = {"model": m, "form": form, "format": base, "strategy": s, "condition": cond, "culture": culture,
                   "cue": cue}
            for name, d in (("flip", flip), ("hflip", harm)):
                ya, yb, units = d["plain"].to_numpy(), d["arm"].to_numpy(), d["arm"].index.to_numpy()
                row.update({f"{name} plain (%)": 100 * ya.mean() if len(ya) else np.nan,
                            **dict(zip((f"{name} plain lo", f"{name} plain hi"), rate_interval(ya))),
                            f"{name} arm (%)": 100 * yb.mean() if len(yb) else np.nan,
                            **dict(zip((f"{name} arm lo", f"{name} arm hi"), rate_interval(yb))),
                            **_equivalence.delta_columns(ya, yb, units, f"Δ{name}", margin)})
            rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, g in out[out["Δflip p"].notna()].groupby(["model", "form", "format", "condition"], sort=False):
        out.loc[g.index, "p_holm"] = _stats.holm(g["Δflip p"])
    return out


def table_flips(flips: pd.DataFrame, metric: str, config: CulturalConfig, digits: int = 2,
                units: Sequence[str] | None = None) -> pd.DataFrame:
    """Tables IV (``metric="flip"``) and V (``"hflip"``): rows models,
    columns N (questions compared; for V the questions answered correctly
    under Original, the denominator of eq. 4), Neutral then culture × cue,
    values in % (numbers rounded to ``digits``)."""
    if metric not in ("flip", "hflip"):
        raise ValueError("metric must be 'flip' or 'hflip'")
    rk = _row_key(flips, units)
    cols = [(NEUTRAL.capitalize(), "")] + [(t["label"], q["label"]) for t in config.cultures.values()
                                           for q in config.cues.values()]
    conds = [NEUTRAL] + config.cultural_conditions()
    w = flips.pivot_table(index=rk, columns="condition", values=metric, sort=False, dropna=False)
    w = w.reindex(columns=conds)
    w.columns = pd.MultiIndex.from_tuples(cols)
    w = w.round(digits)
    # N: the questions compared (flip) or answered correctly under Original (hflip)
    n = flips.groupby(rk, sort=False)["n" if metric == "flip" else "n_ref_correct"].max()
    w.insert(0, ("N", ""), n.reindex(w.index).fillna(0).astype(int))   # 0: a unit with no question compared
    return w


def table_judge(counts: pd.DataFrame, config: CulturalConfig, digits: int = 2,
                units: Sequence[str] | None = None) -> pd.DataFrame:
    """Table III: rows models, columns Identity / Context / Identity +
    Context, cells "wrong / grounded (rate%)" from :func:`judge_counts`."""
    rk = _row_key(counts, units)
    c = counts[counts["cue"].isin(config.cue_names)].copy()
    c["cell"] = [f"{w} / {n} ({_fmt(r, digits)}%)" if n else "0 / 0 (n/a)"
                 for w, n, r in zip(c["grounded_wrong"], c["grounded"], c["error_rate"])]
    c["col"] = [config.cue_label(q, long=True) for q in c["cue"]]
    w = c.pivot(index=rk, columns="col", values="cell")
    w = w.reindex(index=list(dict.fromkeys(c.set_index(rk).index)))
    cols = [config.cue_label(q, long=True) for q in config.cue_names]
    return w.reindex(columns=cols).astype(object).fillna("–").rename_axis(columns=None)


def forest_plot(boot: pd.DataFrame, config: CulturalConfig, title: str | None = None):
    """Fig. 5: one row per model × culture, the point estimate of
    Id+Ctx − Original (pp) with its interval (:func:`idctx_delta`); the
    right-hand column prints "est [lo, hi]", bold where the exact test
    rejects on enough questions, "(too few to tell)" below
    :data:`medaudit.stats.intervals.MIN_N`."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if boot.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    b = boot.reset_index(drop=True)
    rk = _row_key(b)
    labels = [" · ".join(str(r[c]) for c in rk) + f" — {config.culture_label(r['culture'])}"
              for _, r in b.iterrows()]
    y = np.arange(len(b))[::-1]
    colours = dict(zip(config.culture_names, ("#1b9e77", "#d95f02", "#7570b3")))
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(b) + 1.4))
    for yi, (_, r) in zip(y, b.iterrows()):
        col = colours.get(r["culture"], "black")
        ax.plot([r["ci_lo"], r["ci_hi"]], [yi, yi], color=col, lw=1.5)
        ax.plot(r["estimate"], yi, "o", color=col, ms=5)
    ax.axvline(0, color="grey", ls="--", lw=1)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("accuracy difference, Id+Ctx − Original (percentage points)")
    ax.set_title(title or "Sensitivity to cultural cues (95% CI, Agresti-Min adjusted ∪ clustered t)")
    ax2 = ax.twinx()
    ax2.set_ylim(ax.get_ylim())
    ax2.set_yticks(y, [f"{r['estimate']:+.2f} [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]"
                       + ("" if _intervals.can_tell(r["n"]) else " (too few to tell)") for _, r in b.iterrows()],
                   fontsize=8)
    for lab, (_, r) in zip(ax2.get_yticklabels(), b.iterrows()):
        if r["significant"]:
            lab.set_fontweight("bold")
    ax2.tick_params(length=0)
    fig.tight_layout()
    return fig


def accuracy_plot(boot_acc: pd.DataFrame, config: CulturalConfig, title: str | None = None):
    """Fig. 3: accuracy (%) per condition with its Clopper–Pearson 95%
    interval (:func:`accuracy_intervals`), one panel row of bars per unit, the
    conditions in the order Original, Neutral, culture × cue."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if boot_acc.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    b = boot_acc.reset_index(drop=True)
    rk = _row_key(b)
    order = {c: i for i, c in enumerate(config.conditions())}
    units = list(dict.fromkeys(map(tuple, b[rk].to_numpy()))) if rk else [()]
    # constrained layout keeps the suptitle above the first panel's title (tight_layout overlapped them)
    fig, axes = plt.subplots(len(units), 1, figsize=(9, 2.8 * len(units) + 0.8), squeeze=False, layout="constrained")
    colours = {ORIGINAL: "#555555", NEUTRAL: "#999999"}
    colours.update(zip(config.culture_names, ("#1b9e77", "#d95f02", "#7570b3")))
    for ax, key in zip(axes[:, 0], units):
        g = b[(b[rk].apply(tuple, axis=1) == key)] if rk else b
        g = g.sort_values("condition", key=lambda s: s.map(order).fillna(len(order)))
        cols = [colours.get(config.split(c)[0] or c, "black") for c in g["condition"]]
        x = np.arange(len(g))
        ax.bar(x, g["accuracy"], color=cols)
        ax.errorbar(x, g["accuracy"], yerr=[g["accuracy"] - g["ci_lo"], g["ci_hi"] - g["accuracy"]],
                    fmt="none", ecolor="black", capsize=2, lw=0.8)
        labels = [config.baselines[c]["label"] if c in BASELINES else
                  f"{config.culture_label(config.split(c)[0]).split(':')[0]} {config.cue_label(config.split(c)[1])}"
                  for c in g["condition"]]
        ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(" · ".join(map(str, key)) + f"  (n = {int(g['n'].max())} questions)", fontsize=9)
    fig.suptitle(title or "Accuracy per condition (Clopper-Pearson 95% CI)")
    return fig


def component_plot(comp: pd.DataFrame, title: str | None = None):
    """Fig. 4: grouped bars of Δ accuracy vs Original (pp) per model, one
    bar per component (the columns of :func:`component_table`)."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if comp.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(comp), 3.8))
    n = comp.shape[1]
    x = np.arange(len(comp))
    w = 0.8 / n
    for j, col in enumerate(comp.columns):
        ax.bar(x + (j - (n - 1) / 2) * w, comp[col].to_numpy(float), width=w, label=col)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [" · ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in comp.index],
                  rotation=20, ha="right")
    ax.set_ylabel("Δ accuracy vs Original (pp)")
    ax.set_title(title or "Component analysis of culturally induced errors")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig




# ==========================================================================
# 7. augmenting other MedQA items: the few-shot augmenter and its checks
#
# The released Id+Ctx variant of an item is its Id edit plus its Ctx edit. The
# augmenter therefore writes two pieces per item and culture with an LLM — an
# identity phrase (put after the opening person noun: "A 21-year-old woman
# <from a Cree First Nations community> presents …") and a context sentence
# (put before the question sentence) — and the library places them with the
# insertion functions of the templated counterfactuals (medaudit.prep.perturb), so
# the options and the question sentence cannot change. Each piece is checked
# and, when a check fails, revised (medaudit.studies.agents); every attempt is kept.

PIECES = ("identity", "context")
_DIGIT = re.compile(r"\d")


def other_items(medqa5: pd.DataFrame, cs: CulturalSet, n: int | None, seed: int) -> pd.DataFrame:
    """``n`` patient vignettes of the 5-option MedQA test file
    (``data.load_medqa(…, 5)``) that are not among the released items
    (compared by normalised question text), in a seeded random order; all of
    them when ``n`` is None. A patient vignette opens with a person noun
    (:func:`perturb.opening_noun_end`): the identity phrase goes after it."""
    released = {_normalise(q) for q in cs.variants.loc[cs.variants["kind"] == ORIGINAL, "question"]}
    pool = medqa5[~medqa5["question"].map(_normalise).isin(released)
                  & medqa5["question"].map(lambda q: perturb.opening_noun_end(q) is not None)]
    pool = pool.sample(frac=1.0, random_state=seed)
    return (pool if n is None else pool.head(n)).assign(form="5opt").reset_index(drop=True)


def piece_examples(checked: pd.DataFrame, culture: str, piece: str, config: CulturalConfig) -> list[str]:
    """In-context examples of one piece for one culture, from the released
    variants (``checked`` from :func:`check_variants`): the ``shots``
    shortest distinct added texts with no clinical term flagged. Identity:
    added text of an Id variant that opens with one of the ``openers`` (a
    phrase that follows the person noun). Context: added text of a Ctx
    variant that is a whole sentence of the variant, without digits."""
    a = config.augment
    c = checked[(checked["culture"] == culture) & (checked["clinical_terms"] == "") & (checked["added"] != "")]
    if piece == "identity":
        c = c[c["cue"] == config.cues["i"]["name"]]
        rx = r"^(?:" + "|".join(map(re.escape, a["identity"]["openers"])) + r")\b"
        texts = c.loc[c["added"].str.match(rx), "added"]
    elif piece == "context":
        c = c[c["cue"] == config.cues["c"]["name"]]
        whole = [t for t, q in zip(c["added"], c["question"])
                 if t in _text.split_sentences(q) and not _DIGIT.search(t)]
        texts = pd.Series(whole, dtype=object)
    else:
        raise ValueError(f"unknown piece '{piece}' (have {PIECES})")
    distinct = sorted(set(texts), key=lambda t: (len(t), t))
    return distinct[: int(a.get("shots", 3))]


def piece_messages(question: str, culture_key: str, piece: str, examples: Sequence[str],
                   config: CulturalConfig) -> list[dict]:
    """The augmenter's messages for one piece (``prompts/cultural_augment_*.txt``)."""
    culture = config.cultures[culture_key]
    shots = "\n".join(f'- "{e}"' for e in examples)
    fields = {"description": culture.get("description", culture["long"]), "examples": shots,
              "max_words": config.augment[piece]["max_words"], "question": question}
    if piece == "identity":
        end = perturb.opening_noun_end(question)
        if end is None:
            raise ValueError(f"no opening person noun to attach an identity phrase to: {question[:80]!r}")
        start = _text.sentence_spans(question)[0][0]
        fields.update(opening=question[start:end] + " …", noun=question[start:end].split()[-1])
    user = prompts.load(f"cultural_augment_{piece}").format(**fields)
    return [{"role": "system", "content": prompts.load("cultural_augment_system")},
            {"role": "user", "content": user}]


def augment_jobs(items: pd.DataFrame, checked: pd.DataFrame, config: CulturalConfig,
                 cultures: Sequence[str] | None = None) -> pd.DataFrame:
    """One agent job per item × culture × piece (identity, context):
    item_id, condition ("<culture>:<piece>"), culture, culture_key, piece,
    original, examples (from the released variants, :func:`piece_examples`
    on ``checked``) and messages."""
    by_name = {v["name"]: k for k, v in config.cultures.items()}
    rows = []
    for name in cultures or config.culture_names:
        t = by_name[name]
        for piece in PIECES:
            shots = piece_examples(checked, name, piece, config)
            for it in items.itertuples(index=False):
                rows.append({"item_id": it.item_id, "condition": f"{name}:{piece}", "culture": name,
                             "culture_key": t, "piece": piece, "original": it.question, "examples": shots,
                             "messages": piece_messages(it.question, t, piece, shots, config)})
    return pd.DataFrame(rows)


def tidy_piece(text_: str, piece: str) -> str:
    """An identity phrase without a final full stop or comma (it goes inside
    a sentence); a context sentence ending in one full stop."""
    t = re.sub(r"\s+", " ", text_).strip().lstrip("-•* ").strip()
    if piece == "identity":
        return t.rstrip(".,;").strip()
    return t if t.endswith((".", "!")) else t + "."


def piece_problems(job, text_: str, config: CulturalConfig) -> list[str]:
    """Why a piece cannot be used (empty list: accepted). The text is first
    tidied (:func:`tidy_piece`).

    * ``empty``; ``too long`` (over ``max_words`` of cultures.yaml);
    * ``numbers``: a digit (ages, doses and values belong to the vignette);
    * identity: ``no identifier`` (does not match the culture's
      ``identifiers``), ``not a phrase`` (more than one sentence);
    * context: ``names the identity`` (matches ``identifiers``), ``not one
      sentence``, ``copies an example`` (an in-context example word for word:
      it was written for another patient; an identity phrase may repeat
      one, as the released ones do);
    * both: ``clinical terms`` from ``clinical_terms`` — the augmenter was
      told to add none; the seed's released texts have some, which is why
      their variants are only flagged for review, but a generated piece can
      be asked again.
    """
    t = tidy_piece(text_, job["piece"])
    if not t.strip(" ."):
        return ["empty: write the text that was asked for"]
    problems = []
    limit = config.augment[job["piece"]]["max_words"]
    if len(t.split()) > limit:
        problems.append(f"too long: {len(t.split())} words; use at most {limit}")
    if _DIGIT.search(t):
        problems.append("numbers: use no digits or numbers")
    named = re.search(rf"(?i)\b(?:{config.cultures[job['culture_key']]['identifiers']})", t) is not None
    n_sent = len(_text.split_sentences(t))
    if job["piece"] == "identity":
        if not named:
            problems.append(f"no identifier: state the patient's background "
                            f"({config.cultures[job['culture_key']]['long']}) explicitly")
        if n_sent > 1:
            problems.append("not a phrase: write one short phrase, not sentences")
    else:
        if named:
            problems.append("names the identity: do not name the patient's culture, religion or origin")
        if _normalise(t) in {_normalise(tidy_piece(e, "context")) for e in job.get("examples", ())}:
            problems.append("copies an example: write a new sentence that fits this patient")
        if n_sent != 1:
            problems.append(f"not one sentence: write exactly one sentence (got {n_sent})")
    terms = [term for term in config.clinical_terms if re.search(r"(?i)\b(?:" + term + ")", t)]
    if terms:
        problems.append(f"clinical terms: remove {', '.join(terms)}")
    return problems


def compose_variants(items: pd.DataFrame, results: pd.DataFrame, neutral_sentence: str,
                     config: CulturalConfig) -> pd.DataFrame:
    """The generated set in the shape of :attr:`CulturalSet.variants`: per
    item the original, the rebuilt neutral control and, per culture, the Id
    (identity phrase after the opening person noun), Ctx (context sentence
    before the question sentence) and Id+Ctx (both) variants whose pieces
    were accepted (agent ``results``); ``inserted`` holds the pieces,
    ``problems`` the :func:`perturb.check_variant` invariants (the question
    sentence unchanged, nothing but the insertion changed)."""
    ok = results[results["ok"]].set_index(["item_id", "condition"])["text"]
    rows = []
    for it in items.itertuples(index=False):
        q = it.question
        base = {"item_id": it.item_id, "index": None}
        rows += _baseline_rows(base, q, neutral_sentence, source="medqa")
        for t, tinfo in config.cultures.items():
            pieces = {p: tidy_piece(ok[(it.item_id, f"{tinfo['name']}:{p}")], p) for p in PIECES
                      if (it.item_id, f"{tinfo['name']}:{p}") in ok.index}
            for c, cinfo in config.cues.items():
                need = cinfo.get("pieces", [])
                if not need or any(p not in pieces for p in need):
                    continue
                v, problems = q, []
                if "context" in need:
                    v = perturb.insert_before_final(v, pieces["context"])
                    problems += perturb.check_variant(q, v, pieces["context"])
                if "identity" in need:
                    before = v
                    # seed 003's identity phrase follows the patient's own noun ("A 45-year-old man from a
                    # Cree First Nations community …"): seed 000 B.1's "patient" reading is not this study's
                    v = perturb.embed_in_opening(v, pieces["identity"], noun="vignette")
                    problems += perturb.check_variant(before, v, pieces["identity"])
                rows.append({**base, "condition": config.condition(t, c), "kind": "cultural",
                             "culture": tinfo["name"], "cue": cinfo["name"], "question": v,
                             "inserted": " | ".join(pieces[p] for p in need), "source": "generated",
                             "same_as_original": v == q, "problems": "; ".join(dict.fromkeys(problems))})
    var = pd.DataFrame(rows)
    return var.assign(ok=var["problems"] == "")


def generated_set(items: pd.DataFrame, variants_: pd.DataFrame) -> CulturalSet:
    """A :class:`CulturalSet` of generated variants, so that
    :func:`check_variants`, :func:`check_summary` and the answering and
    scoring code serve them as they serve the released ones."""
    counts = variants_.groupby("kind").size()
    report = pd.DataFrame([("items", variants_["item_id"].nunique()),
                           ("cultural variants", int(counts.get("cultural", 0))),
                           ("variants failing the insertion checks", int((~variants_["ok"]).sum()))],
                          columns=["what", "value"])
    return CulturalSet(variants_, {"5opt": items.reset_index(drop=True)}, pd.DataFrame(), report)
