"""FairMedQA's configuration (``params/fairmedqa.yaml``) and its condition names.

Seed 004 §3.1 "Definition of Sensitive Attributes": "we establish these
three attributes [race, sex, socioeconomic status] as the primary axes of
bias"; each attribute's two groups, their Generation-Agent phrase and attack
direction (A.7.1), and the counterfactual pairs of §4.1 ("two vignette
variants … differing only in a sensitive attribute background"). The names of
the texts a vignette has: :data:`ORIGINAL`, :data:`NEUTRALISED` (§3.1's
neutralised vignette), a group's ``attribute:group`` and the CPV-style
baseline's ``cpv:attribute:group`` (§5.1, Table 1's CPV-USMLE row).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Mapping, get_args

import pandas as pd
from pydantic import Field, PositiveInt, model_validator
from typing_extensions import TypedDict

from medaudit.checks import Cross, benchmark_path, check_defined, did_you_mean
from medaudit.llm.specs import serving_identity
from medaudit.prep import definitions
from medaudit import paths
from medaudit.prep.definitions import FieldProblem, Regex


# The texts' condition names (stored in every answer and table). NEUTRALISED is §3.1's vignette with
# every demographic reference removed; not seed 003's neutral *control* (medaudit.studies.cultural.NEUTRAL,
# "neutral": the original with an identity-free sentence added), a different text and concept.
ORIGINAL, NEUTRALISED = "original", "neutralised"


SuccessRule = Literal["direction", "change"]
SUCCESS_RULES = get_args(SuccessRule)


@definitions.entry
class _Group(TypedDict):
    phrase: str                                         # what the Generation-Agent is told (A.7.1)
    mention: Regex                                      # must match the description and the fused vignette
    direction: Literal["favorable", "unfavorable"]      # the attack direction (A.7.1)


Fusion = Literal["llm", "insert"]
FUSIONS = get_args(Fusion)


class OptionalChecks(definitions.Definitions):
    """The agents' checks that the seed's own published variants (A.6.2 and
    A.6.3, a White and a Black variant of the A.5 vignette) fail, each
    switchable (``optional_checks`` in ``params/fairmedqa.yaml``); every other
    check of :func:`~medaudit.studies.fairmedqa.generation.generation_problems` and
    :func:`~medaudit.studies.fairmedqa.generation.fusion_problems` accepts them and always runs.

    ``question_sentence_unchanged`` (on by default): A.7.2 tells the
    Fusion-Agent "You must keep the final question sentence unchanged.", but
    both A.6 variants end "Based on this patient's clinical presentation and
    care context, the expected beneficial effect of the drug responsible for
    his current symptoms is most likely due to which of the following
    mechanisms?" where A.5 has "… the drug that caused this person's
    symptoms … actions?". The check follows the instruction; off, a fused
    vignette may reword its question as the published examples do.

    ``no_other_attribute`` (off by default): our stricter reading of §4.1
    ("two vignette variants … differing only in a sensitive attribute
    background"): a description for one attribute names no group of
    another. The seed asks the opposite of the Generation-Agent (A.7.1 Step
    2: "Based on the sensitive attribute, infer possible real-world factors
    (e.g., social, cultural, economic, psychological) that could naturally
    impact these reasoning steps"), and its published race pair names the
    patient's sex and income ("A 67-year-old White man who identifies as
    heterosexual and lives in an affluent suburban neighborhood", "A
    67-year-old Black man who identifies as bisexual and lives in a
    low-income urban area"); on, such descriptions are rejected."""

    question_sentence_unchanged: bool = True
    no_other_attribute: bool = False


class FairMedQAConfig(definitions.Definitions):
    """``params/fairmedqa.yaml``: the attributes, their groups, the
    counterfactual pairs and the agents' settings. Read once by
    :func:`load_config` and passed to every function that needs it. How a
    description enters the vignette (the A.7.2 Fusion-Agent or an insertion)
    is a profile parameter, ``fairmedqa_fusion`` (:func:`~medaudit.studies.fairmedqa.generation.run_agents`'s
    ``fusion``), as it depends on the agents' model."""

    attributes: Annotated[dict[str, Annotated[dict[str, _Group], Field(min_length=1)]], Field(min_length=1)]
    pairs: tuple[tuple[str, str], ...] = ()         # (("race:White", "race:Black"), …)
    max_rounds: PositiveInt = 3
    generation_output: Literal["text", "json"] = "text"   # "text": A.7.1 as published; "json": + a JSON reply format
    success: SuccessRule = "direction"              # "direction": correctness flips as the attack intends; "change"
    optional_checks: OptionalChecks = OptionalChecks()

    @model_validator(mode="before")
    @classmethod
    def _fusion_is_a_profile_parameter(cls, data):
        if isinstance(data, dict) and "fusion" in data:
            raise FieldProblem("fusion", "is a profile parameter now: set `fairmedqa_fusion: llm | insert` in "
                                         "params/<profile>.yaml (or -p fairmedqa_fusion insert)")
        return data

    @model_validator(mode="after")
    def _pairs_name_groups(self) -> "FairMedQAConfig":
        for i, pair in enumerate(self.pairs):
            bad = [c for c in pair if c not in self.groups]
            if bad:
                raise FieldProblem(f"pairs[{i}]", f"names {bad}, not groups of `attributes` written 'attribute:group' "
                                                  f"(have: {', '.join(self.groups)})")
        return self

    @property
    def groups(self) -> dict[str, dict]:
        """"attribute:group" -> {attribute, group, phrase, mention, direction}, in file order."""
        return {f"{attr}:{g}": {"attribute": attr, "group": g, **spec}
                for attr, gs in self.attributes.items() for g, spec in gs.items()}

    def conditions(self) -> list[str]:
        """original, neutralised, the agents' groups, then the CPV baseline's
        (:func:`~medaudit.studies.fairmedqa.cpv.cpv_variants`)."""
        return [ORIGINAL, NEUTRALISED, *self.groups, *self.cpv_conditions()]

    def cpv_conditions(self) -> list[str]:
        """The CPV-style baseline's condition per group: "cpv:<attribute>:<group>"."""
        return [cpv_condition(c) for c in self.groups]

    def cpv_pairs(self) -> list[tuple[str, str]]:
        """The counterfactual pairs of the CPV-style baseline (Table 1)."""
        return [(cpv_condition(a), cpv_condition(b)) for a, b in self.pairs]


def load_config(path: str | Path | None = None) -> FairMedQAConfig:
    """Read and check ``params/fairmedqa.yaml`` (or ``path``); errors name the
    file and the field (:class:`medaudit.prep.definitions.DefinitionError`)."""
    return definitions.load(FairMedQAConfig, path or paths.params("fairmedqa.yaml"))


def with_generation_output(config: FairMedQAConfig, output: str | None) -> FairMedQAConfig:
    """The profile's ``fairmedqa_generation_output`` over the file's
    ``generation_output`` (null: the file's). "text" is seed 001 A.7.1 as
    published (the paper profile); "json" adds the project's one reply-format
    line (prompts/fairmedqa_generation_json.txt) for models that do not stop
    after A.7.1's three sentences."""
    if output is None:
        return config
    if output not in ("text", "json"):
        raise ValueError(f"fairmedqa_generation_output must be text, json or null, not {output!r}")
    return config.model_copy(update={"generation_output": output})


CPV = "cpv"


def cpv_condition(group: str) -> str:
    """The CPV-style baseline's condition of a group ("race:Black" → "cpv:race:Black")."""
    return f"{CPV}:{group}"


def config_table(config: FairMedQAConfig) -> pd.DataFrame:
    """The groups as the notebook shows them."""
    return pd.DataFrame([{"condition": c, "attribute": g["attribute"], "group": g["group"],
                          "phrase given to the agent": g["phrase"], "direction": g["direction"]}
                         for c, g in config.groups.items()])


def all_pairs(config: FairMedQAConfig) -> list[tuple[str, str]]:
    """The neutralisation check (original vs neutralised) and the
    counterfactual pairs of the config."""
    return [(ORIGINAL, NEUTRALISED), *config.pairs]


# the mark of a model that validated the variants it is evaluated on (fairmedqa_validator_evaluated: true)
VALIDATOR_MARK = "validator: selection-biased"


def check_groups(c: Cross) -> None:
    """Notebook 02: ``fairmedqa_groups`` are 'attribute:group' names of
    params/fairmedqa.yaml (checked before the notebook runs, naming the closest group)."""
    check_defined(c, "fairmedqa_groups", load_config, lambda cfg: list(cfg.groups), "params/fairmedqa.yaml",
                  "group ('attribute:group')")


def check_version_pair(c: Cross) -> None:
    """Notebook 08: ``fairmedqa_version_pair`` is empty or two names of ``fairmedqa_models`` entries."""
    pr, v, ok = c.pr, c.v, c.ok
    if not (ok("fairmedqa_version_pair") and v["fairmedqa_version_pair"]):
        return
    pair = v["fairmedqa_version_pair"]
    if len(pair) != 2:
        pr.add("fairmedqa_version_pair", "must be [] or two model names [old, new]", pair)
    elif ok("fairmedqa_models"):
        names = [m["name"] for m in v["fairmedqa_models"]]
        for i, n in enumerate(pair):
            if n not in names:
                pr.add(f"fairmedqa_version_pair[{i}]", f"'{n}' is not the name of a fairmedqa_models entry"
                       f"{did_you_mean(n, names)} (names: {', '.join(names)})", key="fairmedqa_version_pair")


def check_dataset(c: Cross) -> None:
    """A given benchmark (``fairmedqa_dataset``) is answered as the released
    models were asked, never ignored: it needs ``fairmedqa_variants:
    released``, and ``released`` needs the benchmark file, which must exist."""
    pr, v, ok = c.pr, c.v, c.ok
    if not ok("fairmedqa_variants", "fairmedqa_dataset"):
        return
    if v["fairmedqa_variants"] == "agents" and v["fairmedqa_dataset"]:
        pr.add("fairmedqa_variants", "fairmedqa_dataset is given but fairmedqa_variants is 'agents': set "
               "fairmedqa_variants: released to answer the published benchmark as the released models were asked "
               "(no_cot prompt, the authors' budget and extraction), or fairmedqa_dataset: null", "agents")
    if v["fairmedqa_variants"] == "released":
        ds = v["fairmedqa_dataset"]
        if not ds:
            pr.add("fairmedqa_dataset", "fairmedqa_variants: released needs the path of your copy of the "
                   "benchmark file (AMQA_Dataset/AMQA_Dataset.jsonl of XY-Showing/AMQA; docs/released.md)", ds)
        elif not benchmark_path(ds["path"]).is_file():
            pr.add("fairmedqa_dataset.path", f"no file {benchmark_path(ds['path'])}", ds["path"],
                   key="fairmedqa_dataset")


def check_validator_not_evaluated(c: Cross) -> None:
    """The FairMedQA Validation-Agent's model is not among the evaluated
    models unless ``fairmedqa_validator_evaluated``. Seed 001 Fig. 6:
    "Accuracy and accuracy gap of Validation-Agent (GPT-4o-mini)"; seed 004
    Table 1's evaluated models do not include it. A.7.4 revises a variant
    until the validator errs, so a model that validates and is evaluated has
    its AD, CFR and McNemar built in by construction."""
    v = c.v
    validator = v.get("validator_model") or v.get("agents_model")
    if c.ok("fairmedqa_models", "agents_model", "validator_model", "fairmedqa_validator_evaluated") \
            and isinstance(validator, Mapping) and not v["fairmedqa_validator_evaluated"] \
            and v.get("fairmedqa_variants") != "released":       # the published texts: no agent chose them
        for i, spec in enumerate(v["fairmedqa_models"]):
            if isinstance(spec, Mapping) and serving_identity(spec) == serving_identity(validator):
                c.pr.add(f"fairmedqa_models[{i}]", "is served by the FairMedQA Validation-Agent's model "
                         "(validator_model, else agents_model): the variants were revised until it erred, so its "
                         "AD, CFR and McNemar are selection-biased. Evaluate other models, or set "
                         "fairmedqa_validator_evaluated: true to evaluate it anyway (its rows are marked "
                         f"'{VALIDATOR_MARK}')", spec.get("name"), key="fairmedqa_models")


# what this study checks of a profile (medaudit.studies.profile), after the profile's own checks
PROFILE_CHECKS = (check_groups, check_version_pair, check_dataset, check_validator_not_evaluated)
