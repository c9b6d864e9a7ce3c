"""``cp-observe report``: the numbers (MAP, interval, precision at k, difference of two runs) and the HTML, opened in
headless Chromium (Debian's package), screenshotted, with its charts rendered and no console error."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cp_observe
from cp_observe.demo._cli import CANARY_CHUNK
from cp_observe.replay import (
    ReplayOptions,
    TraceFile,
    evaluations_from_run_evals,
    load_run,
    replay,
    summary_text,
    write_report,
)
from cp_observe.replay._progress import Progress
from cp_observe.testing import FakeJudge
from tests.chromium_support import CHROMIUM, render
from tests.replay_support import Exported, export_demo

CLI = [sys.executable, "-m", "cp_observe.cli"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Exported]:
    """Two replays of the demo: its good retriever (first half) and its degraded one (second half)."""
    base = tmp_path_factory.mktemp("report")
    exported = export_demo(base / "demo", 1.0, turns=40, extra=("--degrade-after", "20", "--interval", "0.05"))
    good, bad = base / "good.jsonl", base / "bad.jsonl"
    ends = sorted(_end_times(exported.jsonl))
    middle = (ends[len(ends) // 2 - 1] + ends[len(ends) // 2]) // 2  # between turns 20 and 21 (0.05 s apart)
    from datetime import datetime, timezone

    split = datetime.fromtimestamp(middle / 1e9, timezone.utc)
    for out, window in ((good, {"until": split}), (bad, {"since": split})):
        replay([TraceFile(exported.jsonl)], ReplayOptions(judge="lexical", output=out, **window),  # type: ignore[arg-type]
               progress=Progress(enabled=False))
    return good, bad, exported


def _end_times(path: Path) -> list[int]:
    from cp_observe.serve import spans_from_request

    return [s.end_time or 0 for b in TraceFile(path).batches() for s in spans_from_request(b.request).spans
            if s.name.startswith("invoke_agent")]


def test_map_interval_and_precision_at_k_match_a_hand_computation() -> None:
    """run_evals results with known verdicts: MAP, its 95 % interval, relevance by rank and P@k as computed by hand."""
    contexts = {
        "q1": ["alpha words here", "nothing", "alpha again"],  # yes no yes -> AP (1 + 2/3) / 2
        "q2": ["nothing", "alpha words"],  # no yes -> 0.5
        "q3": ["alpha", "alpha", "nothing"],  # yes yes no -> 1
    }
    scorer = cp_observe.create_context_precision_scorer(
        FakeJudge(), {"context_extractor": lambda query, output: contexts[query]})
    results = cp_observe.run_evals(data=[{"input": q} for q in contexts], scorers=[scorer],
                                   target=lambda item: "alpha")
    run = evaluations_from_run_evals(results, data_source="kb")
    stats = run.sources["kb"]
    aps = [(1 + 2 / 3) / 2, 0.5, 1.0]
    mean = sum(aps) / 3
    sd = math.sqrt(sum((a - mean) ** 2 for a in aps) / 2)
    assert stats.count == 3 and stats.mean == pytest.approx(mean)
    low, high = stats.interval()  # type: ignore[misc]
    assert (low, high) == pytest.approx((mean - 1.96 * sd / math.sqrt(3), min(1.0, mean + 1.96 * sd / math.sqrt(3))))
    assert stats.relevant_at[:3] == [2, 2, 1] and stats.seen_at[:3] == [3, 3, 2]
    assert stats.precision_sum[1] / 3 == pytest.approx((1 / 2 + 1 / 2 + 2 / 2) / 3)  # mean P@2
    assert stats.worst()[0].average_precision == pytest.approx(0.5)
    text = summary_text(run)
    assert "kb" in text and f"MAP {mean:.3f}" in text and "@1 0.67" in text


def test_comparison_shows_the_degradation_with_an_interval_below_zero(runs: tuple[Path, Path, Exported]) -> None:
    """Good period vs degraded period of the demo: the difference in MAP is negative and its interval excludes 0."""
    good, bad, _ = runs
    first, second = load_run([good], label="good"), load_run([bad], label="degraded")
    # The demo's reranker stage is scored too (its own line, "demo-bm25 (rerank)"); the retrieval stage has 20 each.
    assert first.sources["demo-bm25"].count == 20 and second.sources["demo-bm25"].count == 20
    assert "demo-bm25 (rerank)" in second.sources
    text = summary_text(first, second)
    match = re.search(r"demo-bm25\s+([0-9.]+) -> ([0-9.]+)\s+diff ([-+0-9.]+) \[([-0-9.]+), ([-0-9.]+)\]", text)
    assert match is not None, text
    diff, low, high = float(match.group(3)), float(match.group(4)), float(match.group(5))
    assert diff < -0.2 and low < diff < high < 0


def test_report_uses_the_time_and_content_of_the_scored_spans(runs: tuple[Path, Path, Exported]) -> None:
    """Evaluations are placed at their retrieval's time and their worst rows carry the query and contexts."""
    good, _, exported = runs
    run = load_run([good], worst=3)
    assert run.without_target == 0
    stats = run.sources["demo-bm25"]
    ends = sorted(_end_times(exported.jsonl))
    assert min(stats.buckets) >= ends[0] // 10**9 - 1
    worst = stats.worst()
    assert len(worst) == 3 and all(e.query and e.contexts and e.reasons for e in worst)


def test_report_of_a_live_export_without_content_says_not_captured(tmp_path: Path) -> None:
    """The demo with content capture off, its live export read directly: scores are there, content is not."""
    exported = export_demo(tmp_path / "demo", 1.0, turns=6, extra=("--no-capture-content",))
    run = load_run([exported.jsonl])
    assert run.evaluations == 6
    assert all(e.query is None and not e.reasons for e in run.sources["demo-bm25"].worst())
    out = tmp_path / "r.html"
    write_report(out, run)
    assert "not captured" in out.read_text(encoding="utf-8")


def test_report_of_a_file_without_evaluations_is_an_error(tmp_path: Path) -> None:
    """A trace file holding no evaluation span: exit 1, naming the file."""
    from tests.replay_support import DATA

    done = subprocess.run([*CLI, "report", str(DATA / "collector_file.jsonl"), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "collector_file.jsonl: no context precision evaluation spans" in done.stderr


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_html_report_is_self_contained_and_renders_in_chromium(runs: tuple[Path, Path, Exported],
                                                               tmp_path: Path) -> None:
    """One HTML file, no external reference; Chromium renders its charts (DOM, screenshot, console) without error."""
    good, bad, _ = runs
    html_path = tmp_path / "report.html"
    done = subprocess.run([*CLI, "report", str(good), "--compare", str(bad), "--label", "before", "--label", "after",
                           "-o", str(html_path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr  # the degraded half is worse: report --compare fails CI
    # 20 turns before the split, each a retrieval-stage evaluation. The demo's reranker is a target only where it
    # reorders what it was given: over the good retriever's whole documents it keeps BM25's order, and of the canary
    # turns (retriever.version=v2, 30-character chunks) it reorders one, so the good half holds one rerank-stage
    # evaluation as well, on a line of its own.
    first = load_run([good])
    assert first.stages == {"retrieval": 20, "rerank": 1}
    (reranked,) = first.sources["demo-bm25 (rerank)"].worst()
    assert reranked.contexts and all(len(c) <= CANARY_CHUNK for c in reranked.contexts)  # a v2 turn's chunks
    assert "before: 21 evaluations (20 retrieval stage, 1 rerank stage; 0 failed)" in done.stdout
    assert "after vs before" in done.stdout
    assert "verdict: after vs before at 95% confidence: WORSE" in done.stdout
    page = html_path.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=", page), "no external asset"
    assert "http://" not in page and "https://" not in page
    charts = page.count("class='chart-svg")
    # The comparison's forest plot, 3 charts per report line (demo-bm25, demo-bm25 (rerank)), the rerank scatter
    # and lift bars.
    assert charts == 1 + 3 * 2 + 2
    rendered = render(html_path, tmp_path)
    rendered.assert_clean(f"cp-observe report: {charts} charts")
    assert rendered.dom.count("<svg class=\"chart-svg") == charts
    # Per line: histogram bins + ranks (1..5 retrieved, 1..4 kept by the reranker); one lift bar.
    assert rendered.dom.count("<rect") == (10 + 5) + (10 + 4) + 1 and "<polyline" in rendered.dom
