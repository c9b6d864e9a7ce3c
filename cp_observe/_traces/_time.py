"""The one time parser of the trace inputs: option values (``--since``, ``--until``) and API timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["iso_ns", "parse_iso", "parse_time"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_iso(text: str) -> datetime:
    """ISO 8601 with an optional ``Z``; a naive time is UTC. Raises ``ValueError``."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def parse_time(text: str) -> datetime:
    """ISO 8601 (``2026-01-31``, ``2026-01-31T12:00:00Z``; UTC if naive) or an age (``90m``, ``6h``, ``7d`` ago).

    Raises:
        ValueError: neither form, with the forms it takes.
    """
    value = text.strip()
    if value and value[-1] in _UNITS and value[:-1].isdigit():
        return datetime.now(timezone.utc) - timedelta(seconds=int(value[:-1]) * _UNITS[value[-1]])
    try:
        return parse_iso(value)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (ISO 8601, or 30m / 6h / 7d ago)") from None


def iso_ns(value: Any) -> int:
    """An ISO 8601 timestamp as Unix nanoseconds, exact to the microsecond (no float rounding)."""
    moment = parse_iso(str(value))
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 1_000_000_000 + moment.microsecond * 1_000
