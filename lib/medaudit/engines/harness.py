"""Other harnesses' logs in, our design out: lm-eval and HELM.

Import. Each converter turns a harness's per-sample log into records of the
long format of :mod:`medaudit.llm.importer` and stores them through its one
path (:func:`~medaudit.llm.importer.import_records`: validation, parsing,
conflicts, idempotence). A *map* (CSV: ``source_id``, ``item_id``,
``condition``, ``prompt_format``, optionally ``perturbation``) pairs the
harness's ids with our items and conditions. A log row the map does not
pair is reported by id (``unpaired``) and not stored — never dropped
silently. Every import appends the source file's sha256, the harness and
its version (as the log states it, else as given) to
``harness_imports.jsonl`` beside the store.

* **lm-eval** ``--log_samples`` (``samples_<task>_<date>.jsonl``): one line
  per document with ``doc_id``, ``doc``, ``arguments``, ``resps`` and
  ``filtered_resps``. A generation task's ``filtered_resps`` holds the K
  responses of ``repeats: K`` (samples 0…K-1). A multiple-choice task's
  responses are one ``(log-likelihood, is_greedy)`` pair per choice (as
  numbers, lists, or the strings lm-eval writes for them, e.g.
  ``"(-1.5, False)"``); choice i is letter i (A, B, …), the letters'
  log-probabilities are the log-likelihoods normalised over the choices,
  and the answer is the most likely choice.
* **HELM** ``scenario_state.json``: ``request_states`` with ``instance``
  (``id``, optional ``perturbation.name``), ``train_trial_index`` and the
  ``result``'s completions; sample k = ``train_trial_index`` × completions
  + j. The completion text is parsed as an answer letter (HELM's
  multiple-choice-joint adapter answers a bare letter). A map may key on
  more of the perturbation than its name (``perturbation.<field>``
  columns, :func:`perturbation_key`); what :func:`helm_records` refuses is
  said there.
* **Inspect** ``.eval`` (or ``.json``) logs through
  ``inspect_ai.log.read_eval_log`` (an optional dependency, installed beside
  the project's own: ``pip install -e '.[inspect]'``): each sample's ``id`` is the source id, its ``epoch``
  (1-based) sample k = epoch - 1, its ``output.completion`` the response;
  an ``ANSWER: X`` line (Inspect's multiple_choice solver) is the answer.
  The harness version is the log's ``eval.packages["inspect_ai"]``.

Export: :func:`export_design` writes the study's design as it runs —
one document per sample, our chat prompt for its option order, sampled as
the profile samples — as an lm-eval ``generate_until`` task and an Inspect
task, with the map (sample index and option order included) that brings
their logs back as every sample; both harnesses score the replies by our
parser's rule (:func:`answer_pattern`), so what they report is our
accuracy (:func:`reported_accuracy`, :func:`our_accuracy`; ``agree`` on
the command line). :func:`export_lm_eval_task` (lm-eval's log-likelihood
multiple choice) and :func:`export_inspect_task` (Inspect's
``multiple_choice`` template) keep the harnesses' own prompts, explicitly
(``--form harness``, :func:`export_harness`), stored under format names of
their own, each with its own map.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import re
import string
import time
from pathlib import Path

import pandas as pd

from medaudit.llm import formats
from medaudit import parse
from medaudit.checksum import sha256_file
from medaudit.llm import importer
from medaudit.llm.store import ResponseStore


# the harnesses' own prompts, stored under format names of their own (never the study's "mcq")
LOGLIK_FORMAT = "mcq_lmeval_loglik"   # lm-eval multiple_choice: "Answer:" and log-likelihoods, no sampling
INSPECT_FORMAT = "mcq_inspect"        # Inspect's multiple_choice template, read by its last "ANSWER: X" line


class HarnessError(ValueError):
    """A harness log or map that cannot be used: names the file, record and field."""


class Map(dict):
    """(source_id, perturbation key) → {item_id, condition, prompt_format};
    ``fields``: the perturbation fields the map keys on besides the name
    (its ``perturbation.<field>`` columns)."""
    fields: tuple[str, ...] = ()


def perturbation_key(p: dict | None, fields: tuple[str, ...]) -> str:
    """A HELM perturbation as a map keys it: its name, and where the map
    has ``perturbation.<field>`` columns, those fields' values —
    "gender[source_class=male,target_class=female]"; "" for none."""
    name = str((p or {}).get("name") or "").strip()
    if not name or not fields:
        return name
    return name + "[" + ",".join(f"{f}={str((p or {}).get(f, '')).strip()}" for f in fields) + "]"


def read_map(path: str | Path) -> Map:
    """(source_id, perturbation key) → {item_id, condition, prompt_format}
    (:class:`Map`; the key: :func:`perturbation_key`)."""
    path = Path(path)
    need = ("source_id", "item_id", "condition", "prompt_format")
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames or []
    if rows and (missing := [c for c in need if c not in rows[0]]):
        raise HarnessError(f"{path}: the map lacks the columns {missing} (needs {list(need)}, optional perturbation "
                           "and perturbation.<field> columns)")
    out = Map()
    out.fields = tuple(c[len("perturbation."):] for c in header if c.startswith("perturbation."))
    for n, r in enumerate(rows, 2):
        pert = {"name": r.get("perturbation") or "", **{f: r.get(f"perturbation.{f}") or "" for f in out.fields}}
        key = (str(r["source_id"]).strip(), perturbation_key(pert, out.fields))
        if key in out:
            raise HarnessError(f"{path} row {n}: source_id {key[0]!r} (perturbation {key[1]!r}) mapped twice")
        for c in need[1:]:
            if not (r.get(c) or "").strip():
                raise HarnessError(f"{path} row {n}: field {c} is empty")
        out[key] = {c: r[c].strip() for c in need[1:]}
        # a design export's row is one sample: its index k and the option order it showed
        for c in ("sample", "permutation"):
            if (r.get(c) or "").strip():
                out[key][c] = r[c].strip()
        if "sample" in out[key]:
            try:
                out[key]["sample"] = int(out[key]["sample"])
            except ValueError:
                raise HarnessError(f"{path} row {n}: field sample {r['sample']!r} is not a whole number") from None
    return out


# ==========================================================================
# lm-eval


def _pair(x, where: str) -> float | None:
    """The log-likelihood of one multiple-choice response, or None when the
    response is not a (log-likelihood, is_greedy) pair."""
    while isinstance(x, list) and len(x) == 1 and isinstance(x[0], (list, tuple, str)):
        x = x[0]
    if isinstance(x, str):
        try:
            x = ast.literal_eval(x.strip())
        except (ValueError, SyntaxError):
            return None
    if isinstance(x, (list, tuple)) and len(x) == 2:
        try:
            return float(x[0])
        except (TypeError, ValueError):
            return None
    return None


def lm_eval_records(path: str | Path, mapping: dict, model: str) -> tuple[list[tuple[str, dict]], list[str]]:
    """(importer records, unpaired doc ids) of an lm-eval samples file."""
    path = Path(path)
    records, unpaired = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            d = json.loads(line)
            doc_id = str(d["doc_id"])
        except (ValueError, KeyError, TypeError) as e:
            raise HarnessError(f"{where}: not an lm-eval sample with doc_id ({type(e).__name__}: {e})") from None
        m = mapping.get((doc_id, ""))
        if m is None:
            unpaired.append(doc_id)
            continue
        raw = d.get("resps")
        # a generation task's resps holds every repeat as the model wrote it, its filtered_resps what
        # lm-eval's filter kept of them (by default the first only): every repeat is a sample
        generated = (isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], list) and raw[0]
                     and all(isinstance(t, str) for t in raw[0]))
        resps = raw if generated else d.get("filtered_resps", raw)
        if not isinstance(resps, list) or not resps:
            raise HarnessError(f"{where}: field filtered_resps/resps is empty or not a list")
        lls = [_pair(r, where) for r in resps]
        base = {"model": model, "item_id": m["item_id"], "condition": m["condition"],
                "prompt_format": m["prompt_format"]}
        if len(resps) > 1 and all(v is not None for v in lls):          # multiple choice: one pair per choice
            letters = string.ascii_uppercase[:len(lls)]
            z = max(lls) + math.log(sum(math.exp(v - max(lls)) for v in lls))
            lp = {L: v - z for L, v in zip(letters, lls)}
            best_lp = max(lp.values())
            top = [L for L in letters if lp[L] == best_lp]
            if len(top) > 1:
                # a tie is no answer: the tied letters as the text, parsed as "multiple" (a counted
                # parse failure), never the first letter as a confident choice
                records.append((f"line {n} (doc_id {doc_id})", {
                    **base, "sample": 0, "response_text": " ".join(f"[{L}]" for L in top), "letter_logprobs": lp}))
                continue
            best = top[0]
            records.append((f"line {n} (doc_id {doc_id})", {**base, "sample": 0, "response_text": f"[{best}]",
                                                            "parsed_answer": best, "answer_logprob": lp[best],
                                                            "letter_logprobs": lp}))
            continue
        texts = resps[0] if len(resps) == 1 and isinstance(resps[0], list) else resps
        for k, t in enumerate(texts):
            if not isinstance(t, str):
                raise HarnessError(f"{where}: response {k} is {type(t).__name__}, not text")
            records.append((f"line {n} (doc_id {doc_id}) sample {k}",
                            {**base, **_sample_of(m, k, len(texts), f"{where} (doc_id {doc_id})"), "response_text": t}))
    return records, unpaired


# ==========================================================================
# HELM


def helm_records(path: str | Path, mapping: dict, model: str) -> tuple[list[tuple[str, dict]], list[str]]:
    """(importer records, unpaired instance ids) of a HELM scenario_state.json.

    Refused (:class:`HarnessError`), before anything is stored: a request
    state of a separate-reference adapter (``reference_index`` set: one
    request per option, a score, not an answer); perturbed copies of one
    instance that the map cannot tell apart (HELM's demographic
    perturbations share a name, e.g. "gender", whatever their classes: the
    map needs ``perturbation.<field>`` columns, the error names the fields
    that differ); and several train trials of one instance at temperature 0
    with the same prompt (one deterministic answer repeated, not K
    samples)."""
    path = Path(path)
    try:
        states = json.loads(path.read_text(encoding="utf-8"))["request_states"]
    except (ValueError, KeyError, TypeError) as e:
        raise HarnessError(f"{path}: not a HELM scenario_state.json with request_states ({e})") from None
    fields = getattr(mapping, "fields", ())
    parsed, seen = [], {}
    for n, s in enumerate(states):
        where = f"request_states[{n}]"
        try:
            inst = s["instance"]
            iid = str(inst["id"])
            pert = inst.get("perturbation") or {}
            trial = int(s.get("train_trial_index", 0))
            comps = s["result"]["completions"] if s["result"].get("success", True) else []
            req = s.get("request") or {}
        except (KeyError, TypeError, ValueError) as e:
            raise HarnessError(f"{path} {where}: field {e} missing or malformed") from None
        if s.get("reference_index") is not None:
            raise HarnessError(f"{path} {where}: reference_index {s['reference_index']} — a separate-reference "
                               "adapter scores each option in its own request, which is no answer to import; run "
                               "HELM's multiple_choice_joint adapter")
        key = perturbation_key(pert, fields)
        seen.setdefault((iid, key), []).append((pert, trial, req))
        parsed.append((where, iid, key, trial, comps))
    for (iid, key), copies in seen.items():
        described = {json.dumps(p, sort_keys=True) for p, _, _ in copies}
        if len(described) > 1:
            ps = [json.loads(d) for d in sorted(described)]
            differ = sorted({f for p in ps for f in p if len({str(q.get(f)) for q in ps}) > 1})
            raise HarnessError(f"{path}: instance {iid}: {len(ps)} perturbed copies share the map key {key!r} "
                               f"(HELM names them alike); they differ in {', '.join(differ)}: add "
                               f"{', '.join('perturbation.' + f for f in differ)} columns to the map")
        trials = {t for _, t, _ in copies}
        if len(trials) > 1 and all(float(r.get("temperature", 1.0) or 0.0) == 0.0 for _, _, r in copies):
            what = (f"{len(trials)} trials at temperature 0 with the same prompt are one deterministic answer "
                    "repeated, not K samples"
                    if len({str(r.get("prompt")) for _, _, r in copies}) == 1 else
                    f"{len(trials)} trials at temperature 0 with different in-context examples are deterministic "
                    "answers to different prompts, not K samples of one prompt")
            raise HarnessError(f"{path}: instance {iid}" + (f" ({key})" if key else "") + f": {what}; import one "
                               "trial (HELM --num-train-trials 1) or sample at a temperature")
    records, unpaired = [], []
    for where, iid, key, trial, comps in parsed:
        m = mapping.get((iid, key))
        if m is None:
            unpaired.append(f"{iid}" + (f" ({key})" if key else ""))
            continue
        for j, c in enumerate(comps):
            text = str(c.get("text", "")).strip()
            rec = {"model": model, "item_id": m["item_id"], "condition": m["condition"],
                   "prompt_format": m["prompt_format"], "sample": trial * len(comps) + j, "response_text": text}
            if len(text) == 1 and text in string.ascii_uppercase:       # the joint adapter's bare letter
                rec["parsed_answer"] = text
            records.append((f"{where} completion {j}", rec))
    return records, unpaired


# ==========================================================================
# Inspect

_ANSWER = re.compile(r"ANSWER\s*:\s*\$?([A-Z])\b", re.IGNORECASE)


def read_inspect(path: str | Path):
    """The EvalLog of an Inspect log file (needs the inspect_ai package)."""
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise HarnessError("importing Inspect logs needs the inspect_ai package beside the project's own "
                           "dependencies: pip install -e '.[inspect]' in the project's venv") from None
    return read_eval_log(str(path))


def inspect_records(log, mapping: dict, model: str, where: str = "") -> tuple[list[tuple[str, dict]], list[str]]:
    """(importer records, unpaired sample ids) of an Inspect EvalLog (as
    ``read_eval_log`` returns it: ``samples`` with ``id``, ``epoch`` and
    ``output.completion``)."""
    records, unpaired = [], []
    for n, smp in enumerate(log.samples or []):
        try:
            sid, epoch = str(smp.id), int(smp.epoch)
            text = smp.output.completion or ""
        except (AttributeError, TypeError, ValueError) as e:
            raise HarnessError(f"{where} samples[{n}]: {e}") from None
        m = mapping.get((sid, ""))
        if m is None:
            unpaired.append(f"{sid} (epoch {epoch})")
            continue
        rec = {"model": model, "item_id": m["item_id"], "condition": m["condition"],
               "prompt_format": m["prompt_format"], "response_text": text,
               **_sample_of(m, epoch - 1, None, f"{where} sample {sid} epoch {epoch}")}
        if not formats.known(m["prompt_format"]) and (hits := _ANSWER.findall(text)):
            rec["parsed_answer"] = hits[-1].upper()     # Inspect's reading: the last ANSWER line, any case
        records.append((f"sample {sid} epoch {epoch}", rec))
    return records, unpaired


# ==========================================================================
# the one import path


def import_log(kind: str, path: str | Path, mapping_path: str | Path, store: ResponseStore, *, model: str,
               harness_version: str = "", options_by_item=None, log=None) -> dict:
    """Import one harness log (``kind``: lm-eval | helm | inspect) into the
    store. For Inspect, ``log`` may be the EvalLog already read."""
    path = Path(path)
    mapping = read_map(mapping_path)
    if kind == "lm-eval":
        records, unpaired = lm_eval_records(path, mapping, model)
    elif kind == "helm":
        records, unpaired = helm_records(path, mapping, model)
    elif kind == "inspect":
        log = log if log is not None else read_inspect(path)
        harness_version = harness_version or str((getattr(log.eval, "packages", None) or {}).get("inspect_ai", ""))
        records, unpaired = inspect_records(log, mapping, model, str(path))
    else:
        raise HarnessError(f"unknown harness {kind!r} (lm-eval, helm, inspect)")
    counts = importer.import_records(path, records, store, options_by_item,
                                     letters=_letters(records))
    missing = _missing(mapping, records)
    prov = {"file": str(path), "sha256": sha256_file(path), "harness": kind, "harness_version": harness_version,
            "model": model, "records": len(records), "stored": counts["stored"], "unpaired": unpaired,
            "missing": missing, "imported_at": time.time()}
    with open(store.path.parent / "harness_imports.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(prov) + "\n")
    return {**counts, "sha256": prov["sha256"], "harness_version": harness_version, "unpaired": unpaired,
            "missing": missing}


def _missing(mapping: Map, records) -> list[str]:
    """The map rows no log row answered ("source_id (perturbation key)"): a
    harness run on part of the map (``--limit``), or the perturbed copies
    HELM skips where the perturbation leaves the text unchanged. A design
    export's row is one sample, so it is answered only by that sample."""
    seen = {(r["item_id"], r["condition"], r["prompt_format"]) for _, r in records}
    seen_k = {(r["item_id"], r["condition"], r["prompt_format"], r.get("sample")) for _, r in records}
    out = []
    for (sid, key), m in mapping.items():
        t = (m["item_id"], m["condition"], m["prompt_format"])
        if (t + (m["sample"],) not in seen_k) if "sample" in m else (t not in seen):
            out.append(sid + (f" ({key})" if key else ""))
    return out


def _sample_of(m: dict, k: int, n: int | None, where: str) -> dict:
    """The sample index (and option order) of response ``k`` of a log row
    paired by ``m``: ``k`` itself, or — for a design export, whose map row is
    one sample — the map's sample and permutation, which admit one response
    (a repeat or a second epoch would be another sample of the same option
    order, which the design does not have: refused)."""
    if "sample" not in m:
        return {"sample": k}
    if k > 0 or (n or 1) > 1:
        raise HarnessError(f"{where}: more than one response for one sample of the design (its map row is sample "
                           f"{m['sample']}); run the exported task as written (repeats 1, one epoch)")
    return {"sample": m["sample"], **({"permutation": m["permutation"]} if "permutation" in m else {})}


def _letters(records) -> str:
    n = max((len(r[1].get("letter_logprobs") or {}) for r in records), default=0)
    return string.ascii_uppercase[:max(n, 4)]


# ==========================================================================
# export: our design as an lm-eval task


def gold_letters(items: pd.DataFrame) -> dict[str, str]:
    """item_id → the gold option letter: ``answer_idx`` where the items have
    it (MedQA's letter), else the letter whose option text is ``answer``
    (or ``answer`` itself where it is a letter of the options). Items with
    neither are left out (the export then refuses them by name)."""
    out = {}
    for r in items.to_dict("records"):
        o = r["options"]
        idx = r.get("answer_idx")
        if isinstance(idx, str) and idx in o:
            out[r["item_id"]] = idx
            continue
        ans = r.get("answer")
        if isinstance(ans, str):
            hit = ans if ans in o else next((L for L, t in o.items() if t == ans), None)
            if hit is not None:
                out[r["item_id"]] = hit
    return out


def _write_jsonl(path: Path, rows) -> Path:
    """``rows`` (dicts) as one JSON line each."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _task_head(name: str, data: Path) -> str:
    """An lm-eval task YAML's first lines: its name and its data file, by
    absolute path (lm-eval (datasets) resolves a relative data file against
    its working directory)."""
    return (f"task: {name}\n"
            f"dataset_path: json\n"
            f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data.resolve()))}\n"
            f"test_split: test\n")


FILTER = "medaudit"          # the lm-eval filter of a design export: its results say exact_match,medaudit
NO_LETTER = "[no letter]"   # what the filter leaves of a reply the parser reads no letter from


def answer_pattern(samples: list) -> str:
    """The regular expression that reads a design export's replies as the
    project's parser does (:func:`medaudit.parse.pattern_of` of the
    samples' prompt format, with their option letters), so that lm-eval's
    filter and Inspect's scorer count as correct exactly the replies our
    accuracy counts. Refused (:class:`HarnessError`) where no one
    expression is that rule, or the samples mix formats or option counts."""
    fmts = sorted({smp.prompt_format for smp in samples})
    counts = sorted({len(smp.perm) for smp in samples})
    if len(fmts) != 1 or len(counts) != 1:
        raise HarnessError(f"the samples have the prompt formats {fmts} and option counts {counts}: a harness task "
                           "reads its replies with one rule; export one format and one option count at a time")
    parser = formats.get(fmts[0]).parser
    pattern = parse.pattern_of(parser, string.ascii_uppercase[:counts[0]])
    if pattern is None:
        have = [n for n in formats.names("mcq") if formats.get(n).parser in parse.PATTERNS]
        raise HarnessError(f"prompt format {fmts[0]!r} is read by {getattr(parser, '__name__', parser)}, which no "
                           "single regular expression reproduces: lm-eval's filter and Inspect's scorer would count "
                           f"other replies correct than our parser does; export one of {have}")
    return pattern


def export_design(samples: list, items: pd.DataFrame, folder: str | Path, name: str = "medaudit_mcq") -> list[Path]:
    """The study's design as it runs (:func:`medaudit.llm.mcq.plan`'s
    samples): one document per sample — its chat prompt exactly as our
    backends send it (the format's messages for that sample's option
    order), its sampling settings, its gold letter *as shown* — written as

    * an lm-eval ``generate_until`` task (``<name>.yaml`` + ``<name>.jsonl``:
      the user turn as ``doc_to_text``, to run with ``--apply_chat_template``
      and, where the format has one, ``--system_instruction`` as the YAML's
      comment says; the samples' temperature, top-p and token limit;
      ``repeats: 1``, since each sample is its own document; a ``regex``
      filter (:data:`FILTER`) that takes the letter out of the reply by the
      format's parser rule, :func:`answer_pattern`, so lm-eval's own
      ``exact_match,medaudit`` is our accuracy on the same replies);
    * an Inspect task (``<name>_inspect.py`` + ``<name>_inspect.jsonl``:
      the same messages as each sample's input, ``generate()``, one epoch,
      the samples' settings in its ``GenerateConfig``, Inspect's
      ``pattern`` scorer with that rule, case-sensitive);
    * the map (``<name>_map.csv``) with each document's item, condition,
      prompt format, sample index and option order, so the import stores
      every response as that sample and reads its letter through the
      project's own parser and back through the option order.
    """
    folder = Path(folder)
    golds = gold_letters(items)
    pattern = answer_pattern(samples)
    folder.mkdir(parents=True, exist_ok=True)
    docs, rows, systems, settings = [], [], set(), set()
    for i, smp in enumerate(samples):
        gold = golds.get(smp.item_id)
        if gold is None or gold not in smp.perm:
            raise HarnessError(f"item {smp.item_id}: no gold letter among its options (answer_idx, or an answer text "
                               f"equal to one option, is needed to export the task's target)")
        msgs = smp.request.message_dicts()
        systems |= {m["content"] for m in msgs if m["role"] == "system"}
        users = [m["content"] for m in msgs if m["role"] == "user"]
        if len(users) != 1 or len(msgs) - len(users) > 1:
            raise HarnessError(f"sample {i} ({smp.item_id}, {smp.condition}): its format {smp.prompt_format!r} is not "
                               "one user turn (with at most a system turn): lm-eval cannot send it as written")
        p = smp.request.params
        settings.add((p.temperature, p.top_p, p.max_tokens))
        shown = string.ascii_uppercase[smp.perm.index(gold)]
        docs.append({"prompt": users[0], "messages": msgs, "target": shown, "item_id": smp.item_id,
                     "condition": smp.condition, "sample": smp.k, "permutation": smp.perm, "seed": p.seed})
        rows.append({"source_id": str(i), "item_id": smp.item_id, "condition": smp.condition,
                     "prompt_format": smp.prompt_format, "sample": smp.k, "permutation": smp.perm})
    if len(systems) > 1 or len(settings) != 1:
        raise HarnessError(f"the samples have {len(systems)} system prompts and {len(settings)} sampling settings: "
                           "a harness task takes one of each; export one format and one setting at a time")
    (temperature, top_p, max_tokens), = settings
    data = _write_jsonl(folder / f"{name}.jsonl", docs)
    system = next(iter(systems), None)
    yaml = folder / f"{name}.yaml"
    yaml.write_text(
        "# the study's design as it runs (medaudit.engines.harness.export_design): one document per sample, its own\n"
        "# option order; run with --apply_chat_template" + (" --system_instruction \"$(cat " + f"{name}_system.txt)\""
                                                     if system else "") + " so the model sees our chat prompt\n"
        + _task_head(name, data) +
        f"output_type: generate_until\n"
        'doc_to_text: "{{prompt}}"\n'
        'doc_to_target: "{{target}}"\n'
        f"repeats: 1\n"
        f"generation_kwargs:\n  until: []\n  do_sample: {str(bool(temperature)).lower()}\n"
        f"  temperature: {temperature}\n  top_p: {top_p}\n  max_gen_toks: {max_tokens}\n"
        "# the reply's letter as the project's parser reads it (medaudit.parse.pattern_of); no letter: no answer\n"
        f"filter_list:\n  - name: {FILTER}\n    filter:\n      - function: regex\n"
        f"        regex_pattern: {json.dumps(pattern)}\n        group_select: 0\n"
        f"        fallback: {json.dumps(NO_LETTER)}\n      - function: take_first\n"
        "metric_list:\n  - metric: exact_match\n", encoding="utf-8")
    out = [yaml, data]
    if system:
        (folder / f"{name}_system.txt").write_text(system, encoding="utf-8")
        out.append(folder / f"{name}_system.txt")
    inspect_data = _write_jsonl(folder / f"{name}_inspect.jsonl", (
        {"id": str(i), "input": d["messages"], "target": d["target"],
         "metadata": {k: d[k] for k in ("item_id", "condition", "sample", "permutation")}} for i, d in enumerate(docs)))
    task = folder / f"{name}_inspect.py"
    task.write_text(
        '"""The study\'s design as an Inspect task (written by medaudit.engines.harness.export_design): one sample\n'
        'per draw of the design, its own option order and chat messages; one epoch."""\n'
        "from pathlib import Path\n\n"
        "from inspect_ai import Task, task\n"
        "from inspect_ai.dataset import json_dataset\n"
        "from inspect_ai.model import GenerateConfig\n"
        "from inspect_ai.scorer import pattern\n"
        "from inspect_ai.solver import generate\n\n"
        "# the reply's letter as the project's parser reads it (medaudit.parse.pattern_of): case-sensitive, no letter\n"
        "# where two different ones are given\n"
        f"ANSWER = {pattern!r}\n\n\n"
        "@task\n"
        f"def {name}():\n"
        f"    data = str(Path(__file__).with_name({inspect_data.name!r}))\n"
        "    return Task(dataset=json_dataset(data), solver=generate(), scorer=pattern(ANSWER, ignore_case=False),\n"
        f"                epochs=1, config=GenerateConfig(temperature={temperature}, top_p={top_p}, "
        f"max_tokens={max_tokens}))\n", encoding="utf-8")
    mp = folder / f"{name}_map.csv"
    pd.DataFrame(rows, columns=["source_id", "item_id", "condition", "prompt_format", "sample", "permutation"]
                 ).to_csv(mp, index=False)
    return out + [task, inspect_data, mp]


def export_lm_eval_task(variants: pd.DataFrame, items: pd.DataFrame, folder: str | Path, name: str = "medaudit_mcq",
                        prompt_format: str = LOGLIK_FORMAT) -> list[Path]:
    """Our variants (item_id, condition, question) with their items' options
    as an lm-eval *log-likelihood* multiple-choice task — lm-eval's own
    "Answer:" prompt, options in their original order, one answer per
    document, no chat template, no K: not the study's design
    (:func:`export_design` is), so its answers are stored under a format
    of their own (:data:`LOGLIK_FORMAT`). ``<name>.jsonl`` (one doc per
    variant, ``doc_id`` = its line), ``<name>.yaml`` (the task) and
    ``<name>_map.csv`` (doc_id → item and condition, for the import)."""
    folder = Path(folder)
    docs = _variant_docs(variants, items)
    folder.mkdir(parents=True, exist_ok=True)
    data = _write_jsonl(folder / f"{name}.jsonl", docs)
    yaml = folder / f"{name}.yaml"
    yaml.write_text(
        _task_head(name, data) +
        "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}\\n{% for c in choices %}{{letters[loop.index0]}}. {{c}}\\n{% endfor %}Answer:"\n'
        'doc_to_choice: "{{letters}}"\n'
        "doc_to_target: target\n"
        "metric_list:\n  - metric: acc\n", encoding="utf-8")
    return [yaml, data, _variant_map(docs, folder / f"{name}_map.csv", prompt_format)]


def _variant_docs(variants: pd.DataFrame, items: pd.DataFrame) -> list[dict]:
    """One document per variant: its question, its item's options in their
    original order, the gold's index among them, item and condition."""
    opts = items.set_index("item_id")["options"].to_dict()
    golds = gold_letters(items)
    docs = []
    for v in variants.itertuples(index=False):
        o = opts[v.item_id]
        letters = sorted(o)
        gold = golds.get(v.item_id)
        if gold not in letters:
            raise HarnessError(f"item {v.item_id}: no gold letter among its options {letters} (answer_idx, or an "
                               f"answer text equal to one option, is needed to export the task's target)")
        docs.append({"question": v.question, "choices": [o[L] for L in letters], "letters": letters,
                     "target": letters.index(gold), "item_id": v.item_id, "condition": v.condition})
    return docs


def _variant_map(docs: list[dict], path: Path, prompt_format: str) -> Path:
    """The map of :func:`_variant_docs`' documents (source id = the line),
    every row under ``prompt_format``."""
    pd.DataFrame([{"source_id": str(i), "item_id": d["item_id"], "condition": d["condition"],
                   "prompt_format": prompt_format} for i, d in enumerate(docs)],
                 columns=["source_id", "item_id", "condition", "prompt_format"]).to_csv(path, index=False)
    return path


def export_inspect_task(variants: pd.DataFrame, items: pd.DataFrame, folder: str | Path, name: str = "medaudit_mcq",
                        prompt_format: str = INSPECT_FORMAT, epochs: int = 3) -> list[Path]:
    """The documents of :func:`export_lm_eval_task` as an Inspect task file
    ``<name>_inspect.py`` (+ ``<name>_inspect.jsonl``) with Inspect's own
    ``multiple_choice`` template (run: ``inspect eval <name>_inspect.py
    --model …``; ``epochs`` samples per question, all in the original option
    order) and its own map ``<name>_inspect_map.csv``: its sample ids are
    the map's source ids, so its log imports with :func:`import_log`, read
    as Inspect reads it (the last "ANSWER: X" line, any case). Not the
    study's design (:func:`export_design`): stored as
    :data:`INSPECT_FORMAT` — never under the lm-eval task's map, whose
    format is another (:func:`export_harness`)."""
    folder = Path(folder)
    docs = _variant_docs(variants, items)
    folder.mkdir(parents=True, exist_ok=True)
    mp = _variant_map(docs, folder / f"{name}_inspect_map.csv", prompt_format)
    inspect_data = _write_jsonl(Path(folder) / f"{name}_inspect.jsonl", (
        {"id": str(i), "input": d["question"], "choices": d["choices"], "target": d["letters"][d["target"]],
         "metadata": {"item_id": d["item_id"], "condition": d["condition"]}} for i, d in enumerate(docs)))
    task = Path(folder) / f"{name}_inspect.py"
    task.write_text(
        '"""Our variants as an Inspect task (written by medaudit.engines.harness.export_inspect_task)."""\n'
        "from pathlib import Path\n\n"
        "from inspect_ai import Task, task\n"
        "from inspect_ai.dataset import json_dataset\n"
        "from inspect_ai.scorer import choice\n"
        "from inspect_ai.solver import multiple_choice\n\n\n"
        "@task\n"
        f"def {name}(epochs: int = {int(epochs)}):\n"
        f"    data = str(Path(__file__).with_name({inspect_data.name!r}))\n"
        "    return Task(dataset=json_dataset(data), solver=multiple_choice(), scorer=choice(), epochs=epochs)\n",
        encoding="utf-8")
    return [task, inspect_data, mp]


def export_harness(variants: pd.DataFrame, items: pd.DataFrame, folder: str | Path, name: str = "medaudit_mcq",
                   epochs: int = 3) -> list[Path]:
    """``export --form harness``: the lm-eval log-likelihood task with its
    map (``<name>_map.csv``, :data:`LOGLIK_FORMAT`) and the Inspect task
    with its own (``<name>_inspect_map.csv``, :data:`INSPECT_FORMAT`): one
    map per format, so each harness's log is stored under its own."""
    return (export_lm_eval_task(variants, items, folder, name)
            + export_inspect_task(variants, items, folder, name, epochs=epochs))


# ==========================================================================
# what the harness itself reports, beside our accuracy on the same replies


def reported_accuracy(kind: str, path: str | Path, log=None) -> tuple[float, int]:
    """(accuracy, samples) as the harness itself reports them: lm-eval's
    results JSON (``results_<date>.json``: the one task's
    ``exact_match,<filter>``, :data:`FILTER` where there, its
    ``n-samples``), or an Inspect log's first score's ``accuracy`` and its
    scored samples (``log``: the EvalLog already read)."""
    path = Path(path)
    if kind == "lm-eval":
        try:
            r = json.loads(path.read_text(encoding="utf-8"))
            (task, res), = r["results"].items()
            n = int(r["n-samples"][task]["effective"])
        except (ValueError, KeyError, TypeError) as e:
            raise HarnessError(f"{path}: not an lm-eval results file of one task ({type(e).__name__}: {e})") from None
        keys = [k for k in res if k.startswith("exact_match,")]
        key = f"exact_match,{FILTER}" if f"exact_match,{FILTER}" in keys else (keys[0] if len(keys) == 1 else None)
        if key is None:
            raise HarnessError(f"{path}: task {task} reports {sorted(res)}, not one exact_match")
        return float(res[key]), n
    if kind == "inspect":
        log = log if log is not None else read_inspect(path)
        try:
            score = log.results.scores[0]
            return float(score.metrics["accuracy"].value), int(score.scored_samples)
        except (AttributeError, IndexError, KeyError, TypeError) as e:
            raise HarnessError(f"{path}: no accuracy in the log's results ({type(e).__name__}: {e})") from None
    raise HarnessError(f"reported accuracy: kind {kind!r} is not lm-eval or inspect")


def our_accuracy(store: ResponseStore, model: str, items: pd.DataFrame) -> tuple[float, int]:
    """(accuracy, samples) of ``model``'s stored answers: the parsed letter
    (mapped back through the option order) equal to the item's gold; an
    unparsed reply counts as not correct, as the harnesses count it."""
    f = store.frame("WHERE model = ?", (model,))
    if f.empty:
        raise HarnessError(f"{store.path}: no answers of model {model!r}")
    gold = f["item_id"].map(gold_letters(items))
    return float((f["parsed_answer"] == gold).mean()), len(f)


# ==========================================================================
# command line


def main(argv: list[str] | None = None) -> int:
    """python -m medaudit.engines.harness import KIND LOG --map MAP --model NAME --profile P [--version V]
    python -m medaudit.engines.harness export --profile P --out DIR [--name N] [--form design|harness] [--epochs K]
                                      [-p NAME VALUE]... [-y YAML]... [--run NAME]
    python -m medaudit.engines.harness agree KIND RESULTS --model NAME --profile P [--store S] [-p/-y/--run]

    ``export`` and ``agree`` read the run the overrides name, as the runner resolves it
    (:func:`medaudit.runner.resolve_run`): a run's own items and variants where it wrote them,
    else the default run's; ``export`` plans the design with the overrides' parameters (samples,
    conditions, decoding). ``import`` writes the profile's store, which every run shares."""
    import argparse
    import sys

    from medaudit import config, paths, runner

    def run_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("-p", "--parameters", dest="overrides", nargs=2, action=runner.Ordered,
                       metavar=("NAME", "VALUE"), help="a parameter override, as the runner reads it")
        p.add_argument("-y", "--parameters_yaml", dest="overrides", action=runner.Ordered, metavar="YAML",
                       help="overrides as a YAML mapping")
        p.add_argument("--run", default=None, help="the run's name (default: the one the overrides name)")

    ap = argparse.ArgumentParser(prog="python -m medaudit.engines.harness", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("import", help="import an lm-eval, HELM or Inspect log")
    i.add_argument("kind", choices=["lm-eval", "helm", "inspect"])
    i.add_argument("log", type=Path)
    i.add_argument("--map", required=True, type=Path, help="CSV: source_id, item_id, condition, prompt_format")
    i.add_argument("--model", required=True, help="the model name the analyses show")
    i.add_argument("--profile", required=True, help="the store outputs/<profile>/data/responses.sqlite")
    i.add_argument("--store", type=Path, help="another store file")
    i.add_argument("--version", default="", help="the harness version, where the log does not say")
    e = sub.add_parser("export", help="notebook 03's design as an lm-eval task and an Inspect task")
    e.add_argument("--profile", required=True)
    e.add_argument("--out", required=True, type=Path)
    e.add_argument("--name", default="medaudit_mcq")
    e.add_argument("--form", choices=["design", "harness"], default="design",
                   help="design: the study as it runs (one document per sample, our chat prompt, its option order, "
                        "sampled; the default); harness: lm-eval's log-likelihood task and Inspect's multiple_choice "
                        f"template (their own prompts, stored as {LOGLIK_FORMAT} / {INSPECT_FORMAT})")
    e.add_argument("--format", default=None, help="design: the prompt format (default: the profile's first)")
    e.add_argument("--epochs", type=int, default=3, help="harness form: Inspect epochs (K samples)")
    run_args(e)
    a = sub.add_parser("agree", help="the accuracy a harness reports against ours on the same (imported) replies")
    a.add_argument("kind", choices=["lm-eval", "inspect"])
    a.add_argument("results", type=Path, help="lm-eval: its results_<date>.json; inspect: the .eval log")
    a.add_argument("--model", required=True, help="the model name the replies were imported under")
    a.add_argument("--profile", required=True, help="the items (gold letters) and the default store")
    a.add_argument("--store", type=Path, help="another store file")
    run_args(a)
    args = ap.parse_args(argv)
    try:
        items_given = list(getattr(args, "overrides", None) or [])
        run = runner.resolve_run(args.profile, items_given, getattr(args, "run", None))[0]
    except (config.ConfigError, ValueError) as e:
        print(f"medaudit.engines.harness: {e}", file=sys.stderr)
        return 2
    try:
        with paths.in_run(run):
            return _command(args, items_given)
    except (HarnessError, importer.ResponseImportError, FileNotFoundError) as e:
        print(f"medaudit.engines.harness: {e}", file=sys.stderr)
        return 2


def _command(args, items_given: list) -> int:
    """One command of :func:`main`, inside the run it resolved."""
    from medaudit import config, paths, runner
    from medaudit.prep import data
    from medaudit.llm import mcq

    if args.cmd == "agree":
        items = pd.concat([data.load_frame(args.profile, "items"), data.load_frame(args.profile, "psych_items")])
        theirs = reported_accuracy(args.kind, args.results)
        with ResponseStore(args.store or paths.outputs(args.profile, "data", "responses.sqlite")) as store:
            ours = our_accuracy(store, args.model, items)
        same = theirs[1] == ours[1] and math.isclose(theirs[0], ours[0], abs_tol=1e-9)
        print(f"{args.kind} reports accuracy {theirs[0]:.4f} on {theirs[1]} samples; our parser "
              f"{ours[0]:.4f} on {ours[1]} ({round(ours[0] * ours[1])} correct): "
              + ("equal" if same else "NOT equal"))
        return 0 if same else 1
    if args.cmd == "import":
        store = ResponseStore(args.store or paths.outputs(args.profile, "data", "responses.sqlite"))
        got = import_log(args.kind, args.log, args.map, store, model=args.model, harness_version=args.version)
        print(json.dumps({k: v for k, v in got.items() if k not in ("unpaired", "missing")}))
        if got["unpaired"]:
            print(f"{len(got['unpaired'])} log rows not in the map (not stored): "
                  + ", ".join(got["unpaired"][:20]) + (" …" if len(got["unpaired"]) > 20 else ""))
        if got["missing"]:
            print(f"{len(got['missing'])} map rows have no answer in the log (a partial run, or perturbed copies "
                  "the harness skipped as unchanged): " + ", ".join(got["missing"][:20])
                  + (" …" if len(got["missing"]) > 20 else ""))
        if not got["harness_version"]:
            print(f"no harness version: the {args.kind} log does not record one; pass --version "
                  "(e.g. pip show crfm-helm) so the import's provenance says which harness wrote it")
    else:
        overrides, sources = runner.collect_overrides(items_given)
        p = config.load(args.profile, overrides, sources)
        items = pd.concat([data.load_frame(args.profile, "items"), data.load_frame(args.profile, "psych_items")])
        variants = mcq.select_variants(data.load_frame(args.profile, "variants"), p["infer_items"],
                                       p["infer_conditions"], p["infer_methods"], p["infer_subsets"])
        if args.form == "design":
            from medaudit.llm import GenParams

            gen = GenParams(p["temperature"], p["top_p"], p["max_tokens"])
            samples = mcq.plan(variants, items, model="export", backend="export", model_id="export",
                               k=p["k_samples"], seed=p["seed"], gen=gen,
                               prompt_format=args.format or p["prompt_formats"][0])
            files = export_design(samples, items, args.out, args.name)
        else:
            files = export_harness(variants, items, args.out, args.name, epochs=args.epochs)
        for f in files:
            print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
