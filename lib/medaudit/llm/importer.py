"""Import responses produced elsewhere into the response store.

Responses drawn outside this compendium (another tool, a hosted API, a
colleague's run) go into the same ``responses`` table that generated
responses go into, so every analysis reads them the same way. They are
marked ``source`` = "imported", ``backend`` = "import" and ``model_id`` =
the ``model`` value.

File format
-----------
One response per record, in long format: one record per (model, item,
condition, prompt format, sample). Either

* **CSV** (``.csv``): UTF-8 (a byte-order mark is allowed), a header row
  naming the columns in any order, standard quoting (fields with commas,
  quotes or newlines in double quotes). An empty cell in an optional column
  means "not given". Records are named ``row N`` as a spreadsheet shows them
  (the header is row 1).
* **JSONL** (``.jsonl`` or ``.ndjson``): UTF-8, one JSON object per line;
  blank lines are skipped. An absent key or ``null`` in an optional field
  means "not given". Records are named ``line N`` (1-based).

Required columns:

============== ============================================================
model          model name as the analyses show it (non-empty text)
item_id        item identifier, e.g. ``medqa4-0042`` (non-empty text)
condition      condition name, e.g. ``base``, ``+homo`` (non-empty text)
prompt_format  ``mcq`` ("[B]" answers), ``mcq_explain`` ("The answer is B")
               or another format name (free text, not parsed here)
sample         sample index k = 0, 1, … (a non-negative integer)
response_text  the model's raw output (text; may be empty)
============== ============================================================

Optional columns:

=============== ===========================================================
parsed_answer   the chosen option as an *original* letter (one of
                ``letters``, or of the item's option letters when
                ``options_by_item`` is given). When given, it is stored as
                is with ``parse_status`` "ok"; when not given, it is parsed
                from ``response_text`` (see below).
answer_logprob  log-probability of the chosen answer token (a number <= 0)
letter_logprobs a JSON object {original letter: log-probability}, e.g.
                ``{"A": -2.3, "B": -0.2}``; in CSV a cell holding that JSON
                text, in JSONL an object or a string holding that JSON text
permutation     the original letters in the order shown, e.g. ``CADB``
                (shown A was original C): a permutation of the letters
temperature     sampling temperature (number >= 0)
top_p           nucleus mass (number in [0, 1])
max_tokens      completion token limit (integer >= 1)
seed            sampling seed (integer)
tokens_in       prompt tokens (integer >= 0)
tokens_out      completion tokens (integer >= 0)
finish_reason   why the text ended (``stop``, ``length``, …): an unparsed
                reply that ended at the token limit is stored as
                ``truncated``, never as a wrong answer
settings        a JSON object of what the answers were made with that no
                other column holds (e.g. ``{"prompt_type": "no_cot",
                "release_file": "..."}``): stored with the row as it is
judged_model    for a judge's verdict: the model whose response this record
                judges (its name in the store); with ``judged_format``
judged_format   the prompt format of the judged response; the judged
                response is the stored one of ``judged_model`` with this
                record's item_id, condition and sample, and must be in the
                store before its verdicts are imported. The verdict row
                keeps its key (``judged_key``), so one judge's verdicts on
                several models' responses never collide.
=============== ===========================================================

Any other column is an error (a misspelt optional column would otherwise be
dropped silently).

Parsing. When ``parsed_answer`` is not given and ``prompt_format`` has a
answer parser in :data:`medaudit.llm.formats.FORMATS`, ``response_text`` is parsed with
it. Without ``permutation`` the letters in the text are taken as original
letters. With ``permutation`` they are taken as the letters shown (A, B, …)
and mapped back to the original, as :func:`medaudit.llm.runs.score` does for
generated responses. A response that cannot be parsed is stored with
``parsed_answer`` NULL and ``parse_status`` giving the reason (``no_answer``,
``multiple``, ``empty``; ``truncated`` when ``finish_reason`` is
``length``) and counted as a parse failure, never as a wrong answer. Formats
without a parser keep both columns NULL (counted as ``no_parser``).

Validation. The whole file is checked before anything is written; the first
bad record raises :class:`ResponseImportError`, whose message names the file,
the record (``row N`` / ``line N``, or ``header``) and the field. A file with
two records for the same (model, item_id, condition, prompt_format, sample)
is an error, and so is a record whose sample is already in the store as an
imported response with a different ``response_text`` (delete the old rows
first if the new file is a correction).

Keys. Each row's key is the sha256 of (model, item_id, condition,
prompt_format, sample, response_text), so importing the same file again adds
nothing.
"""
from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import math
import re
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from medaudit.llm import formats
from .. import parse as _parse
from medaudit.prep.data import DataError, FieldProblem, explain
from .store import ResponseStore

REQUIRED = ("model", "item_id", "condition", "prompt_format", "sample", "response_text")
OPTIONAL = ("parsed_answer", "answer_logprob", "letter_logprobs", "permutation", "temperature",
            "top_p", "max_tokens", "seed", "tokens_in", "tokens_out", "finish_reason", "settings", "judged_model",
            "judged_format")
IDENTITY = ("model", "item_id", "condition", "prompt_format", "sample")


class ResponseImportError(DataError):
    """A record of a response file is malformed: names file, record and field."""


# --------------------------------------------------------------------------
# one record

_INT = re.compile(r"[+-]?\d+")


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str) and _INT.fullmatch(v.strip()):
        return int(v.strip())
    raise ValueError(f"expected an integer, got {v!r}")


def _as_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {v!r}") from None
    else:
        raise ValueError(f"expected a number, got {v!r}")
    if not math.isfinite(x):
        raise ValueError(f"expected a finite number, got {v!r}")
    return x


def _logprob(x: float, what: str) -> float:
    if x > 1e-6:
        raise ValueError(f"{what} {x} is a log-probability and must be <= 0")
    return x


class ImportRecord(BaseModel):
    """One imported response, after the format's rules (values may be text, as in CSV)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    item_id: str
    condition: str
    prompt_format: str
    sample: int
    response_text: str
    parsed_answer: str | None = None
    answer_logprob: float | None = None
    letter_logprobs: dict[str, float] | None = None
    permutation: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    finish_reason: str | None = None
    settings: dict[str, Any] | None = None
    judged_model: str | None = None
    judged_format: str | None = None

    @field_validator("model", "item_id", "condition", "prompt_format", mode="before")
    @classmethod
    def _nonempty_text(cls, v):
        if not isinstance(v, str):
            raise ValueError(f"expected text, got {v!r}")
        if not v.strip():
            raise ValueError("is empty")
        return v

    @field_validator("response_text", mode="before")
    @classmethod
    def _text(cls, v):
        if not isinstance(v, str):
            raise ValueError(f"expected text, got {v!r}")
        return v

    @field_validator("sample", mode="before")
    @classmethod
    def _sample(cls, v):
        try:
            k = _as_int(v)
        except ValueError:
            raise ValueError(f"must be a non-negative integer, got {v!r}") from None
        if k < 0:
            raise ValueError(f"must be a non-negative integer, got {v!r}")
        return k

    @field_validator("max_tokens", "seed", "tokens_in", "tokens_out", mode="before")
    @classmethod
    def _ints(cls, v, info):
        if v is None:
            return None
        k = _as_int(v)
        low = 1 if info.field_name == "max_tokens" else (None if info.field_name == "seed" else 0)
        if low is not None and k < low:
            raise ValueError(f"must be an integer >= {low}, got {v!r}")
        return k

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v):
        if v is None or isinstance(v, dict):
            return v
        try:
            d = json.loads(v) if isinstance(v, str) else None
        except json.JSONDecodeError:
            d = None
        if not isinstance(d, dict):
            raise ValueError(f"must be a JSON object, got {v!r}")
        return d

    @field_validator("temperature", "top_p", "answer_logprob", mode="before")
    @classmethod
    def _floats(cls, v, info):
        if v is None:
            return None
        x = _as_float(v)
        if info.field_name == "temperature" and x < 0:
            raise ValueError(f"must be >= 0, got {v!r}")
        if info.field_name == "top_p" and not 0 <= x <= 1:
            raise ValueError(f"must be in [0, 1], got {v!r}")
        if info.field_name == "answer_logprob":
            _logprob(x, "value")
        return x

    @field_validator("letter_logprobs", mode="before")
    @classmethod
    def _letter_logprobs(cls, v):
        if v is None:
            return None
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as e:
                raise ValueError(f"not valid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(v, dict):
            raise ValueError(f"expected a JSON object {{letter: log-probability}}, got {type(v).__name__}")
        out = {}
        for k, x in v.items():
            try:
                out[str(k)] = _logprob(_as_float(x), "value")
            except ValueError as e:
                raise ValueError(f"letter '{k}': {e}") from None
        return out

    @field_validator("judged_model", "judged_format", mode="after")
    @classmethod
    def _judged(cls, v):
        if v is not None and not v:
            raise ValueError("is empty")
        return v

    @field_validator("parsed_answer", "permutation", "judged_model", "judged_format", mode="before")
    @classmethod
    def _optional_text(cls, v):
        if v is None:
            return None
        if not isinstance(v, str):
            raise ValueError(f"expected text, got {v!r}")
        return v.strip()


def _check_letters(rec: ImportRecord, letters: str) -> None:
    """The checks that depend on the item's option letters."""
    if rec.parsed_answer is not None and rec.parsed_answer not in letters:
        raise FieldProblem("parsed_answer", f"'{rec.parsed_answer}' is not one of the option letters "
                                            f"{list(letters)}")
    if rec.permutation is not None and sorted(rec.permutation) != sorted(letters):
        raise FieldProblem("permutation", f"'{rec.permutation}' is not a permutation of the option "
                                          f"letters '{letters}'")
    if rec.letter_logprobs:
        bad = sorted(set(rec.letter_logprobs) - set(letters))
        if bad:
            raise FieldProblem("letter_logprobs", f"keys {bad} are not option letters {list(letters)}")


def _parse_answer(rec: ImportRecord, letters: str) -> tuple[str | None, str | None]:
    """(original letter, parse status); (None, None) for a format without a parser."""
    if rec.parsed_answer is not None:
        return rec.parsed_answer, _parse.OK
    parser = formats.answer_parser(rec.prompt_format)
    if parser is None:
        return None, None
    if rec.permutation is None:
        return parser(rec.response_text, letters)
    shown = string.ascii_uppercase[:len(rec.permutation)]
    letter, status = parser(rec.response_text, shown)
    return (rec.permutation[shown.index(letter)] if letter else None), status


def _status(rec: ImportRecord, status: str | None) -> str | None:
    from .runs import status_of

    return status_of(status, rec.finish_reason, rec.prompt_format) if formats.known(rec.prompt_format) \
        else status


def import_key(model: str, item_id: str, condition: str, prompt_format: str, sample: int,
               response_text: str, judged: tuple[str, str] | None = None) -> str:
    """An imported response's store key: the sha256 of its model, item, condition,
    prompt format, sample, text and (for a judge's verdict) the judged response, so importing the
    same record twice stores it once."""
    parts = [model, item_id, condition, prompt_format, int(sample), response_text]
    blob = json.dumps(parts + ([list(judged)] if judged else []), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------
# files


def _decode(path: Path) -> str:
    if not path.exists():
        raise ResponseImportError(path, "(file)", "(file)", "does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ResponseImportError(path, f"line {line}", "(encoding)",
                                  f"not valid UTF-8 at byte {e.start}: {e.reason}") from None
    if not text.strip():
        raise ResponseImportError(path, "(file)", "(file)", "is empty")
    return text


def _columns_problem(path: Path, record: str, names: list[str]) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise ResponseImportError(path, record, ",".join(missing),
                                  f"missing required column(s); found {names}")
    unknown = [c for c in names if c not in REQUIRED + OPTIONAL]
    if unknown:
        raise ResponseImportError(path, record, ",".join(unknown),
                                  f"unknown column(s); allowed: {list(REQUIRED + OPTIONAL)}")


def _read_csv(path: Path, text: str) -> list[tuple[str, dict]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except csv.Error as e:
        raise ResponseImportError(path, "header", "(csv)", str(e)) from None
    header = [h.strip() for h in header]
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise ResponseImportError(path, "header", ",".join(dup), "column named more than once")
    _columns_problem(path, "header", header)
    out = []
    n = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise ResponseImportError(path, f"row {n + 1}", "(csv)", str(e)) from None
        n += 1
        if not cells or all(not c.strip() for c in cells):
            continue  # a blank line
        if len(cells) != len(header):
            raise ResponseImportError(path, f"row {n}", "(csv)",
                                      f"has {len(cells)} fields, the header has {len(header)}")
        rec = {h: c for h, c in zip(header, cells) if not (h in OPTIONAL and c.strip() == "")}
        out.append((f"row {n}", rec))
    return out


def _read_jsonl(path: Path, text: str) -> list[tuple[str, dict]]:
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResponseImportError(path, f"line {i}", "(json)",
                                      f"not valid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise ResponseImportError(path, f"line {i}", "(json)", "is not a JSON object")
        missing = [c for c in REQUIRED if c not in obj]
        if missing:
            raise ResponseImportError(path, f"line {i}", ",".join(missing), "missing required field(s)")
        out.append((f"line {i}", {k: v for k, v in obj.items() if not (k in OPTIONAL and v is None)}))
    return out


def read_records(path: str | Path) -> list[tuple[str, dict]]:
    """(record label, raw record) for every record of a CSV or JSONL file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise ResponseImportError(path, "(file)", "(file)",
                                  f"unknown format '{suffix}': expected .csv, .jsonl or .ndjson")
    text = _decode(path)
    return _read_csv(path, text) if suffix == ".csv" else _read_jsonl(path, text)


def _letters_for(options_by_item, letters: str):
    if options_by_item is None:
        return lambda item_id: letters
    if hasattr(options_by_item, "set_index"):      # a DataFrame of items
        options_by_item = options_by_item.set_index("item_id")["options"].to_dict()
    table = {str(k): "".join(sorted(v)) for k, v in options_by_item.items()}

    def get(item_id: str) -> str:
        if item_id not in table:
            raise FieldProblem("item_id", f"'{item_id}' is not a known item")
        return table[item_id]
    return get


def validate(path: str | Path, options_by_item: Mapping | None = None, letters: str = "ABCD") -> list[dict]:
    """Every record of a file checked and turned into a store row; raises on the first bad one."""
    path = Path(path)
    return validate_records(path, read_records(path), options_by_item, letters)


def validate_records(path: str | Path, records: list[tuple[str, dict]], options_by_item: Mapping | None = None,
                     letters: str = "ABCD") -> list[dict]:
    """:func:`validate` on records already read: (label, raw record) pairs,
    as :func:`read_records` returns them or a converter of another file
    format builds them (``path`` names the source in errors)."""
    path = Path(path)
    letters_of = _letters_for(options_by_item, letters)
    rows, seen = [], {}
    for label, raw in records:
        try:
            try:
                rec = ImportRecord.model_validate(raw)
            except ValidationError as e:
                fld, problem = explain(e)
                problem = problem.removeprefix("Value error, ")
                if problem.startswith("Extra inputs"):
                    problem = f"unknown field; allowed: {list(REQUIRED + OPTIONAL)}"
                raise FieldProblem(fld, problem) from None
            item_letters = letters_of(rec.item_id)
            _check_letters(rec, item_letters)
            if (rec.judged_model is None) != (rec.judged_format is None):
                missing = "judged_format" if rec.judged_format is None else "judged_model"
                raise FieldProblem(missing, "a verdict names both judged_model and judged_format")
        except FieldProblem as e:
            raise ResponseImportError(path, label, e.field, e.problem) from None
        judged = (rec.judged_model, rec.judged_format) if rec.judged_model is not None else None
        ident = tuple(getattr(rec, c) for c in IDENTITY) + (judged or ())
        if ident in seen:
            raise ResponseImportError(
                path, label, "sample",
                f"duplicate of {seen[ident]}: the same (model, item_id, condition, prompt_format, sample"
                f"{', judged_model, judged_format' if judged else ''}) = {ident}")
        seen[ident] = label
        answer, status = _parse_answer(rec, item_letters)
        rows.append({
            "_label": label, "_judged": judged,
            "key": import_key(*ident[:5], rec.response_text, judged),
            "source": "imported", "backend": "import", "model": rec.model, "model_id": rec.model,
            "item_id": rec.item_id, "condition": rec.condition, "prompt_format": rec.prompt_format,
            "sample": rec.sample, "permutation": rec.permutation,
            "temperature": rec.temperature, "top_p": rec.top_p, "max_tokens": rec.max_tokens,
            "seed": rec.seed, "prompt": None, "response_text": rec.response_text,
            "parsed_answer": answer, "parse_status": _status(rec, status),
            "answer_logprob": rec.answer_logprob, "letter_logprobs": rec.letter_logprobs,
            "tokens_in": rec.tokens_in, "tokens_out": rec.tokens_out, "finish_reason": rec.finish_reason,
            "settings": rec.settings,
        })
    return rows


def _conflicts(path: Path, store: ResponseStore, rows: list[dict]) -> None:
    """A sample already imported with another response_text would count twice in the analyses."""
    models = sorted({r["model"] for r in rows})
    if not models:
        return
    q = ("SELECT model, item_id, condition, prompt_format, sample, judged_key, key FROM responses "
         f"WHERE source = 'imported' AND model IN ({','.join('?' * len(models))})")
    have = {tuple(t[:6]): t[6] for t in store.query(q, models)}
    for r in rows:
        old = have.get(tuple(r[c] for c in IDENTITY) + (r.get("judged_key"),))
        if old is not None and old != r["key"]:
            raise ResponseImportError(
                path, r["_label"], "response_text",
                f"this (model, item_id, condition, prompt_format, sample) is already in {store.path} "
                f"as an imported response with a different response_text (key {old[:12]}…); "
                f"delete the old rows first if this file corrects them")


def _resolve_judged(path: Path, store: ResponseStore, rows: list[dict]) -> None:
    """Each verdict's ``judged_key``: the stored response of its judged model
    and format with the verdict's item, condition and sample."""
    wanted = {r["_judged"] for r in rows if r["_judged"]}
    index: dict[tuple, list[str]] = {}
    for model, fmt in wanted:
        q = ("SELECT item_id, condition, sample, key FROM responses WHERE model = ? AND prompt_format = ? "
             "AND judged_key IS NULL")
        for i, c, k, key in store.query(q, (model, fmt)):
            index.setdefault((model, fmt, i, c, int(k)), []).append(key)
    for r in rows:
        if not r["_judged"]:
            continue
        found = index.get((*r["_judged"], r["item_id"], r["condition"], r["sample"]), [])
        if len(found) != 1:
            what = "no stored response" if not found else f"{len(found)} stored responses (ambiguous)"
            raise ResponseImportError(
                path, r["_label"], "judged_model",
                f"{what} of '{r['_judged'][0]}' in format '{r['_judged'][1]}' to {r['item_id']} / "
                f"{r['condition']} / sample {r['sample']} in {store.path}: import the judged responses first")
        r["judged_key"] = found[0]


def _generated_namesakes(path: Path, store: ResponseStore, rows: list[dict]) -> None:
    """Imported answers may not take the name of a model whose answers were
    generated in this store (same prompt format): the analyses read one run
    per model name, so one set would hide the other."""
    pairs = sorted({(r["model"], r["prompt_format"]) for r in rows})
    for model, fmt in pairs:
        n = store.count_answers(model, [fmt], "generated")
        if n:
            first = next(r["_label"] for r in rows if r["model"] == model and r["prompt_format"] == fmt)
            raise ResponseImportError(
                path, first, "model",
                f"'{model}' already names {n} generated '{fmt}' answers in {store.path}; imported answers "
                f"under the same name would hide them or be hidden in the analyses: import under "
                f"another name (e.g. '{model} (imported)')")


def catalog(profile: str) -> tuple[set[str], set[str]]:
    """(item ids, condition names) that the notebooks of ``profile`` read:
    the items and conditions of every table the profile's notebooks wrote to
    ``outputs/<profile>/data/`` (an embedded variant's condition is
    "<condition> (embedded)", as notebook 03 names it), the 150 cultural-cue
    items (``cult-NNN``, ``cult4-NNN``) and the condition names defined in
    ``params/`` (identity conditions, the cultural study's original / neutral
    / culture:cue, FairMedQA's original / neutralised / attribute:group)."""
    import yaml

    from .. import paths

    def load(name):
        return yaml.safe_load(paths.params(name).read_text(encoding="utf-8"))

    ids: set[str] = set()
    conds: set[str] = set()
    names = list(load("conditions.yaml")["conditions"])
    conds |= set(names) | {"base", "neutral"} | {f"{c} (embedded)" for c in names}
    cul = load("cultures.yaml")
    conds |= {"original", cul.get("neutral_control", "neutral")}
    conds |= {f"{c['name']}:{q['name']}" for c in cul["cultures"].values() for q in cul["cues"].values()}
    fair = load("fairmedqa.yaml")
    conds |= {"original", "neutralised"} | {f"{a}:{g}" for a, gs in fair["attributes"].items() for g in gs}
    released = paths.raw("cultural_cues_hive", "final_augment_test_questions.json")
    if released.exists():
        n = len(json.loads(released.read_text(encoding="utf-8")))
        ids |= {f"{p}-{i:03d}" for p in ("cult", "cult4") for i in range(n)}
    # the default run's derived tables and, in a named run (medaudit.runs), the run's own
    folders = dict.fromkeys([paths.outputs(profile, "data", mkdir=False), paths.run_outputs(profile, "data")])
    for f in [f for d in folders if d.exists() for f in sorted(d.glob("*.jsonl"))]:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line) if line.strip() else {}
                if not isinstance(rec, dict) or "item_id" not in rec:
                    break                         # not a table of items
                ids.add(str(rec["item_id"]))
                if isinstance(rec.get("condition"), str):
                    c = rec["condition"]
                    conds.add(c if rec.get("method", "standalone") == "standalone" else f"{c} (embedded)")
    return ids, conds


def check_known(path: str | Path, profile: str, external: bool = False, show: int = 5) -> None:
    """Refuse a file whose item ids or conditions no notebook of ``profile``
    reads (:func:`catalog`), naming the first few. ``external=True`` accepts
    item ids of another benchmark (conditions are still checked)."""
    path = Path(path)
    ids, conds = catalog(profile)
    bad_ids: dict[str, str] = {}
    bad_conds: dict[str, str] = {}
    for label, raw in read_records(path):
        i, c = str(raw.get("item_id", "")), str(raw.get("condition", ""))
        if not external and i not in ids:
            bad_ids.setdefault(i, label)
        if c not in conds:
            bad_conds.setdefault(c, label)
    if bad_ids:
        first = list(bad_ids.items())[:show]
        raise ResponseImportError(
            path, first[0][1], "item_id",
            f"{len(bad_ids)} item id(s) that no notebook of profile '{profile}' reads, e.g. "
            + ", ".join(f"'{i}' ({lab})" for i, lab in first)
            + " (have the profile's notebooks run? ids of another benchmark: --external)")
    if bad_conds:
        first = list(bad_conds.items())[:show]
        close = difflib.get_close_matches(first[0][0], sorted(conds), n=1)
        raise ResponseImportError(
            path, first[0][1], "condition",
            f"{len(bad_conds)} unknown condition(s), e.g. " + ", ".join(f"'{c}' ({lab})" for c, lab in first)
            + (f"; did you mean '{close[0]}'?" if close else "")
            + " (conditions are defined in params/conditions.yaml, cultures.yaml and fairmedqa.yaml)")


def import_responses(path: str | Path, store: ResponseStore, options_by_item: Mapping | None = None,
                     letters: str = "ABCD") -> dict:
    """Validate a CSV/JSONL response file (format: see the module docstring)
    and add its rows to ``store``; nothing is written if any record is bad.

    ``options_by_item`` (item_id → options dict, or a DataFrame with item_id
    and options) gives each item's own option letters and rejects unknown
    item_ids; without it every item has ``letters``.

    Returns counts: ``read`` (records), ``stored`` (new rows),
    ``already_present`` (rows whose key was stored before), ``parse_failures``
    (records whose answer could not be parsed), ``no_parser`` (records of a
    format without a parser).
    """
    path = Path(path)
    return import_records(path, read_records(path), store, options_by_item, letters)


def import_records(path: str | Path, records: list[tuple[str, dict]], store: ResponseStore,
                   options_by_item: Mapping | None = None, letters: str = "ABCD") -> dict:
    """:func:`import_responses` for records already read ((label, raw
    record) pairs of the long format; ``path`` names their source): the
    one path by which converters of other file formats
    (:mod:`medaudit.released`) reach the store."""
    path = Path(path)
    rows = validate_records(path, records, options_by_item, letters)
    _resolve_judged(path, store, rows)
    _conflicts(path, store, rows)
    _generated_namesakes(path, store, rows)
    have = store.has(r["key"] for r in rows)
    new = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows if r["key"] not in have]
    store.put_many(new)
    return {
        "file": str(path),
        "read": len(rows),
        "stored": len(new),
        "already_present": len(rows) - len(new),
        "parse_failures": sum(r["parse_status"] not in (None, _parse.OK) for r in rows),
        "no_parser": sum(r["parse_status"] is None for r in rows),
    }


EXPORTED = ("permutation", "answer_logprob", "letter_logprobs", "temperature", "top_p", "max_tokens", "seed",
            "tokens_in", "tokens_out", "finish_reason")


def export_rows(rows, path: str | Path, model: str) -> int:
    """Write stored responses (rows of :meth:`ResponseStore.frame`) as a
    JSONL file of this module's format under the model name ``model``: the
    raw text and what was recorded with it, not the parsed answer (the
    importer parses it again, mapping shown letters back through
    ``permutation``). Used to record answers once (``data/recorded/``) so
    that analyses can be rerun on exactly the same answers. Returns the
    number of records."""
    import math as _math

    out = []
    for r in rows.sort_values(["item_id", "condition", "prompt_format", "sample"]).to_dict("records"):
        rec = {"model": model, "item_id": r["item_id"], "condition": r["condition"],
               "prompt_format": r["prompt_format"], "sample": int(r["sample"]),
               "response_text": r["response_text"] or ""}
        for c in EXPORTED:
            v = r.get(c)
            if v is None or (isinstance(v, float) and _math.isnan(v)):
                continue
            rec[c] = int(v) if c in ("max_tokens", "seed", "tokens_in", "tokens_out") else v
        out.append(json.dumps(rec, ensure_ascii=False, sort_keys=True))
    from .. import atomic

    atomic.write_text(Path(path), "\n".join(out) + "\n")
    return len(out)


def main(argv=None) -> int:
    """``python -m medaudit.llm.importer FILE [--profile default]``: import a
    CSV/JSONL of responses into ``outputs/<profile>/data/responses.sqlite``."""
    import argparse
    import json as _json

    from .. import paths

    ap = argparse.ArgumentParser(prog="python -m medaudit.llm.importer", description=main.__doc__)
    ap.add_argument("file")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--letters", default="ABCD")
    ap.add_argument("--external", action="store_true",
                    help="the items belong to another benchmark: accept item ids the profile's notebooks do not know")
    a = ap.parse_args(argv)
    profiles = paths.profiles()
    if a.profile not in profiles:
        ap.error(f"no profile '{a.profile}' (params/{a.profile}.yaml); profiles: {', '.join(profiles)}")
    try:
        check_known(a.file, a.profile, external=a.external)
        with ResponseStore(paths.outputs(a.profile, "data", "responses.sqlite")) as store:
            counts = import_responses(a.file, store, letters=a.letters)
    except ResponseImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(_json.dumps(counts, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
