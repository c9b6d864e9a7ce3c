"""The one error boundary: our own failures and the user's callback failures never reach the host.

Two kinds of failure happen on the request path, and they are told apart:

- **internal** (a bug of cp-observe): ``report_internal_error`` logs it once per site and time window with
  its traceback, counts it, and swallows it. The host's code still runs and its result is untouched.
- **user** (a ``query=``, ``context_extractor=``, ``output=`` or ``redact`` callable the user gave us
  raised): ``call_user`` runs the callable, and on failure logs a line naming the callback, counts it and
  returns ``USER_FAILED``. It is never reported as ours and never raised.
- **host** (a method of an object the host's function returned: a document's ``get_content()``, a property,
  ``__str__``): ``report_host_error`` logs a line naming what was read, counts it, and the value is recorded as
  a placeholder. Never reported as ours, never raised, and the host's result is untouched.

Every one of these runs on the request path, and so possibly inside the garbage collector (a collected
generator's span ends there, with the user's callbacks and the reading of its items): the counts are a
``Tally`` and the once-per-window decision a plain dict, so reporting a failure never waits on a lock.

Re-raising internal errors is an explicit switch, ``set_raise_internal_errors(True)``, which only this
project's own ``tests/conftest.py`` turns on. It is never inferred from pytest being imported: a user's own
test suite must see the production behaviour.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any, Final

from cp_observe._fork import at_fork
from cp_observe._log import logger
from cp_observe._tally import Tally

__all__ = [
    "USER_FAILED",
    "call_user",
    "error_counts",
    "raise_internal_errors",
    "report_host_error",
    "report_internal_error",
    "report_user_error",
    "reset_error_counts",
    "set_raise_internal_errors",
]

_LOG_INTERVAL_S: Final = 60.0  # one log line per site per minute; every failure is still counted
_MAX_SITES: Final = 256  # distinct sites remembered for rate limiting (the sites are a fixed set of strings)

#: Returned by ``call_user`` when the user's callable raised.
USER_FAILED: Final[Any] = object()

_RAISE: list[bool] = [False]
_counts: Tally[tuple[str, str]] = Tally()  # ("internal" | "user" | "host", site) -> failures; add() never waits
# When each site last logged. No lock: each read and write is one dict operation, and two threads racing past
# the window both log, which costs one line, never a count.
_last_logged: dict[tuple[str, str], float] = {}


def set_raise_internal_errors(enabled: bool) -> None:
    """Make internal errors re-raise (``True``) or be swallowed (``False``, the default).

    Only for cp-observe's own test suite, so that a bug of ours fails a test instead of a log line. User
    callback failures are never re-raised, whatever this says.
    """
    _RAISE[0] = bool(enabled)


def raise_internal_errors() -> bool:
    """Whether internal errors re-raise: only when ``set_raise_internal_errors(True)`` was called."""
    return _RAISE[0]


def error_counts() -> dict[str, int]:
    """Failures so far by ``"internal:<site>"`` / ``"user:<site>"`` / ``"host:<site>"`` (rate-limited logs)."""
    return {f"{kind}:{site}": count for (kind, site), count in sorted(_counts.counts().items())}


def reset_error_counts() -> None:
    """Forget the counts and the rate limiter's memory (tests start from a clean slate with this)."""
    _counts.drain()
    _last_logged.clear()


def _note(kind: str, site: str) -> bool:
    """Count one failure; True when it should be logged (the first at the site in this time window)."""
    key = (kind, site)
    now = time.monotonic()
    _counts.add(key)
    last = _last_logged.get(key)
    if last is not None and now - last < _LOG_INTERVAL_S:
        return False
    if last is None and len(_last_logged) >= _MAX_SITES:
        return False
    _last_logged[key] = now
    return True


def _frames(exc: BaseException) -> str:
    """The traceback's frames (file, line, function, source line) without the message, which may quote content."""
    return "".join(traceback.format_tb(exc.__traceback__, limit=20)).rstrip()


def _report(kind: str, where: str, exc: Exception, event: str, site_field: str) -> None:
    """Count one failure of ``kind`` at ``where`` and log it (rate-limited, traceback frames only); never raises."""
    try:
        if _note(kind, where):
            logger.warning(event, **{site_field: where}, error_type=type(exc).__name__, traceback=_frames(exc))
    except Exception:  # noqa: BLE001 - the boundary itself must never raise into the host
        pass


def report_internal_error(where: str, exc: Exception) -> None:
    """Count a failure of cp-observe's own code and log it (rate-limited, with its traceback); never raises.

    Re-raises only when ``set_raise_internal_errors(True)`` was called (this project's tests).
    """
    _report("internal", where, exc, "cp-observe internal error; the application is unaffected", "where")
    if _RAISE[0]:
        raise exc


def report_user_error(where: str, exc: Exception) -> None:
    """Count and log (rate-limited) a failure of a callable the user gave cp-observe; never raises."""
    _report("user", where, exc,
            "a cp-observe callback supplied by the application raised; the call is recorded without it", "callback")


def report_host_error(where: str, exc: Exception) -> None:
    """Count and log (rate-limited) a method of a host object that raised while we read it; never raises."""
    _report("host", where, exc,
            "reading a value the application returned raised; it is recorded as a placeholder", "read")


def call_user(where: str, func: Callable[..., Any], *args: Any) -> Any:
    """Call the user's ``func(*args)``; on ``Exception`` report a user error and return ``USER_FAILED``.

    ``BaseException`` subclasses (``KeyboardInterrupt``, ``SystemExit``) are not caught: they are the
    process being stopped, not a callback failing.
    """
    try:
        return func(*args)
    except Exception as exc:  # noqa: BLE001 - the user's callback failing is recorded, never raised
        report_user_error(where, exc)
        return USER_FAILED


at_fork(_counts.after_fork)  # a fresh lock in a forked child: the parent's may be held by a dead thread
