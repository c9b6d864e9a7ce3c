"""Replay and report: score stored traces through the live scoring path, and see where relevant context ranks.

``replay`` reads OTLP/JSON lines (the Collector's ``file`` exporter), OTLP protobuf files, a Jaeger or Tempo
query API or a Phoenix project, and feeds every span through ``cp-observe serve``'s conversion into one
``ContextPrecisionProcessor``. ``load_run`` / ``write_report`` turn evaluations into one self-contained HTML
report (with a second run: the A/B verdict). ``cp-observe dataset`` reads the same inputs and writes their
evaluations, selected, as a test set (``_dataset/``). The command line is ``cp-observe replay``,
``cp-observe report`` and ``cp-observe dataset``.
"""

from __future__ import annotations

from cp_observe.replay._apis import JaegerQuery, PhoenixProject, TempoQuery
from cp_observe.replay._files import TraceFile
from cp_observe.replay._otlp_json import JsonLinesSpanExporter, request_to_json_line
from cp_observe.replay._report import Run, evaluations_from_run_evals, load_run, summary_text, write_report
from cp_observe.replay._run import ReplayOptions, ReplayResult, replay
from cp_observe.replay._source import ReplayInputError

__all__ = [
    "JaegerQuery",
    "JsonLinesSpanExporter",
    "PhoenixProject",
    "ReplayInputError",
    "ReplayOptions",
    "ReplayResult",
    "Run",
    "TempoQuery",
    "TraceFile",
    "evaluations_from_run_evals",
    "load_run",
    "replay",
    "request_to_json_line",
    "summary_text",
    "write_report",
]
