"""The admin port: ``/healthz``, ``/readyz``, ``/metrics`` and ``/stats``, on the same aiohttp door as OTLP/HTTP.

``GET /healthz`` (the process serves), ``GET /readyz`` (started, not draining, below the high-water mark;
503 with the reason otherwise), ``GET /metrics`` and ``GET /stats`` (the accounting, the refusals and the
sinks' counts as JSON). ``/metrics`` speaks what the scraper asks for, as the in-process metrics port does:
OpenMetrics, with trace exemplars on the ``context_precision_score`` buckets, when the ``Accept`` header
names ``application/openmetrics-text`` (Prometheus with ``--enable-feature=exemplar-storage``), else the
Prometheus text format. With a bearer token set (and ``admin_auth``), ``/metrics`` and ``/stats`` want it.

The admin port keeps its own small connection bound and the same timeouts; its refusals are not counted as
OTLP refusals (probes and scrapes are not senders).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from cp_observe.serve._connections import Connection, DoorServer
from cp_observe.serve._limits import Limits

if TYPE_CHECKING:
    from cp_observe.serve._backend import Backend

__all__ = ["AdminServer"]

_MAX_CONNECTIONS = 256  # probes and scrapers: a few at a time
_TEXT = "text/plain; charset=utf-8"


class AdminServer(DoorServer):
    """``/healthz``, ``/readyz``, ``/metrics`` and ``/stats``: ``start()``, ``stop(grace_s)`` and ``port``."""

    name = "admin"

    def __init__(self, service: Backend, host: str, port: int) -> None:
        s = service.settings
        limits = Limits(_MAX_CONNECTIONS, s.http_idle_timeout_s, s.http_read_timeout_s, s.http_first_request_timeout_s)
        # One worker: a scrape's collection runs off the loop, so /healthz answers while it runs.
        super().__init__(service, host, port, admin=True, limits=limits, workers=1)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        connection = request.protocol
        if isinstance(connection, Connection):
            connection.request_read()  # GETs: the body, if any, is not read
        if request.method not in ("GET", "HEAD"):
            response = _text(HTTPStatus.METHOD_NOT_ALLOWED, b"only GET and HEAD are served here\n",
                             {"Allow": "GET, HEAD"})
            response.force_close()
            return response
        service = self._service
        path = request.path
        if path in ("/metrics", "/stats") and service.settings.admin_auth and \
                service.tokens.check(request.headers.get("Authorization")) is not None:
            return _text(HTTPStatus.UNAUTHORIZED, b"missing or invalid bearer token\n",
                         {"WWW-Authenticate": 'Bearer realm="cp-observe"'})
        if path == "/healthz":
            return _text(HTTPStatus.OK, b"ok\n")
        if path == "/readyz":
            ready, reason = service.ready()
            return _text(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, f"{reason}\n".encode())
        if path == "/metrics":
            body, content_type = await self._door.run(_exposition, service, request.headers.get("Accept", ""))
            return web.Response(status=HTTPStatus.OK, body=body, headers={"Content-Type": content_type})
        if path == "/stats":
            stats = await self._door.run(service.stats)
            return web.Response(status=HTTPStatus.OK, body=json.dumps(stats, sort_keys=True).encode(),
                                headers={"Content-Type": "application/json"})
        return _text(HTTPStatus.NOT_FOUND, b"not found: try /healthz, /readyz, /metrics or /stats\n")


def _exposition(service: Backend, accept: str) -> tuple[bytes, str]:
    """The registry in the format the scraper asked for (OpenMetrics carries the exemplars)."""
    encode, content_type = choose_encoder(accept)
    return encode(service.registry), content_type


def _text(status: int, body: bytes, headers: dict[str, Any] | None = None) -> web.Response:
    return web.Response(status=int(status), body=body, headers={"Content-Type": _TEXT, **(headers or {})})
