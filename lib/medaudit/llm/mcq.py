"""The multiple-choice protocol of seed 000 (A.2) and seed 003 (§II.C).

For each (item, condition) K samples are drawn; at every sample the options
are reshuffled, the permutation is recorded, and the letter the model chose is
mapped back to the original option. Every sample's permutation and seed derive
from (global seed, item, condition, k) alone, so a sample is the same whatever
else runs, in whatever order or batch.
"""
from __future__ import annotations

import random
from dataclasses import replace
import string

import pandas as pd

from medaudit.llm import formats, mitigations
from .. import parse as _parse
from .base import GenParams, Request, derive_seed, request_key
from . import runs
from .runs import Sample


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
    """The request of a multiple-choice format (:data:`medaudit.llm.formats.FORMATS`)
    for the options shown in the order ``perm``."""
    fmt = formats.get(prompt_format)
    if fmt.kind != "mcq":
        raise ValueError(f"prompt_format {prompt_format!r} is not a multiple-choice format "
                         f"(those are {formats.names('mcq')})")
    opts, shown = render_options(options, perm)
    return fmt.messages(question, opts, shown)


def plan(variants: pd.DataFrame, items: pd.DataFrame, *, model: str, backend: str, model_id: str,
         k: int, seed: int, gen: GenParams, prompt_format: str = "mcq", shuffle: bool = True) -> list[Sample]:
    """Every sample to draw: variants (item_id, condition, question) × k.

    ``items`` supplies the options of each item_id. The seed of each sample is
    derived from (seed, item, condition, k); so is its permutation. A
    format that sets its own token limit (``mcq_option``: one) overrides
    ``gen.max_tokens``, except a ``gen`` that asks for no limit at all
    (``GenParams.NO_LIMIT``: seed 003's authors' API calls, whose option
    form set none).
    """
    opts = items.set_index("item_id")["options"].to_dict()
    golds = items.set_index("item_id")["answer_idx"].to_dict() if "answer_idx" in items else {}
    fmt_max = formats.get(prompt_format).max_tokens      # e.g. mcq_option: one token, as the authors ran it
    out = []
    for v in variants.itertuples(index=False):
        options = opts[v.item_id]
        letters = "".join(sorted(options))
        for kk in range(k):
            perm = permutation(letters, seed, v.item_id, v.condition, kk, shuffle=shuffle)
            msgs = build_messages(prompt_format, v.question, options, perm)
            g = replace(gen, max_tokens=(fmt_max if fmt_max and gen.max_tokens != GenParams.NO_LIMIT
                                         else gen.max_tokens),
                        seed=derive_seed("sample", seed, v.item_id, v.condition, kk))
            shown = string.ascii_uppercase[:len(letters)]
            gold = golds.get(v.item_id)
            gold = shown[perm.index(gold)] if isinstance(gold, str) and gold in perm else ""
            req = Request.chat(msgs, g, answer_letters=tuple(shown),
                               stem_chars=msgs[-1]["content"].find(v.question) + len(v.question),
                               labels=(("item_id", v.item_id), ("condition", v.condition),
                                       ("prompt_format", prompt_format), ("k", kk),
                                       ("gold", gold)))
            s = Sample(v.item_id, v.condition, prompt_format, kk, perm, req)
            s.key = request_key(backend, model_id, req, item_id=v.item_id, condition=v.condition,
                                prompt_format=prompt_format, k=kk, perm=perm)
            out.append(s)
    return out


def plan_samples(variants: pd.DataFrame, items: pd.DataFrame, *, prompt_formats, strategies, arm_conditions,
                 model: str, backend: str, model_id: str, k: int, seed: int, gen) -> list:
    """Every sample notebook 03 draws: each prompt format under each strategy
    (:func:`medaudit.llm.mitigations.format_name`), the plain prompt (``none``) on every variant and
    the other arms on the variants of ``arm_conditions`` (None or empty: all), ``k``
    each (:func:`plan`). One place for notebook 03 and the
    notebook benchmark (``medaudit.bench.notebook``), so both plan the same
    requests under the same keys."""
    arm_variants = variants if not arm_conditions else variants[variants["condition"].isin(arm_conditions)]
    return [s for fmt in prompt_formats for strategy in strategies
            for s in plan(variants if strategy == mitigations.NONE else arm_variants, items, model=model,
                          backend=backend, model_id=model_id, k=k, seed=seed, gen=gen,
                          prompt_format=mitigations.format_name(fmt, strategy))]


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
    for failures. Each rate with its N (``samples``,
    ``questions``) and 95 % interval (``… lo``, ``… hi``;
    :func:`medaudit.stats.intervals.proportion_interval`, clustered by item:
    an item's samples and conditions are not independent answers)."""
    from medaudit.stats import intervals     # scipy's: only where the rates are read, not in a run's process
    r = runs.mark_truncated(responses)
    r = r.assign(parsed=r["parse_status"].eq(_parse.OK))
    per_q = (r.groupby(["model", "prompt_format", "item_id", "condition"])["parsed"].agg(["sum", "size"])
             .assign(ok=lambda x: (x["sum"] >= threshold).astype(float)).reset_index())
    qname = f"questions parsed in >= {threshold} samples (%)"
    rows = []
    for key, g in r.groupby(["model", "prompt_format"]):
        pq = per_q[(per_q["model"] == key[0]) & (per_q["prompt_format"] == key[1])]
        s_ci = intervals.proportion_interval(g["parsed"].to_numpy(float), g["item_id"].to_numpy())
        q_ci = intervals.proportion_interval(pq["ok"].to_numpy(float), pq["item_id"].to_numpy())
        rows.append({"model": key[0], "prompt_format": key[1], "samples": len(g),
                     "samples parsed (%)": 100 * s_ci["estimate"], "samples parsed lo": 100 * s_ci["lo"],
                     "samples parsed hi": 100 * s_ci["hi"], "questions": len(pq), qname: 100 * q_ci["estimate"],
                     f"{qname[:-4]} lo": 100 * q_ci["lo"], f"{qname[:-4]} hi": 100 * q_ci["hi"]})
    out = pd.DataFrame(rows)
    reasons = (r[~r["parsed"]].groupby(["model", "prompt_format"])["parse_status"]
               .agg(lambda x: ", ".join(f"{k} {v}" for k, v in x.value_counts().items())).rename("failures"))
    out = out.merge(reasons.reset_index(), on=["model", "prompt_format"], how="left") if len(out) else out
    out["failures"] = out["failures"].fillna("none") if len(out) else []
    return out.round(1)


def truncation_by_condition(responses: pd.DataFrame, units: tuple[str, ...] = ("model", "prompt_format")
                            ) -> pd.DataFrame:
    """Replies cut by the token limit before an answer could be read, per
    unit and condition (:func:`medaudit.llm.runs.status_of`): samples,
    truncated and truncated (%). Such a reply is not scored (never counted
    wrong); a budget that fits the model's answers keeps this at 0."""
    r = runs.mark_truncated(responses)
    units = [u for u in units if u in r.columns]
    r = r.assign(truncated=r["parse_status"].eq(_parse.TRUNCATED))
    g = r.groupby([*units, "condition"], sort=False)
    out = pd.DataFrame({"samples": g.size(), "truncated": g["truncated"].sum().astype(int)}).reset_index()
    out["truncated (%)"] = (100 * out["truncated"] / out["samples"]).round(1)
    return out


def parse_rates_by_condition(responses: pd.DataFrame) -> pd.DataFrame:
    """% of samples parsed per model and condition (do identity cues change
    format following?), each cell "rate [lo, hi] n=N": its 95 % interval
    (:func:`medaudit.stats.intervals.proportion_interval`, clustered by item) and
    the samples behind it."""
    from medaudit.stats import intervals     # scipy's: only where the rates are read, not in a run's process
    r = responses.assign(parsed=responses["parse_status"].eq(_parse.OK).astype(float))
    cells = {}
    for (m, c), g in r.groupby(["model", "condition"]):
        ci = intervals.proportion_interval(g["parsed"].to_numpy(), g["item_id"].to_numpy())
        cells[(m, c)] = f"{100 * ci['estimate']:.1f} [{100 * ci['lo']:.1f}, {100 * ci['hi']:.1f}] n={ci['n']}"
    out = pd.Series(cells, dtype=object).unstack() if cells else pd.DataFrame()
    return out.rename_axis(index="model", columns="condition")
