"""Replay: score stored traces through the live scoring path.

``replay`` reads OTLP/JSON lines (the Collector's ``file`` exporter), OTLP protobuf files, a Jaeger or Tempo
query API or a Phoenix project (``_traces/``) and feeds every span through ``cp-observe serve``'s conversion into
one ``ContextPrecisionProcessor``. The command line is ``cp-observe replay``. The trace inputs and the report
API (``load_run``, ``write_report``; ``cp_observe.report``) are re-exported here too, so that a script replays
and reports with one import.
"""

from __future__ import annotations

from cp_observe._traces._apis import JaegerQuery, PhoenixProject, TempoQuery
from cp_observe._traces._files import TraceFile
from cp_observe._traces._otlp_json import JsonLinesSpanExporter, request_to_json_line
from cp_observe._traces._source import ReplayInputError
from cp_observe.replay._run import ReplayOptions, ReplayResult, replay
from cp_observe.report import Run, evaluations_from_run_evals, load_run, summary_text, write_report

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
