"""LLM agents that write question variants: ask, clean, check, revise.

One loop serves every augmenter (the cultural few-shot augmenter of seed 003
here; the generation and fusion agents of seed 001 use the same loop). For
each job (an item and a target condition with its chat messages):

1. the messages go through the response store (:func:`medaudit.llm.runs.plan_free`,
   attempt *a* is sample *a*: its own seed, cached, resumable);
2. the output is read (by default :func:`clean_output`: code fences,
   "Edited:" labels, wrapping quotes; a caller may pass its own ``read``,
   e.g. for a JSON reply, which raises ``ValueError`` on a reply it cannot
   read: that attempt fails with the problem "unreadable: …");
3. ``check(job, text)`` returns the list of problems (empty = accepted);
4. while problems remain and attempts are left, the agent gets its own output
   back with the problems listed (``prompts/agent_revise.txt``) and tries
   again.

Every attempt is recorded (:func:`run`'s ``attempts`` table), accepted or
not; a job that never passes is reported as failed, never silently used.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from medaudit import prompts
from medaudit.llm import GenParams, ResponseStore, runs

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```\s*$", re.S)
_LABEL = re.compile(r"^\s*\**\s*(?:(?:edited|rewritten|revised|modified|new)\s*)?"
                    r"(?:question|phrase|sentence|output|answer)?\s*\**\s*:\s*\**\s*", re.I)
_NEXT = re.compile(r"\n\s*\n\s*(?:\**\s*)?(?:original|example|note|explanation|options?|answer)\b", re.I)
_QUOTES = {'"': '"', "“": "”", "'": "'"}


def clean_output(text: str | None) -> str:
    """The edited text inside an agent's reply: without a surrounding code
    fence, a leading label ("Edited:", "**Rewritten question:**"), anything
    after a blank line that starts another section ("Original:", "Note:",
    "Options:", …) and one pair of wrapping quotes; whitespace trimmed."""
    t = (text or "").strip()
    m = _FENCE.match(t)
    if m:
        t = m.group(1).strip()
    t = _LABEL.sub("", t, count=1).strip()
    m = _NEXT.search(t)
    if m:
        t = t[:m.start()].strip()
    if len(t) >= 2 and t[0] in _QUOTES and t[-1] == _QUOTES[t[0]] and t[0] not in t[1:-1] \
            and t[-1] not in t[1:-1]:
        t = t[1:-1].strip()
    return t


_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


def json_object(raw: str | None) -> dict:
    """The JSON object in an agent's reply: from the first ``{`` to the last
    ``}`` (so a code fence or a sentence around it does not matter).
    Raises ``ValueError`` when there is none, it does not parse, or it is
    not an object; as a ``read`` of :func:`run` that counts as
    "unreadable"."""
    m = _JSON_OBJECT.search(raw or "")
    if not m:
        raise ValueError("no JSON object in the reply")
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError("the reply is not a JSON object")
    return obj


def revision_messages(messages: list[dict], previous: str, problems: list[str]) -> list[dict]:
    """The messages of a revision: the original request, the agent's last
    output as its own turn, then the problems to fix."""
    listed = "\n".join(f"- {p}" for p in problems)
    return [*messages, {"role": "assistant", "content": previous},
            {"role": "user", "content": prompts.load("agent_revise").format(problems=listed)}]


@dataclass
class AgentRun:
    """What :func:`run` returns.

    ``attempts``: one row per attempt: item_id, condition, attempt (0 = first
    try), key (the store row), raw (the reply), finish_reason (why the reply
    ended: "length" when ``max_tokens`` cut it; None where the backend did
    not say), text (cleaned), problems (list), ok. ``results``: one row per job: item_id, condition, ok, text
    (the accepted text, or the last attempt's when none passed), attempts
    (how many were made), problems (of the last attempt).
    """

    attempts: pd.DataFrame
    results: pd.DataFrame

    def summary(self) -> pd.DataFrame:
        """The loop's counts as a table: jobs, accepted (at the first attempt, after a
        revision), failed after every attempt, and attempts made."""
        r, a = self.results, self.attempts
        rows = [("jobs", len(r)), ("accepted", int(r["ok"].sum())),
                ("  at the first attempt", int(((r["attempts"] == 1) & r["ok"]).sum())),
                ("  after a revision", int(((r["attempts"] > 1) & r["ok"]).sum())),
                ("failed after every attempt", int((~r["ok"]).sum())),
                ("attempts made", len(a))]
        return pd.DataFrame(rows, columns=["what", "value"])

    def problem_counts(self) -> pd.DataFrame:
        """How often each problem occurred, over all attempts (the text
        before the first ':' names the problem)."""
        p = self.attempts["problems"].explode().dropna()
        kinds = p.str.split(":").str[0]
        return kinds.value_counts().rename_axis("problem").reset_index(name="attempts")


def run(backend, store: ResponseStore, jobs: pd.DataFrame, check: Callable[[object, str], list[str]], *,
        model: str, seed: int, gen: GenParams, prompt_format: str, max_attempts: int = 3,
        revise: bool = True, attempt_offset: int = 0, progress: bool = True,
        read: Callable[[str], str] = clean_output) -> AgentRun:
    """Send every job, check each output, revise the failing ones.

    ``jobs`` has item_id, condition and messages (plus any columns ``check``
    needs: it receives the job's row and the cleaned text and returns a list
    of problems, empty when the text is accepted). ``max_attempts`` counts
    the first try: 3 = one try and up to two revisions. ``revise=False``
    retries with the first messages and a new seed instead of showing the
    agent its output and the problems. ``attempt_offset`` numbers the
    attempts from there (a caller that runs rounds of several agents gives
    each round its own attempt numbers, hence its own seeds). All attempts of one
    round are sent together, so a local backend keeps its shared prompt
    prefix warm. ``read`` turns a reply into the text that is checked and
    kept (default :func:`clean_output`); a ``ValueError`` it raises fails
    the attempt as "unreadable: <its message>", with the cleaned reply kept.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    jobs = jobs.reset_index(drop=True)
    pending = jobs.assign(current=jobs["messages"])
    attempts, final = [], {}
    for a in range(max_attempts):
        if pending.empty:
            break
        samples = runs.plan_free(pending[["item_id", "condition", "current"]].rename(columns={"current": "messages"}),
                                backend=backend.kind, model_id=backend.model_id, k=1, seed=seed, gen=gen,
                                prompt_format=prompt_format, first_k=attempt_offset + a)
        report = runs.run(backend, store, samples, model=model, progress=progress)
        got = store.by_keys([s.key for s in samples]).set_index("key")
        retry = []
        for (_, job), s in zip(pending.iterrows(), samples):
            if s.key not in got.index:
                raise runs.IncompleteRun(f"agent attempt {a} of {job['item_id']} / {job['condition']} was not "
                                        f"answered:\n{report.message()}")
            raw, finish = got.at[s.key, "response_text"], got.at[s.key, "finish_reason"]
            try:
                text, problems = read(raw), None
            except ValueError as e:
                text, problems = clean_output(raw), [f"unreadable: {e}"]
            if problems is None:
                problems = list(check(job, text))
            attempts.append({"item_id": job["item_id"], "condition": job["condition"], "attempt": attempt_offset + a,
                             "key": s.key, "raw": raw,
                             "finish_reason": finish if isinstance(finish, str) and finish else None,
                             "text": text, "problems": problems, "ok": not problems})
            final[(job["item_id"], job["condition"])] = (not problems, text, a + 1, problems)
            if problems and a + 1 < max_attempts:
                current = (revision_messages(job["messages"], raw, problems) if revise
                           else job["messages"])
                retry.append({**job.to_dict(), "current": current})
        pending = pd.DataFrame(retry)
    results = pd.DataFrame([{"item_id": i, "condition": c, "ok": ok, "text": t, "attempts": n, "problems": p}
                            for (i, c), (ok, t, n, p) in final.items()])
    return AgentRun(pd.DataFrame(attempts), results)
