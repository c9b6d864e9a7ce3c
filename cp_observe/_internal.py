"""Our own failures never reach the host: they are logged once and swallowed, except under pytest."""

from __future__ import annotations

import os
import sys

from cp_observe._log import logger

__all__ = ["raise_internal_errors", "report_internal_error"]

#: Tests of the failure paths set this to False to see the production behaviour.
RAISE_UNDER_TEST: list[bool] = [True]


def raise_internal_errors() -> bool:
    """True when instrumentation bugs should fail loudly: under pytest, unless a test turned it off."""
    return RAISE_UNDER_TEST[0] and ("PYTEST_CURRENT_TEST" in os.environ or "pytest" in sys.modules)


def report_internal_error(where: str, exc: Exception) -> None:
    """Log one line saying the host's code still ran; re-raise under pytest so tests catch our bugs."""
    logger.warning(
        "cp-observe internal error; the application is unaffected",
        where=where,
        error_type=type(exc).__name__,
    )
    if raise_internal_errors():
        raise exc
