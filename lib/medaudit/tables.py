"""Writing tables: one call saves CSV, Markdown and LaTeX side by side."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import paths


def save_table(df: pd.DataFrame, name: str, profile: str, caption: str = "",
               index: bool = False) -> pd.DataFrame:
    """Write ``outputs/<profile>/tables/<name>.{csv,md,tex}``; return ``df``
    so a notebook cell can save and show a table in one line."""
    folder = paths.outputs(profile, "tables")
    folder.mkdir(parents=True, exist_ok=True)
    df.to_csv(folder / f"{name}.csv", index=index)
    md = df.to_markdown(index=index)
    (folder / f"{name}.md").write_text((f"{caption}\n\n" if caption else "") + md + "\n", encoding="utf-8")
    tex = df.to_latex(index=index, caption=caption or None, label=f"tab:{name}", escape=True)
    (folder / f"{name}.tex").write_text(tex, encoding="utf-8")
    return df


def table_paths(name: str, profile: str) -> list[Path]:
    folder = paths.outputs(profile, "tables", mkdir=False)
    return [folder / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
