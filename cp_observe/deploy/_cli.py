"""``cp-observe deploy write DIR``: this installed version's deploy assets, written to a directory.

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


def run(args: argparse.Namespace) -> int:
    """Write the assets; one line per tree on success, one error line on stderr otherwise."""
    from cp_observe.deploy._assets import write_assets

    try:
        written = write_assets(args.directory, force=args.force)
    except (CpObserveError, OSError) as exc:
        print(f"cp-observe deploy write: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} files under {args.directory} (deploy/, collectors/)")
    return 0
