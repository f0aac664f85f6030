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
parameters on a CPU; on a GPU load a checkpoint folder in bfloat16
(``device: cuda, dtype: bfloat16``).

**Batched generation.** Requests are grouped by sampling settings
(temperature, top-p, top-k, max tokens, repetition penalty), then decoded
in batches by one of two decoders (``decode``); each finished batch goes to
``on_result`` at once, so a killed run keeps every batch it finished.

* ``prefix`` (the default on a GPU; store name ``transformers-prefix``):
  :mod:`medaudit.llm.prefix` — rows batched across questions, each stem
  evaluated once, as many rows as half the free memory holds (at most
  :data:`PREFIX_ROWS`; ``batch_size`` caps them), the project's decoding
  loop (a row stops at its end of turn; with ``stop_at_answer`` also at the
  "]" of its answer, store name ``…-stop``), each step on a GPU replayed
  from a CUDA graph (``step``: ``graph``, ``static``, ``eager``), and the
  vectorised per-row sampler of that module (its draws are not
  ``torch.multinomial``'s, hence the store name). A repetition penalty is
  decoded by ``generate``.
* ``generate`` (the default on a CPU; store name ``transformers``):
  transformers' own ``generate`` on left-padded prompts of similar length,
  ``batch_size`` at a time (None: chosen from free memory, at most 64 rows
  on a CPU and 256 on a GPU; 1: one request at a time), sampled as below.

**A sample does not depend on its batch.** transformers samples a whole
batch from one random generator, so a row's tokens would depend on which
rows share its batch. Here ``generate`` runs greedy and a logits processor
(:class:`_RowSampler`) draws each row's next token itself: transformers'
own ``TemperatureLogitsWarper`` and ``TopPLogitsWarper`` (top-k off), then
``torch.multinomial`` with the row's *own* ``torch.Generator`` seeded with
the request's seed, one draw per step, and hands back that token as the only
finite score. This is the draw ``generate(do_sample=True)`` makes for a
request alone after ``torch.manual_seed(seed)`` (tests check that they are
the same), so batching changes neither the sampling rule nor the random
stream. Temperature 0 is greedy decoding. The model's generation_config.json
defaults (top_k, min_p, repetition_penalty…) never apply: each call gets a
fresh ``GenerationConfig``.

Reproducibility: a seed gives the same text run after run *with this backend*
on the same machine, library versions, dtype and device — not the text the
llama.cpp or vLLM backend draws from the same seed. Batched and padded
evaluation can change the last bits of the logits (about 1e-6 here), which
changes a sampled token only when a draw falls that close to a boundary
between two tokens, and a greedy token only on a near tie.

**Exact letter scoring** (``mcq_mode: score``). For a request that names
``answer_letters`` (multiple choice), no text is generated: one forward pass
over the prompt followed by "[" gives the model's full-vocabulary
distribution at the answer position (where a tokenizer writes every "[X" as
one token, the pass is over the prompt alone and reads the "[X" tokens). The
letters' log-probs are stored exactly as generation mode stores them (a
sub-distribution: log-softmax over the whole vocabulary), and the sample's
letter is drawn from them with its own seed: renormalised over the letters,
temperature and top-p applied *to the letter distribution* (transformers'
warpers again), one ``torch.multinomial`` draw; temperature 0 takes the most
probable letter. The text is "[X]" and ``finish_reason`` "scored". Requests
with the same prompt (samples that drew the same option order) share one
row, and rows are batched across questions by :mod:`medaudit.llm.prefix`:
the K prompts of a question share their stem (``stem_chars``: the vignette
before the options; with ``share_stem`` on), which is evaluated once, and
the rows' options and instructions after it go through in chunks of similar
length (at most ``chunk_tokens``, 16,384, with their padding), the output
matrix applied at the last two positions only.

What scoring assumes: that the model *opens its answer with the bracket*, so
the letter after "[" is its answer. The mode measures that per prompt:
``p_open_bracket``, the probability that the first generated token is "[" (or
"[X"/" [X"), read from the same pass. A prompt under ``min_bracket_prob``
(0.5) is *generated* instead (batched, as above), so a model or prompt
format that does not answer "[X]" (an explanation, a bare letter) keeps its
malformed answers counted as parse failures. Where the model opens with the
bracket but would then write something unparseable ("[B or C]"), or opens
with a space or a newline first, scoring still gives a letter: the
probability of the first case is in ``p_open_bracket``, the second is not
measured. Every row of a scoring-mode run records its mode, the bracket
probability and the sampling settings in ``settings``, and scoring mode runs
under the backend name ``transformers-score``: its store keys never match
generation mode's, so neither reuses the other's answers. Top-p over four
letters is coarser than top-p over the vocabulary: the two modes sample from
the same letters but not always with the same probabilities.

``threads`` sets torch's intra-op threads while the backend loads and
generates (restored afterwards; None keeps torch's default, one per core).
A 135M model gains little from several threads, and on a machine shared with
other work they wait on each other: we measured about 0.9 s per MCQ request
with one thread against about 8 s with two on a busy 2-core machine.

Answer-position log-probs in generation mode come from ``output_logits``
(the raw logits of every generated position, before temperature or top-p):
at the token that opens the bracket — "[B" as one token, or "[" and then
"B" — the full-vocabulary log-softmax is taken, so the letters' log-probs are
exact.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path
from typing import Callable

from .base import Completion, GenParams, Request, find_answer_position, letter_token_ids, too_long
from . import models, prefix, random_model
from .prefix import left_padded, warp, warpers

MODES = ("generate", "score")
DECODERS = ("generate", "prefix")
STEPS = ("eager", "static", "graph")     # decode: prefix's steps (llm/prefix.py Stepper)
CHUNK_TOKENS = 16384                     # letter scoring: tokens (with padding) of one tail pass
MAX_ROWS = {"cpu": 64, "cuda": 256}      # the most rows batch_size=None picks
PREFIX_ROWS = {"cpu": 64, "cuda": 1024}  # likewise for prefix-shared batches (scoring, decode: prefix)


def _load_transformers():
    try:
        import torch
        import transformers
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the transformers backend needs torch and transformers: "
                          "pip install '.[hf]' (torch==2.13.0)") from None
    return torch, transformers


class TransformersBackend:
    """Options: ``path``, ``gguf_file``, ``device``, ``dtype``, ``threads``
    (module docstring), ``batch_size`` (rows per batch; None: from free
    memory; 1: one request at a time), ``mcq_mode`` ("generate", or "score":
    exact letter scoring of multiple-choice requests), ``share_stem``
    (scoring: evaluate a question's stem once for its option orders) and
    ``min_bracket_prob`` (scoring: prompts the model opens with "[" less
    often than this are generated instead)."""

    def __init__(self, model: str, path: str | None = None, gguf_file: str | None = None,
                 device: str = "cpu", dtype: str = "float32", threads: int | None = None,
                 batch_size: int | None = None, mcq_mode: str = "generate", share_stem: bool = True,
                 min_bracket_prob: float = 0.5, decode: str | None = None, stop_at_answer: bool = False,
                 step: str | None = None, tokenizer: str | None = None, random_seed: int = 0):
        self._options(model, device, threads, batch_size, mcq_mode, share_stem, min_bracket_prob, decode,
                      stop_at_answer, step)
        torch, transformers = _load_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if random_model.is_random(model):
            self._build_random(model, path, gguf_file, device, dtype, tokenizer, random_seed)
            return
        if tokenizer is not None:
            raise ValueError("tokenizer: a folder for a random-weight model (model: random:<shape>) only; "
                             "a checkpoint brings its own")
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
        self._ready()

    def _build_random(self, model: str, path, gguf_file, device: str, dtype: str, tokenizer: str | None,
                      seed: int) -> None:
        """A random-weight model of the shape ``model`` names
        (:mod:`medaudit.llm.random_model`: for measuring speed only), built on
        ``device`` in ``dtype``; the tokenizer from the folder ``tokenizer``
        or the embedded model's GGUF."""
        if path is not None or gguf_file is not None:
            raise ValueError(f"model '{model}': a random-weight model has no files (no path, no gguf_file)")
        shape = random_model.shape_of(model)
        t0 = time.perf_counter()
        with self._torch_threads():
            self.tokenizer = random_model.tokenizer(tokenizer)
            self.model = random_model.random_model(random_model.shape_config(shape, self.tokenizer), device,
                                                   "float32" if dtype == "auto" else dtype, seed=int(seed))
        self.load_s = time.perf_counter() - t0
        self.model_id = random_model.model_id(shape, seed)
        self.folder, self.gguf_file, self.path = None, None, f"<random weights: {shape}>"
        self.random_weights = True
        self._ready()

    @classmethod
    def from_loaded(cls, model, tokenizer, *, name: str, model_id: str, device: str = "cpu",
                    threads: int | None = None, batch_size: int | None = None, mcq_mode: str = "generate",
                    share_stem: bool = True, min_bracket_prob: float = 0.5, decode: str | None = None,
                    stop_at_answer: bool = False, step: str | None = None) -> TransformersBackend:
        """A backend around a model and tokenizer already in memory (on
        ``device``), e.g. a benchmark's random-weight model: nothing is
        loaded or copied. ``model_id`` is the caller's identity for it (it
        enters every store key)."""
        self = cls.__new__(cls)
        self._options(name, device, threads, batch_size, mcq_mode, share_stem, min_bracket_prob, decode,
                      stop_at_answer, step)
        self.model_id = model_id
        self.folder, self.gguf_file, self.path = None, None, f"<in memory: {name}>"
        self.tokenizer, self.model, self.load_s = tokenizer, model.eval(), 0.0
        self._ready()
        return self

    def _options(self, model, device, threads, batch_size, mcq_mode, share_stem, min_bracket_prob, decode,
                 stop_at_answer, step) -> None:
        if mcq_mode not in MODES:
            raise ValueError(f"mcq_mode '{mcq_mode}': must be one of {', '.join(MODES)}")
        on_gpu = str(device).startswith("cuda")
        decode = decode or ("prefix" if on_gpu else "generate")
        if decode not in DECODERS:
            raise ValueError(f"decode '{decode}': must be one of {', '.join(DECODERS)}")
        step = step or ("graph" if on_gpu else "eager")
        if step not in STEPS or (step == "graph" and not on_gpu):
            raise ValueError(f"step '{step}': must be one of {', '.join(STEPS)} ('graph' on a CUDA device only)")
        if stop_at_answer and decode != "prefix":
            raise ValueError("stop_at_answer: only with decode: prefix (the project's own decoding loop)")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size {batch_size}: must be >= 1 (or None: chosen from free memory)")
        if not 0.0 <= float(min_bracket_prob) <= 1.0:
            raise ValueError(f"min_bracket_prob {min_bracket_prob}: must be in [0, 1]")
        self.model_name = model
        self.device = device
        self.threads = int(threads) if threads else None
        self.batch_size = int(batch_size) if batch_size else None
        self.mcq_mode = mcq_mode
        self.share_stem = bool(share_stem)
        self.min_bracket_prob = float(min_bracket_prob)
        self.decode = decode
        self.stop_at_answer = bool(stop_at_answer)
        self.step = step
        self.chunk_tokens = CHUNK_TOKENS
        # scoring: requests tokenised at a time (None: cap on a GPU, all on a CPU)
        self.score_slice: int | None = None
        self.random_weights = False            # a random:<shape> model (llm/random_model.py): speed only
        self._texts: dict[tuple, str] = {}      # chat template renderings, by messages
        self._stems: dict[str, list[int]] = {}  # stem texts tokenised in this call
        self.batch_rows: list[int] = []
        self.graph_errors: list[str] = []

    def _ready(self) -> None:
        """What every backend derives from its loaded model and tokenizer."""
        import transformers

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
        enc = self.tokenizer.encode("[", add_special_tokens=False)
        self.open_id = enc[0] if len(enc) == 1 else None     # "[" as one token

    @property
    def kind(self) -> str:
        """The backend's name in every store key: answers made another way
        never share keys — scoring mode ("-score"), the project's own
        decoding loop and sampler ("-prefix"), stopping at the answer's
        closing bracket ("-stop")."""
        return ("transformers" + ("-score" if self.mcq_mode == "score" else "")
                + ("-prefix" if self.decode == "prefix" else "") + ("-stop" if self.stop_at_answer else ""))

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
    def _prompt_text(self, req: Request) -> str:
        text = self._texts.get(req.messages)
        if text is None:
            text = self.tokenizer.apply_chat_template(req.message_dicts(), tokenize=False, add_generation_prompt=True)
            if len(self._texts) > 100_000:
                self._texts.clear()
            self._texts[req.messages] = text
        return text

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        """Texts tokenised in one call (the fast tokenizer spreads a list
        over the machine's cores), without extra special tokens."""
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def prompt_ids(self, req: Request) -> list[int]:
        """The prompt's token ids: the chat template rendered, then tokenised
        without extra special tokens (the template carries them)."""
        return self._tokenize([self._prompt_text(req)])[0]

    def tokenize_requests(self, requests: list[Request]) -> tuple[list[list[int]], dict[str, list[int]]]:
        """Every prompt's token ids, in one call, and — where stems are
        shared (``share_stem``) — every distinct stem's, also in one call
        (stem text → ids; empty otherwise): the host's work before a batch
        reaches the model."""
        ids = self._tokenize([self._prompt_text(r) for r in requests])
        if not self.share_stem:
            return ids, {}
        stems = sorted({t for r in requests if (t := self._stem_text(r)) is not None})
        return ids, dict(zip(stems, self._tokenize(stems)))

    def _stem_text(self, req: Request) -> str | None:
        """The prompt's text up to the end of its stem (None: no stem)."""
        if req.stem_chars is None:
            return None
        text = self._prompt_text(req)
        pos = text.rfind(req.messages[-1][1])
        return None if pos < 0 else text[:pos + req.stem_chars]

    def stem_len(self, req: Request, ids: list[int]) -> int:
        """How many of the prompt's first tokens are its stem (the chat
        header and the characters ``stem_chars`` of the last message): the
        tokens the stem alone tokenises to, less the last one, which may
        merge with what follows. 0 when the request names no stem."""
        text = self._stem_text(req)
        if text is None:
            return 0
        stem = self._stems.get(text)
        if stem is None:
            stem = self._tokenize([text])[0]
        common = next((n for n, (a, b) in enumerate(zip(stem, ids)) if a != b), min(len(stem), len(ids)))
        return max(0, min(common - 1, len(ids) - 1))

    def _letter_ids(self, letters: tuple[str, ...]) -> tuple[dict, dict, dict]:
        if letters not in self._letter_cache:
            self._letter_cache[letters] = letter_token_ids(
                lambda t: self.tokenizer.encode(t, add_special_tokens=False), letters)
        return self._letter_cache[letters]

    # --- batching -----------------------------------------------------------
    def _free_bytes(self) -> int:
        import torch

        if str(self.device).startswith("cuda"):
            # free on the device, plus what torch's allocator holds but no
            # tensor uses (it is reused before anything new is asked for)
            dev = torch.device(self.device)
            return int(torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev)
                       - torch.cuda.memory_allocated(dev))
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 2 << 30

    def rows_per_batch(self, prompt_tokens: int, new_tokens: int, logits_steps: int = 1) -> int:
        """``batch_size`` if set, else the rows that fit in half the free
        memory (GPU memory on a GPU): each row's KV cache, the activations of
        its prompt, its attention scores and the full-vocabulary logits kept
        (``logits_steps`` positions), at most MAX_ROWS."""
        if self.batch_size:
            return self.batch_size
        cfg = self.model.config.get_text_config()
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        elem = self.model.dtype.itemsize
        n = prompt_tokens + new_tokens
        per_row = (n * 2 * cfg.num_hidden_layers * kv_heads * head_dim * elem
                   + prompt_tokens * (4 * cfg.hidden_size
                                      + 2 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size)) * 4
                   + heads * prompt_tokens * n * 4
                   + (logits_steps + 2) * cfg.vocab_size * 4)
        cap = MAX_ROWS["cuda" if str(self.device).startswith("cuda") else "cpu"]
        return max(1, min(cap, int(self._free_bytes() * 0.5 // per_row)))

    def _batch_fits(self, new_tokens: int, keep: int) -> tuple[Callable[[int, int, int, int], bool], int]:
        """(``fits(groups, rows, stem_width, tail_width)``, the most rows) for
        :func:`medaudit.llm.prefix.plan`, from half the device's free memory
        now (after the model is loaded): the stems' pass and the tails' pass
        (activations and attention scores of the tokens evaluated), the KV
        cache of every row over stems, tails and ``new_tokens``, and the
        full-vocabulary logits kept (``keep`` positions, float32 and a
        float64 copy). ``batch_size`` caps the rows."""
        cfg = self.model.config.get_text_config()
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        elem = self.model.dtype.itemsize
        kv = 2 * cfg.num_hidden_layers * kv_heads * head_dim * elem
        act = (6 * cfg.hidden_size + 3 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size)) * elem
        logits = (keep + 1) * cfg.vocab_size * 12
        budget = self._free_bytes() * 0.5

        def fits(groups: int, rows: int, ls: int, lt: int) -> bool:
            stem_pass = groups * ls * (act + kv + heads * ls * 4)
            tail_pass = rows * (lt * (act + heads * (ls + lt) * 4) + (ls + lt + new_tokens) * kv + logits)
            return stem_pass + tail_pass <= budget

        cap = self.batch_size or PREFIX_ROWS["cuda" if str(self.device).startswith("cuda") else "cpu"]
        return fits, cap

    # --- generation --------------------------------------------------------
    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One completion per request, in request order; each handed to
        ``on_result`` as soon as its batch is done (in batch order, not
        request order)."""
        import torch
        from tqdm import tqdm

        out: list[Completion | None] = [None] * len(requests)
        self.batch_rows = []          # rows of each batch this call ran (a benchmark reads them)
        bar = tqdm(total=len(requests), disable=not progress, desc=self.model_name, unit="req", mininterval=2.0)

        def done(i: int, c: Completion) -> None:
            out[i] = c
            bar.update(1)
            if on_result:
                on_result(i, c)

        try:
            with self._torch_threads(), torch.inference_mode():
                if self.mcq_mode == "score":
                    rest, settings = self._score_all(requests, done)
                    self._generate_all(rest, done, settings)
                    return out
                self._generate_all(self._admit(requests, 0, done), done)
        finally:
            bar.close()
        return out

    def _generate_all(self, todo: list, done: Callable, settings: dict | None = None) -> None:
        """Generate ``todo`` ((index, request, prompt ids)…) in batches of
        one sampling setting and similar prompt lengths."""
        def group(t):
            p = t[1].params
            return (float(p.temperature or 0), float(p.top_p), int(p.max_tokens), int(p.top_k),
                    float(p.repetition_penalty))

        for g, same in itertools.groupby(sorted(todo, key=lambda t: (group(t), len(t[2]), t[0])), key=group):
            same = list(same)
            if self.decode == "prefix" and g[4] == 1.0:
                self._generate_prefix(same, done, settings)
                continue
            n = self.rows_per_batch(len(same[-1][2]), g[2], g[2] if any(t[1].answer_letters for t in same) else 1)
            for start in range(0, len(same), n):
                batch = same[start:start + n]
                self.batch_rows.append(len(batch))
                for (i, _, _), c in zip(batch, self._generate_batch(batch)):
                    if settings and (extra := settings.get(i)) is not None:
                        c.settings = extra
                    done(i, c)

    def _generate_batch(self, batch: list) -> list[Completion]:
        t0 = time.perf_counter()
        p: GenParams = batch[0][1].params.local("transformers")
        width = max(len(ids) for _, _, ids in batch)
        input_ids, mask = left_padded([ids for _, _, ids in batch], width, self.pad_id)
        want_logits = any(r.answer_letters for _, r, _ in batch)
        # a fresh GenerationConfig: the model's generation_config.json
        # defaults (top_k, min_p, repetition_penalty…) do not apply; greedy
        # here, the sampling itself is _RowSampler's, one generator per row
        gen_config = self._GenerationConfig(
            max_new_tokens=p.max_tokens, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids),
            return_dict_in_generate=True, output_logits=want_logits, do_sample=False)
        from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

        # generate()'s order: the repetition penalty (over prompt and reply,
        # as transformers applies it), then the sampling warpers
        processors = []
        if p.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(float(p.repetition_penalty)))
        if p.temperature and p.temperature > 0:
            processors.append(_RowSampler(float(p.temperature), float(p.top_p),
                                          [int(r.params.seed) for _, r, _ in batch], self.device, int(p.top_k)))

        r = self.model.generate(input_ids.to(self.device), attention_mask=mask.to(self.device),
                                generation_config=gen_config, logits_processor=LogitsProcessorList(processors))
        per_row = (time.perf_counter() - t0) / len(batch)
        out = []
        for b, (_, req, ids) in enumerate(batch):
            gen = r.sequences[b, width:].tolist()
            finish, n = "length", len(gen)
            for j, t in enumerate(gen):
                if t in self.eos_ids:
                    n, finish = j, "stop"
                    break
            gen = gen[:n]
            c = Completion(text=self.tokenizer.decode(gen, skip_special_tokens=True).strip(), tokens_in=len(ids),
                           tokens_out=n, latency_s=per_row, finish_reason=finish)
            if req.answer_letters:
                c.answer_logprob, c.letter_logprobs = self._answer_position(
                    gen, [step[b] for step in r.logits], req.answer_letters)
            out.append(c)
        return out

    def _answer_position(self, gen: list[int], logits, letters: tuple[str, ...]
                         ) -> tuple[float | None, dict | None]:
        """The chosen letter's log-prob and every letter's log-prob at the
        answer position: full-vocabulary log-softmax of the raw logits
        (``logits[j]``: the row's logits at generated position j; exact)."""
        import torch

        pieces = [self.tokenizer.decode([t], skip_special_tokens=True) for t in gen]
        found = find_answer_position(gen, pieces, self._letter_ids(letters))
        if found is None:
            return None, None
        j, ids, chosen = found
        lp = torch.log_softmax(logits[j].to(torch.float64), dim=-1)
        dist = {L: float(lp[tid]) for L, tid in ids.items()}
        return (dist[chosen] if chosen is not None else None), dist

    # --- exact letter scoring ----------------------------------------------
    def score_form(self, letters: tuple[str, ...]) -> tuple[bool, dict]:
        """(whether "[" is appended to the prompt, {letter: token id} read at
        the answer position): the "[X" tokens at the prompt's end where the
        tokenizer has one for every letter, else the letter after "[" """
        merged, _, plain = self._letter_ids(letters)
        if len(merged) == len(letters):
            return False, merged
        if self.open_id is None:
            raise ValueError(f"{self.path}: '[' is not one token and not every '[X' is: cannot score letters")
        return True, plain

    def _open_ids(self, letters: tuple[str, ...]) -> list[int]:
        """Tokens that open a bracketed answer as the first generated token."""
        merged, space_merged, _ = self._letter_ids(letters)
        return sorted({*merged.values(), *space_merged.values(), *([self.open_id] if self.open_id is not None else [])})

    def _score_all(self, requests: list[Request], done: Callable) -> tuple[list, dict]:
        """Score the multiple-choice requests; returns what is left to
        generate ((index, request, prompt ids)…: free text, and prompts the
        model opens with "[" less often than ``min_bracket_prob``) and the
        settings scoring recorded for the latter. Every
        distinct sequence (prompt, plus "[" where appended) is one row; rows
        are batched across questions, each stem evaluated once
        (:mod:`.prefix`). On a GPU the requests are tokenised in slices of
        ``cap`` while the device works on the slice before
        (:class:`_Scoring`): the host's rendering and tokenising no longer
        leaves the device idle, and a slice's last, partly filled batch waits
        for the next slice's rows."""
        scoring = _Scoring(self, done, {r.answer_letters for r in requests if r.answer_letters})
        step = self.score_slice or (scoring.cap if scoring.cuda else max(1, len(requests)))
        for start in range(0, len(requests), step):
            scoring.add(self._admit(requests[start:start + step], start, done), final=start + step >= len(requests))
        return scoring.finish()

    def _admit(self, requests: list[Request], start: int, done: Callable) -> list:
        """``requests`` (the call's from index ``start`` on) tokenised in one
        call: ((index, request, prompt ids)…) of those that fit the model's
        context; each that does not is handed to ``done`` as skipped."""
        n_ctx = getattr(self.model.config, "max_position_embeddings", None)
        all_ids, self._stems = self.tokenize_requests(requests)
        todo = []
        for i, (req, ids) in enumerate(zip(requests, all_ids), start):
            if n_ctx and (skipped := too_long(len(ids), n_ctx, req.params.max_tokens,
                                              "the model's context")) is not None:
                done(i, skipped)
            else:
                todo.append((i, req, ids))
        return todo

    def _score_ids(self, letters: tuple[str, ...]) -> list[int]:
        """The token ids scoring reads: those that open an answer and the
        letters' ids at the answer position."""
        return self._open_ids(letters) + list(self.score_form(letters)[1].values())

    def _scored(self, req: Request, ids: list[int], row, col: dict, latency_s: float
                ) -> tuple[Completion | None, dict]:
        """The scored completion of one request from its pass's last two
        positions (``row[position, col[token id]]``: full-vocabulary
        log-probs), or (None, settings) when the model opens its answer
        with "[" less often than ``min_bracket_prob`` (the request is
        generated)."""
        import math

        letters = req.answer_letters
        append, ids_at = self.score_form(letters)
        first = row[0 if append else 1]         # the first generated token
        at = row[1]                             # the answer position
        p_open = float(sum(math.exp(first[col[t]]) for t in self._open_ids(letters)))
        p = req.params.local("transformers-score")
        settings = {"temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens, **p.extras(),
                    "p_open_bracket": round(p_open, 6)}
        if p_open < self.min_bracket_prob or p.extras():
            # top-k or a repetition penalty change the draw over the whole
            # vocabulary, which scoring the letters alone cannot reproduce
            return None, {"mode": "generate", **settings}
        dist = {L: float(at[col[tid]]) for L, tid in ids_at.items()}
        letter = letters[draw_letter([dist[L] for L in letters], p.temperature, p.top_p, p.seed)]
        return Completion(text=f"[{letter}]", tokens_in=len(ids), tokens_out=0, latency_s=latency_s,
                          finish_reason="scored", answer_logprob=dist[letter], letter_logprobs=dist,
                          settings={"mode": "letter_scoring", **settings}), {}

    # --- decode: prefix -----------------------------------------------------
    def _bracket_ids(self) -> tuple[set[int], set[int]]:
        """(ids of the tokens holding "[", ids of those holding "]"), read
        once from the vocabulary."""
        if getattr(self, "_brackets", None) is None:
            pieces = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
            self._brackets = ({i for i, t in enumerate(pieces) if t and "[" in t},
                              {i for i, t in enumerate(pieces) if t and "]" in t})
        return self._brackets

    def _generate_prefix(self, todo: list, done: Callable, settings: dict | None = None) -> None:
        """Generate ``todo`` (one sampling setting) with :mod:`.prefix`: each
        request a row, batched across questions with stems shared, the
        project's decoding loop and per-row sampler."""
        p: GenParams = todo[0][1].params.local("transformers")
        max_new = int(p.max_tokens)
        by_i = {t[0]: t for t in todo}
        groups = prefix.make_groups(
            ((t[0], t[2]) for t in todo), min_tail=1,
            stem_len=lambda i, _: self.stem_len(by_i[i][1], by_i[i][2]) if self.share_stem else 0)
        letters = sorted({r.answer_letters for _, r, _ in todo if r.answer_letters})
        read = sorted({tid for L in letters for form in self._letter_ids(L) for tid in form.values()})
        col = {tid: c for c, tid in enumerate(read)}
        brackets = self._bracket_ids() if self.stop_at_answer else None
        fits, cap = self._batch_fits(max_new, 1)
        for batch in prefix.plan(groups, fits, cap):
            t0 = time.perf_counter()
            rows = [by_i[k] for g in batch for k in g.keys]
            self.batch_rows.append(len(rows))
            logits, state = prefix.prefill(self.model, batch, self.pad_id, keep=1, new_slots=max_new)
            sampler = prefix.Sampler(float(p.temperature), float(p.top_p), [int(r.params.seed) for _, r, _ in rows],
                                     max_new, logits.device, int(p.top_k))
            toks, reads, stepper = prefix.decode(
                self.model, state, logits, sampler, max_new, self.eos_ids, self.pad_id, read or None, brackets,
                static=self.step in ("static", "graph"), graph=self.step == "graph")
            if stepper.graph_error:
                self.graph_errors.append(stepper.graph_error)
            per_row = (time.perf_counter() - t0) / len(rows)
            for b, (i, req, ids) in enumerate(rows):
                gen, finish = self._stopped(toks[b].tolist(), brackets)
                c = Completion(text=self.tokenizer.decode(gen, skip_special_tokens=True).strip(), tokens_in=len(ids),
                               tokens_out=len(gen), latency_s=per_row, finish_reason=finish)
                if req.answer_letters:
                    pieces = [self.tokenizer.decode([t], skip_special_tokens=True) for t in gen]
                    found = find_answer_position(gen, pieces, self._letter_ids(req.answer_letters))
                    if found is not None:
                        j, at, chosen = found
                        c.letter_logprobs = {L: float(reads[b, j, col[tid]]) for L, tid in at.items()}
                        c.answer_logprob = c.letter_logprobs[chosen] if chosen is not None else None
                if settings and (extra := settings.get(i)) is not None:
                    c.settings = extra
                done(i, c)

    def _stopped(self, gen: list[int], brackets) -> tuple[list[int], str]:
        """A row's tokens up to where it stopped, and why: before its end of
        turn ("stop"), through the "]" closing an answer's bracket where
        ``brackets`` is given ("stop"), or all of them ("length")."""
        opened = False
        for j, t in enumerate(gen):
            if t in self.eos_ids:
                return gen[:j], "stop"
            if brackets is not None:
                is_open = t in brackets[0]
                if t in brackets[1] and (opened or is_open):
                    return gen[:j + 1], "stop"
                opened |= is_open
        return gen, "length"


class _Scoring:
    """Letter scoring of one call, slice by slice (``TransformersBackend._score_all``).

    ``add`` takes a slice's tokenised requests: its distinct sequences join
    the pool of rows not yet sent, the pool is planned into batches across
    questions (:func:`medaudit.llm.prefix.plan`), and every batch but the
    last, partly filled one is sent (all of them with ``final``). A sent
    batch's log-probs come back to the host without waiting; the batch
    before it is read meanwhile — its letters drawn and handed to ``done``
    while the device computes the next. A row's key is (slice, sequence):
    a prompt repeated within a slice is evaluated once."""

    def __init__(self, backend: TransformersBackend, done: Callable, letter_sets: set):
        self.b, self.done = backend, done
        self.cuda = str(backend.device).startswith("cuda")
        self.fits, self.cap = backend._batch_fits(0, 2)
        self.read = sorted({tid for letters in letter_sets for tid in backend._score_ids(letters)})
        self.col = {tid: c for c, tid in enumerate(self.read)}
        self.rows: dict[tuple, list] = {}        # (slice, sequence) -> its requests
        self.pool: list = []                     # groups not sent yet
        self.rest: list = []
        self.settings: dict[int, dict] = {}
        self.pending = None
        self.slices = 0
        self.last = time.perf_counter()

    def add(self, todo: list, final: bool) -> None:
        b, j = self.b, self.slices
        self.slices += 1
        self.rest += [t for t in todo if not t[1].answer_letters]
        mine: dict[tuple, list] = {}
        for t in todo:
            if t[1].answer_letters:
                append, _ = b.score_form(t[1].answer_letters)
                mine.setdefault((j, tuple(t[2]) + ((b.open_id,) if append else ())), []).append(t)
        self.rows.update(mine)

        def stem_len(key, _):
            _, req, ids = mine[key][0]
            return b.stem_len(req, ids) if b.share_stem else 0

        self.pool += prefix.make_groups(((key, key[1]) for key in mine), stem_len, min_tail=2)
        batches = prefix.plan(self.pool, self.fits, self.cap) if self.pool else []
        self.pool = [] if final or not batches else batches.pop()
        for batch in batches:
            self._send(batch)
        if final:
            self._collect()

    def _send(self, batch: list) -> None:
        import torch

        logits, _ = prefix.prefill(self.b.model, batch, self.b.pad_id, keep=2, chunk_tokens=self.b.chunk_tokens)
        self.b.batch_rows.append(sum(len(g.tails) for g in batch))
        # the full-vocabulary log-softmax at the last two positions, read at the ids needed
        lp = torch.log_softmax(logits.float(), dim=-1)[:, :, self.read]
        del logits
        ready = None
        if self.cuda:      # to the host without waiting; the batch before is read meanwhile
            lp = lp.to("cpu", non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        else:
            lp = lp.cpu()
        self._collect()
        self.pending = ([k for g in batch for k in g.keys], lp, ready)

    def _collect(self) -> None:
        """The letters of the batch sent before, drawn on the host."""
        import torch

        if self.pending is None:
            return
        keys, lp, ready = self.pending
        self.pending = None
        if ready is not None:
            ready.synchronize()
        lp = lp.to(torch.float64).numpy()
        now = time.perf_counter()
        per_row = (now - self.last) / sum(len(self.rows[k]) for k in keys)
        self.last = now
        for row, key in zip(lp, keys):
            for (i, req, ids) in self.rows.pop(key):
                c, extra = self.b._scored(req, ids, row, self.col, per_row)
                if c is None:
                    self.rest.append((i, req, ids))
                    self.settings[i] = extra
                else:
                    self.done(i, c)

    def finish(self) -> tuple[list, dict]:
        """(what is left to generate, the settings of the prompts scoring
        handed to generation)."""
        self._collect()
        return self.rest, self.settings


def draw_letter(logprobs: list[float], temperature: float, top_p: float, seed: int) -> int:
    """The index of the letter a sample draws from the letters' log-probs:
    the most probable at temperature 0, else transformers' temperature and
    top-p warpers over the letters (renormalised) and one
    ``torch.multinomial`` draw from a generator seeded with ``seed``."""
    import torch

    scores = torch.tensor([logprobs], dtype=torch.float64)
    if not temperature or temperature <= 0:
        return int(torch.argmax(scores[0]))
    scores = warp(scores, warpers(float(temperature), float(top_p)))
    g = torch.Generator().manual_seed(int(seed))
    return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=g)[0, 0])


class _RowSampler:
    """A logits processor that samples each row with its own generator:
    transformers' temperature and top-p warpers on the batch, then, per row,
    one ``torch.multinomial`` draw from ``torch.Generator().manual_seed(seed)``;
    the drawn token is left as the row's only finite score, so greedy
    ``generate`` takes it. A row's tokens therefore depend on its own logits
    and seed only, never on the other rows of its batch."""

    def __init__(self, temperature: float, top_p: float, seeds: list[int], device: str, top_k: int = 0):
        import torch

        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.chain = warpers(temperature, top_p, top_k)
        self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]

    def __call__(self, input_ids, scores):
        import torch

        warped = warp(scores, self.chain)
        probs = torch.softmax(warped, dim=-1)
        out = torch.full_like(scores, -float("inf"))
        for b, g in enumerate(self.generators):
            tok = torch.multinomial(probs[b:b + 1], 1, generator=g)[0, 0]
            out[b, tok] = 0.0
        return out
