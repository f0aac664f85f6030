"""Definition files: the YAML files under ``params/`` from which a study takes
its names, labels and rules (``cultures.yaml``, ``soap.yaml``,
``fairmedqa.yaml``).

Each study describes its file as a :class:`Definitions` model, its entries
as TypedDicts marked :data:`entry` (so that they stay plain dicts), and
reads it with :func:`load`, once; its functions take that object as an
argument and read nothing from ``params/`` themselves. Unknown keys are
refused at every level, so a misspelt key is an error rather than a silent
default, and so is a key written twice in one mapping (with the profiles'
YAML loader, :func:`medaudit.config.read_yaml`). Every problem of a file is
reported at once in one :class:`DefinitionError`, a line per problem naming
the file and the field path::

    params/soap.yaml: contexts.poverty.examples: must have exactly `positive` and `negative` (has: other, positive)

A validator names a field below the one it checks by raising
:class:`FieldProblem` (:class:`medaudit.prep.data.FieldProblem`, as the data
loaders' validators do).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, with_config

from medaudit import paths
from medaudit.prep.data import FieldProblem   # re-exported: the studies' validators raise it

M = TypeVar("M", bound="Definitions")


class UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key written twice in one mapping
    (plain YAML keeps the last one silently)."""


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' is written twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class Definitions(BaseModel):
    """Base of a study's definitions: unknown keys refused, immutable, fields
    settable by name as well as by their YAML alias."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


entry = with_config(ConfigDict(extra="forbid"))
"""Decorator of a TypedDict that describes one entry of a definition file: unknown keys refused."""


class DefinitionError(ValueError):
    """A definition file is invalid: ``problems`` holds (field path, problem) pairs."""

    def __init__(self, file: str, problems: list[tuple[str, str]]):
        self.file, self.problems = file, list(problems)
        super().__init__("\n".join(f"{file}: {field}: {problem}" for field, problem in self.problems))


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {e}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compiles)]
"""A string that must compile as a regular expression."""


def _shown(path: Path) -> str:
    """``path`` relative to the project root when it lies inside it (``params/soap.yaml``), else as given."""
    try:
        return path.resolve().relative_to(paths.project_root()).as_posix()
    except (ValueError, FileNotFoundError):
        return str(path)


def _field(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _problem(err: dict) -> tuple[str, str]:
    """(field path, problem) of one pydantic error; a :class:`FieldProblem` names its own field."""
    loc = tuple(p for p in err["loc"] if p != "[key]")
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, FieldProblem):
        return ".".join(x for x in (_field(loc), inner.field) if x) or "(file)", inner.problem
    if isinstance(inner, ValueError):
        return _field(loc) or "(file)", str(inner)
    if err["type"] == "missing":
        return _field(loc), "missing"
    if err["type"] == "extra_forbidden":
        return _field(loc), "unknown key"
    got = repr(err.get("input"))
    return _field(loc) or "(file)", f"{err['msg']} (got {got if len(got) <= 60 else got[:57] + '...'})"


def load(model: type[M], path: str | Path) -> M:
    """The definition file ``path`` as a ``model``, or a :class:`DefinitionError`."""
    path = Path(path)
    shown = _shown(path)
    try:
        raw: Any = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
    except yaml.MarkedYAMLError as e:     # a syntax error or a key written twice: name the line
        where = f"line {e.problem_mark.line + 1}" if e.problem_mark else "(yaml)"
        what = "; ".join(x for x in (e.context, e.problem) if x)
        raise DefinitionError(shown, [(where, f"not valid YAML: {what}")]) from None
    except yaml.YAMLError as e:
        raise DefinitionError(shown, [("(yaml)", f"not valid YAML: {e}")]) from None
    if not isinstance(raw, dict):
        raise DefinitionError(shown, [("(file)", "is empty" if raw is None else
                                       f"must be a mapping of key: value, not a {type(raw).__name__}")])
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise DefinitionError(shown, [_problem(err) for err in e.errors()]) from None


__all__ = ["DefinitionError", "Definitions", "FieldProblem", "Regex", "entry", "load"]
