"""Bad definition files for the studies' loader tests (medaudit.prep.definitions):
each test states only its edit and the field and problem the error must name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from medaudit.prep import definitions
from medaudit import paths


def edited_copy(tmp_path: Path, name: str, edit: tuple[str, str]) -> Path:
    """``params/<name>`` with ``edit[0]`` (found exactly once) replaced by ``edit[1]``, under ``tmp_path``."""
    text = paths.params(name).read_text(encoding="utf-8")
    assert text.count(edit[0]) == 1, f"the edit's text occurs {text.count(edit[0])} times in params/{name}"
    p = tmp_path / name
    p.write_text(text.replace(*edit), encoding="utf-8")
    return p


def assert_refused(load, path: Path, field: str, message: str) -> None:
    """``load(path)`` raises a DefinitionError naming ``path``, then ``field``, then ``message``."""
    with pytest.raises(definitions.DefinitionError, match=re.escape(f"{path}: {field}: ") + ".*" + re.escape(message)):
        load(path)
