"""The plan of the killed batched run (tests/test_hf_batched.py and the
child process it starts, which imports this file from tests/support/)."""
from __future__ import annotations

import pandas as pd

from medaudit.llm import runs
from medaudit.llm.base import GenParams


def killed_run_plan(be) -> list[runs.Sample]:
    """Eight free-text samples, two per batch, 24 tokens each."""
    prompts = pd.DataFrame({"item_id": ["q1", "q2"], "condition": ["base", "base"],
                            "messages": [[{"role": "user", "content": "Name one symptom of anaemia."}],
                                         [{"role": "user", "content": "What does the liver do?"}]]})
    return runs.plan_free(prompts, backend=be.kind, model_id=be.model_id, k=4, seed=9,
                         gen=GenParams(0.8, 0.95, 24), prompt_format="open")
