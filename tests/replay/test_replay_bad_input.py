"""Bad replay input: a truncated file, a malformed line, an unknown format, an unreachable API.

Each gets one clear error naming the file and line (or record, or URL); what was read before it is judged,
written and counted, and the command exits 1. Nothing is skipped silently.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cp_observe.replay import JaegerQuery, PhoenixProject, ReplayInputError, ReplayOptions, TraceFile, replay
from cp_observe.replay._progress import Progress
from cp_observe.testing import FakeJudge
from tests.replay_support import DATA, evaluations

COLLECTOR_FILE = DATA / "collector_file.jsonl"
CLI = [sys.executable, "-m", "cp_observe.cli", "replay"]


def _lines() -> list[bytes]:
    return COLLECTOR_FILE.read_bytes().splitlines(keepends=True)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, str(path), "-o", str(out), "--judge", "lexical", "-q"], capture_output=True,
                          text=True, timeout=60, check=False)


def test_truncated_json_lines_file_names_the_line_and_keeps_what_came_before(tmp_path: Path) -> None:
    """The last line cut mid-object: error at file:2 saying it looks truncated; line 1's retrieval is scored."""
    lines = _lines()
    path = tmp_path / "cut.jsonl"
    path.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])
    out = tmp_path / "o.jsonl"
    result = replay([TraceFile(path)], ReplayOptions(output=out), judge=FakeJudge(),
                    progress=Progress(enabled=False))
    assert result.error is not None and result.error.startswith(f"{path}:2: ")
    assert "truncated" in result.error
    assert result.stopped == "input error"
    assert result.stats["scored"] == 1 and len(evaluations(out)) == 1
    done = _run(path, tmp_path / "cli.jsonl")
    assert done.returncode == 1
    assert f"{path}:2:" in done.stderr
    assert "scored 1" in done.stdout
    assert len(evaluations(tmp_path / "cli.jsonl")) == 1


def test_malformed_line_in_the_middle_names_its_line(tmp_path: Path) -> None:
    """A line of non-JSON between two good ones: error at file:2; line 1 scored; line 3 not read (and said so)."""
    lines = _lines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(lines[0] + b'{"resourceSpans": [ oops\n' + lines[1])
    done = _run(path, tmp_path / "o.jsonl")
    assert done.returncode == 1
    assert f"{path}:2: invalid JSON" in done.stderr
    assert "stopped early: input error" in done.stdout
    assert "scored 1" in done.stdout


def test_wrong_otlp_shape_names_its_line(tmp_path: Path) -> None:
    """Valid JSON that is not an OTLP request (a span id that is neither hex nor base64): error at its line."""
    path = tmp_path / "shape.jsonl"
    path.write_bytes(_lines()[0] + b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"zz!"}]}]}]}\n')
    result = replay([TraceFile(path)], ReplayOptions(output=tmp_path / "o.jsonl"), judge=FakeJudge(),
                    progress=Progress(enabled=False))
    assert result.error is not None and result.error.startswith(f"{path}:2: invalid OTLP/JSON")
    assert result.stats["scored"] == 1


def test_spans_with_invalid_ids_are_counted_not_skipped_silently(tmp_path: Path) -> None:
    """A span whose trace id is all zeros is refused by the conversion (as serve refuses it) and counted."""
    text = _lines()[1].replace(b"0af7651916cd43dd8448eb211c80319c", b"0" * 32)
    path = tmp_path / "zero.jsonl"
    path.write_bytes(_lines()[0] + text)
    result = replay([TraceFile(path)], ReplayOptions(output=tmp_path / "o.jsonl"), judge=FakeJudge(),
                    progress=Progress(enabled=False))
    assert result.error is None
    assert result.rejected == 1 and f"{path}:2" in result.rejected_error and "trace id" in result.rejected_error
    assert result.stats["scored"] == 1


def test_truncated_protobuf_file_names_the_record(tmp_path: Path) -> None:
    """Length-prefixed records with the second cut short: error naming record 2 and its byte offset."""
    from cp_observe._traces._otlp_json import decode_json_line

    bodies = [decode_json_line(line, 1 << 20).SerializeToString() for line in _lines()]
    path = tmp_path / "cut.pb"
    data = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    path.write_bytes(data[:-10])
    result = replay([TraceFile(path)], ReplayOptions(output=tmp_path / "o.jsonl"), judge=FakeJudge(),
                    progress=Progress(enabled=False))
    assert result.error is not None
    assert result.error.startswith(f"{path}: record 2 (byte {4 + len(bodies[0])})")
    assert "truncated record" in result.error
    assert result.stats["scored"] == 1


def test_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    """A PNG handed to replay: 'unknown format', naming the file and suggesting --format; nothing judged."""
    path = tmp_path / "picture.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    done = _run(path, tmp_path / "o.jsonl")
    assert done.returncode == 1
    assert f"{path}: unknown format" in done.stderr and "--format" in done.stderr
    assert "scored 0" in done.stdout


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    """A path that does not exist: exit 2 before anything runs, naming the path."""
    done = _run(tmp_path / "nope.jsonl", tmp_path / "o.jsonl")
    assert done.returncode == 2
    assert "nope.jsonl: cannot read" in done.stderr


def test_second_input_failing_keeps_the_first_inputs_scores(tmp_path: Path) -> None:
    """Two inputs, the second unreadable: the first is scored and counted, the error names the second."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json}\n")
    result = replay([TraceFile(COLLECTOR_FILE), TraceFile(bad)], ReplayOptions(output=tmp_path / "o.jsonl"),
                    judge=FakeJudge(), progress=Progress(enabled=False))
    assert result.stats["scored"] == 2
    assert result.error is not None and result.error.startswith(f"{bad}:1:")


@pytest.mark.parametrize("kind", ["jaeger", "phoenix"])
def test_unreachable_api_names_the_url(kind: str, tmp_path: Path) -> None:
    """A query API on a closed port: 'unreachable', naming the URL; nothing judged, exit 1 from the command."""
    url = f"http://127.0.0.1:{_closed_port()}"
    now = datetime.now(timezone.utc)
    source = (JaegerQuery(url, "shop", since=now - timedelta(hours=1), until=now) if kind == "jaeger"
              else PhoenixProject(url, "default"))
    result = replay([source], ReplayOptions(output=tmp_path / "o.jsonl"), judge=FakeJudge(),
                    progress=Progress(enabled=False))
    assert result.error is not None and result.error.startswith(url) and "unreachable" in result.error
    args = ["--jaeger", url, "--service", "shop"] if kind == "jaeger" else ["--phoenix", url, "--project", "p"]
    done = subprocess.run([*CLI, *args, "-o", str(tmp_path / "c.jsonl"), "-q"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1 and url in done.stderr and "unreachable" in done.stderr


def test_an_api_answering_something_else_is_named(tmp_path: Path) -> None:
    """An HTTP server that is not Jaeger (here a 404 from a plain file server): the error says HTTP 404 and the URL."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        now = datetime.now(timezone.utc)
        with pytest.raises(ReplayInputError, match=r"HTTP 404"):
            list(JaegerQuery(url, "shop", since=now - timedelta(hours=1), until=now).batches())
    finally:
        server.shutdown()
        server.server_close()
