"""The library's own logger: structlog over the stdlib ``cp_observe`` logger, quiet unless the host asks.

structlog is imported on the first log call, not at import: most processes never log from here. Log lines
never carry captured content or secrets: fields whose names look like secrets are masked, and callers pass
counts, names and error types rather than payloads.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = ["LOGGER_NAME", "log_to_stderr", "logger"]

LOGGER_NAME = "cp_observe"
_SECRET_WORDS = ("key", "token", "secret", "password", "authorization")

_stdlib_logger = logging.getLogger(LOGGER_NAME)
_stdlib_logger.addHandler(logging.NullHandler())


def _mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for field in list(event):
        if field != "event" and any(word in field.lower() for word in _SECRET_WORDS) and "tokens" not in field:
            event[field] = "***"
    return event


class _LazyLogger:
    """Forwards to a structlog logger built on first use (``debug``, ``info``, ``warning``, ``error``)."""

    def __init__(self) -> None:
        self._logger: Any = None

    def _get(self) -> Any:
        # No lock around the one-time construction: logging happens on paths the garbage collector can run
        # (a collected generator's span ending), possibly inside this very construction. Two threads racing
        # here each build an equivalent logger and one assignment wins.
        if self._logger is None:
            import structlog

            self._logger = structlog.wrap_logger(
                _stdlib_logger,
                wrapper_class=structlog.stdlib.BoundLogger,
                processors=[
                    structlog.stdlib.filter_by_level,
                    _mask_secrets,
                    structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
                ],
            )
        return self._logger

    def _log(self, level: int, method: str, event: str, **fields: Any) -> None:
        if _stdlib_logger.isEnabledFor(level):
            getattr(self._get(), method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        """Log at DEBUG."""
        self._log(logging.DEBUG, "debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log at INFO."""
        self._log(logging.INFO, "info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log at WARNING."""
        self._log(logging.WARNING, "warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log at ERROR."""
        self._log(logging.ERROR, "error", event, **fields)


logger = _LazyLogger()


def log_to_stderr() -> Callable[[], None]:
    """Send the ``cp_observe`` logger's lines (rendered by structlog) to stderr, at WARNING until configured.

    For the project's own programs (``serve``, ``replay``, the demo): a library leaves logging to its host, but
    a program of ours must show its warnings (a backend that refuses metrics, a bad environment value).

    Returns a function that puts the logger back as it was (handlers, level, propagation).
    """
    root = _stdlib_logger
    level, propagate = root.level, root.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    root.propagate = False  # one line per event, whatever the root logger does

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(level)
        root.propagate = propagate

    return restore
