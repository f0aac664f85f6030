"""llama.cpp backend (llama-cpp-python), the default: a GGUF model on the CPU.

Speed comes from the KV cache: llama.cpp keeps the last prompt's tokens and
re-evaluates only what differs, so K samples of one question cost one full
prompt evaluation plus K short suffix evaluations (the options move, the
vignette does not). The caller orders requests so that consecutive prompts
share the longest prefix; results do not depend on that order because every
request carries its own seed.

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

from .base import Completion, GenParams, Request
from . import models


def _load_llama():
    try:
        from llama_cpp import Llama
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the llamacpp backend needs llama-cpp-python: run `make models`") from None
    return Llama


class _AnswerTap:
    """Logits processor that keeps, for each generated position, the
    log-probs of the option-letter tokens (merged "[A" and plain "A" forms)."""

    def __init__(self, llm, letters: tuple[str, ...]):
        self.letters = letters
        tok = lambda s: llm.tokenize(s.encode(), add_bos=False, special=False)
        self.merged = {L: ids[0] for L in letters if len(ids := tok("[" + L)) == 1}
        self.plain = {L: tok(L)[0] for L in letters}
        self.space_merged = {L: ids[-1] for L in letters if len(ids := tok(" [" + L)) == 1}
        self.steps: list[tuple[int, dict, dict]] = []   # (last input token, merged lp, plain lp)

    def __call__(self, input_ids, scores):
        s = np.asarray(scores, dtype=np.float64)
        m = s.max()
        lse = m + np.log(np.exp(s - m).sum())
        self.steps.append((int(input_ids[-1]),
                           {L: float(s[i] - lse) for L, i in self.merged.items()},
                           {L: float(s[i] - lse) for L, i in self.plain.items()}))
        return scores


class LlamaCppBackend:
    kind = "llamacpp"

    def __init__(self, model: str, n_ctx: int = 4096, n_threads: int | None = None,
                 n_batch: int = 512, path: str | None = None, verbose: bool = False):
        Llama = _load_llama()
        self.model_name = model
        self.path = str(path or models.model_path(model))
        self.model_id = models.model_sha256(model) if path is None else os.path.basename(self.path)
        self.n_threads = n_threads or max(1, (os.cpu_count() or 2))
        with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
            self.llm = Llama(self.path, n_ctx=n_ctx, n_threads=self.n_threads, n_batch=n_batch,
                             verbose=verbose, seed=0)

    # the naive way, for the benchmark: forget the cached prompt
    def reset(self) -> None:
        self.llm.reset()
        with contextlib.suppress(Exception):
            self.llm._ctx.memory_clear(True)  # llama.cpp >= 0.3.10: drop the KV cache too

    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None,
                 reuse_prefix: bool = True) -> list[Completion]:
        from tqdm.auto import tqdm

        out: list[Completion] = []
        for i, req in enumerate(tqdm(requests, disable=not progress, desc=f"{self.model_name}", unit="req")):
            if not reuse_prefix:
                self.reset()
            c = self._one(req)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out

    def _one(self, req: Request) -> Completion:
        p: GenParams = req.params
        tap = _AnswerTap(self.llm, req.answer_letters) if req.answer_letters else None
        t0 = time.perf_counter()
        r = self.llm.create_chat_completion(
            req.message_dicts(), temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_tokens,
            seed=p.seed, logits_processor=[tap] if tap else None,
        )
        dt = time.perf_counter() - t0
        ch = r["choices"][0]
        c = Completion(text=ch["message"]["content"] or "", tokens_in=r["usage"]["prompt_tokens"],
                       tokens_out=r["usage"]["completion_tokens"], latency_s=dt,
                       finish_reason=ch.get("finish_reason") or "")
        if tap:
            c.answer_logprob, c.letter_logprobs = self._answer_position(tap)
        return c

    def _answer_position(self, tap: _AnswerTap) -> tuple[float | None, dict | None]:
        """Find the generated token that opens the bracket and return the
        chosen letter's log-prob and all letters' log-probs there."""
        steps = tap.steps
        # steps[j] saw generated tokens 0..j-1; token j is steps[j+1]'s last input
        for j in range(len(steps) - 1):
            tok = steps[j + 1][0]
            for L, tid in tap.merged.items():
                if tok == tid:
                    return steps[j][1][L], steps[j][1]
            for L, tid in tap.space_merged.items():
                if tok == tid:  # " [B": the letters' merged forms are the candidates
                    return steps[j][1].get(L), steps[j][1]
            piece = self.llm.detokenize([tok]).decode("utf-8", "ignore")
            if piece.rstrip().endswith("[") and j + 2 < len(steps):
                nxt = steps[j + 2][0]
                for L, tid in tap.plain.items():
                    if nxt == tid:
                        return steps[j + 1][2][L], steps[j + 1][2]
                return None, steps[j + 1][2]
        return None, None
