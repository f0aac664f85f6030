"""The skip gate: a test run fails on a skip that tests/skips.toml does not
allow, with the reason it gives.

Every skip counts: a test that skips while it runs (``pytest.skip``,
``skipif``, ``importorskip`` in a test or fixture) and a module that skips
whole at collection (``importorskip`` at module level, which otherwise
leaves no test behind to say so). Each is matched against the allow-list of
the tier the run is in (``MEDAUDIT_TEST_TIER``: ``full``, the default, what
``make test`` runs; ``light``, the light install's tier, ``make test-light``);
one that no entry allows is listed at the end and the run exits 1. In the
light tier the modules that need the full install (the list ``full_only``)
are not collected at all, and the summary names them.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ENV_TIER = "MEDAUDIT_TEST_TIER"
TIERS = ("full", "light")


@dataclass(frozen=True)
class Allowed:
    reason: re.Pattern
    tiers: tuple[str, ...]
    why: str


@dataclass
class AllowList:
    path: Path
    entries: list[Allowed]
    full_only: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> AllowList:
        raw = tomllib.loads(Path(path).read_text())
        entries = []
        for i, e in enumerate(raw.get("allow", [])):
            where = f"{path}: allow[{i}]"
            for key in ("reason", "why", "tiers"):
                if not e.get(key):
                    raise ValueError(f"{where}: field '{key}' is missing or empty (each skip allowed says why)")
            bad = set(e["tiers"]) - set(TIERS)
            if bad:
                raise ValueError(f"{where}: field 'tiers': unknown {sorted(bad)} (tiers: {', '.join(TIERS)})")
            try:
                rx = re.compile(e["reason"])
            except re.error as err:
                raise ValueError(f"{where}: field 'reason': not a regular expression ({err})") from None
            entries.append(Allowed(rx, tuple(e["tiers"]), e["why"]))
        return cls(Path(path), entries, list(raw.get("light", {}).get("full_only", [])))

    def allows(self, reason: str, tier: str) -> Allowed | None:
        return next((e for e in self.entries if tier in e.tiers and e.reason.search(reason)), None)


def tier_from_env() -> str:
    tier = os.environ.get(ENV_TIER, "full") or "full"
    if tier not in TIERS:
        raise pytest.UsageError(f"{ENV_TIER}={tier!r}: the test tiers are {', '.join(TIERS)}")
    return tier


def _reason(report) -> str:
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text.removeprefix("Skipped: ")


class SkipGate:
    """The pytest plugin (registered by tests/conftest.py)."""

    def __init__(self, allow: AllowList, tier: str):
        self.allow, self.tier = allow, tier
        self.allowed: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []
        self.left_out: list[str] = []

    def _seen(self, nodeid: str, reason: str) -> None:
        (self.allowed if self.allow.allows(reason, self.tier) else self.refused).append((nodeid, reason))

    def pytest_ignore_collect(self, collection_path, config):
        if self.tier == "light" and collection_path.name in self.allow.full_only:
            self.left_out.append(collection_path.name)
            return True
        return None

    def pytest_collectreport(self, report):
        if report.skipped:                       # a module skipped whole at collection
            self._seen(f"{report.nodeid} (the whole module)", _reason(report))

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            self._seen(report.nodeid, _reason(report))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.refused and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        tr, name = terminalreporter, self.allow.path.name
        if self.left_out:
            tr.write_sep("-", f"light tier: {len(self.left_out)} modules need the full install ({name}, full_only)")
            tr.write_line(", ".join(sorted(self.left_out)))
        if self.allowed:
            tr.write_sep("-", f"{len(self.allowed)} skips allowed by {name} (tier {self.tier})")
            for nodeid, reason in self.allowed:
                tr.write_line(f"{nodeid}: {reason}")
        if self.refused:
            tr.write_sep("=", f"{len(self.refused)} skips not allowed by {name} (tier {self.tier}): the run fails",
                         red=True)
            for nodeid, reason in self.refused:
                tr.write_line(f"{nodeid}: {reason}")
            tr.write_line("a test that did not run is not a pass: make it run, "
                          f"or allow its reason in {self.allow.path} with why")
