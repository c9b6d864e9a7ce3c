"""``cp-observe replay``: options, the run, and the terminal summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cp_observe._cli._batch import EXIT_BATCHES_OPEN, add_batch_arguments, batch_options, batch_stopped
from cp_observe._cli._inputs import add_source_arguments, sources_from_args
from cp_observe._errors import ConfigurationError
from cp_observe._log import log_format

__all__ = ["add_replay_arguments", "run_replay", "summary_lines"]

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
2 for bad options, 3 with --batch when batches are still open (run the same command again to resume).

--batch: the judge's calls go to its provider's batch API (openai/, azure/, anthropic/, gemini/) at half
price. The inputs are read twice: once to record every call, once, after the batches end, to score and
emit from their answers. The batches are kept in FILE.batch/ beside --output; the same command run again
resumes them instead of submitting again."""


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
    add_batch_arguments(parser)
    parser.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                        help="seconds between progress lines when stderr is not a terminal (default 10)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress, only the summary (so too with --log-format json)")


def run_replay(args: argparse.Namespace) -> int:
    """Run ``cp-observe replay``; returns the exit code (3 while ``--batch``'s batches are open)."""
    from cp_observe._batch._http import BatchApiError
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.replay._progress import Progress
    from cp_observe.replay._run import ReplayOptions, replay

    try:
        if args.output is None and args.otlp_endpoint is None and not args.dry_run:
            import os

            if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") and not os.environ.get("CP_OBSERVE_OTLP_ENDPOINT"):
                raise ConfigurationError("give --output FILE or --otlp-endpoint URL (or --dry-run)")
        for label, value in (("--max-evaluations", args.max_evaluations), ("--budget-usd", args.budget_usd)):
            if value is not None and value < 0:
                raise ConfigurationError(f"{label} must be >= 0")
        sources = sources_from_args(args, args.files)
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
        # JSON log lines: stderr carries one object per line, so no progress lines between them.
        quiet = args.quiet or log_format(getattr(args, "log_format", None)) == "json"
        progress = Progress(interval_s=args.progress_interval, enabled=not quiet)
        batch: list[str] = []
        if args.batch:
            from cp_observe.replay._batched import batch_replay, report_lines

            result, report = batch_replay(sources, options, batch_options(args), progress=progress)
            batch = report_lines(report)
        else:
            result = replay(sources, options, progress=progress)
    except (ConfigurationError, ReplayInputError, ValueError) as exc:
        print(f"cp-observe replay: {exc}", file=sys.stderr)
        return 2
    except (BatchApiError, KeyboardInterrupt) as exc:
        if not args.batch:
            raise
        return batch_stopped("replay", exc)
    for line in [*(summary_lines(result) if result is not None else []), *batch]:
        print(line, flush=True)
    if result is None:
        return EXIT_BATCHES_OPEN
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
