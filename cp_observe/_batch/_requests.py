"""Batch requests: one per distinct judge call, named by a digest of the call, kept on disk, split to limits.

A request is the chat messages and the parameters ``LLMJudge`` builds for a synchronous call (the same
builder, so the same prompt, schema and parameters). Its ``custom_id`` is the hex SHA-256 of the two
(64 characters of ``[0-9a-f]``, inside every provider's ``[A-Za-z0-9_-]{1,64}``), so identical calls are one
request and the answer to a call is found again from the call alone. The requests of a run are appended to
a JSON-lines file beside the run's output, never held in memory: only their ids are (64 bytes each).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cp_observe._judging._digest import content_digest

__all__ = ["BatchRequest", "RequestLog", "read_requests", "request_id", "split"]


def request_id(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """The request's ``custom_id``: the content digest of its messages and parameters (keys sorted)."""
    body = orjson.dumps({"messages": list(messages), "params": dict(params)}, option=orjson.OPT_SORT_KEYS)
    return content_digest(body.decode("utf-8"))


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One judge call to send in a batch."""

    custom_id: str
    messages: list[dict[str, Any]]
    params: dict[str, Any]


class RequestLog:
    """The distinct requests of one run, appended to ``path`` as they are recorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: set[str] = set()
        self.repeats = 0  # calls merged into an identical request already recorded
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("wb")

    def add(self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
        """Record one call; an identical call recorded before is merged into it. Returns its ``custom_id``."""
        custom_id = request_id(messages, params)
        if custom_id in self.ids:
            self.repeats += 1
            return custom_id
        self.ids.add(custom_id)
        line = {"custom_id": custom_id, "messages": list(messages), "params": dict(params)}
        self._file.write(orjson.dumps(line) + b"\n")
        return custom_id

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def read_requests(path: Path) -> Iterator[BatchRequest]:
    """The requests a ``RequestLog`` wrote, in the order they were recorded."""
    with path.open("rb") as file:
        for line in file:
            if line.strip():
                data = orjson.loads(line)
                yield BatchRequest(data["custom_id"], data["messages"], data["params"])


def split(requests: Iterator[BatchRequest], size_of: Any, max_requests: int,
          max_bytes: int) -> Iterator[list[BatchRequest]]:
    """Consecutive groups of at most ``max_requests`` requests and ``max_bytes`` bytes (``size_of(request)``).

    A single request larger than ``max_bytes`` still forms a group of its own: the provider refuses it and
    it is reported failed, never dropped here.
    """
    group: list[BatchRequest] = []
    size = 0
    for request in requests:
        length = size_of(request)
        if group and (len(group) >= max_requests or size + length > max_bytes):
            yield group
            group, size = [], 0
        group.append(request)
        size += length
    if group:
        yield group
