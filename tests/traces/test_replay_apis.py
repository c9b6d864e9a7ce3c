"""Replay from trace-query APIs: Jaeger- and Tempo-style APIs on loopback serving recorded responses in their
documented JSON formats, and a real Phoenix on loopback read through its REST API.

``data/replay/jaeger_demo_traces.json`` is what ``GET /api/traces`` returns (``{"data": [trace, ...]}``, each trace
with ``spans`` and ``processes``; tags typed ``string``/``bool``/``int64``/``float64``; arrays stringified as JSON),
recorded from eight turns of the demo including its live evaluation spans. The server below answers
``/api/traces?service=&start=&end=&limit=`` from it the way Jaeger does: traces of that service starting in the
window, at most ``limit`` of them. ``data/replay/tempo_demo_traces.json`` holds Tempo's search hits and, per trace,
what ``GET /api/traces/{id}`` returns (OTLP/JSON with base64 ids under ``batches``), from the same demo run.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cp_observe.replay import JaegerQuery, PhoenixProject, ReplayOptions, replay
from cp_observe.replay._progress import Progress
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, phoenix_server
from tests.replay_support import DATA, evaluations

RECORDED = json.loads((DATA / "jaeger_demo_traces.json").read_text(encoding="utf-8"))


class JaegerApi:
    """``GET /api/traces`` answered from recorded traces; every query it served is kept."""

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
                body = json.dumps(api.answer(query)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, query: dict[str, str]) -> dict[str, Any]:
        start, end, limit = int(query["start"]), int(query["end"]), int(query.get("limit", "20"))
        chosen = []
        for trace in self.traces:
            services = {p["serviceName"] for p in trace["processes"].values()}
            first = min(s["startTime"] for s in trace["spans"])
            if query["service"] in services and start <= first <= end:
                chosen.append(trace)
        chosen.sort(key=lambda t: -min(s["startTime"] for s in t["spans"]))  # Jaeger: most recent first
        return {"data": chosen[:limit], "total": 0, "limit": 0, "offset": 0, "errors": None}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def jaeger() -> Iterator[JaegerApi]:
    """The recorded Jaeger API on a loopback port."""
    api = JaegerApi(RECORDED["data"])
    api.thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()


def _live_scores() -> dict[int, float]:
    """Scored span id -> AP of the live evaluation spans in the recording."""
    out = {}
    for trace in RECORDED["data"]:
        for span in trace["spans"]:
            if span["operationName"] == "evaluation context_precision":
                tags = {t["key"]: t["value"] for t in span["tags"]}
                parent = next(r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF")
                out[int(parent, 16)] = float(tags["context_precision.average_precision"])
    return out


def _window() -> tuple[datetime, datetime]:
    starts = [s["startTime"] for t in RECORDED["data"] for s in t["spans"]]
    return (datetime.fromtimestamp(min(starts) / 1e6 - 60, timezone.utc),
            datetime.fromtimestamp(max(starts) / 1e6 + 60, timezone.utc))


def test_jaeger_api_replay_gives_the_live_scores(jaeger: JaegerApi, tmp_path: Path) -> None:
    """Every recorded trace is fetched (full windows split until nothing is cut off) and scored as it was live."""
    since, until = _window()
    out = tmp_path / "o.jsonl"
    source = JaegerQuery(jaeger.url, "cp-observe-demo", since=since, until=until, limit=3)
    result = replay([source], ReplayOptions(judge="lexical", output=out), progress=Progress(enabled=False))
    assert result.error is None
    live = _live_scores()
    assert len(live) == len(RECORDED["data"]) == 8
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == live
    assert len(jaeger.queries) > 3  # a window holding more than `limit` traces was asked again in halves
    assert source.position == 8


def test_jaeger_api_replay_from_the_command_line(jaeger: JaegerApi, tmp_path: Path) -> None:
    """``cp-observe replay --jaeger URL --service S --since --until``: exit 0, the live scores."""
    since, until = _window()
    out = tmp_path / "o.jsonl"
    done = subprocess.run([sys.executable, "-m", "cp_observe.cli", "replay", "--jaeger", jaeger.url, "--service",
                           "cp-observe-demo", "--since", since.isoformat(), "--until", until.isoformat(), "-o",
                           str(out), "-q"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "scored 8" in done.stdout
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == _live_scores()


def test_jaeger_service_without_traces_reads_nothing(jaeger: JaegerApi, tmp_path: Path) -> None:
    """Another service: one query, nothing fed, no error."""
    since, until = _window()
    source = JaegerQuery(jaeger.url, "other-service", since=since, until=until)
    result = replay([source], ReplayOptions(judge="lexical", output=tmp_path / "o.jsonl"),
                    progress=Progress(enabled=False))
    assert (result.error, result.spans_read, len(jaeger.queries)) == (None, 0, 1)


@pytest.mark.skipif(not PHOENIX_EXECUTABLE.exists(), reason=INSTALL_HINT)
@pytest.mark.timeout(600)  # the demo export, Phoenix's startup (90 s deadline), a demo run into it (180 s), the replay
def test_phoenix_project_replay_gives_the_live_scores(tmp_path: Path) -> None:
    """The demo exported to a real Phoenix, replayed from its REST API, scores every retrieval as it did live."""
    from tests.replay_support import export_demo

    exported = export_demo(tmp_path / "demo", 1.0, turns=10)
    with phoenix_server(tmp_path / "phoenix") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
        env.update(OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=replay-demo", OTEL_BSP_SCHEDULE_DELAY="50")
        # Ship the exported file into Phoenix with the SDK's own OTLP exporter path: `cp-observe demo --otlp`.
        done = subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--turns", "10", "--quiet", "--otlp",
                               server.url], capture_output=True, text=True, timeout=180, check=False, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        spans = server.wait_for_spans("replay-demo", lambda s: sum(x["name"].startswith("evaluation") for x in s) >= 10)
        live = {}
        for span in spans:
            if span["name"] == "evaluation context_precision":
                live[int(span["parent_id"], 16)] = float(span["attributes"]["context_precision.average_precision"])
        out = tmp_path / "o.jsonl"
        result = replay([PhoenixProject(server.url, "replay-demo", page_size=7)],
                        ReplayOptions(judge="lexical", output=out), progress=Progress(enabled=False))
    assert result.error is None, result.error
    assert len(live) == 10
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == live
    assert result.requests >= 4  # paged
    assert len(exported.live) == 10  # the same demo, exported as a file, scored the same number of turns
    assert sorted(ap for _, ap, _ in exported.live.values()) == sorted(live.values())


TEMPO = json.loads((DATA / "tempo_demo_traces.json").read_text(encoding="utf-8"))


class TempoApi:
    """Tempo's ``/api/search`` and ``/api/traces/{id}`` answered from recorded responses (base64 ids, ``batches``)."""

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
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def test_tempo_api_replay_gives_the_live_scores(tmp_path: Path) -> None:
    """Tempo's search then trace-by-id (OTLP/JSON, base64 ids): every recorded trace scored as it was live, once."""
    api = TempoApi()
    try:
        starts = [int(t["startTimeUnixNano"]) for t in TEMPO["search"]]
        since = datetime.fromtimestamp(min(starts) / 1e9 - 5, timezone.utc)
        until = datetime.fromtimestamp(max(starts) / 1e9 + 5, timezone.utc)
        out = tmp_path / "o.jsonl"
        done = subprocess.run([sys.executable, "-m", "cp_observe.cli", "replay", "--tempo", api.url, "--service",
                               "cp-observe-demo", "--since", since.isoformat(), "--until", until.isoformat(), "-o",
                               str(out), "-q"], capture_output=True, text=True, timeout=120, check=False)
    finally:
        api.server.shutdown()
        api.server.server_close()
    assert done.returncode == 0, done.stderr
    live = {}
    for trace in TEMPO["traces"].values():
        for batch in trace["batches"]:
            for scope in batch["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == "evaluation context_precision":
                        attributes = {a["key"]: a["value"] for a in span["attributes"]}
                        parent = int.from_bytes(base64.b64decode(span["parentSpanId"]), "big")
                        live[parent] = float(attributes["context_precision.average_precision"]["doubleValue"])
    assert len(live) == 8
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == live
    assert api.paths.count("/api/search") >= 1
    assert len([p for p in api.paths if p.startswith("/api/traces/")]) == 8  # each trace fetched once
