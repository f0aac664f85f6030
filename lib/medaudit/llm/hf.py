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
(top_k and the model's other generation defaults are switched off), and
``torch.manual_seed(request.params.seed)`` before each ``generate``.
Temperature 0 is greedy decoding.

Reproducibility: a seed gives the same text run after run *with this backend*
on the same machine, library versions, dtype and device — it does not give the
text the llama.cpp or vLLM backend draws from the same seed (each has its own
random number generator and sampling chain), and a change of device, dtype or
thread count can change the last bits of the logits and so, rarely, a token.

Answer-position log-probs come from ``output_logits`` (the raw logits of
every generated position, before temperature or top-p): at the token that
opens the bracket — "[B" as one token, or "[" and then "B" — the
full-vocabulary log-softmax is taken, so the letters' log-probs are exact.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable

from .base import Completion, GenParams, Request
from . import models


def _load_transformers():
    try:
        import torch
        import transformers
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the transformers backend needs torch and transformers: "
                          "pip install '.[hf]' (torch==2.13.0)") from None
    return torch, transformers


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _folder_sha256(folder: Path) -> str:
    """A sha256 over the folder's top-level files (name and content hash,
    sorted by name; hidden files and *.md left out): changes whenever the
    weights, config or tokenizer change."""
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith(".") and p.suffix != ".md":
            h.update(f"{p.name}\0{_file_sha256(p)}\n".encode())
    return h.hexdigest()


class TransformersBackend:
    kind = "transformers"

    def __init__(self, model: str, path: str | None = None, gguf_file: str | None = None,
                 device: str = "cpu", dtype: str = "float32", threads: int | None = None):
        torch, transformers = _load_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name = model
        self.device = device
        if threads:
            torch.set_num_threads(int(threads))   # process-wide setting

        if path is None and gguf_file is None:
            if model in models.registry():
                gguf = Path(models.model_path(model))
                folder, gguf_file = gguf.parent, gguf.name
                self.model_id = models.model_sha256(model)
            elif Path(model).exists():           # a local path given as the model
                path = model
            else:
                models.spec(model)               # raises: not in the registry, not a path
        if path is not None or gguf_file is not None:
            folder = Path(path) if path is not None else None
            if gguf_file is not None:
                g = Path(gguf_file)
                if folder is None or folder.is_file():
                    g = folder if folder is not None and folder.is_file() else g
                    folder, gguf_file = g.parent, g.name
                elif g.parent != Path("."):
                    folder, gguf_file = (folder / g).parent, g.name
            elif folder.is_file():               # path is the GGUF file itself
                folder, gguf_file = folder.parent, folder.name
            if not folder.is_dir():
                raise FileNotFoundError(f"{folder}: no such local folder (this backend loads local files only)")
            if gguf_file is not None:
                if not (folder / gguf_file).is_file():
                    raise FileNotFoundError(f"{folder / gguf_file}: no such GGUF file")
                self.model_id = _file_sha256(folder / gguf_file)
            else:
                self.model_id = _folder_sha256(folder)
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

    # --- prompts -----------------------------------------------------------
    def prompt_ids(self, req: Request) -> list[int]:
        """The prompt's token ids: the chat template rendered, then tokenised
        without extra special tokens (the template carries them)."""
        text = self.tokenizer.apply_chat_template(req.message_dicts(), tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _letter_ids(self, letters: tuple[str, ...]) -> tuple[dict, dict, dict]:
        """Token ids of each letter as "[X" (one token), " [X" (one token) and
        "X" right after a "[" token."""
        if letters not in self._letter_cache:
            enc = lambda s: self.tokenizer.encode(s, add_special_tokens=False)
            merged = {L: ids[0] for L in letters if len(ids := enc("[" + L)) == 1}
            space_merged = {L: ids[0] for L in letters if len(ids := enc(" [" + L)) == 1}
            plain = {}
            for L in letters:
                ids = enc("[" + L)
                plain[L] = ids[-1] if len(ids) >= 2 else enc(L)[-1]
            self._letter_cache[letters] = (merged, space_merged, plain)
        return self._letter_cache[letters]

    # --- generation --------------------------------------------------------
    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        from tqdm import tqdm

        out: list[Completion] = []
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
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        kw = dict(attention_mask=torch.ones_like(input_ids), max_new_tokens=p.max_tokens,
                  pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids),
                  return_dict_in_generate=True, output_logits=bool(req.answer_letters))
        if p.temperature and p.temperature > 0:
            kw.update(do_sample=True, temperature=float(p.temperature), top_p=float(p.top_p), top_k=0,
                      min_p=None, repetition_penalty=1.0)
        else:
            kw.update(do_sample=False)
        torch.manual_seed(int(p.seed))
        with torch.inference_mode():
            r = self.model.generate(input_ids, **kw)
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
        """Find the generated token that opens the bracket; return the chosen
        letter's log-prob and every letter's log-prob there (full-vocabulary
        log-softmax of the raw logits: exact)."""
        import torch

        merged, space_merged, plain = self._letter_ids(letters)
        lsm = lambda j: torch.log_softmax(logits[j][0].to(torch.float64), dim=-1)
        for j, tok in enumerate(gen):
            for forms in (merged, space_merged):
                hit = next((L for L, tid in forms.items() if tid == tok), None)
                if hit is not None:
                    lp = lsm(j)
                    dist = {L: float(lp[tid]) for L, tid in forms.items()}
                    return dist[hit], dist
            piece = self.tokenizer.decode([tok], skip_special_tokens=True)
            if piece.rstrip().endswith("[") and j + 1 < len(gen):
                lp = lsm(j + 1)
                dist = {L: float(lp[tid]) for L, tid in plain.items()}
                hit = next((L for L, tid in plain.items() if tid == gen[j + 1]), None)
                return (dist[hit] if hit is not None else None), dist
        return None, None
