"""Refused requests: counted by protocol and reason, logged once per reason and then at most once a minute.

Every request a front door turns away before admission (authentication, TLS, length, size, media type,
encoding, parse, an internal error) goes through ``Refusals.record``: it adds to the
``context_precision.serve.refusals`` counter and to ``/stats``, and logs a warning the first time a reason
is seen and then at most once per ``LOG_INTERVAL_S`` per reason, with how many were not logged in between.
Log lines carry the reason and a short fixed message, never the request's content or credentials.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from cp_observe import _names as n
from cp_observe._log import logger

__all__ = ["LOG_INTERVAL_S", "REASONS", "Refusals"]

LOG_INTERVAL_S = 60.0

#: Every reason a request may be refused for before admission.
REASONS = (
    "missing_token",  # no bearer token (401 / UNAUTHENTICATED)
    "wrong_token",  # a token that is not one of the service's (401 / UNAUTHENTICATED)
    "tls",  # the TLS handshake failed: plaintext, unknown CA, no or foreign client certificate (HTTP ports)
    "path",  # not POST /v1/traces (404 / 405)
    "malformed",  # not HTTP/1.x the standard library can parse: request line, header size or count (400 / 414 / 431)
    "length",  # no usable Content-Length or chunked framing (411 / 400)
    "too_large",  # larger than max_request_bytes, on the wire or decompressed (413 / RESOURCE_EXHAUSTED)
    "media_type",  # neither protobuf nor JSON (415)
    "encoding",  # unknown or broken Content-Encoding (415 / 400)
    "parse",  # unreadable protobuf or JSON, too deeply nested JSON (400 / INVALID_ARGUMENT)
    "incomplete",  # the connection ended or timed out before the body did (HTTP; nobody left to answer)
    "receive_failed",  # gRPC: grpcio ended the call before its message arrived (over the size limit, cancelled)
    "internal",  # a bug: the handler failed (500 / INTERNAL); the service keeps serving
    # Connections the HTTP door closes: counted per connection, not per request.
    "too_many_connections",  # accepted at max_connections with every connection mid-request: closed at once (HTTP)
    "idle_timeout",  # a kept-alive connection sent nothing for http_idle_timeout_s (HTTP)
    "slow_client",  # a request or TLS handshake took longer than http_read_timeout_s to arrive (HTTP)
    # At max_connections a new connection is admitted by closing another (HTTP), never refused while one can go.
    "first_request_timeout",  # a new connection sent no request headers within http_first_request_timeout_s
    "evicted_new",  # closed at the bound: the oldest connection that had not sent a request's headers yet
    "evicted_idle",  # closed at the bound: the kept-alive connection idle longest (no new connection to close)
    # Durable intake: admitted, then refused by the store (429 / RESOURCE_EXHAUSTED, like a full queue).
    "store_full",  # the stored spans would pass durable_max_bytes
    "store_age",  # the oldest stored target is older than durable_max_age_s (the judge is not keeping up)
    "store_error",  # the group commit failed or took longer than COMMIT_WAIT_S
)


class Refusals:
    """Counts and rate-limited logs of refused requests."""

    def __init__(self, counter: Any) -> None:
        self._counter = counter
        self._lock = threading.Lock()  # guards _counts, _last_logged and _unlogged
        self._counts: Counter[str] = Counter()
        self._last_logged: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def record(self, protocol: str, reason: str, detail: str = "") -> None:
        """Count one refusal; log it unless this reason was logged less than ``LOG_INTERVAL_S`` ago."""
        self._counter.add(1, {n.PROTOCOL: protocol, n.REASON: reason})
        with self._lock:
            self._counts[f"{protocol}:{reason}"] += 1
        self.warn(reason, "request refused", protocol=protocol, reason=reason, detail=detail[:200])

    def warn(self, key: str, event: str, **fields: Any) -> None:
        """Log ``event`` once for ``key``, then at most once per ``LOG_INTERVAL_S`` (nothing is counted)."""
        now = time.monotonic()
        with self._lock:
            last = self._last_logged.get(key)
            if last is not None and now - last < LOG_INTERVAL_S:
                self._unlogged[key] += 1
                return
            self._last_logged[key] = now
            suppressed = self._unlogged.pop(key, 0)
        logger.warning(event, not_logged_since_last=suppressed, **fields)

    def counts(self) -> dict[str, int]:
        """``{"http:wrong_token": 3, ...}`` for ``/stats``."""
        with self._lock:
            return dict(sorted(self._counts.items()))
