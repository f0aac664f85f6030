"""Answers of real models released by the study authors, into the response store.

Two studies published their models' raw answers (``data/raw/released_answers/``,
``PROVENANCE.md``); ``params/released.yaml`` says which file holds which
model and how the release's keys map onto our item ids and conditions. Each
release format has one converter here, which turns a file into records of
the importer's long format (:mod:`medaudit.llm.importer`); every record then
takes the documented import path (:func:`medaudit.llm.importer.import_records`):
validated, parsed with the format's parser, stored with ``source`` =
"imported". Nothing is scored here.

* **cultural_cues_hive** (seed 003): ``Final_<model>_option_augment_answers.json``
  and ``..._short_augment_answers.json`` are lists of 150 objects (item index
  0–149, the order of ``final_augment_test_questions.json``) with keys
  ``original``, ``neutral`` and ``t1``/``t2``/``t3`` → ``i``/``c``/``ic``. An
  option answer is one letter: stored as the parsed answer; any other value
  is kept as the response text and parsed with the format's parser
  (``mcq_option``, the authors' one-character prompt), so it
  becomes a counted parse failure, never a wrong answer. An explanation is
  parsed with the seed's "The answer is X" rule (:func:`medaudit.parse.parse_answer_is`).
  ``Final_<model>_judge.json`` holds the authors' judge verdicts ("[YES]" /
  "[NO]") in the same shape; they are imported as the judge's responses,
  each tied to the explanation it judges (``judged_model`` /
  ``judged_format``), so notebook 07's judge stage can read them instead of
  asking a model.
* **fairmedqa_amqa** (seeds 001/004): ``AMQA_Benchmark_Answer_<model>_no_cot.jsonl``,
  one line per benchmark vignette: ``question_id``, ``answer_idx`` (gold) and
  eight ``test_model_answer_<variant>`` letters or "Unknown" (no answer
  extracted by the authors: imported as a parse failure). The answer files
  carry no texts, so the items exist here as ids with gold letters
  (:func:`amqa_items`; the texts are the separate benchmark file that
  :mod:`medaudit.prep.amqa` reads); ``AMQA_Benchmark_Summary_…`` holds the authors' own
  accuracy counts (:func:`amqa_summary`), a check on our recomputation.
* **fairmedprompt** (seed 004's group): ``FairMP_Answer_<model>_<prompt>.jsonl``,
  the same shape with its own field names. A per-vignette release declares
  its answer fields (:func:`fields`), its Summary's type names
  (:func:`summary_types`) and its file ``layout`` in params/released.yaml:
  every release is read as released, nothing renamed.

Every file is checked against ``SHA256SUMS`` in its folder before it is
read (:func:`verify`); a changed or unlisted file is an error that names it.

This package's ``__init__`` is the library that notebooks 07 and 08 (and
:mod:`medaudit.validation.power`) read; the maintainer's command line that edits
``params/released.yaml`` (``python -m medaudit.released add|remove|list``)
is :mod:`medaudit.released.cli`, which imports this library and is never
imported by it.
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from medaudit.prep import amqa
from medaudit import paths
from medaudit.prep.data import DataError
from ..llm import importer
from ..checksum import sha256_file

FOLDER = ("released_answers",)
FORMATS = ("hive", "amqa")      # seed 003's per-item JSON objects; FairMedQA's per-vignette JSONL lines
# the notebook whose published tables a release's models appear in (params/published.yaml `notebook`)
NOTEBOOKS = {"hive": "07_cultural_flips", "amqa": "08_fairness_disparities"}
BASELINES = ("original", "neutral")


class ReleaseError(DataError):
    """A released file is missing, changed, or not in the expected shape."""


def spec(name: str, path: str | Path | None = None) -> dict:
    """The entry ``name`` of ``params/released.yaml`` (or ``path``)."""
    path = Path(path) if path else paths.params("released.yaml")
    specs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if name not in specs:
        raise ReleaseError(path, name, "(entry)", f"no release '{name}'; known: {sorted(specs)}")
    return specs[name]


def folder(name: str, release: dict | None = None) -> Path:
    """Where a release's files are: ``data/raw/released_answers/<folder>``
    (an absolute ``folder`` in the spec points elsewhere)."""
    release = release or spec(name)
    f = Path(release.get("folder", name))
    return f if f.is_absolute() else paths.raw(*FOLDER, str(f))


def listed_digests(sums: Path) -> dict[str, str]:
    """relative path → sha256 of a SHA256SUMS file ("<sha256>  <relative path>" lines)."""
    listed = {}
    for line in sums.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, rel = line.split(maxsplit=1)
            listed[rel.strip().lstrip("*")] = digest
    return listed


def verify(path: Path) -> None:
    """Check ``path`` against the ``SHA256SUMS`` of its folder or of one of
    the two folders above (lines "<sha256>  <relative path>"): raises :class:`ReleaseError`
    naming the file when it is missing, unlisted or changed."""
    path = Path(path)
    if not path.exists():
        raise ReleaseError(path, "(file)", "(file)", "does not exist")
    for base in list(path.parents)[:3]:       # its folder, the release's, the releases' (a release's subfolder)
        sums = base / "SHA256SUMS"
        if not sums.exists():
            continue
        listed = listed_digests(sums)
        rel = path.relative_to(base).as_posix()
        if rel not in listed:
            continue
        got = sha256_file(path)
        if got != listed[rel]:
            raise ReleaseError(path, "(file)", "sha256", f"is {got}, but {sums} lists {listed[rel]}: "
                                                         f"the file was changed")
        return
    raise ReleaseError(path, "(file)", "sha256", "not listed in a SHA256SUMS beside it or in the two folders above")


def _load_json(path: Path):
    verify(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReleaseError(path, f"line {e.lineno}", "(json)", e.msg) from None


# --------------------------------------------------------------------------
# seed 003 (HIVE): one object per item, culture × cue nested


def _hive_cells(path: Path, condition: Callable[[str, str], str]):
    """(label, item index, condition, value) for every cell of a HIVE file."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise ReleaseError(path, "(file)", "(json)", f"expected a list of items, got {type(data).__name__}")
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise ReleaseError(path, f"item {i}", "(item)", f"expected an object, got {type(obj).__name__}")
        for key, val in obj.items():
            if key in BASELINES:
                yield f"item {i}, {key}", i, key, val
            elif isinstance(val, dict):
                for cue, v in val.items():
                    try:
                        cond = condition(key, cue)
                    except KeyError:
                        raise ReleaseError(path, f"item {i}", f"{key}.{cue}", "unknown culture or cue key "
                                           "(params/cultures.yaml)") from None
                    yield f"item {i}, {key}.{cue}", i, cond, v
            else:
                raise ReleaseError(path, f"item {i}", key, f"expected one of {list(BASELINES)} or a culture "
                                                           f"key with cue answers")


def _text(path: Path, label: str, field: str, v) -> str:
    if not isinstance(v, str):
        raise ReleaseError(path, label, field, f"expected text, got {v!r}")
    return v


def hive_records(path: str | Path, model: str, prompt_format: str, condition: Callable[[str, str], str],
                 prefix: str = "cult-", letters: str = "ABCDE") -> list[tuple[str, dict]]:
    """Importer records (sample 0) for a HIVE answer file: a bare option
    letter becomes the parsed answer; any other text is left to the
    format's parser (counted as a parse failure when it has no answer)."""
    path = Path(path)
    out = []
    for label, i, cond, v in _hive_cells(path, condition):
        v = _text(path, label, "answer", v)
        rec = {"model": model, "item_id": f"{prefix}{i:03d}", "condition": cond, "prompt_format": prompt_format,
               "sample": 0, "response_text": v}
        if prompt_format in ("mcq", "mcq_option") and v.strip() in letters and len(v.strip()) == 1:
            rec["parsed_answer"] = v.strip()
        out.append((label, rec))
    return out


def hive_verdicts(path: str | Path, judge: str, judged_model: str, prompt_format: str, judged_format: str,
                  condition: Callable[[str, str], str], prefix: str = "cult-") -> list[tuple[str, dict]]:
    """Importer records of the judge ``judge``'s verdicts on ``judged_model``'s
    responses in ``judged_format`` (a HIVE judge file)."""
    path = Path(path)
    return [(label, {"model": judge, "item_id": f"{prefix}{i:03d}", "condition": cond,
                     "prompt_format": prompt_format, "sample": 0,
                     "response_text": _text(path, label, "verdict", v),
                     "judged_model": judged_model, "judged_format": judged_format})
            for label, i, cond, v in _hive_cells(path, condition)]


# --------------------------------------------------------------------------
# seeds 001/004 (AMQA): one line per vignette, one field per variant

def fields(release: dict, where: str | Path | None = None) -> dict[str, str]:
    """A per-vignette release's declared ``fields``: the answer file's field
    of each text → our condition (params/released.yaml; AMQA writes
    ``test_model_answer_original_question``, FairMedPrompt
    ``test_model_answer_original``: each release is read as released, no
    renaming)."""
    got = release.get("fields")
    if not isinstance(got, dict) or not got:
        raise ReleaseError(where or paths.params("released.yaml"), str(release.get("folder", "(entry)")), "fields",
                           "declare the answer file's field of each text: {field: condition}")
    return {str(k): str(v) for k, v in got.items()}


def summary_types(release: dict, where: str | Path | None = None) -> dict[str, str]:
    """A per-vignette release's declared ``summary_types``: the Summary
    file's ``question_type`` of each text → our condition (AMQA writes
    ``original_question_question``, FairMedPrompt ``original_question``)."""
    got = release.get("summary_types")
    if not isinstance(got, dict) or not got:
        raise ReleaseError(where or paths.params("released.yaml"), str(release.get("folder", "(entry)")),
                           "summary_types", "declare the Summary's question_type of each text: {type: condition}")
    return {str(k): str(v) for k, v in got.items()}


def _amqa_lines(path: Path) -> list[tuple[str, dict]]:
    verify(path)
    return amqa.json_objects(path, ReleaseError)


def _amqa_id(path: Path, label: str, rec: dict, prefix: str) -> str:
    return amqa.record_item_id(path, label, rec, ReleaseError, prefix)


def amqa_records(path: str | Path, model: str, fields_: dict[str, str], prompt_format: str = "mcq_letter",
                 prefix: str = "amqa-") -> list[tuple[str, dict]]:
    """Importer records (sample 0) for a per-vignette answer file; every
    declared field (``fields_``: field → condition, :func:`fields`) must be
    present on every line: a missing one is an error naming the file, the
    line, the field and the answer fields the line does have. "Unknown"
    (and any other text without a letter) is parsed by the format's parser
    and so counted as a parse failure."""
    path = Path(path)
    out = []
    for label, rec in _amqa_lines(path):
        item = _amqa_id(path, label, rec, prefix)
        for field, cond in fields_.items():
            if field not in rec:
                others = [k for k in rec if k not in ("question_id", "answer_idx") and k not in fields_]
                raise ReleaseError(path, label, field, "missing" + (
                    f" (the line has {', '.join(others)}: is this file of another release's layout? its fields "
                    "are declared in params/released.yaml `fields`)" if others else ""))
            out.append((f"{label}, {field}", {"model": model, "item_id": item, "condition": cond,
                                              "prompt_format": prompt_format, "sample": 0,
                                              "response_text": _text(path, label, field, rec[field])}))
    return out


def amqa_items(path: str | Path, prefix: str = "amqa-", letters: str = "ABCD") -> pd.DataFrame:
    """The benchmark's items as far as the release has them: item_id,
    answer_idx (gold letter), options (the letters only: the answer files
    carry no texts) and source."""
    path = Path(path)
    rows = []
    for label, rec in _amqa_lines(path):
        gold = rec.get("answer_idx")
        if not isinstance(gold, str) or gold not in letters:
            raise ReleaseError(path, label, "answer_idx", f"expected one of {list(letters)}, got {gold!r}")
        rows.append({"item_id": _amqa_id(path, label, rec, prefix), "answer_idx": gold,
                     "options": {k: None for k in letters}, "source": f"released: {path.name}"})
    return pd.DataFrame(rows)


def amqa_summary(path: str | Path, types: dict[str, str]) -> pd.DataFrame:
    """The authors' accuracy counts: condition, correct, total, accuracy (%);
    ``types``: the Summary's ``question_type`` → condition (:func:`summary_types`)."""
    path = Path(path)
    rows = []
    for label, rec in _amqa_lines(path):
        qt = str(rec.get("question_type", ""))
        if qt not in types:
            raise ReleaseError(path, label, "question_type", f"unknown variant {qt!r} (the release's Summary "
                                                             f"types: {', '.join(types)})")
        for k in ("correct_num", "total_num"):
            if not isinstance(rec.get(k), int) or isinstance(rec.get(k), bool):
                raise ReleaseError(path, label, k, f"expected a whole number, got {rec.get(k)!r}")
        rows.append({"condition": types[qt], "correct": int(rec["correct_num"]),
                     "total": int(rec["total_num"]),
                     "accuracy": 100 * rec["correct_num"] / rec["total_num"] if rec["total_num"] else float("nan")})
    return pd.DataFrame(rows)


def summary_check(answers: str | Path, summary: str | Path, release: dict) -> pd.DataFrame:
    """An answer file's own counts beside the authors' Summary file of the
    same run, per condition: ``correct`` / ``total`` as the authors count
    them (a text's answer equal to ``answer_idx``, over every line:
    "Unknown" counts wrong; both releases' ``summarize_accuracy``), theirs,
    and ``equal``. A Summary that differs from its answers means the two
    files are not of one run (or one was edited): ``add`` reports it,
    ``list`` shows it."""
    answers, summary = Path(answers), Path(summary)
    lines = _amqa_lines(answers)
    ours = {cond: sum(rec.get(f) == rec.get("answer_idx") for _, rec in lines)
            for f, cond in fields(release).items()}
    theirs = amqa_summary(summary, summary_types(release))
    out = theirs.rename(columns={"correct": "authors correct", "total": "authors total"}).drop(columns="accuracy")
    out["correct"] = out["condition"].map(ours)
    out["total"] = len(lines)
    out["equal"] = (out["correct"] == out["authors correct"]) & (out["total"] == out["authors total"])
    return out[["condition", "correct", "total", "authors correct", "authors total", "equal"]]


# --------------------------------------------------------------------------
# a whole release into a store


def import_release(name: str, store, condition: Callable[[str, str], str] | None = None,
                   release: dict | None = None) -> pd.DataFrame:
    """Import every file of release ``name`` (``params/released.yaml``) into
    ``store``: answers first, then verdicts (which must find the answers
    they judge). ``condition`` maps a HIVE (culture key, cue key) to our
    condition name (notebook 07 passes its cultural config's). Returns one
    row per file: model, file, prompt_format, prompt_type, read, stored,
    already_present, parse_failures. Importing again stores nothing new.

    ``prompt_type`` is read from the file name (:func:`prompt_type`) and
    stored with every row (``settings``: prompt_type, release_file): the
    name is the only record of the prompt the answers were made with."""
    release = release or spec(name)
    base = folder(name, release)
    rows = []

    def add(model, path, fmt, records, letters, pattern):
        kind = prompt_type(pattern)
        records = [(label, {**rec, "settings": {"prompt_type": kind, "release_file": path.name}})
                   for label, rec in records]
        counts = importer.import_records(path, records, store, letters=letters)
        rows.append({"model": model, "file": path.name, "prompt_format": fmt, "prompt_type": kind,
                     **{k: counts[k] for k in ("read", "stored", "already_present", "parse_failures")}})

    letters = release.get("letters", "ABCD")
    prefix = release.get("item_prefix", "")
    if release.get("format") not in FORMATS:
        raise ReleaseError(paths.params("released.yaml"), name, "format",
                           f"must be one of {list(FORMATS)}, not {release.get('format')!r}")
    hive = release["format"] == "hive"
    if hive and condition is None:
        raise ValueError(f"release '{name}': pass condition (culture key, cue key) -> condition name")
    for model, part in release["models"].items():
        for pattern, fmt in release["answers"].items():
            path = base / pattern.format(file=part)
            if hive:
                recs = hive_records(path, model, fmt, condition, prefix, letters)
            else:
                recs = amqa_records(path, model, fields(release), fmt, prefix)
            add(model, path, fmt, recs, letters, pattern)
    for strategy, arm in (release.get("strategies") or {}).items():
        from medaudit.llm.mitigations import format_name

        for model, part in (arm.get("models") or {}).items():
            if model not in release["models"]:
                raise ReleaseError(paths.params("released.yaml"), name, f"strategies.{strategy}.models",
                                   f"{model!r} is not a model of the release: an arm belongs to a model above")
            for pattern, fmt in arm["answers"].items():
                path = base / pattern.format(file=part)
                full = format_name(fmt, strategy)
                recs = (hive_records(path, model, full, condition, prefix, letters) if hive
                        else amqa_records(path, model, fields(release), full, prefix))
                add(model, path, full, recs, letters, pattern)
    if hive and release.get("judge"):
        j = release["judge"]
        for model, part in j["files"].items():
            path = base / j["pattern"].format(file=part)
            add(j["name"], path, j["prompt_format"],
                hive_verdicts(path, j["name"], model, j["prompt_format"], j["judged_format"], condition, prefix),
                letters, j["pattern"])
    return pd.DataFrame(rows)


def prompt_type(pattern: str) -> str:
    """The prompt type a release's file pattern names after the model part:
    "AMQA_Benchmark_Answer_{file}_no_cot.jsonl" → "no_cot" (the authors'
    no_cot / cot1 / cot2 prompts), "Final_{file}_short_augment_answers.json"
    → "short_augment_answers", "Final_{file}_judge.json" → "judge"."""
    tail = pattern.partition("{file}")[2]
    return re.sub(r"\.[A-Za-z0-9]+$", "", tail).strip("_-.") or "unnamed"


def release_items(name: str, release: dict | None = None) -> pd.DataFrame:
    """The items of an external-benchmark release (AMQA): the gold letters
    of the first model's answer file (every file of the release is checked
    to agree: a disagreement names the file and line)."""
    release = release or spec(name)
    base = folder(name, release)
    prefix, letters = release.get("item_prefix", ""), release.get("letters", "ABCD")
    pattern = next(iter(release["answers"]))
    first = pd.DataFrame(columns=["item_id", "answer_idx", "options", "source"])   # a release with no model yet
    for n, part in enumerate((release.get("models") or {}).values()):
        path = base / pattern.format(file=part)
        items = amqa_items(path, prefix, letters)
        if n == 0:
            first = items
            continue
        merged = first.merge(items, on="item_id", how="outer", suffixes=("", "_other"), indicator=True)
        bad = merged[(merged["_merge"] != "both") | (merged["answer_idx"] != merged["answer_idx_other"])]
        if len(bad):
            raise ReleaseError(path, str(bad["item_id"].iloc[0]), "answer_idx",
                               "items or gold letters differ from the release's first file")
    return first


def authors_accuracy(name: str, release: dict | None = None, arms: bool = False) -> pd.DataFrame:
    """The authors' own per-variant accuracy (their Summary files), one row
    per model and condition: model, strategy (``none``: the plain answers),
    condition, correct, total, accuracy, the models in :func:`model_key`'s
    order; with ``arms``, each mitigation arm's Summary too (model: the
    model the arm is of). A model or arm released without its Summary file
    has no rows here (``python -m medaudit.released add`` says so when it
    adds one)."""
    release = release or spec(name)
    base = folder(name, release)
    key = model_key(name, release)
    types = summary_types(release)
    groups = [("none", release.get("summary"), release.get("models") or {})]
    if arms:
        groups += [(s, a.get("summary"), a.get("models") or {}) for s, a in (release.get("strategies") or {}).items()]
    parts = []
    for strategy, pattern, members in groups:
        if not pattern:
            continue
        for model, part in sorted(members.items(), key=lambda mp: key(str(mp[0]))):
            path = base / pattern.format(file=part)
            if path.exists():
                parts.append(amqa_summary(path, types).assign(model=str(model), strategy=strategy))
    cols = ["model", "strategy", "condition", "correct", "total", "accuracy"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def study_releases(notebook: str, names=None, path: str | Path | None = None) -> list[str]:
    """The release entries of ``params/released.yaml`` whose tables are in
    ``notebook`` (:data:`NOTEBOOKS` of their ``format``), in the file's
    order; with ``names`` (a profile's ``released_answers``), only those."""
    path = Path(path) if path else paths.params("released.yaml")
    specs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [n for n, r in specs.items() if isinstance(r, dict) and NOTEBOOKS.get(r.get("format")) == notebook
            and (names is None or n in names)]


def arm_strategies(names, path: str | Path | None = None) -> list[str]:
    """Every mitigation strategy that a release of ``names`` holds answers
    of (``strategies`` with at least one model), in the file's order: the
    arms notebook 08 shows whatever the profile's ``mitigation_arms``."""
    path = Path(path) if path else paths.params("released.yaml")
    specs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out = [s for n in names for s, a in ((specs.get(n) or {}).get("strategies") or {}).items()
           if (a or {}).get("models")]
    return list(dict.fromkeys(out))


def models(name: str, release: dict | None = None) -> list[str]:
    """The model names of release ``name`` (its ``models`` in
    ``params/released.yaml``), in :func:`model_key`'s order (never the order
    they were added in)."""
    release = release or spec(name)
    return sorted((str(m) for m in release.get("models") or {}), key=model_key(name, release))



# --------------------------------------------------------------------------
# one order for the models of every table


def model_key(name: str, release: dict | None = None) -> Callable[[str], tuple]:
    """The sort key of a model in the tables of release ``name``'s notebook:
    the paper's rows first, in the order the paper prints them
    (:func:`paper_models`); then the release's other models (added with
    ``--not-in-paper``), by name; then every other model (the profile's
    own), by name. The key never depends on the order in which models were
    added to ``params/released.yaml`` or their answers to a store, so that
    ``remove`` and ``add`` again give the same tables byte for byte."""
    release = release or spec(name)
    paper = {m: i for i, m in enumerate(paper_models(release))}
    ours = {str(m) for m in release.get("models") or {}}

    def key(model: str) -> tuple:
        model = str(model)
        if model in paper:
            return (0, paper[model], "")
        return (1 if model in ours else 2, 0, model.casefold() + "\0" + model)
    return key


def in_order(frame: pd.DataFrame, name: str, column: str = "model", group: str | None = None,
             release: dict | None = None) -> pd.DataFrame:
    """``frame``'s rows stably sorted by :func:`model_key` of ``column`` (the
    rows of one model keep their order); with ``group`` (e.g. ``strategy``
    of the arms' answers), first by the order in which ``group``'s values
    first appear, then by the model."""
    if frame.empty:
        return frame
    key = model_key(name, release)
    first = {v: i for i, v in enumerate(pd.unique(frame[group]))} if group else {}
    order = sorted(range(len(frame)), key=lambda i: ((first[frame[group].iat[i]],) if group else ())
                   + key(frame[column].iat[i]))
    return frame.iloc[order].reset_index(drop=True)


def paper_models(release: dict) -> list[str]:
    """The model names of the paper's rows for a release's study: the row
    labels of params/published.yaml's entries of its notebook, before " · ",
    in the order the paper prints them."""
    path = paths.params("published.yaml")
    return list(_paper_rows(NOTEBOOKS[release["format"]], str(path), path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _paper_rows(notebook: str, path: str, mtime_ns: int) -> tuple[str, ...]:
    """:func:`paper_models` of one notebook, read once per version of params/published.yaml."""
    from medaudit.publish import published

    names = [str(v).split(" · ")[0] for e in published.load(path) if e["notebook"] == notebook
             for v in (e.get("rows") or {}).values()]
    return tuple(dict.fromkeys(names))          # the paper's order (its first table that names each)


# --------------------------------------------------------------------------
# a release's own terms: its tables, named as its authors name things


def authors_terms(name: str, release: dict | None = None) -> dict[str, dict[str, str]]:
    """How release ``name``'s authors name what our tables name: ``models``
    (our row name → their file part), ``prompts`` (our strategy → their
    prompt part, ``layout.prompts`` read backwards), ``variants`` (our
    condition → their variant: the declared answer field after the common
    ``test_model_answer_`` stem) and ``question_id`` (a function: our item
    ids → theirs, which order their tables' vignettes, and so the draws of
    their seeded bootstrap)."""
    release = release or spec(name)
    prompts = {str(v): str(k) for k, v in ((release.get("layout") or {}).get("prompts") or {}).items()}
    fs = fields(release)
    stem = os.path.commonprefix(list(fs))
    prefix = release.get("item_prefix", "")

    def question_id(items: pd.Series) -> pd.Series:
        """Our item ids back to the file's ``question_id`` ("amqa-007" → "7"): the authors' own order of them."""
        return items.astype(str).str.removeprefix(prefix).astype(int).astype(str)

    return {"models": {str(m): str(p) for m, p in (release.get("models") or {}).items()}, "prompts": prompts,
            "variants": {c: f[len(stem):] for f, c in fs.items()}, "question_id": question_id}


def authors_tables(name: str, release: dict | None = None) -> dict[str, pd.DataFrame]:
    """The tables a release's authors published beside its answers
    (``tables``: {name: file under the release folder}, each checked against
    SHA256SUMS): FairMedPrompt's seven ``outputs/*.csv``."""
    release = release or spec(name)
    base = folder(name, release)
    out = {}
    for table, rel in (release.get("tables") or {}).items():
        path = base / rel
        verify(path)
        out[str(table)] = pd.read_csv(path)
    return out
