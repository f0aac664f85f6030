"""Recorded runs: rows a real run stored, shipped and replayed into a store.

Notebooks 05 and 06 ask a model at every stage (05: reformulation, answers,
clustering, judge; 06: augmentation, notes, judges), each stage reading the
last one's text. Sampled text differs across CPUs and llama.cpp builds, so
their regression check (nbval) could compare only structure. A recorded run
fixes the text: the rows one real run of the embedded model stored are
written to a JSONL file (:func:`record`) and, on another machine, put back
into the store before the notebook runs (:func:`replay`). The notebook then
finds each of its requests already answered and reads the recorded text;
anything it asks that the recording lacks is generated as usual.

A recorded row keeps its request key, so it is served only to exactly the
request it answered: the same backend, model identity (the GGUF's sha256),
messages and settings — the store's one rule for reusing an answer. Replay
does not take the key on trust: it derives the key again from the row's own
request (:func:`medaudit.llm.base.request_key`) and refuses the file, naming
the line and the field, where the two differ (a prompt edited after
recording, a row of another model). Replayed rows are marked ``source`` =
"recorded", so a reader can tell them from text generated in this run.

This is not the importer (:mod:`medaudit.llm.importer`): imported answers
come from elsewhere, carry no request, and go under a model name of their
own; recorded rows are this compendium's own requests and answers.
"""
from __future__ import annotations

import json
import math
import string
from pathlib import Path

import pandas as pd

from .. import atomic
from .base import GenParams, Request, request_key
from .store import COLUMNS, ResponseStore

SOURCE = "recorded"
# what a row must carry to name its request (the key is derived from these)
REQUEST = ("key", "backend", "model", "model_id", "item_id", "condition", "prompt_format", "sample", "prompt",
           "temperature", "top_p", "max_tokens", "seed", "response_text")
_INT = ("sample", "max_tokens", "seed", "tokens_in", "tokens_out", "retries")


# which recorded-run files this process replayed, by prompt format: a stored-only
# run names the file to record again when a request of that format is missing
_REPLAYED: dict[str, set[str]] = {}


def replayed_files(prompt_format: str) -> list[str]:
    """The recorded-run files replayed in this process that hold rows of ``prompt_format``."""
    return sorted(_REPLAYED.get(prompt_format, ()))


class RecordedRunError(ValueError):
    """A recorded-run file that cannot be replayed: names the file, the line
    and the field."""


def record(rows: pd.DataFrame, path: str | Path) -> int:
    """Write stored rows (of :meth:`ResponseStore.frame`) to ``path`` as
    JSONL, one row per line in key order, every store column but
    ``source``, ``created_at`` and ``latency_s`` (they describe the recording
    run, not the answer). Rows recorded with settings other than their
    request's (``settings``: a reasoning API that takes no temperature) are
    refused: their request cannot be derived again. Returns the number of
    rows written."""
    skip = {"source", "created_at", "latency_s"}
    out = []
    for r in rows.sort_values("key").to_dict("records"):
        if isinstance(r.get("settings"), str) and r["settings"]:
            raise RecordedRunError(f"row {r['key']}: recorded with other settings than its request "
                                   f"({r['settings']}); such a row cannot be replayed")
        rec = {}
        for c in COLUMNS:
            v = r.get(c)
            if c in skip or v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            rec[c] = int(v) if c in _INT else v
        out.append(json.dumps(rec, ensure_ascii=False, sort_keys=True))
    atomic.write_text(Path(path), "\n".join(out) + "\n")
    return len(out)


def derived_key(row: dict) -> str:
    """The request key of a stored row, derived from its request: backend,
    model identity, messages, settings and what names the sample (a
    multiple-choice row's letters from its permutation, as
    :func:`medaudit.llm.mcq.plan` sets them)."""
    messages = json.loads(row["prompt"])
    params = GenParams(float(row["temperature"]), float(row["top_p"]), int(row["max_tokens"]), int(row["seed"]),
                       int(row.get("top_k") or 0), float(row.get("repetition_penalty") or 1.0))
    perm = row.get("permutation") or ""
    req = Request.chat(messages, params, answer_letters=tuple(string.ascii_uppercase[:len(perm)]))
    return request_key(row["backend"], row["model_id"], req, item_id=row["item_id"], condition=row["condition"],
                       prompt_format=row["prompt_format"], k=int(row["sample"]), perm=perm)


def read(path: str | Path) -> list[dict]:
    """The rows of a recorded-run file, each checked: valid JSON, every
    request field present, only store columns, and a key equal to the one
    derived from its request. The first problem raises
    :class:`RecordedRunError` naming the file, the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise RecordedRunError(f"{path}: no such recorded-run file")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordedRunError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(r, dict):
            raise RecordedRunError(f"{where}: not a JSON object")
        for f in REQUEST:
            if r.get(f) is None:
                raise RecordedRunError(f"{where}, field '{f}': missing")
        unknown = sorted(set(r) - set(COLUMNS))
        if unknown:
            raise RecordedRunError(f"{where}, field '{unknown[0]}': not a response-store column")
        try:
            key = derived_key(r)
        except (TypeError, ValueError, KeyError) as e:
            raise RecordedRunError(f"{where}, field 'prompt': cannot rebuild the request ({e})") from None
        if key != r["key"]:
            raise RecordedRunError(f"{where} ({r['prompt_format']}, {r['item_id']}, {r['condition']}, "
                                   f"sample {r['sample']}), field 'key': not the key of the row's own request "
                                   f"(the prompt or a setting was changed after recording)")
        rows.append({**r, "source": SOURCE})
    return rows


def replay(path: str | Path, store: ResponseStore) -> dict:
    """Put a recorded run's rows into ``store`` (all of them checked first:
    nothing is written if any line is bad). A key already stored keeps its
    row. Returns counts: ``file``, ``read``, ``stored`` (new rows),
    ``already_present``."""
    rows = read(path)
    for r in rows:
        _REPLAYED.setdefault(r["prompt_format"], set()).add(str(path))
    have = store.has(r["key"] for r in rows)
    new = [r for r in rows if r["key"] not in have]
    store.put_many(new)
    return {"file": str(path), "read": len(rows), "stored": len(new), "already_present": len(rows) - len(new)}


def main(argv=None) -> int:
    """``python -m medaudit.llm.recorded OUT [--formats F [F ...]] [--profile smoke]``:
    write the generated rows of these prompt formats (default: every
    generated row) in the profile's store to ``OUT`` (record them from a run
    on a fresh store: every row stored is written)."""
    import argparse

    from .. import paths

    ap = argparse.ArgumentParser(prog="python -m medaudit.llm.recorded", description=main.__doc__)
    ap.add_argument("out")
    ap.add_argument("--formats", nargs="+", default=None)
    ap.add_argument("--profile", default="smoke")
    a = ap.parse_args(argv)
    store = ResponseStore(paths.outputs(a.profile, "data", "responses.sqlite", mkdir=False))
    rows = (store.where_in("prompt_format", a.formats, "source = 'generated'") if a.formats
            else store.frame("WHERE source = 'generated'"))
    got = sorted(set(rows["prompt_format"]))
    if missing := sorted(set(a.formats or []) - set(got)):
        raise SystemExit(f"no generated rows of {', '.join(missing)} in {store.path}")
    if rows.empty:
        raise SystemExit(f"no generated rows in {store.path}")
    print(f"{record(rows, a.out)} rows of {', '.join(got)} written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
