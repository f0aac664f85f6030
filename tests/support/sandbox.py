"""A compendium root of its own for a test: the checkout's params/ copied,
its raw data and recorded answers linked, outputs empty."""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def compendium_root(root: Path) -> dict[str, str]:
    """Fill ``root`` as a compendium (params/ copied, data/raw and
    data/recorded linked) and return the environment that points the
    library at it, with the checkout's model cache (assembled models are
    reused)."""
    shutil.copytree(ROOT / "params", root / "params")
    (root / "data").mkdir()
    for d in ("raw", "recorded"):          # the profiles name raw files and recorded answers
        (root / "data" / d).symlink_to(ROOT / "data" / d)
    return {"MEDAUDIT_ROOT": str(root), "MEDAUDIT_MODEL_CACHE": str(ROOT / ".cache" / "models")}
