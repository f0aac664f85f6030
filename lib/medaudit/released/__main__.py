"""``python -m medaudit.released add|remove|list``: the maintainer's command line (:mod:`medaudit.released.cli`)."""
from .cli import main

raise SystemExit(main())
