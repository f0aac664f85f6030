"""The shape of the library: four study modules on a shared layer.

A fifth study or a new backend must be addable without touching the others,
so no study module imports another study module, and the shared layers
(``llm/`` and the shared modules the studies use) import no study module.
Read from the source with :mod:`ast`, so a lazy import inside a function
counts as much as one at the top.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "medaudit"
STUDIES = {"cultural", "fairmedqa", "openended", "soap"}
# the layer above the studies: may import them (they run or present them; the power planner and
# the release importer's `add` command read a release through the study's own condition map;
# no study imports either)
ABOVE = {"config", "runner", "site", "published", "power", "released"}


def _imports(path: Path) -> set[str]:
    """The medaudit modules ``path`` imports (first name below the package)."""
    rel = path.relative_to(LIB).with_suffix("")
    pkg = list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                mod = [*base, *(node.module.split(".") if node.module else [])]
                names = [mod + [a.name] for a in node.names] if not node.module else [mod]
            elif (node.module or "").startswith("medaudit"):
                names = [node.module.split(".")[1:] + ([a.name for a in node.names][:1] if node.module == "medaudit"
                                                       else [])]
            else:
                continue
            for n in names:
                if n:
                    out.add(n[0] if n[0] != "llm" or len(n) == 1 else "llm")
                    if not node.module and node.level == 1:
                        out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("medaudit."))
    return out


MODULES = sorted(p for p in LIB.rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_no_study_imports_another_and_no_shared_module_imports_a_study(path):
    name = path.stem
    if name in ABOVE:
        return
    studies = _imports(path) & STUDIES - {name}
    assert not studies, f"{path.relative_to(LIB)} imports the study module(s) {sorted(studies)}"


def test_the_graph_reader_sees_imports():
    """The reader finds the imports it must forbid (a guard against a reader that sees nothing)."""
    assert {"agents", "paths", "prompts", "variants", "stats", "text", "llm"} <= _imports(LIB / "fairmedqa.py")
    assert "cultural" in _imports(LIB / "config.py")


def test_prompt_formats_have_one_home():
    """A prompt format is defined once, in medaudit.formats: nothing under llm/
    loads a prompt (before, llm/mcq.py built the FairMedQA Validation-Agent's
    prompt), and every format the library sends is in the table."""
    import re

    from medaudit import formats

    for path in (LIB / "llm").rglob("*.py"):
        assert "prompts.load(" not in path.read_text(encoding="utf-8"), path.name
    sent = set()
    for path in MODULES:
        sent |= set(re.findall(r'prompt_format="([a-z_]+)"', path.read_text(encoding="utf-8")))
    sent |= {"fairmedqa_generation_json", "cultural_judge", "cultural_augment", "mcq", "mcq_explain"}
    assert sent <= set(formats.FORMATS), sorted(sent - set(formats.FORMATS))
    for f in formats.FORMATS.values():
        for name in f.prompts:
            assert (LIB / "prompts" / f"{name}.txt").exists(), (f.name, name)
