"""The report's sections on where a drop comes from: MAP per segment value, the canary comparison, rerank lift.

Same style as ``_html.py``: inline SVG drawn by hand, every text from traces escaped, nothing fetched.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["interval_text", "rerank_section", "segment_section", "verdict_block"]

_SIZE = 320
_PAD = 40


def interval_text(interval: tuple[float, float] | None) -> str:
    """A 95 % (or other) interval as the page prints it; ``n < 2`` when there is none."""
    return f"{interval[0]:.3f} &ndash; {interval[1]:.3f}" if interval is not None else "n &lt; 2"


def verdict_block(comparison: Any, first: str, second: str) -> str:
    """The A/B verdict, in words and numbers."""
    e = html.escape
    cls = {"better": "up", "worse": "down"}.get(comparison.verdict, "")
    how = (f"paired over {comparison.paired} evaluations present in both runs" if comparison.paired
           else "unpaired (Welch): fewer than two evaluations appear in both runs")
    return (f"<p class='verdict'>Verdict, {e(second)} vs {e(first)} at {comparison.confidence:.0%} confidence: "
            f"<strong class='{cls}'>{e(comparison.verdict)}</strong>. MAP {comparison.first_map:.3f} &rarr; "
            f"{comparison.second_map:.3f}, difference {comparison.difference:+.3f} "
            f"({comparison.confidence:.0%} CI {interval_text(comparison.interval)}), {how}.</p>")


def segment_section(run: Any) -> str:
    """MAP, n and interval per segment value, and each value against the rest of its data source."""
    segments = run.segments
    if not segments.by_value:
        return ""
    e = html.escape
    rows = ["<h2>Segments</h2><div class='meta'>MAP per segment value with its 95 % interval; the canary column "
            "is the value's MAP minus the rest of its data source, with the 99 % one-sided upper bound of that "
            "difference over the whole run. A bound below 0 means the value is worse than the rest."
            + (f" {segments.overflow} evaluations had a value past the bound of distinct values and count as "
               "<em>other</em>." if segments.overflow else "") + "</div>",
            "<table class='segments'><tr><th>data source</th><th>segment</th><th>value</th><th>MAP</th>"
            "<th>95 % CI</th><th>n</th><th>vs rest</th><th>99 % bound</th><th>canary</th></tr>"]
    for (source, label), values in sorted(segments.by_value.items()):
        for value, moments in sorted(values.items()):
            diff, bound = segments.canary(source, label, value)
            rest = segments.sources[source].count - moments.count
            flag = ("<span class='down'>worse</span>" if bound is not None and bound < 0
                    else "&ndash;" if bound is None else "ok")
            rows.append(f"<tr><td>{e(source)}</td><td>{e(label)}</td><td>{e(value)}</td>"
                        f"<td class='num'>{moments.mean:.3f}</td>"
                        f"<td class='num'>{interval_text(moments.interval())}</td><td class='num'>{moments.count}</td>"
                        f"<td class='num'>{diff:+.3f}"
                        + (f" <span class='small'>(rest n {rest})</span>" if rest else "") + "</td>"
                        + f"<td class='num'>{'' if bound is None else f'{bound:+.3f}'}</td><td>{flag}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def rerank_section(run: Any) -> str:
    """Before/after AP of each reranked evaluation (a point above the diagonal: the reranker helped)."""
    rerank = run.rerank
    if not rerank.count:
        return ""
    inner = _SIZE - 2 * _PAD

    def at(value: float) -> float:
        return _PAD + max(0.0, min(1.0, value)) * inner

    def up(value: float) -> float:
        return _SIZE - _PAD - max(0.0, min(1.0, value)) * inner

    out = [f"<h2>Rerank lift</h2><div class='meta'>{rerank.count} reranked evaluations, judged once over the union "
           f"of documents: mean lift {rerank.lift_total / rerank.count + 0.0:+.3f} (AP after &minus; AP before), "
           f"{rerank.improved} improved, {rerank.worsened} worsened, {rerank.dropped_total} relevant documents "
           "dropped by the reranker."
           + (f" The chart shows the first {len(rerank.points)}." if len(rerank.points) < rerank.count else "")
           + "</div>"
           + "".join(f"<div class='meta warn'>{html.escape(name)}: {count} rerank evaluations judged by the "
                     "reranker's own model family (judge_is_reranker): the lift may be inflated; use a judge from "
                     "another family.</div>" for name, count in sorted(run.self_judged.items())),
           f"<div class='charts'><div class='chart'><h3>AP before vs after reranking</h3>"
           f"<svg class='chart-svg rerank' width='{_SIZE}' height='{_SIZE}' role='img' "
           "aria-label='average precision before and after reranking'>",
           f"<line x1='{at(0):.1f}' y1='{up(0):.1f}' x2='{at(1):.1f}' y2='{up(1):.1f}' stroke='#9aa5b5' "
           "stroke-dasharray='3,3'/>"]
    for tick in (0.0, 0.5, 1.0):
        out.append(f"<text x='{at(tick):.1f}' y='{_SIZE - _PAD + 16}' text-anchor='middle'>{tick:.1f}</text>")
        out.append(f"<text x='{_PAD - 6}' y='{up(tick) + 4:.1f}' text-anchor='end'>{tick:.1f}</text>")
    out.append(f"<text x='{_SIZE / 2:.0f}' y='{_SIZE - 6}' text-anchor='middle'>AP before (retrieved order)</text>")
    out.append(f"<text x='12' y='{_SIZE / 2:.0f}' transform='rotate(-90 12 {_SIZE / 2:.0f})' text-anchor='middle'>"
               "AP after (reranked)</text>")
    for before, after, lift, dropped in rerank.points:
        colour = "#137333" if lift > 0 else "#b3261e" if lift < 0 else "#5a6577"
        out.append(f"<circle cx='{at(before):.1f}' cy='{up(after):.1f}' r='3.5' fill='{colour}' fill-opacity='0.75'>"
                   f"<title>before {before:.3f}, after {after:.3f}, lift {lift:+.3f}, dropped relevant {dropped}"
                   "</title></circle>")
    out.append("</svg></div>")
    out.append(_lift_bars(rerank))
    out.append("</div>")
    return "".join(out)


def _lift_bars(rerank: Any) -> str:
    """Lift per reranked evaluation, one bar each, in input order (up: helped, down: hurt)."""
    points = rerank.points
    width, height = 440, _SIZE
    mid = height / 2
    step = (width - 2 * _PAD) / max(1, len(points))
    out = [f"<div class='chart'><h3>Lift per reranked evaluation</h3><svg class='chart-svg lift' width='{width}' "
           f"height='{height}' role='img' aria-label='rerank lift per evaluation'>",
           f"<line x1='{_PAD}' y1='{mid}' x2='{width - _PAD}' y2='{mid}' stroke='#9aa5b5'/>"]
    for tick in (-1.0, -0.5, 0.5, 1.0):
        y = mid - tick * (mid - _PAD)
        out.append(f"<text x='{_PAD - 6}' y='{y + 4:.1f}' text-anchor='end'>{tick:+.1f}</text>")
    for i, (before, after, lift, dropped) in enumerate(points):
        y = mid - max(-1.0, min(1.0, lift)) * (mid - _PAD)
        colour = "#137333" if lift > 0 else "#b3261e"
        out.append(f"<rect x='{_PAD + i * step:.1f}' y='{min(y, mid):.1f}' width='{max(1.0, step * 0.8):.1f}' "
                   f"height='{abs(mid - y):.1f}' fill='{colour}'><title>#{i + 1}: {before:.3f} &rarr; {after:.3f} "
                   f"(lift {lift:+.3f}, dropped relevant {dropped})</title></rect>")
    out.append(f"<text x='{width - _PAD}' y='{height - 6}' text-anchor='end'>reranked evaluations</text></svg></div>")
    return "".join(out)
