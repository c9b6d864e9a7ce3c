"""The ``--batch`` options of the judging offline commands (``replay``, ``calibrate --judge``, ``dataset --judge``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["EXIT_BATCHES_OPEN", "add_batch_arguments", "batch_options", "batch_stopped"]

EXIT_BATCHES_OPEN = 3


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--batch`` and its companions."""
    group = parser.add_argument_group("batch judging (half price, results within the provider's window)")
    group.add_argument("--batch", action="store_true",
                       help="send the judge's calls as provider batches (openai/, azure/, anthropic/, gemini/)")
    group.add_argument("--batch-state", type=Path, metavar="DIR",
                       help="where the batches are kept for a resume (default: beside --output, FILE.batch)")
    group.add_argument("--batch-no-wait", action="store_true",
                       help="submit (or look at the open batches) and stop; run the same command again later")
    group.add_argument("--batch-poll-interval", type=float, default=30.0, metavar="S",
                       help="seconds between status polls while waiting (default 30)")
    group.add_argument("--batch-retry-failed", action="store_true",
                       help="submit again the requests an earlier batch failed or let expire")
    group.add_argument("--azure-batch-deployment", metavar="NAME",
                       help="the Azure OpenAI global-batch deployment [CP_OBSERVE_AZURE_BATCH_DEPLOYMENT]")


def batch_options(args: argparse.Namespace, state: Path | None = None) -> Any:
    """The ``BatchOptions`` of the parsed arguments (``state``: the command's default directory)."""
    from cp_observe._config._settings import Settings
    from cp_observe._errors import ConfigurationError
    from cp_observe.replay._batched import BatchOptions

    if args.batch_poll_interval <= 0:
        raise ConfigurationError("--batch-poll-interval must be > 0")
    deployment = args.azure_batch_deployment or Settings.resolve({}).azure_batch_deployment
    return BatchOptions(state=args.batch_state or state, wait=not args.batch_no_wait,
                        poll_s=args.batch_poll_interval, retry_failed=args.batch_retry_failed,
                        azure_deployment=deployment)


def batch_stopped(command: str, exc: BaseException) -> int:
    """Say why a batch run stopped (the batch API failed, or Ctrl-C) and that a rerun resumes; the exit code."""
    if isinstance(exc, KeyboardInterrupt):
        print(f"cp-observe {command}: interrupted; the submitted batches are kept: run the same command again to "
              "resume", file=sys.stderr)
        return EXIT_BATCHES_OPEN
    print(f"cp-observe {command}: the batch API failed: {exc}; what was submitted is kept: run the same command "
          "again to resume", file=sys.stderr)
    return 1
