"""``cp-observe replay`` and ``cp-observe report``: options, the run, and the terminal summary."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cp_observe._errors import ConfigurationError

__all__ = ["EXIT_WORSE", "add_replay_arguments", "add_report_arguments", "add_source_arguments", "build_sources",
           "parse_time", "run_replay", "run_report"]

#: ``report --compare``'s exit status when the second run is worse than the first (1 and 2 mean bad input).
EXIT_WORSE = 3

_REPLAY_EPILOG = """\
Inputs (one or more):
  FILE                      OTLP/JSON lines (the Collector's file exporter) or OTLP protobuf (length-prefixed
                            records, or one bare request); gzip-compressed files too. --format to force one.
  --jaeger URL --service S  a Jaeger query API, between --since and --until (default: the last hour)
  --tempo URL --service S   a Tempo API (search, then each trace by id), between --since and --until
  --phoenix URL --project P a Phoenix project through its REST API

Every span goes through cp-observe serve's conversion into the same ContextPrecisionProcessor (trace-id
sampling, turn assembly, judge, emission), so a replay at rate r scores the traces live sampling at r scored.
Other settings (timeouts, circuit breaker, ...) come from the CP_OBSERVE_* variables, as for serve.
Exit status: 0 when every input was read, 1 when an input could not be read (what was read is still scored),
2 for bad options."""


def parse_time(text: str) -> datetime:
    """ISO 8601 (``2026-01-31``, ``2026-01-31T12:00:00Z``; UTC if naive) or an age (``90m``, ``6h``, ``7d`` ago)."""
    value = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value and value[-1] in units and value[:-1].isdigit():
        return datetime.now(timezone.utc) - timedelta(seconds=int(value[:-1]) * units[value[-1]])
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (ISO 8601, or 30m / 6h / 7d ago)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The inputs ``replay`` and ``dataset`` share: files, Jaeger, Tempo, Phoenix, and the time window."""
    parser.add_argument("files", nargs="*", metavar="FILE", help="trace files, read in order")
    parser.add_argument("--format", choices=("auto", "jsonl", "proto"), default="auto",
                        help="format of the files (default: told from the first bytes)")
    parser.add_argument("--jaeger", metavar="URL", help="Jaeger (or Tempo Jaeger-compatible) query API base URL")
    parser.add_argument("--tempo", metavar="URL", help="Tempo API base URL (search and trace by id)")
    parser.add_argument("--service", help="service whose traces the Jaeger or Tempo query reads")
    parser.add_argument("--phoenix", metavar="URL", help="Phoenix base URL")
    parser.add_argument("--project", help="Phoenix project name")
    parser.add_argument("--since", type=parse_time, help="only spans ending at or after this time")
    parser.add_argument("--until", type=parse_time, help="only spans ending before this time")


def build_sources(args: argparse.Namespace, files: list[str]) -> list[Any]:
    """The ``Source`` objects the options name (``files`` as trace files); raises on a bad combination.

    Raises:
        ConfigurationError: ``--phoenix`` without ``--project``.
        ReplayInputError: a file cannot be opened or its format is unknown.
    """
    from cp_observe.replay._apis import JaegerQuery, PhoenixProject, TempoQuery
    from cp_observe.replay._files import TraceFile

    sources: list[Any] = [TraceFile(path, format=args.format) for path in files]
    until = args.until or datetime.now(timezone.utc)
    if args.jaeger:
        since = args.since or until - timedelta(hours=1)
        sources.append(JaegerQuery(args.jaeger, args.service or "", since=since, until=until))
    if args.tempo:
        since = args.since or until - timedelta(hours=1)
        sources.append(TempoQuery(args.tempo, args.service or "", since=since, until=until))
    if args.phoenix:
        if not args.project:
            raise ConfigurationError("--phoenix needs --project")
        sources.append(PhoenixProject(args.phoenix, args.project, since=args.since, until=args.until))
    return sources


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The replay's options."""
    parser.description = "Score stored traces through the same path as live scoring."
    parser.epilog = _REPLAY_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_source_arguments(parser)
    parser.add_argument("--judge", help="litellm model string of the judge, or 'lexical' [CP_OBSERVE_JUDGE]")
    parser.add_argument("--judge-api-base", help="endpoint of the judge model [CP_OBSERVE_JUDGE_API_BASE]")
    parser.add_argument("--sample-rate", type=float,
                        help="share of traces scored, by trace id [CP_OBSERVE_SAMPLE_RATE]")
    parser.add_argument("--data-source", action="append", metavar="ID",
                        help="only retrievals of this data source id (agents: agent name); repeatable")
    parser.add_argument("--max-evaluations", type=int, metavar="N", help="stop reading after N targets are fed")
    parser.add_argument("--budget-usd", type=float, metavar="X", help="stop judging once the judge cost reaches X")
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be judged and estimate tokens and cost; no judge call")
    parser.add_argument("--output", "-o", type=Path, metavar="FILE",
                        help="write evaluations (and the spans they scored) as OTLP/JSON lines to FILE")
    parser.add_argument("--otlp-endpoint", help="send evaluations over OTLP here [CP_OBSERVE_OTLP_ENDPOINT]")
    parser.add_argument("--concurrency", type=int, help="judge calls in flight at once [CP_OBSERVE_CONCURRENCY]")
    parser.add_argument("--queue-size", type=int, help="items held before reading waits [CP_OBSERVE_QUEUE_SIZE]")
    parser.add_argument("--threshold", type=float, help="scores below it are labelled fail [CP_OBSERVE_THRESHOLD]")
    parser.add_argument("--capture-content", action=argparse.BooleanOptionalAction, default=None,
                        help="export the judge's per-context reasons [CP_OBSERVE_CAPTURE_CONTENT]")
    parser.add_argument("--segments", metavar="ATTR[,ATTR]",
                        help="span attributes whose values label the score series [CP_OBSERVE_SEGMENTS]")
    parser.add_argument("--max-segment-values", type=int, metavar="N",
                        help="distinct values kept per segment; later ones are 'other' [CP_OBSERVE_MAX_SEGMENT_VALUES]")
    parser.add_argument("--document-resolver", metavar="MODULE:FUNCTION",
                        help="gives the text of documents a span names by id only: (document_id, data_source) -> "
                             "text [CP_OBSERVE_DOCUMENT_RESOLVER]")
    parser.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                        help="seconds between progress lines when stderr is not a terminal (default 10)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress, only the summary")


def run_replay(args: argparse.Namespace) -> int:
    """Run ``cp-observe replay``; returns the exit code."""
    from cp_observe.replay._progress import Progress
    from cp_observe.replay._run import ReplayOptions, replay
    from cp_observe.replay._source import ReplayInputError

    try:
        if args.output is None and args.otlp_endpoint is None and not args.dry_run:
            import os

            if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") and not os.environ.get("CP_OBSERVE_OTLP_ENDPOINT"):
                raise ConfigurationError("give --output FILE or --otlp-endpoint URL (or --dry-run)")
        for label, value in (("--max-evaluations", args.max_evaluations), ("--budget-usd", args.budget_usd)):
            if value is not None and value < 0:
                raise ConfigurationError(f"{label} must be >= 0")
        sources = build_sources(args, args.files)
        if not sources:
            raise ConfigurationError(
                "nothing to replay: give FILE, --jaeger/--tempo URL --service S, or --phoenix URL --project P")
        options = ReplayOptions(
            judge=args.judge, judge_api_base=args.judge_api_base, sample_rate=args.sample_rate,
            threshold=args.threshold, concurrency=args.concurrency, queue_size=args.queue_size,
            capture_content=args.capture_content, since=args.since, until=args.until,
            data_sources=frozenset(args.data_source) if args.data_source else None,
            max_evaluations=args.max_evaluations, budget_usd=args.budget_usd, dry_run=args.dry_run,
            output=args.output, otlp_endpoint=args.otlp_endpoint, segments=args.segments,
            max_segment_values=args.max_segment_values, document_resolver=args.document_resolver,
        )
        progress = Progress(interval_s=args.progress_interval, enabled=not args.quiet)
        result = replay(sources, options, progress=progress)
    except (ConfigurationError, ReplayInputError, ValueError) as exc:
        print(f"cp-observe replay: {exc}", file=sys.stderr)
        return 2
    for line in summary_lines(result):
        print(line, flush=True)
    if result.error:
        print(f"cp-observe replay: error: {result.error}", file=sys.stderr)
        return 1
    return 0


def summary_lines(result: Any) -> list[str]:
    """The replay's terminal summary."""
    stats = result.stats
    lines = [
        f"replayed {', '.join(result.inputs)}: {result.requests} requests, {result.spans_read} spans read, "
        f"{result.spans_fed} fed in {result.elapsed_s:.1f} s",
        f"  judge {result.judge_model}, sample rate {result.sample_rate:g}{' (dry run)' if result.dry_run else ''}",
    ]
    left = []
    if result.outside_time:
        left.append(f"{result.outside_time} outside --since/--until")
    if result.other_data_source:
        left.append(f"{result.other_data_source} of other data sources")
    if result.over_max_evaluations:
        left.append(f"{result.over_max_evaluations} targets over --max-evaluations")
    if result.rejected:
        left.append(f"{result.rejected} malformed ({result.rejected_error})")
    if left:
        lines.append("  not fed: " + "; ".join(left))
    reasons = ", ".join(f"{k} {v}" for k, v in stats.get("reasons", {}).items())
    verb = "would judge" if result.dry_run else "scored"
    counts = (f"  sampled {stats.get('sampled', 0)}, {verb} {stats.get('scored', 0)}, failed {stats.get('failed', 0)}, "
              f"dropped {stats.get('dropped', 0)}, skipped {stats.get('skipped', 0)}")
    lines.append(counts + (f" ({reasons})" if reasons else ""))
    if result.dry_run:
        known = result.estimated_cost_usd
        cost = "unknown (no price for this model)" if known is None else f"${known:.4f}"
        lines.append(f"  estimate: {result.estimated_calls} judge calls, ~{result.estimated_prompt_tokens} prompt + "
                     f"~{result.estimated_completion_tokens} completion tokens, cost {cost}")
    if result.output_lines:
        lines.append(f"  wrote {result.output_lines} lines of OTLP/JSON")
    if result.stopped:
        lines.append(f"  stopped early: {result.stopped}")
    return lines


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The report's options."""
    parser.description = ("Write one self-contained HTML report (no network, opens from disk) from evaluations "
                          "in OTLP/JSON lines, and print a plain-text summary.")
    parser.epilog = ("Inputs: OTLP/JSON-lines or protobuf files with evaluation spans (a replay's --output, a "
                     "Collector file), or dataset files (cp-observe dataset, cp_observe.write_eval_results).\n"
                     "report A --compare B, or report --compare A B: the A/B verdict of B against A (paired "
                     "where both hold the same evaluations) at --confidence.\n"
                     "Exit status: 0 written; 1 an input could not be read; 2 bad options; "
                     f"{EXIT_WORSE} B is worse than A (for CI).")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="files with evaluation spans, or dataset files (the first run)")
    parser.add_argument("--compare", nargs="+", metavar="FILE",
                        help="the second run (other period, judge or retriever) to compare with; without FILE, "
                             "exactly two files: the first run and the second")
    parser.add_argument("--confidence", type=float, default=0.95, metavar="C",
                        help="confidence of the A/B verdict (default 0.95)")
    parser.add_argument("--label", action="append", metavar="NAME", help="names of the run and of --compare")
    parser.add_argument("--output", "-o", type=Path, default=Path("cp-observe-report.html"), metavar="FILE",
                        help="the HTML file to write (default cp-observe-report.html)")
    parser.add_argument("--title", default="Context precision report", help="the report's title")
    parser.add_argument("--worst", type=int, default=10, metavar="N", help="worst retrievals listed per data source")
    parser.add_argument("--labels", action="append", type=Path, metavar="FILE",
                        help="people's labels (JSON lines): add the MAP corrected by them (PPI, PPI++); repeatable")


def _calibration(files: list[str], label_files: list[Path]) -> dict[str, Any]:
    """``calibrate``'s figures for the report's files and these label files (the corrected MAP section)."""
    from cp_observe.replay._calibrate import calibrate
    from cp_observe.replay._files import TraceFile
    from cp_observe.replay._judged import read_judged
    from cp_observe.replay._label_files import read_label_file

    judged = read_judged([TraceFile(path) for path in files])
    labels = [label for path in label_files for label in read_label_file(path)]
    return calibrate(judged.retrievals, labels, inputs=judged.inputs).as_dict()


def run_report(args: argparse.Namespace) -> int:
    """Run ``cp-observe report``; returns the exit code."""
    from cp_observe._errors import LabelError
    from cp_observe.replay._report import load_run, summary_text, verdict, write_report
    from cp_observe.replay._source import ReplayInputError

    labels = list(args.label or [])
    first, second = list(args.files), list(args.compare or [])
    if not first:
        if len(second) != 2:
            print("cp-observe report: give FILE..., or --compare A B (exactly two files)", file=sys.stderr)
            return 2
        first, second = second[:1], second[1:]
    if not 0.5 <= args.confidence < 1.0:
        print(f"cp-observe report: --confidence must be in [0.5, 1), got {args.confidence}", file=sys.stderr)
        return 2
    calibration = None
    try:
        run = load_run(first, label=labels[0] if labels else "run", worst=args.worst)
        other = comparison = None
        if second:
            other = load_run(second, label=labels[1] if len(labels) > 1 else "compared", worst=args.worst)
            comparison = verdict(run, other, args.confidence)
        if args.labels:
            calibration = _calibration(first, args.labels)
        write_report(args.output, run, other, title=args.title, comparison=comparison, calibration=calibration)
    except ReplayInputError as exc:
        print(f"cp-observe report: {exc}", file=sys.stderr)
        return 1
    except LabelError as exc:
        print(f"cp-observe report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"cp-observe report: {args.output}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(summary_text(run, other, comparison), flush=True)
    if calibration is not None:
        from cp_observe.replay._calibrate import calibration_lines

        for line in calibration_lines(calibration):
            print(line, flush=True)
    print(f"report written to {args.output}", flush=True)
    return EXIT_WORSE if comparison is not None and comparison.verdict == "worse" else 0
