"""The profile schema: every key a profile (``params/<profile>.yaml``) or an
override (``-p``/``-y``/``-f``) may set, with its type and range, checked
before anything executes or loads.

:class:`Profile` is the union of the notebooks' ``parameters`` cells (pydantic,
strict types, unknown keys forbidden). :func:`validate` adds the checks that
need the definition files: every condition (``params/<conditions_file>``),
culture (``cultures.yaml``), SOAP context and axis (``soap.yaml``), FairMedQA
group (``fairmedqa.yaml``), multiple-choice prompt format (:data:`medaudit.llm.formats.FORMATS`)
and registry model (``models.yaml``) a profile names must exist. Every
problem found is reported at once in one :class:`ConfigError`, each line
naming the key (a dotted path), the bad value, the file or override it came
from and, for an unknown key or name, the closest valid one::

    invalid parameters (profile 'smoke', 1 problem):
      - k_sample = 10 (from -p k_sample 10): unknown key; did you mean 'k_samples'?

Models are named once per profile. The optional top-level ``models``
mapping defines entries, name -> model spec; every model role
(:data:`MODEL_ROLES`, and the entries of :data:`MODEL_LISTS`) is either a
full spec or the name of an entry (a YAML alias ``*name`` of an entry, as
the shipped profiles write it, counts as naming it). :func:`validate`
resolves the names, so the notebooks receive full specs as before; an
override of ``models`` replaces only the entries it gives, so redefining an
entry switches every role that names it. Names resolve through ``models``
only, never through the params/models.yaml registry (whose names are what a
spec's ``model`` field holds). ``models`` is a profile key, not a notebook
parameter (:data:`PROFILE_ONLY`)::

    models:
      embedded: &embedded {name: qwen2.5-coder-1.5b, backend: llamacpp, model: qwen2.5-coder-1.5b}
    subject: *embedded          # or: subject: embedded
    open_models: [*embedded]

``null`` means "all" for the item counts and name lists that say so below
(the notebooks' own meaning); a count of 0 or an empty list is an error
wherever it would silently produce empty tables.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medaudit import paths
from medaudit import llm as _llm
from medaudit.checks import (Cross, Problems, check_names, did_you_mean, dotted_path, existing_file, safe_load,
                             short_repr)
from medaudit.llm import planted, specs
# vocabulary owned by low-level modules (a study's own is kept equal by tests/test_profile_rules.py)
from medaudit.prep.amqa import EXTRACT        # the answer-extraction rules of the released AMQA answers
from medaudit.prep.data import SOAP_DATASETS   # the SOAP study's dialog datasets, named where they are loaded
from medaudit.prep.definitions import UniqueKeyLoader
from medaudit.prep.goldreading import READINGS                 # the gold readings of seed 003's Table III
from medaudit.prep.perturb import BASE                         # the unperturbed condition every comparison is against
from medaudit.stats.scoring import COUNTING_RULES               # how flips are counted across models
from medaudit.prep.selection import PSYCHIATRY_SUBSETS         # notebook 01's psychiatry keyword lists

BACKENDS = tuple(_llm.BACKENDS)
SUBSETS = ("main", "psychiatry")              # notebook 02: the item pool's subsets
CULTURAL_FORMS = ("5opt", "4opt")             # cultural.FORMS (checked by the tests: config cannot import a study)
CLUSTER_METHODS = ("llm", "entailment", "embedding")   # openended.METHODS (checked by the tests)
JUDGE_CONTEXTS = ("question", "vignette")     # openended.JUDGE_CONTEXTS (checked by the tests)
UNPARSED_RULES = ("incorrect", "drop")        # uncertainty.UNPARSED_RULES (checked by the tests)
# the model stages of notebooks 07 and 08 that a profile can switch off (analysis of stored answers only;
# the tests check that these are the stages the notebooks' code tests for)
MODEL_STAGES = ("cultural_augment", "cultural_answers", "cultural_judge", "fairmedqa_answers")

# what null means, appended to an error on these keys
NULL_MEANS = {
    "n_items": "every eligible item", "infer_items": "every item of the pool", "open_items": "every item of 03's pool",
    "cultural_items": "all 150 items", "cultural_explain_items": "every item of cultural_items",
    "cultural_arm_items": "every item of cultural_items",
    "augment_items": "every other MedQA vignette", "augment_cultures": "all cultures of params/cultures.yaml",
    "fairmedqa_items": "every vignette the screen keeps", "fairmedqa_max_chars": "no length limit",
    "fairmedqa_groups": "every group of params/fairmedqa.yaml", "soap_contexts": "every context and speaker",
    "soap_axes": "every axis each context is crossed with", "soap_datasets": "(per dataset) every dialog",
    "judge_b": "no second judge", "calibration_models": "every model in the store", "fusion_model": "agents_model",
    "validator_model": "agents_model", "human_labels": "no human labels", "soap_human_labels": "no human labels",
    "soap_judge_b": "no second judge", "soap_disparity_human_labels": "no human labels",
    "reformulate_fallback": "drop the item",
    "fairmedqa_generation_output": "params/fairmedqa.yaml's generation_output",
    "partner_sex": "the selection file's partner_sex",
    "top_p": "no top-p sent (an API model's own default)",
}


class ConfigError(ValueError):
    """Invalid parameters: ``problems`` holds one line per problem;
    ``found_by``: problem line -> the cross-check of :data:`CROSS_CHECKS`
    that found it (lines of the schema's own type and range checks have none)."""

    def __init__(self, problems: list[str], profile: str | None = None,
                 found_by: list[tuple[str, str]] | None = None):
        self.problems = list(problems)
        self.profile = profile
        self.found_by = {line: check for check, line in found_by or []}
        where = f"profile '{profile}', " if profile else ""
        n = len(self.problems)
        head = f"invalid parameters ({where}{n} problem{'s' if n != 1 else ''}):"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


# ==========================================================================
# the schema

_STRICT = ConfigDict(strict=True, extra="forbid")

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
Temperature = Annotated[float, Field(ge=0)]
TopP = Annotated[float, Field(gt=0, le=1)]
Margin = Annotated[float, Field(gt=0, le=100)]   # an equivalence margin δ in points (medaudit.stats.equivalence)
Name = Annotated[str, Field(min_length=1)]
Names = Annotated[list[Name], Field(min_length=1)]


class ModelSpec(BaseModel):
    """A model role: the name its tables show, the backend, the model (a
    params/models.yaml name for a local model, an API id, a path) and the
    backend's constructor options."""

    model_config = _STRICT
    name: Name
    backend: Literal[BACKENDS]
    model: Name
    options: dict[str, Any] = {}
    # the model's own decoding where its files say none (medaudit.llm.decoding): the
    # upstream generation_config.json's do_sample, temperature, top_p, top_k, repetition_penalty
    generation_config: dict[str, Any] | None = None


class Price(BaseModel):
    """A model's price in a profile's ``pricing``: US dollars per million input and
    per million output tokens (both at least 0)."""
    model_config = _STRICT
    input_per_mtok: Annotated[float, Field(ge=0)] = 0.0
    output_per_mtok: Annotated[float, Field(ge=0)] = 0.0


class BenchmarkFile(BaseModel):
    """A user's copy of a released benchmark file (``fairmedqa_dataset``):
    its path (relative paths from the compendium's root) and, optionally,
    the sha256 it must have."""

    model_config = _STRICT
    path: Name
    sha256: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")] | None = None


class Profile(BaseModel):
    """Every key of every profile and notebook ``parameters`` cell. All but
    ``models`` are required: a profile sets every key (a missing key would
    silently fall back to the notebook's smoke value). The model roles hold
    full specs here: a name given for one is replaced by its ``models`` entry
    before this model validates (:func:`validate`)."""

    model_config = _STRICT

    profile: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)]          # numpy/pandas random_state range
    # the profile's models, each defined once (name -> spec); the roles below name them. Not a notebook parameter
    models: dict[Name, ModelSpec] = {}
    # 01 data prep
    selection_file: Name
    partner_sex: Literal["same_sex", "any", "off"] | None   # 01's partner rule (null: the selection file's)
    # 01: the terms of seed 000 A.4's subset (selection.psychiatry_terms_key)
    psychiatry_subset: Literal[tuple(PSYCHIATRY_SUBSETS)]
    n_items: PosInt | None
    medqa_files: Annotated[list[Name], Field(min_length=1)]   # under data/raw/ or absolute
    # 02 augmentation
    conditions_file: Name
    conditions: Names
    methods: Annotated[list[Literal["standalone", "embedded"]], Field(min_length=1)]
    embedded_noun: Literal["patient", "vignette"]   # B.1's noun: the seed's "patient" | the vignette's (perturb)
    # 03 inference
    subject: ModelSpec
    infer_items: PosInt | None
    infer_conditions: Names
    infer_methods: Annotated[list[Literal["standalone", "embedded"]], Field(min_length=1)]
    infer_subsets: Annotated[list[Literal[SUBSETS]], Field(min_length=1)]
    prompt_formats: Names
    k_samples: PosInt
    temperature: Temperature
    # null: no top-p is sent (an API model's own default): for models that take temperature or top_p, not both
    # (:func:`sampling_problems`); a local model needs a value
    top_p: TopP | None
    max_tokens: PosInt
    pricing: dict[Name, Price]
    recorded_answers: list[Name]          # files under data/ imported by 03 (data/recorded/README.md)
    recorded_runs: list[Name]             # files under data/ replayed into the store by 02, 03, 05, 06
    # 04 calibration
    n_boot: PosInt
    calibration_models: Names | None     # the models 04 analyses (null: every model in the store)
    unparsed_rule: Literal[UNPARSED_RULES]     # seed 000 §2: "incorrect"
    calibration_margin: Margin  # δ of 04's and 05's verdicts (docs/statistics.md: seed 000's smallest named drop)
    # 05 open-ended
    open_models: Annotated[list[ModelSpec], Field(min_length=1)]
    open_items: PosInt | None
    open_conditions: Names
    open_samples: PosInt
    open_temperature: Temperature
    open_max_tokens: PosInt
    reformulate_max_attempts: PosInt
    reformulate_fallback: Literal["rules", "none"] | None
    cluster_methods: Annotated[list[Literal[CLUSTER_METHODS]], Field(min_length=1)]
    cluster_max_attempts: PosInt
    cluster_max_tokens: PosInt
    embedding_threshold: Annotated[float, Field(ge=0, le=2)]   # a cosine distance
    judge_b: ModelSpec | None
    human_labels: Name | None
    openended_answer_prompt: Literal["neutral", "single"]   # openended.ANSWER_PROMPTS (checked by the tests)
    judge_context: Literal[JUDGE_CONTEXTS]     # what the B.6 judge sees of the question
    # 07 cultural flips
    cultural_items: PosInt | None
    cultural_forms: Annotated[list[Literal[CULTURAL_FORMS]], Field(min_length=1)]
    cultural_formats: Names
    cultural_samples: PosInt
    cultural_temperature: Temperature
    cultural_decoding: Literal["authors", "greedy"]   # cultural.DECODINGS (checked by the tests)
    cultural_explain_items: PosInt | None
    cultural_arm_items: PosInt | None   # 07: the items of cultural_items the mitigation arms other than none answer
    # seed 003 §III.A ("retained 147 questions per setting"): the items complete across the released
    # models (across_models; the paper's one set) or each model's own complete items (per_model)
    cultural_counting: Literal[COUNTING_RULES]
    cultural_margin: Margin               # δ of 07's verdicts (docs/statistics.md)
    # Table III's numerators: each kept item against its own gold (eq. 1), or the authors'
    # positional reading (the p-th kept item against the gold of the p-th item of the unfiltered list)
    cultural_table3_gold: Literal[READINGS]
    explain_max_tokens: PosInt
    judge: ModelSpec
    judge_max_tokens: PosInt
    augmenter: ModelSpec
    augment_items: PosInt | None
    augment_cultures: Names | None
    augment_max_attempts: PosInt
    augment_temperature: Temperature
    # FairMedQA (02, 08)
    fairmedqa_items: PosInt | None
    fairmedqa_max_chars: PosInt | None
    fairmedqa_groups: Names | None
    agents_model: ModelSpec
    fusion_model: ModelSpec | None        # null: agents_model (seed 001: a GPT-4-class generator, a smaller validator)
    validator_model: ModelSpec | None
    agent_temperature: Temperature
    generation_max_tokens: PosInt
    fusion_max_tokens: PosInt
    # A.7.1 as published | + JSON line (null: fairmedqa.yaml's)
    fairmedqa_generation_output: Literal["text", "json"] | None
    fairmedqa_fusion: Literal["llm", "insert"]   # fairmedqa.FUSIONS: the A.7.2 Fusion-Agent, or before the question
    fairmedqa_models: Annotated[list[ModelSpec], Field(min_length=1)]
    fairmedqa_version_pair: Annotated[list[Name], Field(max_length=2)]
    fairmedqa_counting: Literal["paper", "complete"]
    fairmedqa_unparsed: Literal["wrong", "drop"]
    fairmedqa_mcnemar: Literal["exact", "auto"]
    fairmedqa_margin: Margin              # δ of 08's verdicts (docs/statistics.md)
    fairmedqa_validator_evaluated: bool   # opt-in: evaluate the Validation-Agent's own model (rows marked)
    # the texts 08 answers: 02's agent-written variants, or the published benchmark (a user's copy of
    # XY-Showing/AMQA AMQA_Dataset.jsonl, medaudit.prep.amqa) asked with the authors' no_cot prompt
    fairmedqa_variants: Literal["agents", "released"]
    fairmedqa_dataset: BenchmarkFile | None
    # amqa.EXTRACT: our letter rule, or the authors' extract_choice; None: amqa.extract_rule (authors on the
    # published texts, strict on the agents')
    fairmedqa_extract: Literal[EXTRACT] | None
    # 02's Validation-Agent and 08's models: their answer budget (fairmedqa.answers.answer_budget): the authors'
    # (API: none, Claude and local: 1,024) or a number of tokens
    fairmedqa_answer_max_tokens: Literal["authors"] | PosInt
    mitigation_arms: list[Name]   # params/mitigations.yaml strategies shown beside the plain prompt (08)
    # 03, 07, 08: the arms the models answer (none: the plain prompt; the others paired with it)
    mitigation_strategies: Names
    mitigation_conditions: list[Name] | None   # 03: the conditions the arms other than none run on (null: all)
    # released answers of real models imported by 07 and 08, and the model stages that run
    released_answers: list[Name]    # entries of params/released.yaml (checked against the file: _released_answers)
    model_stages: Annotated[list[Literal[MODEL_STAGES]], Field(max_length=len(MODEL_STAGES))]
    # 06 SOAP notes
    soap_datasets: Annotated[dict[Literal[SOAP_DATASETS], PosInt | None], Field(min_length=1)]
    soap_contexts: Names | None
    soap_axes: Names | None
    soap_models: Annotated[list[ModelSpec], Field(min_length=1)]
    soap_judge: ModelSpec
    soap_judge_b: ModelSpec | None         # a second judge model: judge-vs-judge agreement (soap.judge_vs_judge)
    soap_temperature: Temperature
    soap_note_decoding: Literal["default", "greedy", "set"]   # soap.DECODINGS (checked by the tests)
    soap_note_max_tokens: PosInt
    soap_augment_temperature: Temperature
    soap_augment_max_tokens: PosInt
    soap_incidence_max_tokens: PosInt
    soap_disparity_max_tokens: PosInt
    soap_human_per_context: NonNegInt      # 0: an empty labelling template
    soap_human_labels: Name | None
    soap_disparity_human_labels: Name | None   # a filled soap.disparity_human_template
    # a profile that times the design with random-weight models (llm/random_model.py; gpubench): the only
    # kind that may name one. Not a notebook parameter
    benchmark: bool = False
    # a profile that runs a planted model to validate the chain (llm/planted.py; the validation profile):
    # the only kind that may name one. Not a notebook parameter
    validation: bool = False


# keys a profile sets that no notebook receives (the runner passes them to none)
PROFILE_ONLY = ("models", "benchmark", "validation")
# the notebook parameters: every key of the schema but PROFILE_ONLY
KEYS = tuple(k for k in Profile.model_fields if k not in PROFILE_ONLY)
MODEL_ROLES = ("subject", "judge", "judge_b", "augmenter", "agents_model", "fusion_model", "validator_model",
               "soap_judge", "soap_judge_b")
MODEL_LISTS = ("open_models", "fairmedqa_models", "soap_models")
# name lists in which a repeated entry is a mistake (it repeats work or counts twice)
UNIQUE_LISTS = ("conditions", "methods", "infer_conditions", "infer_methods", "infer_subsets", "prompt_formats",
                "open_conditions", "cluster_methods", "cultural_forms", "cultural_formats", "augment_cultures",
                "fairmedqa_groups", "soap_contexts", "soap_axes", "fairmedqa_version_pair", "released_answers",
                "model_stages", "mitigation_arms", "mitigation_strategies", "mitigation_conditions")


# ==========================================================================
# checks against the definition files


def planted_names() -> tuple[list[str], list[str]]:
    """Every condition a study names (params/conditions.yaml, the cultural
    conditions of params/cultures.yaml, FairMedQA's of params/fairmedqa.yaml,
    and the SOAP audit's as its judges label them: ``<axis>:<group>`` with
    the baseline ``<axis>:BL``, and each axis) and seed 003's cultures: what a
    planted truth's effects and verdict rates may name."""
    from medaudit.studies import cultural
    from medaudit.prep import perturb
    from medaudit.studies.fairmedqa.config import load_config as fairmedqa_config
    from medaudit.studies.soap.config import BASELINE, load_config as soap_config

    cc, sc = cultural.load_config(), soap_config()
    soap = [n for ax in sc.axes for n in (ax, *(f"{ax}:{g}" for g in (BASELINE, *sc.values(ax))))]
    names = [*perturb.load_conditions(_params_dir() / "conditions.yaml").names(), *cc.conditions(),
             *fairmedqa_config().conditions(), *soap]
    return list(dict.fromkeys(names)), cc.culture_names


def _check_planted(pr: Problems, path: str, spec: Mapping, validation: bool) -> None:
    """A planted model (llm/planted.py): only in a profile that declares
    ``validation: true``, under a name that says so, naming a truth of
    params/planted.yaml whose every key is valid (the problems name the
    file, the key and the values allowed)."""
    model, options = spec.get("model"), spec.get("options") or {}
    if not validation:
        pr.add(f"{path}.backend", "a planted model answers from a declared truth, to validate the chain: only a "
               "validation profile (validation: true, e.g. validation) may use it", "planted")
    if "planted" not in str(spec.get("name", "")).lower():
        pr.add(f"{path}.name", "a planted model's name must say 'planted' (it labels every table row)",
               spec.get("name"))
    if not planted.is_planted(model):
        pr.add(f"{path}.model", f"a planted model is named planted:<truth of params/{planted.FILE}>", model)
        return
    truths, err = safe_load(f"params/{planted.FILE}", planted.read_truths)
    if err:
        pr.add(f"{path}.model", err, model)
        return
    name = planted.truth_name(model)
    if name not in truths:
        pr.add(f"{path}.model", f"no truth '{name}' in params/{planted.FILE}{did_you_mean(name, truths)} "
               f"(truths: {', '.join(truths)})", model)
        return
    for opt in options:
        if opt != "seed":
            pr.add(f"{path}.options.{opt}", "not an option of a planted model (it takes: seed)", options[opt])
    seed = options.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        pr.add(f"{path}.options.seed", "must be a whole number >= 0", seed)
    known, err = safe_load("the conditions cannot be checked", planted_names)
    for problem in ([err] if err else planted.check(name, truths[name], *(known or (None, None)))):
        pr.add(f"{path}.model", problem, model)


def _check_model(pr: Problems, path: str, spec: Mapping, registry: dict | None, benchmark: bool = False,
                 validation: bool = False) -> None:
    """A model spec: a planted one here (:func:`_check_planted`: its truth names the studies'
    conditions), any other by :func:`medaudit.llm.specs.check_model`."""
    backend, model = spec.get("backend"), spec.get("model")
    if backend == "planted" or planted.is_planted(model):
        if backend != "planted":
            pr.add(f"{path}.backend", "a planted:<truth> model runs on the planted backend only", backend)
        _check_planted(pr, path, spec, validation)
        return
    specs.check_model(pr, path, spec, registry, benchmark)


def _unique_lists(c: Cross) -> None:
    """No name is listed twice in a list of :data:`UNIQUE_LISTS` (a repeated
    condition or format would run and count twice)."""
    pr, v, ok = c.pr, c.v, c.ok
    for key in UNIQUE_LISTS:
        if ok(key) and v[key]:
            seen = set()
            for i, x in enumerate(v[key]):
                if x in seen:
                    pr.add(f"{key}[{i}]", f"'{x}' is listed twice", key=key)
                seen.add(x)


def _mitigation_arms(c: Cross) -> None:
    """``mitigation_arms`` / ``mitigation_strategies`` name strategies of
    params/mitigations.yaml (read once for both keys); an arm shown beside
    the plain prompt is never the plain prompt itself, and the strategies
    include 'none' (every other arm is paired with it)."""
    pr, v, ok = c.pr, c.v, c.ok
    arm_keys = [k for k in ("mitigation_arms", "mitigation_strategies") if ok(k) and v[k]]
    if not arm_keys:
        return
    from medaudit.llm import mitigations

    mit, err = safe_load("params/mitigations.yaml", lambda: mitigations.load(_params_dir() / "mitigations.yaml"))
    for key in arm_keys:
        if err:
            pr.add(key, err, v[key])
            continue
        known = [s for s in mit.strategies if key == "mitigation_strategies" or s != mitigations.NONE]
        check_names(pr, key, v[key], known, "params/mitigations.yaml", "strategy")
        if key == "mitigation_strategies":       # a strategy whose prompt text is not known cannot be asked
            for i, s in enumerate(v[key]):
                if s in mit.strategies and not mit.strategies[s].askable:
                    pr.add(f"{key}[{i}]", f"'{s}' is released-only ({mit.strategies[s].released_only}): its "
                                          "released answers are shown in mitigation_arms, but no model can be asked it",
                           v[key], key=key)
    if not err and "mitigation_strategies" in arm_keys and mitigations.NONE not in v["mitigation_strategies"]:
        pr.add("mitigation_strategies", "must include 'none': every other arm is paired with the plain prompt",
               v["mitigation_strategies"])


def _released_answers(c: Cross) -> None:
    """``released_answers`` name entries of params/released.yaml (read
    there, not fixed here: a release added to that file is a profile's
    choice at once)."""
    if not c.ok("released_answers") or not c.v["released_answers"]:
        return
    specs, err = safe_load("params/released.yaml",
                            lambda: yaml.safe_load((_params_dir() / "released.yaml").read_text(encoding="utf-8")))
    if err:
        c.pr.add("released_answers", err, c.v["released_answers"])
        return
    check_names(c.pr, "released_answers", c.v["released_answers"], list(specs or {}), "params/released.yaml",
                 "release")


def _mitigation_conditions(c: Cross) -> None:
    """``mitigation_conditions`` are conditions of ``infer_conditions`` (the
    arms are run only on the conditions notebook 03/04 infers)."""
    if c.ok("mitigation_conditions", "infer_conditions") and c.v["mitigation_conditions"]:
        check_names(c.pr, "mitigation_conditions", c.v["mitigation_conditions"], c.v["infer_conditions"],
                     "infer_conditions", "condition")


def _definition_files(c: Cross) -> None:
    """``selection_file`` and ``conditions_file`` exist under params/. Must run
    before :func:`_identity_conditions`: a missing file is marked bad here, so
    the conditions are not checked against a file that is not there."""
    pr, v, ok = c.pr, c.v, c.ok
    for key in ("selection_file", "conditions_file"):
        if ok(key) and not (_params_dir() / v[key]).is_file():
            files = sorted(p.name for p in _params_dir().glob("*.yaml"))
            pr.add(key, f"no file params/{v[key]}{did_you_mean(v[key], files)}", v[key])
            c.bad.add(key)


def _identity_conditions(c: Cross) -> None:
    """Notebooks 02–05: ``conditions`` and ``methods`` are defined in
    params/<conditions_file>; ``infer_conditions`` / ``open_conditions`` are
    built ones (in ``conditions``: 02 builds variants only for those) and
    include the base condition every comparison is against."""
    pr, v, ok = c.pr, c.v, c.ok
    if not ok("conditions_file"):
        return
    from medaudit.prep import perturb

    cs, err = safe_load(f"params/{v['conditions_file']}",
                         lambda: perturb.load_conditions(_params_dir() / v["conditions_file"]))
    if err:
        pr.add("conditions_file", err, v["conditions_file"])
        return
    where = f"params/{v['conditions_file']}"
    names = cs.names()
    built = check_names(pr, "conditions", v["conditions"], names, where, "condition") \
        if ok("conditions") else names
    if ok("methods"):
        check_names(pr, "methods", v["methods"], list(cs.templates), where + " (templates)", "method")
    for key, notebook in (("infer_conditions", "03/04"), ("open_conditions", "05")):
        if not ok(key):
            continue
        for i, cond in enumerate(v[key]):
            if cond in built:
                continue
            m = re.fullmatch(r"(.+?)\s*\(embedded\)", cond)
            if m:
                pr.add(f"{key}[{i}]", f"name the condition ('{m.group(1)}') and list 'embedded' in "
                                      "infer_methods: the embedded form is built from the method", key=key)
            elif cond in names:
                pr.add(f"{key}[{i}]", f"'{cond}' is not in `conditions` (notebook 02 builds variants only "
                                      f"for those, so {notebook} would drop it)", key=key)
            else:
                pr.add(f"{key}[{i}]", f"unknown condition '{cond}'{did_you_mean(cond, names)} "
                                      f"({where} defines: {', '.join(names)})", key=key)
        if BASE not in v[key]:
            pr.add(key, f"must include '{BASE}': every comparison of notebook {notebook} is against it",
                   v[key])


def _infer_methods(c: Cross) -> None:
    """``infer_methods`` are among ``methods`` (notebook 02 builds variants
    only for those, so 03/04 would find none for another)."""
    if c.ok("infer_methods", "methods"):
        for i, m in enumerate(c.v["infer_methods"]):
            if m not in c.v["methods"]:
                c.pr.add(f"infer_methods[{i}]", f"'{m}' is not in `methods` (notebook 02 builds no {m} variants)",
                         key="infer_methods")


def _prompt_formats(c: Cross) -> None:
    """Notebooks 03 and 07: ``prompt_formats`` / ``cultural_formats`` are
    multiple-choice formats of :data:`medaudit.llm.formats.FORMATS`."""
    from medaudit.llm import formats

    for key in ("prompt_formats", "cultural_formats"):
        if c.ok(key):
            check_names(c.pr, key, c.v[key], formats.names("mcq"), "medaudit.llm.formats.FORMATS", "prompt format")


def _second_judges(c: Cross) -> None:
    """Notebooks 05 and 06: a second judge (``judge_b``, ``soap_judge_b``) is
    another model than the first (else its verdicts are the first's, served from the store)."""
    v = c.v
    for first, second in (("judge", "judge_b"), ("soap_judge", "soap_judge_b")):
        if c.ok(first, second) and isinstance(v[second], Mapping) and isinstance(v[first], Mapping) \
                and all(v[second].get(k) == v[first].get(k) for k in ("backend", "model", "options")):
            c.pr.add(second, f"is the model of {first} (its verdicts would be the first judge's, served from "
                     "the store): name another model, or null for no second judge", v[second].get("name"))


def _model_roles(c: Cross) -> None:
    """Every model spec is valid against params/models.yaml: the entries of
    ``models``, then each role (:data:`MODEL_ROLES`) and list entry
    (:data:`MODEL_LISTS`) not given as the name of one (those were checked as
    their entry); no two models of a list share a name (their rows would merge)."""
    from .llm import models

    pr, v, ok, named = c.pr, c.v, c.ok, c.named
    bench = bool(v.get("benchmark")) and "benchmark" not in c.bad
    valid = bool(v.get("validation")) and "validation" not in c.bad
    registry, err = safe_load("params/models.yaml", models.registry)
    if err:
        pr.add("subject", err)
    if ok("models"):
        for name, spec in v["models"].items():
            if f"models.{name}" not in c.bad:
                _check_model(pr, f"models.{name}", spec, registry, bench, valid)
    for key in MODEL_ROLES:
        if ok(key) and v[key] is not None and key not in named:
            _check_model(pr, key, v[key], registry, bench, valid)
    for key in MODEL_LISTS:
        if ok(key):
            seen = set()
            for i, spec in enumerate(v[key]):
                if f"{key}[{i}]" not in named:
                    _check_model(pr, f"{key}[{i}]", spec, registry, bench, valid)
                if spec["name"] in seen:
                    pr.add(f"{key}[{i}].name", "two models share this name (their rows would merge)", spec["name"])
                seen.add(spec["name"])


def _recorded_files(c: Cross) -> None:
    """``recorded_answers`` / ``recorded_runs`` are files under data/, so that
    a wrong path fails before any notebook runs rather than in the middle of one."""
    for key in ("recorded_answers", "recorded_runs"):
        if c.ok(key):
            for i, f in enumerate(c.v[key]):
                if not paths.data(*Path(f).parts).is_file():
                    c.pr.add(f"{key}[{i}]", "no such file under data/", f, key=key)


def _medqa_files(c: Cross) -> None:
    """``medqa_files`` exist (absolute, or relative to data/raw/): notebook 01
    reads them, and a wrong path fails before any notebook runs."""
    if c.ok("medqa_files"):
        for i, f in enumerate(c.v["medqa_files"]):
            if not (Path(f).expanduser() if Path(f).is_absolute() else paths.raw(*Path(f).parts)).is_file():
                c.pr.add(f"medqa_files[{i}]", "no such file (absolute, or relative to data/raw/)", f,
                         key="medqa_files")


def _human_label_files(c: Cross) -> None:
    """The human-label files named (``human_labels``, ``soap_human_labels``,
    ``soap_disparity_human_labels``) exist, so that a wrong path fails before
    any notebook runs rather than in the middle of one."""
    for key in ("human_labels", "soap_human_labels", "soap_disparity_human_labels"):
        if c.ok(key) and c.v[key] is not None and existing_file(c.v[key]) is None:
            c.pr.add(key, "no such file (give an absolute path, or one relative to notebooks/)", c.v[key])


# The checks across keys and against the definition files, run in this order
# by :func:`_cross_check`, then each study's own (:func:`medaudit.studies.profile.checks`).
# The order matters where a check marks a key bad (``_definition_files`` before
# ``_identity_conditions``); otherwise it is the order in which the problems are listed.
CROSS_CHECKS = (_unique_lists, _mitigation_arms, _released_answers, _mitigation_conditions, _definition_files,
                _identity_conditions, _infer_methods, _prompt_formats, _second_judges, _model_roles,
                _recorded_files, _medqa_files, _human_label_files)


def _cross_check(pr: Problems, v: dict, bad: set[str], named: Mapping[str, str] | None = None) -> None:
    """Run :data:`CROSS_CHECKS` in order on the keys whose own type and range
    were fine (``bad``: keys already reported; ``models.<name>`` for one entry
    of ``models``). ``named``: the roles (paths) given as the name of a
    ``models`` entry, checked as that entry. Each problem is recorded with the
    check that found it (``pr.found_by``); a check that fails with an
    exception is named in the exception's notes. The studies' checks are
    imported here, when a profile is checked, not when this module is."""
    from medaudit.studies import profile

    c = Cross(pr, v, bad, named)
    for check in (*CROSS_CHECKS, *profile.checks()):
        before = len(pr.lines)
        try:
            check(c)
        except Exception as e:
            e.add_note(f"in the profile cross-check {check.__module__}.{check.__name__}")
            raise
        pr.found_by += [(check.__name__, line) for line in pr.lines[before:]]


# ==========================================================================
# public API


def _params_dir() -> Path:
    return paths.project_root() / "params"


_ROLE_IS = "a model spec {name, backend, model, options} or the name of an entry of `models`"


def _registry_hint(name: str) -> str:
    """For an unknown role name that params/models.yaml registers: how to use it."""
    from .llm import models as registry_module

    registry, _ = safe_load("params/models.yaml", registry_module.registry)
    spec = (registry or {}).get(name)
    if not isinstance(spec, Mapping):
        return ""
    return (f"; '{name}' is a model of params/models.yaml, which roles do not name: add an entry to `models` "
            f"(e.g. -y '{{models: {{{name}: {{name: {name}, backend: {spec.get('backend')}, model: {name}}}}}}}') "
            "or give the full spec")


def _resolve_names(pr: Problems, mapping: Mapping[str, Any]) -> tuple[dict, dict[tuple, str], set[tuple]]:
    """``mapping`` with every model role (or list entry) given as a name
    replaced by a copy of that entry of ``models``; also ``{loc: name}`` of
    the roles so named and the locs of the names ``models`` lacks (each
    reported here, with the closest defined name)."""
    models = mapping.get("models", {})
    defined = models if isinstance(models, Mapping) else {}
    out = dict(mapping)
    named: dict[tuple, str] = {}
    unknown: set[tuple] = set()

    def one(loc: tuple, key: str, name: str):
        if name in defined:
            named[loc] = name
            return copy.deepcopy(defined[name])
        unknown.add(loc)
        if isinstance(models, Mapping):   # else `models` itself is the problem reported
            have = (f"`models` defines: {', '.join(map(str, defined))}" if defined
                    else "this profile defines no `models`")
            pr.add(dotted_path(loc), f"no model named '{name}' in `models`{did_you_mean(name, defined)} ({have})"
                   f"{_registry_hint(name)}", name, key=key)
        return name

    for key in MODEL_ROLES:
        if isinstance(mapping.get(key), str):
            out[key] = one((key,), key, mapping[key])
    for key in MODEL_LISTS:
        v = mapping.get(key)
        if isinstance(v, list) and any(isinstance(x, str) for x in v):
            out[key] = [one((key, i), key, x) if isinstance(x, str) else x for i, x in enumerate(v)]
    return out, named, unknown


def _validate(mapping: Mapping[str, Any], source: str | Mapping[str, str] | None) -> tuple[Profile, dict]:
    """(the :class:`Profile`, the mapping with model names resolved), or one
    :class:`ConfigError` listing every problem."""
    pr = Problems(source)
    profile = mapping.get("profile") if isinstance(mapping, Mapping) else None
    if not isinstance(mapping, Mapping):
        raise ConfigError([f"a profile must be a mapping of key: value, not {type(mapping).__name__}"
                           f"{f' (from {source})' if isinstance(source, str) else ''}"])
    resolved, named, unknown = _resolve_names(pr, mapping)
    bad: set[str] = {str(loc[0]) for loc in unknown}
    result = None
    try:
        result = Profile.model_validate(resolved)
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(err["loc"])
            key = str(loc[0]) if loc else ""
            if {loc[:1], loc[:2]} & (set(named) | unknown):
                # a role naming an entry of `models`: the entry's problems are reported once, as models.<name>;
                # an unknown name: reported by _resolve_names
                bad.add(key)
                continue
            bad.add(f"models.{loc[1]}" if key == "models" and len(loc) >= 2 else key)
            path = dotted_path(loc)
            if err["type"] == "extra_forbidden":
                if len(loc) == 1:
                    choices = tuple(Profile.model_fields)
                else:   # an unknown field of a model spec or a price
                    choices = ModelSpec.model_fields if len(loc) >= 2 and key != "pricing" else Price.model_fields
                pr.add(path, f"unknown key{did_you_mean(loc[-1], choices)}", err["input"], key=key)
            elif err["type"] == "missing":
                pr.add(path, "missing (every profile sets every key; params/default.yaml lists them all)", key=key)
            else:
                hint = f" (null means: {NULL_MEANS[key]})" if key in NULL_MEANS and len(loc) <= 2 else ""
                if err["type"] == "model_type" and key in MODEL_ROLES + MODEL_LISTS and len(loc) <= 2:
                    hint += f" ({_ROLE_IS})"
                pr.add(path, f"{err['msg']}{hint}", err.get("input", ...), key=key)
    values = {k: val for k, val in resolved.items() if k in Profile.model_fields}
    _cross_check(pr, values, bad, {dotted_path(loc): name for loc, name in named.items()})
    if pr.lines:
        raise ConfigError(pr.lines, profile if isinstance(profile, str) else None, pr.found_by)
    return result, resolved


def validate(mapping: Mapping[str, Any], source: str | Mapping[str, str] | None = None) -> Profile:
    """The :class:`Profile` of ``mapping`` (a whole profile, overrides
    merged; model roles may name entries of its ``models``), or one
    :class:`ConfigError` listing every problem. ``source`` says where the
    values came from: one description for all, or a mapping key ->
    description (``"*"``: the default; ``"models.<name>"``: one entry of
    ``models``)."""
    return _validate(mapping, source)[0]


def resolve(mapping: Mapping[str, Any], source: str | Mapping[str, str] | None = None) -> dict:
    """``mapping`` validated (as :func:`validate`), with every model name
    replaced by its ``models`` entry and the profile-only keys
    (:data:`PROFILE_ONLY`) left out: the parameters the notebooks receive."""
    resolved = _validate(mapping, source)[1]
    return {k: v for k, v in resolved.items() if k not in PROFILE_ONLY}


def aliases_to_names(mapping: Any) -> Any:
    """``mapping`` (a profile or an override as YAML read it) with every model
    role that is a YAML alias (``*name``) of an entry of its own ``models``
    replaced by that entry's name, so that an override redefining the entry
    reaches the role as well. An alias is the very object of the entry it
    refers to, which is how it is recognised; a spec written out in full
    stays a spec of its own."""
    if not isinstance(mapping, dict) or not isinstance(mapping.get("models"), dict):
        return mapping
    ids: dict[int, str] = {}
    for name, spec in mapping["models"].items():
        if isinstance(spec, dict):
            ids.setdefault(id(spec), name)
    out = dict(mapping)
    for key in MODEL_ROLES:
        if isinstance(out.get(key), dict) and id(out[key]) in ids:
            out[key] = ids[id(out[key])]
    for key in MODEL_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [ids.get(id(x), x) if isinstance(x, dict) else x for x in out[key]]
    return out


def yaml_problem(e: yaml.YAMLError, what: str) -> str:
    """A YAML error as one line, ``what:line:column: not valid YAML: problem``
    (the editor's and the compiler's convention; line and column from 1).
    A key without its colon (``k_samples 5``) is reported where that key
    is, not where the parser gave up (the line after it)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if getattr(e, "context", None) == "while scanning a simple key" and getattr(e, "context_mark", None):
        mark = e.context_mark
    where = f"{what}:{mark.line + 1}:{mark.column + 1}" if mark is not None else what
    if isinstance(e, yaml.MarkedYAMLError):
        why = "; ".join(x for x in (e.problem, e.context) if x) or str(e)
        if e.context == "while scanning a simple key" and getattr(e.context_mark, "buffer", None):
            line = e.context_mark.buffer.split("\n")[e.context_mark.line].strip().rstrip("\0")
            why = f"could not find the ':' after the key of {line!r} (write `name: value`)"
    else:
        why = str(e)
    return f"{where}: not valid YAML: {why}"


def read_yaml(text: str, what: str) -> Any:
    """YAML text as Python, a key written twice being an error; errors name
    ``what`` with the line and column (:func:`yaml_problem`)."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise ConfigError([yaml_problem(e, what)]) from None


profiles = paths.profiles     # re-exported: the profiles are files in params/


def _profile_file(name: str, known: list[str], below: tuple[str, ...] = ()) -> tuple[dict, str]:
    """(the keys of ``params/<name>.yaml``, where they came from). A profile
    may start from another (``extends: paper``): the other's keys, then its
    own on top (``models`` entry by entry); its ``profile`` key is its own."""
    rel = f"params/{name}.yaml"
    raw = read_yaml((_params_dir() / f"{name}.yaml").read_text(encoding="utf-8"), rel)
    if not isinstance(raw, dict):
        raise ConfigError([f"{rel}: a profile must be a mapping of key: value"])
    raw = aliases_to_names(raw)
    parent = raw.pop("extends", None)
    if parent is None:
        return raw, rel
    if not isinstance(parent, str) or parent not in known:
        raise ConfigError([f"{rel}: extends = {short_repr(parent)}: not a profile in params/"
                           f"{did_you_mean(parent, known) if isinstance(parent, str) else ''} "
                           f"(profiles: {', '.join(known)})"])
    if parent == name or parent in below:
        raise ConfigError([f"{rel}: extends = '{parent}': profiles extend each other in a circle "
                           f"({' -> '.join((*below, name, parent))})"])
    base, base_rel = _profile_file(parent, known, (*below, name))
    base.pop("profile", None)
    merged = {**base, **raw}
    if isinstance(base.get("models"), dict) and isinstance(raw.get("models"), dict):
        merged["models"] = {**base["models"], **raw["models"]}
    return merged, f"{rel} (extending {base_rel})"


def load(profile_name: str, overrides: Mapping[str, Any] | None = None,
         sources: Mapping[str, str] | None = None) -> dict:
    """``params/<profile_name>.yaml`` with ``overrides`` applied on top,
    validated: the merged mapping with every model name resolved to its
    spec and without ``models`` (:func:`resolve`: ready to pass to a
    notebook). An override of ``models`` replaces the entries it gives and
    keeps the profile's others. ``sources``: where each override came from
    (e.g. ``"-p k_samples 5"``; ``"models.<name>"`` for one entry)."""
    known = profiles()
    if profile_name not in known and (_params_dir() / f"{profile_name}.yaml").is_file():
        # a profile file that does not parse is not listed as a profile: name its error, not "unknown profile"
        read_yaml((_params_dir() / f"{profile_name}.yaml").read_text(encoding="utf-8"), f"params/{profile_name}.yaml")
    if profile_name not in known:
        raise ConfigError([f"unknown profile '{profile_name}'{did_you_mean(profile_name, known)} "
                           f"(profiles in params/: {', '.join(known)})"])
    raw, rel = _profile_file(profile_name, known)
    problems = []
    if raw.get("profile", profile_name) != profile_name:
        problems.append(f"profile = {raw['profile']!r} (from {rel}): must be the file's name, '{profile_name}'")
    overrides = dict(overrides or {})
    if "profile" in overrides and overrides["profile"] != profile_name:
        src = (sources or {}).get("profile", "an override")
        problems.append(f"profile = {short_repr(overrides['profile'])} (from {src}): the profile is chosen with "
                        f"--profile (make: PROFILE=), not overridden; this run is '{profile_name}'")
    if problems:
        raise ConfigError(problems, profile_name)
    merged = {**raw, **overrides, "profile": profile_name}
    where = {"*": rel, **{k: (sources or {}).get(k, "an override") for k in overrides}}
    if isinstance(raw.get("models"), dict) and isinstance(overrides.get("models"), Mapping):
        # entry by entry: redefining one entry keeps the profile's others
        merged["models"] = {**raw["models"], **overrides["models"]}
        where["models"] = rel
        for name in overrides["models"]:
            where[f"models.{name}"] = (sources or {}).get(f"models.{name}",
                                                          (sources or {}).get("models", "an override"))
    return resolve(merged, where)


__all__ = ["ConfigError", "KEYS", "PROFILE_ONLY", "ModelSpec", "Profile", "aliases_to_names", "load", "profiles",
           "read_yaml", "resolve", "validate"]
