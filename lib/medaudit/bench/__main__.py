"""``python -m medaudit.bench``: the benchmarks' command line (:mod:`medaudit.bench.cli`)."""
from medaudit.bench.cli import main

raise SystemExit(main())
