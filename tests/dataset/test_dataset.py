"""``cp-observe dataset``: stored evaluations selected into JSON lines that ``run_evals`` reads; every skip counted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cp_observe import _names as n
from cp_observe import load_dataset
from cp_observe.dataset._record import DatasetError
from tests.dataset_support import Case, canary_cases, write_traces
from tests.replay_support import Exported, export_demo

CLI = [sys.executable, "-m", "cp_observe.cli", "dataset"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo's traces (every turn scored live, content captured) as the Collector's file exporter writes them."""
    return export_demo(tmp_path_factory.mktemp("demo"), 1.0)


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """Traces carrying segment values and rerank attributes."""
    path = tmp_path / "canary.jsonl"
    write_traces(path, canary_cases())
    return path


def test_every_live_evaluation_of_the_demo_becomes_one_line(demo: Exported, tmp_path: Path) -> None:
    """With no filter, one line per live evaluation: its verdicts, AP and ids, and the scored span's query,
    contexts and the agent's answer; the lines parse as run_evals items."""
    out = tmp_path / "all.jsonl"
    done = _run(str(demo.jsonl), "-o", str(out))
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert len(items) == len(demo.live) > 0
    assert f"selected {len(items)} of {len(items)} evaluations" in done.stdout
    for item in items:
        trace_id, ap, verdicts = demo.live[int(item["span_id"], 16)]
        assert int(item["trace_id"], 16) == trace_id
        assert item["average_precision"] == ap and tuple(item["verdicts"]) == verdicts
        assert item["input"] == item["query"] and item["query"].strip()
        assert len(item["contexts"]) == len(verdicts) and all(c.strip() for c in item["contexts"])
        assert item["reference"] == n.REFERENCE_OUTPUT and item["answer"].strip()
        assert item["data_source"].startswith("demo") and item["time"].endswith("Z")
        assert len(item["reasons"]) == len(verdicts)
    raw = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert raw == items  # what run_evals reads directly is what load_dataset checks


def test_max_score_and_worst_n_combine(demo: Exported, tmp_path: Path) -> None:
    """--max-score keeps scores at most X; --worst N the N lowest of those; the rest counted by reason."""
    every = sorted(round(ap, 2) for _, ap, _ in demo.live.values())
    low = [s for s in every if s <= 0.5]
    assert 3 < len(low) < len(every), every
    out = tmp_path / "worst.jsonl"
    done = _run(str(demo.jsonl), "--max-score", "0.5", "--worst", "3", "-o", str(out))
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert [i["score"] for i in items] == low[:3]  # lowest first
    assert f"{len(every) - len(low)} score above --max-score 0.5" in done.stdout
    assert f"{len(low) - 3} not among the worst 3" in done.stdout


def test_segment_data_source_and_time_filters(canary: Path, tmp_path: Path) -> None:
    """--segment (attribute or label name), --data-source and --since/--until; all must hold, repeats are an or."""
    out = tmp_path / "v2.jsonl"
    done = _run(str(canary), "--segment", "retriever.version=v2", "-o", str(out))
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert len(items) == 12 and {i["segments"]["retriever_version"] for i in items} == {"v2"}
    assert "13 other retriever_version segment value" in done.stdout  # 12 of v1 and one without the segment
    reranked = [i for i in items if "rerank" in i]
    assert len(reranked) == 4 and all(i["stage"] == n.STAGE_RERANK for i in reranked)
    assert all(i["rerank"]["lift"] == pytest.approx(i["average_precision"] - 1.0) for i in reranked)
    both = _run(str(canary), "--segment", "retriever_version=v1", "--segment", "retriever_version=none",
                "-o", str(tmp_path / "both.jsonl"))
    assert both.returncode == 0 and len(load_dataset(tmp_path / "both.jsonl")) == 13
    faq = _run(str(canary), "--data-source", "faq", "-o", str(tmp_path / "faq.jsonl"))
    assert faq.returncode == 0 and [i["query"] for i in load_dataset(tmp_path / "faq.jsonl")] == ["unversioned"]
    assert "24 other data source" in faq.stdout
    # canary_cases start at 1_700_000_000 s, one case per millisecond: the first five.
    window = _run(str(canary), "--since", "2023-11-14T22:13:20Z", "--until", "2023-11-14T22:13:20.005Z",
                  "-o", str(tmp_path / "window.jsonl"))
    assert window.returncode == 0, window.stderr
    assert len(load_dataset(tmp_path / "window.jsonl")) == 5 and "20 at or after --until" in window.stdout


def test_a_dataset_file_is_an_input_too(canary: Path, tmp_path: Path) -> None:
    """A run's output (a dataset file) is read as is, and can be narrowed again."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    assert _run(str(canary), "--max-score", "0.5", "-o", str(first)).returncode == 0
    done = _run(str(first), "--worst", "2", "-o", str(second))
    assert done.returncode == 0, done.stderr
    assert [i["score"] for i in load_dataset(second)] == sorted(i["score"] for i in load_dataset(first))[:2]


def test_what_cannot_become_a_line_is_counted(tmp_path: Path) -> None:
    """An evaluation whose scored span is not in the input, or one that failed, is counted, never dropped silently."""
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    write_traces(whole, [Case("q", ("a", "b"), (True, False), "a")] * 3)
    lines = whole.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if n.KIND_RETRIEVER not in line or n.EVALUATION_SPAN_NAME in line]
    assert len(kept) < len(lines)
    cut.write_text("\n".join(kept) + "\n", encoding="utf-8")
    done = _run(str(cut), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    assert load_dataset(tmp_path / "out.jsonl") == []
    assert "scored span not in the input" in done.stdout and "selected 0 of 0" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--segment", "novalue"], "--segment wants NAME=VALUE"),
    (["--worst", "0"], "--worst must be >= 1"),
    (["--max-score", "-1"], "--max-score must be >= 0"),
    (["--phoenix-dataset", "x"], "--phoenix-dataset needs --phoenix-url"),
    (["--since", "2026-01-02", "--until", "2026-01-01"], "--since must be before --until"),
])
def test_bad_options_exit_2_with_a_clear_message(canary: Path, args: list[str], message: str) -> None:
    """Bad filters are refused before anything is read."""
    done = _run(str(canary), *args, "-o", "-")
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_unreadable_inputs(tmp_path: Path, canary: Path) -> None:
    """A missing file exits 2; a corrupt line exits 1 naming it, and what was read before it is still written."""
    missing = _run(str(tmp_path / "nope.jsonl"), "-o", "-")
    assert missing.returncode == 2 and "nope.jsonl: cannot read" in missing.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text(canary.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    lines = len(canary.read_text(encoding="utf-8").splitlines())
    done = _run(str(broken), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1 and f"broken.jsonl:{lines + 1}" in done.stderr, done.stderr
    assert len(load_dataset(tmp_path / "out.jsonl")) == 25
    bad = tmp_path / "bad-dataset.jsonl"
    good = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    bad.write_text(good[0] + "\n" + good[1].replace('"score": ', '"score": "high", "x": ') + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad-dataset.jsonl:2: 'score' must be a non-negative number"):
        load_dataset(bad)
    done = _run(str(bad), "-o", str(tmp_path / "again.jsonl"))
    assert done.returncode == 1 and "bad-dataset.jsonl:2" in done.stderr
    assert len(load_dataset(tmp_path / "again.jsonl")) == 1


def test_nothing_to_read_and_stdout(canary: Path) -> None:
    """No input exits 2; '-o -' writes the lines on stdout and the summary on stderr."""
    none = subprocess.run(CLI, capture_output=True, text=True, timeout=60, check=False)
    assert none.returncode == 2 and "nothing to read" in none.stderr
    done = _run(str(canary), "--worst", "1", "-o", "-")
    assert done.returncode == 0
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["score"] == 0.33 and "selected 1 of 25" in done.stderr


def test_evaluations_over_the_bound_are_counted(canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector keeps at most MAX_EVALUATIONS evaluations; the rest are counted as skipped, never lost silently."""
    from cp_observe._traces._files import TraceFile
    from cp_observe.dataset import _collect

    monkeypatch.setattr(_collect, "MAX_EVALUATIONS", 10)
    collector = _collect.Collector()
    collector.read(TraceFile(canary))
    result = collector.finish()
    assert len(result.records) == 10 and result.evaluations == 25
    assert result.skipped == {"over the bound of 10 evaluations read": 15}


def test_the_api_key_is_sent_from_the_environment_and_never_printed(tmp_path: Path) -> None:
    """CP_OBSERVE_PHOENIX_API_KEY goes out as a bearer token to the upload URL (a loopback server that records the
    header and refuses, as Phoenix with authentication on does); neither output nor an error message shows it."""""
    import http.server
    import json
    import os
    import threading

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"detail": "Invalid token"}).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    traces = tmp_path / "traces.jsonl"
    write_traces(traces, canary_cases())
    key = "sk-phoenix-secret-4242"
    env = {**os.environ, "CP_OBSERVE_PHOENIX_API_KEY": key}
    try:
        done = subprocess.run([*CLI, str(traces), "-o", str(tmp_path / "o.jsonl"), "--phoenix-dataset", "x",
                               "--phoenix-url", f"http://127.0.0.1:{server.server_address[1]}"],
                              capture_output=True, text=True, timeout=60, check=False, env=env)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [f"Bearer {key}"]
    assert done.returncode == 1 and "HTTP 401" in done.stderr
    assert key not in done.stdout + done.stderr
