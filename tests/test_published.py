"""The published page's arithmetic (medaudit.published): the n a printed
percentage implies, and Table II's Δ Avg recomputed from the printed
accuracies."""
from __future__ import annotations

import re

from medaudit import published


def test_implied_n_reads_the_count_from_printed_percentages():
    assert published.implied_n([65.99, 66.67, 70.07, 64.63, 69.39]) == 147      # Table II, LLaMA
    assert published.implied_n([64.67, 60.67, 60.0, 58.67]) == 150               # Table I, LLaMA
    assert published.implied_n([12.37, 11.34, 18.56, 6.19]) == 97                # Table V, LLaMA (harmful flips)
    assert published.implied_n([50.0]) is None


def test_delta_avg_of_table_ii_is_recomputed_from_the_printed_accuracies():
    entry = next(e for e in published.load() if e["ours"] == "07_table2_accuracy")
    pub = dict(zip(entry["columns"], entry["published"]["MedGemma-27B"]))
    why = [published.REASONS["delta_from_printed"](entry, "MedGemma-27B", f"Δ Avg (C1-C3) · {c}", pub, None, "x")
           for c in ("Id", "Ctx", "Id+Ctx")]
    assert [re.search(r"gives (\S+)", w).group(1) for w in why] == ["−1.81", "+1.81", "−0.23"]
    assert "printed -1.98 / -1.98" in why[0]
