"""The judge stage: every LLM judge of the project asks through here.

A judge reads a text (an explanation, an answer, a note, two answers) and
gives a verdict. The studies differ only in what they show the judge (their
messages) and in the verdict words; the stage is the same:

1. each job's request goes through the response store, greedy (temperature
   0), named by the job's item, condition and sample index ``k``, so a
   request asked again (by another clustering method, a rerun) is served
   from the store, and only for exactly the same judge, prompt and settings;
2. where a job names the response it judges (``judged_key``), a verdict
   *imported* for that response (``medaudit.llm.importer``: e.g. the
   authors' released judge labels) satisfies it, and the judge model is not
   asked; a generated verdict is stored with the key of what it judged;
3. the reply is read by the format's verdict parser
   (:data:`medaudit.llm.formats.FORMATS`) into ``verdict`` and ``status`` in the
   one status vocabulary of :mod:`medaudit.parse` (``missing`` where there
   is no reply: the request failed, or the stage is off and nothing was
   imported).

With no backend (``backend=None``: the judge stage is switched off) only
imported verdicts are read; nothing is loaded or asked.
"""
from __future__ import annotations

import pandas as pd

from medaudit.llm import formats
from medaudit import parse
from medaudit.llm import GenParams, ResponseStore
from medaudit.llm import runs

COLUMNS = ["judge", "reply", "verdict", "status", "source", "key", "finish_reason"]


def imported(store: ResponseStore, prompt_format: str, judged_keys) -> pd.DataFrame:
    """The imported verdicts of ``prompt_format`` on the responses
    ``judged_keys``: judged_key, judge (the judging model's name), reply."""
    f = store.where_in("judged_key", [k for k in judged_keys if isinstance(k, str)],
                       "source = 'imported' AND prompt_format = ?", (prompt_format,))
    return (f.sort_values(["judged_key", "model"], kind="stable")
            .rename(columns={"model": "judge", "response_text": "reply"})[["judged_key", "judge", "reply"]]
            .reset_index(drop=True))


def unserved(store: ResponseStore, prompt_format: str, jobs: pd.DataFrame) -> pd.Series:
    """Which ``jobs`` no imported verdict serves (the ones a judge model
    must be asked for): a boolean per job."""
    if "judged_key" not in jobs or jobs.empty:
        return pd.Series(True, index=jobs.index)
    have = set(imported(store, prompt_format, jobs["judged_key"])["judged_key"])
    return ~jobs["judged_key"].isin(have)


def ask(backend, store: ResponseStore, jobs: pd.DataFrame, *, model: str | None, prompt_format: str, seed: int,
        max_tokens: int, use_imported: bool = True, progress: bool = True) -> pd.DataFrame:
    """Verdicts on ``jobs`` (item_id, condition, messages; optional ``k``,
    ``stem_chars`` and ``judged_key``, the store key of the judged response).

    Returns the jobs' columns without ``messages``, plus ``judge`` (the
    model that gave the verdict), ``reply``, ``verdict``, ``status`` and
    ``source`` (``imported`` | ``generated`` | None when missing) and
    ``key`` and ``finish_reason``, the store key of the request sent for
    the job and why its reply ended ("length": cut by ``max_tokens``; both
    None where an imported verdict served it or the stage is off). A job
    whose response has imported verdicts gets one row per importing judge
    (``use_imported=False`` ignores them); every other job gets one row, from
    ``model`` (``backend`` None: the stage is off, status ``missing``).
    """
    parser = formats.verdict_parser(prompt_format)
    jobs = jobs.reset_index(drop=True)
    base = jobs.drop(columns=["messages"]).assign(_job=range(len(jobs)))
    have = pd.DataFrame(columns=["judged_key", "judge", "reply"])
    if use_imported and "judged_key" in jobs:
        have = imported(store, prompt_format, jobs["judged_key"])
    served = jobs["judged_key"].isin(set(have["judged_key"])) if len(have) else pd.Series(False, index=jobs.index)
    todo = jobs[~served]
    replies: list = [None] * len(todo)
    keys: list = [None] * len(todo)
    finish: list = [None] * len(todo)
    if backend is not None and len(todo):
        got = runs.replies(backend, store, todo, model=model, seed=seed, gen=GenParams(0.0, 1.0, max_tokens),
                           prompt_format=prompt_format, progress=progress)
        replies, keys, finish = list(got["reply"]), list(got["key"]), list(got["finish_reason"])
    asked = base[~served].assign(judge=model if backend is not None else None, reply=replies, key=keys,
                                 finish_reason=finish,
                                 source=["generated" if isinstance(r, str) else None for r in replies])
    parts = [asked]
    if served.any():
        parts.append(base[served].merge(have, on="judged_key", how="left").assign(source="imported", key=None,
                                                                                          finish_reason=None))
    out = pd.concat(parts, ignore_index=True).sort_values("_job", kind="stable")
    out = out.reset_index(drop=True)
    read = parse.read([r if isinstance(r, str) else None for r in out["reply"]], parser)
    for col, values in (("verdict", [v for v, _ in read]), ("status", [st for _, st in read]),
                        ("judge", out["judge"]), ("reply", out["reply"]), ("source", out["source"]),
                        ("key", out["key"]), ("finish_reason", out["finish_reason"])):
        # object columns: a verdict that is not there stays None, as the parsers return it
        out[col] = pd.Series([v if isinstance(v, str) else None for v in values], dtype=object)
    return out[[*jobs.columns.drop("messages"), *COLUMNS]]
