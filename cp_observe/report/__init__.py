"""``cp-observe report``: evaluations read back from stored traces or dataset lines, as one self-contained HTML page.

Per data source the MAP with its interval, MAP over time, relevance by rank, the score distribution, segments,
canaries, the rerank lift and the worst retrievals; with a second run (``report --compare``) the paired A/B
verdict. ``load_run`` reads a run, ``write_report`` writes the page, ``summary_text`` the terminal summary.
"""

from __future__ import annotations

from cp_observe.report._report import Run, evaluations_from_run_evals, load_run, summary_text, write_report

__all__ = ["Run", "evaluations_from_run_evals", "load_run", "summary_text", "write_report"]
