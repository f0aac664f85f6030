"""The maintainer's command line (``python -m medaudit.released add|remove|list``) and what it prints.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from medaudit import paths
from medaudit.prep.data import DataError
from medaudit.released import (ReleaseError, folder)
from .listing import listing
from .adding import add, p_text
from .arms import add_all, add_arm, remove, remove_arm


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.released``: ``add`` a model's released
    files (or a mitigation arm of one), ``remove`` one, or ``list`` each release's models and
    arms; a release or data error is printed on stderr."""
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
                  f"{p_text(a['p vs reference'])}, p vs gold {p_text(a['p vs gold'])} -> "
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
