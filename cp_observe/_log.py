"""The library's own logger: structlog over the stdlib ``cp_observe`` logger, quiet unless the host asks.

structlog is imported on the first log call, not at import: most processes never log from here. Log lines
never carry captured content or secrets: fields whose names look like secrets are masked, and callers pass
counts, names and error types rather than payloads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import MutableMapping
from typing import Any

__all__ = ["LOGGER_NAME", "logger"]

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
        self._lock = threading.Lock()  # guards the one-time construction

    def _get(self) -> Any:
        if self._logger is None:
            with self._lock:
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
