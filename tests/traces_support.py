"""Jaeger- and Tempo-style trace-query APIs on loopback, answering from recorded responses in their documented JSON.

``data/replay/jaeger_demo_traces.json`` is what ``GET /api/traces`` returns (``{"data": [trace, ...]}``, each trace
with ``spans`` and ``processes``; tags typed ``string``/``bool``/``int64``/``float64``; arrays stringified as JSON),
recorded from eight turns of the demo including its live evaluation spans. ``JaegerApi`` answers
``/api/traces?service=&start=&end=&limit=`` from it the way Jaeger does: traces of that service starting in the
window, at most ``limit`` of them. ``data/replay/tempo_demo_traces.json`` holds Tempo's search hits and, per trace,
what ``GET /api/traces/{id}`` returns (OTLP/JSON with base64 ids under ``batches``), from the same demo run;
``TempoApi`` answers both. The replay tests (``tests/traces/``) and the dataset tests (``tests/dataset/``) read
both, and check what they read against the live scores the recordings carry (``jaeger_live_scores``,
``tempo_live_scores``).
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.replay_support import DATA

RECORDED = json.loads((DATA / "jaeger_demo_traces.json").read_text(encoding="utf-8"))
TEMPO = json.loads((DATA / "tempo_demo_traces.json").read_text(encoding="utf-8"))
_EVALUATION = "evaluation context_precision"
_AP = "context_precision.average_precision"


class _RecordedApi:
    """A loopback HTTP server answering GET requests with recorded JSON; ``close`` stops it."""

    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()


def _send_json(handler: BaseHTTPRequestHandler, body: Any) -> None:
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class JaegerApi(_RecordedApi):
    """``GET /api/traces`` answered from recorded traces; every query it served is kept (start ``thread`` first)."""

    def __init__(self, traces: list[dict[str, Any]]) -> None:
        self.traces = traces
        self.queries: list[dict[str, str]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                if url.path != "/api/traces" or "service" not in query:
                    self.send_error(404)
                    return
                api.queries.append(query)
                _send_json(self, api.answer(query))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, query: dict[str, str]) -> dict[str, Any]:
        """The traces of the query's service that start in its window, most recent first, at most ``limit``."""
        start, end, limit = int(query["start"]), int(query["end"]), int(query.get("limit", "20"))
        chosen = []
        for trace in self.traces:
            services = {p["serviceName"] for p in trace["processes"].values()}
            first = min(s["startTime"] for s in trace["spans"])
            if query["service"] in services and start <= first <= end:
                chosen.append(trace)
        chosen.sort(key=lambda t: -min(s["startTime"] for s in t["spans"]))  # Jaeger: most recent first
        return {"data": chosen[:limit], "total": 0, "limit": 0, "offset": 0, "errors": None}


class TempoApi(_RecordedApi):
    """Tempo's ``/api/search`` and ``/api/traces/{id}`` answered from recorded responses (base64 ids, ``batches``).

    It serves from construction on; every path asked is kept.
    """

    def __init__(self) -> None:
        self.paths: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                api.paths.append(url.path)
                query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                if url.path == "/api/search":
                    start, end, limit = int(query["start"]), int(query["end"]), int(query["limit"])
                    wanted = query["tags"] == "service.name=cp-observe-demo"
                    found = [t for t in TEMPO["search"]
                             if wanted and start <= int(t["startTimeUnixNano"]) // 10**9 <= end]
                    body: Any = {"traces": found[:limit], "metrics": {"inspectedTraces": len(found)}}
                elif url.path.startswith("/api/traces/") and url.path.rsplit("/", 1)[1] in TEMPO["traces"]:
                    body = TEMPO["traces"][url.path.rsplit("/", 1)[1]]
                else:
                    self.send_error(404)
                    return
                _send_json(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


def jaeger_live_scores() -> dict[int, float]:
    """Scored span id -> AP of the live evaluation spans in the Jaeger recording."""
    out = {}
    for trace in RECORDED["data"]:
        for span in trace["spans"]:
            if span["operationName"] == _EVALUATION:
                tags = {t["key"]: t["value"] for t in span["tags"]}
                parent = next(r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF")
                out[int(parent, 16)] = float(tags[_AP])
    return out


def tempo_live_scores() -> dict[int, float]:
    """Scored span id -> AP of the live evaluation spans in the Tempo recording."""
    out = {}
    for trace in TEMPO["traces"].values():
        for batch in trace["batches"]:
            for scope in batch["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == _EVALUATION:
                        attributes = {a["key"]: a["value"] for a in span["attributes"]}
                        parent = int.from_bytes(base64.b64decode(span["parentSpanId"]), "big")
                        out[parent] = float(attributes[_AP]["doubleValue"])
    return out
