"""The published FairMedQA benchmark as the texts a new model answers.

Seeds 001/004 release their benchmark as ``AMQA_Dataset/AMQA_Dataset.jsonl``
(XY-Showing/AMQA@335b175): 801 human-reviewed vignettes, one JSON object a
line, with the fields the authors' ``Scripts/AMQA_Benchmark_LLMs.py`` reads:
``question_id``, ``answer_idx`` (the gold letter), ``options`` (letter →
text), ``original_question``, ``desensitized_question`` and
``adv_question_{white,black,high_income,low_income,male,female}``. The file
is not shipped (it could not be retrieved here); a user points the profile at
their copy, checked by sha256 when one is given.

:func:`load` reads it into the two tables notebook 08 answers — the
vignettes (item_id, answer_idx, options, question) and one text per
vignette and condition (item_id, condition, question) — with item ids
``amqa-NNN`` from ``question_id``, the ids the authors' released answers
carry (``params/released.yaml``), so a new model's rows pair item by item
with GPT-4.1, Claude-3.7, DeepSeek-V3 and Qwen-2.5. Every problem is an
:class:`AmqaError` naming the file, the line and the field, raised before any
model loads.

The authors asked each text with their ``no_cot`` prompt (the prompt format
``amqa_no_cot``, :mod:`medaudit.llm.formats`) at temperature 0 and read the
letter with their ``extract_choice``
(:func:`medaudit.parse.parse_first_option_token`); :func:`extract` applies
either that rule (``authors``) or the project's strict one (``strict``,
several letters standing alone are "multiple", not the first of them) to
the stored replies.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from medaudit import parse
from medaudit.checksum import sha256_file

PREFIX = "amqa-"
# the file's text fields -> the conditions of params/fairmedqa.yaml (the same
# mapping as params/released.yaml's fairmedqa_amqa conditions)
FIELDS = {"original_question": "original", "desensitized_question": "neutralised",
          "adv_question_white": "race:White", "adv_question_black": "race:Black",
          "adv_question_male": "sex:male", "adv_question_female": "sex:female",
          "adv_question_high_income": "ses:high income", "adv_question_low_income": "ses:low income"}
EXTRACT = ("strict", "authors")


class AmqaError(ValueError):
    """A problem with a benchmark file: the file, the record and the field."""

    def __init__(self, path: Path | str, where: str, field: str, problem: str):
        self.path, self.where, self.field, self.problem = Path(path), where, field, problem
        super().__init__(f"{path}: {where}, field {field!r}: {problem}")


def item_id(question_id, prefix: str = PREFIX) -> str:
    """``amqa-NNN``, as the released answers' items are named."""
    return f"{prefix}{int(question_id):03d}"


def json_objects(path: Path, error: type[ValueError] = AmqaError) -> list[tuple[str, dict]]:
    """("line N", object) for each non-blank line of a FairMedQA JSONL file
    (the benchmark here, the released answer files in
    :mod:`medaudit.released`); a line that is not a JSON object raises
    ``error(path, "line N", "(json)", problem)``."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(path, f"line {n}", "(json)", e.msg) from None
        if not isinstance(rec, dict):
            raise error(path, f"line {n}", "(json)", "expected an object")
        out.append((f"line {n}", rec))
    return out


def record_item_id(path: Path, where: str, rec: dict, error: type[ValueError] = AmqaError,
                   prefix: str = PREFIX) -> str:
    """The item id of a record's ``question_id`` (:func:`item_id`), or
    ``error`` naming the line when it is not a number."""
    qid = rec.get("question_id")
    if not isinstance(qid, (str, int)) or not str(qid).strip().isdigit():
        raise error(path, where, "question_id", f"expected a number, got {qid!r}")
    return item_id(qid, prefix)


def _text(path: Path, where: str, rec: dict, field: str) -> str:
    if field not in rec:
        raise AmqaError(path, where, field, "missing")
    v = rec[field]
    if not isinstance(v, str) or not v.strip():
        raise AmqaError(path, where, field, f"expected a non-empty text, got {v!r}"[:200])
    return v


def load(path: str | Path, sha256: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(vignettes, texts) of an ``AMQA_Dataset.jsonl``: vignettes with
    item_id, question_id, answer_idx, options, question (the original) and
    source; texts with item_id, condition and question, one per vignette
    and condition of :data:`FIELDS`. ``sha256``: the file's expected
    checksum (a mismatch is an error naming both)."""
    path = Path(path)
    if not path.is_file():
        raise AmqaError(path, "the file", "(path)", "no such file (fairmedqa_dataset.path)")
    if sha256:
        got = sha256_file(path)
        if got != sha256.lower():
            raise AmqaError(path, "the file", "(sha256)", f"expected {sha256}, the file has {got}")
    vig, texts, seen = [], [], {}
    for where, rec in json_objects(path):
        iid = record_item_id(path, where, rec)
        if iid in seen:
            raise AmqaError(path, where, "question_id", f"{rec['question_id']} already on {seen[iid]}")
        seen[iid] = where
        opts = rec.get("options")
        if not isinstance(opts, dict) or len(opts) < 2:
            raise AmqaError(path, where, "options",
                            f"expected letter → text for two or more options, got {opts!r}"[:200])
        for k, v in opts.items():
            if not (isinstance(k, str) and len(k) == 1 and k.isupper()):
                raise AmqaError(path, where, "options", f"option key {k!r} is not one capital letter")
            if not isinstance(v, str) or not v.strip():
                raise AmqaError(path, where, f"options.{k}", f"expected a non-empty text, got {v!r}")
        if sorted(opts) != [chr(ord("A") + i) for i in range(len(opts))]:
            raise AmqaError(path, where, "options", f"letters {''.join(opts)} are not A, B, C … in order")
        gold = rec.get("answer_idx")
        if gold not in opts:
            raise AmqaError(path, where, "answer_idx", f"{gold!r} is not one of the options {''.join(opts)}")
        for field, cond in FIELDS.items():
            texts.append({"item_id": iid, "condition": cond, "question": _text(path, where, rec, field)})
        vig.append({"item_id": iid, "question_id": str(rec["question_id"]), "answer_idx": gold, "options": dict(opts),
                    "question": rec["original_question"], "source": f"benchmark: {path.name}"})
    if not vig:
        raise AmqaError(path, "the file", "(lines)", "no vignette")
    return pd.DataFrame(vig), pd.DataFrame(texts)


def extract_rule(rule: str | None, variants: str) -> str:
    """The profile's ``fairmedqa_extract`` for the texts 08 answers
    (``fairmedqa_variants``): None is the authors' ``extract_choice`` on the
    published benchmark (so a new model's answers are read as the released
    ones were, XY-Showing/AMQA@335b175 Scripts/AMQA_Benchmark_LLMs.py) and
    ``strict`` on the agents' texts (A.7.4 asks for the letter alone)."""
    if rule is not None:
        return rule
    return "authors" if variants == "released" else "strict"


def extract(answers: pd.DataFrame, vignettes: pd.DataFrame, rule: str = "strict") -> pd.DataFrame:
    """``answers`` (store rows: item_id, response_text, parsed_answer,
    parse_status, parsed) read under ``rule``: ``strict`` leaves them as
    the format's parser stored them; ``authors`` reads every reply again
    with the authors' ``extract_choice``
    (:func:`medaudit.parse.parse_first_option_token`, the item's own option
    letters). Rows of other items are left alone. Adds ``extract`` (the rule)."""
    if rule not in EXTRACT:
        raise ValueError(f"fairmedqa_extract must be one of {EXTRACT}, not {rule!r}")
    out = answers.copy()
    out["extract"] = rule
    if rule == "strict" or out.empty:
        return out
    keys = dict(zip(vignettes["item_id"], vignettes["options"].map(lambda o: "".join(o))))
    mine = out["item_id"].isin(keys.keys())
    read = [parse.parse_first_option_token(t, keys[i])
            for i, t in zip(out.loc[mine, "item_id"], out.loc[mine, "response_text"])]
    out.loc[mine, "parsed_answer"] = [a for a, _ in read]
    out.loc[mine, "parse_status"] = [s for _, s in read]
    if "parsed" in out.columns:
        out.loc[mine, "parsed"] = [s == parse.OK for _, s in read]
    return out


def check_gold(vignettes: pd.DataFrame, released_items: pd.DataFrame, path: str | Path) -> None:
    """The file's gold letters against those of the released answers
    (:func:`medaudit.released.release_items`) on the ids both have: a
    difference means the file is not the benchmark those answers were made
    on, and pairing a new model's answers with theirs item by item would be
    wrong. Raises :class:`AmqaError` naming the first differing ids."""
    m = vignettes[["item_id", "answer_idx"]].merge(released_items[["item_id", "answer_idx"]], on="item_id",
                                                   suffixes=("", "_released"))
    bad = m[m["answer_idx"] != m["answer_idx_released"]]
    if len(bad):
        shown = ", ".join(f"{r.item_id} {r.answer_idx} vs {r.answer_idx_released}" for r in bad.head(3).itertuples())
        raise AmqaError(path, f"{len(bad)} of {len(m)} vignettes", "answer_idx",
                        f"differs from the released answers' gold letter ({shown}): not the benchmark those "
                        "answers were made on")
