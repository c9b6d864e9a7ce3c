"""Replay from trace-query APIs: Jaeger- and Tempo-style APIs on loopback serving recorded responses in their
documented JSON formats (``tests/traces_support.py``: eight demo turns with their live evaluation spans), and a real
Phoenix on loopback read through its REST API.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from cp_observe.replay import JaegerQuery, PhoenixProject, ReplayOptions, replay
from cp_observe.replay._progress import Progress
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, phoenix_server
from tests.replay_support import evaluations
from tests.traces_support import RECORDED, TEMPO, JaegerApi, TempoApi, jaeger_live_scores, tempo_live_scores


@pytest.fixture
def jaeger() -> Iterator[JaegerApi]:
    """The recorded Jaeger API on a loopback port."""
    api = JaegerApi(RECORDED["data"])
    api.thread.start()
    yield api
    api.close()


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
    live = jaeger_live_scores()
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
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == jaeger_live_scores()


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
        api.close()
    assert done.returncode == 0, done.stderr
    live = tempo_live_scores()
    assert len(live) == 8
    assert {span: ap for span, (_, ap, _) in evaluations(out).items()} == live
    assert api.paths.count("/api/search") >= 1
    assert len([p for p in api.paths if p.startswith("/api/traces/")]) == 8  # each trace fetched once
