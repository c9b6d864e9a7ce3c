"""``cp-observe deploy write DIR``: this installed version's deploy assets, written to a directory; and
``cp-observe deploy backfill``: the alert rules' window records for past days, as TSDB blocks.

The dashboard, rules, Alertmanager route, Collector configs, compose files and Kubernetes manifests.
"""

from __future__ import annotations

import argparse
import sys

from cp_observe._errors import CpObserveError

__all__ = ["add_arguments", "run"]

_EPILOG = """\
Writes DIR/deploy/ (Grafana dashboard and provisioning, Prometheus config, alert rules and their promtool tests,
Alertmanager route, docker-compose files, Dockerfile, Kubernetes manifests) and DIR/collectors/ (the
OpenTelemetry Collector agent and gateway configs), exactly as this version of cp-observe ships them.
Exit status: 0 when written, 1 when a file exists (nothing is written; --force overwrites), 2 for bad options."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The deploy command's subcommands and options."""
    parser.description = "Write the deploy assets shipped with this version of cp-observe."
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="deploy_action", metavar="ACTION", required=True)
    write = actions.add_parser("write", help="write the deploy assets to DIR", epilog=_EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    write.add_argument("directory", metavar="DIR", help="directory to write deploy/ and collectors/ into")
    write.add_argument("--force", action="store_true", help="overwrite files that exist")
    backfill = actions.add_parser("backfill", help="write the alert rules' window records for past days as blocks",
                                  epilog=_BACKFILL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    backfill.add_argument("--url", required=True, help="the Prometheus (or Mimir query) URL holding the raw history")
    backfill.add_argument("--output-dir", required=True, metavar="DIR", help="where the TSDB blocks are written")
    backfill.add_argument("--days", type=float, default=None,
                          help="how many days back from --end (default 8: the 7 baseline days and the longest window)")
    backfill.add_argument("--end", type=int, default=None, help="Unix time of the last record (default: now)")
    backfill.add_argument("--rules", nargs="+", metavar="FILE",
                          help="the rule files whose window records to backfill (default: the shipped drop detection"
                               " and canary rules; pass your own when you regenerated them)")
    backfill.add_argument("--promtool", default="promtool", help="the promtool executable")


_BACKFILL_EPILOG = """\
Evaluates the drop detection's and the canary rules' window records over the past days, one pass per window
length (the 5-minute records as range queries against the Prometheus that holds the raw counters, each longer
window as its two recorded halves, as the rules add them), and writes TSDB blocks with promtool tsdb
create-blocks-from openmetrics. Without them, rules that are new compare with nothing for a week (then with the
days they have). Move the blocks into Prometheus's data directory (docker compose: the prometheus volume;
Kubernetes: the Prometheus pod's volume), or upload them to Mimir (mimirtool backfill). deploy/README.md: "The
first week".
Exit status: 0 when written, 1 on an error (promtool missing or failing), 2 for bad options."""


def run(args: argparse.Namespace) -> int:
    """The chosen action; exit status 0 on success, 1 with one error line on stderr otherwise."""
    if args.deploy_action == "backfill":
        return _run_backfill(args)
    from cp_observe.deploy._assets import write_assets

    try:
        written = write_assets(args.directory, force=args.force)
    except (CpObserveError, OSError) as exc:
        print(f"cp-observe deploy write: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} files under {args.directory} (deploy/, collectors/)")
    return 0


def _run_backfill(args: argparse.Namespace) -> int:
    """Backfill the window records; one line per block directory on success."""
    import time
    from pathlib import Path

    from cp_observe.deploy._backfill import DEFAULT_DAYS, backfill, shipped_rule_files

    end = args.end if args.end is not None else int(time.time()) // 60 * 60
    days = args.days if args.days is not None else DEFAULT_DAYS
    if days <= 0:
        print(f"cp-observe deploy backfill: --days must be positive, got {days}", file=sys.stderr)
        return 2
    try:
        texts = ([Path(f).read_text(encoding="utf-8") for f in args.rules] if args.rules
                 else shipped_rule_files())
        written = backfill(args.url.rstrip("/"), Path(args.output_dir), texts, start=end - int(days * 86_400),
                           end=end, promtool=args.promtool)
    except (CpObserveError, OSError) as exc:
        print(f"cp-observe deploy backfill: {exc}", file=sys.stderr)
        return 1
    for block in written:
        print(block)
    print(f"wrote {len(written)} blocks ({days:g} days up to {end})", file=sys.stderr)
    return 0
