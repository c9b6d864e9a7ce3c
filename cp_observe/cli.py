"""The ``cp-observe`` command: ``demo``, ``serve``, ``replay``, ``report``, ``dataset``, ``calibrate``, ``deploy``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]

#: Each command: its help line, and the module holding its ``add_arguments`` and ``run`` (in that order).
_COMMANDS = {
    "demo": ("run the bundled RAG demo through the hook and print the scores", "cp_observe.demo._cli"),
    "serve": ("score retrievals received over OTLP (behind a Collector)", "cp_observe.serve._cli"),
    "replay": ("score stored traces (files, Jaeger, Tempo, Phoenix) like live traffic", "cp_observe._cli._replay"),
    "report": ("write an HTML report of evaluations (MAP, ranks, worst retrievals)", "cp_observe._cli._report"),
    "calibrate": ("judge agreement with people's labels, and MAP corrected by them", "cp_observe._cli._calibrate"),
    "dataset": ("select failing retrievals from stored traces as a test set", "cp_observe._cli._dataset"),
    "deploy": ("write the dashboard, alert rules and Collector configs shipped; backfill the rules' records",
               "cp_observe.deploy._cli"),
}
#: The offline commands: their command lines sit in ``_cli/`` as ``add_<command>_arguments`` and ``run_<command>``,
#: and they take ``--log-format`` here (``serve`` takes it among its own options).
_OFFLINE = ("replay", "report", "calibrate", "dataset")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    from cp_observe import __version__
    from cp_observe._log import add_log_format_argument, log_to_stderr

    parser = argparse.ArgumentParser(prog="cp-observe", description="Live context precision of RAG retrieval.")
    parser.add_argument("--version", action="version", version=f"cp-observe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, module_name) in _COMMANDS.items():
        command = commands.add_parser(name, help=help_text)
        _entry(module_name, name, "add")(command)
        if name in _OFFLINE:
            add_log_format_argument(command)
    args = parser.parse_args(argv)
    if args.command not in _COMMANDS:
        parser.print_help()
        return 2
    run = _entry(_COMMANDS[args.command][1], args.command, "run")
    if args.command not in _OFFLINE:
        return int(run(args))
    restore = log_to_stderr(args.log_format)  # the library's warnings, as text or JSON lines
    try:
        return int(run(args))
    finally:
        restore()  # an in-process caller (a test) gets its logging set-up back


def _entry(module_name: str, command: str, which: str) -> Callable[[Any], Any]:
    """A command's ``add_arguments`` or ``run`` (offline ones: ``add_<command>_arguments``, ``run_<command>``)."""
    offline = command in _OFFLINE
    if which == "add":
        name = f"add_{command}_arguments" if offline else "add_arguments"
    else:
        name = f"run_{command}" if offline else "run"
    entry: Callable[[Any], Any] = getattr(importlib.import_module(module_name), name)
    return entry


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
