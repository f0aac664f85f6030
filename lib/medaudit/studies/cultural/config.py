"""The cultural-cue study's definitions (seed 003): the cultures, cues and baselines of
``params/cultures.yaml`` as one :class:`CulturalConfig`, read by :func:`load_config`, and the neutral
control's sentence (``params/conditions.yaml``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, NonNegativeInt, PositiveInt, model_validator
from typing_extensions import NotRequired, TypedDict

from medaudit.checks import Cross, check_defined
from medaudit.prep import definitions, perturb
from medaudit import paths
from medaudit.prep.definitions import FieldProblem, Regex


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
        """The cultures' names, in the file's order."""
        return [c["name"] for c in self.cultures.values()]

    @property
    def cue_names(self) -> list[str]:
        """The cues' names, in the file's order."""
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
        """The short label of the culture named ``name``."""
        return next(c["label"] for c in self.cultures.values() if c["name"] == name)

    def cue_label(self, name: str, long: bool = False) -> str:
        """The label of the cue named ``name`` (its ``long`` form with ``long``)."""
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


def check_augment_cultures(c: Cross) -> None:
    """Notebook 07: ``augment_cultures`` are cultures of params/cultures.yaml
    (checked before the notebook runs, naming the closest culture)."""
    check_defined(c, "augment_cultures", load_config, lambda cfg: cfg.culture_names, "params/cultures.yaml",
                  "culture")


# what this study checks of a profile (medaudit.studies.profile), after the profile's own checks
PROFILE_CHECKS = (check_augment_cultures,)
