"""``cp-observe calibrate``: options, reading verdicts and labels, and the outputs (terminal, JSON, HTML, metrics)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from cp_observe import _names as n
from cp_observe._cli._batch import EXIT_BATCHES_OPEN, add_batch_arguments, batch_options
from cp_observe._cli._inputs import sources_from_args, time_option
from cp_observe._errors import ConfigurationError, LabelError

__all__ = ["add_calibrate_arguments", "run_calibrate"]

_EPILOG = """\
Verdicts (cp-observe's own, one or more):
  FILE                      OTLP/JSON lines or protobuf with evaluation spans (a replay's --output, an export)
  --jaeger URL --service S  evaluation spans in Jaeger; --tempo URL --service S in Tempo
  --phoenix URL --project P the annotations cp-observe posted to Phoenix (and people's labels beside them)
  --judge MODEL             replay those inputs through this judge first and calibrate the new verdicts
Labels (people's):
  --labels FILE             JSON lines: trace_id, span_id, position or document_id, relevant (repeatable)
  --phoenix ...             HUMAN document annotations named --label-name (default relevance)

--judge with --batch: the replay goes to the judge's provider batch API at half price; the batches are kept
beside --json or --output (FILE.batch/, or --batch-state DIR) and the same command run again resumes them.

Exit status: 0 done, 1 an input could not be read, 2 bad options or a malformed label, 3 with --batch when
batches are still open."""


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``cp-observe calibrate``."""
    parser.description = "Compare the judge's verdicts with people's relevance labels; correct MAP with them."
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="*", metavar="FILE", help="trace files with evaluation spans")
    parser.add_argument("--labels", action="append", type=Path, metavar="FILE", help="JSON-lines label file")
    parser.add_argument("--phoenix", metavar="URL", help="Phoenix base URL")
    parser.add_argument("--project", help="Phoenix project name")
    parser.add_argument("--label-name", default=n.PHOENIX_DOCUMENT_ANNOTATION_NAME,
                        help="name of people's document annotations in Phoenix (default relevance)")
    parser.add_argument("--jaeger", metavar="URL", help="Jaeger query API base URL")
    parser.add_argument("--tempo", metavar="URL", help="Tempo API base URL")
    parser.add_argument("--service", help="service whose traces the Jaeger or Tempo query reads")
    parser.add_argument("--since", type=time_option,
                        help="--jaeger/--tempo: from this time (ISO 8601 or 30m / 6h / 7d ago; default 1h)")
    parser.add_argument("--until", type=time_option, help="--jaeger/--tempo: until this time (default now)")
    parser.add_argument("--judge", help="replay the inputs through this judge (litellm model string or 'lexical')")
    parser.add_argument("--judge-api-base", help="endpoint of that judge [CP_OBSERVE_JUDGE_API_BASE]")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--output", "-o", type=Path, metavar="FILE", help="write the HTML page")
    parser.add_argument("--title", default="Judge calibration", help="the page's title")
    parser.add_argument("--push", action="store_true",
                        help="export agreement and its label count as OTLP metrics (for a scheduled run)")
    add_batch_arguments(parser)
    parser.add_argument("--otlp-endpoint", help="where --push sends [CP_OBSERVE_OTLP_ENDPOINT]")


def _replayed(sources: list[Any], args: argparse.Namespace, directory: str) -> list[Any]:
    """The inputs scored again by ``--judge``, as one trace file of the new evaluations."""
    from cp_observe._traces._files import TraceFile
    from cp_observe.replay._run import ReplayOptions, replay

    output = Path(directory) / "replayed.jsonl"
    if args.batch:
        return _batch_replayed(sources, args, output)
    result = replay(sources, ReplayOptions(judge=args.judge, judge_api_base=args.judge_api_base, sample_rate=1.0,
                                           output=output))
    if result.error:
        raise ConfigurationError(f"replay through {args.judge} failed: {result.error}")
    return [TraceFile(output)]


class _BatchesOpen(Exception):
    """``--batch``: the judge's batches are still open; the command stops and is run again to resume."""


def _batch_replayed(sources: list[Any], args: argparse.Namespace, output: Path) -> list[Any]:
    """The inputs scored again by ``--judge`` through its provider's batch API (``replay --batch``'s two passes)."""
    from cp_observe._traces._files import TraceFile
    from cp_observe.replay._batched import batch_replay, report_lines
    from cp_observe.replay._progress import Progress
    from cp_observe.replay._run import ReplayOptions

    beside = args.json or args.output
    state = args.batch_state or (beside.with_name(beside.name + ".batch") if beside is not None else None)
    if state is None:
        raise ConfigurationError("--batch keeps its batches beside --json or --output: give one, or --batch-state DIR")
    options = ReplayOptions(judge=args.judge, judge_api_base=args.judge_api_base, sample_rate=1.0, output=output)
    result, report = batch_replay(sources, options, batch_options(args, state), progress=Progress(enabled=False))
    for line in report_lines(report):
        print(line.strip(), file=sys.stderr)
    if result is None:
        raise _BatchesOpen
    if result.error:
        raise ConfigurationError(f"replay through {args.judge} failed: {result.error}")
    return [TraceFile(output)]


def _read(args: argparse.Namespace) -> tuple[Any, list[Any], list[str], int]:
    """The judgements and labels the options name: (judged, labels, unreadable, exit status so far).

    Raises:
        ConfigurationError: bad options.
        LabelError: a label file is malformed.
    """
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.calibrate._judged import MAX_RETRIEVALS, Judged, read_judged
    from cp_observe.calibrate._label_files import read_label_file
    from cp_observe.calibrate._phoenix_labels import PhoenixLabels

    judged = Judged()
    labels: list[Any] = []
    unreadable: list[str] = []
    status = 0
    if args.phoenix and not args.project:
        raise ConfigurationError("--phoenix needs --project")
    if args.judge and not (args.files or args.jaeger or args.tempo):
        raise ConfigurationError("--judge replays FILE, --jaeger or --tempo inputs: give one")
    if not (args.files or args.jaeger or args.tempo or args.phoenix):
        raise ConfigurationError("no verdicts: give FILE, --jaeger/--tempo URL --service S, or --phoenix URL "
                                 "--project P")
    if not args.labels and not args.phoenix:
        raise ConfigurationError("no labels: give --labels FILE or --phoenix URL --project P")
    sources = sources_from_args(args, args.files, phoenix=False)
    for path in args.labels or ():
        labels.extend(read_label_file(path))
    with tempfile.TemporaryDirectory(prefix="cp-observe-calibrate-") as directory:
        if args.judge and sources:
            sources = _replayed(sources, args, directory)
        try:
            read_judged(sources, judged)
        except ReplayInputError as exc:
            print(f"cp-observe calibrate: {exc}", file=sys.stderr)
            status = 1
    if args.phoenix:
        phoenix = PhoenixLabels(args.phoenix, args.project, label_name=args.label_name)
        span_ids = sorted({f"{r.span_id:016x}" for r in judged.retrievals}) if sources else None
        try:
            read = phoenix.read(span_ids)
        except ReplayInputError as exc:
            print(f"cp-observe calibrate: {exc}", file=sys.stderr)
            status = 1
        else:
            judged.inputs.append(phoenix.name)
            if read.truncated:
                print(f"cp-observe calibrate: {phoenix.name}: more than {MAX_RETRIEVALS} scored spans; the newest "
                      f"{MAX_RETRIEVALS} were read", file=sys.stderr)
            judged.retrievals.extend(read.retrievals)
            labels.extend(read.labels)
            unreadable.extend(read.unreadable)
    return judged, labels, unreadable, status


def run_calibrate(args: argparse.Namespace) -> int:
    """Run ``cp-observe calibrate``; returns the exit code."""
    from cp_observe._batch._http import BatchApiError
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.calibrate._calibrate import calibrate, calibration_lines

    try:
        judged, labels, unreadable, status = _read(args)
    except (_BatchesOpen, KeyboardInterrupt) as exc:
        if not isinstance(exc, _BatchesOpen) and not getattr(args, "batch", False):
            raise
        print("cp-observe calibrate: batches still open: run the same command again to resume", file=sys.stderr)
        return EXIT_BATCHES_OPEN
    except BatchApiError as exc:
        print(f"cp-observe calibrate: the batch API failed: {exc}", file=sys.stderr)
        return 1
    except (ConfigurationError, LabelError, ValueError) as exc:
        print(f"cp-observe calibrate: {exc}", file=sys.stderr)
        return 2
    except ReplayInputError as exc:  # an input that cannot even be opened
        print(f"cp-observe calibrate: {exc}", file=sys.stderr)
        return 1
    result = calibrate(judged.retrievals, labels, inputs=judged.inputs, unreadable=unreadable)
    figures = result.as_dict()
    for line in calibration_lines(figures):
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
        print(f"figures written to {args.json}")
    if args.output:
        from cp_observe.calibrate._page import render_calibration

        args.output.write_text(render_calibration(figures, title=args.title), encoding="utf-8")
        print(f"page written to {args.output}")
    if args.push:
        from cp_observe.calibrate._push import push_agreement

        try:
            pushed = push_agreement(result.groups, otlp_endpoint=args.otlp_endpoint)
        except ConfigurationError as exc:
            print(f"cp-observe calibrate: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"cp-observe calibrate: {exc}", file=sys.stderr)
            return 1
        print(f"pushed agreement of {pushed} data source and judge pairs")
    return status
