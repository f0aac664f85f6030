"""Every public function, class and method of the library says what it does.

A public name is one not starting with ``_``: a module-level function or
class, or a method of a public class. Read from the source with :mod:`ast`,
so nothing is imported (a module whose optional dependency is missing is
checked as much as any other).
"""
from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "medaudit"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _undocumented(source: str) -> list[tuple[int, str]]:
    """(line, name) of each public module-level function or class, and each
    public method of a public class, in ``source`` without a docstring."""
    out = []
    for node in ast.parse(source).body:
        if not isinstance(node, _DEFS) or node.name.startswith("_"):
            continue
        if not ast.get_docstring(node):
            out.append((node.lineno, node.name))
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if (isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not member.name.startswith("_") and not ast.get_docstring(member)):
                    out.append((member.lineno, f"{node.name}.{member.name}"))
    return out


def _missing(lib: Path) -> list[str]:
    """``file:line name`` of every public definition under ``lib`` without a docstring."""
    return [f"{path.relative_to(lib.parent)}:{line} {name}"
            for path in sorted(lib.rglob("*.py"))
            for line, name in _undocumented(path.read_text(encoding="utf-8"))]


def test_every_public_definition_has_a_docstring():
    missing = _missing(LIB)
    assert not missing, f"{len(missing)} public definitions without a docstring:\n" + "\n".join(missing)


def test_reader_finds_a_planted_undocumented_definition(tmp_path):
    lib = tmp_path / "medaudit"
    (lib / "sub").mkdir(parents=True)
    (lib / "documented.py").write_text('def f():\n    """Does f."""\n')
    (lib / "sub" / "planted.py").write_text(
        '"""A module."""\n'
        "def _private():\n    pass\n"
        "def bare():\n    return 1\n"
        'class Shown:\n    """A class."""\n'
        "    def method(self):\n        pass\n"
        "    def _hidden(self):\n        pass\n"
        "class _Private:\n    def method(self):\n        pass\n"
        "async def waits():\n    pass\n"
        'def later():\n    x = 1\n    """Not first: not a docstring."""\n'
    )
    assert _missing(lib) == ["medaudit/sub/planted.py:4 bare", "medaudit/sub/planted.py:8 Shown.method",
                             "medaudit/sub/planted.py:15 waits", "medaudit/sub/planted.py:17 later"]
