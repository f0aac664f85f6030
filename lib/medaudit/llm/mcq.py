"""The multiple-choice protocol of seed 000 (A.2) and seed 003 (§II.C).

For each (item, condition) K samples are drawn; at every sample the options
are reshuffled, the permutation is recorded, and the letter the model chose is
mapped back to the original option. Every sample's permutation and seed derive
from (global seed, item, condition, k) alone, so a sample is the same whatever
else runs, in whatever order or batch.
"""
from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field

import pandas as pd

from .. import parse as _parse
from .. import prompts
from .base import Completion, GenParams, Request, derive_seed, request_key
from .store import ResponseStore


def permutation(letters: str, *seed_parts, shuffle: bool = True) -> str:
    """Original letters in the order shown, e.g. "CADB": shown A is original C."""
    order = list(letters)
    if shuffle:
        random.Random(derive_seed("perm", *seed_parts)).shuffle(order)
    return "".join(order)


def render_options(options: dict[str, str], perm: str) -> tuple[str, str]:
    """("A. text\\nB. text…", shown letters) for a permutation."""
    shown = string.ascii_uppercase[:len(perm)]
    return "\n".join(f"{s}. {options[o]}" for s, o in zip(shown, perm)), shown


def options_text(options: dict[str, str]) -> str:
    """The options in their own letters and order ("A. text\nB. text…"),
    as :func:`render_options` shows them unshuffled (agent and judge prompts)."""
    return render_options(options, "".join(sorted(options)))[0]


def build_messages(prompt_format: str, question: str, options: dict[str, str], perm: str) -> list[dict]:
    opts, shown = render_options(options, perm)
    if prompt_format == "mcq":
        return [{"role": "user", "content": prompts.load("mcq_a2").format(question=question, options=opts)}]
    if prompt_format == "mcq_explain":
        letters = ", ".join(shown[:-1]) + f", or {shown[-1]}"
        return [{"role": "system", "content": prompts.load("mcq_explain_system").format(letters=letters)},
                {"role": "user", "content": prompts.load("mcq_explain_user").format(question=question, options=opts)}]
    if prompt_format == "mcq_letter":   # seed 001 A.7.4, the Validation-Agent's prompt
        return [{"role": "user", "content": prompts.load("fairmedqa_validation").format(question=question,
                                                                                        options=opts)}]
    raise ValueError(f"unknown prompt_format '{prompt_format}' (have {list(_parse.PARSERS)})")


@dataclass
class Sample:
    item_id: str
    condition: str
    prompt_format: str
    k: int
    perm: str
    request: Request
    key: str = ""
    meta: dict = field(default_factory=dict)


def plan(variants: pd.DataFrame, items: pd.DataFrame, *, model: str, backend: str, model_id: str,
         k: int, seed: int, gen: GenParams, prompt_format: str = "mcq", shuffle: bool = True) -> list[Sample]:
    """Every sample to draw: variants (item_id, condition, question) × k.

    ``items`` supplies the options of each item_id. The seed of each sample is
    derived from (seed, item, condition, k); so is its permutation.
    """
    opts = items.set_index("item_id")["options"].to_dict()
    out = []
    for v in variants.itertuples(index=False):
        options = opts[v.item_id]
        letters = "".join(sorted(options))
        for kk in range(k):
            perm = permutation(letters, seed, v.item_id, v.condition, kk, shuffle=shuffle)
            msgs = build_messages(prompt_format, v.question, options, perm)
            g = GenParams(gen.temperature, gen.top_p, gen.max_tokens,
                          derive_seed("sample", seed, v.item_id, v.condition, kk))
            req = Request.chat(msgs, g, answer_letters=tuple(string.ascii_uppercase[:len(letters)]),
                               stem_chars=msgs[-1]["content"].find(v.question) + len(v.question))
            s = Sample(v.item_id, v.condition, prompt_format, kk, perm, req)
            s.key = request_key(backend, model_id, req, item_id=v.item_id, condition=v.condition,
                                prompt_format=prompt_format, k=kk, perm=perm)
            out.append(s)
    return out


def plan_free(prompts: pd.DataFrame, *, backend: str, model_id: str, k: int, seed: int, gen: GenParams,
              prompt_format: str, first_k: int = 0) -> list[Sample]:
    """Free-text samples (open-ended answers, notes, judge verdicts, agent
    attempts) through the same store: ``prompts`` has item_id, condition and
    messages (a list of chat messages). No options, so no permutation; the
    text is stored unparsed (the notebook that owns the format parses it).
    Sample indices run from ``first_k`` (an agent's attempt number). An
    optional ``stem_chars`` column gives the characters at the start of the
    last message that the item's prompts share (a dialog before its
    counterfactual turn): a local backend evaluates them once per item."""
    out = []
    stems = prompts["stem_chars"] if "stem_chars" in prompts else [None] * len(prompts)
    for v, stem in zip(prompts.itertuples(index=False), stems):
        for kk in range(first_k, first_k + k):
            g = GenParams(gen.temperature, gen.top_p, gen.max_tokens,
                          derive_seed("sample", seed, v.item_id, v.condition, prompt_format, kk))
            req = Request.chat(list(v.messages), g, stem_chars=None if pd.isna(stem) else int(stem))
            s = Sample(v.item_id, v.condition, prompt_format, kk, "", req)
            s.key = request_key(backend, model_id, req, item_id=v.item_id, condition=v.condition,
                                prompt_format=prompt_format, k=kk, perm="")
            out.append(s)
    return out


def score(sample: Sample, c: Completion) -> dict:
    """Parse one completion and map the shown letter back to the original
    (formats without a parser here are stored unparsed)."""
    parser = _parse.PARSERS.get(sample.prompt_format)
    if parser is None or not sample.perm:
        return {"parsed_answer": None, "parse_status": None, "letter_logprobs": None,
                "answer_logprob": c.answer_logprob}
    shown = string.ascii_uppercase[:len(sample.perm)]
    letter, status = parser(c.text, shown)
    original = sample.perm[shown.index(letter)] if letter else None
    lp = ({sample.perm[shown.index(L)]: v for L, v in c.letter_logprobs.items()}
          if c.letter_logprobs else None)
    return {"parsed_answer": original, "parse_status": status, "letter_logprobs": lp,
            "answer_logprob": c.answer_logprob}


def row(sample: Sample, c: Completion, *, model: str, backend: str, model_id: str) -> dict:
    p = sample.request.params
    return {
        "key": sample.key, "source": "generated", "backend": backend, "model": model,
        "model_id": model_id, "item_id": sample.item_id, "condition": sample.condition,
        "prompt_format": sample.prompt_format, "sample": sample.k, "permutation": sample.perm,
        "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens, "seed": p.seed,
        "prompt": json.dumps(sample.request.message_dicts(), ensure_ascii=False),
        "response_text": c.text, **score(sample, c),
        "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "latency_s": c.latency_s,
        "retries": c.retries, "cost_usd": c.cost_usd,
    }


def prefix_order(samples: list[Sample]) -> list[Sample]:
    """Order so that the samples of one question run one after another: the
    local backend then evaluates the question's stem once and only each
    sample's options and instruction after it. The order changes no result
    (every sample carries its own seed)."""
    return sorted(samples, key=lambda s: (s.request.messages[:-1], s.item_id, s.condition,
                                          s.request.messages[-1][1]))


def run(backend, store: ResponseStore, samples: list[Sample], *, model: str, progress: bool = True) -> dict:
    """Draw every sample not yet in the store; each is stored as it arrives.

    Returns counts: planned, cached (already stored), generated.
    """
    have = store.has(s.key for s in samples)
    todo = prefix_order([s for s in samples if s.key not in have])

    def on_result(i: int, c: Completion) -> None:
        if c.error:
            return  # a failed request is not stored: a rerun asks again
        store.put(row(todo[i], c, model=model, backend=backend.kind, model_id=backend.model_id))

    if todo:
        backend.complete([s.request for s in todo], progress=progress, on_result=on_result)
    return {"planned": len(samples), "cached": len(have), "generated": len(todo)}


def dry_run(samples: list[Sample], pricing: dict | None = None, chars_per_token: float = 4.0) -> pd.DataFrame:
    """What a run would ask for, before anything runs: requests, estimated
    prompt and completion tokens and, for a priced model, the cost."""
    n = len(samples)
    tin = sum(sum(len(c) for _, c in s.request.messages) for s in samples) / chars_per_token
    tout = sum(s.request.params.max_tokens for s in samples)
    rows = [("requests", n), ("estimated prompt tokens", round(tin)),
            ("max completion tokens", tout)]
    if pricing:
        cost = tin / 1e6 * pricing.get("input_per_mtok", 0) + tout / 1e6 * pricing.get("output_per_mtok", 0)
        rows.append(("estimated cost (USD, upper bound)", round(cost, 4)))
    return pd.DataFrame(rows, columns=["what", "value"]).set_index("what")


def select_variants(variants: pd.DataFrame, n_items: int | None, conditions: list[str],
                    methods: list[str] = ("standalone",), subsets: list[str] = ("main",)) -> pd.DataFrame:
    """The variants sent to the model: the first ``n_items`` items of each
    subset (the pool is already a seeded random sample), the listed
    conditions and insertion methods, only variants that were built."""
    v = variants[variants["ok"] & variants["subset"].isin(subsets) & variants["condition"].isin(conditions)
                 & variants["method"].isin(methods)]
    keep = []
    for sub in subsets:
        ids = list(dict.fromkeys(v.loc[v["subset"] == sub, "item_id"]))
        keep += ids[:n_items] if n_items is not None else ids
    order = {c: i for i, c in enumerate(conditions)}
    v = v[v["item_id"].isin(keep)]
    v = v.sort_values(["subset", "item_id", "method", "condition"],
                      key=lambda s: s.map(order) if s.name == "condition" else s).reset_index(drop=True)
    # the embedded form (seed 000 B.1) is its own condition downstream
    return v.assign(condition=[c if m == "standalone" else f"{c} (embedded)"
                               for c, m in zip(v["condition"], v["method"])])


def parse_rates(responses: pd.DataFrame, threshold: int = 5) -> pd.DataFrame:
    """Seed 000 Table 3 and more, per model and prompt format: the % of
    questions (item × condition) whose answer was extracted in at least
    ``threshold`` of their samples, the % of samples parsed, and the reasons
    for failures."""
    r = responses.assign(parsed=responses["parse_status"].eq(_parse.OK))
    per_q = r.groupby(["model", "prompt_format", "item_id", "condition"])["parsed"].agg(["sum", "size"])
    q = (per_q["sum"] >= threshold).groupby(level=[0, 1]).mean().mul(100).rename(
        f"questions parsed in >= {threshold} samples (%)")
    s = r.groupby(["model", "prompt_format"])["parsed"].mean().mul(100).rename("samples parsed (%)")
    n = r.groupby(["model", "prompt_format"]).size().rename("samples")
    reasons = (r[~r["parsed"]].groupby(["model", "prompt_format"])["parse_status"]
               .agg(lambda x: ", ".join(f"{k} {v}" for k, v in x.value_counts().items())).rename("failures"))
    out = pd.concat([n, s, q, reasons], axis=1).reset_index()
    out["failures"] = out["failures"].fillna("none")
    return out.round(1)


def parse_rates_by_condition(responses: pd.DataFrame) -> pd.DataFrame:
    """% of samples parsed per model and condition (do identity cues change format following?)."""
    r = responses.assign(parsed=responses["parse_status"].eq(_parse.OK))
    return (r.pivot_table(index="model", columns="condition", values="parsed", aggfunc="mean")
            .mul(100).round(1))
