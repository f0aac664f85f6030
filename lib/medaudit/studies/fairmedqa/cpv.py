"""The CPV-style baseline and Table 1: FairMedQA against CPV-USMLE.

Seed 004 §4.2 "Benchmarking Effectiveness Validation" and §5.1
"Benchmarking Capacity of FairMedQA": "We further conducted an ablation study
by applying the CPV approach to the USMLE dataset to generate adversarial
variants (CPV-USMLE)". :func:`cpv_variants` writes that row's texts (the
neutral vignette with only the attribute word added, no model);
:func:`benchmark_table` and :func:`table1` compare the accuracy disparity of
the two kinds of variant per pair and model (Table 1).
"""
from __future__ import annotations

import re
from typing import Sequence

import pandas as pd

from medaudit.prep import perturb
from medaudit.prep import text as _text
from medaudit.studies.fairmedqa.config import FairMedQAConfig, cpv_condition
from medaudit.studies.fairmedqa.metrics import pair_table


_ARTICLE = re.compile(r"\b([Aa])(n?)(\s+)$")
_AGE = re.compile(r"\b\d+-(?:year|month|week|day)-old\s+(?=(?!(?:with|who|whose|is|was|has|had|presents|comes|and|in|"
                  r"on|at|from)\b)[A-Za-z])")


def cpv_variant(question: str, phrase: str) -> str | None:
    """The neutral vignette with only the attribute word added to the
    patient's opening noun phrase ("A 67-year-old patient" → "A 67-year-old
    Black patient"; "a" / "an" follow the word), or, when the opening
    sentence has no person noun (:func:`medaudit.prep.perturb.opening_noun_end`:
    "A 55-year-old truck driver", "Six days after …, a 79-year-old
    patient"), after the first age of the first sentence followed by a noun
    ("A 55-year-old Black truck driver"); None when there is neither.

    The seed's baseline changes the attribute and nothing else: "the latest
    CPV benchmark simply modifies the sensitive attribute" (§1), "This
    design overcomes the limitation of modifying only the sensitive
    attribute itself in the CPV benchmark" (§1), and Table 1's CPV-USMLE row
    comes from "applying the CPV approach to the USMLE dataset to generate
    adversarial variants (CPV-USMLE)" (§5.1), against which "FairMedQA not
    only modifies the sensitive attribute value but also incorporates
    additional background descriptions related to that attribute". The word
    is the group's ``phrase`` in the form A.7.1 gives for an explicit
    mention ("a 40-year-old Black patient", "a 35-year-old high-income
    patient"). Starting from the neutralised vignette (A.5) the two members
    of a pair differ in that one word, as the FairMedQA variants of the same
    vignette differ only in their added background. Deterministic: no model."""
    end = perturb.opening_noun_end(question)
    if end is not None:
        at = re.search(r"[\w-]+$", question[:end]).start()
    else:
        spans = _text.sentence_spans(question)
        age = _AGE.search(question, 0, spans[0][1]) if spans else None
        if age is None:
            return None
        at = age.end()
    head = question[:at]
    art = _ARTICLE.search(head)
    if art:         # "a patient" → "an …" only before a vowel
        an = "n" if phrase[:1].lower() in "aeiou" else ""
        head = head[:art.start()] + art.group(1) + an + art.group(3)
    return head + phrase + " " + question[at:]


def cpv_variants(vig: pd.DataFrame, config: FairMedQAConfig, groups: Sequence[str] | None = None) -> pd.DataFrame:
    """The CPV-style variants of every neutralised vignette (``vig``:
    item_id, question) and group (None: every group of the config): item_id,
    condition ("cpv:<group>"), group, word (the group's ``phrase``),
    question (None when it cannot be built), problems (list: not built, or
    the group's ``mention`` not matched). Such rows are counted by
    :func:`~medaudit.studies.fairmedqa.generation.coverage`, never dropped silently."""
    rows = []
    for r in vig.itertuples(index=False):
        for g in groups or list(config.groups):
            spec = config.groups[g]
            q = cpv_variant(r.question, spec["phrase"])
            problems = (["not built: the first sentence has no patient noun and no age to put the word before"]
                        if q is None else
                        [] if re.search(f"(?i){spec['mention']}", q) else
                        [f"attribute not mentioned: {spec['phrase']!r} does not match the group's mention"])
            rows.append({"item_id": r.item_id, "condition": cpv_condition(g), "group": g, "word": spec["phrase"],
                         "question": q if not problems else None, "problems": problems})
    return pd.DataFrame(rows, columns=["item_id", "condition", "group", "word", "question", "problems"])


def cpv_shown(cpv: pd.DataFrame, context: int = 40) -> pd.DataFrame:
    """The CPV-style variants as the notebook shows them: item_id,
    condition and the text around the added word (in «guillemets»), or why
    it was not built."""
    shown = [perturb.show_insertion(q, w, context) if isinstance(q, str) else "(" + "; ".join(p) + ")"
             for q, w, p in zip(cpv["question"], cpv["word"], cpv["problems"])]
    return pd.DataFrame({"item_id": cpv["item_id"], "condition": cpv["condition"],
                         "text around the word": shown})


BENCHMARKS = ("CPV-USMLE", "FairMedQA")      # Table 1's rows that we can compute (the seed's labels)


def benchmark_table(qt: pd.DataFrame, config: FairMedQAConfig, units: Sequence[str] = ("model",),
                    counting: str = "paper", mcnemar: str = "exact", unparsed: str = "wrong") -> pd.DataFrame:
    """Table 1 in long form: per unit, benchmark and counterfactual pair,
    the pair's n, n_a, n_b, missing_a, missing_b, CFR and AD (%).

    Seed 001 §5.1: "Table 1 compares the bias detection capabilities,
    measured by accuracy disparity, of GPT-4-Turbo and GPT-4o on both the
    CPV benchmark and the FairMedQA benchmark", with a row from "applying
    the CPV approach to the USMLE dataset to generate adversarial variants
    (CPV-USMLE)". Ours: "CPV-USMLE" is :func:`cpv_variants` (the attribute
    word only), "FairMedQA" the agents' variants of the same vignettes, both
    scored by :func:`~medaudit.studies.fairmedqa.metrics.pair_table` with the same counting rule. The seed's
    "CPV" row (the JAMA-based CPV benchmark itself) has no counterpart here:
    its published values are in ``params/published.yaml``. ``unparsed``
    (08's ``fairmedqa_unparsed``, named in the ``unparsed`` column): how an
    unextracted answer enters each group's accuracy and so the AD
    (:func:`~medaudit.studies.fairmedqa.metrics.pair_table`); "wrong" is the released Summary files' rule."""
    parts = [pair_table(qt, config.cpv_pairs(), units, counting, mcnemar, unparsed).assign(benchmark="CPV-USMLE"),
             pair_table(qt, list(config.pairs), units, counting, mcnemar, unparsed).assign(benchmark="FairMedQA")]
    parts = [x for x in parts if len(x)]
    cols = [*units, "benchmark", "seed_pair", "n", "n_a", "n_b", "missing_a", "missing_b", "CFR", "AD (%)",
            "counting", "unparsed"]
    if not parts:
        return pd.DataFrame(columns=cols)
    t = pd.concat(parts, ignore_index=True)
    t["AD (%)"] = 100 * t["AD"]
    return t[cols]


def table1(long: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """Table 1 in the seed's shape: one row per benchmark, one column per
    pair and model ("Male vs Female · GPT-4o"), the accuracy disparity in
    % ("measured by accuracy disparity"; the seed prints no CFR there).
    A model marked by :func:`~medaudit.studies.fairmedqa.answers.mark_validator` keeps its mark in its column
    headers ("Male vs Female · small (validator: selection-biased)")."""
    if long.empty:
        return pd.DataFrame(columns=["benchmark"])
    if "validator" in long.columns:
        marks = long["validator"].fillna("").astype(str)
        long = long.assign(**{unit: [f"{m} ({v})" if v else m for m, v in zip(long[unit].astype(str), marks)]})
    if "protocol" in long.columns and long["protocol"].nunique() > 1:   # mark_protocol: split visibly
        long = long.assign(**{unit: [f"{m} [{p}]" for m, p in zip(long[unit].astype(str), long["protocol"])]})
    w = long.pivot_table(index="benchmark", columns=["seed_pair", unit], values="AD (%)", sort=False)
    w.columns = [f"{p} · {m}" for p, m in w.columns]
    order = [b for b in BENCHMARKS if b in w.index]
    return w.loc[order].reset_index()
