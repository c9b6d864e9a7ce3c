"""``cp-observe report``: options, the page, the terminal summary and the A/B exit status."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["EXIT_WORSE", "add_report_arguments", "run_report"]

#: ``report --compare``'s exit status when the second run is worse than the first (1 and 2 mean bad input).
EXIT_WORSE = 3


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
    from cp_observe._traces._files import TraceFile
    from cp_observe.calibrate._calibrate import calibrate
    from cp_observe.calibrate._judged import read_judged
    from cp_observe.calibrate._label_files import read_label_file

    judged = read_judged([TraceFile(path) for path in files])
    labels = [label for path in label_files for label in read_label_file(path)]
    return calibrate(judged.retrievals, labels, inputs=judged.inputs).as_dict()


def run_report(args: argparse.Namespace) -> int:
    """Run ``cp-observe report``; returns the exit code."""
    from cp_observe._errors import LabelError
    from cp_observe._traces._source import ReplayInputError
    from cp_observe.report._report import load_run, summary_text, verdict, write_report

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
        from cp_observe.calibrate._calibrate import calibration_lines

        for line in calibration_lines(calibration):
            print(line, flush=True)
    print(f"report written to {args.output}", flush=True)
    return EXIT_WORSE if comparison is not None and comparison.verdict == "worse" else 0
