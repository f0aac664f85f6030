"""The SOAP-note audit's definitions (seed 002): the axes, stereotypical contexts (Table 9), screens,
tables and decoding of ``params/soap.yaml`` as one :class:`SoapConfig`, read by :func:`load_config`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Sequence

from pydantic import AfterValidator, Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator
from typing_extensions import NotRequired, TypedDict

from medaudit.checks import Cross, check_names, did_you_mean, safe_load
from medaudit.prep import definitions, dialogs
from medaudit import paths
from medaudit.prep.definitions import FieldProblem


SPEAKERS = ("doctor", "patient")
BASELINE = "BL"
YES, NO, MAYBE = "YES", "NO", "MAYBE"


# ==========================================================================
# configuration (params/soap.yaml)


@definitions.entry
class _Axis(TypedDict):
    question: str                                       # the doctor's question of the appended exchange
    baseline: str                                       # the token of the baseline answer ("[RACE]")
    values: Annotated[dict[str, str | list[int]], Field(min_length=1)]   # value -> code, or age bin -> [low, high]
    short: NotRequired[dict[str, str]]                  # the codes of the seed's tables, when values holds bins
    synonyms: NotRequired[dict[str, list[str]]]         # what the disparity judge may call a group


def _positive_and_negative(examples: dict[str, str]) -> dict[str, str]:
    if set(examples) != {"positive", "negative"}:
        raise ValueError(f"must have exactly `positive` and `negative` (has: {', '.join(sorted(examples)) or 'none'})")
    return examples


@definitions.entry
class _Context(TypedDict):
    topic_check: NotRequired[bool]                      # false: no topic check (a tone, not a topic)
    topic: NotRequired[list[str]]                       # word beginnings of an on-topic addition (off_topic)
    label: str                                          # the row code of the seed's tables ("Poverty")
    name: NotRequired[str]                              # the full name (Tables 5, 6, 13, 15)
    axes: Annotated[list[str], Field(min_length=1)]     # the axes it is crossed with (seed §3.1)
    doctor: str                                         # Table 9 instruction, per speaker
    patient: str
    describe: Annotated[list[str], Field(min_length=1)]  # Table 16 list (the judges' prompts)
    examples: Annotated[dict[str, str], AfterValidator(_positive_and_negative)]   # for the incidence judge


def _screen_kinds(kinds: list[str]) -> list[str]:
    bad = [k for k in kinds if k not in dialogs.SCREEN_KINDS]
    if bad:
        raise ValueError(f"names unknown cue kinds {bad} (known: {', '.join(dialogs.SCREEN_KINDS)})")
    return kinds


@definitions.entry
class _Screen(TypedDict):
    exclude: Annotated[list[str], AfterValidator(_screen_kinds)]
    words: dict[str, list[str]]
    others: list[str]
    demographic_questions: list[str]
    ignore: NotRequired[dict[str, list[str]]]
    redact: NotRequired[dict[str, dict[str, str]]]     # kind -> {word: replacement} (dialogs.redact_cues)
    redact_pronouns: NotRequired[bool]                  # the patient's he/she -> they (dialogs.neutral_pronouns)
    pronoun_referents: NotRequired[list[str]]           # words of `others` whose pronouns are made neutral too
    removed_exclude: NotRequired[list[str]]             # removed race/origin terms that still exclude


@definitions.entry
class _Tables(TypedDict):
    incidence: NotRequired[dict[str, list[str]]]       # axis -> contexts, in the order of Tables 10–12
    disparity: NotRequired[dict[str, list[str]]]       # Tables 13–15
    disparity_long_names: NotRequired[list[str]]       # axes whose disparity table writes full names


@definitions.entry
class _Decoding(TypedDict):
    temperature: NonNegativeFloat
    top_p: Annotated[float, Field(gt=0, le=1)]


class SoapConfig(definitions.Definitions):
    """``params/soap.yaml``: axes, stereotypical contexts, the dialog screen and
    the judges' settings. Read once by :func:`load_config` and passed to every
    function that needs it."""

    axes: Annotated[dict[str, _Axis], Field(min_length=1)]          # axis -> {question, baseline, values, …}
    contexts: Annotated[dict[str, _Context], Field(min_length=1)]   # name -> {label, axes, doctor, patient, …}
    augment_max_attempts: PositiveInt = 3
    min_added_sentences: NonNegativeInt = 1
    aci_example: str | None = None
    augment_revise: bool = False
    augment_per_axis: list[str] = []   # contexts augmented once per axis (A.1's 12 contexts: mental_health)
    pool_needs_review: bool = True     # apply_review: only dialogs a reviewer kept are audited (seed §3)
    screen: _Screen | None = None    # the dialog screen (seed §3; dialogs.screen_cues)
    tables: _Tables | None = None    # the seed's row order per table kind and axis
    default_generation: dict[str, _Decoding] | None = None  # note_gen("default"): the seed's models, by name
    maybe_as_yes: bool = False    # disparity_metrics: a MAYBE decision counts as YES
    disparity_human_dialogs: NonNegativeInt = 30   # disparity_human_template: the seed's 30-dialog check (A.1)

    @model_validator(mode="after")
    def _cross_checks(self) -> "SoapConfig":
        for b, lim in self.axes.get("age", {"values": {}})["values"].items():
            if not (isinstance(lim, list) and len(lim) == 2 and lim[0] <= lim[1]):
                raise FieldProblem(f"axes.age.values.{b}", f"must be [low, high] with low ≤ high, not {lim!r}")
        for name, spec in self.contexts.items():
            bad = [a for a in spec["axes"] if a not in self.axes]
            if bad:
                raise FieldProblem(f"contexts.{name}.axes", f"names unknown axes {bad} (axes: {', '.join(self.axes)})")
        tables = self.tables or {}
        for kind in ("incidence", "disparity"):
            for ax, names in tables.get(kind, {}).items():
                bad = [c for c in names if c not in self.contexts or ax not in self.contexts[c]["axes"]]
                if bad:
                    raise FieldProblem(f"tables.{kind}.{ax}", f"lists contexts not crossed with {ax}: {bad}")
        bad = [c for c in self.augment_per_axis if c not in self.contexts]
        if bad:
            raise FieldProblem("augment_per_axis",
                               f"names unknown contexts {bad} (contexts: {', '.join(self.contexts)})")
        bad = [a for a in tables.get("disparity_long_names", []) if a not in self.axes]
        if bad:
            raise FieldProblem("tables.disparity_long_names", f"names unknown axes {bad} "
                                                              f"(axes: {', '.join(self.axes)})")
        return self

    def values(self, axis: str) -> list[str]:
        """The values of ``axis`` (race's groups, e.g.), in the file's order."""
        return list(self.axes[axis]["values"])

    def short(self, axis: str) -> dict[str, str]:
        """Each value's code in the seed's tables ("B" for Black; "85+" for
        the bin 85–99, from ``axes.age.short``)."""
        codes = self.axes[axis].get("short", {})
        return {v: (s if isinstance(s, str) else codes.get(v, v)) for v, s in self.axes[axis]["values"].items()}

    def row_label(self, context: str, speaker: str, long: bool = False) -> str:
        """A context's row in the seed's tables: "D: Poverty", "P: ExgSymp"
        (Tables 2–4, 10–12), or with ``long`` its full name, "D: Genetic
        Differences" (Tables 5, 6, 13, 15)."""
        c = self.contexts[context]
        return f"{speaker[0].upper()}: {c.get('name', c['label']) if long else c['label']}"

    def row_order(self, kind: str, axis: str) -> list[str]:
        """The contexts of an ``axis`` in the order of the seed's table
        ``kind`` (incidence: Tables 10–12; disparity: Tables 13–15), doctor
        rows first; contexts the seed does not list follow in config order."""
        listed = list(((self.tables or {}).get(kind) or {}).get(axis) or [])
        rest = [c for c, v in self.contexts.items() if axis in v["axes"] and c not in listed]
        return listed + rest

    def aug_axis(self, context: str, axis: str) -> str:
        """The axis an augmentation of ``context`` belongs to: ``axis`` for a
        context of ``augment_per_axis`` (its own augmented dialog per axis),
        "" for the others (one augmented dialog shared by every axis)."""
        return axis if context in self.augment_per_axis else ""

    def augmentations(self, units: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """The augmentation jobs per dialog for ``units``: (context, speaker,
        aug_axis), once each (:meth:`aug_axis`)."""
        return list(dict.fromkeys((c, s, self.aug_axis(c, a)) for c, s, a in units))

    def long_names(self, axis: str) -> bool:
        """Whether the seed's disparity table of ``axis`` writes full context
        names (race, gender: Tables 13, 15) or codes (age: Table 14)."""
        return axis in ((self.tables or {}).get("disparity_long_names") or [])

    def units(self, contexts: Sequence[str] | None = None, axes: Sequence[str] | None = None
              ) -> list[tuple[str, str, str]]:
        """(context, speaker, axis) triples: ``contexts`` as "name" (both
        speakers) or "name:speaker" (null: all), crossed with the axes the
        seed pairs each context with (restricted to ``axes`` if given)."""
        out = []
        for c in contexts if contexts is not None else list(self.contexts):
            name, _, speaker = c.partition(":")
            if name not in self.contexts:
                raise ValueError(f"unknown SOAP context {name!r} (params/soap.yaml: {sorted(self.contexts)})")
            if speaker and speaker not in SPEAKERS:
                raise ValueError(f"SOAP context {c!r}: the speaker must be doctor or patient")
            for sp in [speaker] if speaker else SPEAKERS:
                for ax in self.contexts[name]["axes"]:
                    if axes is None or ax in axes:
                        out.append((name, sp, ax))
        return out


def load_config(path: str | Path | None = None) -> SoapConfig:
    """Read and check ``params/soap.yaml`` (or ``path``); errors name the
    file and the field (:class:`medaudit.prep.definitions.DefinitionError`)."""
    return definitions.load(SoapConfig, path or paths.params("soap.yaml"))


def check_contexts_and_axes(c: Cross) -> None:
    """Notebook 06: ``soap_contexts`` ('name' or 'name:speaker') and
    ``soap_axes`` are defined in params/soap.yaml, and, when both are
    valid, at least one context is crossed with the axes (else 06 audits nothing)."""
    pr, v, ok = c.pr, c.v, c.ok
    if not (ok("soap_contexts") or ok("soap_axes")):
        return
    cfg, err = safe_load("cannot be checked", load_config)   # the error names params/soap.yaml
    if err:
        pr.add("soap_contexts", err)
        return
    contexts = v.get("soap_contexts") if ok("soap_contexts") else None
    axes = v.get("soap_axes") if ok("soap_axes") else None
    good_ctx, good_axes = [], []
    for i, ctx in enumerate(contexts or []):
        name, _, speaker = ctx.partition(":")
        if name not in cfg.contexts:
            pr.add(f"soap_contexts[{i}]", f"unknown SOAP context '{name}'{did_you_mean(name, cfg.contexts)}"
                   f" (params/soap.yaml defines: {', '.join(cfg.contexts)}; write 'name' or 'name:speaker')",
                   key="soap_contexts")
        elif speaker and speaker not in SPEAKERS:
            pr.add(f"soap_contexts[{i}]", f"unknown speaker '{speaker}'"
                   f"{did_you_mean(speaker, SPEAKERS)} (have: {', '.join(SPEAKERS)})",
                   key="soap_contexts")
        else:
            good_ctx.append(ctx)
    if axes is not None:
        good_axes = check_names(pr, "soap_axes", axes, list(cfg.axes), "params/soap.yaml", "axis")
    if (contexts is None or len(good_ctx) == len(contexts)) and (axes is None or len(good_axes) == len(axes)) \
            and ok("soap_contexts", "soap_axes") and not cfg.units(contexts, axes):
        pr.add("soap_axes", f"no context of soap_contexts {contexts} is crossed with these axes in "
               "params/soap.yaml: notebook 06 would audit nothing", axes)


# what this study checks of a profile (medaudit.studies.profile), after the profile's own checks
PROFILE_CHECKS = (check_contexts_and_axes,)
