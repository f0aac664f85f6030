"""Prompts that share their stems, batched across questions, for a
transformers causal LM: the machinery under the transformers
backend's letter scoring and its ``decode: prefix`` generation.

**Groups.** The K samples of a multiple-choice question differ only after
their stem (the chat header and the vignette): each distinct prompt is a
*tail* continuing its question's *stem*. :func:`make_groups` puts the
distinct token sequences under their stems (duplicates are evaluated once),
so a question's stem is evaluated once however many samples continue it.

**Batches across questions.** :func:`plan` packs many groups into one
batch — sorted by stem and tail length so little is padding — as long as a
memory test (``fits``, the backend's, from the device's free memory) holds
for the whole batch: the stems' pass, the KV cache repeated for every tail,
the tails' pass and the logits kept.

**Two passes a batch** (:func:`prefill`). The batch's stems, left-padded,
go through the model once (``use_cache``; logits of one position only); the
cache is repeated row by row for each stem's tails (``reorder_cache`` with
a repeating index); the tails, left-padded after the stems, go through the
model once with position ids that continue each row's own stem and an
attention mask that hides both paddings; the output head is applied only
at the last ``keep`` positions (``logits_to_keep``), where a letter or the
first generated token is read. A row's logits are those of its full prompt
evaluated alone, up to the rounding of batched arithmetic (tests: within
1e-4 in float32 in any batch composition and order).

**Decoding** (:func:`decode`). From the tails' last logits, every row
draws its next token and the batch steps one token at a time over the
same cache; a row stops at a stop token (the end of turn; with
``stop_at_answer``, also a token that closes the bracket of an answer
"[B]"), and the loop ends when every row has stopped or at ``max_new``.
The host reads whether all rows have stopped every ``check_every`` steps
only.

**The sampler** (:class:`Sampler`) is vectorised over rows and keeps each
row's draws its own: transformers' temperature, top-k and top-p warpers over
the batch (the sampling rule of ``generate(do_sample=True)``), then one
inverse-CDF draw per row from a uniform number that depends only on the
row's seed and the step — ``numpy.random.default_rng(seed).random(max_new)``
read at the step — so a sample's text never depends on its batch. It is
not the random stream of ``torch.multinomial``: texts drawn here differ
from the ``decode: generate`` path's for the same seed, and the backend
stores them under another name (``transformers-prefix``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass
class Group:
    """One stem and the rows after it: each row's tail (at least one token)
    and the caller's key for it (``keys[i]`` names ``tails[i]``)."""
    stem: tuple[int, ...]
    tails: list[tuple[int, ...]] = field(default_factory=list)
    keys: list = field(default_factory=list)


def make_groups(rows: Iterable[tuple[object, tuple[int, ...]]], stem_len: Callable[[object, tuple[int, ...]], int],
                min_tail: int = 1) -> list[Group]:
    """``rows`` ((key, token sequence)…) under their stems: ``stem_len(key,
    seq)`` tokens, shortened where needed so that every tail keeps
    ``min_tail`` tokens (the positions read). A key seen before is not a new
    row (scoring keys rows by their sequence: a duplicate prompt is
    evaluated once; generation by request: each sample its own row). Rows
    in first-seen order within a group."""
    by_stem: dict[tuple[int, ...], Group] = {}
    seen: set = set()
    for key, seq in rows:
        if key in seen:
            continue
        seen.add(key)
        seq = tuple(seq)
        n = max(0, min(int(stem_len(key, seq)), len(seq) - min_tail))
        g = by_stem.setdefault(seq[:n], Group(seq[:n]))
        g.tails.append(seq[n:])
        g.keys.append(key)
    return list(by_stem.values())


def plan(groups: list[Group], fits: Callable[[int, int, int, int], bool], max_rows: int) -> list[list[Group]]:
    """Batches of groups: sorted by stem length then longest tail, packed
    while ``fits(groups, rows, stem_width, tail_width)`` holds and the rows
    stay within ``max_rows``. A group with more tails than fit is split
    (its stem then evaluated once per part); a group that fits alone in no
    batch still gets one of its own, one tail at a time."""
    parts: list[Group] = []
    for g in groups:
        order = sorted(range(len(g.tails)), key=lambda i: len(g.tails[i]))
        tails, keys = [g.tails[i] for i in order], [g.keys[i] for i in order]
        step = max(1, max_rows)
        while not fits(1, min(step, len(tails)), len(g.stem), len(tails[min(step, len(tails)) - 1])) and step > 1:
            step = max(1, step // 2)
        parts += [Group(g.stem, tails[i:i + step], keys[i:i + step]) for i in range(0, len(tails), step)]
    # each part's tails are sorted by length: its last is its longest
    parts.sort(key=lambda g: (len(g.stem), len(g.tails[-1])))
    batches: list[list[Group]] = []
    cur: list[Group] = []
    rows = ls = lt = 0
    for g in parts:
        r, s, t = rows + len(g.tails), max(ls, len(g.stem)), max(lt, len(g.tails[-1]))
        if cur and (r > max_rows or not fits(len(cur) + 1, r, s, t)):
            batches.append(cur)
            cur, r, s, t = [], len(g.tails), len(g.stem), len(g.tails[-1])
        cur.append(g)
        rows, ls, lt = r, s, t
    if cur:
        batches.append(cur)
    return batches


@functools.cache
def _cache_arg(cls) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def _forward(model, cache, **kw):
    """One forward pass continuing ``cache`` (None: none), and the cache
    after it: transformers names the argument ``cache`` from 5.2x on and
    ``past_key_values`` before."""
    out = model(**kw, **{_cache_arg(type(model)): cache})
    after = getattr(out, "cache", None)
    return out, after if after is not None else getattr(out, "past_key_values", None)


@dataclass
class State:
    """What decoding continues from: the cache of every row, the attention
    mask (width: stems + tails + the new tokens' slots), the position of
    each row's next token and where the new slots start."""
    cache: object
    mask: object
    next_pos: object
    start: int


def left_padded(seqs: list[tuple[int, ...]], width: int, pad_id: int):
    """(ids, mask) of ``seqs`` left-padded to ``width`` (on the host)."""
    import torch

    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s):] = 1
    return ids, mask


def _rows_of(model, cache, index):
    """A new cache holding the rows ``index`` of ``cache`` (a row may be
    taken several times), every layer's keys and values."""
    from transformers import DynamicCache

    out = DynamicCache(config=model.config)
    for i, layer in enumerate(cache.layers):
        out.update(layer.keys.index_select(0, index), layer.values.index_select(0, index), i)
    return out


def prefill(model, batch: list[Group], pad_id: int, keep: int = 1, new_slots: int = 0,
            chunk_tokens: int | None = None):
    """The batch's rows (each group's tails in order) evaluated after their
    stems (module docstring): returns (logits ``[rows, keep, vocab]`` of the
    last ``keep`` positions, in the model's dtype, and a :class:`State` when
    ``new_slots`` > 0, else None). Without new slots and with
    ``chunk_tokens``, the tails go through the model in chunks of similar
    length (at most ``chunk_tokens`` tokens with their padding, each with
    its rows of the stems' cache), so little of a tail pass is padding."""
    import torch

    dev = model.device
    put = _to_device(dev)
    if all(len(g.tails) == 1 for g in batch):    # nothing shared: one pass over the whole prompts
        batch = [Group((), [g.stem + g.tails[0]], g.keys) for g in batch]
    rows = [(gi, t) for gi, g in enumerate(batch) for t in g.tails]
    ls = max(len(g.stem) for g in batch)
    n = len(rows)
    stem_ids, stem_mask = left_padded([g.stem for g in batch], ls, pad_id)
    cache = None
    if ls:
        pos = (stem_mask.cumsum(-1) - 1).clamp(min=0)
        _, cache = _forward(model, None, input_ids=put(stem_ids), attention_mask=put(stem_mask),
                            position_ids=put(pos), use_cache=True, logits_to_keep=1)
    if new_slots or not chunk_tokens:
        chunks = [list(range(n))]
    else:
        order = sorted(range(n), key=lambda r: len(rows[r][1]))
        chunks, cur = [], []
        for r in order:             # ascending length: the last row of a chunk is its longest
            if cur and (len(cur) + 1) * len(rows[r][1]) > chunk_tokens:
                chunks.append(cur)
                cur = []
            cur.append(r)
        chunks = chunks + [cur] if chunks else [list(range(n))]     # one chunk: in row order
    logits = None
    for chunk in chunks:
        lt = max(len(rows[r][1]) for r in chunk)
        tail_ids, tail_mask = left_padded([rows[r][1] for r in chunk], lt, pad_id)
        index = [rows[r][0] for r in chunk]
        mask = torch.cat([stem_mask[index], tail_mask, torch.zeros((len(chunk), new_slots), dtype=torch.long)], 1)
        stem_lens = stem_mask[index].sum(-1)
        pos = stem_lens[:, None] + (tail_mask.cumsum(-1) - 1).clamp(min=0)
        c = None
        if cache is not None:
            c = cache if len(chunks) == 1 and index == list(range(len(batch))) else \
                _rows_of(model, cache, put(torch.tensor(index, dtype=torch.long)))
        mask = put(mask)
        out, c = _forward(model, c, input_ids=put(tail_ids), attention_mask=mask[:, :ls + lt],
                          position_ids=put(pos), use_cache=c is not None or new_slots > 0,
                          logits_to_keep=min(keep, lt))
        if len(chunks) == 1:
            logits = out.logits
        else:
            if logits is None:
                logits = out.logits.new_empty((n, *out.logits.shape[1:]))
            logits[put(torch.tensor(chunk, dtype=torch.long))] = out.logits
    state = None
    if new_slots:
        state = State(c, mask, put(stem_lens + tail_mask.sum(-1)), ls + lt)
    return logits, state


def _to_device(dev) -> Callable:
    """A host tensor's copy on ``dev``. On a GPU the copy leaves from pinned
    memory without waiting: a plain copy from pageable memory waits until
    the device has finished everything queued before it, so the device
    would sit idle while the host prepares each chunk (the host runs ahead
    instead, and the device's queue stays full)."""
    if getattr(dev, "type", str(dev)) != "cuda":
        return lambda t: t.to(dev)
    return lambda t: t.pin_memory().to(dev, non_blocking=True)


def warpers(temperature: float, top_p: float, top_k: int = 0) -> list:
    """transformers' sampling chain as ``generate(do_sample=True)`` builds
    it: temperature (unless 1), top-k (when on), then top-p (unless 1)."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    chain = []
    if temperature != 1.0:
        chain.append(TemperatureLogitsWarper(temperature))
    if top_k:
        chain.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p))
    return chain


def warp(scores, chain: list):
    """``scores`` through the warpers of ``chain``, in order."""
    for w in chain:
        scores = w(None, scores)
    return scores


class Sampler:
    """Next tokens for a batch of rows (module docstring): greedy at
    temperature 0, else transformers' warpers and one inverse-CDF draw per
    row from the row's own uniform numbers (``seeds``: one per row)."""

    def __init__(self, temperature: float, top_p: float, seeds: list[int], max_new: int, device,
                 top_k: int = 0):
        import numpy as np
        import torch

        self.greedy = not temperature or temperature <= 0
        self.warpers = []
        if not self.greedy:
            self.warpers = warpers(float(temperature), float(top_p), int(top_k))
            u = np.stack([np.random.default_rng(int(s)).random(max(1, max_new)) for s in seeds])
            self.uniform = torch.tensor(u, dtype=torch.float64, device=device)

    def __call__(self, logits, step: int):
        """``logits``: ``[rows, vocab]`` at one position; returns ``[rows]``."""
        import torch

        if self.greedy:
            return logits.argmax(-1)
        scores = warp(logits.float(), self.warpers)
        cum = torch.softmax(scores, dim=-1).to(torch.float64).cumsum(-1)
        target = self.uniform[:, step:step + 1] * cum[:, -1:]
        # the first token whose cumulative probability passes the target: a
        # token of probability 0 (cut by top-p or top-k) is never drawn
        return torch.searchsorted(cum, target, right=True).squeeze(-1).clamp(max=cum.shape[-1] - 1)


class Stepper:
    """One decoding step for every row at once: the next token of each row
    in, the logits of the position after it out.

    ``static`` copies the prefill's cache into a fixed-size cache
    (transformers' ``StaticCache``, written in place at each row's next slot)
    and passes a ready 4D attention mask, so that every step has the same
    shapes and addresses; ``graph`` (CUDA only) then records the step once
    as a CUDA graph and replays it, which removes the per-step cost of
    launching each layer's kernels from Python (on one request, that cost,
    not the GPU, bounds a decoding step). A step that cannot be recorded
    is run without the graph, and ``graph_error`` says why."""

    def __init__(self, model, state: State, max_new: int, static: bool = False, graph: bool = False):
        import torch

        self.model, self.state, self.static = model, state, static or graph
        self.graph, self.graph_error, self._graph = graph, "", None
        if not self.static:
            return
        from transformers import StaticCache

        n = state.mask.shape[0]
        width = state.start + max_new
        cache = StaticCache(config=model.config, max_cache_len=width)
        for layer, old in zip(cache.layers, state.cache.layers):
            layer.lazy_initialization(old.keys, old.values)
            layer.keys[:, :, :state.start].copy_(old.keys)
            layer.values[:, :, :state.start].copy_(old.values)
            layer.cumulative_length.fill_(state.start)
        state.cache = cache
        self.mask4 = state.mask[:, None, None, :width].bool().contiguous()
        self.tok = torch.zeros(n, 1, dtype=torch.long, device=state.mask.device)
        self.pos = torch.zeros(n, 1, dtype=torch.long, device=state.mask.device)

    def _run(self):
        out, _ = _forward(self.model, self.state.cache, input_ids=self.tok, attention_mask=self.mask4,
                          position_ids=self.pos, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def __call__(self, tok, step: int):
        """The logits after ``tok`` ([rows]), written at slot ``step``."""
        import torch

        st = self.state
        if not self.static:
            st.mask[:, st.start + step] = 1
            out, st.cache = _forward(self.model, st.cache, input_ids=tok[:, None],
                                     attention_mask=st.mask[:, :st.start + step + 1],
                                     position_ids=(st.next_pos + step)[:, None], use_cache=True, logits_to_keep=1)
            return out.logits[:, -1, :]
        self.mask4[:, 0, 0, st.start + step] = True
        self.tok.copy_(tok[:, None])
        self.pos.copy_((st.next_pos + step)[:, None])
        if self._graph is not None:
            self._graph.replay()
            return self._logits
        if self.graph and step >= 1 and not self.graph_error:
            # the first step ran eagerly (warming every kernel up); record this one
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    self._logits = self._run()
                self._graph = g
                g.replay()
                return self._logits
            except Exception as e:           # recorded nothing usable: go on without the graph
                self.graph_error = f"{type(e).__name__}: {e}"[:300]
                self._graph = None
        return self._run()


def decode(model, state: State, first_logits, sampler: Sampler, max_new: int, stop_ids: set[int],
           pad_id: int, read_ids: list[int] | None = None, brackets: tuple[set[int], set[int]] | None = None,
           check_every: int = 8, static: bool = False, graph: bool = False):
    """Generate up to ``max_new`` tokens per row after :func:`prefill`
    (``static`` / ``graph``: :class:`Stepper`).
    A row stops at a token of ``stop_ids`` and, with ``brackets`` (the ids
    of tokens holding "[" and of tokens holding "]"), at a "]" once a "["
    has been written (the bracket of an answer closed). Returns (tokens
    ``[rows, steps]`` on the host, and, where ``read_ids`` is given, their
    log-probs at every step ``[rows, steps, len(read_ids)]``: the
    full-vocabulary log-softmax of the raw logits, read at those ids only;
    and the :class:`Stepper`). A row's tokens after its first stop token
    are ``pad_id``."""
    import torch

    dev = first_logits.device
    n = first_logits.shape[0]
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=dev)
    read = torch.tensor(read_ids, dtype=torch.long, device=dev) if read_ids else None
    tokens = torch.full((n, max_new), pad_id, dtype=torch.long, device=dev)
    reads = []
    done = torch.zeros(n, dtype=torch.bool, device=dev)
    opened = torch.zeros(n, dtype=torch.bool, device=dev)
    if brackets is not None:
        open_t, close_t = (torch.tensor(sorted(b), dtype=torch.long, device=dev) for b in brackets)
    # a recorded step pays for its recording after a few replays
    stepper = Stepper(model, state, max_new, static=static and max_new > 1, graph=graph and max_new >= 8)
    logits = first_logits[:, -1, :]
    steps = 0
    for step in range(max_new):
        if read is not None:
            reads.append(torch.log_softmax(logits.float(), dim=-1)[:, read])
        tok = sampler(logits, step)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        tokens[:, step] = tok
        stop = torch.isin(tok, stops)
        if brackets is not None:
            is_open = torch.isin(tok, open_t)
            stop |= torch.isin(tok, close_t) & (opened | is_open)
            opened |= is_open
        done |= stop
        steps = step + 1
        if steps == max_new or (steps % check_every == 0 and bool(done.all())):
            break
        logits = stepper(tok, step)
    toks = tokens[:, :steps].cpu()
    return toks, (torch.stack(reads, 1).cpu() if reads else None), stepper
