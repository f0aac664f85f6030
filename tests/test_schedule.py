"""make test's queue of test files for its two workers (support/schedule.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from support.schedule import LONGEST, file_of, order

TESTS = Path(__file__).resolve().parent


def _item(nodeid, slow=False):
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: object() if slow and name == "slow" else None)


def test_every_listed_file_exists_once():
    assert len(set(LONGEST)) == len(LONGEST)
    assert [f for f in LONGEST if not (TESTS / f).is_file()] == []


def test_the_longest_files_come_first_then_slow_ones_and_no_test_is_lost_or_split():
    first, second = LONGEST[0], LONGEST[1]
    items = [_item("tests/test_a.py::t1"), _item("tests/test_a.py::t2"),
             _item("tests/test_b.py::t", slow=True), _item("tests/test_b.py::u"),
             _item(f"tests/{second}::x"), _item(f"tests/{first}::y[1]"), _item(f"tests/{first}::y[2]"),
             _item("tests/test_c.py::t")]
    before = [it.nodeid for it in items]
    order(items)
    got = [it.nodeid for it in items]
    assert sorted(got) == sorted(before)
    assert got == [f"tests/{first}::y[1]", f"tests/{first}::y[2]", f"tests/{second}::x",
                   "tests/test_b.py::t", "tests/test_b.py::u",
                   "tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_c.py::t"]
    files = [file_of(n) for n in got]
    assert len({f for f in files}) == len([f for i, f in enumerate(files) if i == 0 or files[i - 1] != f])
