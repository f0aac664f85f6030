"""The maintainer's command line for the released answers: ``python -m medaudit.released``.

``add`` brings a new model's released files (or a mitigation arm of a model
already present) into ``data/raw/released_answers/`` and
``params/released.yaml`` in one checked step; ``remove`` undoes it; ``list``
shows what ``params/released.yaml`` holds (docs/released.md). This module
edits ``params/released.yaml`` as text (so its comments stay) and reads the
release through the library, :mod:`medaudit.released`, which the notebooks
read; the library never imports this module (``python -m medaudit.released``
runs the package's ``__main__``, which calls :func:`main` here).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import yaml

from .. import atomic, paths
from ..checksum import sha256_file
from medaudit.publish.published import FAR_ALPHA, distance
from medaudit.publish.published import mark_far as _mark_far
from medaudit.prep.data import DataError
from . import (FORMATS, NOTEBOOKS, ReleaseError, amqa_summary, authors_accuracy, folder, import_release,
               listed_digests, model_key, paper_models, prompt_type, release_items, spec, summary_check,
               summary_types)


# --------------------------------------------------------------------------
# list: what params/released.yaml holds


def _rows(path: Path) -> int | None:
    """Records of a release file: lines of a JSONL file, items of a JSON list (None: no such file)."""
    if not path.exists():
        return None
    if path.suffix == ".jsonl":
        return sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip())
    data = json.loads(path.read_text(encoding="utf-8"))
    return len(data) if isinstance(data, list) else 1


def listing(study: str | None = None, params_path: str | Path | None = None) -> pd.DataFrame:
    """What ``params/released.yaml`` holds, one row per model and answer
    file: study, model, strategy (``none``: the plain answers; else the
    mitigation arm), file, rows (vignettes or items in the file; –: the
    file is missing) and, where the release has the authors' Summary file,
    ``summary``: whether the answers' own counts equal it
    (:func:`summary_check`), models in :func:`model_key`'s order."""
    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    specs = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
    out = []
    for name, release in specs.items():
        if study not in (None, name):
            continue
        base = folder(name, release)
        key = model_key(name, release)
        arms = [("none", release.get("answers") or {}, release.get("summary"), release.get("models") or {})]
        arms += [(s, a.get("answers") or {}, a.get("summary"), a.get("models") or {})
                 for s, a in (release.get("strategies") or {}).items()]
        rows = []
        for s_no, (strategy, answers, summary, members) in enumerate(arms):
            for model, part in members.items():
                for pattern in answers:
                    path = base / pattern.format(file=part)
                    n = _rows(path)
                    note = ""
                    if summary and n is not None:
                        sp = base / summary.format(file=part)
                        if sp.exists():
                            check = summary_check(path, sp, release)
                            note = (f"equal in all {len(check)} texts" if check["equal"].all() else
                                    f"DIFFERS in {int((~check['equal']).sum())} of {len(check)} texts")
                        else:
                            note = "no Summary file"
                    rows.append({"study": name, "model": str(model), "strategy": strategy, "file": path.name,
                                 "rows": "–" if n is None else n, "summary": note, "_order": (key(str(model)), s_no)})
        out += sorted(rows, key=lambda r: r["_order"])
    return pd.DataFrame(out, columns=["study", "model", "strategy", "file", "rows", "summary", "_order"]).drop(
        columns="_order")


# --------------------------------------------------------------------------
# one step to add a model: python -m medaudit.released add FILES --study NAME --name MODEL


def _prefixes(release: dict) -> tuple[str, ...]:
    """The name prefixes a release's authors put before its patterns
    (``layout.prefixes``: FairMedPrompt's ``z_`` and ``Test_``); a file is
    then told apart by its content (its fields, its vignettes), not its name."""
    return tuple((release.get("layout") or {}).get("prefixes") or ("",))


def _pattern_regex(pattern: str, prefixes=("",), prompts=()) -> re.Pattern:
    """A file pattern (``{file}``: the model part; ``{prompt}``: one of
    ``prompts``, the layout's prompt parts, or any text without "_" when
    none are given) as a regular expression of the whole file name, after
    one of ``prefixes``."""
    alts = "|".join(re.escape(p) for p in sorted(prompts, key=len, reverse=True)) or r"[^_]+"
    rx = re.escape(pattern).replace(r"\{file\}", r"(?P<file>.+?)").replace(r"\{prompt\}", rf"(?P<prompt>{alts})")
    pre = "|".join(re.escape(p) for p in prefixes)
    return re.compile(rf"(?P<prefix>{pre}){rx}$")


def _match(files: list[Path], pattern: str, part: str | None, what: str, study: str,
           prefixes=("",)) -> tuple[Path, str] | None:
    """The one file among ``files`` that the release's ``pattern`` names
    (with file part ``part`` when given): (path, its file part). Several
    candidates without ``part`` is an error that lists them (never a guess)."""
    rx = _pattern_regex(pattern, prefixes)
    hits = [(f, m.group("file")) for f in files if (m := rx.match(f.name))]
    if part is not None:
        hits = [(f, p) for f, p in hits if p == part]
    if not hits:
        return None
    if len(hits) > 1:
        raise ReleaseError(hits[0][0].parent, study, what,
                           f"{len(hits)} files match {pattern} ({', '.join(f.name for f, _ in hits)}): name the file "
                           "part with --part / --judge-part, or give one file")
    return hits[0]


class _UserFiles:
    """Where each file ``add`` reads came from: a scratch copy or a member
    extracted from a zip is reported under the user's own file (an error in
    a throw-away copy names the file the user gave, never a temporary path)."""

    def __init__(self):
        self.origin: dict[str, str] = {}

    def note(self, path: Path, shown: str | Path) -> None:
        self.origin[str(path)] = str(shown)

    def shown(self, path: str | Path) -> str:
        return self.origin.get(str(path), str(path))

    def error(self, e: DataError) -> ReleaseError:
        """``e`` with its file (and any temporary path in its text) replaced by the user's file."""
        problem = e.problem
        for tmp, shown in sorted(self.origin.items(), key=lambda kv: -len(kv[0])):
            problem = problem.replace(tmp, shown)
        return ReleaseError(self.shown(e.file), e.record, e.field, problem)


def _hive_condition() -> Callable[[str, str], str]:
    from medaudit.studies.cultural import load_config          # the culture and cue keys of params/cultures.yaml

    return load_config().condition


def _sums_file(base: Path) -> tuple[Path, str]:
    """The SHA256SUMS that lists a release folder's files, and the prefix of
    its paths: the folder's own, else the one above (as :func:`verify` reads)."""
    own = base / "SHA256SUMS"
    if own.exists() or not (base.parent / "SHA256SUMS").exists():
        return own, ""
    return base.parent / "SHA256SUMS", base.name + "/"


def _flow_mapping(lines: list[str], path: Path, study: str, key_path: tuple[str, ...]) -> tuple[int, int, int]:
    """(line, start, end) of the inside of the one-line flow mapping
    ``key_path`` (``models``, or ``judge`` → ``files``) of entry ``study`` in
    the lines of ``params/released.yaml``."""
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"{study}:")), None)
    if start is None:
        raise ReleaseError(path, study, "(entry)", "not found")
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n", "#", "")), len(lines))
    i = start + 1
    for outer in key_path[:-1]:                       # the line that opens the outer mapping
        i = next((j for j in range(i, end) if re.match(rf"\s+{re.escape(outer)}:", lines[j])), end)
    key = key_path[-1]
    for j in range(i, end):
        m = re.search(rf"(?:^\s+|[{{,]\s*){re.escape(key)}:\s*\{{([^{{}}]*)\}}", lines[j])
        if m:
            return j, *m.span(1)
    raise ReleaseError(path, study, ".".join(key_path), "expected a one-line mapping {model: file part}")


def _yaml_add(text: str, path: Path, study: str, key_path: tuple[str, ...], name: str, part: str) -> str:
    """Add ``name: part`` to the one-line flow mapping ``key_path`` of entry
    ``study`` in the text of ``params/released.yaml``, keeping the file's
    comments; returns the new text."""
    lines = text.splitlines(keepends=True)
    j, a, b = _flow_mapping(lines, path, study, key_path)
    inner = lines[j][a:b].rstrip()
    entry = f"{_yaml_scalar(name)}: {_yaml_scalar(part)}"
    lines[j] = lines[j][:a] + (f"{inner}, {entry}" if inner.strip() else entry) + lines[j][b:]
    return "".join(lines)


def _yaml_remove(text: str, path: Path, study: str, key_path: tuple[str, ...], name: str) -> str | None:
    """The text without ``name``'s entry in the flow mapping ``key_path`` of
    entry ``study`` (every other entry as written); None when it has none."""
    lines = text.splitlines(keepends=True)
    j, a, b = _flow_mapping(lines, path, study, key_path)
    entries = [e.strip() for e in re.findall(r'(?:"[^"]*"|[^,])+', lines[j][a:b])]
    keep = [e for e in entries if e and next(iter((yaml.safe_load("{" + e + "}") or {None: 0}))) != name]
    if len(keep) == len([e for e in entries if e]):
        return None
    lines[j] = lines[j][:a] + ", ".join(keep) + lines[j][b:]
    return "".join(lines)


def _yaml_scalar(s: str) -> str:
    """``s`` as a YAML flow scalar (quoted when plain YAML would read it otherwise)."""
    plain = yaml.safe_load(f"k: {s}")
    return s if isinstance(plain, dict) and plain.get("k") == s and not re.search(r"[{},\[\]#:]", s) \
        else json.dumps(s)

def paper_comparison(pairs: pd.DataFrame, name: str, release: dict) -> pd.DataFrame:
    """A new model's headline numbers beside the paper's row of the same
    name: FairMedQA's Table 3 CFR and AD per
    counterfactual pair (``pairs``: :func:`medaudit.studies.fairmedqa.metrics.pair_table` of
    the model's answers, the paper's counting rule), one row per cell:
    seed_pair, measure, ours, paper, difference, n, se, z, far, as
    :func:`medaudit.publish.published.distance` defines them (the shipped files are
    at distance 0). Empty when the paper has no such row."""
    from medaudit.publish import published

    nb = NOTEBOOKS[release["format"]]
    entry = next((e for e in published.load() if e["notebook"] == nb and e["ours"] == "08_table3_pairs"), None)
    if entry is None or release["format"] != "amqa":
        return pd.DataFrame()
    cols = list(entry["columns"])
    paper = {(pair, measure): float(values[cols.index(measure)]) for label, values in entry["published"].items()
             for model, _, pair in [str(label).partition(" · ")] if model == name for measure in ("CFR", "AD")}
    return distance(pairs[pairs["model"] == name], paper)


def table1_comparison(frame: pd.DataFrame, name: str, release: dict) -> pd.DataFrame:
    """Seed 003's counterpart of :func:`paper_comparison`: a new model's
    Table I option accuracies (%, over the items of the file, an unparsed
    answer wrong; ``frame``: its imported answers) beside the paper's row
    of that name, the 11 accuracy cells (Orig., Neut., culture × cue), with
    the same distance and rule (binomial SE of ours, √2 for two runs).
    Empty when the paper has no such row."""
    from medaudit.publish import published

    entry = next((e for e in published.load() if e["ours"] == "07_table1_accuracy"), None)
    label = next((k for k, v in ((entry or {}).get("rows") or {}).items() if v == name), None)
    if label is None:
        return pd.DataFrame()
    cult = yaml.safe_load(paths.params("cultures.yaml").read_text(encoding="utf-8"))
    condition = _hive_condition()
    cols = {"Baselines · Orig.": "original", "Baselines · Neut.": "neutral"}
    cols |= {f"{c['label']} · {q['label']}": condition(t, k) for t, c in cult["cultures"].items()
             for k, q in cult["cues"].items()}
    prefix = release.get("item_prefix", "")
    questions = json.loads(paths.raw("cultural_cues_hive", "final_augment_test_questions.json").read_text("utf-8"))
    gold = {f"{prefix}{i:03d}": q.get("answer_idx") for i, q in enumerate(questions)}
    option = [f for f in release["answers"].values() if f in ("mcq_option", "mcq")]
    mine = frame[(frame["model"] == name) & frame["prompt_format"].isin(option)]
    rows = []
    for column, value in zip(entry["columns"], entry["published"][label]):
        g = mine[mine["condition"] == cols.get(column, "")]
        if column not in cols or g.empty:
            continue
        p, n = float((g["parsed_answer"] == g["item_id"].map(gold)).mean()), len(g)
        se = float(np.sqrt(2 * p * (1 - p) / n)) * 100
        diff = 100 * p - float(value)
        rows.append({"column": column, "ours": 100 * p, "paper": float(value), "difference": diff, "n": n, "se": se,
                     "z": diff / se if se > 0 else (0.0 if abs(diff) < 0.005 else float(np.inf * np.sign(diff)))})
    return _mark_far(pd.DataFrame(rows), "seed 003 Table I, option prompting")


def _paper_note(comp: pd.DataFrame, name: str) -> str:
    """The lines ``add`` prints for :func:`paper_comparison` / :func:`table1_comparison`."""
    crit = comp.attrs["critical z"]
    lines = [f"{name} against the paper's row ({comp.attrs['what']}; far: |z| > {crit:.2f}, "
             f"family-wise {FAR_ALPHA:g} over {len(comp)} cells):"]
    lines += [f"  {r['cell']}: ours {r['ours']:.4f}, paper {r['paper']:.4f}, difference "
              f"{r['difference']:+.4f} (n {r['n']}, z {r['z']:+.1f}){'  FAR' if r['far'] else ''}"
              for r in comp.to_dict("records")]
    far = comp[comp["far"]]
    worst = comp.loc[comp["z"].abs().idxmax()]
    lines.append(f"WARNING: FAR FROM THE PAPER'S ROW {name!r} in {len(far)} of {len(comp)} cells (largest: "
                 f"{worst['cell']} {worst['ours']:.4f} vs {worst['paper']:.4f}): is this "
                 "the model the paper measured? (otherwise add it under its own name with --not-in-paper)"
                 if len(far) else f"close to the paper's row {name!r} in all {len(comp)} cells")
    return "\n".join(lines)


def _check_name(name: str, release: dict, params_path: Path, study: str) -> None:
    """A --name outside the paper's rows is refused with the closest label (a
    misspelling would silently make the model "not in the paper")."""
    import difflib

    known = paper_models(release)
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f" ({', '.join(known)})"
    raise ReleaseError(params_path, study, "--name",
                       f"{name!r} is not a model of the paper's tables{hint} Pass --not-in-paper to add a model "
                       "the paper does not have (its rows are then marked 'not in the paper')")


def _given_files(files, users: _UserFiles | None = None, unpack: Path | None = None) -> list[Path]:
    """The files given to ``add``: each file, the files of each folder (and
    of its subfolders), and the members of each zip (unpacked into
    ``unpack``; macOS ``__MACOSX/`` entries skipped), each noted in
    ``users`` under the name the user knows it by (``Raw_Results.zip!Raw_Results/…``)."""
    import zipfile

    given = []
    for f in map(Path, files):
        if f.is_dir():
            given += sorted(p for p in f.rglob("*") if p.is_file() and "__MACOSX" not in p.parts
                            and not p.name.startswith("._"))
        elif f.is_file() and zipfile.is_zipfile(f):
            if unpack is None:
                raise ReleaseError(f, "(file)", "(zip)", "a zip is read by add only")
            with zipfile.ZipFile(f) as z:
                for m in z.infolist():
                    parts = Path(m.filename).parts
                    if m.is_dir() or "__MACOSX" in parts or Path(m.filename).name.startswith("._") \
                            or ".." in parts or Path(m.filename).is_absolute():
                        continue
                    out = Path(z.extract(m, unpack / f.name))
                    given.append(out)
                    if users is not None:
                        users.note(out, f"{f}!{m.filename}")
        elif f.is_file():
            given.append(f)
        else:
            raise ReleaseError(f, "(file)", "(file)", "does not exist")
    return given


def _stage(sources: list[tuple[Path, str]], base: Path, scratch: Path, users: _UserFiles | None = None) -> dict:
    """The given release files copied into ``scratch`` (made here) under the
    release's names for them (``(source, name)``: the pattern with the model's
    file part, so a prefixed ``z_…`` file is read where the release reads
    it) with a SHA256SUMS of their own, so that a trial import reads them as
    the release folder; a file the release's SHA256SUMS already lists with
    another digest is refused. Returns what :func:`_install` needs."""
    import shutil

    sums, prefix = _sums_file(base)
    listed = listed_digests(sums) if sums.exists() else {}
    scratch.mkdir(exist_ok=True)
    lines = []
    for src, name in sources:
        shutil.copy2(src, scratch / name)
        if users is not None:
            users.note(scratch / name, users.shown(src))
        digest = sha256_file(src)
        rel = prefix + name
        if rel in listed and listed[rel] != digest:
            raise ReleaseError(users.shown(src) if users else src, "(file)", "sha256",
                               f"{sums} lists it with {listed[rel]} (as {rel}), the given file is {digest}")
        lines.append((digest, src, name))
    (scratch / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for d, _, n in lines), encoding="utf-8")
    return {"sums": sums, "prefix": prefix, "listed": listed, "lines": lines}


def _install(staged: dict, base: Path) -> list[str]:
    """The staged files copied into the release folder (those not there
    yet) under the release's names, and their lines added to its
    SHA256SUMS (those not listed yet); returns the paths written."""
    import shutil

    written = []
    base.mkdir(parents=True, exist_ok=True)
    for _, src, name in staged["lines"]:
        if not (base / name).exists():
            shutil.copy2(src, base / name)
            written.append(str(base / name))
    sums, prefix = staged["sums"], staged["prefix"]
    new = [(d, n) for d, _, n in staged["lines"] if prefix + n not in staged["listed"]]
    if new:
        old = sums.read_text(encoding="utf-8") if sums.exists() else ""
        with open(sums, "a", encoding="utf-8") as fh:
            if old and not old.endswith("\n"):
                fh.write("\n")
            fh.writelines(f"{d}  {prefix}{n}\n" for d, n in new)
        written.append(str(sums))
    return written


def _trial(users: _UserFiles, run: Callable):
    """``run()``, with an error in a scratch copy reported under the user's file."""
    try:
        return run()
    except DataError as e:
        raise users.error(e) from None


def _vignette_count(path: Path) -> int:
    """The distinct question ids of a per-vignette answer file (its content: what a partial run is told by)."""
    ids = set()
    for ln in path.read_text(encoding="utf-8").splitlines():
        if ln.strip():
            try:
                ids.add(str(json.loads(ln).get("question_id")))
            except (json.JSONDecodeError, AttributeError):
                ids.add(ln)
    return len(ids)


def _expected_items(study: str, release: dict) -> int:
    """The vignettes a model's plain answers must cover: those of the
    release's models already there, else the declared ``layout.items``
    (0: not declared)."""
    if release.get("format") == "amqa" and release.get("models"):
        return len(release_items(study, release))
    return int((release.get("layout") or {}).get("items") or 0)


def _check_count(path: Path, shown: str, release: dict, what: str, want: int) -> None:
    """A model's plain answers must cover the release's vignettes
    (``want``, :func:`_expected_items`): a partial run (the authors'
    1- and 10-vignette ``Test_`` files, whatever their name) is refused,
    with both counts."""
    if not want:
        return
    got = _vignette_count(path)
    if got != int(want):
        raise ReleaseError(shown, "(file)", "question_id",
                           f"{got} vignettes, where the release's benchmark has {want}: a partial run (a test "
                           f"file?) is not {what}")


def add(files, study: str, name: str, part: str | None = None, judge_part: str | None = None,
        params_path: str | Path | None = None, dry_run: bool = False, not_in_paper: bool = False,
        users: _UserFiles | None = None) -> dict:
    """Add a model released in a format the study already reads, in one step.

    ``files``: the model's released files, or folders (or a zip) holding
    them. Matched against the study's file patterns of
    ``params/released.yaml`` (``answers``; for seed 003 also the judge's
    ``pattern``, for FairMedQA the authors' ``summary``; after one of the
    release's ``layout.prefixes``); ``part`` / ``judge_part`` pick the file
    part when several models' files are given. The files are checked by
    reading them with the format's converter (the fields the release
    declares) and importing them into a throw-away store (bad input: an
    error naming the user's file, record and field; nothing written); a
    per-vignette file must hold every vignette of the release
    (``layout.items``: a partial run is refused whatever its name). Then
    each file is copied into the release folder under the release's name
    for it (unless it is there), its line added to the ``SHA256SUMS`` that
    :func:`verify` reads, and the model added under every key the study
    needs: ``models`` and, with a judge file, ``judge.files`` (Table III
    reads it). ``name`` must be a model of the paper's tables for the study
    (:func:`paper_models`) unless ``not_in_paper``, which a paper row's name
    contradicts (refused). Returns what was found: per file the format,
    prompt type (from the release's name for it), items, conditions,
    records read and unparsed answers.
    """
    import tempfile

    from ..llm.store import ResponseStore

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    if release.get("format") not in FORMATS:
        raise ReleaseError(params_path, study, "format", f"must be one of {list(FORMATS)}")
    if not_in_paper and name in paper_models(release):
        raise ReleaseError(params_path, study, "--not-in-paper",
                           f"{name!r} is a row of the paper's tables: drop --not-in-paper (the file is then compared "
                           "with that row), or give the model a name of its own")
    if name in (release.get("models") or {}):
        raise ReleaseError(params_path, study, "models", f"already has a model named {name!r}")
    if not not_in_paper:
        _check_name(name, release, params_path, study)
    hive = release["format"] == "hive"
    prefixes = _prefixes(release)
    users = users or _UserFiles()
    with tempfile.TemporaryDirectory() as tmp:
        given = _given_files(files, users, Path(tmp) / "unpacked")
        found: dict[str, tuple[Path, str, str]] = {}          # role -> (path, file part, prompt format)
        for pattern, fmt in release["answers"].items():
            hit = _match(given, pattern, part, f"answers {pattern}", study, prefixes)
            if hit is None:
                raise ReleaseError(", ".join(users.shown(f) for f in given) or "(no file)", study, "answers",
                                   f"no file matches {pattern} (the release's answer files; after "
                                   f"{' or '.join(repr(p) for p in prefixes)})")
            found[pattern] = (*hit, fmt)
        parts = {p for _, p, _ in found.values()}
        if len(parts) > 1:
            raise ReleaseError(params_path, study, "answers", f"the answer files name different models "
                                                             f"{sorted(parts)}: pass --part")
        answer_part = parts.pop()
        if answer_part in {str(p) for p in release["models"].values()}:
            raise ReleaseError(params_path, study, "models", f"file part {answer_part!r} is already another model's")
        judge = release.get("judge") if hive else None
        if judge:
            hit = _match(given, judge["pattern"], judge_part, "judge pattern", study, prefixes)
            if hit:
                found["judge"] = (*hit, judge["prompt_format"])
        if not hive and release.get("summary"):
            hit = _match(given, release["summary"], answer_part, "summary", study, prefixes)
            if hit:
                found["summary"] = (*hit, "summary")
        names = {role: (release["summary"] if role == "summary" else judge["pattern"] if role == "judge" else role
                        ).format(file=p) for role, (_, p, _) in found.items()}
        if not hive:
            want = _expected_items(study, release)
            for pattern in release["answers"]:
                _check_count(found[pattern][0], users.shown(found[pattern][0]), release, f"{name}'s answers", want)
        base = folder(study, release)
        # check everything in a scratch copy before anything is written
        report, notes, summary_table, comparison = [], [], None, None
        scratch = Path(tmp) / base.name
        staged = _stage([(src, names[role]) for role, (src, _, _) in found.items()], base, scratch, users)
        trial = {**release, "folder": str(scratch), "models": {name: answer_part}, "strategies": {}}
        if judge:
            trial["judge"] = {**judge, "files": {name: found["judge"][1]}} if "judge" in found else None
        store = ResponseStore(Path(tmp) / "check.sqlite")
        condition = _hive_condition() if hive else None
        counts = _trial(users, lambda: import_release(study, store, condition, release=trial))
        frame = store.frame()
        if hive and not not_in_paper:     # the paper's row of this name: how far are the file's numbers from it?
            comparison = table1_comparison(frame, name, release)
            if len(comparison):
                notes.append(_paper_note(comparison, name))
        for row in counts.to_dict("records"):
            g = frame[(frame["model"] == row["model"]) & (frame["prompt_format"] == row["prompt_format"])]
            report.append({"file": users.shown(scratch / row["file"]), "prompt_format": row["prompt_format"],
                           "prompt_type": row["prompt_type"],
                           "items": int(g["item_id"].nunique()), "conditions": int(g["condition"].nunique()),
                           "records": int(row["read"]), "unparsed": int(row["parse_failures"])})
        if not hive:
            items = _trial(users, lambda: release_items(study, trial))
            if "summary" in found:
                authors = _trial(users, lambda: authors_accuracy(study, trial))
                report.append({"file": users.shown(found["summary"][0]), "prompt_format": "summary",
                               "prompt_type": prompt_type(release["summary"]),
                               "items": int(authors["total"].max()), "conditions": len(authors),
                               "records": len(authors), "unparsed": 0})
                summary_table = _trial(users, lambda: summary_check(
                    scratch / names[next(iter(release["answers"]))], scratch / names["summary"], release))
                notes.append(_summary_note(summary_table, name))
            known = release_items(study, release)
            if not not_in_paper:       # the paper's row of this name: how far are the file's numbers from it?
                from medaudit.stats import scoring
                from medaudit.studies.fairmedqa import answers as fq_answers
                from medaudit.studies.fairmedqa import config as fq_config
                from medaudit.studies.fairmedqa import metrics as fq_metrics

                fcfg = fq_config.load_config()
                formats = list(dict.fromkeys(release["answers"].values()))
                qt = scoring.question_table(fq_answers.stored_answers(frame, items, fcfg, prompt_formats=formats),
                                            items, units=("model",))
                comparison = paper_comparison(fq_metrics.pair_table(qt, fcfg.pairs, counting="paper",
                                                                    mcnemar="exact", unparsed="drop"), name, release)
                if len(comparison):
                    notes.append(_paper_note(comparison, name))
            if len(known) and set(items["item_id"]) != set(known["item_id"]):
                raise ReleaseError(users.shown(found[next(iter(release["answers"]))][0]), "(file)", "question_id",
                                   f"{len(set(items['item_id']) ^ set(known['item_id']))} items differ from the "
                                   f"release's other models")
        if dry_run:
            return {"model": name, "study": study, "file part": answer_part, "files": report, "written": [],
                    "notes": [n for n in notes if n], "summary check": summary_table, "paper": comparison}
        # the params edits first (in memory): an entry that cannot be edited stops before any file is written
        text = _yaml_add(params_path.read_text(encoding="utf-8"), params_path, study, ("models",), name, answer_part)
        if "judge" in found:
            text = _yaml_add(text, params_path, study, ("judge", "files"), name, found["judge"][1])
        check = (yaml.safe_load(text) or {}).get(study, {})
        if check.get("models", {}).get(name) != answer_part or (
                "judge" in found and check["judge"]["files"].get(name) != found["judge"][1]):
            raise ReleaseError(params_path, study, "models", "the edited file does not read back as intended")
        written = _install(staged, base)
        atomic.write_text(params_path, text)
        written.append(str(params_path))
        spec(study, params_path)                     # the edited file still reads
    if judge and "judge" not in found:
        notes.append(f"no judge file ({judge['pattern']}): Table III has no row for {name}; add it later with "
                     f"--judge-part once released")
    if not hive and release.get("summary") and "summary" not in found:
        notes.append(f"no Summary file ({release['summary']}): the check against the authors' own counts skips {name}")
    return {"model": name, "study": study, "file part": answer_part,
            "judge file part": found["judge"][1] if "judge" in found else None, "files": report, "written": written,
            "notes": [n for n in notes if n], "summary check": summary_table, "paper": comparison}


def _summary_note(check: pd.DataFrame, what: str) -> str:
    """The line saying whether an answer file's counts equal its Summary's:
    "Summary: equal …" or where they differ ("SUMMARY MISMATCH")."""
    bad = check[~check["equal"]]
    if bad.empty:
        return (f"Summary: {what}'s answers give the authors' own counts in all {len(check)} texts "
                f"(correct / total equal)")
    cells = "; ".join(f"{r['condition']}: {r['correct']} / {r['total']} vs {r['authors correct']} / "
                      f"{r['authors total']}" for r in bad.head(3).to_dict("records"))
    return (f"SUMMARY MISMATCH: {what}'s answers give other counts than its Summary file in {len(bad)} of "
            f"{len(check)} texts (ours vs the authors': {cells}{'; …' if len(bad) > 3 else ''}): are the two "
            "files of the same run?")


def _p(p: float) -> str:
    """A p-value for a message: two significant digits; one too small for a double, said so."""
    return f"{p:.2g}" if p > 0 else "< 1e-300"


def _arm_patterns(release: dict, params_path: Path, study: str, strategy: str) -> tuple[dict, str | None, bool]:
    """(answers patterns, summary pattern, already an entry) of ``strategy``'s
    arm in a release: its ``strategies.<strategy>`` entry of
    ``params/released.yaml``; for an arm the file has no entry for, the
    FairMedQA authors' own naming (their files name the ``format_prompt``
    they were made with, ``…_no_cot.jsonl`` / ``…_cot2.jsonl``: the plain
    patterns with ``no_cot`` replaced by the strategy)."""
    arm = (release.get("strategies") or {}).get(strategy)
    if arm:
        return dict(arm["answers"]), arm.get("summary"), True
    plain = dict(release["answers"])
    if release.get("format") != "amqa" or not all("no_cot" in p for p in plain):
        raise ReleaseError(params_path, study, f"strategies.{strategy}",
                           "no entry for this arm and no naming rule to derive its file patterns from: add "
                           f"strategies: {{{strategy}: {{models: {{}}, answers: {{PATTERN: FORMAT}}}}}} to the entry")
    summary = release.get("summary")
    return ({p.replace("no_cot", strategy): f for p, f in plain.items()},
            summary.replace("no_cot", strategy) if summary and "no_cot" in summary else None, False)


WRITTEN = "   # written by: python -m medaudit.released add --strategy (remove takes it away again)"


def _yaml_drop_written_arm(text: str, study: str, strategy: str) -> str:
    """The text without the ``strategies.<strategy>`` block of entry
    ``study`` when :func:`_yaml_add_arm` wrote it (its line carries
    :data:`WRITTEN`) and it holds no model any more, and without the
    ``strategies`` key too when that was written so and is left empty: what
    ``add --strategy`` wrote, ``remove`` takes away, byte for byte."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"{study}:")), None)
    if start is None:
        return text
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n", "#", "")), len(lines))
    head = next((i for i in range(start + 1, end) if re.match(r"  strategies:", lines[i])), None)
    at = next((i for i in range(start + 1, end) if lines[i].rstrip("\n") == f"    {strategy}:{WRITTEN}"), None)
    if head is None or at is None:
        return text
    stop = next((i for i in range(at + 1, end) if len(lines[i]) - len(lines[i].lstrip(" ")) <= 4
                 and lines[i].strip()), end)
    while stop > at + 1 and not lines[stop - 1].strip():      # the blank lines after it are not its own
        stop -= 1
    block = yaml.safe_load("".join(ln[6:] for ln in lines[at + 1:stop])) or {}
    if block.get("models"):
        return text
    del lines[at:stop]
    nxt = lines[head + 1] if head + 1 < len(lines) else ""
    if lines[head].rstrip("\n") == f"  strategies:{WRITTEN}" and not nxt.startswith("    "):
        del lines[head]
    return "".join(lines)


def _yaml_add_arm(text: str, path: Path, study: str, strategy: str, name: str, part: str, answers: dict,
                  summary: str | None) -> str:
    """The text of ``params/released.yaml`` with a new arm entry
    ``strategies.<strategy>`` (``models: {name: part}``, its patterns) in
    entry ``study``, the file's comments kept; a ``strategies`` key is
    added when the entry has none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"{study}:")), None)
    if start is None:
        raise ReleaseError(path, study, "(entry)", "not found")
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n", "#", "")), len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    block = [f"    {strategy}:{WRITTEN}\n", f"      models: {{{_yaml_scalar(name)}: {_yaml_scalar(part)}}}\n",
             "      answers: {" + ", ".join(f"{json.dumps(p)}: {_yaml_scalar(f)}" for p, f in answers.items()) + "}\n"]
    if summary:
        block.append(f"      summary: {json.dumps(summary)}\n")
    at = next((i for i in range(start + 1, end) if re.match(r"  strategies:\s*(#.*)?$", lines[i])), None)
    if at is None:
        if lines[end - 1] and not lines[end - 1].endswith("\n"):
            lines[end - 1] += "\n"
        lines[end:end] = [f"  strategies:{WRITTEN}\n", *block]
    else:
        lines[at + 1:at + 1] = block
    return "".join(lines)


def add_arm(files, study: str, name: str, strategy: str, part: str | None = None,
            params_path: str | Path | None = None, dry_run: bool = False, users: _UserFiles | None = None) -> dict:
    """Add a released mitigation arm (``strategy`` of ``params/mitigations.yaml``,
    e.g. the FairMedQA authors' ``cot2``) of a model the release already has.

    The files are matched against the arm's patterns (:func:`_arm_patterns`;
    by default with the model's own file part), read, and imported into a
    throw-away store as :func:`add` does (bad input: an error naming the
    user's file, record and field; nothing written). Reported beside the
    files: how many of the release's vignettes the arm answers (a partial
    file is counted and said, never aligned silently: the tables pair only
    the vignettes both arms answer), the check against the arm's Summary
    file (equal or "SUMMARY MISMATCH"), and the extraction-artefact check of
    :func:`medaudit.llm.mitigations.letter_artefact` (the arm's letters on the
    original vignettes against the same model's plain answers and the gold
    letters) that notebook 08 repeats on every table the arm reaches.
    Then the files are copied into the release folder, listed in its
    ``SHA256SUMS``, and the model added under ``strategies.<strategy>.models``
    (the entry written first when the file has none). With ``dry_run`` the
    model need not be added yet: its plain answers, given among ``files``,
    are read from there for the check."""
    import tempfile

    from medaudit.llm import mitigations
    from medaudit.studies.fairmedqa.arms import artefact_verdict
    from medaudit.studies.fairmedqa.config import ORIGINAL
    from ..llm.store import ResponseStore

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    present = name in (release.get("models") or {})
    if not present and not dry_run:
        raise ReleaseError(params_path, study, "--name",
                           f"{name!r} is not a model of the release ({', '.join(release.get('models') or {})}): an "
                           "arm belongs to a model already present (add the model's plain answers first; a "
                           "--dry-run of the arm reads them from the files given with it)")
    try:
        mitigations.default().get(strategy)
    except mitigations.MitigationError as e:
        raise ReleaseError(params_path, study, "--strategy", str(e)) from None
    if strategy == mitigations.NONE:
        raise ReleaseError(params_path, study, "--strategy", "'none' is the plain prompt: add it without --strategy")
    answers, summary, listed_arm = _arm_patterns(release, params_path, study, strategy)
    if name in ((release.get("strategies") or {}).get(strategy, {}).get("models") or {}):
        raise ReleaseError(params_path, study, f"strategies.{strategy}.models", f"already has {name!r}")
    prefixes = _prefixes(release)
    users = users or _UserFiles()
    hive = release["format"] == "hive"
    with tempfile.TemporaryDirectory() as tmp:
        given = _given_files(files, users, Path(tmp) / "unpacked")
        want = part if part is not None else str(release["models"][name]) if present else None
        found: dict[str, tuple[Path, str, str]] = {}
        for pattern, fmt in answers.items():
            hit = _match(given, pattern, want, f"strategies.{strategy}.answers {pattern}", study, prefixes)
            if hit is None:
                raise ReleaseError(", ".join(users.shown(f) for f in given) or "(no file)", study,
                                   f"strategies.{strategy}.answers",
                                   f"no file with file part {want!r} matches {pattern} (after "
                                   f"{' or '.join(repr(p) for p in prefixes)})"
                                   + ("" if part else "; pass --part when the arm's files name the model otherwise"))
            found[pattern] = (*hit, fmt)
            want = hit[1]
        if summary and (hit := _match(given, summary, want, "summary", study, prefixes)):
            found["summary"] = (*hit, "summary")
        names = {role: (summary if role == "summary" else role).format(file=want) for role in found}
        plain_part = str(release["models"][name]) if present else want
        if not present:                            # a dry run before the model: its plain answers among the files
            for pattern in release["answers"]:
                hit = _match(given, pattern, plain_part, f"answers {pattern}", study, prefixes)
                if hit is None:
                    raise ReleaseError(params_path, study, "--name",
                                       f"{name!r} is not a model of the release yet: give its plain answers "
                                       f"({pattern.format(file=plain_part)}) with the arm for a dry run, or add "
                                       "them first")
                found["plain " + pattern] = (*hit, release["answers"][pattern])
                names["plain " + pattern] = pattern.format(file=plain_part)
                if not hive:
                    _check_count(hit[0], users.shown(hit[0]), release, f"{name}'s plain answers",
                                 _expected_items(study, release))
        base = folder(study, release)
        scratch = Path(tmp) / base.name
        staged = _stage([(src, names[role]) for role, (src, _, _) in found.items()], base, scratch, users)
        arm = {"models": {name: want}, "answers": {p: f for p, (_, _, f) in found.items()
                                                   if p != "summary" and not p.startswith("plain ")}}
        trial = {**release, "folder": str(scratch), "models": {name: plain_part}, "answers": {},
                 "strategies": {strategy: arm}, "judge": None}
        store = ResponseStore(Path(tmp) / "check.sqlite")
        condition = _hive_condition() if hive else None
        counts = _trial(users, lambda: import_release(study, store, condition, release=trial))
        plain_release = ({**release, "models": {name: plain_part}, "strategies": {}, "judge": None} if present else
                         {**release, "folder": str(scratch), "models": {name: plain_part}, "strategies": {},
                          "judge": None})
        _trial(users, lambda: import_release(study, store, condition, release=plain_release))   # its plain answers
        frame = store.frame()
        known = None
        if not hive:
            known = release_items(study, release)
            if not len(known):
                known = _trial(users, lambda: release_items(study, plain_release))
        report = []
        for row in counts.to_dict("records"):
            g = frame[(frame["model"] == name) & (frame["prompt_format"] == row["prompt_format"])]
            report.append({"file": users.shown(scratch / row["file"]), "prompt_format": row["prompt_format"],
                           "prompt_type": row["prompt_type"], "items": int(g["item_id"].nunique()),
                           "conditions": int(g["condition"].nunique()), "records": int(row["read"]),
                           "unparsed": int(row["parse_failures"])})
        notes, artefact = [], None
        first = found[next(iter(answers))][0]
        if known is not None:
            arm_items = set(frame.loc[frame["prompt_format"].isin([r["prompt_format"] for r in report]), "item_id"])
            if stray := sorted(arm_items - set(known["item_id"])):
                raise ReleaseError(users.shown(first), "(file)", "question_id",
                                   f"{len(stray)} vignettes the release does not have (e.g. {stray[0]})")
            if len(arm_items) < len(known):
                notes.append(f"partial file: the arm answers {len(arm_items)} of the release's {len(known)} "
                             "vignettes; the tables pair only the vignettes both the plain answers and the arm have")
            original = ORIGINAL
            fmt = next(r["prompt_format"] for r in report)
            letters = frame[frame["condition"] == original].set_index(["prompt_format", "item_id"])["parsed_answer"]
            alpha = mitigations.default().artefact_alpha
            artefact = mitigations.letter_artefact(
                letters.xs(fmt), letters.xs(mitigations.split_format(fmt)[0]),
                known.set_index("item_id")["answer_idx"], release.get("letters", "ABCD"), alpha)
            artefact["verdict"], artefact["smallest p"] = artefact_verdict(artefact, alpha)
            if artefact["verdict"].startswith("cannot tell"):
                notes.append(f"extraction artefact check: {artefact['verdict']}; it is no evidence either way. The "
                             "arm is added; notebook 08 marks it on every table it reaches")
            if artefact["flag"]:
                notes.append(f"extraction artefact suspected ({artefact['test']}): the arm's letters on the original "
                             f"vignettes ({artefact['arm letters']}) depart from {name}'s plain answers "
                             f"({artefact['reference letters']}; p {_p(artefact['p vs reference'])}) and from the gold "
                             f"letters ({artefact['gold letters']}; p {_p(artefact['p vs gold'])}). The arm is added; "
                             "notebook 08 flags it on every table it reaches")
        summary_table = None
        if "summary" in found:       # read from the checked scratch copy: the user's folder needs no SHA256SUMS
            authors = _trial(users, lambda: amqa_summary(scratch / names["summary"], summary_types(release)))
            report.append({"file": users.shown(found["summary"][0]), "prompt_format": "summary",
                           "prompt_type": prompt_type(summary), "items": int(authors["total"].max()),
                           "conditions": len(authors), "records": len(authors), "unparsed": 0})
            summary_table = _trial(users, lambda: summary_check(scratch / names[next(iter(answers))],
                                                                scratch / names["summary"], release))
            notes.append(_summary_note(summary_table, f"{name}'s {strategy} arm"))
        elif summary:
            notes.append(f"no Summary file ({summary}): the check against the authors' own counts skips this arm")
        result = {"model": name, "study": study, "strategy": strategy, "file part": want, "files": report,
                  "artefact": artefact, "summary check": summary_table, "notes": notes, "written": []}
        if dry_run:
            return result
        staged["lines"] = [ln for ln in staged["lines"] if not any(
            ln[2] == names[r] for r in found if r.startswith("plain "))]
        text = params_path.read_text(encoding="utf-8")
        text = (_yaml_add(text, params_path, study, ("strategies", strategy, "models"), name, want) if listed_arm
                else _yaml_add_arm(text, params_path, study, strategy, name, want, arm["answers"],
                                   summary if "summary" in found else None))
        check = ((yaml.safe_load(text) or {}).get(study, {}).get("strategies") or {}).get(strategy) or {}
        if (check.get("models") or {}).get(name) != want or dict(check.get("answers") or {}) != answers:
            raise ReleaseError(params_path, study, f"strategies.{strategy}", "the edited file does not read back "
                                                                             "as intended")
        result["written"] += _install(staged, base)
        atomic.write_text(params_path, text)
        result["written"].append(str(params_path))
        spec(study, params_path)
    return result


def add_all(files, study: str, params_path: str | Path | None = None, dry_run: bool = False,
            names: dict[str, str] | None = None) -> dict:
    """Add every model and arm of a release's folder (or zip), as released, in one step.

    Each file is read by the release's ``layout`` (``params/released.yaml``):
    its answer or Summary pattern gives the model's file part ``{file}`` and
    the prompt part ``{prompt}``, which ``layout.prompts`` maps to a
    strategy (``none``: the model's plain answers; else a mitigation arm).
    A file part becomes the model ``layout.names`` (or ``names``) gives it;
    a part with no name is left out and said (add it alone: ``--name NAME
    --not-in-paper``). Of several files for one model and prompt (the
    authors' ``Test_`` runs beside the full ones), the one holding every
    vignette (``layout.items``) is taken and the others are left out, by
    their content; a partial file alone is left out too (``add --strategy``
    takes a partial arm on purpose). Then per model :func:`add` (its plain
    answers and Summary; under a paper row's name compared with it) and
    :func:`add_arm` for each arm, so every check of a single add runs.
    Returns {"added": [results of add / add_arm], "skipped": [(file, why)]}."""
    import tempfile

    from medaudit.llm import mitigations

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    layout = release.get("layout")
    if not layout or "{file}" not in str(layout.get("answers", "")):
        raise ReleaseError(params_path, study, "layout", "declare the release's layout (answers: a pattern with "
                                                         "{file} and {prompt}; prompts; names) to add a folder")
    prompts = {str(k): str(v) for k, v in (layout.get("prompts") or {}).items()}
    plain = [k for k, v in prompts.items() if v == mitigations.NONE]
    if "{prompt}" in layout["answers"] and len(plain) != 1:
        raise ReleaseError(params_path, study, "layout.prompts", "name exactly one prompt part of the plain answers "
                                                                 "(strategy none)")
    names = {**{str(k): str(v) for k, v in (layout.get("names") or {}).items()}, **(names or {})}
    want = _expected_items(study, release)
    prefixes = _prefixes(release)
    rx = {"answers": _pattern_regex(layout["answers"], prefixes, prompts)}
    if layout.get("summary"):
        rx["summary"] = _pattern_regex(layout["summary"], prefixes, prompts)
    if not dry_run:           # every model and arm checked first: one that fails stops the add before any is written
        add_all(files, study, params_path, dry_run=True, names=names)
    users = _UserFiles()
    skipped: list[tuple[str, str]] = []
    added: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        given = _given_files(files, users, Path(tmp) / "unpacked")
        groups: dict[tuple[str, str], dict[str, list[Path]]] = {}
        for f in given:
            m = next(((role, m) for role, r in rx.items() if (m := r.match(f.name))), None)
            if m is None:
                if f.name != "SHA256SUMS":
                    skipped.append((users.shown(f), f"not a file of the release's layout ({layout['answers']})"))
                continue
            role, m = m
            prompt = m.groupdict().get("prompt") or (plain[0] if plain else mitigations.NONE)
            if prompt not in prompts:
                skipped.append((users.shown(f), f"prompt part {prompt!r} is not one of layout.prompts "
                                                f"({', '.join(prompts)})"))
                continue
            groups.setdefault((m.group("file"), prompt), {}).setdefault(role, []).append(f)
        chosen: dict[str, dict[str, list[Path]]] = {}
        for (part, prompt), roles in groups.items():
            full = [f for f in roles.get("answers", []) if not want or _vignette_count(f) == want]
            for f in roles.get("answers", []):
                if f not in full:
                    skipped.append((users.shown(f), f"a partial run: {_vignette_count(f)} of the release's {want} "
                                                    "vignettes (add it alone with --strategy to take it as an arm)"))
            if len(full) != 1:
                if len(full) > 1:
                    skipped += [(users.shown(f), f"{len(full)} full answer files for {part} {prompt}: give one")
                                for f in full]
                skipped += [(users.shown(f), f"its answers ({part}, {prompt}) are not taken")
                            for f in roles.get("summary", [])]
                continue
            # the Summary of the same run: the one whose name has the taken answers' prefix
            prefix = rx["answers"].match(full[0].name).group("prefix")
            summ = [f for f in roles.get("summary", []) if rx["summary"].match(f.name).group("prefix") == prefix]
            skipped += [(users.shown(f), "a Summary of another run (its answers are not taken)")
                        for f in roles.get("summary", []) if f not in summ]
            chosen.setdefault(part, {})[prompt] = full + summ
        for part, by_prompt in sorted(chosen.items()):
            name = names.get(part)
            if name is None:
                skipped += [(users.shown(f), f"file part {part!r} has no row name (layout.names): add it alone with "
                                             "--name NAME (--not-in-paper for a model the paper does not have)")
                            for fs in by_prompt.values() for f in fs]
                continue
            base_prompt = plain[0] if plain else None
            current = spec(study, params_path)
            if name not in (current.get("models") or {}):
                if base_prompt not in by_prompt:
                    skipped += [(users.shown(f), f"no plain answers of {name} ({base_prompt}): its arms need them")
                                for fs in by_prompt.values() for f in fs]
                    continue
                added.append(add(by_prompt[base_prompt], study, name, part=part, params_path=params_path,
                                 dry_run=dry_run, not_in_paper=name not in paper_models(release), users=users))
            for prompt, fs in by_prompt.items():
                strategy = prompts[prompt]
                if strategy == mitigations.NONE:
                    continue
                arm = ((spec(study, params_path).get("strategies") or {}).get(strategy) or {})
                if name in (arm.get("models") or {}):
                    skipped += [(users.shown(f), f"{name}'s {strategy} arm is already there") for f in fs]
                    continue
                extra = by_prompt.get(base_prompt, []) if dry_run else []
                added.append(add_arm(fs + extra, study, name, strategy, part=part, params_path=params_path,
                                     dry_run=dry_run, users=users))
    return {"study": study, "added": added, "skipped": skipped, "dry_run": dry_run}


def remove(study: str, name: str, params_path: str | Path | None = None, stores=None) -> dict:
    """Undo :func:`add`: ``name`` leaves ``params/released.yaml`` (``models``,
    ``judge.files`` and its arms under ``strategies``; the file's comments
    and other entries as written)
    and its imported answers, with the imported verdicts on them, leave the
    response stores (``stores``: paths; default every
    ``outputs/<profile>/data/responses.sqlite``), so no table reads them
    again. The release's files stay in ``data/raw`` and its SHA256SUMS (code
    never deletes raw data): ``add`` with the same files restores the model.
    Returns {"model", "study", "written", "stores": {path: rows removed}}."""
    from ..llm.store import ResponseStore

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    if name not in (release.get("models") or {}):
        raise ReleaseError(params_path, study, "models", f"has no model named {name!r} "
                                                         f"({', '.join(release.get('models') or {})})")
    text = _yaml_remove(params_path.read_text(encoding="utf-8"), params_path, study, ("models",), name)
    if name in ((release.get("judge") or {}).get("files") or {}):
        text = _yaml_remove(text, params_path, study, ("judge", "files"), name)
    for strategy, arm in (release.get("strategies") or {}).items():   # its mitigation arms go with it
        if name in (arm.get("models") or {}):
            text = _yaml_remove(text, params_path, study, ("strategies", strategy, "models"), name)
            text = _yaml_drop_written_arm(text, study, strategy)
    check = (yaml.safe_load(text) or {}).get(study, {})
    if name in check.get("models", {}) or name in ((check.get("judge") or {}).get("files") or {}) or any(
            name in (a.get("models") or {}) for a in (check.get("strategies") or {}).values()):
        raise ReleaseError(params_path, study, "models", "the edited file does not read back as intended")
    atomic.write_text(params_path, text)
    spec(study, params_path)
    if stores is None:
        stores = sorted(paths.project_root().glob("outputs/*/data/responses.sqlite"))
    removed = {}
    for p in map(Path, stores):
        with ResponseStore(p) as st:
            removed[str(p)] = st.delete_imported(name)
    return {"model": name, "study": study, "written": [str(params_path)], "stores": removed}


def remove_arm(study: str, name: str, strategy: str, params_path: str | Path | None = None, stores=None) -> dict:
    """Undo :func:`add_arm`: ``name`` leaves ``strategies.<strategy>.models``
    of ``params/released.yaml`` (the arm's whole entry too when ``add
    --strategy`` wrote it and no model is left in it: the file is then as
    it was before the add, byte for byte) and the arm's imported answers
    (its ``<format>+<strategy>`` rows, with any verdicts on them) leave the
    response stores (default: every ``outputs/<profile>/data/responses.sqlite``);
    the model's plain answers and other arms stay. The files stay in
    ``data/raw`` and its SHA256SUMS. Returns {"model", "study", "strategy",
    "written", "stores": {path: rows removed}}."""
    from ..llm.store import ResponseStore
    from medaudit.llm.mitigations import format_name

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    arms = release.get("strategies") or {}
    if strategy not in arms:
        raise ReleaseError(params_path, study, "--strategy", f"no arm {strategy!r} (arms: {', '.join(arms) or 'none'})")
    arm = arms[strategy]
    if name not in (arm.get("models") or {}):
        raise ReleaseError(params_path, study, f"strategies.{strategy}.models",
                           f"has no model named {name!r} ({', '.join(arm.get('models') or {}) or 'none'})")
    text = _yaml_remove(params_path.read_text(encoding="utf-8"), params_path, study,
                        ("strategies", strategy, "models"), name)
    text = _yaml_drop_written_arm(text, study, strategy)
    left = ((yaml.safe_load(text) or {}).get(study, {}).get("strategies") or {}).get(strategy) or {}
    if name in (left.get("models") or {}):
        raise ReleaseError(params_path, study, f"strategies.{strategy}",
                           "the edited file does not read back as intended")
    atomic.write_text(params_path, text)
    spec(study, params_path)
    formats = [format_name(f, strategy) for f in arm["answers"].values()]
    if stores is None:
        stores = sorted(paths.project_root().glob("outputs/*/data/responses.sqlite"))
    removed = {}
    for p in map(Path, stores):
        with ResponseStore(p) as st:
            removed[str(p)] = st.delete_imported(name, formats)
    return {"model": name, "study": study, "strategy": strategy, "written": [str(params_path)], "stores": removed}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m medaudit.released",
                                 description="Released answers of real models (params/released.yaml).")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add", help="add a model released in a format the study already reads",
                       description=add.__doc__.split("\n\n")[0])
    a.add_argument("files", nargs="+", help="the model's released files, or a folder holding them")
    a.add_argument("--study", required=True, help="the release entry of params/released.yaml "
                                                  "(cultural_cues_hive, fairmedqa_amqa)")
    a.add_argument("--name", help="the model's name in our tables (e.g. MedGemma-27B); without it, every model and "
                                  "arm of the folder or zip, named by the release's layout (layout.names)")
    a.add_argument("--part", help="the file part of its answer files, when files of several models are given")
    a.add_argument("--judge-part", help="the file part of its judge file (seed 003), when several are given")
    a.add_argument("--dry-run", action="store_true", help="check and report; write nothing")
    a.add_argument("--not-in-paper", action="store_true",
                   help="the model is not one of the paper's rows (else --name must be one; a misspelling is refused)")
    a.add_argument("--strategy", help="the files are a mitigation arm (params/mitigations.yaml, e.g. cot2) of --name, "
                                      "a model the release already has: checked, counted and tested for an "
                                      "extraction artefact, then added under strategies.<strategy>")
    r = sub.add_parser("remove", help="take an added model out of params/released.yaml and the response stores",
                       description=remove.__doc__.split("\n\n")[0])
    r.add_argument("--study", required=True, help="the release entry of params/released.yaml")
    r.add_argument("--name", required=True, help="the model's name in our tables")
    r.add_argument("--strategy",
                   help="remove only this mitigation arm of the model (e.g. cot2); its plain answers stay")
    s = sub.add_parser("list", help="the models of each release: per model its plain answers and each arm "
                                    "(strategy, file, rows, the check against the authors' Summary)")
    s.add_argument("--study", help="one release entry only")
    args = ap.parse_args(argv)
    try:
        if args.command == "list":
            table = listing(args.study)
            for study, g in table.groupby("study", sort=False):
                print(f"{study}:")
                print(g.drop(columns="study").to_string(index=False))
            return 0
        if args.command == "remove":
            res = (remove_arm(args.study, args.name, args.strategy) if args.strategy
                   else remove(args.study, args.name))
            for w in res["written"]:
                print(f"written: {w}")
            for p, n in res["stores"].items():
                print(f"removed {n} rows from {p}")
            print(f"{res['model']}'s release files stay in {folder(args.study)} (raw data is never deleted)")
            return 0
        if args.command == "add" and not args.name:
            if args.strategy or args.part or args.judge_part or args.not_in_paper:
                raise ReleaseError(paths.params("released.yaml"), args.study, "--name",
                                   "--strategy, --part, --judge-part and --not-in-paper are for one model: give --name")
            return _print_all(add_all(args.files, args.study, dry_run=args.dry_run))
        if args.strategy:
            if args.judge_part or args.not_in_paper:
                raise ReleaseError(paths.params("released.yaml"), args.study, "--strategy",
                                   "an arm takes neither --judge-part nor --not-in-paper "
                                   "(its model is already present)")
            res = add_arm(args.files, args.study, args.name, args.strategy, args.part, dry_run=args.dry_run)
        else:
            res = add(args.files, args.study, args.name, args.part, args.judge_part, dry_run=args.dry_run,
                      not_in_paper=args.not_in_paper)
    except (ReleaseError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    _print_one(res)
    return _print_outcome(res)


def _print_one(res: dict) -> None:
    """The head of an ``add``'s report, a model's or an arm's: its files and, for an arm, the artefact check."""
    if res.get("strategy"):
        print(f"{res['model']}, arm {res['strategy']} ({res['study']}, file part {res['file part']}):")
        print(pd.DataFrame(res["files"]).to_string(index=False))
        if res["artefact"] is not None:
            a = res["artefact"]
            print(f"extraction artefact check on {a['compared']} original vignettes ({a['test']}): p vs plain answers "
                  f"{_p(a['p vs reference'])}, p vs gold {_p(a['p vs gold'])} -> "
                  + ("SUSPECTED" if a["flag"] else a["verdict"]))
        return
    print(f"{res['model']} ({res['study']}, file part {res['file part']}"
          + (f", judge file part {res['judge file part']}" if res.get("judge file part") else "") + "):")
    print(pd.DataFrame(res["files"]).to_string(index=False))


def _print_all(res: dict) -> int:
    """:func:`add_all`'s report: each model's and arm's, then the files left out and why."""
    for r in res["added"]:
        _print_one(r)
        for n in r["notes"]:
            print(n)
        print()
    kinds: dict[str, list[str]] = {}
    for f, why in res["skipped"]:            # one line per reason (a partial run's count kept in its reason)
        kinds.setdefault(re.sub(r"^a partial run: \d+ of", "a partial run: fewer than", why), []).append(f)
    for why, fs in kinds.items():
        shown = ", ".join(Path(f.split("!")[-1]).name for f in fs[:4]) + (f", … ({len(fs)} files)" if len(fs) > 4
                                                                           else "")
        print(f"left out: {shown}: {why}")
    written = sorted({w for r in res["added"] for w in r["written"]})
    for w in written:
        print(f"written: {w}")
    models = list(dict.fromkeys(r["model"] for r in res["added"] if not r.get("strategy")))
    arms = [f"{r['model']} · {r['strategy']}" for r in res["added"] if r.get("strategy")]
    print(f"{len(models)} models ({', '.join(models) or 'none'}) and {len(arms)} arms "
          + ("checked; nothing written (--dry-run)" if res["dry_run"] else "added" if written
             else "to add: nothing new")
          + ("" if not arms else "; notebook 08 shows every released arm (make released)"))
    return 0


def _print_outcome(res: dict) -> int:
    """The end of an ``add``'s report, a model's or an arm's: its notes and what it wrote (or that it wrote nothing)."""
    for n in res["notes"]:
        print(n)
    for w in res["written"]:
        print(f"written: {w}")
    if not res["written"]:
        print("nothing written (--dry-run)")
    return 0
