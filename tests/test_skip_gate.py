"""The skip gate (tests/support/skip_gate.py, tests/skips.toml): a planted
skip fails the run, whether a test skips or a module vanishes at collection;
an allowed reason passes and is listed; the light tier leaves out exactly
the modules listed as needing the full install."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.skip_gate import AllowList

pytest_plugins = ["pytester"]

SKIPS = Path(__file__).resolve().parent / "skips.toml"
CONFTEST = f"""
from pathlib import Path
from support.skip_gate import AllowList, SkipGate, tier_from_env

def pytest_configure(config):
    config.pluginmanager.register(SkipGate(AllowList.load(Path({str(SKIPS)!r})), tier_from_env()), "gate")
"""


@pytest.fixture()
def gated(pytester, monkeypatch):
    monkeypatch.delenv("MEDAUDIT_TEST_TIER", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_fine="def test_fine():\n    assert True\n")
    return pytester


def test_a_planted_skip_fails_the_run(gated):
    gated.makepyfile(test_gate_inner="import pytest\n\ndef test_x():\n    pytest.skip('not today')\n")
    r = gated.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.assert_outcomes(passed=1, skipped=1)
    r.stdout.fnmatch_lines(["*1 skips not allowed by skips.toml (tier full): the run fails*",
                            "test_gate_inner.py::test_x: not today"])


def test_a_planted_skipif_fails_the_run(gated):
    gated.makepyfile(test_gate_inner="import pytest\n\n@pytest.mark.skipif(True, reason='flaky here')\n"
                                  "def test_x():\n    pass\n")
    assert gated.runpytest_inprocess().ret == pytest.ExitCode.TESTS_FAILED


def test_a_module_skipped_whole_at_collection_fails_the_run(gated):
    gated.makepyfile(test_vanish="import pytest\n\npytest.importorskip('no_such_module_here')\n\n"
                                 "def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    r = gated.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["test_vanish.py (the whole module): could not import 'no_such_module_here'*"])


def test_an_allowed_reason_passes_and_is_listed(gated):
    gated.makepyfile(test_vllm="import pytest\n\ndef test_x():\n"
                               "    pytest.skip('vLLM not installed: the real-engine test was not run')\n")
    r = gated.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(["*1 skips allowed by skips.toml (tier full)*",
                            "test_vllm.py::test_x: vLLM not installed: the real-engine test was not run"])


def test_a_failed_run_stays_failed_and_xfail_is_not_a_skip(gated):
    gated.makepyfile(test_x="import pytest\n\n@pytest.mark.xfail(reason='known', strict=True)\n"
                            "def test_known():\n    assert False\n")
    assert gated.runpytest_inprocess().ret == pytest.ExitCode.OK
    gated.makepyfile(test_y="def test_bad():\n    assert False\n")
    assert gated.runpytest_inprocess().ret == pytest.ExitCode.TESTS_FAILED


def test_the_light_tier_leaves_out_the_listed_modules_only(gated, monkeypatch):
    listed = AllowList.load(SKIPS).full_only[0]
    # the real tests/<listed> may be imported in this process already (an xdist worker runs files side by side):
    # its module entry would clash with the planted file of the same name, so it is set aside for this test
    monkeypatch.delitem(sys.modules, listed[:-3], raising=False)
    gated.makepyfile(**{listed[:-3]: "def test_needs_full():\n    pass\n"})
    monkeypatch.setenv("MEDAUDIT_TEST_TIER", "light")
    r = gated.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.OK
    r.assert_outcomes(passed=1)                       # test_fine only
    r.stdout.fnmatch_lines(["*light tier: 1 modules need the full install*", listed])
    monkeypatch.setenv("MEDAUDIT_TEST_TIER", "full")
    gated.runpytest_inprocess().assert_outcomes(passed=2)


def test_every_full_only_module_exists_and_every_entry_says_why():
    allow = AllowList.load(SKIPS)
    here = SKIPS.parent
    assert [m for m in allow.full_only if not (here / m).is_file()] == []
    assert allow.entries and all(len(e.why) > 40 for e in allow.entries)


def test_an_entry_without_why_is_refused(tmp_path):
    bad = tmp_path / "skips.toml"
    bad.write_text('[[allow]]\nreason = "x"\ntiers = ["full"]\n')
    with pytest.raises(ValueError, match=r"allow\[0\]: field 'why' is missing"):
        AllowList.load(bad)
