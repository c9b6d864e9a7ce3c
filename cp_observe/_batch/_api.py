"""What the batch APIs have in common: a batch's status, one request's result, an endpoint, the protocol."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from cp_observe._batch._requests import BatchRequest

__all__ = ["BatchProvider", "BatchStatus", "Endpoint", "JsonEntries", "Result"]


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """Where one submitted batch stands: the provider's word for it, whether it is over, and its counts."""

    state: str
    ended: bool
    total: int = 0
    done: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class Result:
    """One request's answer: the reply text and tokens, or why it failed (``error``)."""

    custom_id: str
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


class BatchProvider(Protocol):
    """One provider's batch API: limits, submit, status, results."""

    name: str
    max_requests: int
    max_bytes: int

    def size_of(self, request: BatchRequest) -> int:
        """The bytes this request adds to a batch (for the size limit)."""
        ...

    def submit(self, requests: Sequence[BatchRequest]) -> str:
        """Create a batch of ``requests``; returns its id."""
        ...

    def status(self, batch_id: str) -> BatchStatus:
        """The batch's state and counts."""
        ...

    def results(self, batch_id: str) -> Iterator[Result]:
        """Every result the provider has for an ended batch (failed ones included)."""
        ...

    def complete(self, request: BatchRequest) -> Result:
        """One synchronous call of ``request`` through the provider's standard API (a corrective call)."""
        ...


@dataclass
class Endpoint:
    """Where a provider is and how to authenticate (never printed: ``repr`` hides the key)."""

    base: str
    key: str = field(repr=False)
    extra: dict[str, Any] = field(default_factory=dict)


class JsonEntries:
    """A provider whose batch holds one JSON object per request (``_entry``), for ``model`` at ``endpoint``."""

    def __init__(self, endpoint: Endpoint, model: str) -> None:
        self._endpoint = endpoint
        self._model = model

    def _entry(self, request: BatchRequest) -> dict[str, Any]:
        raise NotImplementedError

    def size_of(self, request: BatchRequest) -> int:
        """The bytes the request's entry adds to a batch (its JSON and a separator)."""
        return len(orjson.dumps(self._entry(request))) + 1
