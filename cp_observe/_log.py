"""The library's own logger: structlog over the stdlib ``cp_observe`` logger, quiet unless the host asks.

structlog is imported on the first log call, not at import: most processes never log from here. Log lines
never carry captured content or secrets: fields whose names look like secrets are masked, and callers pass
counts, names and error types rather than payloads.

Each record reaches the host's handlers twice over: its message is the event and its fields rendered as
``event='...' key=value`` (what a plain handler prints), and the event and each field are also attributes of the
``LogRecord`` (passed as ``extra``, as structlog's ``render_to_log_kwargs`` does), so a JSON handler writes them
as fields. A field named like
one of ``LogRecord``'s own attributes (``name``, ``module``, ``process``, ...) is prefixed ``cp_`` there: the
stdlib refuses to overwrite them. ``log_to_stderr`` gives our own programs text or JSON lines (``--log-format``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, MutableMapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from cp_observe._names import ENV_LOG_FORMAT

if TYPE_CHECKING:
    import argparse

__all__ = ["LOGGER_NAME", "LOG_FORMATS", "JsonLinesFormatter", "add_log_format_argument", "log_format",
           "log_to_stderr", "logger"]

LOGGER_NAME = "cp_observe"
#: What ``--log-format`` (and ``CP_OBSERVE_LOG_FORMAT``) take: ``text`` lines, or one JSON object per line.
LOG_FORMATS = ("text", "json")
_SECRET_WORDS = ("key", "token", "secret", "password", "authorization")
#: LogRecord's own attributes (and the two its formatting adds): a field by one of these names is prefixed.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_FIELD_PREFIX = "cp_"
_LOG_KWARGS = ("exc_info", "stack_info", "stacklevel")

_stdlib_logger = logging.getLogger(LOGGER_NAME)
_stdlib_logger.addHandler(logging.NullHandler())


def _mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for field in list(event):
        if field != "event" and any(word in field.lower() for word in _SECRET_WORDS) and "tokens" not in field:
            event[field] = "***"
    return event


def _record_fields(field: str) -> str:
    return _FIELD_PREFIX + field if field in _RECORD_ATTRIBUTES else field


def _to_log_kwargs(_: Any, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """The stdlib call: today's ``key=value`` message, and the event and its fields as record attributes."""
    kwargs = {name: event.pop(name) for name in _LOG_KWARGS if name in event}
    message = " ".join([f"event={event.get('event')!r}", *(f"{key}={event[key]!r}" for key in sorted(event)
                                                             if key != "event")])
    return {"msg": message, "extra": {_record_fields(key): value for key, value in event.items()}, **kwargs}


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
                    _to_log_kwargs,
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


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record and per line: time, level, logger, event, then the record's fields.

    The fields are the record's attributes that ``LogRecord`` itself does not have (those our logger sets, and any
    a host's ``extra=`` sets); values JSON cannot hold are written as their ``str``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        import json  # only our programs write JSON lines
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.__dict__.get("event", record.getMessage()),
        }
        line.update((key, value) for key, value in vars(record).items()
                    if key not in _RECORD_ATTRIBUTES and key not in line)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json``, shared by ``serve`` and the offline commands (``None``: the variable decides)."""
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                        help=f"log lines on stderr as text or one JSON object per line [{ENV_LOG_FORMAT}; 'text']")


def log_format(chosen: str | None, *, warn: bool = False) -> str:
    """``chosen``, else ``CP_OBSERVE_LOG_FORMAT``, else text; a bad variable is text (said, with ``warn``)."""
    value = chosen or os.environ.get(ENV_LOG_FORMAT, "").strip().lower() or "text"
    if value not in LOG_FORMATS:
        if warn:
            logger.warning("ignoring an unknown log format", variable=ENV_LOG_FORMAT, value=value[:40],
                           known=",".join(LOG_FORMATS))
        return "text"
    return value


def log_to_stderr(chosen: str | None = None) -> Callable[[], None]:
    """Send the ``cp_observe`` logger's lines to stderr, at WARNING until configured: text, or JSON lines.

    For the project's own programs (``serve``, the offline commands, the demo): a library leaves logging to its
    host, but a program of ours must show its warnings (a backend that refuses metrics, a bad environment value).
    ``chosen`` is one of ``LOG_FORMATS`` (default ``CP_OBSERVE_LOG_FORMAT``, else ``text``); ``json`` writes
    one object per line, for log pipelines that parse them (Kubernetes').

    Returns a function that puts the logger back as it was (handlers, level, propagation).
    """
    root = _stdlib_logger
    level, propagate = root.level, root.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    root.propagate = False  # one line per event, whatever the root logger does
    if log_format(chosen, warn=True) == "json":  # after the handler: a bad CP_OBSERVE_LOG_FORMAT is shown (as text)
        handler.setFormatter(JsonLinesFormatter())

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(level)
        root.propagate = propagate

    return restore
