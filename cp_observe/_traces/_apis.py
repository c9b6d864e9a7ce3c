"""Trace-query APIs as replay inputs: Jaeger, Tempo, Phoenix.

Each page the API returns becomes one OTLP ``ExportTraceServiceRequest`` and takes the file path from there
on (``spans_from_request``, then the processor). Memory stays bounded by one page.

- **Jaeger** ``GET {url}/api/traces?service=&start=&end=&limit=`` (the HTTP JSON API of the Jaeger UI;
  times in microseconds). Jaeger answers at most ``limit`` traces per query and says nothing of what it left
  out, so a window that comes back full is split in two and each half asked again, down to one microsecond
  (where a full answer is an error, never a silent loss).
  Tags map back to OTLP the way Jaeger's own OTLP translator maps them out: ``span.kind``,
  ``otel.status_code``/``otel.status_description``, ``otel.scope.name``/``otel.scope.version``; the process
  becomes the resource; ``CHILD_OF``/``FOLLOWS_FROM`` the parent; logs become events. Windows are inclusive
  at both ends (as Jaeger's are), so halves are ``[start, middle]`` and ``[middle + 1, end]``: no trace twice.
- **Tempo** ``GET {url}/api/search?tags=service.name=...&start=&end=&limit=`` (seconds), then
  ``GET {url}/api/traces/{id}`` for each trace found: OTLP/JSON with base64 ids, under ``batches`` (Tempo 1 and
  2), ``resourceSpans``, or ``trace.resourceSpans`` (the v2 API); older ``instrumentationLibrarySpans`` too.
  Full search windows are halved like Jaeger's, down to one second; a trace seen in two windows is read once.
- **Phoenix** ``GET {url}/v1/projects/{project}/spans?sort=start_time&order=asc`` with cursor paging.
  Phoenix moves ``openinference.span.kind`` into ``span_kind``; it is put back as an attribute.

Errors name the URL: unreachable, an HTTP error status, a body that is not the documented JSON.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from cp_observe import _names as n
from cp_observe._traces._otlp_json import request_from_document
from cp_observe._traces._source import Batch, ReplayInputError
from cp_observe._traces._time import iso_ns

__all__ = ["JaegerQuery", "PhoenixProject", "TempoQuery"]

_US = 1_000
_KINDS = {
    "internal": Span.SPAN_KIND_INTERNAL, "server": Span.SPAN_KIND_SERVER, "client": Span.SPAN_KIND_CLIENT,
    "producer": Span.SPAN_KIND_PRODUCER, "consumer": Span.SPAN_KIND_CONSUMER,
}
_STATUS = {"OK": Status.STATUS_CODE_OK, "ERROR": Status.STATUS_CODE_ERROR, "UNSET": Status.STATUS_CODE_UNSET}
_JAEGER_SPECIAL = frozenset({"span.kind", "otel.status_code", "otel.status_description", "otel.scope.name",
                             "otel.scope.version", "otel.library.name", "otel.library.version", "w3c.tracestate"})


def get_json(url: str, timeout_s: float, *, data: bytes | None = None, headers: Mapping[str, str] | None = None,
             shown: str | None = None, hints: Mapping[int, str] | None = None) -> Any:
    """GET ``url`` (POST ``data`` when given) and parse its JSON body.

    Raises ``ReplayInputError`` naming ``shown`` (default: the URL) on any failure: unreachable, an HTTP error
    status (with ``hints[status]`` and the start of its body), a body that is not JSON.
    """
    shown = url if shown is None else shown
    request = urllib.request.Request(url, data=data, headers=dict(headers or {"Accept": "application/json"}),
                                     method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode("utf-8", "replace") if exc.fp is not None else ""
        hint = (hints or {}).get(exc.code, "")
        raise ReplayInputError(f"{shown}: HTTP {exc.code} {exc.reason}{hint} {detail}".rstrip()) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ReplayInputError(f"{shown}: unreachable: {reason}") from None
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ReplayInputError(f"{shown}: the response is not JSON: {exc}") from None


class _TraceQuery:
    """Traces of ``service`` between ``since`` and ``until`` (both required) from a trace query API."""

    unit = "traces"
    _API = ""  # the API's name, for the errors
    _LABEL = ""  # what the source's name says before the service

    def __init__(self, url: str, service: str, *, since: datetime, until: datetime, limit: int = 200,
                 timeout_s: float = 30.0) -> None:
        if not service:
            raise ReplayInputError(f"{url}: a {self._API} query needs --service")
        if until <= since:
            raise ReplayInputError(f"{url}: --until must be after --since")
        self.url = url.rstrip("/")
        self.name = f"{self.url} ({self._LABEL + ', ' if self._LABEL else ''}service {service})"
        self.service = service
        self.start, self.end = self._window(since, until)
        self.limit = limit
        self.timeout_s = timeout_s
        self.total: int | None = None
        self.position = 0

    def _window(self, since: datetime, until: datetime) -> tuple[int, int]:  # in the unit the API takes
        raise NotImplementedError


class JaegerQuery(_TraceQuery):
    """Traces of ``service`` between ``since`` and ``until`` from a Jaeger (or Tempo Jaeger-compatible) query API."""

    _API = "Jaeger"

    def _window(self, since: datetime, until: datetime) -> tuple[int, int]:
        return int(since.timestamp() * 1_000_000), int(until.timestamp() * 1_000_000)  # microseconds

    def batches(self) -> Iterator[Batch]:
        """One request per trace, oldest window first."""
        windows = [(self.start, self.end)]
        while windows:
            start, end = windows.pop(0)
            query = urllib.parse.urlencode(
                {"service": self.service, "start": start, "end": end, "limit": self.limit}
            )
            url = f"{self.url}/api/traces?{query}"
            body = get_json(url, self.timeout_s)
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                raise ReplayInputError(f"{url}: not a Jaeger response (no 'data' list)")
            traces = body["data"]
            if len(traces) >= self.limit:
                if end <= start:
                    raise ReplayInputError(f"{url}: {len(traces)} or more traces start in the same microsecond; "
                                           "ask with a larger limit")
                middle = (start + end) // 2  # full: some traces may be missing; ask each half (bounds inclusive)
                windows[:0] = [(start, middle), (middle + 1, end)]
                continue
            for number, trace in enumerate(sorted(traces, key=_jaeger_trace_start), start=1):
                try:
                    request = jaeger_trace_to_request(trace)
                except (KeyError, TypeError, ValueError) as exc:
                    raise ReplayInputError(f"{url}: trace {number} is not in Jaeger's JSON format: {exc!r}") from None
                self.position += 1
                yield Batch(request, f"{url} trace {trace.get('traceID', number)}")


def _jaeger_trace_start(trace: Any) -> int:
    spans = trace.get("spans") if isinstance(trace, dict) else None
    return min((int(s.get("startTime", 0)) for s in spans), default=0) if isinstance(spans, list) and spans else 0


def jaeger_trace_to_request(trace: Mapping[str, Any]) -> ExportTraceServiceRequest:
    """One trace of Jaeger's JSON API as an OTLP request (one resource per Jaeger process)."""
    processes: Mapping[str, Any] = trace.get("processes") or {}
    by_process: dict[str, dict[tuple[str, str], list[Span]]] = {}
    for item in trace["spans"]:
        tags = {t["key"]: _jaeger_value(t) for t in item.get("tags") or ()}
        span = Span(
            trace_id=_hex_id(item["traceID"], 16),
            span_id=_hex_id(item["spanID"], 8),
            name=str(item.get("operationName", "")),
            start_time_unix_nano=int(item["startTime"]) * _US,
            end_time_unix_nano=(int(item["startTime"]) + int(item.get("duration", 0))) * _US,
            kind=_KINDS.get(str(tags.get("span.kind", "internal")), Span.SPAN_KIND_INTERNAL),
        )
        for reference in item.get("references") or ():
            if reference.get("refType") in ("CHILD_OF", "FOLLOWS_FROM") and reference.get("traceID") == item["traceID"]:
                span.parent_span_id = _hex_id(reference["spanID"], 8)
                break
        code = str(tags.get("otel.status_code", "")).upper()
        if code == "" and tags.get("error") is True:
            code = "ERROR"
        if code in _STATUS:
            span.status.code = _STATUS[code]
            if code == "ERROR" and tags.get("otel.status_description"):
                span.status.message = str(tags["otel.status_description"])
        if "w3c.tracestate" in tags:
            span.trace_state = str(tags["w3c.tracestate"])
        span.attributes.extend(_key_values((k, v) for k, v in tags.items() if k not in _JAEGER_SPECIAL
                                           and not (k == "error" and code == "ERROR")))
        for log in item.get("logs") or ():
            fields = {f["key"]: _jaeger_value(f) for f in log.get("fields") or ()}
            event = span.events.add(name=str(fields.pop("event", "log")), time_unix_nano=int(log["timestamp"]) * _US)
            event.attributes.extend(_key_values(fields.items()))
        scope = (str(tags.get("otel.scope.name", tags.get("otel.library.name", ""))),
                 str(tags.get("otel.scope.version", tags.get("otel.library.version", ""))))
        by_process.setdefault(str(item.get("processID", "")), {}).setdefault(scope, []).append(span)
    request = ExportTraceServiceRequest()
    for process_id, scopes in by_process.items():
        process = processes.get(process_id) or {}
        resource_spans = ResourceSpans()
        resource_tags = [("service.name", str(process.get("serviceName", "unknown_service")))]
        resource_tags.extend((t["key"], _jaeger_value(t)) for t in process.get("tags") or ())
        resource_spans.resource.attributes.extend(_key_values(resource_tags))
        for (scope_name, scope_version), spans in scopes.items():
            scope_spans = ScopeSpans()
            scope_spans.scope.name = scope_name
            scope_spans.scope.version = scope_version
            scope_spans.spans.extend(spans)
            resource_spans.scope_spans.append(scope_spans)
        request.resource_spans.append(resource_spans)
    return request


def _jaeger_value(tag: Mapping[str, Any]) -> Any:
    kind, value = tag.get("type", "string"), tag.get("value")
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "int64":
        return int(value)  # type: ignore[arg-type]
    if kind == "float64":
        return float(value)  # type: ignore[arg-type]
    if kind == "binary":
        return base64.b64decode(str(value))
    return "" if value is None else str(value)


def _hex_id(value: Any, size: int) -> bytes:
    text = str(value).strip().lower()
    raw = bytes.fromhex(text.rjust(size * 2, "0"))
    if len(raw) != size:
        raise ValueError(f"id {text!r} is not {size} bytes of hex")
    return raw


def _key_values(pairs: Any) -> list[KeyValue]:
    return [KeyValue(key=str(key), value=converted) for key, value in pairs if (converted := _any(value)) is not None]


def _any(value: Any) -> AnyValue | None:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, (list, tuple)):
        out = AnyValue()
        out.array_value.values.extend(converted for item in value if (converted := _any(item)) is not None)
        return out
    if isinstance(value, Mapping):
        out = AnyValue()
        out.kvlist_value.values.extend(_key_values(value.items()))
        return out
    return None if value is None else AnyValue(string_value=str(value))


class TempoQuery(_TraceQuery):
    """Traces of ``service`` between ``since`` and ``until`` from Tempo's search and trace-by-id APIs."""

    _API = _LABEL = "Tempo"
    _SEEN = 100_000

    def _window(self, since: datetime, until: datetime) -> tuple[int, int]:
        start = int(since.timestamp())  # whole seconds, the end rounded up and after the start
        return start, max(start + 1, int(until.timestamp() + 0.999))

    def batches(self) -> Iterator[Batch]:
        """One request per trace, oldest window first."""
        seen: dict[str, None] = {}  # insertion-ordered, bounded: the most recent trace ids read
        windows = [(self.start, self.end)]
        while windows:
            start, end = windows.pop(0)
            query = urllib.parse.urlencode({"tags": f"service.name={self.service}", "start": start, "end": end,
                                            "limit": self.limit})
            url = f"{self.url}/api/search?{query}"
            body = get_json(url, self.timeout_s)
            found = body.get("traces") if isinstance(body, dict) else None
            if not isinstance(found, list):
                raise ReplayInputError(f"{url}: not a Tempo search response (no 'traces' list)")
            if len(found) >= self.limit:
                if end - start <= 1:
                    raise ReplayInputError(f"{url}: {len(found)} or more traces in one second; ask with a larger limit")
                middle = (start + end) // 2
                windows[:0] = [(start, middle), (middle, end)]
                continue
            for item in sorted(found, key=lambda t: int(t.get("startTimeUnixNano") or 0)):
                trace_id = str(item.get("traceID", ""))
                if not trace_id or trace_id in seen:
                    continue
                seen[trace_id] = None
                while len(seen) > self._SEEN:
                    seen.pop(next(iter(seen)))
                trace_url = f"{self.url}/api/traces/{urllib.parse.quote(trace_id, safe='')}"
                document = get_json(trace_url, self.timeout_s)
                try:
                    request = request_from_document(_tempo_document(document))
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise ReplayInputError(f"{trace_url}: not OTLP/JSON: {type(exc).__name__}: {exc}") from None
                self.position += 1
                yield Batch(request, trace_url)


def _tempo_document(document: Any) -> dict[str, Any]:
    """Tempo's trace JSON (``batches``, ``resourceSpans`` or ``trace.resourceSpans``) as an OTLP request document."""
    if not isinstance(document, dict):
        raise TypeError("the trace is not a JSON object")
    if isinstance(document.get("trace"), dict):
        document = document["trace"]
    resources = document.get("batches", document.get("resourceSpans", document.get("resource_spans")))
    if not isinstance(resources, list):
        raise KeyError("batches")
    for resource in resources:
        if "scopeSpans" not in resource and "instrumentationLibrarySpans" in resource:
            resource["scopeSpans"] = resource.pop("instrumentationLibrarySpans")
            for scope in resource["scopeSpans"]:
                if "instrumentationLibrary" in scope:
                    scope["scope"] = scope.pop("instrumentationLibrary")
    return {"resourceSpans": resources}


class PhoenixProject:
    """Every span of a Phoenix project (optionally within ``since``/``until``), oldest first, through REST."""

    unit = "spans"

    def __init__(self, url: str, project: str, *, since: datetime | None = None, until: datetime | None = None,
                 page_size: int = 1000, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.project = project
        self.name = f"{self.url} (Phoenix project {project})"
        self.since, self.until = since, until
        self.page_size = page_size
        self.timeout_s = timeout_s
        self.total: int | None = None
        self.position = 0

    def batches(self) -> Iterator[Batch]:
        """One request per page of spans."""
        cursor: str | None = None
        page = 0
        while True:
            query: dict[str, Any] = {"limit": self.page_size, "sort": "start_time", "order": "asc"}
            if self.since is not None:
                query["start_time"] = self.since.astimezone(timezone.utc).isoformat()
            if self.until is not None:
                query["end_time"] = self.until.astimezone(timezone.utc).isoformat()
            if cursor:
                query["cursor"] = cursor
            project = urllib.parse.quote(self.project, safe="")
            url = f"{self.url}/v1/projects/{project}/spans?{urllib.parse.urlencode(query)}"
            body = get_json(url, self.timeout_s)
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                raise ReplayInputError(f"{url}: not a Phoenix spans response (no 'data' list)")
            page += 1
            try:
                request = phoenix_spans_to_request(body["data"], self.project)
            except (KeyError, TypeError, ValueError) as exc:
                raise ReplayInputError(f"{url}: a span is not in Phoenix's span format: {exc!r}") from None
            self.position += len(body["data"])
            if body["data"]:
                yield Batch(request, f"{url} (page {page})")
            cursor = body.get("next_cursor")
            if not cursor:
                return


def phoenix_spans_to_request(spans: list[Mapping[str, Any]], project: str) -> ExportTraceServiceRequest:
    """A page of Phoenix REST spans as one OTLP request (one resource named after the project)."""
    scope_spans = ScopeSpans()
    for item in spans:
        context = item["context"]
        attributes = dict(item.get("attributes") or {})
        kind = item.get("span_kind")
        if kind and kind != "UNKNOWN":
            attributes.setdefault(n.OPENINFERENCE_SPAN_KIND, kind)
        span = Span(
            trace_id=_hex_id(context["trace_id"], 16),
            span_id=_hex_id(context["span_id"], 8),
            name=str(item.get("name", "")),
            start_time_unix_nano=iso_ns(item["start_time"]),
            end_time_unix_nano=iso_ns(item["end_time"]),
        )
        if item.get("parent_id"):
            span.parent_span_id = _hex_id(item["parent_id"], 8)
        code = str(item.get("status_code", "UNSET")).upper()
        span.status.code = _STATUS.get(code, Status.STATUS_CODE_UNSET)
        if code == "ERROR" and item.get("status_message"):
            span.status.message = str(item["status_message"])
        span.attributes.extend(_key_values(attributes.items()))
        for event in item.get("events") or ():
            added = span.events.add(name=str(event.get("name", "")), time_unix_nano=iso_ns(event["timestamp"]))
            added.attributes.extend(_key_values((event.get("attributes") or {}).items()))
        scope_spans.spans.append(span)
    resource_spans = ResourceSpans()
    resource_spans.resource.attributes.extend(_key_values([("service.name", f"phoenix:{project}")]))
    resource_spans.scope_spans.append(scope_spans)
    request = ExportTraceServiceRequest()
    request.resource_spans.append(resource_spans)
    return request

