"""OpenAI-compatible chat backend: the OpenAI API or any server that speaks
its protocol (llama.cpp's server, vLLM, …).

Requests run on a bounded thread pool (``concurrency`` in flight at most);
each completion is handed to ``on_result`` on the calling thread the moment
it arrives, so a run stores what it has even if it is stopped half way.

Faults are retried here, not by the openai client (``max_retries=0``), so
that every retry is counted: rate limits (429), request timeouts (408),
server errors (5xx), timeouts, connection errors and malformed responses
are retried with exponential backoff and full jitter, or after the server's ``Retry-After``
when it sends one (capped at ``backoff_max_s``). Other 4xx are not retried.
A request that still fails after ``max_retries`` retries comes back as a
:class:`Completion` with ``error`` set: one bad request never stops the run,
and the store does not keep it, so a rerun asks again.

Malformed, as the openai client (3.x) shows it with ``max_retries=0``: a
truncated or empty JSON body raises ``json.JSONDecodeError`` unwrapped; a
body served as text/html comes back as a ``str`` (a JSON list as a
``list``) instead of a ChatCompletion; JSON without ``choices`` becomes a
ChatCompletion whose ``choices`` is None; a choice without ``message`` has
``message`` None. All of these count as malformed and are retried;
``APIResponseValidationError`` (strict validation) is too.

The API key is read from the environment variable named by ``api_key_env``
only. It lives in the openai client and nowhere else; ``repr`` does not show
it, the backend refuses to be pickled, and error messages (a server may echo
the key in a 401) are scrubbed of it before they go into a Completion or a
log record. A local ``base_url`` needs no key and ignores HTTP(S)_PROXY.

Log-probs: with ``answer_letters`` set the request asks for the top 20
log-probs of each generated token. If the server answers that it does not
do log-probs (a 400 that mentions them; or a 5xx saying they are not
supported, as llama_cpp.server started with ``--logits_all false`` does),
the request is sent again without, and later ones never ask. The answer
position is the first token that opens the bracket — "[B" (or " [B") in one token, or "[" then "B" — and
``letter_logprobs`` holds the letters found among that position's top 20, in
the same form as the chosen token ("[A" beside "[B", "A" beside "B"). Letters
outside the top 20 are absent: unlike the llamacpp backend, this is not the
full distribution over the letters.
"""
from __future__ import annotations

import email.utils
import logging
import os
import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable
from urllib.parse import urlparse

from .base import Completion, Request

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
TOP_LOGPROBS = 20
PLACEHOLDER_KEY = "not-needed"


class MalformedResponse(Exception):
    """A 200 response without a usable chat completion in it."""


def _load_openai():
    try:
        import openai
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the openai backend needs the openai package: pip install openai") from None
    return openai


def _is_local(base_url: str | None) -> bool:
    return bool(base_url) and (urlparse(base_url).hostname or "") in LOCAL_HOSTS


def retry_after_s(headers) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``Retry-After``
    in seconds or as an HTTP date), or None."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
    except (TypeError, ValueError):
        pass
    v = headers.get("retry-after")
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(v)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _alt_pairs(pos) -> list[tuple[str, float]]:
    """(token text, logprob) of a position's top alternatives."""
    return [(a.token, a.logprob) for a in (getattr(pos, "top_logprobs", None) or [])]


def _same_form(alts: list[tuple[str, float]], chosen: str, at: int, letters: tuple[str, ...],
               chosen_letter: str, chosen_lp: float) -> dict[str, float]:
    """Log-probs of the alternatives that are ``chosen`` with its letter (at
    index ``at``) swapped for another of ``letters``."""
    out: dict[str, float] = {}
    forms = {chosen[:at] + L + chosen[at + 1:]: L for L in letters}
    for tok, lp in alts:
        L = forms.get(tok)
        if L is not None and L not in out:
            out[L] = float(lp)
    out[chosen_letter] = float(chosen_lp)   # the chosen token, even if top-k left it out
    return out


def answer_position(content, letters: tuple[str, ...]) -> tuple[float | None, dict[str, float] | None]:
    """(log-prob of the chosen answer letter, {letter: log-prob}) at the
    first token that opens the bracket; (None, None) when there is none.

    ``content`` is ``choices[0].logprobs.content``: a list of tokens with
    ``token``, ``logprob`` and ``top_logprobs``."""
    if not content or not letters:
        return None, None
    merged = re.compile(r"\[([%s])(?![a-z])" % re.escape("".join(letters)))
    for j, pos in enumerate(content):
        tok = pos.token or ""
        m = merged.search(tok)
        if m:  # "[B", " [B", "[B]": the letter is inside this token
            at = m.start(1)
            return float(pos.logprob), _same_form(_alt_pairs(pos), tok, at, letters, m.group(1), pos.logprob)
        if tok.rstrip().endswith("["):
            if j + 1 >= len(content):
                return None, None   # cut off right after "["
            nxt = content[j + 1]
            t = nxt.token or ""
            if t.strip() in letters:
                at = t.index(t.strip())
                return float(nxt.logprob), _same_form(_alt_pairs(nxt), t, at, letters, t.strip(), nxt.logprob)
            # "[" then something else ("[X]" copied from the prompt): the
            # letters' plain forms at that position, but no answer
            lp = {}
            for a, v in _alt_pairs(nxt):
                if a in letters and a not in lp:
                    lp[a] = float(v)
            return None, lp or None
    return None, None


def _rejects_logprobs(e) -> bool:
    """Whether an error response says the server does not do log-probs: a
    400/422 that mentions them (the OpenAI API), or a 5xx saying they are not
    supported (llama_cpp.server started with ``--logits_all false`` answers
    500 "logprobs is not supported for models created with logits_all=False")."""
    msg = str(e).lower()
    if "logprob" not in msg:
        return False
    status = getattr(e, "status_code", 0)
    return status in (400, 422) or (status >= 500 and "support" in msg)


class OpenAIBackend:
    kind = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 4, timeout_s: float = 60, max_retries: int = 6,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 30, pricing: dict | None = None):
        openai = _load_openai()
        self._openai = openai
        self.model_name = model
        self.model_id = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.concurrency = max(1, int(concurrency))
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.pricing = dict(pricing) if pricing else None
        key = os.environ.get(api_key_env)
        if not key:
            if not _is_local(base_url):
                raise RuntimeError(
                    f"the openai backend needs an API key in the environment variable {api_key_env} "
                    f"(it is unset or empty); set it, or point base_url at a local server")
            key = PLACEHOLDER_KEY
        # a local server is reached directly, whatever HTTP(S)_PROXY says
        extra = {"http_client": openai.DefaultHttpxClient(trust_env=False)} if _is_local(base_url) else {}
        # the key lives in the client only; _scrub removes it from error texts
        self._client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=self.timeout_s,
                                     **extra)
        del key
        self._logprobs_ok = True          # set to False when the server rejects logprobs
        self._lock = threading.Lock()
        self._rng = random.Random()       # jitter only: need not be reproducible
        self.totals = {"requests": 0, "retries": 0, "tokens_in": 0, "tokens_out": 0,
                       "cost_usd": 0.0, "failures": 0}
        # retries by cause: rate_limit, server_error, timeout, connection, malformed
        self.retry_causes: Counter = Counter()
        self.logprobs_fallbacks = 0

    # -- never show the key ----------------------------------------------
    def __repr__(self) -> str:
        return (f"OpenAIBackend(model={self.model_id!r}, base_url={self.base_url!r}, "
                f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency})")

    __str__ = __repr__

    def __getstate__(self):
        raise TypeError("OpenAIBackend holds an API client and is not picklable")

    def _scrub(self, text: str) -> str:
        key = getattr(self._client, "api_key", None)
        if isinstance(key, str) and len(key) >= 6 and key != PLACEHOLDER_KEY:
            text = text.replace(key, "***")
        return text

    # -- one request -----------------------------------------------------
    def cost(self, tokens_in: int, tokens_out: int) -> float:
        if not self.pricing:
            return 0.0
        return (tokens_in * float(self.pricing.get("input_per_mtok", 0))
                + tokens_out * float(self.pricing.get("output_per_mtok", 0))) / 1e6

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, base · 2^attempt)]."""
        cap = min(self.backoff_max_s, self.backoff_base_s * (2 ** attempt))
        return self._rng.uniform(0, cap)

    def _classify(self, e: BaseException) -> tuple[str | None, float | None]:
        """(retry cause or None if not retryable, Retry-After seconds or None)."""
        oa = self._openai
        if isinstance(e, oa.APITimeoutError):          # subclass of APIConnectionError: test first
            return "timeout", None
        if isinstance(e, oa.APIConnectionError):
            return "connection", None
        if isinstance(e, oa.APIStatusError):
            status = e.status_code
            ra = retry_after_s(getattr(e.response, "headers", None))
            if status == 429:
                return "rate_limit", ra
            if status == 408:
                return "timeout", ra
            if status >= 500:
                return "server_error", ra
            return None, None
        if isinstance(e, (oa.APIResponseValidationError, MalformedResponse, ValueError)):
            # a body that is not JSON raises json.JSONDecodeError (a ValueError) out of the
            # openai client unwrapped; pydantic's ValidationError is a ValueError too
            return "malformed", None
        if isinstance(e, oa.APIError):
            return "malformed", None
        return None, None   # e.g. a TypeError from our own arguments: retrying will not help

    def _kwargs(self, req: Request) -> dict:
        p = req.params
        kw = dict(model=self.model_id, messages=req.message_dicts(), temperature=p.temperature,
                  top_p=p.top_p, max_tokens=p.max_tokens, seed=p.seed)
        if req.answer_letters and self._logprobs_ok:
            kw.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return kw

    def _call(self, req: Request):
        kw = self._kwargs(req)
        try:
            r = self._client.chat.completions.create(**kw)
        except self._openai.APIStatusError as e:
            if "logprobs" in kw and _rejects_logprobs(e):
                # the server does not do log-probs: ask once more without, and never again
                self._logprobs_ok = False
                with self._lock:
                    self.logprobs_fallbacks += 1
                log.warning("%s: the server rejected logprobs; continuing without them", self.model_id)
                kw.pop("logprobs", None)
                kw.pop("top_logprobs", None)
                r = self._client.chat.completions.create(**kw)
            else:
                raise
        return r

    def _one(self, req: Request) -> tuple[Completion, Counter]:
        causes: Counter = Counter()
        retries = 0
        while True:
            t0 = time.perf_counter()
            try:
                r = self._call(req)
                try:
                    c = self._completion(req, r, time.perf_counter() - t0, retries)
                except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
                    # a str (non-JSON body), a list, no choices, no message, odd types
                    raise MalformedResponse(f"unusable response ({type(r).__name__}): "
                                            f"{type(e).__name__}: {e}") from e
            except Exception as e:  # noqa: BLE001 - classified below; nothing escapes a worker
                cause, ra = self._classify(e)
                msg = self._scrub(f"{type(e).__name__}: {e}")[:500]
                if cause is None or retries >= self.max_retries:
                    why = "not retryable" if cause is None else f"gave up after {retries} retries"
                    log.warning("%s: request failed (%s): %s", self.model_id, why, msg)
                    return Completion(text="", retries=retries, error=f"{msg} ({why})"), causes
                wait = min(ra, self.backoff_max_s) if ra is not None else self._backoff(retries)
                retries += 1
                causes[cause] += 1
                log.info("%s: %s, retry %d/%d in %.2fs", self.model_id, cause, retries, self.max_retries, wait)
                time.sleep(wait)
                continue
            return c, causes

    def _completion(self, req: Request, r, dt: float, retries: int) -> Completion:
        """The Completion of a response (``latency_s``: the successful attempt only)."""
        if not r.choices or r.choices[0].message is None:
            raise ValueError("no choices in the response")
        ch = r.choices[0]
        usage = getattr(r, "usage", None)
        tin = int(getattr(usage, "prompt_tokens", 0) or 0)
        tout = int(getattr(usage, "completion_tokens", 0) or 0)
        c = Completion(text=(ch.message.content or "").strip(), tokens_in=tin, tokens_out=tout,
                       latency_s=dt, finish_reason=ch.finish_reason or "", retries=retries,
                       cost_usd=self.cost(tin, tout))
        content = getattr(getattr(ch, "logprobs", None), "content", None)
        if req.answer_letters and content:
            c.answer_logprob, c.letter_logprobs = answer_position(content, req.answer_letters)
        return c

    # -- the batch -------------------------------------------------------
    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One completion per request, in request order; ``on_result(i, c)``
        is called on this thread as each one arrives. Never raises for a
        failed request (its Completion has ``error`` set)."""
        from tqdm import tqdm

        out: list[Completion | None] = [None] * len(requests)
        if not requests:
            return []
        bar = tqdm(total=len(requests), disable=not progress, desc=self.model_id, unit="req",
                   mininterval=1.0, dynamic_ncols=True)
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests)),
                                  thread_name_prefix="openai")
        try:
            futures = {pool.submit(self._one, req): i for i, req in enumerate(requests)}
            for fut in as_completed(futures):
                i = futures[fut]
                c, causes = fut.result()
                out[i] = c
                self._account(c, causes)
                bar.update(1)
                if progress:
                    bar.set_postfix(retries=self.totals["retries"], failed=self.totals["failures"],
                                    usd=round(self.totals["cost_usd"], 4), refresh=False)
                if on_result:
                    on_result(i, c)
        finally:
            # on an exception or Ctrl-C: drop what has not started, wait for what has
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        return out  # type: ignore[return-value]

    def _account(self, c: Completion, causes: Counter) -> None:
        t = self.totals
        t["requests"] += 1
        t["retries"] += c.retries
        t["tokens_in"] += c.tokens_in
        t["tokens_out"] += c.tokens_out
        t["cost_usd"] += c.cost_usd
        t["failures"] += bool(c.error)
        self.retry_causes.update(causes)
