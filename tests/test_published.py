"""The published page's arithmetic (medaudit.publish.published): the n a printed
percentage implies, and Table II's Δ Avg recomputed from the printed
accuracies."""
from __future__ import annotations

import re

from medaudit.publish import published


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


def test_why_they_differ_says_what_this_run_rests_on(tmp_path, monkeypatch):
    """The page said the default profile "answers eight" questions with a Base
    "near chance" beside a table of 3 questions and Base 100.0: what it says
    of a run is now computed from the run's own table."""
    import shutil
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "params", tmp_path / "params")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    folder = tmp_path / "outputs" / "run" / "tables"
    folder.mkdir(parents=True)
    pd.DataFrame({"model": ["qwen2.5-coder-1.5b"], "Base": [100.0], "+hetero": [0.0], "+homo": [-33.33],
                  "p +hetero": [1.0], "p +homo": [1.0], "n +hetero": [3], "n +homo": [3]}) \
        .to_csv(folder / "04_table1_A.csv", index=False)
    entry = next(e for e in published.load() if e["ours"] == "04_table1_A")
    note = published.run_note(entry, "run")
    assert note == ("This run's table: 1 row (qwen2.5-coder-1.5b), its cells resting on 3 questions (one of them "
                    "moves a percentage by 33.3 points), where the seed's rest on 2,364; Base 100.0%, above "
                    "chance (25%).")
    pd.DataFrame({"model": ["a", "b"], "Base": [20.0, 30.0], "n +homo": [8, 12]}).to_csv(folder / "04_table1_A.csv",
                                                                                           index=False)
    assert "8–12 questions" in published.run_note(entry, "run")
    assert "Base 20.0–30.0%, within 10 points of chance (25%)" in published.run_note(entry, "run")
    comp = next(c for c in published.compare("run") if c.ours_name == "04_table1_A")
    assert "8–12 questions" in comp.differs
    for e in published.load():          # no entry's fixed text claims a run's numbers
        assert not re.search(r"default profile|near chance|answers eight|three items|two or\s+three", e["differs"]), \
            e["ours"]
