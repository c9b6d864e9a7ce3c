"""What a SIGKILL costs `cp-observe serve`, and what durability costs in throughput: durable vs ``--no-durable``.

Both parts run ``python -m cp_observe.serve`` processes (``tests/crash_support.py``): an ``LLMJudge`` through
litellm against the loopback ``JudgeServer``, evaluations exported over OTLP/HTTP to a loopback OTLP
receiver, turns (lone retrievals, and agents with their retrieval) sent by the SDK's ``OTLPSpanExporter``
from several sender threads, each knowing which of its requests got a 200.

1. **Crashes**: under paced load, SIGKILL the service at random moments ``--kills`` times, restart it on the same
   data directory, and at the end drain it (SIGTERM). Per mode: requests accepted (targets that got a 200),
   scored exactly once, failed, dropped (from each process's ``/stats``), recovered (resumed by a restart),
   redelivered (evaluation spans exported again with the same span id), missing (accepted, never scored)
   and judged twice (two distinct evaluation span ids for one target). ``--no-durable`` shows the loss.
2. **Throughput**: no kills, senders as fast as they can: accepted turns per second until the last 200, and
   until the last evaluation, durable vs ``--no-durable`` in the same run.

    .venv/bin/python benchmarks/serve/bench_serve_crash.py            # 5 kills, 1,200 turns; throughput 2,400 turns
    .venv/bin/python benchmarks/serve/bench_serve_crash.py --quick    # 3 kills, 480 turns; throughput 960 turns
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.crash_support import EARLY, LATE, Report, crash_run  # noqa: E402 - after the path set-up


def _crash_row(mode: str, report: Report) -> str:
    dropped = report.total("dropped")
    cells = [mode, report.kills, len(report.accepted), report.scored_once, len(report.failed), dropped,
             report.total("recovered"), sum(int((s.get("durable") or {}).get("redelivered", 0)) for s in report.stats),
             len(report.missing), len(report.twice), f"{report.seconds:.1f}"]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _throughput_row(mode: str, report: Report) -> str:
    accepted = len(report.accepted)
    cells = [mode, accepted, f"{report.send_seconds:.2f}", f"{accepted / report.send_seconds:.0f}",
             f"{report.seconds:.2f}", f"{accepted / report.seconds:.0f}", len(report.missing)]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    """Run both parts and print two markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 kills and fewer turns")
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--seed", type=int, default=22)
    args = parser.parse_args(argv)
    kills = args.kills if args.kills is not None else 3 if args.quick else 5
    turns = args.turns if args.turns is not None else 480 if args.quick else 1200
    windows = [EARLY if i % 3 == 1 else LATE for i in range(kills)]
    with tempfile.TemporaryDirectory(prefix="bench-serve-crash-") as scratch:
        root = Path(scratch)
        crashes = {mode: crash_run(root / f"crash-{mode}", turns_total=turns, batch=8, kills=windows,
                                   durable=mode == "durable", seed=args.seed, pace_s=0.3)
                   for mode in ("durable", "no-durable")}
        print(f"## Crashes: {kills} SIGKILLs under load, {turns} turns ({turns} targets), batches of 8, 2 senders\n")
        print("| mode | kills | accepted | scored once | failed | dropped | recovered | redelivered | missing "
              "| judged twice | s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for mode, report in crashes.items():
            print(_crash_row(mode, report))
        many = turns * 2
        throughput = {mode: crash_run(root / f"load-{mode}", turns_total=many, batch=32, kills=(),
                                      durable=mode == "durable", senders=4)
                      for mode in ("durable", "no-durable")}
        print(f"\n## Throughput: {many} turns in batches of 32 from 4 senders, no kills\n")
        print("| mode | accepted | s to last 200 | turns/s accepted | s to last evaluation | turns/s scored "
              "| missing |")
        print("|---|---|---|---|---|---|---|")
        for mode, report in throughput.items():
            print(_throughput_row(mode, report))
    durable = crashes["durable"]
    return 0 if not durable.missing and not durable.twice else 1


if __name__ == "__main__":
    sys.exit(main())
