"""llama.cpp backend (llama-cpp-python), the default: a GGUF model on the CPU.

Speed comes from the KV cache. All K samples of a question share the stem of
their prompt (chat header and vignette; only the options move), so the stem
is evaluated once and each sample evaluates only its own suffix: one full
prompt evaluation plus K short ones.

Reproducibility comes from evaluating every prompt the same way whatever ran
before it. Letting llama.cpp reuse "the longest cached prefix" would split a
prompt into different batches depending on the previous request, and floating
point sums in different batch shapes differ in the last bits — enough to flip
a sampled token now and then (we measured 2 of 40 texts changing). Here every
prompt is evaluated as *stem from position 0, then suffix*, whether the stem
came from the cache or not, and every request carries its own seed: a sample's
text does not depend on run order, batching or an interrupted run.

Token log-probabilities come from a ``logits_processor`` hook that sees the
full-vocabulary logits at each generated position (``logits_all=True`` would
make sampling about three times slower). At the answer position — the token
that opens the bracket, "[B" in one token or "[" then "B" — it records the
log-softmax of every option letter: the exact distribution over the letters.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Callable

import numpy as np

from .base import Completion, GenParams, Request, find_answer_position, letter_token_ids, too_long
from . import models


def load_llama():
    """llama-cpp-python's ``Llama`` class (a clear error where it is not installed)."""
    try:
        from llama_cpp import Llama
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the llamacpp backend needs llama-cpp-python: run `make setup`") from None
    return Llama


class _AnswerTap:
    """Logits processor that keeps, for each generated position, the
    log-probs of the option-letter tokens in every form they take at the
    answer position (:func:`base.letter_token_ids`)."""

    def __init__(self, llm, letters: tuple[str, ...]):
        self.forms = letter_token_ids(lambda t: llm.tokenize(t.encode(), add_bos=False, special=False), letters)
        self.ids = sorted({i for form in self.forms for i in form.values()})
        self.steps: list[tuple[int, dict[int, float]]] = []   # (last input token, {token id: log-prob})

    def __call__(self, input_ids, scores):
        s = np.asarray(scores, dtype=np.float64)
        m = s.max()
        lse = m + np.log(np.exp(s - m).sum())
        self.steps.append((int(input_ids[-1]), {i: float(s[i] - lse) for i in self.ids}))
        return scores


class LlamaCppBackend:
    """A registry GGUF model (or a file at ``path``) on the CPU with llama-cpp-python, each
    prompt's stem evaluated once and reused by its samples; ``model_id`` is the loaded file's
    measured sha256."""
    kind = "llamacpp"

    def __init__(self, model: str, n_ctx: int = 4096, n_threads: int | None = None,
                 n_batch: int = 512, path: str | None = None, verbose: bool = False):
        load_llama()                          # fail now, not at the first request, without llama-cpp-python
        self.model_name = model
        self.path = str(path or models.model_path(model))
        # the identity is the measured sha256 of the file that is loaded
        # (registry model or any path=): two files that share a name never
        # share answers, and the colophon shows what was really loaded
        self.model_id = models.verified_sha256(model) if path is None else models.file_sha256(self.path)
        self.n_threads = n_threads or max(1, (os.cpu_count() or 2))
        self._settings = dict(n_ctx=n_ctx, n_batch=n_batch, verbose=verbose)
        self._llm = None
        self._format = None

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (they load at the first request
        that needs them: a run served wholly from the store loads none)."""
        return self._llm is not None

    @property
    def llm(self):
        """The loaded ``Llama`` (loaded at the first use, with the model's own chat template)."""
        if self._llm is None:
            s = self._settings
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                # n_threads_batch too: left to its default (every core), prompt
                # evaluation threads spin against each other on a busy machine
                self._llm = load_llama()(self.path, n_ctx=s["n_ctx"], n_threads=self.n_threads,
                                         n_threads_batch=self.n_threads, n_batch=s["n_batch"],
                                         verbose=s["verbose"], seed=0)
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            llm = self._llm
            tok = lambda i: llm.detokenize([i], special=True).decode("utf-8", "ignore")
            self._format = Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"], eos_token=tok(llm.token_eos()),
                bos_token=tok(llm.token_bos()), stop_token_ids=[llm.token_eos()])
        return self._llm

    # the naive way, for the benchmark: forget the cached prompt
    def reset(self) -> None:
        """Drop the KV cache: the next prompt is evaluated from its first token."""
        self.llm.reset()                      # n_tokens = 0: Llama.eval drops the KV cache from there

    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None,
                 reuse_prefix: bool = True) -> list[Completion]:
        """One completion per request, in request order, each handed to ``on_result`` as it
        arrives; ``reuse_prefix=False`` clears the cache before every request (the naive way the
        benchmark compares against)."""
        from tqdm import tqdm

        out: list[Completion] = []
        for i, req in enumerate(tqdm(requests, disable=not progress, desc=self.model_name, unit="req",
                                     mininterval=2.0)):
            if not reuse_prefix:
                self.reset()
            c = self._one(req)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out

    def tokens(self, req: Request) -> tuple[list[int], int, object]:
        """(prompt tokens, stem length, formatter result) for a request."""
        llm = self.llm                        # loads the model (and its chat formatter) on first use
        f = self._format(messages=req.message_dicts())
        enc = lambda text: llm.tokenize(text.encode("utf-8"), add_bos=not f.added_special, special=True)
        toks = enc(f.prompt)
        stem_len = len(toks) - 1
        if req.stem_chars is not None:
            content = req.messages[-1][1]
            pos = f.prompt.rfind(content)
            if pos >= 0:
                stem = enc(f.prompt[:pos + req.stem_chars])
                common = next((i for i, (a, b) in enumerate(zip(stem, toks)) if a != b), len(stem))
                stem_len = max(1, min(common - 1, len(toks) - 1))  # the boundary token may merge
        return toks, stem_len, f

    def _prepare(self, toks: list[int], stem_len: int) -> None:
        """Leave exactly the stem in the KV cache, evaluated from position 0."""
        llm = self.llm
        if llm.n_tokens >= stem_len and list(llm.input_ids[:stem_len]) == toks[:stem_len]:
            llm.n_tokens = stem_len           # drop the previous suffix and answer
        else:
            self.reset()
            llm.eval(toks[:stem_len])

    def _one(self, req: Request) -> Completion:
        p: GenParams = req.params.local("llamacpp")
        t0 = time.perf_counter()
        toks, stem_len, f = self.tokens(req)
        # measured before anything is evaluated: llama.cpp would abort the
        # whole run ("llama_decode returned 1") without naming the prompt
        if (skipped := too_long(len(toks), self.llm.n_ctx(), p.max_tokens, hint="raise n_ctx")) is not None:
            return skipped
        tap = _AnswerTap(self.llm, req.answer_letters) if req.answer_letters else None
        self._prepare(toks, stem_len)
        # sampling is the request's alone: llama-cpp-python's own top-k 40
        # and min-p 0.05 are switched off unless the request sets top-k (a
        # model's own generation config, medaudit.llm.decoding); llama.cpp's
        # repeat penalty looks at the last 64 tokens, transformers' at all
        r = self.llm.create_completion(
            toks, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, min_p=0.0,
            repeat_penalty=p.repetition_penalty,
            max_tokens=p.max_tokens, seed=p.seed,
            stop=f.stop, stopping_criteria=f.stopping_criteria, logits_processor=[tap] if tap else None,
        )
        dt = time.perf_counter() - t0
        ch = r["choices"][0]
        c = Completion(text=(ch["text"] or "").strip(), tokens_in=r["usage"]["prompt_tokens"],
                       tokens_out=r["usage"]["completion_tokens"], latency_s=dt,
                       finish_reason=ch.get("finish_reason") or "")
        if tap:
            c.answer_logprob, c.letter_logprobs = self._answer_position(tap)
        return c

    def _answer_position(self, tap: _AnswerTap) -> tuple[float | None, dict | None]:
        """The chosen letter's log-prob and all letters' log-probs at the
        generated token that opens the bracket (:func:`base.find_answer_position`)."""
        # steps[j] saw generated tokens 0..j-1, so token j is steps[j + 1]'s last input
        gen = [tok for tok, _ in tap.steps[1:]]
        pieces = [self.llm.detokenize([t]).decode("utf-8", "ignore") for t in gen]
        found = find_answer_position(gen, pieces, tap.forms)
        if found is None:
            return None, None
        j, ids, chosen = found
        lp = {L: tap.steps[j][1][tid] for L, tid in ids.items()}
        return (lp[chosen] if chosen else None), lp
