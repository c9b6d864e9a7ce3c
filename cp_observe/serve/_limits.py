"""The HTTP door's bounds: open connections against the open-file limit, the timeouts, and what the parser refuses.

``max_connections`` means something only if the process may open that many descriptors: at start the soft
``RLIMIT_NOFILE`` is raised towards it (never above the hard limit, never lowered), as Go's runtime does for
the Collector; below it, the bound is lowered to fit and a warning says so, so the bound, not ``EMFILE`` in
the accept loop, is what decides. What the HTTP parser cannot read is answered with the status
``http.server`` gave it (400, 414, 431) and counted as ``length`` (framing) or ``malformed``.
"""

from __future__ import annotations

import contextlib
import resource

from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from cp_observe._log import logger

__all__ = ["ACCEPT_BURST", "MAX_HEADERS", "MAX_LINE", "Limits", "classify", "effective_limits", "raise_open_file_limit"]

MAX_LINE = 16 << 10  # request line or one header line (http.server: 64 KiB; bearer tokens and tracestate fit)
MAX_HEADERS = 100  # as http.server
_FD_RESERVE = 256  # descriptors kept for everything else: the gRPC port, the admin port, exporters, files


ACCEPT_BURST = 128  # connections asyncio accepts per wake-up of the listening socket (its own default is 100)


class Limits:
    """The door's bounds: open connections, the idle time, the time one request may take to arrive, and the time a
    new connection has to send its first request's headers.
    """

    def __init__(self, max_connections: int, idle_timeout_s: float, read_timeout_s: float,
                 first_request_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self.first_request_timeout_s = first_request_timeout_s


def raise_open_file_limit(wanted: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to ``wanted`` (at most the hard limit); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def effective_limits(max_connections: int, idle_timeout_s: float, read_timeout_s: float,
                     first_request_timeout_s: float) -> Limits:
    """The OTLP door's limits, with the bound kept below the descriptors the process may open.

    At the bound, each accepted connection evicts another, whose descriptor closes on the loop's next turn: one
    accept burst (``ACCEPT_BURST``) can be open beyond the bound for a moment, so it is reserved too; without
    it an ``EMFILE`` in the accept loop would make asyncio stop accepting for a whole second.
    """
    reserve = _FD_RESERVE + ACCEPT_BURST
    soft = raise_open_file_limit(max_connections + reserve)
    bound = max_connections
    if soft < max_connections + reserve:
        bound = max(16, soft - reserve)
        logger.warning("the open-file limit is below max_connections; the bound is lowered to fit",
                       max_connections=max_connections, effective=bound, nofile=soft)
    return Limits(bound, idle_timeout_s, read_timeout_s, first_request_timeout_s)


def classify(status: int, exc: BaseException | None) -> tuple[int, str]:
    """The status and refusal reason of a request the parser could not read."""
    if not isinstance(exc, HttpProcessingError):
        return status, "internal"
    text = str(exc).lower()
    if isinstance(exc, LineTooLong):
        return (414, "malformed") if "status line" in text or "url" in text else (431, "malformed")
    if "header" in text and ("too many" in text or "too large" in text):
        return 431, "malformed"
    if any(word in text for word in ("chunk", "transfer-encoding", "transfer encoding", "content-length",
                                     "content length")):
        return 400, "length"
    return 400, "malformed"
