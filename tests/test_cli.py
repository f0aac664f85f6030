"""Every module entry point (``python -m medaudit.…``) answers ``--help``
and refuses an unknown flag, and neither writes anything (``python
-m medaudit.publish.site --help`` used to build a report into ``outputs/--help/``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.sandbox import compendium_root

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = [
    ["medaudit.publish.site"], ["medaudit.runner"], ["medaudit.released"], ["medaudit.released", "add"],
    ["medaudit.released", "list"], ["medaudit.bench"], ["medaudit.bench.gpu"], ["medaudit.bench.bootstrap"],
    ["medaudit.llm.models"], ["medaudit.llm.recorded"], ["medaudit.llm.importer"], ["medaudit.validation.power"],
    ["medaudit.engines.batch"], ["medaudit.engines.batch", "export"], ["medaudit.engines.batch", "import"],
    ["medaudit.engines.batch", "shard"], ["medaudit.engines.batch", "merge"], ["medaudit.engines.batch_api"],
    ["medaudit.engines.harness"], ["medaudit.engines.harness", "import"], ["medaudit.engines.harness", "export"],
    ["medaudit.engines.batch_anthropic"], ["medaudit.engines.batch_gemini"], ["medaudit.engines.slurm"],
    ["medaudit.engines.slurm", "write"], ["medaudit.engines.slurm", "task"], ["medaudit.bench.notebook"],
    ["medaudit.validation.coverage"], ["medaudit.stats.judge_error"], ["medaudit.runs"], ["medaudit.runs", "list"],
    ["medaudit.runs", "compare"], ["medaudit.engines.ray_run"], ["medaudit.validation.recovery"],
]


def test_the_list_names_every_module_with_a_main():
    """A new ``if __name__ == "__main__"`` module must join ENTRY_POINTS."""
    have = set()
    for p in (ROOT / "lib" / "medaudit").rglob("*.py"):
        if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8"):
            have.add(".".join(p.relative_to(ROOT / "lib").with_suffix("").parts))
    assert not sorted(have - {e[0] for e in ENTRY_POINTS}), "add them to ENTRY_POINTS"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    env = {**os.environ, **compendium_root(root), "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    return root, env


def _run_all(sandbox, entries: list[list[str]]) -> list[dict]:
    """Every entry in one child interpreter (tests/support/cli_child.py)."""
    root, env = sandbox
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "cli_child.py"), str(root),
                        json.dumps(entries)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [g["args"] for g in got] == entries, r.stderr[-3000:]
    return got


@pytest.fixture(scope="module")
def answers(sandbox):
    """{(entry, flag): result} for --help and an unknown flag of every entry point."""
    entries = [[*e, flag] for flag in ("--help", "--bogus-flag") for e in ENTRY_POINTS]
    return {(" ".join(g["args"][:-1]), g["args"][-1]): g for g in _run_all(sandbox, entries)}


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=" ".join)
def test_help_prints_usage_and_writes_nothing(answers, entry):
    r = answers[(" ".join(entry), "--help")]
    assert r["code"] == 0, r["stderr"]
    assert "usage:" in r["stdout"]
    assert not r["new"], r["new"]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=" ".join)
def test_an_unknown_flag_is_refused_and_nothing_written(answers, entry):
    r = answers[(" ".join(entry), "--bogus-flag")]
    assert r["code"] == 2, (r["stdout"], r["stderr"])
    assert "usage:" in r["stderr"] and "error" in r["stderr"]
    assert not r["new"], r["new"]


def _run(sandbox, args):
    root, env = sandbox
    before = _files(root)
    r = subprocess.run([sys.executable, "-m", *args], cwd=root, env=env, capture_output=True, text=True,
                       timeout=300)
    return r, _files(root) - before


def test_site_refuses_a_profile_that_does_not_exist(sandbox):
    r, new = _run(sandbox, ["medaudit.publish.site", "nosuchprofile"])
    assert r.returncode == 2 and "no profile 'nosuchprofile'" in r.stderr
    assert not new, new
