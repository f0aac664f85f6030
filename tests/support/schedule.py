"""The order in which ``make test``'s two pytest-xdist workers take the test files.

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

# longest first; seconds on two workers at 1a9e31c (fresh-clone make test, quiet machine, its 15 slowest)
# and the per-file sums of docs/bench/speed53_unit_n2_durations.txt (a loaded run) for the rest
LONGEST = [
    "test_secrets.py",              # 286 s: notebooks 01, 02, 03, 05, 06 through a real server
    "test_order_independence.py",   # 252 s: 38 answers of the 135M model in llama.cpp, 16 through a server
    "test_ray_run.py",              # 182 s: a local Ray cluster's start, a direct run and two Ray runs
    "test_released_add.py",         # 151 s: the published page after an added model
    "test_openai_backend.py",       # a real llama.cpp server and a fault proxy (loaded: 1,345 s)
    "test_notebook07_stages.py",    # 120 s: 07's stages live, then its rerun
    "test_amqa.py",                 # a model's 16 answers of the benchmark
    "test_trust.py",                # 91 s: notebook 03 against two servers
    "test_slurm.py",                # 86 s: two array tasks in their own processes
    "test_soap.py",                 # loaded: 555 s
    "test_mitigations.py",          # loaded: 418 s
    "test_hf_batched.py",           # loaded: 349 s (a killed batched run 50 s quiet)
    "test_perturb.py",              # loaded: 352 s
    "test_runs.py",                 # 50 s: notebook 01 twice
    "test_atomic.py",               # 44 s: a reader racing a writer
    "test_released_roundtrip.py",   # 31 s: remove then add, twice
    "test_store.py",
    "test_selection.py",
    "test_dialogs.py",
    "test_cultural.py",
    "test_runner.py",
    "test_config.py",
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
