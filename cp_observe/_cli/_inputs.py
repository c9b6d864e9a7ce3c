"""The trace-input options the offline commands share, and the sources they name (through ``_traces``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime

from cp_observe._traces._inputs import build_sources
from cp_observe._traces._source import Source
from cp_observe._traces._time import parse_time

__all__ = ["add_source_arguments", "sources_from_args", "time_option"]


def time_option(text: str) -> datetime:
    """``parse_time`` as an argparse ``type``: a bad value is a usage error naming the forms it takes."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    parser.add_argument("--since", type=time_option, help="only spans ending at or after this time")
    parser.add_argument("--until", type=time_option, help="only spans ending before this time")


def sources_from_args(args: argparse.Namespace, files: Sequence[str], *, phoenix: bool = True) -> list[Source]:
    """The sources the options name (``files`` as trace files); ``phoenix=False`` when ``--phoenix`` means labels.

    Raises:
        ConfigurationError: a query API without ``--service``, ``--phoenix`` without ``--project``.
        ReplayInputError: a file cannot be opened or its format is unknown.
    """
    return build_sources(files, format=getattr(args, "format", "auto"), jaeger=args.jaeger, tempo=args.tempo,
                         service=args.service, phoenix=args.phoenix if phoenix else None,
                         project=args.project, since=args.since, until=args.until)
