"""The maintainer's command line for the released answers: ``python -m medaudit.released``.

``add`` brings a new model's released files (or a mitigation arm of a model already present) into
``data/raw/released_answers/`` and ``params/released.yaml`` in one checked step; ``remove`` undoes
it; ``list`` shows what ``params/released.yaml`` holds (docs/released.md). It edits
``params/released.yaml`` as text (so its comments stay) and reads the release through the library,
:mod:`medaudit.released`, which the notebooks read; the library never imports this package
(``python -m medaudit.released`` runs the package's ``__main__``, which calls :func:`main`).

- :mod:`.listing`: ``list``;
- :mod:`.adding`: ``add`` of one model, its files matched, staged, checked and installed;
- :mod:`.arms`: a mitigation arm (``add --strategy``), every model of a release at once
  (``add --all``), and ``remove``;
- :mod:`.commands`: the command line itself and what it prints.

The package's namespace is the command line's public surface (``cli.add``); each name is defined
once, in its module.
"""
from .listing import listing
from .adding import add, paper_comparison, table1_comparison, yaml_remove
from .arms import add_all, add_arm, remove, remove_arm
from .commands import main
