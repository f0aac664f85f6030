"""Hugging Face transformers backend (``pip install '.[hf]'``).

Loads a model from local files only — never from the model hub:

* a registry model (``model`` a name in params/models.yaml): its verified GGUF
  file from :func:`medaudit.llm.models.model_path`, loaded with
  ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename)``;
* ``gguf_file`` (with ``path`` the folder holding it, or a full file path);
* ``path`` a local checkpoint folder (config.json, safetensors, tokenizer).

transformers *dequantises* a GGUF file on load: the weights are held in
``dtype`` (float32 by default), so a Q4 file takes about eight times its size
in memory. Quick for the 135M test model, slow and large for billions of
parameters (use llama.cpp or vLLM there).

Every request is generated on its own (batch of one, the whole prompt
evaluated from position 0: ``stem_chars`` is not used), with the chat template
of the tokenizer and sampling set by the request alone: temperature and top_p
(top_k is switched off, and the model's generation_config.json defaults are
not used: each call gets a fresh ``GenerationConfig``), and
``torch.manual_seed(request.params.seed)`` before each ``generate``.
Temperature 0 is greedy decoding.

Reproducibility: a seed gives the same text run after run *with this backend*
on the same machine, library versions, dtype and device — it does not give the
text the llama.cpp or vLLM backend draws from the same seed (each has its own
random number generator and sampling chain), and a change of device, dtype or
thread count can change the last bits of the logits and so, rarely, a token.

``threads`` sets torch's intra-op threads while the backend loads and
generates (restored afterwards; None keeps torch's default, one per core).
A 135M model gains little from several threads, and on a machine shared with
other work they wait on each other: we measured about 0.9 s per MCQ request
with one thread against about 8 s with two on a busy 2-core machine.

Answer-position log-probs come from ``output_logits`` (the raw logits of
every generated position, before temperature or top-p): at the token that
opens the bracket — "[B" as one token, or "[" and then "B" — the
full-vocabulary log-softmax is taken, so the letters' log-probs are exact.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable

from .base import Completion, GenParams, Request, find_answer_position, letter_token_ids, too_long
from . import models


def _load_transformers():
    try:
        import torch
        import transformers
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the transformers backend needs torch and transformers: "
                          "pip install '.[hf]' (torch==2.13.0)") from None
    return torch, transformers


class TransformersBackend:
    kind = "transformers"

    def __init__(self, model: str, path: str | None = None, gguf_file: str | None = None,
                 device: str = "cpu", dtype: str = "float32", threads: int | None = None):
        torch, transformers = _load_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name = model
        self.device = device
        self.threads = int(threads) if threads else None

        from_registry = path is None and gguf_file is None and model in models.registry()
        if from_registry:
            gguf = Path(models.model_path(model))
            folder, gguf_file = gguf.parent, gguf.name
            self.model_id = models.verified_sha256(model)
        elif path is None and gguf_file is None:
            if Path(model).exists():             # a local path given as the model
                path = model
            else:
                models.spec(model)               # raises: not in the registry, not a path
        if not from_registry:
            if gguf_file is not None:            # a file name in folder `path`, or a file path
                g = Path(gguf_file)
                if path is not None and not Path(path).is_file():
                    g = Path(path) / g
                folder, gguf_file = g.parent, g.name
            else:
                folder = Path(path)
                if folder.is_file():             # path is the GGUF file itself
                    folder, gguf_file = folder.parent, folder.name
            if not folder.is_dir():
                raise FileNotFoundError(f"{folder}: no such local folder (this backend loads local files only)")
            if gguf_file is not None:
                if not (folder / gguf_file).is_file():
                    raise FileNotFoundError(f"{folder / gguf_file}: no such GGUF file")
                self.model_id = models.file_sha256(folder / gguf_file)
            else:
                self.model_id = models.folder_sha256(folder)
        self.folder = folder
        self.gguf_file = gguf_file
        self.path = str(folder / gguf_file) if gguf_file else str(folder)

        # `dtype` replaced `torch_dtype` in transformers 4.56
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        kw = {"local_files_only": True}
        if gguf_file:
            kw["gguf_file"] = gguf_file
        t0 = time.perf_counter()
        with self._torch_threads():
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), **kw)
            self.model = AutoModelForCausalLM.from_pretrained(str(folder), **kw, **{dtype_kw: torch_dtype})
            self.model.to(device)
            self.model.eval()
        self.load_s = time.perf_counter() - t0
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"{self.path}: the tokenizer has no chat template")

        gc = self.model.generation_config
        eos = gc.eos_token_id if gc.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (gc.pad_token_id if gc.pad_token_id is not None
                                                   else min(self.eos_ids, default=0))
        self._letter_cache: dict[tuple[str, ...], tuple[dict, dict, dict]] = {}
        self._GenerationConfig = transformers.GenerationConfig

    @contextlib.contextmanager
    def _torch_threads(self):
        """torch's intra-op threads set to ``threads`` while this backend
        works, and restored after (torch's setting is process-wide)."""
        import torch

        old = torch.get_num_threads()
        if self.threads and self.threads != old:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if torch.get_num_threads() != old:
                torch.set_num_threads(old)

    # --- prompts -----------------------------------------------------------
    def prompt_ids(self, req: Request) -> list[int]:
        """The prompt's token ids: the chat template rendered, then tokenised
        without extra special tokens (the template carries them)."""
        text = self.tokenizer.apply_chat_template(req.message_dicts(), tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _letter_ids(self, letters: tuple[str, ...]) -> tuple[dict, dict, dict]:
        if letters not in self._letter_cache:
            self._letter_cache[letters] = letter_token_ids(lambda t: self.tokenizer.encode(t, add_special_tokens=False), letters)
        return self._letter_cache[letters]

    # --- generation --------------------------------------------------------
    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        from tqdm import tqdm

        out: list[Completion] = []
        with self._torch_threads():
            for i, req in enumerate(tqdm(requests, disable=not progress, desc=self.model_name, unit="req",
                                         mininterval=2.0)):
                c = self._one(req)
                out.append(c)
                if on_result:
                    on_result(i, c)
        return out

    def _one(self, req: Request) -> Completion:
        import torch

        p: GenParams = req.params
        t0 = time.perf_counter()
        ids = self.prompt_ids(req)
        n_ctx = getattr(self.model.config, "max_position_embeddings", None)
        if n_ctx and (skipped := too_long(len(ids), n_ctx, p.max_tokens, "the model's context")) is not None:
            return skipped
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        # a fresh GenerationConfig: the model's generation_config.json defaults
        # (top_k, min_p, repetition_penalty…) do not apply, only the request's
        gk = dict(max_new_tokens=p.max_tokens, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids),
                  return_dict_in_generate=True, output_logits=bool(req.answer_letters))
        if p.temperature and p.temperature > 0:
            gk.update(do_sample=True, temperature=float(p.temperature), top_p=float(p.top_p), top_k=0)
        else:
            gk.update(do_sample=False)
        gen_config = self._GenerationConfig(**gk)
        torch.manual_seed(int(p.seed))
        with torch.inference_mode():
            r = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                    generation_config=gen_config)
        gen = r.sequences[0, input_ids.shape[1]:].tolist()
        finish = "length"
        n = len(gen)
        for j, t in enumerate(gen):
            if t in self.eos_ids:
                n, finish = j, "stop"
                break
        gen = gen[:n]
        text = self.tokenizer.decode(gen, skip_special_tokens=True).strip()
        c = Completion(text=text, tokens_in=len(ids), tokens_out=n,
                       latency_s=time.perf_counter() - t0, finish_reason=finish)
        if req.answer_letters:
            c.answer_logprob, c.letter_logprobs = self._answer_position(gen, r.logits, req.answer_letters)
            c.latency_s = time.perf_counter() - t0
        return c

    def _answer_position(self, gen: list[int], logits, letters: tuple[str, ...]
                         ) -> tuple[float | None, dict | None]:
        """The chosen letter's log-prob and every letter's log-prob at the
        answer position: full-vocabulary log-softmax of the raw logits (exact)."""
        import torch

        pieces = [self.tokenizer.decode([t], skip_special_tokens=True) for t in gen]
        found = find_answer_position(gen, pieces, self._letter_ids(letters))
        if found is None:
            return None, None
        j, ids, chosen = found
        lp = torch.log_softmax(logits[j][0].to(torch.float64), dim=-1)
        dist = {L: float(lp[tid]) for L, tid in ids.items()}
        return (dist[chosen] if chosen is not None else None), dist
