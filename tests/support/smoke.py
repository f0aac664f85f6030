"""The smoke profile's notebook-03 stage, planned by the code the notebook
runs (mcq.plan): its three MedQA items, conditions base/+hetero/+homo made
as notebook 02 makes them. Shared by the batch, Batch-API, harness and
order-independence tests."""
from __future__ import annotations

import pandas as pd

from medaudit.llm import GenParams, mcq
from medaudit.prep.perturb import make_variant

SMOKE_ITEMS = [309, 326, 390]             # the smoke profile's 03 items (data/recorded/smoke_03_mcq.jsonl)
SMOKE_CONDITIONS = ["base", "+hetero", "+homo"]
SEED = 20261122
GEN = GenParams(0.7, 0.9, 16)             # the smoke profile's temperature, top_p, max_tokens
MODEL = "smollm2-135m"


def smoke_frames(medqa4, conditions, n_items=3, conds=SMOKE_CONDITIONS):
    rows = medqa4.loc[SMOKE_ITEMS[:n_items]]
    items = pd.DataFrame({"item_id": [f"medqa4-{r:04d}" for r in rows["row"]], "options": list(rows["options"]),
                          "answer": list(rows["answer"]), "answer_idx": list(rows["answer_idx"])})
    variants = []
    for iid, q in zip(items["item_id"], rows["question"]):
        for c in conds:
            text, status = make_variant(q, conditions, c)
            assert text, status
            variants.append({"item_id": iid, "condition": c, "question": text})
    return pd.DataFrame(variants), items


def smoke_plan(backend, medqa4, conditions, k=3, **kw):
    variants, items = smoke_frames(medqa4, conditions, **kw)
    return mcq.plan(variants, items, model=MODEL, backend=backend.kind, model_id=backend.model_id, k=k,
                    seed=SEED, gen=GEN)
