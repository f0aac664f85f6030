"""Loading and validating the shipped datasets.

Every loader reads one raw file and checks every record. A bad record raises
:class:`DataError`, which names the file, the record (JSONL line, CSV row or
JSON list index) and the field. With ``errors="skip"`` bad records are left
out instead and listed in the returned :class:`Loaded` report, so nothing
already read is lost and a reader can see exactly what was dropped.
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from medaudit import atomic, paths

Errors = Literal["raise", "skip"]


class DataError(ValueError):
    """A record in a raw data file is malformed."""

    def __init__(self, file: str | Path, record: str, field: str, problem: str):
        self.file, self.record, self.field, self.problem = str(file), record, field, problem
        super().__init__(f"{self.file}: {record}: field '{field}': {problem}")


@dataclass
class Loaded:
    """Records that passed validation, and a table of those that did not."""

    records: pd.DataFrame
    skipped: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["file", "record", "field", "problem"])
    )

    def __iter__(self):  # allows ``df, skipped = load_...(..., errors="skip")``
        return iter((self.records, self.skipped))


# --------------------------------------------------------------------------
# record schemas


class MCQRecord(BaseModel):
    """One MedQA multiple-choice question with ``n_options`` options A, B, …"""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=False)

    question: str
    options: dict[str, str]
    answer: str
    answer_idx: str

    @field_validator("question")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("is empty")
        return v

    @model_validator(mode="after")
    def _consistent(self, info) -> "MCQRecord":
        n = (info.context or {}).get("n_options", 4)
        want = list(string.ascii_uppercase[:n])
        if sorted(self.options) != want:
            raise FieldProblem(
                "options", f"expected option keys {want}, got {sorted(self.options)}"
            )
        for k, v in self.options.items():
            if not str(v).strip():
                raise FieldProblem("options", f"option {k} is empty")
        if self.answer_idx not in want:
            raise FieldProblem(
                "answer_idx", f"'{self.answer_idx}' is not one of the {n} option letters {want}"
            )
        if self.options[self.answer_idx] != self.answer:
            raise FieldProblem(
                "answer",
                f"'{self.answer}' differs from option {self.answer_idx} "
                f"'{self.options[self.answer_idx]}'",
            )
        return self


class FieldProblem(ValueError):
    """Raised inside a pydantic validator to name the field at fault."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(problem)


def explain(err: ValidationError) -> tuple[str, str]:
    """The first (field, problem) of a pydantic error, unwrapping ours."""
    first = err.errors()[0]
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, FieldProblem):
        return inner.field, inner.problem
    loc = ".".join(str(p) for p in first.get("loc", ())) or "(record)"
    return loc, first.get("msg", str(err))


# --------------------------------------------------------------------------
# helpers shared by the loaders


def _read_bytes(path: Path) -> bytes:
    path = Path(path)
    if not path.exists():
        raise DataError(path, "(file)", "(file)", "does not exist")
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(path, "(file)", "(file)", "is empty")
    return raw


def _file_problem(path: Path, err: DataError, errors: Errors) -> Loaded:
    """A problem with the whole file: raised, or in skip mode one skipped row."""
    if errors == "raise":
        raise err
    return Loaded(pd.DataFrame(), pd.DataFrame(
        [{"file": str(path), "record": err.record, "field": err.field, "problem": err.problem}]))


def _read_text(path: Path) -> str:
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(
            path, f"line {line}", "(encoding)", f"not valid UTF-8 at byte {e.start}: {e.reason}"
        ) from None
    return text


def _collect(
    path: Path,
    rows: list[tuple[str, Any]],
    check: Callable[[Any], dict],
    errors: Errors,
) -> Loaded:
    """Run ``check`` on every (record label, raw record); raise or skip."""
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
    good, bad = [], []
    for label, raw in rows:
        try:
            good.append(check(raw))
        except DataError as e:
            if errors == "raise":
                raise DataError(path, label, e.field, e.problem) from None
            bad.append({"file": str(path), "record": label, "field": e.field, "problem": e.problem})
    skipped = pd.DataFrame(bad, columns=["file", "record", "field", "problem"])
    return Loaded(pd.DataFrame(good), skipped)


# --------------------------------------------------------------------------
# MedQA


def _mcq_fields(rec) -> dict:
    """The columns every multiple-choice item has, from a validated record
    (options in letter order)."""
    return {"question": rec.question, "options": dict(sorted(rec.options.items())), "answer": rec.answer,
            "answer_idx": rec.answer_idx}


def load_medqa(path: str | Path, n_options: int = 4, errors: Errors = "raise",
               id_prefix: str | None = None) -> Loaded:
    """Load a MedQA JSONL file (one question per line).

    Returns columns ``item_id`` (``<prefix>-<line index, 0-based, 4 digits>``),
    ``row`` (0-based line index), ``question``, ``options`` (dict letter → text),
    ``answer``, ``answer_idx`` and ``meta_info``.
    """
    path = Path(path)
    prefix = id_prefix or f"medqa{n_options}"
    try:
        lines = _read_bytes(path).split(b"\n")
    except DataError as e:
        return _file_problem(path, e, errors)

    # each line is decoded on its own, so one badly encoded line is one bad record
    rows = [(f"line {i + 1}", (i, ln)) for i, ln in enumerate(lines) if ln.strip()]

    def check(raw):
        i, ln = raw
        try:
            ln = ln.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(path, "", "(encoding)",
                            f"not valid UTF-8 at byte {e.start} of the line: {e.reason}") from None
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as e:
            raise DataError(path, "", "(json)", f"not valid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(path, "", "(json)", "is not a JSON object")
        try:
            rec = MCQRecord.model_validate(obj, context={"n_options": n_options})
        except ValidationError as e:
            fld, problem = explain(e)
            raise DataError(path, "", fld, problem) from None
        return {
            "item_id": f"{prefix}-{i:04d}",
            "row": i,
            **_mcq_fields(rec),
            "meta_info": obj.get("meta_info", ""),
        }

    return _collect(path, rows, check, errors)


# --------------------------------------------------------------------------
# dialogs (CSV)


def _read_csv(path: Path, required: list[str]) -> pd.DataFrame:
    _read_text(path)  # encoding and emptiness checks with clear messages
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(path, "header", ",".join(missing), f"missing column(s); found {list(df.columns)}")
    return df


def _csv_rows(df: pd.DataFrame) -> list[tuple[str, dict]]:
    # row numbers as a spreadsheet shows them: the header is row 1
    return [(f"row {i + 2}", rec) for i, rec in enumerate(df.to_dict("records"))]


def _require_nonempty(rec: dict, cols: list[str], path: Path) -> None:
    for c in cols:
        if not str(rec.get(c, "")).strip():
            raise DataError(path, "", c, "is empty")


# the two dialog datasets of the SOAP study (seed 002): the ``dataset`` of every dialog record, and the
# keys of the profile's soap_datasets (medaudit.config.SOAP_DATASETS imports them from here)
MTS_DIALOG, ACI_BENCH = "mts_dialog", "aci_bench"
SOAP_DATASETS = (MTS_DIALOG, ACI_BENCH)


def load_mts_dialog(path: str | Path, errors: Errors = "raise") -> Loaded:
    """Load one MTS-Dialog CSV (ID, section_header, section_text, dialogue)."""
    path = Path(path)
    cols = ["ID", "section_header", "section_text", "dialogue"]
    try:
        df = _read_csv(path, cols)
    except DataError as e:
        return _file_problem(path, e, errors)
    split = path.stem.replace("MTS-Dialog-", "")

    def check(rec):
        _require_nonempty(rec, ["ID", "dialogue"], path)
        return {
            "dialog_id": f"mts-{split}-{rec['ID']}",
            "dataset": MTS_DIALOG,
            "split": split,
            "source_id": rec["ID"],
            "section_header": rec["section_header"],
            "reference": rec["section_text"],
            "dialogue": rec["dialogue"],
        }

    return _collect(path, _csv_rows(df), check, errors)


def load_aci_bench(path: str | Path, metadata_path: str | Path | None = None,
                   errors: Errors = "raise") -> Loaded:
    """Load one ACI-Bench challenge CSV joined with its ``*_metadata.csv``.

    The metadata gives the patient's and doctor's names (used to redact them)
    and the stated gender and age; ``patient_gender`` is whitespace-stripped
    (the raw file has "female " beside "female").
    """
    path = Path(path)
    metadata_path = Path(metadata_path) if metadata_path else path.with_name(path.stem + "_metadata.csv")
    try:
        df = _read_csv(path, ["dataset", "encounter_id", "dialogue", "note"])
        meta = _read_csv(
            metadata_path,
            ["encounter_id", "doctor_name", "patient_gender", "patient_age",
             "patient_firstname", "patient_familyname"],
        ).set_index("encounter_id")
    except DataError as e:
        return _file_problem(e.file, e, errors)
    split = path.stem

    def check(rec):
        _require_nonempty(rec, ["encounter_id", "dialogue"], path)
        eid = rec["encounter_id"]
        if eid not in meta.index:
            raise DataError(path, "", "encounter_id", f"'{eid}' has no row in {metadata_path.name}")
        m = meta.loc[eid]
        return {
            "dialog_id": f"aci-{split}-{eid}",
            "dataset": ACI_BENCH,
            "split": split,
            "source_id": eid,
            "section_header": "FULL",
            "reference": rec["note"],
            "dialogue": rec["dialogue"],
            "patient_gender": m["patient_gender"].strip(),
            "patient_age": m["patient_age"].strip(),
            "names": [n.strip() for n in (m["patient_firstname"], m["patient_familyname"],
                                          m["doctor_name"]) if n.strip()],
        }

    return _collect(path, _csv_rows(df), check, errors)


# --------------------------------------------------------------------------
# the released cultural-cue augmentations (seed 003)


def load_cultural_augments(path: str | Path, errors: Errors = "raise") -> Loaded:
    """Load the 150 released cultural-cue items (five options A–E).

    One row per item with the original question, the options, the answer and
    a dict ``variants`` {(culture, cue): text} for t1..t3 × i/c/ic.
    """
    path = Path(path)
    try:
        text = _read_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(path, f"line {e.lineno}", "(json)", f"not valid JSON: {e.msg}") from None
        if not isinstance(data, list):
            raise DataError(path, "(file)", "(json)", "expected a JSON list of items")
    except DataError as e:
        return _file_problem(path, e, errors)

    def check(raw):
        i, obj = raw
        if not isinstance(obj, dict):
            raise DataError(path, "", "(json)", "is not a JSON object")
        try:
            rec = MCQRecord.model_validate(
                {"question": obj.get("original_question", ""), **{k: obj.get(k) for k in
                                                                   ("options", "answer", "answer_idx")}},
                context={"n_options": 5},
            )
        except ValidationError as e:
            fld, problem = explain(e)
            raise DataError(path, "", "original_question" if fld == "question" else fld, problem) from None
        variants = {}
        for t in ("t1", "t2", "t3"):
            block = obj.get(f"{t}_question")
            if not isinstance(block, dict):
                raise DataError(path, "", f"{t}_question", "missing or not an object")
            for cue in ("i", "c", "ic"):
                v = block.get(cue)
                if not isinstance(v, str) or not v.strip():
                    raise DataError(path, "", f"{t}_question.{cue}", "missing or empty")
                variants[(t, cue)] = v
        return {
            "item_id": f"cult-{i:03d}",
            "index": i,
            **_mcq_fields(rec),
            "variants": variants,
        }

    rows = [(f"item {i}", (i, obj)) for i, obj in enumerate(data)]
    return _collect(path, rows, check, errors)


# --------------------------------------------------------------------------
# the shipped files, and derived tables under outputs/<profile>/data/

MEDQA4 = ("medqa_usmle_4options", "phrases_no_exclude_test.jsonl")
MEDQA5 = ("medqa_usmle_5options", "test.jsonl")
CULTURAL = ("cultural_cues_hive", "final_augment_test_questions.json")
MTS_FILES = ("MTS-Dialog-TrainingSet.csv", "MTS-Dialog-ValidationSet.csv",
             "MTS-Dialog-TestSet-1-MEDIQA-Chat-2023.csv", "MTS-Dialog-TestSet-2-MEDIQA-Sum-2023.csv")
ACI_SPLITS = ("train", "valid", "clinicalnlp_taskB_test1", "clinicalnlp_taskC_test2", "clef_taskC_test3")


MEDQA4_FILES = ["/".join(MEDQA4)]     # the profiles' default ``medqa_files``: the shipped test split


def medqa_split(path: str | Path) -> str:
    """The split a MedQA file holds, from its name: "phrases_no_exclude_train.jsonl"
    → "train", "test.jsonl" → "test"."""
    stem = Path(path).name.split(".")[0]
    return stem.replace("phrases_no_exclude_", "") or stem


def load_medqa_files(files: list[str] | tuple[str, ...], n_options: int = 4, errors: Errors = "raise") -> Loaded:
    """The MedQA items of every file of ``files`` (the profile's
    ``medqa_files``), in the order given. A file is an
    absolute path or one relative to ``data/raw/``; its split comes from its
    name (:func:`medqa_split`). Items of the test split keep the ids of
    :func:`load_medqa` (``medqa4-0229``); the other splits' ids name them
    (``medqa4-train-0000``, ``medqa4-dev-0000``). ``row`` runs over all files
    (the funnel's sample is ordered by it), ``line`` is the 0-based line in
    its file and ``source`` the file as listed. Seed 000 §2 sampled "2,364
    questions" of MedQA-USMLE-4-options: list the train, dev and test files
    to select from the whole set (docs/statistics.md, "Selection")."""
    parts, seen, offset = [], {}, 0
    prefix = f"medqa{n_options}"
    for f in files:
        path = Path(f) if Path(f).is_absolute() else paths.raw(*Path(f).parts)
        split = medqa_split(path)
        if split in seen:
            raise ValueError(f"medqa_files: two files hold the split '{split}' ({seen[split]} and {f}); "
                             "their item ids would collide")
        seen[split] = f
        got = load_medqa(path, n_options, errors, id_prefix=prefix if split == "test" else f"{prefix}-{split}")
        rec = got.records
        if len(rec):
            rec = rec.assign(line=rec["row"], row=rec["row"] + offset, source=str(f))
            offset = int(rec["row"].max()) + 1
        parts.append(Loaded(rec, got.skipped))
    return Loaded(pd.concat([p.records for p in parts], ignore_index=True),
                  pd.concat([p.skipped for p in parts], ignore_index=True))


def load_dialogs(errors: Errors = "raise") -> Loaded:
    """All MTS-Dialog and ACI-Bench (challenge) dialogs in one table."""
    parts = [load_mts_dialog(paths.raw("mts_dialog", f), errors) for f in MTS_FILES]
    parts += [load_aci_bench(paths.raw("aci_bench", "challenge_data", f"{s}.csv"), errors=errors)
              for s in ACI_SPLITS]
    return Loaded(pd.concat([p.records for p in parts], ignore_index=True),
                  pd.concat([p.skipped for p in parts], ignore_index=True))


def load_summary() -> pd.DataFrame:
    """Every shipped dataset loaded and validated: records and skipped per file."""
    rows = []

    def add(name, loaded, path):
        rows.append({"dataset": name, "file": str(Path(path).relative_to(paths.raw())),
                     "records": len(loaded.records), "skipped": len(loaded.skipped)})

    p = paths.raw(*MEDQA4); add("MedQA-USMLE 4 options (test)", load_medqa(p, 4, "skip"), p)
    p = paths.raw(*MEDQA5); add("MedQA-USMLE 5 options (test)", load_medqa(p, 5, "skip"), p)
    for f in MTS_FILES:
        p = paths.raw("mts_dialog", f); add("MTS-Dialog", load_mts_dialog(p, "skip"), p)
    for s in ACI_SPLITS:
        p = paths.raw("aci_bench", "challenge_data", f"{s}.csv"); add("ACI-Bench", load_aci_bench(p, errors="skip"), p)
    p = paths.raw(*CULTURAL); add("Cultural cues (released augmentations)", load_cultural_augments(p, "skip"), p)
    return pd.DataFrame(rows)


def save_frame(df: pd.DataFrame, profile: str, name: str) -> Path:
    """Write a derived table to ``outputs/<profile>/data/<name>.jsonl`` (a named run's
    ``data/``: :func:`medaudit.paths.run_outputs`) and return that path. While the runner runs
    a notebook the file goes to the run's staging folder (:func:`medaudit.paths.written`) and
    replaces the last good one only when the whole notebook succeeded, like its tables and
    figures; the notebook reads it back from there meanwhile (:func:`load_frame`)."""
    p = paths.written(profile, "data") / f"{name}.jsonl"
    with atomic.atomic_path(p) as tmp:                # readers alongside see the old file or the new
        df.to_json(tmp, orient="records", lines=True, force_ascii=False)
    return paths.run_outputs(profile, "data", f"{name}.jsonl")


def save_template(df: pd.DataFrame, profile: str, name: str) -> Path:
    """Write a human-label template (``<name>.csv``, for a person to fill in) where the run's
    other derived data goes, as :func:`save_frame` does: ``outputs/<profile>/data/`` for the
    default run, ``outputs/<profile>/runs/<run>/data/`` for a named one (so a rerun never
    writes over the default run's template), staged while the runner runs the notebook.
    Returns the path it will have once the run succeeded."""
    p = paths.written(profile, "data") / f"{name}.csv"
    with atomic.atomic_path(p) as tmp:
        df.to_csv(tmp, index=False)
    return paths.run_outputs(profile, "data", f"{name}.csv")


def writer(name: str) -> str | None:
    """The notebook (its two-digit number) whose ``save_frame(..., "<name>")``
    writes ``outputs/<profile>/data/<name>.jsonl``, read from the notebooks'
    sources (an f-string name such as ``f"open_labels_{m}"`` matches any
    value); None when no notebook writes it."""
    import json
    import re

    call = re.compile(r'save_frame\(.*?,\s*profile,\s*(f?)"([^"]+)"', re.S)
    roots = dict.fromkeys([paths.project_root(), Path(__file__).resolve().parents[3]])   # the checkout's too
    found = [p for r in roots for p in sorted(r.joinpath("notebooks").glob("[0-9][0-9]_*.ipynb"))]
    for nb in found:
        cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
        source = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
        for fstring, written in call.findall(source):
            pattern = (re.sub(r"\\\{[^}]*\\\}|\{[^}]*\}", ".+", re.escape(written)) if fstring
                       else re.escape(written))
            if re.fullmatch(pattern, name):
                return nb.name[:2]
    return None


def load_frame(profile: str, name: str) -> pd.DataFrame:
    """Read a table written by :func:`save_frame` (the run's own, else the default run's:
    :func:`medaudit.paths.run_input`); says which notebook to run if absent."""
    p = paths.run_input(profile, "data", f"{name}.jsonl")
    if not p.exists():
        nb = writer(name)
        run = (f"notebook {nb} writes it: make nb NB={nb} PROFILE={profile}" if nb else
               f"no notebook writes it; run the notebooks in order (make all PROFILE={profile})")
        raise FileNotFoundError(f"{p} does not exist: {run}")
    return pd.read_json(p, orient="records", lines=True, dtype=False)
