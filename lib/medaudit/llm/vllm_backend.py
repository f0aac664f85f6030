"""vLLM backend, for GPU machines (``pip install '.[vllm]'``).

vLLM is imported only when a backend is built, so this module imports (and
:func:`build_vllm_requests` runs) without it: vLLM does not install on the
project's CPU machines.

Requests go to ``LLM.chat`` in chunks of ``chunk_size`` (default 2,048) in
request order (:func:`medaudit.llm.runs.run` sends a question's K samples one
after another, so they share a chunk); within a chunk vLLM schedules them in
continuous batches and, with ``enable_prefix_caching``, reuses the KV cache
of the prompt prefix that the K samples of a question share. The results of
a chunk go to ``on_result`` as soon as the chunk returns, so an interrupted
or killed run keeps every chunk it finished and loses at most one chunk's
work. A chunk large enough to keep the GPU's batch full (a few thousand
short MCQ requests) costs little throughput against one call for everything.

Sampling is set by the request alone: n=1, temperature, top_p, max_tokens and
a per-request ``seed`` (vLLM's top_k, min_p and penalties stay off). A seed
makes a sample reproducible run to run *within vLLM* on the same GPU, vLLM
version and engine settings; it does not reproduce what the llama.cpp or
transformers backend draws from the same seed, and vLLM itself documents
that batch composition can change the last bits of the logits (and so,
rarely, a token) unless its batch-invariant mode is on.

Answer-position log-probs come from the top-20 log-probs vLLM returns for
each generated token (``logprobs=20``, vLLM's default ``max_logprobs``).
With the V1 engine these are computed from the raw logits, before
temperature and top-p ("raw_logprobs", the default ``logprobs_mode``); the
sampled token is always included. A letter outside the top 20 is simply
absent from ``letter_logprobs`` — the distribution is exact for the letters
that are present, but not complete.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .base import Completion, Request, find_answer_position, letter_token_ids
from .models import folder_sha256

TOP_LOGPROBS = 20
INSTALL_HINT = ("the vllm backend needs vLLM, which runs on a GPU machine: "
                "pip install '.[vllm]' there (it does not install on the CPU machines)")


def _load_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


def build_vllm_requests(requests: list[Request]) -> list[tuple[list[dict], dict]]:
    """Per request: its chat messages and the keyword arguments of its
    ``vllm.SamplingParams`` (no vLLM needed). Temperature 0 is greedy in vLLM."""
    out = []
    for r in requests:
        p = r.params.local("vllm")
        kw = {"n": 1, "temperature": float(p.temperature), "top_p": float(p.top_p),
              "max_tokens": int(p.max_tokens), "seed": int(p.seed), **p.extras()}
        if r.answer_letters:
            kw["logprobs"] = TOP_LOGPROBS
        out.append((r.message_dicts(), kw))
    return out


def _lp(v) -> float:
    return float(getattr(v, "logprob", v))


def answer_logprobs(token_ids: list[int], step_logprobs, pieces: list[str], forms
                    ) -> tuple[float | None, dict | None]:
    """(chosen letter's log-prob, {letter: log-prob}) at the answer position,
    from per-position top-k log-probs (``step_logprobs[j]``: token id →
    Logprob or float). Letters outside the top-k are left out."""
    if not step_logprobs:
        return None, None
    found = find_answer_position(list(token_ids), pieces, forms)
    if found is None or found[0] >= len(step_logprobs):
        return None, None
    j, ids, chosen = found
    top = step_logprobs[j] or {}
    dist = {L: _lp(top[tid]) for L, tid in ids.items() if tid in top}
    return (dist.get(chosen) if chosen is not None else None), (dist or None)


class VLLMBackend:
    """A model (a hub id or a local checkpoint folder, identified by its content hash)
    on the GPUs with vLLM: requests sent in chunks of ``chunk_size``, the samples of a question
    sharing their prompt prefix's KV cache."""
    kind = "vllm"

    def __init__(self, model: str, tensor_parallel_size: int = 1, enable_prefix_caching: bool = True,
                 chunk_size: int = 2048, **engine_kwargs):
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size {chunk_size}: must be >= 1")
        vllm = _load_vllm()
        self.model_name = model
        self.chunk_size = int(chunk_size)
        # part of every cache key: a local checkpoint folder by its content
        # hash (two folders of one name never share answers), a hub id as is
        self.model_id = folder_sha256(Path(model)) if Path(model).is_dir() else model
        self._SamplingParams = vllm.SamplingParams
        self.llm = vllm.LLM(model=model, tensor_parallel_size=tensor_parallel_size,
                            enable_prefix_caching=enable_prefix_caching, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self.eos_ids = {eos} if eos is not None else set()
        self._letter_cache: dict[tuple[str, ...], tuple[dict, dict, dict]] = {}

    def _forms(self, letters: tuple[str, ...]):
        if letters not in self._letter_cache:
            self._letter_cache[letters] = letter_token_ids(
                lambda t: self.tokenizer.encode(t, add_special_tokens=False), letters)
        return self._letter_cache[letters]

    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One completion per request, in request order; each chunk's
        completions handed to ``on_result`` as soon as the chunk returns."""
        result: list[Completion] = []
        for start in range(0, len(requests), self.chunk_size):
            chunk = requests[start:start + self.chunk_size]
            built = build_vllm_requests(chunk)
            t0 = time.perf_counter()
            outs = self.llm.chat([m for m, _ in built],
                                 sampling_params=[self._SamplingParams(**kw) for _, kw in built], use_tqdm=progress)
            per_req = (time.perf_counter() - t0) / len(chunk)   # one chunk: the mean wall time
            if len(outs) != len(chunk):
                raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(chunk)} requests")
            for i, (req, o) in enumerate(zip(chunk, outs), start):
                c = self._completion(req, o, per_req)
                result.append(c)
                if on_result:
                    on_result(i, c)
        return result

    def _completion(self, req: Request, o, latency_s: float) -> Completion:
        g = o.outputs[0]
        ids = list(g.token_ids)
        n = len(ids)
        if g.finish_reason == "stop" and ids and ids[-1] in self.eos_ids:
            n -= 1                        # like llama.cpp: the end-of-sequence token is not counted
        c = Completion(text=(g.text or "").strip(), tokens_in=len(o.prompt_token_ids or []), tokens_out=n,
                       latency_s=latency_s, finish_reason=g.finish_reason or "")
        if req.answer_letters:
            pieces = [self.tokenizer.decode([t], skip_special_tokens=True) for t in ids]
            c.answer_logprob, c.letter_logprobs = answer_logprobs(
                ids, g.logprobs, pieces, self._forms(req.answer_letters))
        return c
