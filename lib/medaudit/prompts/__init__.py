"""Prompt templates, one file each, verbatim from the seeds where they give one."""
from __future__ import annotations

from importlib import resources


def load(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (trailing newline removed)."""
    return resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")
