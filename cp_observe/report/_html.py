"""The HTML report: one file, inline CSS and hand-written inline SVG, no network, no external asset.

Every text that came from traces (queries, contexts, reasons, names) is escaped. The only script logs the
number of charts to the console, so a headless browser test can tell the page ran without errors.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from cp_observe.report._html_segments import interval_text, rerank_section, segment_section, verdict_block

__all__ = ["CSS", "head", "render"]

_W, _H = 440, 200
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 40, 12, 14, 30
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1440px;color:#1d2433;
background:#fafbfc;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dee8;padding-bottom:4px}
h3{font-size:14px;margin:12px 0 4px;color:#4a5568}.meta{color:#5a6577;font-size:12px}
table{border-collapse:collapse;margin:6px 0 12px;background:#fff}th,td{border:1px solid #d8dee8;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#eef2f7;font-weight:600}td.num{text-align:right;
font-variant-numeric:tabular-nums}.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fff;
border:1px solid #d8dee8;border-radius:4px;padding:6px}svg text{font:11px system-ui,sans-serif;fill:#4a5568}
.rel{color:#137333;font-weight:600}.irr{color:#b3261e;font-weight:600}.q{max-width:420px}.small{font-size:12px;color:#5a6577}
details{font-size:12px}ol{margin:2px 0 2px 18px;padding:0}.up{color:#137333}.down{color:#b3261e}
"""


def render(run: Any, other: Any | None, *, title: str, pairs: Sequence[tuple[str, Any, Any]],
           difference: Callable[[Any, Any], tuple[float, tuple[float, float] | None]],
           comparison: Any | None = None, corrected: str = "") -> str:
    """The whole report as one HTML string (``corrected``: the section of the MAP corrected by people's labels)."""
    e = html.escape
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        head(title),
        f"<h1>{e(title)}</h1><div class='meta'>{e(run.label)}: {run.evaluations} evaluations, "
        f"{run.overall.failed} failed, from {e(', '.join(run.files))}; generated {generated}. "
        "MAP = mean average precision; intervals are 95 % normal approximations.</div>",
        "<h2>Summary</h2>", _summary_table(run), corrected,
    ]
    if other is not None:
        parts += [f"<h2>Comparison: {e(other.label)} vs {e(run.label)}</h2>",
                  f"<div class='meta'>{e(other.label)}: {other.evaluations} evaluations from "
                  f"{e(', '.join(other.files))}."
                  " Difference = MAP of the second minus MAP of the first, with its 95 % interval (Welch).</div>",
                  verdict_block(comparison, run.label, other.label) if comparison is not None else "",
                  _comparison(pairs, difference, run.label, other.label)]
    parts += [segment_section(run), rerank_section(run)]
    for stats in sorted(run.sources.values(), key=lambda s: s.name):
        parts.append(_source_section(stats, other.sources.get(stats.name) if other is not None else None))
    parts.append("<script>console.log('cp-observe report: ' + document.querySelectorAll('svg.chart-svg').length"
                 " + ' charts');</script></body></html>")
    return "".join(parts)


def head(title: str) -> str:
    """A page's start up to ``<body>``: the report's CSS, and a policy that lets the page load nothing."""
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src 'unsafe-inline'; img-src data:\"><title>{html.escape(title)}</title><style>{CSS}</style>"
            "</head><body>")


def _summary_table(run: Any) -> str:
    rows = ["<table><tr><th>data source</th><th>MAP</th><th>95 % CI</th><th>evaluations</th><th>failed</th>"
            "<th>judge</th><th>P@1</th></tr>"]
    for stats in [*sorted(run.sources.values(), key=lambda s: s.name), run.overall]:
        p1 = f"{stats.relevant_at[0] / stats.seen_at[0]:.2f}" if stats.seen_at[0] else "&ndash;"
        rows.append(f"<tr><td>{html.escape(stats.name)}</td><td class='num'>{stats.mean:.3f}</td>"
                    f"<td class='num'>{interval_text(stats.interval())}</td><td class='num'>{stats.count}</td>"
                    f"<td class='num'>{stats.failed}</td><td>{html.escape(', '.join(sorted(stats.judges)))}</td>"
                    f"<td class='num'>{p1}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _comparison(pairs: Sequence[tuple[str, Any, Any]], difference: Any, first: str, second: str) -> str:
    rows = [f"<table><tr><th>data source</th><th>MAP {html.escape(first)}</th><th>MAP {html.escape(second)}</th>"
            "<th>difference</th><th>95 % CI</th><th>n</th></tr>"]
    marks: list[tuple[str, float, tuple[float, float] | None]] = []
    for name, a, b in pairs:
        diff, interval = difference(a, b)
        marks.append((name, diff, interval))
        cls = "" if interval is None else "up" if interval[0] > 0 else "down" if interval[1] < 0 else ""
        rows.append(f"<tr><td>{html.escape(name)}</td><td class='num'>{a.mean:.3f}</td>"
                    f"<td class='num'>{b.mean:.3f}</td>"
                    f"<td class='num {cls}'>{diff:+.3f}</td><td class='num'>{interval_text(interval)}</td>"
                    f"<td class='num'>{a.count} / {b.count}</td></tr>")
    rows.append("</table>")
    return "".join(rows) + _forest(marks)


def _forest(marks: list[tuple[str, float, tuple[float, float] | None]]) -> str:
    """Differences with their intervals on a shared -1 … +1 axis."""
    height = 24 * len(marks) + 34
    left, right = 170, _W + 140
    def x(v: float) -> float:
        return left + (max(-1.0, min(1.0, v)) + 1) / 2 * (right - left)
    out = [f"<div class='chart'><svg class='chart-svg' width='{right + 20}' height='{height}' role='img' "
           "aria-label='difference in MAP with 95 % intervals'>"]
    out.append(f"<line x1='{x(0):.1f}' y1='6' x2='{x(0):.1f}' y2='{height - 22}' stroke='#9aa5b5' "
               "stroke-dasharray='3,3'/>")
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        out.append(f"<text x='{x(tick):.1f}' y='{height - 6}' text-anchor='middle'>{tick:+.1f}</text>")
    for i, (name, diff, interval) in enumerate(marks):
        y = 18 + 24 * i
        out.append(f"<text x='{left - 8}' y='{y + 4}' text-anchor='end'>{html.escape(name[:28])}</text>")
        if interval is not None:
            out.append(f"<line x1='{x(interval[0]):.1f}' y1='{y}' x2='{x(interval[1]):.1f}' y2='{y}' stroke='#3b6fd8' "
                       "stroke-width='2'/>")
        out.append(f"<circle cx='{x(diff):.1f}' cy='{y}' r='4' fill='#1f4fb3'><title>{diff:+.3f}</title></circle>")
    out.append("</svg></div>")
    return "".join(out)


def _frame(label: str, y_label: str) -> list[str]:
    out = [f"<div class='chart'><h3>{html.escape(label)}</h3><svg class='chart-svg' width='{_W}' height='{_H}' "
           f"role='img' aria-label='{html.escape(label)}'>"]
    for i in range(6):
        value = i / 5
        y = _y(value)
        out.append(f"<line x1='{_PAD_L}' y1='{y:.1f}' x2='{_W - _PAD_R}' y2='{y:.1f}' stroke='#e6eaf0'/>")
        out.append(f"<text x='{_PAD_L - 4}' y='{y + 4:.1f}' text-anchor='end'>{value:.1f}</text>")
    out.append(f"<text x='10' y='{_PAD_T + 4}' transform='rotate(-90 10 {_PAD_T + 4})' text-anchor='end'>"
               f"{html.escape(y_label)}</text>")
    return out


def _y(value: float, top: float = 1.0) -> float:
    return _PAD_T + (1 - value / top) * (_H - _PAD_T - _PAD_B)


def _over_time(stats: Any, other: Any | None) -> str:
    out = _frame("MAP over time", "MAP")
    series = [(stats.over_time(), "#1f4fb3")]
    if other is not None:
        series.append((other.over_time(), "#d9822b"))
    seconds = [m for points, _ in series for m, _, _ in points]
    if not seconds:
        out.append("</svg></div>")
        return "".join(out)
    first, last = min(seconds), max(seconds)
    span = max(1, last - first)
    inner = _W - _PAD_L - _PAD_R
    def x(second: int) -> float:
        return _PAD_L + (second - first) / span * inner if last > first else _PAD_L + inner / 2
    for points, colour in series:
        coords = " ".join(f"{x(m):.1f},{_y(v):.1f}" for m, _, v in points)
        out.append(f"<polyline points='{coords}' fill='none' stroke='{colour}' stroke-width='1.5'/>")
        for m, count, value in points:
            out.append(f"<circle cx='{x(m):.1f}' cy='{_y(value):.1f}' r='2.5' fill='{colour}'>"
                       f"<title>{_when(m)}: MAP {value:.3f} over {count}</title></circle>")
    out.append(f"<text x='{_PAD_L}' y='{_H - 8}'>{_when(first)}</text>")
    if last > first:
        out.append(f"<text x='{_W - _PAD_R}' y='{_H - 8}' text-anchor='end'>{_when(last)}</text>")
    out.append("</svg></div>")
    return "".join(out)


def _when(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _by_rank(stats: Any) -> str:
    out = _frame("Relevance by rank (bars) and precision@k (line)", "share")
    ranks = stats.ranks()
    if not ranks:
        out.append("</svg></div>")
        return "".join(out)
    inner = _W - _PAD_L - _PAD_R
    step = inner / ranks
    points = []
    for k in range(ranks):
        seen = stats.seen_at[k]
        if not seen:
            continue
        rate = stats.relevant_at[k] / seen
        precision = stats.precision_sum[k] / seen
        x0 = _PAD_L + k * step
        out.append(f"<rect x='{x0 + step * 0.15:.1f}' y='{_y(rate):.1f}' width='{step * 0.7:.1f}' "
                   f"height='{_y(0) - _y(rate):.1f}' fill='#7aa2e3'><title>rank {k + 1}: {rate:.2f} relevant "
                   f"({stats.relevant_at[k]}/{seen})</title></rect>")
        points.append(f"{x0 + step / 2:.1f},{_y(precision):.1f}")
        if ranks <= 20 or k % max(1, ranks // 10) == 0:
            out.append(f"<text x='{x0 + step / 2:.1f}' y='{_H - 14}' text-anchor='middle'>{k + 1}</text>")
    out.append(f"<polyline points='{' '.join(points)}' fill='none' stroke='#d9822b' stroke-width='2'/>")
    out.append(f"<text x='{_W - _PAD_R}' y='{_H - 2}' text-anchor='end'>rank k</text></svg></div>")
    return "".join(out)


def _distribution(stats: Any) -> str:
    top = max(stats.histogram) or 1
    out = _frame("Score distribution (average precision)", "share of max")
    inner = _W - _PAD_L - _PAD_R
    step = inner / 10
    for i, count in enumerate(stats.histogram):
        x0 = _PAD_L + i * step
        out.append(f"<rect x='{x0 + 2:.1f}' y='{_y(count / top):.1f}' width='{step - 4:.1f}' "
                   f"height='{_y(0) - _y(count / top):.1f}' fill='#5fb38a'>"
                   f"<title>{i / 10:.1f}&ndash;{(i + 1) / 10:.1f}: "
                   f"{count}</title></rect>")
        out.append(f"<text x='{x0 + step / 2:.1f}' y='{_H - 14}' text-anchor='middle'>{i / 10:.1f}</text>")
    out.append(f"<text x='{_W - _PAD_R}' y='{_H - 2}' text-anchor='end'>AP (bin start); tallest = {top}</text>"
               "</svg></div>")
    return "".join(out)


def _worst(stats: Any) -> str:
    worst = stats.worst()
    if not worst:
        return ""
    e = html.escape
    rows = ["<h3>Worst retrievals</h3><table><tr><th>AP</th><th>query</th><th>verdicts by rank</th>"
            "<th>reasons and contexts</th></tr>"]
    for ev in worst:
        marks = " ".join(f"<span class='{'rel' if v else 'irr'}'>{k + 1}{'✓' if v else '✗'}</span>"
                         for k, v in enumerate(ev.verdicts))
        query = e(ev.query) if ev.query else "<span class='small'>not captured</span>"
        details = ""
        if ev.reasons or ev.contexts:
            items = []
            for k in range(max(len(ev.reasons), len(ev.contexts))):
                reason = e(ev.reasons[k]) if k < len(ev.reasons) else ""
                context = e(ev.contexts[k]) if k < len(ev.contexts) else ""
                items.append(f"<li>{reason}{'<br>' if reason and context else ''}"
                             f"{'<span class=small>' + context + '</span>' if context else ''}</li>")
            details = f"<details><summary>{len(items)} contexts</summary><ol>{''.join(items)}</ol></details>"
        else:
            details = "<span class='small'>content not captured</span>"
        rows.append(f"<tr><td class='num'>{ev.average_precision:.2f}</td><td class='q'>{query}</td><td>{marks}</td>"
                    f"<td>{details}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _source_section(stats: Any, other: Any | None) -> str:
    legend = "" if other is None else " <span class='small'>(blue: first run, orange: second run)</span>"
    return "".join([
        f"<h2>{html.escape(stats.name)}</h2><div class='meta'>MAP {stats.mean:.3f} "
        f"(95 % CI {interval_text(stats.interval())}), {stats.count} evaluations, {stats.failed} failed{legend}</div>",
        "<div class='charts'>", _over_time(stats, other), _by_rank(stats), _distribution(stats), "</div>",
        _worst(stats),
    ])
