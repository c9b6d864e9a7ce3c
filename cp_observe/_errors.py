"""The exception hierarchy.

CpObserveError
├── JudgeError            the judge could not return one aligned verdict per context
│   └── JudgeTransportError  the judge could not be reached or kept failing (after retries)
├── ConfigurationError    a setting given in code is invalid (also a ValueError)
├── LabelError            a human relevance label cannot be read (also a ValueError); names the line
└── AssetsExistError      `cp-observe deploy write` would overwrite a file (also a FileExistsError)
"""

from __future__ import annotations

__all__ = [
    "AssetsExistError",
    "ConfigurationError",
    "CpObserveError",
    "JudgeError",
    "JudgeTransportError",
    "LabelError",
]


class CpObserveError(Exception):
    """Base class of every error cp-observe raises on purpose."""


class JudgeError(CpObserveError):
    """The judge gave no usable verdict for every context; no score was computed.

    Attributes:
        calls: how many judge calls were made before giving up.
        cost_usd: what the replies received before giving up cost (a reply that could not be parsed is billed
            all the same), ``None`` when a model's price is unknown.
    """

    def __init__(self, message: str, *, calls: int = 0, cost_usd: float | None = 0.0) -> None:
        super().__init__(message)
        self.calls = calls
        self.cost_usd = cost_usd


class JudgeTransportError(JudgeError):
    """The judge endpoint failed (timeout, connection, 429/5xx) on every attempt."""


class ConfigurationError(CpObserveError, ValueError):
    """An argument given in code cannot work; raised when configuring, never on the request path."""


class LabelError(CpObserveError, ValueError):
    """A human relevance label is malformed; the message names where (``file:line``, a Phoenix span)."""


class AssetsExistError(CpObserveError, FileExistsError):
    """A deploy asset would overwrite an existing file (``cp-observe deploy write`` without ``--force``)."""
