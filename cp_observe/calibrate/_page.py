"""``cp-observe calibrate``'s HTML page: one file in the report's style (its CSS), no network, no external asset.

Every text from traces or labels is escaped. The only script logs the number of groups to the console, so a
headless browser test can tell the page ran without errors.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any

from cp_observe.report._corrected import corrected_table
from cp_observe.report._html import head

__all__ = ["render_calibration"]

_W = 420


def _share(p: dict[str, Any]) -> str:
    if p["value"] is None:
        return "<td class='num'>&ndash;</td><td class='num'>&ndash;</td>"
    return (f"<td class='num'>{p['value']:.3f}</td><td class='num'>{p['low']:.3f} &ndash; {p['high']:.3f} "
            f"<span class='small'>({p['successes']}/{p['total']})</span></td>")


def _kappa(k: dict[str, Any]) -> str:
    if k["value"] is None:
        return "<td class='num'>&ndash;</td><td class='num'>undefined</td>"
    return f"<td class='num'>{k['value']:.3f}</td><td class='num'>{k['low']:.3f} &ndash; {k['high']:.3f}</td>"


def _bars(group: dict[str, Any]) -> str:
    """Agreement, TPR and TNR as bars with their intervals on a 0 … 1 axis."""
    rows = [("agreement", group["agreement"]), ("TPR", group["tpr"]), ("TNR", group["tnr"])]
    height = 26 * len(rows) + 26
    left, right = 90, _W - 16

    def x(v: float) -> float:
        return left + max(0.0, min(1.0, v)) * (right - left)

    out = [f"<div class='chart'><svg class='chart-svg' width='{_W}' height='{height}' role='img' "
           "aria-label='agreement, TPR and TNR with 95 % Wilson intervals'>"]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f"<line x1='{x(tick):.1f}' y1='4' x2='{x(tick):.1f}' y2='{height - 20}' stroke='#e6eaf0'/>"
                   f"<text x='{x(tick):.1f}' y='{height - 6}' text-anchor='middle'>{tick:.2f}</text>")
    for i, (name, p) in enumerate(rows):
        y = 16 + 26 * i
        out.append(f"<text x='{left - 8}' y='{y + 4}' text-anchor='end'>{name}</text>")
        if p["value"] is None:
            continue
        out.append(f"<rect x='{left}' y='{y - 7}' width='{x(p['value']) - left:.1f}' height='14' fill='#7aa2e3'>"
                   f"<title>{name} {p['value']:.3f} ({p['successes']}/{p['total']})</title></rect>")
        out.append(f"<line x1='{x(p['low']):.1f}' y1='{y}' x2='{x(p['high']):.1f}' y2='{y}' stroke='#1f4fb3' "
                   "stroke-width='2'/>")
    out.append("</svg></div>")
    return "".join(out)


def render_calibration(result: dict[str, Any], *, title: str = "Judge calibration") -> str:
    """The page for ``Calibration.as_dict()``."""
    e = html.escape
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    apart = result["counted_apart"]
    parts = [
        head(title),
        f"<h1>{e(title)}</h1><div class='meta'>{result['labels']} labels from people against the judge's verdicts "
        f"in {e(', '.join(result['inputs']))}; generated {generated}. Counted apart: {apart['unmatched']} on spans "
        f"no judgement was read for, {apart['unseen']} on documents the judge never saw, {apart['unreadable']} "
        "unreadable. Proportions: 95 % Wilson intervals; &kappa;: 95 % large-sample interval (Fleiss, Cohen and "
        "Everitt 1969).</div>",
        "<h2>Agreement</h2><table><tr><th>data source</th><th>judge</th><th>labels</th><th>agreement</th>"
        "<th>95 % CI</th><th>TPR</th><th>95 % CI</th><th>TNR</th><th>95 % CI</th><th>&kappa;</th><th>95 % CI</th>"
        "</tr>",
    ]
    for g in result["groups"]:
        judge = g["judge"]
        parts.append(f"<tr><td>{e(g['data_source'])}</td><td>{e(judge['model'])} <span class='small'>"
                     f"{e(judge['kind'])} {e(judge['prompt_version'])}</span></td><td class='num'>{g['labels']}</td>"
                     f"{_share(g['agreement'])}{_share(g['tpr'])}{_share(g['tnr'])}{_kappa(g['kappa'])}</tr>")
    parts.append("</table>")
    parts.append(corrected_table(result))
    for g in result["groups"]:
        parts.append(f"<h2>{e(g['data_source'])} &middot; {e(g['judge']['model'])}</h2><div class='charts'>"
                     f"{_bars(g)}</div>")
        if g["disagreements"]:
            parts.append("<h3>Where judge and person disagree most often</h3><table><tr><th>context</th>"
                         "<th>times</th><th>judge relevant, person not</th><th>person relevant, judge not</th>"
                         "<th>judge's reason</th><th>person's reason</th></tr>")
            for d in g["disagreements"]:
                parts.append(f"<tr><td class='q'>{e(d['context'])}</td><td class='num'>{d['count']}</td>"
                             f"<td class='num'>{d['judge_said_relevant']}</td>"
                             f"<td class='num'>{d['person_said_relevant']}</td>"
                             f"<td class='q'>{e(d['judge_reason'])}</td>"
                             f"<td class='q'>{e(d['person_reason'])}</td></tr>")
            parts.append("</table>")
    parts.append("<script>console.log('cp-observe calibrate: ' + document.querySelectorAll('svg.chart-svg').length"
                 " + ' groups');</script></body></html>")
    return "".join(parts)
