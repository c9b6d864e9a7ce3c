"""``cp-observe dataset``: failing retrievals from stored traces (or a run's output) as a regression test set."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cp_observe._cli._batch import EXIT_BATCHES_OPEN, add_batch_arguments, batch_options, batch_stopped
from cp_observe._cli._inputs import add_source_arguments, sources_from_args
from cp_observe._errors import ConfigurationError

__all__ = ["add_dataset_arguments", "run_dataset"]

_NAME = "cp-observe dataset"

_EPILOG = """\
Inputs are those of replay (FILE, --jaeger/--tempo URL --service S, --phoenix URL --project P) or dataset
files (a run's output: this command's, or run_evals results written by cp_observe.write_eval_results).
Nothing is judged: every context precision evaluation already in the input becomes one JSON line, if it
passes every filter given:
  --max-score X             score at most X
  --segment NAME=VALUE      that segment value (NAME: the attribute or its label name; repeat for several
                            values of one segment, or for several segments: all must hold)
  --data-source ID          that data source (repeatable)
  --since / --until         the scored retrieval ended in [since, until)
  --worst N                 only the N lowest scores among those left
Each line holds query (and input), contexts in rank order, answer, verdicts, reasons, score, trace and span
ids, data source and segment values: cp_observe.load_dataset(FILE) reads it for run_evals.
What could not become a line, or was left out, is counted by reason on stderr.
--judge MODEL judges the selection again: each line's stored contexts against its stored answer (or query),
with new verdicts, reasons, score and judge model; a line the judge fails is left out and named. With --batch
the calls go to the judge's provider batch API at half price (openai/, azure/, anthropic/, gemini/); the
batches are kept beside --output (FILE.batch) and the same command run again resumes them.
Exit status: 0 done; 1 an input could not be read, a line could not be judged again, or the Phoenix upload
failed (what was read is still written); 2 bad options; 3 --batch: batches still open, nothing written (run
the same command again)."""


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset command's options."""
    parser.description = "Select evaluations from stored traces (or a run's output) and write them as a test set."
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_source_arguments(parser)
    parser.add_argument("--max-score", type=float, metavar="X", help="keep evaluations scoring at most X")
    parser.add_argument("--segment", action="append", metavar="NAME=VALUE", default=[],
                        help="keep evaluations with this segment value (repeatable)")
    parser.add_argument("--data-source", action="append", metavar="ID", help="keep this data source (repeatable)")
    parser.add_argument("--worst", type=int, metavar="N", help="keep only the N lowest scores")
    parser.add_argument("--output", "-o", default="cp-observe-dataset.jsonl", metavar="FILE",
                        help="the JSON-lines file to write ('-': standard output; default cp-observe-dataset.jsonl)")
    parser.add_argument("--phoenix-dataset", metavar="NAME", help="also upload the selection as this Phoenix dataset")
    parser.add_argument("--phoenix-url", metavar="URL",
                        help="Phoenix to upload to (default: --phoenix); key from CP_OBSERVE_PHOENIX_API_KEY or "
                             "PHOENIX_API_KEY")
    parser.add_argument("--phoenix-append", action="store_true", help="append to an existing Phoenix dataset")
    parser.add_argument("--description", default="", help="the Phoenix dataset's description")
    parser.add_argument("--judge", metavar="MODEL",
                        help="judge the selected evaluations again with this judge (litellm model string or "
                             "'lexical') and write the new verdicts and scores")
    parser.add_argument("--judge-api-base", metavar="URL", help="endpoint of that judge [CP_OBSERVE_JUDGE_API_BASE]")
    add_batch_arguments(parser)


def run_dataset(args: argparse.Namespace) -> int:
    """Run ``cp-observe dataset``; returns the exit code."""
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.dataset._record import DatasetError, write_records
    from cp_observe.dataset._select import Selector

    notes = sys.stderr if args.output == "-" else sys.stdout
    try:
        selection, datasets, sources = _options(args)
    except (ConfigurationError, ValueError, ReplayInputError) as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return 2
    collected, error = _read(datasets, sources)
    selector = Selector(selection)
    selector.offer_all(collected.records)
    chosen = selector.selected()
    failed = 0
    if args.judge:
        judged = _judge_again(args, chosen, notes)
        if isinstance(judged, int):
            return judged
        chosen, failed = judged
    try:
        written = write_records(args.output, chosen)
    except DatasetError as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return 1
    inputs = ", ".join([*datasets, *(s.name for s in sources)])
    print(f"read {inputs}: {collected.spans_read} spans, {collected.evaluations} evaluations", file=notes)
    skipped = {**collected.skipped, **selector.skipped}
    if skipped:
        print("  skipped: " + "; ".join(f"{count} {why}" for why, count in skipped.items()), file=notes)
    where = "standard output" if args.output == "-" else str(Path(args.output))
    print(f"  selected {written} of {len(collected.records)} evaluations, written to {where}", file=notes, flush=True)
    if args.phoenix_dataset is not None:
        from cp_observe.dataset._phoenix import upload_dataset

        try:
            uploaded = upload_dataset(args.phoenix_url or args.phoenix, args.phoenix_dataset, chosen,
                                      description=args.description, append=args.phoenix_append)
        except ReplayInputError as exc:
            print(f"{_NAME}: Phoenix upload: {exc}", file=sys.stderr)
            return 1
        print(f"  uploaded {uploaded.created} examples to Phoenix dataset {args.phoenix_dataset!r} "
              f"(id {uploaded.dataset_id}, version {uploaded.version_id})", file=notes, flush=True)
    if error is not None:
        print(f"{_NAME}: error: {error}", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _judge_again(args: argparse.Namespace, chosen: list[Any], notes: Any) -> tuple[list[Any], int] | int:
    """The selection judged again by ``--judge`` (with ``--batch``, through batches): (lines, failed), or an exit."""
    from cp_observe._batch._http import BatchApiError
    from cp_observe._config._settings import Settings
    from cp_observe._offline._rescore import Rescored, rescore
    from cp_observe._wiring._providers import judge_from_settings

    try:
        settings = Settings.resolve({"judge": args.judge, "judge_api_base": args.judge_api_base})
        if not args.batch:
            done: Rescored | None = rescore(chosen, judge_from_settings(settings))
        else:
            done = _batched(args, settings, chosen, notes)
    except ConfigurationError as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return 2
    except (BatchApiError, KeyboardInterrupt) as exc:
        return batch_stopped("dataset", exc)
    if done is None:
        return EXIT_BATCHES_OPEN
    cost = "unknown" if done.cost_usd is None else f"${done.cost_usd:.4f}"
    print(f"  judged again by {args.judge}: {len(done.records)} of {len(chosen)} evaluations ({cost})", file=notes)
    if done.failed:
        print(f"{_NAME}: {len(done.failed)} evaluations could not be judged again and are left out:", file=sys.stderr)
        for position, why in done.failed[:5]:
            print(f"  {chosen[position].trace_id}/{chosen[position].span_id}: {why}", file=sys.stderr)
    return done.records, len(done.failed)


def _batched(args: argparse.Namespace, settings: Any, chosen: list[Any], notes: Any) -> Any:
    """The two passes of a batch re-score; ``None`` while batches are open (the summary says so)."""
    from cp_observe._batch._run import report_lines, run_two_passes
    from cp_observe._offline._rescore import rescore
    from cp_observe.replay._batched import llm_judge, request_tokens

    if args.batch_state is None and args.output == "-":
        raise ConfigurationError("--batch keeps its batches beside --output FILE: give it, or --batch-state DIR")
    state = args.batch_state or Path(args.output + ".batch")
    result, report = run_two_passes(settings, state, make_judge=lambda: llm_judge(settings),
                                    first=lambda recorder: rescore(chosen, recorder),
                                    second=lambda answerer: rescore(chosen, answerer),
                                    batch=batch_options(args, state), budget_usd=None, tokens=request_tokens,
                                    stream=sys.stderr)
    for line in report_lines(report):
        print(line, file=notes, flush=True)
    return result


def _options(args: argparse.Namespace) -> tuple[Any, list[str], list[Any]]:
    """The selection, the dataset files and the trace sources the options name; raises on bad options."""
    from cp_observe.dataset._collect import is_dataset
    from cp_observe.dataset._select import Selection, parse_segment

    segments: dict[str, set[str]] = {}
    for text in args.segment:
        label, value = parse_segment(text)
        segments.setdefault(label, set()).add(value)
    selection = Selection(
        max_score=args.max_score, segments={k: frozenset(v) for k, v in segments.items()},
        data_sources=frozenset(args.data_source) if args.data_source else None,
        since=args.since, until=args.until, worst=args.worst,
    )
    if args.phoenix_dataset is not None and not (args.phoenix_url or args.phoenix):
        raise ConfigurationError("--phoenix-dataset needs --phoenix-url URL (or --phoenix URL)")
    if args.batch and not args.judge:
        raise ConfigurationError("--batch sends --judge's calls as provider batches: give --judge MODEL")
    if args.phoenix_url and args.phoenix_dataset is None:
        raise ConfigurationError("--phoenix-url is where --phoenix-dataset uploads: give --phoenix-dataset NAME")
    datasets = [path for path in args.files if is_dataset(path)]
    sources = sources_from_args(args, [path for path in args.files if path not in datasets])
    if not sources and not datasets:
        raise ConfigurationError(
            "nothing to read: give FILE, --jaeger/--tempo URL --service S, or --phoenix URL --project P")
    return selection, datasets, sources


def _read(datasets: list[str], sources: list[Any]) -> tuple[Any, str | None]:
    """Every input read into records; the first input error (the rest is still read)."""
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.dataset._collect import Collector
    from cp_observe.dataset._record import DatasetError

    collector = Collector()
    error = None
    for path in datasets:
        try:
            collector.read_dataset(path)
        except DatasetError as exc:
            error = error or str(exc)
    for source in sources:
        try:
            collector.read(source)
        except ReplayInputError as exc:
            error = error or str(exc)
    return collector.finish(), error
