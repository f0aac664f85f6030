"""A mitigation arm of a model already present (``add --strategy``), every model of a release at once
(``add --all``), and ``remove`` of a model or an arm.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from medaudit import atomic, paths
from medaudit.released import (ReleaseError, amqa_summary, folder, import_release,
               paper_models, prompt_type, release_items, spec, summary_check,
               summary_types)
from .adding import (UserFiles, add, check_count, expected_items, given_files, hive_condition, install_staged,
                     match_files, p_text, pattern_regex, release_prefixes, stage_files, summary_note, trial_run,
                     vignette_count, yaml_add, yaml_remove, yaml_scalar)


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
    block = [f"    {strategy}:{WRITTEN}\n", f"      models: {{{yaml_scalar(name)}: {yaml_scalar(part)}}}\n",
             "      answers: {" + ", ".join(f"{json.dumps(p)}: {yaml_scalar(f)}" for p, f in answers.items()) + "}\n"]
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
            params_path: str | Path | None = None, dry_run: bool = False, users: UserFiles | None = None) -> dict:
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
    from medaudit.llm.store import ResponseStore

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
    prefixes = release_prefixes(release)
    users = users or UserFiles()
    hive = release["format"] == "hive"
    with tempfile.TemporaryDirectory() as tmp:
        given = given_files(files, users, Path(tmp) / "unpacked")
        want = part if part is not None else str(release["models"][name]) if present else None
        found: dict[str, tuple[Path, str, str]] = {}
        for pattern, fmt in answers.items():
            hit = match_files(given, pattern, want, f"strategies.{strategy}.answers {pattern}", study, prefixes)
            if hit is None:
                raise ReleaseError(", ".join(users.shown(f) for f in given) or "(no file)", study,
                                   f"strategies.{strategy}.answers",
                                   f"no file with file part {want!r} matches {pattern} (after "
                                   f"{' or '.join(repr(p) for p in prefixes)})"
                                   + ("" if part else "; pass --part when the arm's files name the model otherwise"))
            found[pattern] = (*hit, fmt)
            want = hit[1]
        if summary and (hit := match_files(given, summary, want, "summary", study, prefixes)):
            found["summary"] = (*hit, "summary")
        names = {role: (summary if role == "summary" else role).format(file=want) for role in found}
        plain_part = str(release["models"][name]) if present else want
        if not present:                            # a dry run before the model: its plain answers among the files
            for pattern in release["answers"]:
                hit = match_files(given, pattern, plain_part, f"answers {pattern}", study, prefixes)
                if hit is None:
                    raise ReleaseError(params_path, study, "--name",
                                       f"{name!r} is not a model of the release yet: give its plain answers "
                                       f"({pattern.format(file=plain_part)}) with the arm for a dry run, or add "
                                       "them first")
                found["plain " + pattern] = (*hit, release["answers"][pattern])
                names["plain " + pattern] = pattern.format(file=plain_part)
                if not hive:
                    check_count(hit[0], users.shown(hit[0]), release, f"{name}'s plain answers",
                                 expected_items(study, release))
        base = folder(study, release)
        scratch = Path(tmp) / base.name
        staged = stage_files([(src, names[role]) for role, (src, _, _) in found.items()], base, scratch, users)
        arm = {"models": {name: want}, "answers": {p: f for p, (_, _, f) in found.items()
                                                   if p != "summary" and not p.startswith("plain ")}}
        trial = {**release, "folder": str(scratch), "models": {name: plain_part}, "answers": {},
                 "strategies": {strategy: arm}, "judge": None}
        store = ResponseStore(Path(tmp) / "check.sqlite")
        condition = hive_condition() if hive else None
        counts = trial_run(users, lambda: import_release(study, store, condition, release=trial))
        plain_release = ({**release, "models": {name: plain_part}, "strategies": {}, "judge": None} if present else
                         {**release, "folder": str(scratch), "models": {name: plain_part}, "strategies": {},
                          "judge": None})
        trial_run(users, lambda: import_release(study, store, condition, release=plain_release))   # its plain answers
        frame = store.frame()
        known = None
        if not hive:
            known = release_items(study, release)
            if not len(known):
                known = trial_run(users, lambda: release_items(study, plain_release))
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
                             f"({artefact['reference letters']}; p {p_text(artefact['p vs reference'])}) and from "
                             f"the gold letters ({artefact['gold letters']}; p {p_text(artefact['p vs gold'])}). The "
                             "arm is added; "
                             "notebook 08 flags it on every table it reaches")
        summary_table = None
        if "summary" in found:       # read from the checked scratch copy: the user's folder needs no SHA256SUMS
            authors = trial_run(users, lambda: amqa_summary(scratch / names["summary"], summary_types(release)))
            report.append({"file": users.shown(found["summary"][0]), "prompt_format": "summary",
                           "prompt_type": prompt_type(summary), "items": int(authors["total"].max()),
                           "conditions": len(authors), "records": len(authors), "unparsed": 0})
            summary_table = trial_run(users, lambda: summary_check(scratch / names[next(iter(answers))],
                                                                scratch / names["summary"], release))
            notes.append(summary_note(summary_table, f"{name}'s {strategy} arm"))
        elif summary:
            notes.append(f"no Summary file ({summary}): the check against the authors' own counts skips this arm")
        result = {"model": name, "study": study, "strategy": strategy, "file part": want, "files": report,
                  "artefact": artefact, "summary check": summary_table, "notes": notes, "written": []}
        if dry_run:
            return result
        staged["lines"] = [ln for ln in staged["lines"] if not any(
            ln[2] == names[r] for r in found if r.startswith("plain "))]
        text = params_path.read_text(encoding="utf-8")
        text = (yaml_add(text, params_path, study, ("strategies", strategy, "models"), name, want) if listed_arm
                else _yaml_add_arm(text, params_path, study, strategy, name, want, arm["answers"],
                                   summary if "summary" in found else None))
        check = ((yaml.safe_load(text) or {}).get(study, {}).get("strategies") or {}).get(strategy) or {}
        if (check.get("models") or {}).get(name) != want or dict(check.get("answers") or {}) != answers:
            raise ReleaseError(params_path, study, f"strategies.{strategy}", "the edited file does not read back "
                                                                             "as intended")
        result["written"] += install_staged(staged, base)
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
    want = expected_items(study, release)
    prefixes = release_prefixes(release)
    rx = {"answers": pattern_regex(layout["answers"], prefixes, prompts)}
    if layout.get("summary"):
        rx["summary"] = pattern_regex(layout["summary"], prefixes, prompts)
    if not dry_run:           # every model and arm checked first: one that fails stops the add before any is written
        add_all(files, study, params_path, dry_run=True, names=names)
    users = UserFiles()
    skipped: list[tuple[str, str]] = []
    added: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        given = given_files(files, users, Path(tmp) / "unpacked")
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
            full = [f for f in roles.get("answers", []) if not want or vignette_count(f) == want]
            for f in roles.get("answers", []):
                if f not in full:
                    skipped.append((users.shown(f), f"a partial run: {vignette_count(f)} of the release's {want} "
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
    from medaudit.llm.store import ResponseStore

    params_path = Path(params_path) if params_path else paths.params("released.yaml")
    release = spec(study, params_path)
    if name not in (release.get("models") or {}):
        raise ReleaseError(params_path, study, "models", f"has no model named {name!r} "
                                                         f"({', '.join(release.get('models') or {})})")
    text = yaml_remove(params_path.read_text(encoding="utf-8"), params_path, study, ("models",), name)
    if name in ((release.get("judge") or {}).get("files") or {}):
        text = yaml_remove(text, params_path, study, ("judge", "files"), name)
    for strategy, arm in (release.get("strategies") or {}).items():   # its mitigation arms go with it
        if name in (arm.get("models") or {}):
            text = yaml_remove(text, params_path, study, ("strategies", strategy, "models"), name)
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
    from medaudit.llm.store import ResponseStore
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
    text = yaml_remove(params_path.read_text(encoding="utf-8"), params_path, study,
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
