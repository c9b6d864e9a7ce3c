"""What the batch APIs have in common: a batch's status, one request's result, an endpoint, the protocol."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from cp_observe._batch._requests import BatchRequest

__all__ = ["BatchProvider", "BatchStatus", "Endpoint", "Found", "Intent", "JsonEntries", "Result"]

# How far before the intent a provider's creation time may lie and still be this create (clock skew).
SKEW_S = 600.0


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


@dataclass(frozen=True, slots=True)
class Intent:
    """A batch about to be created, on disk before the create: found again after a kill, never created twice.

    ``tag`` names the batch where the provider keeps a name (OpenAI's metadata, the Gemini API's display
    name); ``file_id`` is the uploaded input file (OpenAI and Azure, ``""`` for inline batches); ``at`` is the
    local time the intent was written and ``requests`` its size, which is all an Anthropic batch can be told by.
    """

    tag: str
    requests: int
    at: float
    file_id: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    """What a search for an intent's batch found: the batch ids that may be it, and how exactly."""

    ids: tuple[str, ...] = ()
    exact: bool = True  # False: matched by creation time and size only (Anthropic), not by the run's tag


class BatchProvider(Protocol):
    """One provider's batch API: limits, upload, create, find, status, results."""

    name: str
    max_requests: int
    max_bytes: int

    def size_of(self, request: BatchRequest) -> int:
        """The bytes this request adds to a batch (for the size limit)."""
        ...

    def upload(self, requests: Sequence[BatchRequest]) -> str:
        """Upload the input file a create will name; ``""`` where the requests go inline in the create."""
        ...

    def create(self, requests: Sequence[BatchRequest], intent: Intent) -> str:
        """Create the batch of ``requests`` named by ``intent`` (its tag, its uploaded file); returns its id."""
        ...

    def find(self, intent: Intent, known: set[str]) -> Found:
        """The batches, none of ``known``, that a create of ``intent`` may have made (bounded listing)."""
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
