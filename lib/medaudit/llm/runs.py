"""Running requests through the response store: the one runner every
model stage uses (multiple-choice answers, free text, judges, agents).

A request is planned as a :class:`Sample` (its item, condition, prompt
format, sample index and, for a multiple-choice format, the permutation the
options were shown in); its key names exactly the backend, the model's
identity, the messages and the settings (:func:`medaudit.llm.base.request_key`).
:func:`run` sends what the store lacks and stores every result as it
arrives; :func:`send` is the short form for free text (one reply per job).
Scoring reads the prompt format's parser from :data:`medaudit.llm.formats.FORMATS`.
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass, field, replace

import pandas as pd

from medaudit.llm import formats
from .. import progress as _progress
from .. import parse as _parse
from . import dispatch as _dispatch
from .base import BackendStopped, Completion, GenParams, Request, derive_seed, request_key
from .store import ResponseStore


@dataclass
class Sample:
    """One planned request: its item, condition, prompt format, sample index ``k`` and
    option permutation, the request itself, its store key, and what a stage carries beside it
    (``meta``, e.g. the key of the answer a judge reads)."""
    item_id: str
    condition: str
    prompt_format: str
    k: int
    perm: str
    request: Request
    key: str = ""
    meta: dict = field(default_factory=dict)


def plan_free(prompts: pd.DataFrame, *, backend: str, model_id: str, k: int, seed: int, gen: GenParams,
              prompt_format: str, first_k: int = 0) -> list[Sample]:
    """Free-text samples (open-ended answers, notes, judge verdicts, agent
    attempts) through the same store: ``prompts`` has item_id, condition and
    messages (a list of chat messages). No options, so no permutation; the
    text is stored unparsed (the notebook that owns the format parses it).
    Sample indices run from ``first_k`` (an agent's attempt number). An
    optional ``stem_chars`` column gives the characters at the start of the
    last message that the item's prompts share (a dialog before its
    counterfactual turn): a local backend evaluates them once per item."""
    out = []
    stems = prompts["stem_chars"] if "stem_chars" in prompts else [None] * len(prompts)
    judged = prompts["judged_key"] if "judged_key" in prompts else [None] * len(prompts)
    for v, stem, jk in zip(prompts.itertuples(index=False), stems, judged):
        for kk in range(first_k, first_k + k):
            g = replace(gen, seed=derive_seed("sample", seed, v.item_id, v.condition, prompt_format, kk))
            req = Request.chat(list(v.messages), g, stem_chars=None if pd.isna(stem) else int(stem),
                               labels=(("item_id", v.item_id), ("condition", v.condition),
                                       ("prompt_format", prompt_format), ("k", kk),
                                       ("judged_key", jk if isinstance(jk, str) else "")))
            s = Sample(v.item_id, v.condition, prompt_format, kk, "", req,
                       meta={"judged_key": jk} if isinstance(jk, str) else {})
            s.key = request_key(backend, model_id, req, item_id=v.item_id, condition=v.condition,
                                prompt_format=prompt_format, k=kk, perm="")
            out.append(s)
    return out


def status_of(status, finish_reason, prompt_format: str):
    """A parse status with truncation told apart: an unparsed reply that
    ended at the token limit (``finish_reason`` "length") is
    :data:`medaudit.parse.TRUNCATED`, except in a format that sets its own
    limit (``mcq_option``'s one token: its reply is complete by design)."""
    if (isinstance(status, str) and status not in (_parse.OK, _parse.TRUNCATED) and finish_reason == "length"
            and formats.get(prompt_format).max_tokens is None):
        return _parse.TRUNCATED
    return status


def mark_truncated(responses: pd.DataFrame) -> pd.DataFrame:
    """Stored responses with ``parse_status`` told apart by
    :func:`status_of` (rows stored before truncation was told apart say
    "no_answer"); a frame without ``finish_reason`` is returned as it is."""
    if responses.empty or "finish_reason" not in responses or "parse_status" not in responses:
        return responses
    known = {p: formats.known(p) for p in pd.unique(responses["prompt_format"])}
    st = [status_of(s, f, p) if known[p] else s
          for s, f, p in zip(responses["parse_status"], responses["finish_reason"], responses["prompt_format"])]
    return responses.assign(parse_status=st)


def score(sample: Sample, c: Completion) -> dict:
    """Parse one completion and map the shown letter back to the original
    (formats without a parser here are stored unparsed)."""
    parser = formats.answer_parser(sample.prompt_format)
    if parser is None or not sample.perm:
        return {"parsed_answer": None, "parse_status": None, "letter_logprobs": None,
                "answer_logprob": c.answer_logprob}
    shown = string.ascii_uppercase[:len(sample.perm)]
    letter, status = parser(c.text, shown)
    status = status_of(status, c.finish_reason, sample.prompt_format)
    original = sample.perm[shown.index(letter)] if letter else None
    lp = ({sample.perm[shown.index(L)]: v for L, v in c.letter_logprobs.items()}
          if c.letter_logprobs else None)
    return {"parsed_answer": original, "parse_status": status, "letter_logprobs": lp,
            "answer_logprob": c.answer_logprob}


def row(sample: Sample, c: Completion, *, model: str, backend: str, model_id: str) -> dict:
    """The store row of one completion. Where the backend sent other
    settings than the request's (``c.settings``: a reasoning API takes no
    temperature), the columns record what was sent."""
    p = sample.request.params
    temperature, top_p, max_tokens = p.temperature, p.top_p, p.max_tokens
    if (sent := c.settings) is not None:
        temperature, top_p = sent.get("temperature"), sent.get("top_p")
        max_tokens = sent.get("max_tokens", sent.get("max_completion_tokens", p.max_tokens))
    return {
        "key": sample.key, "source": "generated", "backend": backend, "model": model,
        "model_id": model_id, "item_id": sample.item_id, "condition": sample.condition,
        "prompt_format": sample.prompt_format, "sample": sample.k, "permutation": sample.perm,
        "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": p.seed,
        "prompt": json.dumps(sample.request.message_dicts(), ensure_ascii=False),
        "response_text": c.text, **score(sample, c),
        "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "latency_s": c.latency_s,
        "retries": c.retries, "cost_usd": c.cost_usd, "finish_reason": c.finish_reason or None,
        "served_model": c.served_model or None, "settings": c.settings,
        "judged_key": sample.meta.get("judged_key"),
        "top_k": p.extras().get("top_k"), "repetition_penalty": p.extras().get("repetition_penalty"),
    }


def prefix_order(samples: list[Sample]) -> list[Sample]:
    """Order so that the samples of one question run one after another: the
    local backend then evaluates the question's stem once and only each
    sample's options and instruction after it. The order changes no result
    (every sample carries its own seed)."""
    return sorted(samples, key=lambda s: (s.request.messages[:-1], s.item_id, s.condition,
                                          s.request.messages[-1][1]))


class IncompleteRun(RuntimeError):
    """Some planned requests failed: the message says how many, why (the
    backend's words, e.g. the server's status and message) and where the
    first one was. What was answered is stored; a rerun asks only for the rest."""


@dataclass
class RunReport:
    """What :func:`run` did, counted truthfully.

    ``planned``: samples in the plan; ``cached``: already stored;
    ``generated``: answered and stored now; ``failed``: sent and failed
    (not stored); ``too_long``: not sent, the prompt cannot fit the model's
    context; ``not_sent``: left when the backend stopped early.
    ``failures``: one row per kind of failure (kind, error, count, and the
    first sample it hit); ``skipped``: every too-long sample by name (item,
    condition, sample, tokens and limit in ``error``). ``other_settings``:
    how many planned samples are stored for this model name under other
    settings, and which settings differ — why those answers are not reused.
    """

    planned: int = 0
    cached: int = 0
    generated: int = 0
    failed: int = 0
    too_long: int = 0
    not_sent: int = 0
    other_settings: dict = field(default_factory=dict)
    failures: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["kind", "error", "count", "first"]))
    skipped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["item_id", "condition", "sample", "error"]))
    stopped: str = ""

    COUNTS = ("planned", "cached", "generated", "failed", "too_long", "not_sent")

    def __getitem__(self, name: str) -> int:       # counts["generated"], as the dict this replaced
        if name not in self.COUNTS:
            raise KeyError(name)
        return getattr(self, name)

    def counts(self) -> dict:
        """The run's counts by name: planned, cached, generated, failed, too long, not sent."""
        return {c: getattr(self, c) for c in self.COUNTS}

    def _details(self, failed: str, stopped: str) -> list[str]:
        """One indented line per kind of failure, per skipped sample and for an early stop."""
        return ([f"  {failed}{f.count}x [{f.kind}] {f.error} (first: {f.first})"
                 for f in self.failures.itertuples(index=False)]
                + [f"  skipped {f.item_id} / {f.condition} / k={f.sample}: {f.error}"
                   for f in self.skipped.itertuples(index=False)]
                + ([f"  {stopped}: {self.stopped}"] if self.stopped else []))

    def __repr__(self) -> str:
        out = "; ".join(f"{c.replace('_', ' ')} {getattr(self, c)}" for c in self.COUNTS)
        if self.other_settings:
            out += "; stored under other settings (not reused): " + ", ".join(
                f"{k} {v}" for k, v in self.other_settings.items())
        return "\n".join([out, *self._details("failed ", "stopped early")])

    def message(self) -> str:
        """A sentence for an error: what failed, why, where first."""
        head = (f"{self.failed + self.not_sent} of {self.planned} planned requests were not answered "
                f"({self.failed} failed, {self.not_sent} not sent after the backend stopped); "
                f"{self.cached + self.generated} are stored and are kept; rerun to ask for the rest.")
        return "\n".join([head, *self._details("", "the backend stopped")])

    def check(self) -> "RunReport":
        """Raise :class:`IncompleteRun` if any sent request failed or was
        left unsent (too-long prompts are skipped and named, not errors)."""
        if self.failed or self.not_sent:
            raise IncompleteRun(self.message())
        return self


def _label(s: Sample) -> str:
    return f"{s.item_id} / {s.condition} / {s.prompt_format} k={s.k}"


_ITEMS_PER_QUERY = 500     # SQLite's bound on a statement's parameters is far above it


def _other_settings(store: ResponseStore, model: str, backend: str, model_id: str, todo: list[Sample]) -> dict:
    """For planned samples not in the store: how many of them the store holds
    for the same model name (item, condition, format, k) under another key,
    by the setting that differs (source, backend, model identity,
    temperature, top-p, max tokens; else the prompt itself) — why those
    stored answers are not reused."""
    if not todo:
        return {}
    fmts = sorted({s.prompt_format for s in todo})
    items = sorted({s.item_id for s in todo})
    cols = ["item_id", "condition", "prompt_format", "sample", "source", "backend", "model_id",
            "temperature", "top_p", "max_tokens"]
    stored = {}
    # the planned questions' rows only (the store's (model, item_id, condition) index), a chunk of
    # questions at a time: what a run reads here grows with what it plans, not with the store
    for i in range(0, len(items), _ITEMS_PER_QUERY):
        chunk = items[i:i + _ITEMS_PER_QUERY]
        q = (f"SELECT {', '.join(cols)} FROM responses WHERE model = ? "
             f"AND item_id IN ({','.join('?' * len(chunk))}) "
             f"AND prompt_format IN ({','.join('?' * len(fmts))}) ORDER BY created_at")
        stored.update({tuple(r[:4]): r[4:] for r in store.query(q, (model, *chunk, *fmts))})
    out: dict[str, int] = {}
    for s in todo:
        old = stored.get((s.item_id, s.condition, s.prompt_format, s.k))
        if old is None:
            continue
        p = s.request.params
        now = ("generated", backend, model_id, p.temperature, p.top_p, p.max_tokens)
        diffs = [name for name, a, b in zip(cols[4:], now, old) if not _same(a, b)]
        why = ", ".join(diffs) or "prompt"
        out[why] = out.get(why, 0) + 1
    return out


def _same(a, b) -> bool:
    try:
        return abs(float(a) - float(b)) < 1e-9
    except (TypeError, ValueError):
        return a == b


def run(backend, store: ResponseStore, samples: list[Sample], *, model: str, progress: bool = True,
        dispatch: _dispatch.Direct | None = None) -> RunReport:
    """Draw every sample not yet in the store; each is stored as it arrives.

    Returns a :class:`RunReport` (planned, cached, generated = stored now,
    failed, too long, not sent; the failures by kind with the backend's
    words). A failed request is not stored, so a rerun asks again. If the
    backend stops early (:class:`BackendStopped`: the same failure on every
    request) the report is attached to the error and everything answered
    before is kept.

    Answers of ``model`` that were imported (another harness) and generated
    answers never share a model name: that would let one hide the other in
    the analyses, so a name under which answers were imported is refused
    here. If the backend changes its identity while running (it learned the
    endpoint's API dialect), results are stored under keys of the new
    identity and the samples' ``key`` updated.

    ``dispatch`` decides what happens to the samples the store lacks
    (:mod:`medaudit.llm.dispatch`: send them, collect them into a batch
    manifest, send one shard of them, or refuse them in a stored-only run);
    None reads the policy from the environment (:func:`dispatch.from_env`).
    """
    policy = dispatch if dispatch is not None else _dispatch.from_env()
    fmts = sorted({s.prompt_format for s in samples})
    n_imported = store.count_answers(model, fmts, "imported")
    if n_imported:
        raise ValueError(f"{store.path}: the store holds {n_imported} imported answers under the model name "
                         f"'{model}' ({', '.join(fmts)}); generated answers under the same name would "
                         f"mix with them in the analyses. Give this model another name (its `name` "
                         f"parameter), or import the other answers under another name.")
    have = store.has(s.key for s in samples)
    todo = prefix_order([s for s in samples if s.key not in have])
    n_todo = len(todo)
    todo = policy.select(backend, todo, model=model)
    report = RunReport(planned=len(samples), cached=len(have))
    report.other_settings = _other_settings(store, model, backend.kind, backend.model_id, todo)
    planned_id = backend.model_id
    seen: set[int] = set()
    failures: dict[tuple[str, str], list] = {}
    skipped = []

    def on_result(i: int, c: Completion) -> None:
        seen.add(i)
        s = todo[i]
        if c.error:          # not stored: a rerun asks again
            kind = c.error_kind or "error"
            if kind == "too_long":
                report.too_long += 1
                skipped.append({"item_id": s.item_id, "condition": s.condition, "sample": s.k, "error": c.error})
                return
            report.failed += 1
            f = failures.setdefault((kind, c.error), [0, _label(s)])
            f[0] += 1
            return
        if backend.model_id != planned_id:   # the backend learned a new identity mid-run
            s.key = request_key(backend.kind, backend.model_id, s.request, item_id=s.item_id, condition=s.condition,
                                prompt_format=s.prompt_format, k=s.k, perm=s.perm)
        store.put(row(s, c, model=model, backend=backend.kind, model_id=backend.model_id))
        report.generated += 1

    # one line per stage, in the console and the notebook (medaudit.progress); the backend's own bar stays off
    bar = (_progress.bar(len(todo), f"{model} · {', '.join(sorted({s.prompt_format for s in todo}))}", "req")
           if todo and progress else None)

    def shown(i: int, c: Completion) -> None:
        on_result(i, c)
        bar.update(1)
        bar.set_postfix(failed=report.failed, too_long=report.too_long)

    try:
        if todo:
            backend.complete([s.request for s in todo], progress=False, on_result=shown if bar else on_result)
    except BackendStopped as e:
        report.stopped = e.summary
        report.not_sent = len(todo) - len(seen)
        _finish(report, failures, skipped)
        raise BackendStopped(f"{e.summary}\n{report.message()}") from e
    finally:
        if bar is not None:
            bar.close()
    _finish(report, failures, skipped)
    policy.after(n_todo, len(todo), report)
    return report


def _finish(report: RunReport, failures: dict, skipped: list) -> None:
    report.failures = pd.DataFrame([{"kind": k, "error": e, "count": n, "first": first}
                                    for (k, e), (n, first) in failures.items()],
                                   columns=["kind", "error", "count", "first"])
    report.skipped = pd.DataFrame(skipped, columns=["item_id", "condition", "sample", "error"])


def dry_run(samples: list[Sample], pricing: dict | None = None, chars_per_token: float = 4.0) -> pd.DataFrame:
    """What a run would ask for, before anything runs: requests, estimated
    prompt and completion tokens and, for a priced model, the cost."""
    n = len(samples)
    tin = sum(sum(len(c) for _, c in s.request.messages) for s in samples) / chars_per_token
    tout = sum(s.request.params.max_tokens for s in samples)
    rows = [("requests", n), ("estimated prompt tokens", round(tin)),
            ("max completion tokens", tout)]
    if pricing:
        cost = tin / 1e6 * pricing.get("input_per_mtok", 0) + tout / 1e6 * pricing.get("output_per_mtok", 0)
        rows.append(("estimated cost (USD, upper bound)", round(cost, 4)))
    return pd.DataFrame(rows, columns=["what", "value"]).set_index("what")


def replies(backend, store: ResponseStore, jobs: pd.DataFrame, *, model: str, seed: int, gen: GenParams,
            prompt_format: str, progress: bool = False) -> pd.DataFrame:
    """One reply per job, through the store (no checking, no revision): a
    judge's verdict, a note, an open answer. ``jobs`` has item_id,
    condition and messages, optionally ``k`` (the sample index that names
    the request, so the same request asked again, by another clustering
    method say, is served from the store; default 0), ``stem_chars`` (see
    :func:`plan_free`) and ``judged_key`` (a verdict's judged response,
    stored with it). Returns, in job order, ``key`` (the store key),
    ``reply`` (None where the backend failed: not stored, a rerun asks
    again) and ``finish_reason`` (why the reply ended: "length" when the
    token limit cut it; None where the backend did not say)."""
    cols = [c for c in ("item_id", "condition", "messages", "stem_chars", "judged_key") if c in jobs]
    ks = jobs["k"] if "k" in jobs else [0] * len(jobs)
    samples = [plan_free(jobs.loc[[pos], cols], backend=backend.kind, model_id=backend.model_id, k=1,
                         seed=seed, gen=gen, prompt_format=prompt_format, first_k=int(k))[0]
               for pos, k in zip(jobs.index, ks)]
    run(backend, store, samples, model=model, progress=progress)
    got = store.by_keys(s.key for s in samples).set_index("key")
    keys = [s.key for s in samples]
    return pd.DataFrame({"key": keys,
                         "reply": pd.Series([got["response_text"].get(k) for k in keys], dtype=object),
                         "finish_reason": pd.Series([_said(got["finish_reason"].get(k)) for k in keys], dtype=object)},
                        columns=["key", "reply", "finish_reason"])


def _said(x) -> str | None:
    """A stored text, None where the column is empty (NULL reads as NaN)."""
    return x if isinstance(x, str) and x else None


def send(backend, store: ResponseStore, jobs: pd.DataFrame, **kw) -> list[str | None]:
    """:func:`replies`, the texts only (a list in job order)."""
    return list(replies(backend, store, jobs, **kw)["reply"])
