"""What each study checks of a profile before anything runs: the keys only that study reads,
against its own definition file (cultures, SOAP contexts and axes, FairMedQA groups, versions and
benchmark file). Each study declares its checks beside its definitions (``PROFILE_CHECKS`` of its
``config`` module); :mod:`medaudit.config` asks this module for them, so a new study adds its checks
here, not in the profile schema.
"""
from __future__ import annotations

from typing import Callable

from medaudit.checks import Cross


def checks() -> tuple[Callable[[Cross], None], ...]:
    """Every study's profile checks, in the order their problems are listed (each reads a
    :class:`medaudit.checks.Cross` and adds to its problems)."""
    from medaudit.studies.cultural.config import PROFILE_CHECKS as cultural
    from medaudit.studies.fairmedqa.config import PROFILE_CHECKS as fairmedqa
    from medaudit.studies.soap.config import PROFILE_CHECKS as soap

    return (*cultural, *fairmedqa, *soap)
