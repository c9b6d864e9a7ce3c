"""``cp-observe report``: the A/B verdict of ``--compare``, the per-segment table, the canary comparison and the
rerank-lift chart, checked by hand and rendered in headless Chromium (Debian's package) without console errors."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist, mean, stdev

import pytest

from cp_observe._stats._moments import Moments
from cp_observe.replay import load_run, summary_text
from cp_observe.report._compare import Paired, compare
from cp_observe.report._report import verdict
from tests.chromium_support import CHROMIUM, render
from tests.dataset_support import Case, canary_cases, write_traces

CLI = [sys.executable, "-m", "cp_observe.cli", "report"]
GOOD = ("Plans: Free, Team at $8.", "Refunds within 30 days.", "Offline notes: 200.")


def _paired(values: dict[str, float]) -> tuple[Moments, Paired]:
    moments, keys = Moments(), Paired()
    for key, value in values.items():
        moments.add(value)
        keys.add(key, value)
    return moments, keys


def test_the_paired_verdict_matches_a_hand_computation() -> None:
    """Shared keys: mean of differences ± z·s/√n; worse when the interval is below 0, better above, else none."""
    first = {f"k{i}": v for i, v in enumerate([1.0, 0.5, 1.0, 0.33, 1.0, 0.5])}
    second = {f"k{i}": v for i, v in enumerate([0.5, 0.5, 0.33, 0.33, 0.5, 0.0])}
    a, b = _paired(first), _paired(second)
    result = compare(a[0], b[0], a[1], b[1], confidence=0.95)
    differences = [second[k] - first[k] for k in first]
    half = NormalDist().inv_cdf(0.975) * stdev(differences) / math.sqrt(len(differences))
    assert result.paired == 6 and result.difference == pytest.approx(mean(differences))
    assert result.interval == pytest.approx((mean(differences) - half, mean(differences) + half))
    assert result.verdict == "worse"
    assert compare(b[0], a[0], b[1], a[1]).verdict == "better"
    assert compare(a[0], a[0], a[1], a[1]).verdict == "no difference"
    strict = compare(a[0], b[0], a[1], b[1], confidence=0.999)
    assert strict.interval[1] > result.interval[1]  # type: ignore[index]


def test_without_shared_keys_the_difference_is_welch_and_tiny_runs_get_no_verdict() -> None:
    """No evaluation in both runs: Welch's unpaired difference of MAPs; n < 2 on a side: no verdict."""
    a = _paired({f"a{i}": v for i, v in enumerate([1.0, 1.0, 0.5, 1.0])})
    b = _paired({f"b{i}": v for i, v in enumerate([0.0, 0.33, 0.0, 0.5])})
    result = compare(a[0], b[0], a[1], b[1])
    half = 1.96 * math.sqrt(stdev([1.0, 1.0, 0.5, 1.0]) ** 2 / 4 + stdev([0.0, 0.33, 0.0, 0.5]) ** 2 / 4)
    assert result.paired == 0 and result.interval[1] == pytest.approx(result.difference + half, rel=1e-3)  # type: ignore[index]
    assert result.verdict == "worse"
    one = _paired({"x": 1.0})
    assert compare(one[0], b[0], one[1], b[1]).verdict == "too few evaluations"
    with pytest.raises(ValueError, match="confidence"):
        compare(a[0], b[0], a[1], b[1], confidence=1.0)


def test_segments_and_canary_by_hand(tmp_path: Path) -> None:
    """MAP per segment value, and each value against the rest of its data source with the 99 % one-sided bound."""
    path = tmp_path / "canary.jsonl"
    cases = canary_cases()
    write_traces(path, cases)
    run = load_run([path])
    values = run.segments.by_value[("docs", "retriever_version")]
    # A data source's rerank-stage evaluations are a line of their own ("docs (rerank)"), so the retrieval stage
    # holds the cases without a reranker: v1 all relevant first (AP 1), v2 the relevant context first or last.
    v1 = [1.0 for c in cases if c.version == "v1" and c.rerank is None]
    v2 = [1.0 if c.verdicts[0] else 1 / 3 for c in cases if c.version == "v2" and c.rerank is None]
    assert values["v1"].count == len(v1) == 8 and values["v1"].mean == pytest.approx(1.0)
    assert values["v2"].count == len(v2) == 8 and values["v2"].mean == pytest.approx(mean(v2))
    reranked_values = run.segments.by_value[("docs (rerank)", "retriever_version")]
    assert reranked_values["v1"].count == reranked_values["v2"].count == 4
    diff, bound = run.segments.canary("docs", "retriever_version", "v2")
    z = NormalDist().inv_cdf(0.99)
    assert diff == pytest.approx(mean(v2) - 1.0)
    assert bound == pytest.approx(diff + z * math.sqrt(stdev(v2) ** 2 / len(v2) + stdev(v1) ** 2 / len(v1)))
    assert bound < 0  # v2 is worse than the rest of docs
    up, up_bound = run.segments.canary("docs", "retriever_version", "v1")
    assert up > 0 and up_bound is not None and up_bound > 0
    assert ("faq", "retriever_version") not in run.segments.by_value  # no segment on that evaluation
    reranked = [c for c in cases if c.rerank is not None]
    assert run.rerank.count == len(reranked) == 8 and run.rerank.dropped_total == 4
    assert run.rerank.improved == 4 and run.rerank.worsened == 3  # v1: 0.5 -> 1.0; v2: 1.0 -> 1/3 but one 1.0
    # The same evaluations as a dataset file: the same numbers, and every one pairs with its trace.
    from cp_observe.cli import main

    assert main(["dataset", str(path), "-o", str(tmp_path / "all.jsonl")]) == 0
    again = load_run([tmp_path / "all.jsonl"])
    assert again.segments.canary("docs", "retriever_version", "v2") == pytest.approx((diff, bound))
    assert (again.rerank.count, again.rerank.dropped_total, again.rerank.points) == (
        run.rerank.count, run.rerank.dropped_total, run.rerank.points)
    assert set(again.keys.keys) == set(run.keys.keys) and len(run.keys.keys) == 25
    # Compared line by line: rerank with rerank, retrieval with retrieval, each evaluation with itself.
    text = summary_text(run, again)
    assert re.search(r"docs \(rerank\)\s+0\.750 -> 0\.750  diff \+0\.000", text), text
    assert verdict(run, again).paired == 25
    # Without trace and span ids a line pairs by report line and query, so a stage never pairs with the other.
    lines = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()]
    (tmp_path / "no-ids.jsonl").write_text("".join(json.dumps({**d, "trace_id": "", "span_id": ""}) + "\n"
                                                   for d in lines), encoding="utf-8")
    expected = {f"{c.data_source}{' (rerank)' if c.rerank else ''}\x00{c.query}" for c in cases}
    assert set(load_run([tmp_path / "no-ids.jsonl"]).keys.keys) == expected


def test_compare_forms_exit_codes_and_bad_options(tmp_path: Path) -> None:
    """report A --compare B and report --compare A B agree; exit 3 when B is worse, 0 otherwise, 2 for bad options."""
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    write_traces(before, [Case(f"q{i}", GOOD, (True, False, False), "Team at $8") for i in range(8)])
    write_traces(after, [Case(f"q{i}", GOOD, (False, True, False) if i % 2 else (True, False, False), "Team at $8")
                         for i in range(8)])

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args, "-o", str(tmp_path / "r.html")], capture_output=True, text=True,
                              timeout=60, check=False)

    worse = report("--compare", str(before), str(after))
    assert worse.returncode == 3 and "WORSE" in worse.stdout, worse.stdout + worse.stderr
    assert "unpaired (Welch)" in worse.stdout  # other traces: no evaluation in both
    assert report(str(before), "--compare", str(after)).stdout.count("WORSE") == 1
    better = report("--compare", str(after), str(before))
    assert better.returncode == 0 and "BETTER" in better.stdout
    assert report("--compare", str(before)).returncode == 2
    bad = report(str(before), "--compare", str(after), "--confidence", "1.5")
    assert bad.returncode == 2 and "--confidence" in bad.stderr
    missing = report("--compare", str(before), str(tmp_path / "none.jsonl"))
    assert missing.returncode == 1 and "none.jsonl" in missing.stderr


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_segment_canary_and_rerank_sections_render_in_chromium(tmp_path: Path) -> None:
    """The new sections are in the one self-contained file, and Chromium renders them with no console error."""
    path, other = tmp_path / "canary.jsonl", tmp_path / "other.jsonl"
    write_traces(path, canary_cases())
    write_traces(other, [Case(f"q{i}", GOOD, (True, False, False), "Team at $8") for i in range(6)])
    html_path = tmp_path / "report.html"
    done = subprocess.run([*CLI, str(other), "--compare", str(path), "-o", str(html_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "canary:" not in done.stdout  # the first run has no segments; the table is the first run's
    done = subprocess.run([*CLI, str(path), "--compare", str(other), "-o", str(html_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "canary: docs retriever_version=v2 is below the rest of docs" in done.stdout
    # Each stage is its own line with its own canary: v2's reranked retrievals are worse than v1's too.
    assert "canary: docs (rerank) retriever_version=v2 is below the rest of docs (rerank)" in done.stdout
    assert "25 evaluations (17 retrieval stage, 8 rerank stage; 0 failed)" in done.stdout
    assert "rerank: 8 reranked" in done.stdout
    page = html_path.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=", page) and "http://" not in page and "https://" not in page
    assert "<h2>Segments</h2>" in page and "<h2>Rerank lift</h2>" in page and "class='verdict'" in page
    assert page.count("<span class='down'>worse</span>") == 2  # v2 flagged in each stage of docs, v1 not
    charts = page.count("class='chart-svg")
    # The forest plot, 3 per report line (docs, docs (rerank), faq), the rerank scatter and lift bars.
    assert charts == 1 + 3 * 3 + 2
    rendered = render(html_path, tmp_path, height=2400)
    rendered.assert_clean(f"cp-observe report: {charts} charts")
    scatter = rendered.dom.split('class="chart-svg rerank"', 1)[1].split("</svg>", 1)[0]
    assert scatter.count("<circle") == 8  # one point per reranked evaluation
    bars = rendered.dom.split('class="chart-svg lift"', 1)[1].split("</svg>", 1)[0]
    assert bars.count("<rect") == 8
    table = rendered.dom.split('class="segments"', 1)[1].split("</table>", 1)[0]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in table.split("<tr>")[2:]]  # past the header
    assert [(c[0], c[2], re.sub(r"<[^>]+>", "", c[-1])) for c in cells] == [
        ("docs", "v1", "ok"), ("docs", "v2", "worse"), ("docs (rerank)", "v1", "ok"), ("docs (rerank)", "v2", "worse")]
