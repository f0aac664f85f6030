"""The order in which the two pytest-xdist workers of ``make test`` and
``make test-slow`` take the test files.

``make test`` runs ``pytest -n 2 --dist loadfile``: every file goes whole to one
worker (its module- and session-scoped models, servers and notebooks are set
up once), and a worker takes the next file from a queue when it runs short.
xdist's own queue puts the files with the most tests first
(``--loadscope-reorder``), so the long files of one or two tests (the secrets
test's five notebooks, the Ray cluster) started last and ran on one worker
while the other had finished: the wall was the longest file's tail, not half
the work. ``make test`` passes ``--no-loadscope-reorder``, and this module
orders the collection longest file first (known longest, then the other
files with a ``slow`` test, then the rest, each group in its own order), so
the two workers end within about one short file of each other.

``LONGEST`` is measured, not guessed (docs/timings.md says when and how):
the per-file sum of ``--durations=0`` (setup + call + teardown) on two
workers. A file missing from it only starts later; nothing is left out.
"""
from __future__ import annotations

# longest first by the larger of a file's two tiers (make test: not slow; make test-slow: slow); per-file sums
# of --durations=0 on two workers, quiet machine, 2026-11-27 at d506df6 (test_soap, test_perturb and
# test_atomic after their speed-ups of the next commits, measured alone)
LONGEST = [
    "test_secrets.py",              # slow tier 345 s
    "test_ray_run.py",              # slow tier 341 s
    "test_released_add.py",         # slow tier 294 s
    "test_order_independence.py",   # slow tier 243 s
    "test_openai_backend.py",       # slow tier 210 s
    "test_notebook07_stages.py",    # slow tier 179 s
    "test_planted.py",              # slow tier about 150 s with 07's and 08's R = 20 recoveries, make test 53 s
                                    # (2026-11-29, one process, loaded machine)
    "test_hf_batched.py",           # slow tier 148 s
    "test_trust.py",                # slow tier 130 s, make test 11 s
    "test_runs.py",                 # slow tier 80 s, make test 3 s
    "test_amqa.py",                 # slow tier 78 s, make test 6 s
    "test_slurm.py",                # slow tier 69 s
    "test_prefix.py",               # slow tier 63 s
    "test_runner.py",               # slow tier 36 s, make test 47 s
    "test_store.py",                # make test 37 s
    "test_bench_gpu.py",            # slow tier 36 s
    "test_soap.py",                 # make test 33 s
    "test_mitigations.py",          # make test 32 s
    "test_coverage.py",             # slow tier 32 s, make test 15 s
    "test_power.py",                # make test 31 s
    "test_site.py",                 # slow tier 30 s
    "test_released_roundtrip.py",   # slow tier 26 s, make test 8 s
    "test_config.py",               # make test 26 s
    "test_embedded_model.py",       # slow tier 24 s
    "test_selection.py",            # make test 24 s
    "test_dialogs.py",              # make test 23 s
    "test_released.py",             # make test 22 s
    "test_batch.py",                # make test 21 s
    "test_stats.py",                # make test 21 s
    "test_hf_backend.py",           # slow tier 19 s
    "test_nbparams.py",             # slow tier 19 s, make test 14 s
    "test_calibration.py",          # make test 18 s
    "test_harness.py",              # make test 17 s
]


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def order(items) -> None:
    """Sort pytest's collected items in place: the files of ``LONGEST`` in its
    order, then files holding a test marked ``slow``, then the rest; a file's
    tests keep their order (stable sort), and every worker sorts alike."""
    rank = {name: i for i, name in enumerate(LONGEST)}
    slow = {file_of(it.nodeid) for it in items if it.get_closest_marker("slow")}

    def key(it) -> tuple[int, int]:
        f = file_of(it.nodeid)
        if f in rank:
            return 0, rank[f]
        return (1, 0) if f in slow else (2, 0)

    items.sort(key=key)
