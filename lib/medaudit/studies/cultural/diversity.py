"""Section 5 of the cultural-cue study (seed 003): mean pairwise cosine similarity of the added
texts (MiniLM embeddings unless ``embed`` is given).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from medaudit.llm.embeddings import minilm_embed
from .config import CulturalConfig


# ==========================================================================
# 5. diversity of the added text


def mean_pairwise_cosine(emb: np.ndarray) -> float:
    """Mean cosine similarity over all unordered pairs of rows (NaN below 2 rows)."""
    e = np.asarray(emb, dtype=float)
    n = len(e)
    if n < 2:
        return np.nan
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    s = e @ e.T
    return float((s.sum() - np.trace(s)) / (n * (n - 1)))


def diversity(checked: pd.DataFrame, embed: Callable[[Sequence[str]], np.ndarray] | None = None, *,
              config: CulturalConfig) -> pd.DataFrame:
    """Mean pairwise cosine similarity of the added texts of the released
    cultural variants (``checked`` from :func:`check_variants`), per culture
    × cue and per culture over all cues (cue "all": the seed's "within each
    cultural group", reported as 0.3142). Empty added texts (item 90 t3
    identifier) are left out. ``embed`` maps texts to embeddings (default
    :func:`minilm_embed`)."""
    embed = embed or minilm_embed
    c = checked[(checked["kind"] == "cultural") & (checked["added"].str.strip() != "")].reset_index(drop=True)
    emb = embed(list(c["added"]))
    out = []
    for culture in config.culture_names:
        for cue in [*config.cue_names, "all"]:
            m = (c["culture"] == culture) & ((c["cue"] == cue) if cue != "all" else True)
            out.append({"culture": culture, "cue": cue, "n": int(m.sum()),
                        "mean_cosine": mean_pairwise_cosine(emb[m.to_numpy()])})
    return pd.DataFrame(out)
