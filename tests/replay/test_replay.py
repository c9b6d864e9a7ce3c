"""``cp-observe replay`` on files: the demo's exported traces give the live scores, sampling agrees with live
sampling, the options (dry run, caps, budget, filters) do what they say, progress shows."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as n
from cp_observe._config._sampling import TraceIdRatio
from cp_observe.replay import ReplayOptions, TraceFile, replay
from cp_observe.replay._progress import Progress
from cp_observe.testing import FakeJudge, JudgeServer
from tests.replay_support import DATA, Exported, check_collector_shape, evaluations, export_demo

COLLECTOR_FILE = DATA / "collector_file.jsonl"
CLI = [sys.executable, "-m", "cp_observe.cli"]


@pytest.fixture(scope="module")
def demo_full(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo run live at rate 1, its traces exported by the SDK's OTLP exporter and written as files."""
    return export_demo(tmp_path_factory.mktemp("demo-1"), 1.0)


@pytest.fixture(scope="module")
def demo_quarter(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo run live at rate 0.25 (every span exported, a quarter of the traces scored)."""
    return export_demo(tmp_path_factory.mktemp("demo-025"), 0.25, turns=40)


def _quiet() -> Progress:
    return Progress(enabled=False)


def _replay(paths: list[Path], **options: Any) -> Any:
    judge = options.pop("judge_object", None)
    return replay([TraceFile(p) for p in paths], ReplayOptions(**options), judge=judge, progress=_quiet())


def test_replay_at_rate_one_gives_the_live_scores(demo_full: Exported, tmp_path: Path) -> None:
    """Replaying the demo's exported OTLP/JSON lines at rate 1 scores every retrieval exactly as the live run did."""
    out = tmp_path / "evaluations.jsonl"
    result = _replay([demo_full.jsonl], judge="lexical", sample_rate=1.0, output=out)
    assert result.error is None and result.stopped == ""
    replayed = evaluations(out)
    assert len(demo_full.live) >= 20
    assert replayed == demo_full.live
    stats = result.stats
    assert stats["sampled"] == stats["scored"] == len(demo_full.live)
    assert stats["failed"] == stats["dropped"] == stats["skipped"] == 0


def test_replay_of_the_protobuf_file_gives_the_live_scores(demo_full: Exported, tmp_path: Path) -> None:
    """The same traces as length-prefixed OTLP protobuf records (the file exporter's proto format) score the same."""
    out = tmp_path / "evaluations.jsonl"
    result = _replay([demo_full.proto], judge="lexical", output=out)
    assert result.error is None
    assert evaluations(out) == demo_full.live


def test_replay_at_a_quarter_scores_what_live_sampling_at_a_quarter_scored(demo_quarter: Exported,
                                                                           tmp_path: Path) -> None:
    """Demo live at 0.25, replayed at 0.25: the same traces are scored, with the same scores; no more, no fewer."""
    out = tmp_path / "evaluations.jsonl"
    result = _replay([demo_quarter.jsonl], judge="lexical", sample_rate=0.25, output=out)
    replayed = evaluations(out)
    assert 0 < len(demo_quarter.live) < len(demo_quarter.trace_ids)
    assert replayed == demo_quarter.live
    assert result.stats["sampled"] == len(demo_quarter.live)


def test_replay_at_a_quarter_of_a_full_export_picks_the_ratio_traces(demo_full: Exported, tmp_path: Path) -> None:
    """A rate-1 export replayed at 0.25 scores exactly the 0.25-ratio traces, with their live scores."""
    out = tmp_path / "evaluations.jsonl"
    _replay([demo_full.jsonl], judge="lexical", sample_rate=0.25, output=out)
    replayed = evaluations(out)
    ratio = TraceIdRatio(0.25)
    expected = {span: live for span, live in demo_full.live.items() if ratio(live[0])}
    assert replayed == expected
    assert len(expected) < len(demo_full.live)


def test_the_output_file_has_the_collector_file_shape(demo_full: Exported, tmp_path: Path) -> None:
    """Every line the replay writes, and every line of the Collector-format input, has the documented shape."""
    out = tmp_path / "evaluations.jsonl"
    _replay([demo_full.jsonl], judge="lexical", output=out)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines
    for line in lines + demo_full.jsonl.read_text(encoding="utf-8").splitlines():
        check_collector_shape(line)


def test_a_hand_written_collector_file_is_replayed(tmp_path: Path, cp_observe_judge: FakeJudge) -> None:
    """A hand-written Collector file: the agent's retrieval judged on its answer, the lone one on its query."""
    for line in COLLECTOR_FILE.read_text(encoding="utf-8").splitlines():
        check_collector_shape(line)
    out = tmp_path / "evaluations.jsonl"
    result = _replay([COLLECTOR_FILE], output=out, judge_object=cp_observe_judge)
    assert result.stats["scored"] == 2
    calls = {call.query: (call.reference, list(call.contexts)) for call in cp_observe_judge.calls}
    assert calls["What is the capital of France?"][0] == "Paris is the capital of France."
    assert calls["When does the office open?"][0] == "When does the office open?"
    verdicts = sorted(v[2] for v in evaluations(out).values())
    assert verdicts == [(False, True, True), (True, False)]


def test_data_source_filter_scores_only_that_source(tmp_path: Path, cp_observe_judge: FakeJudge) -> None:
    """--data-source faq: the kb retrieval is not fed (counted), the faq one is scored."""
    result = _replay([COLLECTOR_FILE], output=tmp_path / "o.jsonl", judge_object=cp_observe_judge,
                     data_sources=frozenset({"faq"}))
    assert result.stats["scored"] == 1
    assert result.other_data_source == 1
    assert [c.query for c in cp_observe_judge.calls] == ["When does the office open?"]


def test_since_and_until_select_by_end_time(tmp_path: Path, cp_observe_judge: FakeJudge) -> None:
    """--since 11:00 keeps the noon trace only; --until 11:00 keeps the morning one only."""
    eleven = datetime(2026, 1, 10, 11, 0, tzinfo=timezone.utc)
    late = _replay([COLLECTOR_FILE], output=tmp_path / "a.jsonl", judge_object=FakeJudge(), since=eleven)
    early = _replay([COLLECTOR_FILE], output=tmp_path / "b.jsonl", judge_object=cp_observe_judge, until=eleven)
    assert (late.stats["scored"], late.outside_time) == (1, 2)
    assert (early.stats["scored"], early.outside_time) == (1, 1)
    assert [c.query for c in cp_observe_judge.calls] == ["What is the capital of France?"]


def test_max_evaluations_stops_reading(demo_full: Exported, tmp_path: Path) -> None:
    """--max-evaluations 5: five targets fed and scored, the rest counted as over the cap, reading stopped."""
    result = _replay([demo_full.jsonl], judge="lexical", output=tmp_path / "o.jsonl", max_evaluations=5)
    assert result.stats["sampled"] == result.stats["scored"] == 5
    assert result.over_max_evaluations >= 1
    assert result.stopped == "max evaluations reached"


def test_budget_stops_judging_and_counts_the_rest(demo_full: Exported, tmp_path: Path) -> None:
    """--budget-usd: once spent, targets are skipped (budget_exhausted), reading stops, every outcome counted."""
    judge = FakeJudge(cost_usd=0.001)
    copies = 20  # reading outruns judging: give the budget time to run out before the input does
    result = _replay([demo_full.jsonl] * copies, output=tmp_path / "o.jsonl", judge_object=judge,
                     budget_usd=0.0035, concurrency=1)
    stats = result.stats
    assert 4 <= stats["scored"] < copies * len(demo_full.live)
    assert stats["reasons"].get("skipped:budget_exhausted", 0) >= 1
    assert stats["sampled"] == stats["scored"] + stats["failed"] + stats["dropped"] + stats["skipped"]
    assert result.stopped == "budget spent"
    assert result.targets_fed < copies * len(demo_full.live)


def test_dry_run_counts_and_prices_without_a_judge_call(demo_full: Exported) -> None:
    """--dry-run with an LLM judge on loopback: every target counted, tokens and cost estimated, no request made."""
    with JudgeServer() as server:
        result = _replay([demo_full.jsonl], judge="openai/gpt-4o-mini", judge_api_base=server.url, dry_run=True)
        assert server.calls == 0
    assert result.stats["scored"] == len(demo_full.live)
    assert result.estimated_calls == len(demo_full.live)
    assert result.estimated_prompt_tokens > 100 * len(demo_full.live)
    assert result.estimated_completion_tokens > 0
    assert result.estimated_cost_usd is not None and 0 < result.estimated_cost_usd < 1
    assert result.output_lines == 0


def test_dry_run_of_an_unpriced_model_says_unknown(demo_full: Exported) -> None:
    """A model litellm has no price for: tokens are estimated, the cost is unknown (None), not zero."""
    result = _replay([demo_full.jsonl], judge="openai/no-such-model-xyz", dry_run=True)
    assert result.estimated_prompt_tokens > 0
    assert result.estimated_cost_usd is None


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_otherwise(demo_full: Exported, tmp_path: Path) -> None:
    """On a terminal the bar is redrawn in place; elsewhere whole lines, each naming the file and counts."""
    tty, log = _Tty(), io.StringIO()
    for stream, name in ((tty, "a"), (log, "b")):
        replay([TraceFile(demo_full.jsonl)], ReplayOptions(judge="lexical", output=tmp_path / f"{name}.jsonl"),
               progress=Progress(stream, interval_s=0.0))
    assert "\r" in tty.getvalue() and "[" in tty.getvalue() and "#" in tty.getvalue()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) >= 2
    assert all(str(demo_full.jsonl) in line and "spans" in line for line in lines)
    assert "100.0%" in lines[-1]


def test_cli_replay_writes_evaluations_and_a_summary(demo_full: Exported, tmp_path: Path) -> None:
    """``cp-observe replay FILE -o OUT``: exit 0, a summary with the counts, the evaluations in OUT."""
    out = tmp_path / "o.jsonl"
    done = subprocess.run([*CLI, "replay", str(demo_full.jsonl), "-o", str(out), "--judge", "lexical"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"scored {len(demo_full.live)}" in done.stdout
    assert "replay " in done.stderr  # progress lines (stderr is not a terminal here)
    assert evaluations(out) == demo_full.live


def test_cli_replay_needs_somewhere_to_send_evaluations(demo_full: Exported) -> None:
    """No --output, no OTLP endpoint, no --dry-run: exit 2 with a message, nothing judged."""
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([*CLI, "replay", str(demo_full.jsonl)], capture_output=True, text=True, timeout=60,
                          check=False, env=env)
    assert done.returncode == 2
    assert "--output" in done.stderr


def test_replay_sends_evaluations_over_otlp(demo_full: Exported) -> None:
    """--otlp-endpoint: evaluation spans and events go to an OTLP/HTTP receiver, as live ones do."""
    from tests.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        result = _replay([demo_full.jsonl], judge="lexical", otlp_endpoint=receiver.endpoint, max_evaluations=3)
        names = receiver.span_names()
        records = receiver.log_records()
    assert result.stats["scored"] == 3
    assert names.count(n.EVALUATION_SPAN_NAME) == 3
    assert len(records) == 3


def test_capture_off_writes_evaluations_without_content(demo_full: Exported, tmp_path: Path) -> None:
    """--no-capture-content: the file holds evaluation spans only, no reasons, no query and no document text."""
    out = tmp_path / "o.jsonl"
    result = _replay([demo_full.jsonl], judge="lexical", output=out, capture_content=False)
    assert result.stats["scored"] == len(demo_full.live)
    text = out.read_text(encoding="utf-8")
    assert n.CP_VERDICTS in text
    assert n.CP_REASONS not in text and "retrieval.documents" not in text and n.GEN_AI_RETRIEVAL_QUERY_TEXT not in text
    assert evaluations(out) == demo_full.live


def test_file_and_otlp_together(demo_full: Exported, tmp_path: Path) -> None:
    """--output and --otlp-endpoint both: every evaluation goes to both."""
    from tests.otlp_receiver import OtlpReceiver

    out = tmp_path / "o.jsonl"
    with OtlpReceiver() as receiver:
        _replay([demo_full.jsonl], judge="lexical", output=out, otlp_endpoint=receiver.endpoint, max_evaluations=4)
        sent = receiver.span_names().count(n.EVALUATION_SPAN_NAME)
    assert sent == len(evaluations(out)) == 4


def test_gzip_compressed_files_are_read(demo_full: Exported, tmp_path: Path) -> None:
    """A gzip-compressed JSON-lines file and a gzip-compressed protobuf file replay to the live scores."""
    import gzip

    for source in (demo_full.jsonl, demo_full.proto):
        packed = tmp_path / (source.name + ".gz")
        packed.write_bytes(gzip.compress(source.read_bytes()))
        out = tmp_path / (source.name + ".out.jsonl")
        result = _replay([packed], judge="lexical", output=out)
        assert result.error is None
        assert evaluations(out) == demo_full.live
