"""The ``cp-observe`` command: ``demo``, ``serve``, ``replay``, ``report``, ``dataset``, ``calibrate``, ``deploy``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    from cp_observe import __version__

    parser = argparse.ArgumentParser(prog="cp-observe", description="Live context precision of RAG retrieval.")
    parser.add_argument("--version", action="version", version=f"cp-observe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser("demo", help="run the bundled RAG demo through the hook and print the scores")
    from cp_observe.demo._cli import add_arguments as add_demo_arguments

    add_demo_arguments(demo)

    serve = commands.add_parser("serve", help="score retrievals received over OTLP (behind a Collector)")
    from cp_observe.serve._cli import add_arguments as add_serve_arguments

    add_serve_arguments(serve)

    replay = commands.add_parser("replay", help="score stored traces (files, Jaeger, Tempo, Phoenix) like live traffic")
    from cp_observe._cli._replay import add_replay_arguments
    from cp_observe._cli._report import add_report_arguments

    add_replay_arguments(replay)
    report = commands.add_parser("report", help="write an HTML report of evaluations (MAP, ranks, worst retrievals)")
    add_report_arguments(report)
    calibrate = commands.add_parser("calibrate", help="judge agreement with people's labels, and MAP corrected by them")
    from cp_observe._cli._calibrate import add_calibrate_arguments

    add_calibrate_arguments(calibrate)

    dataset = commands.add_parser("dataset", help="select failing retrievals from stored traces as a test set")
    from cp_observe._cli._dataset import add_dataset_arguments

    add_dataset_arguments(dataset)

    deploy = commands.add_parser("deploy", help="write the dashboard, alert rules and Collector configs shipped;"
                                 " backfill the rules' records")
    from cp_observe.deploy._cli import add_arguments as add_deploy_arguments

    add_deploy_arguments(deploy)

    args = parser.parse_args(argv)
    if args.command == "demo":
        from cp_observe.demo._cli import run as run_demo

        return int(run_demo(args))
    if args.command == "serve":
        from cp_observe.serve._cli import run as run_serve

        return int(run_serve(args))
    if args.command == "replay":
        from cp_observe._cli._replay import run_replay

        return int(run_replay(args))
    if args.command == "report":
        from cp_observe._cli._report import run_report

        return int(run_report(args))
    if args.command == "dataset":
        from cp_observe._cli._dataset import run_dataset

        return int(run_dataset(args))
    if args.command == "calibrate":
        from cp_observe._cli._calibrate import run_calibrate

        return int(run_calibrate(args))
    if args.command == "deploy":
        from cp_observe.deploy._cli import run as run_deploy

        return int(run_deploy(args))
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
