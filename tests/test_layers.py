"""The shape of the library: ranked layers, four study modules on a shared layer.

A fifth study or a new backend must be addable without touching the others,
so no study module imports another study module, and the shared layers
(``llm/`` and the shared modules the studies use) import no study module.
Read from the source with :mod:`ast`, so a lazy import inside a function
counts as much as one at the top.
"""
from __future__ import annotations

import ast
import functools
import shutil
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "medaudit"
STUDIES = {"cultural", "fairmedqa", "openended", "soap"}
# the layer above the studies: may import them (they run or present them; the power planner and
# the release importer's `add` command read a release through the study's own condition map; the coverage
# simulation runs the studies' own tests; soap_inference: notebook 06's tests and intervals on the SOAP study's
# verdicts; table3 recounts seed 003's Table III for the published page; the recovery of planted effects
# runs a study's own analysis on a planted model's answers; no study imports either)
ABOVE = {"config", "runner", "site", "published", "power", "released", "coverage", "soap_inference", "table3",
         "recovery"}


def _module(path: Path, lib: Path = LIB) -> str:
    """``llm/runs.py`` → ``llm.runs``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(lib).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "medaudit"


@functools.lru_cache(maxsize=None)
def _graph(lib: Path = LIB) -> dict[str, frozenset[str]]:
    """module → the library modules it imports (at the top or inside a
    function: every import statement of its source); read once per folder."""
    paths = {_module(p, lib): p for p in lib.rglob("*.py")}
    out = {}
    for name, path in paths.items():
        pkg = name.split(".") if path.name == "__init__.py" and name != "medaudit" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                    mod = base + (node.module.split(".") if node.module else [])
                elif (node.module or "").startswith("medaudit"):
                    mod = node.module.split(".")[1:]
                else:
                    continue
                deps |= {c for c in [".".join(mod + [a.name]) for a in node.names] + [".".join(mod)] if c in paths}
            elif isinstance(node, ast.Import):
                deps |= {a.name[len("medaudit."):] for a in node.names
                         if a.name.startswith("medaudit.") and a.name[len("medaudit."):] in paths}
        out[name] = frozenset(deps - {name})
    return out


# The ranks, lowest first. A module imports only modules of its own rank or
# below (lazily inside a function too), and the graph has no cycle. A new
# module is given its place here.
RANKS = [
    # the foundation: files, text, parsing, prompt texts, metrics on arrays
    {"medaudit", "paths", "atomic", "checksum", "timing", "text", "parse", "prompts", "metrics", "testpower", "scoring",
     "uncertainty", "goldreading", "progress"},
    # data, conditions, prompt formats, statistics, tables and figures
    {"data", "amqa", "definitions", "formats", "selection", "variants", "perturb", "dialogs", "stats", "labels",
     "tables",
     "plots", "mitigations", "intervals", "equivalence", "judge_error", "mixed", "exhibits", "sandwich"},
    # the model layer: backends, the store, the run loop and its dispatch policies, recordings, the importer
    {"llm", "llm.base", "llm.store", "llm.models", "llm.openai_backend", "llm.llamacpp", "llm.hf",
     "llm.vllm_backend", "llm.embeddings", "llm.dispatch", "llm.runs", "llm.mcq", "llm.recorded", "llm.importer",
     "llm.prefix", "llm.random_model", "llm.planted"},
    # stages the studies share
    {"agents", "judging", "calibration", "colophon", "bench_bootstrap", "decoding"},
    # the four studies
    {"cultural", "fairmedqa", "openended", "soap"},
    # what reads the studies: profiles, released answers, the published tables, the benchmarks, and the
    # sentences each notebook ends with (findings: it reads the studies' tables, imports only intervals and equivalence)
    {"config", "released", "released.cli", "released.__main__", "published", "bench", "bench_gpu", "bench_notebook",
     "bench_planted",
     "soap_inference", "table3", "findings"},
    {"nbparams", "power", "coverage", "runs", "recovery"},
    # running notebooks and the report; the other harnesses' command line, which resolves a run's
    # parameters as the runner does
    {"runner", "site", "harness"},
    # the batch and Batch-API command lines
    {"batch", "batch_api", "batch_vendors", "batch_anthropic", "batch_gemini"},
    # the round loops on a cluster
    {"slurm", "ray_run"},
]
# A package of RANKS (a study split by the sections of its paper) ranks as a unit: its submodules
# share its rank among the other modules, and within it they have places of their own, lowest
# first, the package's ``__init__`` last (a submodule never imports its own package). A submodule
# imports only submodules of its own place or below. A new submodule is given its place here.
PACKAGES = {
    "fairmedqa": [
        {"fairmedqa.config"},
        {"fairmedqa.neutralise", "fairmedqa.generation", "fairmedqa.answers", "fairmedqa.metrics",
         "fairmedqa.validation", "fairmedqa.figures", "fairmedqa.fairmp"},
        {"fairmedqa.cpv", "fairmedqa.versions"},
        {"fairmedqa.arms"},
        {"fairmedqa"},
    ],
}
RANK = {m: i for i, layer in enumerate(RANKS) for m in layer}
PLACE = {m: (pkg, i) for pkg, places in PACKAGES.items() for i, place in enumerate(places) for m in place}
RANK |= {m: RANK[pkg] for m, (pkg, _) in PLACE.items()}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module of a higher rank, and, within a package, of a
    submodule of a higher place."""
    out = []
    for m, deps in graph.items():
        for d in deps:
            if m in PLACE and d in PLACE and PLACE[m][0] == PLACE[d][0]:
                (pkg, i), (_, j) = PLACE[m], PLACE[d]
                if j > i:
                    out.append(f"{m} ({pkg} place {i}) imports {d} ({pkg} place {j})")
            elif m in RANK and d in RANK and RANK[d] > RANK[m]:
                out.append(f"{m} (rank {RANK[m]}) imports {d} (rank {RANK[d]})")
    return sorted(out)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_rank():
    graph = _graph()
    assert set(graph) - set(RANK) == set(), "give these modules a place in RANKS"
    assert set(RANK) - set(graph) == set(), "RANKS names modules that do not exist"


def test_no_module_imports_one_above_it():
    assert _upward(_graph()) == []


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def _planted(tmp_path: Path, module: str, line: str) -> dict[str, set[str]]:
    lib = tmp_path / "medaudit"
    shutil.copytree(LIB, lib, ignore=shutil.ignore_patterns("__pycache__"))
    path = lib.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {line}\n", encoding="utf-8")
    return _graph(lib)


def test_a_planted_upward_import_fails(tmp_path):
    """A lazy import of the batch command line from the run loop (the circle this test once missed)."""
    graph = _planted(tmp_path, "llm.runs", "from .. import batch")
    assert _upward(graph) == ["llm.runs (rank 2) imports batch (rank 8)"]
    assert any("llm.runs" in c and "batch" in c for c in _cycles(graph))


def test_a_planted_upward_import_within_a_package_fails(tmp_path):
    """The configuration, the package's lowest place, importing the mitigation arms (its highest),
    and a metric importing its own package's ``__init__``."""
    graph = _planted(tmp_path, "fairmedqa.config", "from .arms import arm_label")
    assert _upward(graph) == ["fairmedqa.config (fairmedqa place 0) imports fairmedqa.arms (fairmedqa place 3)"]
    assert any("fairmedqa.config" in c and "fairmedqa.arms" in c for c in _cycles(graph))
    graph = _planted(tmp_path / "b", "fairmedqa.metrics", "from . import pair_table")
    assert _upward(graph) == ["fairmedqa.metrics (fairmedqa place 1) imports fairmedqa (fairmedqa place 4)"]


def test_a_planted_upward_import_from_a_package_fails(tmp_path):
    """A submodule ranks as its package among the other modules."""
    graph = _planted(tmp_path, "fairmedqa.metrics", "from .. import released")
    assert _upward(graph) == ["fairmedqa.metrics (rank 4) imports released (rank 5)"]


def test_every_package_module_has_a_place():
    packages = {m.split(".")[0] for m in _graph() if m.split(".")[0] in PACKAGES}
    for pkg in packages:
        inside = {m for m in _graph() if m == pkg or m.startswith(pkg + ".")}
        assert inside == set().union(*PACKAGES[pkg]), f"give these {pkg} modules a place in PACKAGES"


def test_a_planted_cycle_within_a_rank_fails(tmp_path):
    graph = _planted(tmp_path, "data", "from . import definitions")
    assert _upward(graph) == [] and _cycles(graph) == [["data", "definitions"]]


def _imports(path: Path) -> set[str]:
    """The first name below the package of every library module ``path`` imports."""
    return {d.split(".")[0] for d in _graph()[_module(path)]}


MODULES = sorted(p for p in LIB.rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_no_study_imports_another_and_no_shared_module_imports_a_study(path):
    name = _module(path).split(".")[0]   # a package's submodule is its package
    if name in ABOVE:
        return
    studies = _imports(path) & STUDIES - {name}
    assert not studies, f"{path.relative_to(LIB)} imports the study module(s) {sorted(studies)}"


def test_the_graph_reader_sees_imports():
    """The reader finds the imports it must forbid (a guard against a reader that sees nothing)."""
    package = set().union(*(_imports(p) for p in (LIB / "fairmedqa").glob("*.py")))
    assert {"agents", "paths", "prompts", "variants", "stats", "text", "llm", "fairmedqa"} <= package
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


def _private_crossings(path: Path) -> list[str]:
    """``from .x import _y`` and ``x._y`` where ``x`` is a library module this file imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("medaudit")):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"from {'.' * node.level}{node.module or ''} import {a.name}")
                elif a.name[:1].islower():
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("medaudit")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append(f"{node.value.id}.{node.attr}")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_no_private_name_crosses_a_module(path):
    assert _private_crossings(path) == []


def test_the_private_name_reader_sees_a_crossing(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("from .llm import models\nfrom .runner import _Ordered\nx = models._model_file('a')\n")
    assert _private_crossings(p) == ["from .runner import _Ordered", "models._model_file"]
