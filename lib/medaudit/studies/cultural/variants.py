"""Section 1 of the cultural-cue study (seed 003): the 150 released items (5 options A-E), the
unreleased neutral control rebuilt from ``params/conditions.yaml``, the 9 released variants per item
(``"<culture>:<cue>"``), the mapping onto 4-option MedQA by question and option text, the answer plan
and every stored answer read back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from medaudit.prep import data as _data
from medaudit.prep import perturb
from medaudit import paths
from .config import CulturalConfig, FORMS, NEUTRAL, ORIGINAL


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


def baseline_rows(base: dict, question: str, neutral_sentence: str, source: str) -> list[dict]:
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
        rows += baseline_rows(base, q, neutral_sentence, source="released")
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


def question_key(s: str) -> str:
    """A question's text as the matching key: whitespace runs collapsed, case folded."""
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
        norm.setdefault(question_key(q), r)
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
            r = norm.get(question_key(it.question))
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
            by_text.setdefault(question_key(t5), []).append(L5)
        omap = {}
        for L4, t4 in row["options"].items():
            hits = [L5 for L5, t5 in it.options.items() if t5 == t4] or by_text.get(question_key(t4), [])
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
