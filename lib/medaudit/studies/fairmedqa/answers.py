"""The evaluated models' answers (notebook 08): prompts, budgets, protocols, stored answers.

Seed 004 §4.2 "Evaluation Configurations" ("we conduct evaluations using the
exact same LLM versions …", "All models are accessed via their official
APIs") and A.8's snapshots: how each model is asked (:data:`ANSWER_FORMAT`,
the A.7.4 prompt, for the agents' texts; :data:`BENCHMARK_FORMAT` for the
published benchmark), its answer budget (:func:`answer_budget`), the plan
of requests (:func:`answer_plan`), the stored and imported answers read back
(:func:`stored_answers`), 02's saved texts (:func:`saved_inputs`), the
protocol each model answered under (:func:`protocol_table`: only answers of
one protocol are compared) and the Validation-Agent's own rows marked
(:func:`mark_validator`).
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from medaudit import paths
from medaudit.llm import GenParams, mcq, runs
from medaudit.studies.fairmedqa.config import VALIDATOR_MARK, FairMedQAConfig




def mark_validator(table: pd.DataFrame, agent_variants: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """A ``validator`` column: VALIDATOR_MARK on the rows of a model that
    served as the Validation-Agent of 02's agent loop (``agent_variants``'
    ``validator`` names), '' elsewhere. Seed 001 Fig. 6 names the validator
    ("Validation-Agent (GPT-4o-mini)") apart from the evaluated models; A.7.4
    revised each variant until it erred, so its AD, CFR and McNemar are
    selection-biased. Only reached with ``fairmedqa_validator_evaluated: true``
    (the profile check refuses it otherwise)."""
    names = set(agent_variants["validator"].dropna()) if "validator" in agent_variants.columns else set()
    out = table.copy()
    if unit in out.columns:
        out["validator"] = [VALIDATOR_MARK if m in names else "" for m in out[unit]]
    return out


class ProtocolError(ValueError):
    """Answers of different protocols where one table or comparison needs one."""


def answer_protocol(prompt_format: str, source: str, max_tokens, extract: str) -> str:
    """The protocol one FairMedQA answer was made and read under: the texts,
    the prompt, the extraction and the budget. The published benchmark is
    asked with the authors' no_cot prompt (``amqa_no_cot``), the agents'
    texts with A.7.4's (``mcq_letter``); a released answer (``source``
    imported) was extracted and budgeted by the authors (XY-Showing/AMQA@335b175
    Scripts/AMQA_Benchmark_LLMs.py: ``extract_choice``; no max_tokens on the
    OpenAI-compatible APIs, 1,024 on Claude), and a generated one with
    ``GenParams.NO_LIMIT`` or 1,024 tokens had the authors' budget too
    (:func:`answer_budget`). A mitigation arm (``<format>+<strategy>``) is
    the protocol of its base format."""
    from medaudit.llm.mitigations import split_format

    base, _ = split_format(prompt_format)
    texts, prompt = (("published texts", BENCHMARK_FORMATS[base]) if base in BENCHMARK_FORMATS
                     else ("agents' texts", "A.7.4 prompt") if base == ANSWER_FORMAT else ("texts", f"{base} prompt"))
    if source == "imported":
        return f"{texts}; {prompt}; authors' extraction; authors' budget"
    reading = "authors' extraction" if extract == "authors" else "strict extraction"
    n = None if max_tokens is None or pd.isna(max_tokens) else int(max_tokens)
    budget = ("authors' budget" if n in (GenParams.NO_LIMIT, BENCHMARK_MAX_TOKENS)
              else f"{n} tokens" if n is not None else "budget unknown")
    return f"{texts}; {prompt}; {reading}; {budget}"


def protocol_table(answers: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """One row per model: its answers' protocol (:func:`answer_protocol`).
    A model whose answers were made under two protocols cannot be one row of
    a table: :class:`ProtocolError` names it and both (one protocol per
    FairMedQA table)."""
    if answers.empty:
        return pd.DataFrame(columns=[unit, "protocol"])
    extract = answers["extract"] if "extract" in answers.columns else pd.Series("strict", index=answers.index)
    mt = answers["max_tokens"] if "max_tokens" in answers.columns else pd.Series(None, index=answers.index)
    p = answers[[unit]].assign(protocol=[answer_protocol(f, s, m, e) for f, s, m, e in
                                         zip(answers["prompt_format"], answers["source"], mt, extract)])
    many = p.drop_duplicates().groupby(unit)["protocol"].agg(list)
    many = many[many.map(len) > 1]
    if len(many):
        m = many.index[0]
        raise ProtocolError(f"model {m!r} has answers under {len(many[m])} protocols ({' | '.join(many[m])}): "
                            "one table row needs one; answer with one protocol per model")
    return p.drop_duplicates().reset_index(drop=True)


def mark_protocol(table: pd.DataFrame, protocols: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """``table`` with a ``protocol`` column after ``unit`` and its rows
    grouped by protocol (stable within one), so answers made and read in
    different ways are never read as one column of models."""
    if unit not in table.columns or table.empty:
        return table
    of = protocols.set_index(unit)["protocol"]
    out = table.copy()
    out.insert(out.columns.get_loc(unit) + 1, "protocol", out[unit].map(of).fillna("unknown"))
    return out.sort_values("protocol", kind="stable").reset_index(drop=True)


def protocol_models(protocols: pd.DataFrame, model: str, unit: str = "model") -> list[str]:
    """The models of :func:`protocol_table` that share ``model``'s protocol
    (the ones a comparison with it may include)."""
    of = protocols.set_index(unit)["protocol"]
    return [m for m, p in of.items() if model in of.index and p == of[model]]


def same_protocol(table: pd.DataFrame, models: Sequence[str], unit: str = "model") -> None:
    """Raise :class:`ProtocolError` when ``models`` of a ``table`` with a
    ``protocol`` column (:func:`mark_protocol`) differ in it."""
    if "protocol" not in table.columns:
        return
    seen = table[table[unit].isin(list(models))].drop_duplicates([unit, "protocol"])
    if seen["protocol"].nunique() > 1:
        raise ProtocolError("models answered under different protocols cannot be compared: " + "; ".join(
            f"{m}: {p}" for m, p in zip(seen[unit], seen["protocol"])))


ANSWER_FORMAT = "mcq_letter"   # the Validation-Agent's prompt (A.7.4), also used to evaluate models


BENCHMARK_FORMAT = "amqa_no_cot"   # the published benchmark as its authors asked it (medaudit.prep.amqa)
# every prompt the published benchmark's released answers were made with -> its name in a protocol: the AMQA
# authors' no_cot, and FairMedPrompt's naive (seed 004's group, its Table 3 rows of five models)
BENCHMARK_FORMATS = {BENCHMARK_FORMAT: "no_cot prompt", "fairmp_naive": "FairMedPrompt naive prompt"}
# the authors' answer budget: their script's Anthropic call sets max_tokens=1024 (the OpenAI-compatible calls
# set none); a reply that asks for one letter ends long before it, so the budget only stops a rambler
BENCHMARK_MAX_TOKENS = 1024
BUDGET_RULES = ("authors",)   # fairmedqa_answer_max_tokens: "authors" or a number of tokens


def answer_budget(spec: dict, rule, source: str = "agents") -> int:
    """The token budget of a FairMedQA answer (an evaluated model's, or the
    Validation-Agent's) from a profile's model ``spec``. ``rule`` (the
    profile's ``fairmedqa_answer_max_tokens``): a number of tokens, or
    ``authors``, their budgets (XY-Showing/AMQA@335b175,
    Scripts/AMQA_generation_batch.py and Scripts/AMQA_Benchmark_LLMs.py,
    ``APIClient.call``: the OpenAI-compatible clients, GPT-4.1, DeepSeek and
    Qwen, send no ``max_tokens``; the Anthropic client ``max_tokens=1024``):
    a hosted API model (:func:`medaudit.llm.decoding.is_hosted_api`) no limit
    (``GenParams.NO_LIMIT``), a Claude model 1,024, a local model (which
    needs a budget) their one budget, 1,024. With ``source="released"`` (the
    published benchmark) the rule is always ``authors``: a new model answers
    it as the released models were asked."""
    from medaudit.llm.decoding import is_hosted_api

    if source == "released" or rule == "authors":
        if "claude" in str(spec.get("model", "")).lower():
            return BENCHMARK_MAX_TOKENS
        return GenParams.NO_LIMIT if is_hosted_api(spec) else BENCHMARK_MAX_TOKENS
    if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1:
        return rule
    raise ValueError(f"fairmedqa_answer_max_tokens {rule!r}: use 'authors' or a number of tokens >= 1")


def answer_plan(variants: pd.DataFrame, vig: pd.DataFrame, *, model: str, backend, seed: int,
                max_tokens: int | None = None, source: str = "agents", strategy: str = "none") -> list:
    """One greedy answer (temperature 0, options in their order) per text of
    ``variants``: greedy, so that a change of answer between the two
    members of a pair comes from the text and not from sampling.
    ``source="agents"`` (02's variants, :func:`~medaudit.studies.fairmedqa.generation.variant_table`): the A.7.4
    prompt (``mcq_letter``), ``max_tokens`` (None: 8); ``"released"`` (the
    published benchmark, :func:`medaudit.prep.amqa.load`): the authors' ``no_cot``
    prompt (``amqa_no_cot``) at their temperature 0.0 and ``max_tokens``
    (None: :data:`BENCHMARK_MAX_TOKENS`); :func:`answer_budget` gives the
    profile's budget for a model, ``GenParams.NO_LIMIT`` none at all (an API
    model; top-p then not sent either). ``strategy``: a mitigation arm of
    ``params/mitigations.yaml`` (its answers stored under
    ``<format>+<strategy>``; a chain of thought gets its own budget)."""
    from medaudit.llm.mitigations import format_name

    if source not in ("agents", "released"):
        raise ValueError(f"fairmedqa_variants must be 'agents' or 'released', not {source!r}")
    fmt = format_name(BENCHMARK_FORMAT if source == "released" else ANSWER_FORMAT, strategy)
    budget = max_tokens if max_tokens is not None else (BENCHMARK_MAX_TOKENS if source == "released" else 8)
    top_p = None if budget == GenParams.NO_LIMIT else 1.0
    return mcq.plan(variants, vig, model=model, backend=backend.kind, model_id=backend.model_id, k=1, seed=seed,
                    gen=GenParams(0.0, top_p, budget), prompt_format=fmt, shuffle=False)


def stored_answers(frame: pd.DataFrame, vig: pd.DataFrame, config: FairMedQAConfig, prefer_keys: Sequence[str] = (),
                   models: Sequence[str] | None = None,
                   prompt_formats: Sequence[str] = (ANSWER_FORMAT, BENCHMARK_FORMAT)) -> pd.DataFrame:
    """Every stored answer in the A.7.4 format to these vignettes in the
    FairMedQA conditions, first sample: imported answers of any model, and
    generated ones of ``models`` (None: every model; notebook 08 passes the
    models that answered in this run, so the Validation-Agent's answers of
    notebook 02, stored in the same format, never appear as an evaluated
    model; the released ones, stored under ``amqa_no_cot``, do). Of
    several runs of a model, the current one (this notebook's plan,
    ``prefer_keys``: the variants are rewritten when 02 reruns, and
    answers to the old texts must not mix in). ``prompt_formats``: with
    the published benchmark, also :data:`BENCHMARK_FORMAT` (a new model's
    answers, and the released ones: they are stored under the prompt they
    were asked with, ``amqa_no_cot``)."""
    from medaudit.llm.store import current

    r = frame[frame["item_id"].isin(vig["item_id"]) & frame["condition"].isin(config.conditions())
              & frame["prompt_format"].isin(list(prompt_formats))]
    if models is not None:
        r = r[(r["source"] == "imported") | r["model"].isin(list(models))]
    r = runs.mark_truncated(current(r, prefer_keys))
    return r.sort_values("sample").drop_duplicates(["model", "item_id", "condition"]).reset_index(drop=True)


SAVED = {"vignettes": "fairmedqa_vignettes", "variants": "fairmedqa_variants",
         "agent_variants": "fairmedqa_agent_variants", "cpv_variants": "fairmedqa_cpv_variants"}


def saved_inputs(profile: str) -> dict[str, pd.DataFrame]:
    """Notebook 02's FairMedQA tables (vignettes, variants, agent_variants,
    cpv_variants), each empty (with the columns 08 reads) when 02 wrote none, so that 08
    can analyse answers to an external benchmark alone (the released AMQA
    answers, whose items exist only as ids with gold letters)."""
    from medaudit.prep import data

    empty = {"vignettes": ["item_id", "answer_idx", "options", "question"],
             "variants": ["item_id", "condition", "question"],
             "agent_variants": ["item_id", "condition", "question", "round", "rounds", "success", "usable",
                                "generator", "validator", "validator_answer", "validator_correct", "baseline_answer",
                                "baseline_correct"],
             "cpv_variants": ["item_id", "condition", "group", "word", "question", "problems"]}
    out = {}
    for key, name in SAVED.items():
        p = paths.run_input(profile, "data", f"{name}.jsonl")
        out[key] = data.load_frame(profile, name) if p.exists() else pd.DataFrame(columns=empty[key])
    return out


def evaluated_texts(saved: dict[str, pd.DataFrame], variants_kind: str, dataset: dict | None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The vignettes and texts notebook 08 evaluates: notebook 02's (``saved``, from
    :func:`saved_inputs`), or, with ``fairmedqa_variants: released``, the published benchmark file
    (``fairmedqa_dataset``: its path and sha256, checked as it is read), which it says in one line."""
    if variants_kind != "released":
        return saved["vignettes"], saved["variants"]
    from medaudit.checks import benchmark_path
    from medaudit.prep import amqa

    vig, variants = amqa.load(benchmark_path(dataset["path"]), dataset.get("sha256"))
    print(f"published benchmark: {len(vig)} vignettes, {len(variants)} texts")
    return vig, variants


def released_check(acc: pd.DataFrame, authors: pd.DataFrame) -> pd.DataFrame:
    """Our accuracy per variant beside the authors' own counts (their
    Summary files), per model, arm (``strategy``; ``none``: the plain
    answers) and condition: ours and theirs (correct / total) and whether
    they agree."""
    on = ["model", "strategy", "condition"] if "strategy" in authors.columns and "strategy" in acc.columns \
        else ["model", "condition"]
    m = authors.merge(acc[[*on, "questions", "correct", "unparsed"]], on=on, how="left", suffixes=("", "_ours"))
    out = pd.DataFrame({"model": m["model"], **({"strategy": m["strategy"]} if "strategy" in on else {}),
                        "condition": m["condition"],
                        "authors": [f"{c} / {t}" for c, t in zip(m["correct"], m["total"])],
                        "ours": [f"{int(c)} / {int(q)}" if pd.notna(q) else "–"
                                 for c, q in zip(m["correct_ours"], m["questions"])],
                        "unparsed (ours)": m["unparsed"].astype("Int64")})
    out["equal"] = (m["correct"] == m["correct_ours"]) & (m["total"] == m["questions"])
    return out
