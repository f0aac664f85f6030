"""``python -m medaudit.released add FILES --study NAME --name MODEL``: one model's released files
matched to the release's patterns, staged, checked against the release (counts, the authors' Summary,
the paper's numbers) and installed with ``params/released.yaml`` edited as text, in one step.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import yaml

from medaudit import atomic, paths
from medaudit.checksum import sha256_file
from medaudit.stats.distance import FAR_ALPHA, distance
from medaudit.stats.distance import mark_far as _mark_far
from medaudit.prep.data import DataError
from medaudit.released import (FORMATS, NOTEBOOKS, ReleaseError, authors_accuracy, folder, import_release,
               listed_digests, paper_models, prompt_type, release_items, spec, summary_check)


# --------------------------------------------------------------------------
# one step to add a model: python -m medaudit.released add FILES --study NAME --name MODEL


def release_prefixes(release: dict) -> tuple[str, ...]:
    """The name prefixes a release's authors put before its patterns
    (``layout.prefixes``: FairMedPrompt's ``z_`` and ``Test_``); a file is
    then told apart by its content (its fields, its vignettes), not its name."""
    return tuple((release.get("layout") or {}).get("prefixes") or ("",))


def pattern_regex(pattern: str, prefixes=("",), prompts=()) -> re.Pattern:
    """A file pattern (``{file}``: the model part; ``{prompt}``: one of
    ``prompts``, the layout's prompt parts, or any text without "_" when
    none are given) as a regular expression of the whole file name, after
    one of ``prefixes``."""
    alts = "|".join(re.escape(p) for p in sorted(prompts, key=len, reverse=True)) or r"[^_]+"
    rx = re.escape(pattern).replace(r"\{file\}", r"(?P<file>.+?)").replace(r"\{prompt\}", rf"(?P<prompt>{alts})")
    pre = "|".join(re.escape(p) for p in prefixes)
    return re.compile(rf"(?P<prefix>{pre}){rx}$")


def match_files(files: list[Path], pattern: str, part: str | None, what: str, study: str,
           prefixes=("",)) -> tuple[Path, str] | None:
    """The one file among ``files`` that the release's ``pattern`` names
    (with file part ``part`` when given): (path, its file part). Several
    candidates without ``part`` is an error that lists them (never a guess)."""
    rx = pattern_regex(pattern, prefixes)
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


class UserFiles:
    """Where each file ``add`` reads came from: a scratch copy or a member
    extracted from a zip is reported under the user's own file (an error in
    a throw-away copy names the file the user gave, never a temporary path)."""

    def __init__(self):
        self.origin: dict[str, str] = {}

    def note(self, path: Path, shown: str | Path) -> None:
        """Record that ``path`` (a scratch copy or an extracted member) is shown as
        ``shown``, the user's own file."""
        self.origin[str(path)] = str(shown)

    def shown(self, path: str | Path) -> str:
        """The user's file behind ``path`` (:meth:`note`), else ``path`` itself."""
        return self.origin.get(str(path), str(path))

    def error(self, e: DataError) -> ReleaseError:
        """``e`` with its file (and any temporary path in its text) replaced by the user's file."""
        problem = e.problem
        for tmp, shown in sorted(self.origin.items(), key=lambda kv: -len(kv[0])):
            problem = problem.replace(tmp, shown)
        return ReleaseError(self.shown(e.file), e.record, e.field, problem)


def hive_condition() -> Callable[[str, str], str]:
    """The cultural study's condition naming, culture key and cue key →
    ``"<culture name>:<cue name>"`` (:meth:`medaudit.studies.cultural.config.CulturalConfig.condition`),
    from ``params/cultures.yaml``."""
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


def yaml_add(text: str, path: Path, study: str, key_path: tuple[str, ...], name: str, part: str) -> str:
    """Add ``name: part`` to the one-line flow mapping ``key_path`` of entry
    ``study`` in the text of ``params/released.yaml``, keeping the file's
    comments; returns the new text."""
    lines = text.splitlines(keepends=True)
    j, a, b = _flow_mapping(lines, path, study, key_path)
    inner = lines[j][a:b].rstrip()
    entry = f"{yaml_scalar(name)}: {yaml_scalar(part)}"
    lines[j] = lines[j][:a] + (f"{inner}, {entry}" if inner.strip() else entry) + lines[j][b:]
    return "".join(lines)


def yaml_remove(text: str, path: Path, study: str, key_path: tuple[str, ...], name: str) -> str | None:
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


def yaml_scalar(s: str) -> str:
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
    :func:`medaudit.stats.distance.distance` defines them (the shipped files are
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
    condition = hive_condition()
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


def given_files(files, users: UserFiles | None = None, unpack: Path | None = None) -> list[Path]:
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


def stage_files(sources: list[tuple[Path, str]], base: Path, scratch: Path, users: UserFiles | None = None) -> dict:
    """The given release files copied into ``scratch`` (made here) under the
    release's names for them (``(source, name)``: the pattern with the model's
    file part, so a prefixed ``z_…`` file is read where the release reads
    it) with a SHA256SUMS of their own, so that a trial import reads them as
    the release folder; a file the release's SHA256SUMS already lists with
    another digest is refused. Returns what :func:`install_staged` needs."""
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


def install_staged(staged: dict, base: Path) -> list[str]:
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


def trial_run(users: UserFiles, run: Callable):
    """``run()``, with an error in a scratch copy reported under the user's file."""
    try:
        return run()
    except DataError as e:
        raise users.error(e) from None


def vignette_count(path: Path) -> int:
    """The distinct question ids of a per-vignette answer file (its content: what a partial run is told by)."""
    ids = set()
    for ln in path.read_text(encoding="utf-8").splitlines():
        if ln.strip():
            try:
                ids.add(str(json.loads(ln).get("question_id")))
            except (json.JSONDecodeError, AttributeError):
                ids.add(ln)
    return len(ids)


def expected_items(study: str, release: dict) -> int:
    """The vignettes a model's plain answers must cover: those of the
    release's models already there, else the declared ``layout.items``
    (0: not declared)."""
    if release.get("format") == "amqa" and release.get("models"):
        return len(release_items(study, release))
    return int((release.get("layout") or {}).get("items") or 0)


def check_count(path: Path, shown: str, release: dict, what: str, want: int) -> None:
    """A model's plain answers must cover the release's vignettes
    (``want``, :func:`expected_items`): a partial run (the authors'
    1- and 10-vignette ``Test_`` files, whatever their name) is refused,
    with both counts."""
    if not want:
        return
    got = vignette_count(path)
    if got != int(want):
        raise ReleaseError(shown, "(file)", "question_id",
                           f"{got} vignettes, where the release's benchmark has {want}: a partial run (a test "
                           f"file?) is not {what}")


def add(files, study: str, name: str, part: str | None = None, judge_part: str | None = None,
        params_path: str | Path | None = None, dry_run: bool = False, not_in_paper: bool = False,
        users: UserFiles | None = None) -> dict:
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

    from medaudit.llm.store import ResponseStore

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
    prefixes = release_prefixes(release)
    users = users or UserFiles()
    with tempfile.TemporaryDirectory() as tmp:
        given = given_files(files, users, Path(tmp) / "unpacked")
        found: dict[str, tuple[Path, str, str]] = {}          # role -> (path, file part, prompt format)
        for pattern, fmt in release["answers"].items():
            hit = match_files(given, pattern, part, f"answers {pattern}", study, prefixes)
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
            hit = match_files(given, judge["pattern"], judge_part, "judge pattern", study, prefixes)
            if hit:
                found["judge"] = (*hit, judge["prompt_format"])
        if not hive and release.get("summary"):
            hit = match_files(given, release["summary"], answer_part, "summary", study, prefixes)
            if hit:
                found["summary"] = (*hit, "summary")
        names = {role: (release["summary"] if role == "summary" else judge["pattern"] if role == "judge" else role
                        ).format(file=p) for role, (_, p, _) in found.items()}
        if not hive:
            want = expected_items(study, release)
            for pattern in release["answers"]:
                check_count(found[pattern][0], users.shown(found[pattern][0]), release, f"{name}'s answers", want)
        base = folder(study, release)
        # check everything in a scratch copy before anything is written
        report, notes, summary_table, comparison = [], [], None, None
        scratch = Path(tmp) / base.name
        staged = stage_files([(src, names[role]) for role, (src, _, _) in found.items()], base, scratch, users)
        trial = {**release, "folder": str(scratch), "models": {name: answer_part}, "strategies": {}}
        if judge:
            trial["judge"] = {**judge, "files": {name: found["judge"][1]}} if "judge" in found else None
        store = ResponseStore(Path(tmp) / "check.sqlite")
        condition = hive_condition() if hive else None
        counts = trial_run(users, lambda: import_release(study, store, condition, release=trial))
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
            items = trial_run(users, lambda: release_items(study, trial))
            if "summary" in found:
                authors = trial_run(users, lambda: authors_accuracy(study, trial))
                report.append({"file": users.shown(found["summary"][0]), "prompt_format": "summary",
                               "prompt_type": prompt_type(release["summary"]),
                               "items": int(authors["total"].max()), "conditions": len(authors),
                               "records": len(authors), "unparsed": 0})
                summary_table = trial_run(users, lambda: summary_check(
                    scratch / names[next(iter(release["answers"]))], scratch / names["summary"], release))
                notes.append(summary_note(summary_table, name))
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
        text = yaml_add(params_path.read_text(encoding="utf-8"), params_path, study, ("models",), name, answer_part)
        if "judge" in found:
            text = yaml_add(text, params_path, study, ("judge", "files"), name, found["judge"][1])
        check = (yaml.safe_load(text) or {}).get(study, {})
        if check.get("models", {}).get(name) != answer_part or (
                "judge" in found and check["judge"]["files"].get(name) != found["judge"][1]):
            raise ReleaseError(params_path, study, "models", "the edited file does not read back as intended")
        written = install_staged(staged, base)
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


def summary_note(check: pd.DataFrame, what: str) -> str:
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


def p_text(p: float) -> str:
    """A p-value for a message: two significant digits; one too small for a double, said so."""
    return f"{p:.2g}" if p > 0 else "< 1e-300"
