"""The section of the MAP corrected by people's labels, shown by the report and by ``calibrate``'s page.

It renders the groups of ``calibrate``'s JSON result (``calibration_lines``'s dict), so the report depends on
the shape of that result, never on the calibrate package.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["corrected_table"]


def _estimate(e: dict[str, Any] | None) -> str:
    if not e or e.get("estimate") is None:
        return "&ndash;"
    if e.get("low") is None:
        return f"{e['estimate']:.3f}"
    return f"{e['estimate']:.3f} <span class='small'>[{e['low']:.3f}, {e['high']:.3f}]</span>"


def corrected_table(result: dict[str, Any]) -> str:
    """The judge-only and corrected MAP of every group, with the assumption they rest on (also in the report)."""
    e = html.escape
    parts = ["<h2>MAP: judge only and corrected with the labels</h2><div class='meta'>Corrected MAP "
                 "(prediction-powered inference, PPI and PPI++) is valid only when the labelled retrievals are a "
                 "uniform random subsample of the scored ones; <code>calibration_rate</code> draws one.</div>"
                 "<table><tr><th>data source</th><th>judge</th><th>scored</th><th>labelled</th><th>judge-only MAP</th>"
                 "<th>labels only</th><th>PPI</th><th>PPI++ (&lambda;)</th><th>labelled outside the draw</th></tr>"]
    for g in result["groups"]:
        c = g["corrected_map"] or {}
        lam = c.get("ppi_plus_plus", {}).get("lam")
        parts.append(f"<tr><td>{e(g['data_source'])}</td><td>{e(g['judge']['model'])}</td>"
                     f"<td class='num'>{g['retrievals']}</td><td class='num'>{g['labelled_retrievals']}</td>"
                     f"<td class='num'>{_estimate(g['judge_only_map'])}</td>"
                     f"<td class='num'>{_estimate(c.get('classical'))}</td><td class='num'>{_estimate(c.get('ppi'))}"
                     f"</td><td class='num'>{_estimate(c.get('ppi_plus_plus'))}"
                     f"{f' <span class=small>(&lambda; {lam:.2f})</span>' if lam is not None else ''}</td>"
                     f"<td class='num'>{g['labelled_outside_draw']}</td></tr>")
    parts.append("</table>")
    return "".join(parts)
