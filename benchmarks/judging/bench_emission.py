"""Emission of one scored evaluation on the evaluator thread: this checkout's emitter against main's, one run.

``Emitter.scored`` (the evaluation span with its attributes, the ``gen_ai.evaluation.result`` log record, the
score, squares, evaluations, verdicts, duration, token and cost metrics) is called for a 5-context
retrieval, alternating rounds between the baseline emitter (``cp_observe/_emission/_emit.py`` as it is at
``--baseline``, default ``main``, loaded from git) and this checkout's, both into the same kind of providers:
an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` and a ``LoggerProvider`` with a
``BatchLogRecordProcessor`` (both to exporters that drop), and an SDK ``MeterProvider`` with an in-memory
reader, as a deployment that exports all three signals has. A second pair has no logger provider and no
meter reader configured (the API's no-op ones): the signals nobody exports. The figure is CPU µs per
evaluation (``time.process_time``; the batch processors' export threads are included, but they drop). The
target: at most 45 µs per evaluation.

    .venv-bench/bin/python benchmarks/judging/bench_emission.py [--quick] [--baseline main]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c  # noqa: E402
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.trace import SpanContext, TraceFlags  # noqa: E402

from cp_observe._types import ScoreResult, Usage, Verdict  # noqa: E402


class _DropSpans(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _DropLogs(LogRecordExporter):
    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _baseline_module(ref: str) -> Any:
    """``_emit.py`` as it is at ``ref``, imported under another name (its imports resolve to this checkout)."""
    source = subprocess.run(["git", "show", f"{ref}:cp_observe/_emission/_emit.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(f"/tmp/cp_observe_emit_baseline_{abs(hash(ref))}.py")
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("cp_observe._emission._emit_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


_OPTION_KEYWORDS = {"threshold", "capture_content", "calibration_rate", "segments", "max_segment_values"}


def make_emitter(module: Any, **kwargs: Any) -> Any:
    """``module.Emitter(**kwargs)`` for an ``_emit.py`` of any version.

    The current one takes its settings as the processor's options object; older ones took them as keywords
    (``segments`` as label pairs). The same keywords build either.
    """
    if "options" not in inspect.signature(module.Emitter).parameters:
        return module.Emitter(**kwargs)
    from cp_observe._config._settings import Settings

    settings = {name: kwargs.pop(name) for name in list(kwargs) if name in _OPTION_KEYWORDS}
    if "segments" in settings:
        settings["segments"] = ",".join(attribute for attribute, _ in settings["segments"]) or None
    return module.Emitter(options=Settings(**settings), **kwargs)


def _emitter(module: Any, exported: bool) -> tuple[Any, list[Any]]:
    from cp_observe._judging._llm_judge import LLMJudge

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(_DropSpans(), max_queue_size=100_000))
    closers: list[Any] = [tracer]
    if exported:
        logs = LoggerProvider()
        logs.add_log_record_processor(BatchLogRecordProcessor(_DropLogs(), max_queue_size=100_000))
        meter: Any = MeterProvider(metric_readers=[InMemoryMetricReader()])
        closers += [logs, meter]
    else:
        from opentelemetry._logs import NoOpLoggerProvider
        from opentelemetry.metrics import NoOpMeterProvider

        logs, meter = NoOpLoggerProvider(), NoOpMeterProvider()
    judge = LLMJudge("openai/judge-test", api_base="http://127.0.0.1:9/v1", api_key="sk-bench")
    emitter = make_emitter(module, tracer_provider=tracer, meter_provider=meter, logger_provider=logs, threshold=0.5,
                           capture_content=True, queue_depth=lambda: 0, judge=judge)
    return emitter, closers


def _inputs(module: Any, count: int) -> list[tuple[Any, ScoreResult]]:
    verdicts = tuple(Verdict(i, i % 2 == 0, f"context {i} reason text of a usual length") for i in range(5))
    out = []
    for i in range(count):
        ctx = SpanContext(trace_id=i + 1, span_id=i + 1, is_remote=False, trace_flags=TraceFlags(1))
        target = module.Target(span_context=ctx, data_source=("kb", "faq", "docs")[i % 3], agent_name="support",
                               reference="output", sampling_reason="ratio")
        result = ScoreResult(score=0.83, reason="2 of 5 contexts relevant; the first one ranked first.",
                             verdicts=verdicts, average_precision=0.8333, judge_model="openai/judge-test",
                             reference="output", usage=Usage(1, 420, 80), cost_usd=0.0001)
        out.append((target, result))
    return out


def _per_call_us(emitter: Any, inputs: list[tuple[Any, ScoreResult]]) -> float:
    cpu0 = time.process_time()
    for target, result in inputs:
        emitter.scored(target, result, start_ns=1_000, end_ns=2_000_000, model="openai/judge-test")
    return (time.process_time() - cpu0) / len(inputs) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", default="main", help="git ref of the baseline emitter (default main)")
    args = parser.parse_args(argv)
    from cp_observe._emission import _emit as current

    baseline = _baseline_module(args.baseline)
    count, rounds = (2000, 5) if args.quick else (5000, 9)
    rows = []
    medians: dict[tuple[str, bool], float] = {}
    for exported in (True, False):
        pair = {"baseline": _emitter(baseline, exported), "this checkout": _emitter(current, exported)}
        samples: dict[str, list[float]] = {name: [] for name in pair}
        for name, (emitter, _) in pair.items():
            _per_call_us(emitter, _inputs(baseline if name == "baseline" else current, 200))  # warm-up
        for _ in range(rounds):
            for name, (emitter, _) in pair.items():
                module = baseline if name == "baseline" else current
                samples[name].append(_per_call_us(emitter, _inputs(module, count)))
        for name, (_, closers) in pair.items():
            for closer in closers:
                closer.shutdown()
            medians[(name, exported)] = c.median(samples[name])
        signals = "spans, logs, metrics exported" if exported else "spans only (no log or metric pipeline)"
        for name in pair:
            rows.append([signals, name, f"{medians[(name, exported)]:.1f}",
                         f"{min(samples[name]):.1f}", f"{max(samples[name]):.1f}"])
    print(f"## Emission of one scored evaluation (CPU µs per evaluation, median of {rounds} rounds of {count})\n")
    print(f"Machine: {c.machine_line()}; baseline: `_emit.py` at `{args.baseline}`\n")
    print(c.markdown_table(["signals", "emitter", "median µs", "min µs", "max µs"], rows))
    mine = medians[("this checkout", True)]
    before = medians[("baseline", True)]
    print(f"\n- {'MET ' if mine <= 45 else 'MISSED'} at most 45 µs per evaluation (all signals exported): "
          f"{mine:.1f} µs, {mine / before * 100:.0f} % of the baseline's {before:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
