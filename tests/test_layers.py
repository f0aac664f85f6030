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
STUDIES = {"studies.cultural", "studies.fairmedqa", "studies.openended", "studies.soap"}
# the layer above the studies: may import them (they run or present them; the power planner and
# the release importer's `add` command read a release through the study's own condition map; the coverage
# simulation runs the studies' own tests; studies.profile gathers each study's profile checks for config; the
# recovery of planted effects runs a study's own analysis on a planted model's answers; no study imports either)
ABOVE = {"config", "runner", "publish.site", "publish.published", "validation.power", "released",
         "validation.coverage", "studies.profile", "validation.recovery", "validation.recovery_openended",
         "validation.recovery_soap"}

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


# The packages (and the modules at the top of the library), lowest floor first. A package imports only
# packages and top modules of its own floor or below, and the graph between them has no cycle: the
# folder tree reads bottom-up like the ranks below. A new package or top module is given its floor here.
FLOORS = [
    # files, reading replies, progress lines, the prompt texts; every package's ``__init__`` is a docstring
    {"medaudit", "paths", "atomic", "checksum", "parse", "progress", "prompts", "checks"},
    {"stats"},                       # statistics on arrays and tables, study-agnostic
    {"prep", "report"},              # data preparation; tables, figures and findings
    {"llm"},                         # the model layer and the stages that ask models
    {"studies"},                     # the four studies
    {"config", "bench"},             # profiles (they check every study's keys); the benchmarks
    {"publish", "nbparams"},         # the report and the published numbers; a notebook's parameters
    {"released", "runs"},            # released answers in; runs kept apart
    {"validation", "runner"},        # planner, coverage and recovery; running a notebook
    {"engines"},                     # batch, vendors' batch APIs, Slurm, Ray, other harnesses
]

# The ranks, lowest first. A module imports only modules of its own rank or
# below (lazily inside a function too), and the graph has no cycle. A new
# module is given its place here.
RANKS = [
    # the foundation: files, text, parsing, prompt texts, metrics on arrays; the packages' docstrings
    {"medaudit", "paths", "checks", "atomic", "checksum", "bench.timing", "prep.text", "parse", "prompts",
     "stats.metrics", "stats.testpower", "stats.scoring", "stats.uncertainty", "prep.goldreading", "progress",
     "stats", "prep", "report", "studies", "validation", "engines", "bench", "publish"},
    # data, conditions, prompt formats, statistics, tables and figures
    {"prep.data", "prep.amqa", "prep.definitions", "prep.selection", "prep.variants", "prep.perturb",
     "prep.dialogs", "stats.paired", "stats.regression", "stats.agreement", "stats.distance", "prep.labels",
     "report.tables", "report.plots", "stats.intervals", "stats.equivalence", "stats.judge_error", "stats.mixed",
     "report.exhibits", "stats.sandwich"},
    # the model layer: prompt formats and mitigation instructions, backends, the store, the run loop and its
    # dispatch policies, recordings, the importer
    {"llm", "llm.formats", "llm.mitigations", "llm.base", "llm.store", "llm.models", "llm.openai_backend",
     "llm.llamacpp", "llm.hf",
     "llm.vllm_backend", "llm.embeddings", "llm.dispatch", "llm.runs", "llm.mcq", "llm.recorded", "llm.importer",
     "llm.prefix", "llm.random_model", "llm.planted", "llm.specs"},
    # stages the studies share
    {"studies.agents", "llm.judging", "studies.calibration", "publish.colophon", "bench.bootstrap", "llm.decoding"},
    # the four studies
    {"studies.cultural", "studies.fairmedqa", "studies.openended", "studies.soap", "studies.profile"},
    # what reads the studies: profiles, released answers, the published tables, the benchmarks, and the
    # sentences each notebook ends with (findings: it reads the studies' tables, imports only intervals and equivalence)
    {"config", "released", "released.cli", "released.cli.listing", "released.cli.adding", "released.cli.arms",
     "released.cli.commands", "released.__main__", "publish.published", "bench.cli", "bench.__main__",
     "bench.gpu", "bench.notebook", "bench.planted", "report.findings"},
    {"nbparams", "validation.power", "validation.coverage", "validation.designs", "runs", "validation.recovery",
     "validation.recovery_openended", "validation.recovery_soap", "validation.repetitions"},
    # running notebooks and the report; the other harnesses' command line, which resolves a run's
    # parameters as the runner does
    {"runner", "publish.site", "engines.harness"},
    # the batch and Batch-API command lines
    {"engines.batch", "engines.batch_api", "engines.batch_vendors", "engines.batch_anthropic", "engines.batch_gemini"},
    # the round loops on a cluster
    {"engines.slurm", "engines.ray_run"},
]
# A package of RANKS (a study split by the sections of its paper) ranks as a unit: its submodules
# share its rank among the other modules, and within it they have places of their own, lowest
# first, the package's ``__init__`` last (a submodule never imports its own package). A submodule
# imports only submodules of its own place or below. A new submodule is given its place here.
PACKAGES = {
    "studies.cultural": [
        {"studies.cultural.config"},
        {"studies.cultural.variants", "studies.cultural.metrics", "studies.cultural.judge",
         "studies.cultural.diversity"},
        {"studies.cultural.checks", "studies.cultural.augment", "studies.cultural.exhibits", "studies.cultural.table3"},
        {"studies.cultural"},
    ],
    "studies.soap": [
        {"studies.soap.config"},
        {"studies.soap.pool", "studies.soap.notes", "studies.soap.counterfactuals", "studies.soap.incidence",
         "studies.soap.inference"},
        {"studies.soap.augment"},
        {"studies.soap.disparity", "studies.soap.hallucinations"},
        {"studies.soap.agreement"},
        {"studies.soap"},
    ],
    "studies.openended": [
        {"studies.openended.reformulation", "studies.openended.answers", "studies.openended.clusters",
         "studies.openended.judge"},
        {"studies.openended.stages", "studies.openended.comparison"},
        {"studies.openended.pipeline"},
        {"studies.openended"},
    ],
    "studies.fairmedqa": [
        {"studies.fairmedqa.config"},
        {"studies.fairmedqa.neutralise", "studies.fairmedqa.generation", "studies.fairmedqa.answers",
         "studies.fairmedqa.metrics", "studies.fairmedqa.validation", "studies.fairmedqa.figures",
         "studies.fairmedqa.fairmp"},
        {"studies.fairmedqa.cpv", "studies.fairmedqa.versions"},
        {"studies.fairmedqa.arms"},
        {"studies.fairmedqa"},
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


def _unit(module: str) -> str:
    """The package (or top module) a module belongs to: ``studies.fairmedqa.arms`` → ``studies``."""
    return module.split(".")[0]


def _floor_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package → the other packages (and top modules) its modules import."""
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(_unit(m), set()).update(_unit(d) for d in deps if _unit(d) != _unit(m))
    return out


FLOOR = {u: i for i, floor in enumerate(FLOORS) for u in floor}


def _downward_floors(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{u} (floor {FLOOR[u]}) imports {d} (floor {FLOOR[d]})"
                  for u, deps in _floor_graph(graph).items() for d in deps if FLOOR[d] > FLOOR[u])


def test_every_package_has_a_floor():
    units = set(_floor_graph(_graph()))
    assert units - set(FLOOR) == set(), "give these packages or top modules a floor in FLOORS"
    assert set(FLOOR) - units == set(), "FLOORS names packages that do not exist"


def test_no_package_imports_one_above_it():
    graph = _graph()
    assert _downward_floors(graph) == [] and _cycles(_floor_graph(graph)) == []


def test_the_top_of_the_library_stays_small():
    """At most 15 modules beside the packages, at least 5 packages, no module over 900 lines."""
    top = [p for p in LIB.glob("*.py")]
    packages = [p for p in LIB.iterdir() if (p / "__init__.py").exists()]
    assert len(top) <= 15, sorted(p.name for p in top)
    assert len(packages) >= 5
    long = {str(p.relative_to(LIB)): n for p in LIB.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 900}
    assert long == {}, long


def _planted(tmp_path: Path, module: str, line: str) -> dict[str, set[str]]:
    lib = tmp_path / "medaudit"
    shutil.copytree(LIB, lib, ignore=shutil.ignore_patterns("__pycache__"))
    path = lib.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {line}\n", encoding="utf-8")
    return _graph(lib)


def test_a_planted_upward_import_fails(tmp_path):
    """A lazy import of the batch command line from the run loop (the circle this test once missed)."""
    graph = _planted(tmp_path, "llm.runs", "from ..engines import batch")
    assert _upward(graph) == ["llm.runs (rank 2) imports engines.batch (rank 8)"]
    assert any("llm.runs" in c and "engines.batch" in c for c in _cycles(graph))
    assert _downward_floors(graph) == ["llm (floor 3) imports engines (floor 9)"]


def test_a_planted_upward_import_within_a_package_fails(tmp_path):
    """The configuration, the package's lowest place, importing the mitigation arms (its highest),
    and a metric importing its own package's ``__init__``."""
    fq = "studies.fairmedqa"
    graph = _planted(tmp_path, f"{fq}.config", "from .arms import arm_label")
    assert _upward(graph) == [f"{fq}.config ({fq} place 0) imports {fq}.arms ({fq} place 3)"]
    assert any(f"{fq}.config" in c and f"{fq}.arms" in c for c in _cycles(graph))
    graph = _planted(tmp_path / "b", f"{fq}.metrics", "from . import pair_table")
    assert _upward(graph) == [f"{fq}.metrics ({fq} place 1) imports {fq} ({fq} place 4)"]


def test_a_planted_upward_import_from_a_package_fails(tmp_path):
    """A submodule ranks as its package among the other modules."""
    graph = _planted(tmp_path, "studies.fairmedqa.metrics", "from medaudit import released")
    assert _upward(graph) == ["studies.fairmedqa.metrics (rank 4) imports released (rank 5)"]


def test_every_package_module_has_a_place():
    packages = {p for m in _graph() for p in PACKAGES if m == p or m.startswith(p + ".")}
    assert packages == set(PACKAGES)
    for pkg in packages:
        inside = {m for m in _graph() if m == pkg or m.startswith(pkg + ".")}
        assert inside == set().union(*PACKAGES[pkg]), f"give these {pkg} modules a place in PACKAGES"


def test_a_planted_cycle_within_a_rank_fails(tmp_path):
    graph = _planted(tmp_path, "prep.data", "from . import definitions")
    assert _upward(graph) == [] and _cycles(graph) == [["prep.data", "prep.definitions"]]


def _study(module: str) -> str:
    """The study a module belongs to (a study package's submodule is its study), else the module."""
    return next((s for s in STUDIES if module == s or module.startswith(s + ".")), module)


def _imports(path: Path) -> set[str]:
    """Every library module ``path`` imports, a study's submodule named by its study."""
    return {_study(d) for d in _graph()[_module(path)]}


MODULES = sorted(p for p in LIB.rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_no_study_imports_another_and_no_shared_module_imports_a_study(path):
    name = _study(_module(path))
    if name in ABOVE or _unit(name) in ABOVE:
        return
    studies = _imports(path) & STUDIES - {name}
    assert not studies, f"{path.relative_to(LIB)} imports the study module(s) {sorted(studies)}"


def test_the_graph_reader_sees_imports():
    """The reader finds the imports it must forbid (a guard against a reader that sees nothing)."""
    package = set().union(*(_imports(p) for p in (LIB / "studies" / "fairmedqa").glob("*.py")))
    assert {"studies.agents", "paths", "prompts", "prep.variants", "stats.paired", "prep.text", "llm",
            "studies.fairmedqa"} <= package
    assert "studies.cultural" in _imports(LIB / "config.py")


def test_prompt_formats_have_one_home():
    """A prompt format is defined once, in medaudit.llm.formats: nothing else under llm/
    loads a prompt (before, llm/mcq.py built the FairMedQA Validation-Agent's
    prompt), and every format the library sends is in the table."""
    import re

    from medaudit.llm import formats

    for path in set((LIB / "llm").rglob("*.py")) - {LIB / "llm" / "formats.py"}:
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
