"""The library's own logger: structlog over the stdlib ``cp_observe`` logger, quiet unless the host asks.

Log lines never carry captured content or secrets: fields whose names look like secrets are masked here,
and callers pass counts, names and error types rather than payloads.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

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


logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
    _stdlib_logger,
    wrapper_class=structlog.stdlib.BoundLogger,
    processors=[
        structlog.stdlib.filter_by_level,
        _mask_secrets,
        structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
    ],
)
