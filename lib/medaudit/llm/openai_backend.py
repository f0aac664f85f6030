"""OpenAI-compatible chat backend: the OpenAI API or any server that speaks
its protocol (llama.cpp's server, vLLM, …).

Identity. ``model_id`` (part of every cache key) is the serving identity,
not just the model name: ``"<model> @ <base URL>"``, the base URL normalised
(scheme and host lower-cased, default port and trailing slash dropped; no
``base_url`` means ``https://api.openai.com/v1``), so two servers that both
call their model "default" never share an answer. At construction the
backend asks ``GET /models`` once for the served model — the entry whose
``id`` is the model name or, on a server that lists a single model (it
serves that one whatever name is asked for, as llama_cpp.server does), that
one — and adds its ``id`` and ``root`` where they say more than the name
(llama_cpp.server reports the alias or the GGUF path; vLLM's ``root`` is the
real checkpoint under a ``--served-model-name``): ``"default @
http://127.0.0.1:8001/v1 (served: /models/x.gguf)"``. If ``/models`` fails or
does not list the model the identity is the URL and name alone (logged at
info). Each response's own ``model`` field is kept in
``Completion.served_model``.

Requests run on ``concurrency`` daemon worker threads; each completion is
handed to ``on_result`` on the calling thread the moment it arrives, so a
run stores what it has even if it is stopped half way.

Faults are retried here, not by the openai client (``max_retries=0``), so
that every retry is counted: rate limits (429), request timeouts (408),
server errors (5xx), timeouts, connection errors, malformed responses and
200s without an answer are retried with exponential backoff and full
jitter, or after the server's ``Retry-After`` when it sends one (capped at
``backoff_max_s``). Other 4xx are not retried. A request that fails comes
back as a :class:`Completion` with ``error`` (the HTTP status and the
server's own message, in words) and ``error_kind``: ``http_<status>`` (not
retryable), ``gave_up`` (still failing after ``max_retries`` retries),
``no_content`` (every attempt was a 200 whose message had no content and no
refusal, or said ``finish_reason: "error"``), ``reasoning_budget`` (see
below) or ``interrupted`` (the batch stopped during its retries). The store
does not keep a failed request, so a rerun asks again. ``finish_reason``
"length" and "content_filter" are answers, kept with their finish reason.

Early stop. When the same failure (same kind, same message: a 401, a 404
for the model, a 400 for a parameter, or giving up on the same cause such
as a refused connection) ends ``stop_after`` consecutive requests with no
success between them, going on cannot help: the backend starts nothing
more, gives the requests in flight a moment (their results still reach
``on_result``) and raises :class:`~medaudit.llm.base.BackendStopped`, whose
summary names the failure and counts what was sent, failed and succeeded.
Ctrl-C (or any error in the calling thread) stops the workers at once:
sleeps between retries wake, nothing new starts, and ``complete`` re-raises
without waiting for the retry loops (the worker threads are daemons, so an
HTTP call still under way does not hold the process up either).

Reasoning models (``api_style``). The GPT-5 family and o1/o3/o4 reject
``max_tokens`` and any temperature or top-p but the default, and spend
completion tokens on hidden reasoning. ``api_style="reasoning"`` sends
``max_completion_tokens`` = ``max_tokens`` + ``reasoning_budget`` (the
reasoning spends from the same budget, so the answer needs room beyond it)
and ``reasoning_effort`` when set, and no temperature, top-p or log-probs;
what was sent is recorded in ``Completion.settings``, and the style (with
budget and effort) is part of ``model_id``. ``"auto"`` (the default) picks
it for model names starting gpt-5, o1, o3 or o4 and "chat" otherwise; if a
server then answers a chat-style request with a 400 saying ``max_tokens``
or the temperature/top-p is unsupported, the backend switches to the
reasoning style for that and every later request, updates ``model_id`` and
warns that ``options: {api_style: reasoning}`` should be set so the plan is
keyed right from the start. An explicit ``"chat"`` is never switched. A
reply with no text, ``finish_reason`` "length" and reasoning tokens spent
is a failure (``reasoning_budget``: the limit went to reasoning; raise
``reasoning_budget``), never an empty answer; it is not retried.

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
the key in a 401) are scrubbed of it before they go into a Completion, a
:class:`BackendStopped` or a log record. A local ``base_url`` needs no key
and ignores HTTP(S)_PROXY.

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
import queue
import random
import re
import threading
import time
from collections import Counter
from typing import Callable
from urllib.parse import urlparse

from .base import BackendStopped, Completion, GenParams, Request

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
TOP_LOGPROBS = 20
PLACEHOLDER_KEY = "not-needed"
OPENAI_BASE_URL = "https://api.openai.com/v1"
# model names that the OpenAI API serves as reasoning models (api_style "auto")
REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4")
API_STYLES = ("auto", "chat", "reasoning")
STOP_GRACE_S = 1.5     # how long an early stop waits for the requests in flight


class MalformedResponse(Exception):
    """A 200 response without a usable chat completion in it."""


class NoContent(Exception):
    """A 200 whose message has no content (and no refusal), or whose
    finish_reason is "error": not an answer. Retried like a malformed body."""


class ReasoningBudgetUsedUp(Exception):
    """The completion limit went to hidden reasoning: no answer was written.
    Not retried (the same budget would be used up again). ``completion``
    carries the tokens and cost that were spent."""

    def __init__(self, message: str, completion: Completion):
        super().__init__(message)
        self.completion = completion


def _load_openai():
    try:
        import openai
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the openai backend needs the openai package: pip install openai") from None
    return openai


def is_local(base_url: str | None) -> bool:
    """Whether ``base_url`` is a server on this machine (loopback)."""
    return bool(base_url) and (urlparse(base_url).hostname or "") in LOCAL_HOSTS


def normalise_base_url(base_url: str | None) -> str:
    """The endpoint as it enters ``model_id``: scheme and host lower-cased,
    the default port and a trailing slash dropped, credentials never kept;
    None is the OpenAI API."""
    u = urlparse(base_url or OPENAI_BASE_URL)
    scheme = u.scheme.lower()
    host = (u.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"          # IPv6
    if u.port and u.port != {"http": 80, "https": 443}.get(scheme):
        host += f":{u.port}"
    return f"{scheme}://{host}{u.path.rstrip('/')}" + (f"?{u.query}" if u.query else "")


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


def _wants_reasoning_style(e) -> bool:
    """Whether a 400 says the model takes reasoning-style requests only:
    ``max_tokens`` unsupported (use ``max_completion_tokens``), or a
    temperature/top-p other than the default unsupported (the OpenAI API's
    answers for the GPT-5 family and o-series models)."""
    if getattr(e, "status_code", 0) != 400:
        return False
    msg = str(e).lower()
    if "max_completion_tokens" in msg or ("max_tokens" in msg and "unsupported parameter" in msg):
        return True
    return bool(re.search(r"\b(temperature|top_p)\b", msg)
                and re.search(r"unsupported|not supported|does not support|only the default", msg))


def _server_message(e) -> str:
    """The server's own words in an error response: the ``message`` of its
    JSON error body, else the body as text."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        m = body.get("message") or body.get("detail") or body.get("error")
        return str(m if m else body)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return getattr(e, "message", None) or str(e)


class _Batch:
    """The bookkeeping of one ``complete`` call, shared by its workers: how
    many requests were sent, and the current run of identical failures
    (same kind, same words) that decides an early stop."""

    def __init__(self, stop_after: int):
        self.stop_after = stop_after
        self.lock = threading.Lock()
        self.sent = 0
        self.same: tuple[str, str] | None = None
        self.run = 0
        self.first = -1                                  # request index that began the run
        self.stopped: tuple[str, str, int] | None = None  # (kind, error, first) once it stops

    def started(self) -> None:
        with self.lock:
            self.sent += 1

    def record(self, i: int, c: Completion) -> bool:
        """Count a finished request; True once ``stop_after`` requests in a
        row failed the same way (HTTP errors, giving up, no content: what
        the next request would meet too)."""
        with self.lock:
            if self.stopped:
                return True
            kind = c.error_kind
            if not c.error or not (kind.startswith("http_") or kind in ("gave_up", "no_content")):
                self.same, self.run = None, 0
                return False
            if (kind, c.error) != self.same:
                self.same, self.run, self.first = (kind, c.error), 0, i
            self.run += 1
            if self.stop_after and self.run >= self.stop_after:
                self.stopped = (kind, c.error, self.first)
            return self.stopped is not None


class OpenAIBackend:
    """A chat model behind the OpenAI API or a server that speaks its protocol:
    concurrent requests with retries and backoff, the served model's identity in ``model_id``
    (model @ normalised base URL), and each completion's cost from ``pricing``."""
    kind = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 4, timeout_s: float = 60, max_retries: int = 6,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 30, pricing: dict | None = None,
                 api_style: str = "auto", reasoning_budget: int = 1024, reasoning_effort: str | None = None,
                 stop_after: int = 3, lookup_served: bool = True):
        """``api_style``: "auto", "chat" or "reasoning" (see the module
        docstring). ``reasoning_budget``: completion tokens allowed for hidden
        reasoning on top of ``max_tokens`` (reasoning style). ``reasoning_effort``:
        sent as is when set (reasoning style). ``stop_after``: stop the batch
        after this many consecutive identical failures (0: never).
        ``lookup_served``: ask ``GET /models`` for the served model's identity."""
        if api_style not in API_STYLES:
            raise ValueError(f"api_style must be one of {API_STYLES}, not {api_style!r}")
        openai = _load_openai()
        self._openai = openai
        self.model_name = model
        self.base_url = base_url
        self.endpoint = normalise_base_url(base_url)
        self.api_key_env = api_key_env
        self.concurrency = max(1, int(concurrency))
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.pricing = dict(pricing) if pricing else None
        self.api_style = api_style
        reasoning_name = model.lower().rsplit("/", 1)[-1].startswith(REASONING_PREFIXES)
        self._style = api_style if api_style != "auto" else ("reasoning" if reasoning_name else "chat")
        self.reasoning_budget = max(0, int(reasoning_budget))
        self.reasoning_effort = reasoning_effort or None
        self.stop_after = max(0, int(stop_after or 0))
        key = os.environ.get(api_key_env)
        if not key:
            if not is_local(base_url):
                raise RuntimeError(
                    f"the openai backend needs an API key in the environment variable {api_key_env} "
                    f"(it is unset or empty); set it, or point base_url at a local server")
            key = PLACEHOLDER_KEY
        # a local server is reached directly, whatever HTTP(S)_PROXY says
        extra = {"http_client": openai.DefaultHttpxClient(trust_env=False)} if is_local(base_url) else {}
        # the key lives in the client only; _scrub removes it from error texts
        self._client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=self.timeout_s,
                                     **extra)
        del key
        self._logprobs_ok = True          # set to False when the server rejects logprobs
        self._lock = threading.Lock()
        self._rng = random.Random()       # jitter only: need not be reproducible
        self.totals = {"requests": 0, "retries": 0, "tokens_in": 0, "tokens_out": 0,
                       "cost_usd": 0.0, "failures": 0}
        # retries by cause: rate_limit, server_error, timeout, connection, malformed, no_content
        self.retry_causes: Counter = Counter()
        self.logprobs_fallbacks = 0
        self._served = self._lookup_served() if lookup_served else ""
        self.model_id = self._identity()

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

    # -- identity --------------------------------------------------------
    def _lookup_served(self) -> str:
        """What ``GET /models`` says of the served model beyond its name (its
        ``id`` and ``root``), or "" when it says nothing or fails."""
        where = f"{self.model_name} @ {self.endpoint}"
        try:
            entries = list(self._client.with_options(timeout=min(self.timeout_s, 10.0)).models.list().data or [])
        except Exception as e:  # noqa: BLE001 - the identity is then the URL and the name: never fatal
            log.info("%s: GET /models failed (%s); the identity is the URL and model name only",
                     where, self._scrub(f"{type(e).__name__}: {e}")[:300])
            return ""
        hit = next((m for m in entries if getattr(m, "id", None) == self.model_name), None)
        if hit is None and len(entries) == 1:      # a one-model server answers any name with it
            hit = entries[0]
        if hit is None:
            log.info("%s: GET /models does not list the model (%d models); the identity is the URL and "
                     "model name only", where, len(entries))
            return ""
        said = (str(v) for v in (getattr(hit, "id", None), getattr(hit, "root", None)) if v)
        return ", ".join(dict.fromkeys(v for v in said if v != self.model_name))

    def _identity(self) -> str:
        """The serving identity: name, normalised URL, what the server says
        it serves, and the reasoning style's settings when that is used."""
        s = f"{self.model_name} @ {self.endpoint}"
        if self._served:
            s += f" (served: {self._served})"
        if self._style == "reasoning":
            effort = f", effort {self.reasoning_effort}" if self.reasoning_effort else ""
            s += f" [reasoning api: budget {self.reasoning_budget}{effort}]"
        return s

    # -- one request -----------------------------------------------------
    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """The US dollar cost of a completion's tokens at ``pricing``'s prices per million
        input and output tokens (0 without pricing)."""
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
        if isinstance(e, NoContent):
            return "no_content", None
        if isinstance(e, (oa.APIResponseValidationError, MalformedResponse, ValueError)):
            # a body that is not JSON raises json.JSONDecodeError (a ValueError) out of the
            # openai client unwrapped; pydantic's ValidationError is a ValueError too
            return "malformed", None
        if isinstance(e, oa.APIError):
            return "malformed", None
        return None, None   # e.g. a TypeError from our own arguments, a used-up reasoning budget

    def _describe(self, e: BaseException) -> str:
        """An error in words, scrubbed of the key: the HTTP status and the
        server's message, or the exception and its cause."""
        oa = self._openai
        if isinstance(e, oa.APIStatusError):
            text = f"HTTP {e.status_code} ({type(e).__name__}): {_server_message(e)}"
        elif isinstance(e, ReasoningBudgetUsedUp):
            text = str(e)
        else:
            cause = e.__cause__
            text = f"{type(e).__name__}: {e}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
        return self._scrub(text)[:500]

    def request_body(self, req: Request) -> tuple[dict, dict | None]:
        """(the chat-completions body this backend would send for ``req`` now,
        in its current API style; the settings sent where they differ from
        the request's GenParams). A batch file carries exactly this body."""
        kw, settings = self._kwargs(req, self._style)
        return {**{k: v for k, v in kw.items() if k != "extra_body"}, **kw.get("extra_body", {})}, settings

    def _kwargs(self, req: Request, style: str) -> tuple[dict, dict | None]:
        """(arguments of the API call, the settings sent where they differ from
        the request's GenParams: None in the chat style)."""
        p = req.params
        kw = dict(model=self.model_name, messages=req.message_dicts(), seed=p.seed)
        if style == "reasoning":
            # GenParams.NO_LIMIT: no completion limit sent (the API's own maximum)
            settings = {"max_completion_tokens": p.max_tokens + self.reasoning_budget} if p.max_tokens else {}
            if self.reasoning_effort:
                settings["reasoning_effort"] = self.reasoning_effort
            return {**kw, **settings}, settings
        # None: the server's own default (a model's generation config on a
        # vLLM server, the API's default elsewhere): nothing sent
        kw.update({k: v for k, v in (("temperature", p.temperature), ("top_p", p.top_p)) if v is not None})
        if p.max_tokens != GenParams.NO_LIMIT:
            kw.update(max_tokens=p.max_tokens)
        if extra := p.extras():           # top_k, repetition_penalty: a vLLM server's extra parameters
            kw["extra_body"] = extra
        if req.answer_letters and self._logprobs_ok:
            kw.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return kw, None

    def _call(self, req: Request):
        """(response, settings sent). A 400 that rejects log-probs or the chat
        style changes what is sent, for this and every later request, and
        the request goes again at once (each change happens once: bounded)."""
        while True:
            style = self._style
            kw, settings = self._kwargs(req, style)
            try:
                return self._client.chat.completions.create(**kw), settings
            except self._openai.APIStatusError as e:
                if "logprobs" in kw and _rejects_logprobs(e):
                    self._drop_logprobs()
                elif style == "chat" and self.api_style == "auto" and _wants_reasoning_style(e):
                    self._learn_reasoning_style(e)
                else:
                    raise

    def _drop_logprobs(self) -> None:
        with self._lock:
            if not self._logprobs_ok:
                return
            self._logprobs_ok = False
            self.logprobs_fallbacks += 1
        log.warning("%s: the server rejected logprobs; continuing without them", self.model_id)

    def _learn_reasoning_style(self, e) -> None:
        with self._lock:
            if self._style == "reasoning":
                return
            self._style = "reasoning"
            self.model_id = self._identity()
        log.warning("%s @ %s rejects chat-style settings (%s); sending reasoning-style requests "
                    "(max_completion_tokens = max_tokens + reasoning_budget %d, no temperature or top_p) "
                    "from now on. Set `options: {api_style: reasoning}` for this model so that its plan is "
                    "keyed right from the start", self.model_name, self.endpoint,
                    self._scrub(_server_message(e))[:300], self.reasoning_budget)

    def _one(self, req: Request, stop: threading.Event | None = None,
             started: Callable[[], None] | None = None) -> tuple[Completion | None, Counter]:
        """One request with its retries. None when ``stop`` was set before it
        was sent; an "interrupted" failure when it was set during its retries
        (the waits between retries wake at once)."""
        stop = stop or threading.Event()
        causes: Counter = Counter()
        retries, last = 0, ""
        while True:
            if stop.is_set():
                if retries == 0:
                    return None, causes
                return Completion(text="", retries=retries, error_kind="interrupted",
                                  error=f"interrupted (the batch stopped) after {retries} retries; last: {last}"
                                  ), causes
            if retries == 0 and started:
                started()
            t0 = time.perf_counter()
            try:
                r, settings = self._call(req)
                try:
                    c = self._completion(req, r, settings, time.perf_counter() - t0, retries)
                except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
                    # a str (non-JSON body), a list, no choices, no message, odd types
                    raise MalformedResponse(f"unusable response ({type(r).__name__}): "
                                            f"{type(e).__name__}: {e}") from e
            except Exception as e:  # noqa: BLE001 - classified below; nothing escapes a worker
                cause, ra = self._classify(e)
                last = self._describe(e)
                if cause is None or retries >= self.max_retries:
                    c = self._failure(e, cause, last, retries)
                    log.warning("%s: request failed [%s]: %s", self.model_id, c.error_kind, c.error)
                    return c, causes
                wait = min(ra, self.backoff_max_s) if ra is not None else self._backoff(retries)
                retries += 1
                causes[cause] += 1
                log.info("%s: %s, retry %d/%d in %.2fs", self.model_id, cause, retries, self.max_retries, wait)
                stop.wait(wait)
                continue
            return c, causes

    def _failure(self, e: BaseException, cause: str | None, desc: str, retries: int) -> Completion:
        """The failed Completion of a request that will not be tried again."""
        if isinstance(e, ReasoningBudgetUsedUp):
            c = e.completion        # keeps the tokens and cost that were spent
            c.text, c.error, c.error_kind, c.retries = "", desc, "reasoning_budget", retries
            return c
        if cause is None:
            status = e.status_code if isinstance(e, self._openai.APIStatusError) else None
            kind, why = (f"http_{status}" if status else "error"), "not retryable"
        else:
            kind, why = ("no_content" if cause == "no_content" else "gave_up"), f"gave up after {retries} retries"
        return Completion(text="", retries=retries, error=f"{desc} ({why})", error_kind=kind)

    def _completion(self, req: Request, r, settings: dict | None, dt: float, retries: int) -> Completion:
        """The Completion of a response (``latency_s``: the successful attempt
        only). A reply without an answer raises: :class:`NoContent`, or
        :class:`ReasoningBudgetUsedUp` when reasoning took the whole limit."""
        if not r.choices or r.choices[0].message is None:
            raise ValueError("no choices in the response")
        ch = r.choices[0]
        msg = ch.message
        usage = getattr(r, "usage", None)
        tin = int(getattr(usage, "prompt_tokens", 0) or 0)
        tout = int(getattr(usage, "completion_tokens", 0) or 0)
        reasoning = int(getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0)
        refusal = getattr(msg, "refusal", None)           # a refusal is the model's answer
        c = Completion(text=(msg.content or refusal or "").strip(), tokens_in=tin, tokens_out=tout,
                       latency_s=dt, finish_reason=ch.finish_reason or "", retries=retries,
                       cost_usd=self.cost(tin, tout), served_model=str(getattr(r, "model", "") or ""),
                       settings=settings)
        if c.finish_reason == "error":
            raise NoContent("the server answered 200 with finish_reason 'error'")
        if not c.text and c.finish_reason == "length" and reasoning > 0:
            limit = (settings or {}).get("max_completion_tokens", req.params.max_tokens)
            raise ReasoningBudgetUsedUp(
                f"the completion limit ({limit} tokens) was used up by hidden reasoning ({reasoning} reasoning "
                f"tokens of {limit}) before any answer was written; raise the `reasoning_budget` option "
                f"(now {self.reasoning_budget})", c)
        if msg.content is None and not refusal:
            raise NoContent("the server answered 200 without message content")
        content = getattr(getattr(ch, "logprobs", None), "content", None)
        if req.answer_letters and content:
            c.answer_logprob, c.letter_logprobs = answer_position(content, req.answer_letters)
        return c

    # -- the batch -------------------------------------------------------
    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One completion per request, in request order; ``on_result(i, c)``
        is called on this thread as each one arrives. A failed request comes
        back with ``error`` set; :class:`BackendStopped` when ``stop_after``
        requests in a row failed the same way (nothing more is sent). On
        Ctrl-C the workers stop and the KeyboardInterrupt goes on at once."""
        from tqdm import tqdm

        n = len(requests)
        if not n:
            return []
        out: list[Completion | None] = [None] * n
        stop, batch = threading.Event(), _Batch(self.stop_after)
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for item in enumerate(requests):
            todo.put(item)
        done: queue.SimpleQueue = queue.SimpleQueue()

        def work() -> None:
            while not stop.is_set():
                try:
                    i, req = todo.get_nowait()
                except queue.Empty:
                    return
                c, causes = self._one(req, stop, batch.started)
                if c is None:
                    return            # the batch stopped before this one was sent
                if batch.record(i, c):
                    stop.set()
                done.put((i, c, causes))

        # daemon threads: a stopped batch never waits for a retry loop or an HTTP call to end
        workers = [threading.Thread(target=work, name=f"openai-{k}", daemon=True)
                   for k in range(min(self.concurrency, n))]
        for t in workers:
            t.start()
        bar = tqdm(total=n, disable=not progress, desc=self.model_name, unit="req",
                   mininterval=1.0, dynamic_ncols=True)
        got, deadline = 0, None
        try:
            while got < n:
                if stop.is_set() and deadline is None:
                    deadline = time.monotonic() + STOP_GRACE_S   # a moment for the requests in flight
                try:
                    i, c, causes = done.get(timeout=0.1)
                except queue.Empty:
                    idle = not any(t.is_alive() for t in workers) and done.empty()
                    if idle or (deadline is not None and time.monotonic() > deadline):
                        break
                    continue
                out[i] = c
                got += 1
                self._account(c, causes)
                bar.update(1)
                if progress:
                    bar.set_postfix(retries=self.totals["retries"], failed=self.totals["failures"],
                                    usd=round(self.totals["cost_usd"], 4), refresh=False)
                if on_result:
                    on_result(i, c)
        except BaseException:
            stop.set()      # Ctrl-C, or on_result failed: nothing new starts, retry waits wake
            raise
        finally:
            bar.close()
        if got < n:
            stop.set()
            if batch.stopped:
                raise BackendStopped(self._stop_summary(batch, out))
            raise RuntimeError(f"{self.model_name}: {n - got} of {n} requests got no result")
        return out  # type: ignore[return-value]

    def _stop_summary(self, batch: _Batch, out: list) -> str:
        kind, error, first = batch.stopped
        finished = [c for c in out if c is not None]
        failed = sum(bool(c.error) for c in finished)
        return (f"{self.model_id}: stopped early, {self.stop_after} requests in a row failed the same way "
                f"[{kind}]: {error}. Sent {batch.sent} of {len(out)} requests: {failed} failed, "
                f"{len(finished) - failed} succeeded, {len(out) - len(finished)} have no answer; the first "
                f"to fail this way was request {first} of the batch.")

    def _account(self, c: Completion, causes: Counter) -> None:
        t = self.totals
        t["requests"] += 1
        t["retries"] += c.retries
        t["tokens_in"] += c.tokens_in
        t["tokens_out"] += c.tokens_out
        t["cost_usd"] += c.cost_usd
        t["failures"] += bool(c.error)
        self.retry_causes.update(causes)
