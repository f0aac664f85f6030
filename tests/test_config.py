"""The profile schema (medaudit.config): every shipped profile passes, and
each kind of parameter mistake is an error that names the key, the bad value
and, where one exists, the closest valid name. The checks run against the
real definition files in params/."""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

from medaudit import config
from medaudit.llm import specs
from medaudit.studies import openended, soap

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SHIPPED = ["default", "paper", "smoke"]


def _notebook_parameters(nb_path: Path) -> set[str]:
    cell = next(c for c in nbformat.read(nb_path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    return {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign) for t in node.targets}


def _error(overrides: dict, profile: str = "smoke") -> str:
    with pytest.raises(config.ConfigError) as e:
        config.load(profile, overrides, {k: f"-p {k}" for k in overrides})
    return str(e.value)


@pytest.fixture()
def tmp_root(tmp_path, monkeypatch):
    """A copy of params/ under MEDAUDIT_ROOT, for profiles written by a test."""
    shutil.copytree(ROOT / "params", tmp_path / "params")
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    return tmp_path


# -------------------------------------------------------------- what passes


def test_the_shipped_profiles_are_found():
    # gpubench: tests/test_random_model.py; validation: tests/test_planted.py
    assert sorted(config.profiles()) == sorted(SHIPPED + ["gpubench", "validation", "validation-paper"])


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_validates(name):
    merged = config.load(name)
    assert merged["profile"] == name
    assert set(merged) == set(config.KEYS)
    # load returns what the notebooks receive: the values as written, model roles as full specs (the
    # shipped profiles write each role as a YAML alias of a `models` entry, which plain YAML resolves too)
    as_read = yaml.safe_load((ROOT / "params" / f"{name}.yaml").read_text())
    assert merged == {k: v for k, v in as_read.items() if k not in config.PROFILE_ONLY}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_names_each_model_once(name):
    """Every model role of a shipped profile names an entry of its `models`."""
    raw = config.aliases_to_names(config.read_yaml((ROOT / "params" / f"{name}.yaml").read_text(), name))
    roles = [raw[k] for k in config.MODEL_ROLES if raw[k] is not None]
    roles += [x for k in config.MODEL_LISTS for x in raw[k]]
    assert roles and all(isinstance(r, str) and r in raw["models"] for r in roles), roles


def test_the_schema_is_the_union_of_the_notebooks_parameters():
    """Every key a notebook declares is in the schema, and every schema key
    (so every profile key: unknown keys are errors) is used by a notebook."""
    declared = {nb.name: _notebook_parameters(nb) for nb in NOTEBOOKS}
    union = set().union(*declared.values())
    for name, keys in declared.items():
        assert keys <= set(config.KEYS), f"{name} declares {sorted(keys - set(config.KEYS))}, unknown to the schema"
    assert set(config.KEYS) - union == set(), f"no notebook declares {sorted(set(config.KEYS) - union)}"
    # `models` (the profile's named models), `benchmark` (random weights allowed) and `validation` (a
    # planted model allowed) are the schema keys no notebook receives
    assert config.PROFILE_ONLY == ("models", "benchmark", "validation") and not union & set(config.PROFILE_ONLY)
    assert set(config.Profile.model_fields) == set(config.KEYS) | set(config.PROFILE_ONLY)


def test_fixed_name_sets_follow_the_library():
    assert config.CLUSTER_METHODS == openended.METHODS


def test_the_cross_checks_are_an_explicit_ordered_list_of_documented_checks():
    """The checks across keys run in the order CROSS_CHECKS names them: a
    missing conditions_file is marked bad by ``_definition_files`` before
    ``_identity_conditions`` reads it (the one order that matters)."""
    from medaudit.studies import profile

    names = [c.__name__ for c in config.CROSS_CHECKS]
    assert names == ["_unique_lists", "_mitigation_arms", "_released_answers", "_mitigation_conditions",
                     "_definition_files", "_identity_conditions", "_infer_methods", "_prompt_formats",
                     "_second_judges", "_model_roles", "_recorded_files", "_medqa_files", "_human_label_files"]
    # then each study's own, declared beside its definitions
    studies = [f"{c.__module__}.{c.__name__}" for c in profile.checks()]
    assert studies == ["medaudit.studies.cultural.config.check_augment_cultures",
                       "medaudit.studies.fairmedqa.config.check_groups",
                       "medaudit.studies.fairmedqa.config.check_version_pair",
                       "medaudit.studies.fairmedqa.config.check_dataset",
                       "medaudit.studies.fairmedqa.config.check_validator_not_evaluated",
                       "medaudit.studies.soap.config.check_contexts_and_axes"]
    assert all(c.__doc__ and len(c.__doc__.split()) >= 8 for c in (*config.CROSS_CHECKS, *profile.checks())), \
        "each says what and why"
    with pytest.raises(config.ConfigError) as e:
        config.load("smoke", {"conditions_file": "nosuch.yaml"}, {"conditions_file": "-p conditions_file"})
    assert list(e.value.found_by.values()) == ["_definition_files"], e.value.found_by   # not read after


def test_each_problem_names_the_check_that_found_it():
    with pytest.raises(config.ConfigError) as e:
        config.load("smoke", {"augment_cultures": ["southeast_asain"], "judge_b": None, "fairmedqa_version_pair":
                              ["only-one"]}, {"augment_cultures": "-p", "fairmedqa_version_pair": "-p"})
    by = e.value.found_by
    assert sorted(by.values()) == ["check_augment_cultures", "check_version_pair"], by
    assert [by[p] for p in e.value.problems] == ["check_augment_cultures", "check_version_pair"]  # the list's order
    assert "unknown culture 'southeast_asain'" in next(p for p, c in by.items() if c == "check_augment_cultures")


def test_a_check_that_breaks_is_named(monkeypatch):
    def _broken(c):
        """A check with a bug (a key it does not expect)."""
        raise KeyError("no such key")

    checks = list(config.CROSS_CHECKS)
    monkeypatch.setattr(config, "CROSS_CHECKS", (*checks[:3], _broken, *checks[3:]))
    with pytest.raises(KeyError) as e:
        config.load("smoke")
    assert any("profile cross-check" in n and "test_config._broken" in n for n in e.value.__notes__), e.value.__notes__


def test_null_means_all_where_the_notebooks_say_so():
    merged = config.load("smoke", {"infer_items": None, "open_items": None, "n_items": None, "cultural_items": None,
                                   "augment_cultures": None, "fairmedqa_groups": None, "soap_contexts": None,
                                   "soap_axes": None, "soap_datasets": {"mts_dialog": None}, "judge_b": None})
    assert merged["infer_items"] is None


def test_an_unregistered_local_model_may_be_a_file(tmp_path):
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    spec = {"name": "mine", "backend": "llamacpp", "model": "mine", "options": {"path": str(gguf)}}
    assert config.load("smoke", {"subject": spec})["subject"] == spec


def test_an_api_model_needs_no_registry_entry():
    spec = {"name": "gpt-4.1-mini", "backend": "openai", "model": "gpt-4.1-mini",
            "options": {"concurrency": 8, "api_key_env": "OPENAI_API_KEY"}}
    assert config.load("paper", {"subject": spec, "judge_b": spec})["judge_b"] == spec


# -------------------------------------------------------------- what fails


def test_an_unknown_key_names_it_and_the_closest_valid_one():
    msg = _error({"k_sample": 10})
    assert "k_sample = 10" in msg and "from -p k_sample" in msg
    assert "unknown key; did you mean 'k_samples'?" in msg


def test_an_unknown_key_in_a_model_spec_is_named():
    spec = {"name": "q", "backend": "llamacpp", "model": "qwen2.5-coder-1.5b", "option": {"n_ctx": 4096}}
    assert "open_models[0].option" in _error({"open_models": [spec]})
    assert "did you mean 'options'?" in _error({"open_models": [spec]})


@pytest.mark.parametrize("key", ["conditions", "infer_conditions", "open_conditions"])
def test_an_unknown_condition_is_named(key):
    msg = _error({key: ["base", "+homoo"]})
    assert f"{key}[1]" in msg and "unknown condition '+homoo'; did you mean '+homo'?" in msg
    assert "params/conditions.yaml defines" in msg


def test_a_condition_not_built_by_02_is_an_error():
    """smoke's `conditions` holds every condition; drop one and ask 03 for it."""
    conds = [c for c in yaml.safe_load((ROOT / "params" / "smoke.yaml").read_text())["conditions"] if c != "+homo"]
    msg = _error({"conditions": conds})
    assert "infer_conditions[2]" in msg and "'+homo' is not in `conditions`" in msg


def test_an_embedded_condition_name_points_to_infer_methods():
    msg = _error({"infer_conditions": ["base", "+homo (embedded)"]})
    assert "list 'embedded' in infer_methods" in msg


def test_comparisons_need_the_base_condition():
    assert "must include 'base'" in _error({"infer_conditions": ["+hetero", "+homo"]})


def test_counts_below_one_are_errors_all_reported_at_once():
    msg = _error({"k_samples": -1, "infer_items": 0})
    assert "2 problems" in msg
    assert "k_samples = -1" in msg and "infer_items = 0" in msg
    assert "greater than or equal to 1" in msg and "null means: every item of the pool" in msg


@pytest.mark.parametrize("key,value,expect", [
    ("k_samples", "three", "valid integer"),
    ("k_samples", True, "valid integer"),        # not silently 1
    ("k_samples", 2.5, "valid integer"),
    ("temperature", "hot", "valid number"),
    ("conditions", "base", "valid list"),
    ("subject", 3, "the name of an entry of `models`"),
    ("human_labels", 3, "valid string"),
])
def test_a_wrong_type_is_an_error(key, value, expect):
    msg = _error({key: value})
    assert f"{key} = {value!r}" in msg and expect in msg


@pytest.mark.parametrize("key,value", [
    ("temperature", -0.1), ("top_p", 0), ("top_p", 1.5), ("max_tokens", 0), ("seed", -1), ("seed", 2**32),
    ("embedding_threshold", 3.0), ("open_samples", 0), ("n_boot", 0), ("fairmedqa_max_chars", 0),
    ("soap_datasets", {"mts_dialog": 0}), ("soap_datasets", {}), ("open_models", []), ("prompt_formats", []),
    ("augment_cultures", []), ("fairmedqa_groups", []), ("soap_human_per_context", -1),
])
def test_an_out_of_range_value_is_an_error(key, value):
    assert f"{key}" in _error({key: value})


@pytest.mark.parametrize("key,value,expect", [
    ("prompt_formats", ["mcq", "mcq_explian"], "unknown prompt format 'mcq_explian'; did you mean 'mcq_explain'?"),
    ("cultural_formats", ["letter"], "unknown prompt format 'letter'"),
    ("augment_cultures", ["southeast_asain"], "unknown culture 'southeast_asain'; did you mean 'southeast_asian'?"),
    ("fairmedqa_groups", ["race:black"], "did you mean 'race:Black'?"),
    ("soap_contexts", ["povety"], "unknown SOAP context 'povety'; did you mean 'poverty'?"),
    ("soap_contexts", ["poverty:nurse"], "unknown speaker 'nurse'"),
    ("soap_axes", ["sex"], "unknown axis 'sex'"),
    ("methods", ["standalone", "inline"], "methods[1]"),
    ("infer_subsets", ["psych"], "'main' or 'psychiatry'"),
    ("cluster_methods", ["llm", "kmeans"], "cluster_methods[1]"),
    ("cultural_forms", ["3opt"], "'5opt' or '4opt'"),
    ("infer_conditions", ["base", "+homo", "+homo"], "'+homo' is listed twice"),
    ("fairmedqa_version_pair", ["a"], "must be [] or two model names"),
    ("fairmedqa_version_pair", ["qwen2.5-coder-1.5b", "qwen-9"], "not the name of a fairmedqa_models entry"),
    ("human_labels", "/nonexistent/labels.csv", "no such file"),
    ("selection_file", "selections.yaml", "did you mean 'selection.yaml'?"),
])
def test_every_named_thing_must_exist(key, value, expect):
    assert expect in _error({key: value})


def test_no_context_crossed_with_the_axes_is_an_error():
    # exaggerating_symptoms is crossed with gender only (params/soap.yaml)
    assert soap.load_config().contexts["exaggerating_symptoms"]["axes"] == ["gender"]
    assert "would audit nothing" in _error({"soap_contexts": ["exaggerating_symptoms"], "soap_axes": ["race"]})


def test_a_llamacpp_model_must_be_in_the_registry():
    spec = {"name": "big", "backend": "llamacpp", "model": "qwen2.5-7b", "options": {"n_threads": 2}}
    msg = _error({"judge": spec})
    assert "judge.model = 'qwen2.5-7b'" in msg and "not a model of params/models.yaml" in msg
    assert "qwen2.5-coder-1.5b" in msg   # the local models are listed


def test_a_registry_model_of_another_backend_is_not_a_llamacpp_model():
    spec = {"name": "emb", "backend": "llamacpp", "model": "all-minilm-l6-v2"}
    assert "registers it for the embeddings backend" in _error({"augmenter": spec})


@pytest.mark.parametrize("spec,expect", [
    ({"name": "q", "backend": "llama", "model": "qwen2.5-coder-1.5b"}, "subject.backend"),
    ({"name": "q", "backend": "llamacpp", "model": "qwen2.5-coder-1.5b", "options": {"n_thread": 2}},
     "not an option of the llamacpp backend; did you mean 'n_threads'?"),
    ({"name": "q", "backend": "llamacpp", "model": "qwen2.5-coder-1.5b", "options": {"n_ctx": 0}}, ">= 1"),
    ({"name": "q", "backend": "llamacpp", "model": "x", "options": {"path": "/nonexistent.gguf"}}, "no such file"),
    ({"name": "g", "backend": "openai", "model": "gpt-4.1-mini", "options": {"api_key_env": "sk-abc"}},
     "NAME of the environment variable"),
    ({"name": "", "backend": "openai", "model": "gpt-4.1-mini"}, "subject.name"),
])
def test_a_bad_model_spec_is_an_error(spec, expect):
    msg = _error({"subject": spec})
    assert expect in msg
    assert "sk-abc" not in msg    # a key given by mistake is never echoed


def test_model_names_in_a_list_are_unique():
    spec = {"name": "q", "backend": "llamacpp", "model": "qwen2.5-coder-1.5b"}
    assert "two models share this name" in _error({"soap_models": [spec, spec]})


def test_a_missing_key_is_an_error(tmp_root):
    prof = yaml.safe_load((tmp_root / "params" / "smoke.yaml").read_text())
    del prof["k_samples"]
    (tmp_root / "params" / "mini.yaml").write_text(yaml.safe_dump({**prof, "profile": "mini"}))
    with pytest.raises(config.ConfigError, match=r"k_samples \(from params/mini.yaml\): missing"):
        config.load("mini")


def test_a_key_written_twice_in_a_profile_is_an_error(tmp_root):
    text = (tmp_root / "params" / "smoke.yaml").read_text().replace("profile: smoke", "profile: twice")
    (tmp_root / "params" / "twice.yaml").write_text(text + "\nk_samples: 10\n")
    with pytest.raises(config.ConfigError, match="key 'k_samples' is written twice"):
        config.load("twice")


def test_a_profile_names_itself(tmp_root):
    text = (tmp_root / "params" / "smoke.yaml").read_text()
    (tmp_root / "params" / "other.yaml").write_text(text)    # still says profile: smoke
    with pytest.raises(config.ConfigError, match="must be the file's name, 'other'"):
        config.load("other")
    with pytest.raises(config.ConfigError, match="chosen with --profile"):
        config.load("smoke", {"profile": "paper"})


def test_an_unknown_profile_lists_the_profiles():
    with pytest.raises(config.ConfigError) as e:
        config.load("defualt")
    msg = str(e.value)
    assert "unknown profile 'defualt'; did you mean 'default'?" in msg
    assert "profiles in params/: default, gpubench, paper, smoke" in msg


def test_validate_names_the_source_of_each_value():
    prof = config.load("smoke")
    with pytest.raises(config.ConfigError) as e:
        config.validate({**prof, "top_p": 2}, {"*": "params/smoke.yaml", "top_p": "-y '{top_p: 2}'"})
    assert "top_p = 2 (from -y '{top_p: 2}')" in str(e.value)
    assert isinstance(e.value, ValueError) and len(e.value.problems) == 1
    assert config.validate(prof, "params/smoke.yaml").k_samples == prof["k_samples"]


# -------------------------------------------------------------- models named once

TINY = {"name": "smollm2-135m", "backend": "llamacpp", "model": "smollm2-135m", "options": {"n_threads": 1}}


def _models(profile: str) -> dict:
    return yaml.safe_load((ROOT / "params" / f"{profile}.yaml").read_text())["models"]


def test_a_model_name_resolves_to_its_models_entry():
    models = _models("smoke")
    merged = config.load("smoke", {"judge": "embedded_8k", "models": {"tiny": TINY},
                                   "open_models": ["embedded", "tiny"]})
    assert merged["judge"] == models["embedded_8k"]
    assert merged["open_models"] == [models["embedded"], TINY]
    assert "models" not in merged        # a profile key, not a notebook parameter
    judge = config.validate({**merged, "models": models, "soap_judge": "embedded"}).soap_judge
    assert judge.model_dump(exclude_none=True) == models["embedded"]


def test_redefining_an_entry_switches_every_role_that_names_it():
    before = config.load("default")
    models = _models("default")
    after = config.load("default", {"models": {"embedded": TINY}, "fairmedqa_version_pair": []})
    switched = [k for k in config.MODEL_ROLES if before[k] == models["embedded"]]
    assert switched == ["subject", "judge", "augmenter", "agents_model"]
    assert all(after[k] == TINY for k in switched)
    assert after["open_models"] == [TINY] and after["fairmedqa_models"] == [models["small"], TINY]
    # the other entries are kept (an override replaces only the entries it gives)
    assert after["soap_judge"] == after["soap_models"][0] == models["embedded_8k"] == before["soap_judge"]
    assert {k: v for k, v in after.items() if k not in config.MODEL_ROLES + config.MODEL_LISTS
            and k != "fairmedqa_version_pair"} == {k: v for k, v in before.items() if k not in config.MODEL_ROLES
                                                  + config.MODEL_LISTS and k != "fairmedqa_version_pair"}


def test_a_full_spec_still_works_and_stays_its_own(tmp_root):
    """A role written out in full is not a name: redefining the entry it
    equals leaves it alone (only an alias, *embedded, or a name follows)."""
    (tmp_root / "data" / "raw").rmdir()
    for d in ("raw", "recorded"):     # the smoke profile names raw and recorded files
        (tmp_root / "data" / d).symlink_to(ROOT / "data" / d)
    text = (tmp_root / "params" / "smoke.yaml").read_text().replace("profile: smoke", "profile: full")
    spec = yaml.safe_load(text)["models"]["embedded"]
    text = text.replace("subject: *embedded", f"subject: {yaml.safe_dump(spec, default_flow_style=True).strip()}")
    (tmp_root / "params" / "full.yaml").write_text(text)
    assert config.load("full")["subject"] == spec == config.load("smoke")["subject"]
    moved = config.load("full", {"models": {"embedded": TINY}})
    assert moved["subject"] == spec and moved["judge"] == TINY
    assert config.load("smoke", {"models": {"embedded": TINY}, "judge": spec})["judge"] == spec


@pytest.mark.parametrize("key,value,path", [
    ("judge", "embeded", "judge = 'embeded'"),
    ("soap_models", ["embedded_8k", "embeded_8k"], "soap_models[1] = 'embeded_8k'"),
])
def test_an_unknown_model_name_is_an_error_naming_the_closest(key, value, path):
    msg = _error({key: value})
    assert "1 problem" in msg
    assert f"{path} (from -p {key}): no model named" in msg
    assert "did you mean 'embedded" in msg and "`models` defines: embedded, embedded_8k" in msg


def test_a_registry_name_is_not_a_role_name_but_the_error_says_how():
    msg = _error({"subject": "qwen2.5-coder-0.5b"})
    assert "subject = 'qwen2.5-coder-0.5b' (from -p subject): no model named 'qwen2.5-coder-0.5b' in `models`" in msg
    assert "is a model of params/models.yaml" in msg and "add an entry to `models`" in msg


def test_a_bad_models_entry_is_reported_once_with_its_source():
    """Not once per role that names it; a redefined entry names the override."""
    bad = {**TINY, "options": {"n_thread": 2}}
    msg = _error({"models": {"embedded": bad}})
    assert "1 problem" in msg
    assert "models.embedded.options.n_thread = 2 (from -p models): not an option of the llamacpp backend" in msg
    msg = _error({"models": {"embedded": {**TINY, "backend": "llama"}}})
    assert "1 problem" in msg and "models.embedded.backend = 'llama' (from -p models)" in msg
    assert "unknown key; did you mean 'models'?" in _error({"modles": {"embedded": TINY}})
    assert "models = None" in _error({"models": None})



def test_notebook_05s_second_judge_must_be_another_model():
    """judge_b with judge's backend, model and options would be served the
    first judge's verdicts from the store: refused, as 06's soap_judge_b."""
    same = dict(config.load("smoke")["judge"])
    with pytest.raises(config.ConfigError, match="judge_b.*is the model of judge"):
        config.load("smoke", {"judge_b": same})
    other = {**same, "name": "small", "model": "qwen2.5-coder-0.5b"}
    assert config.load("smoke", {"judge_b": other})["judge_b"]["model"] == "qwen2.5-coder-0.5b"


def test_a_bad_embedded_noun_names_the_file_and_the_field(tmp_root):
    """Seed 000 B.1's noun is a profile key; a value it does not know names the profile file and the key."""
    text = (tmp_root / "params" / "smoke.yaml").read_text().replace("profile: smoke", "profile: noun")
    assert "\nembedded_noun: patient" in text
    (tmp_root / "params" / "noun.yaml").write_text(text.replace("\nembedded_noun: patient", "\nembedded_noun: person"))
    with pytest.raises(config.ConfigError, match=r"embedded_noun = 'person' \(from params/noun.yaml\).*'patient' or "
                                                 r"'vignette'"):
        config.load("noun")


ANTHROPIC = {"backend": "openai", "options": {"base_url": "https://api.anthropic.com/v1/"}}


@pytest.mark.parametrize("model, one_of", [
    ("claude-sonnet-4-5", True), ("claude-sonnet-4-5-20250929", True), ("claude-haiku-4-5-20251001", True),
    ("claude-opus-4-1-20250805", True), ("claude-opus-4-6", True),
    ("claude-opus-4-20250514", False), ("claude-sonnet-4-20250514", False), ("claude-3-7-sonnet-20250219", False),
    ("claude-3-5-haiku-latest", False)])
def test_which_anthropic_models_take_temperature_or_top_p_not_both(model, one_of):
    assert specs.takes_temperature_or_top_p({**ANTHROPIC, "name": model, "model": model}) is one_of
    # the same name elsewhere (a proxy, a local server) is not Anthropic's API
    assert not specs.takes_temperature_or_top_p({"backend": "openai", "name": model, "model": model,
                                                   "options": {"base_url": "http://127.0.0.1:8000/v1"}})


def test_the_docs_anthropic_example_passes_the_check_and_the_old_one_is_refused_by_name():
    """docs/scale.md's Anthropic example (claude-sonnet-4-5 with the paper profile) sent temperature
    0.7 and top_p 0.9, which the model refuses (HTTP 400 for every request, direct or batched). Now
    the runner refuses both before anything is sent, naming the role and the fix, and the example
    as the docs write it (its S, with top_p: null) passes, for notebook 03 under the paper profile."""
    import re

    from medaudit import runner

    text = (ROOT / "docs" / "scale.md").read_text(encoding="utf-8")
    s = re.search(r"^S='(\{subject: \{name: claude-sonnet-4-5.*\})'$", text, re.M).group(1)
    nb = ROOT / "notebooks" / "03_inference.ipynb"
    got = runner.prepare(nb, "paper", [("-y", [s])])
    assert got["top_p"] is None and got["subject"]["model"] == "claude-sonnet-4-5"
    old = s.replace(", top_p: null}", "}")
    assert old != s
    with pytest.raises(config.ConfigError) as e:
        runner.prepare(nb, "paper", [("-y", [old])])
    assert e.value.problems == [
        "subject (claude-sonnet-4-5): Anthropic's claude-sonnet-4-5 takes temperature or top_p, not both, and top_p "
        "0.9 would be sent beside the temperature (HTTP 400 for every request); set top_p: null "
        "(-y '{top_p: null}'): the temperature alone is sent"]
    # top_p null for a local subject: refused by name, before any model loads
    with pytest.raises(config.ConfigError, match=r"subject \(qwen2.5-coder-1.5b\) is a local llamacpp model"):
        runner.prepare(nb, "paper", [("-y", ["{top_p: null}"])])
    # a notebook that takes no top_p is not concerned
    assert specs.sampling_problems({"top_p": None, "judge": {"backend": "llamacpp", "model": "m"}}, ["judge"]) == []
