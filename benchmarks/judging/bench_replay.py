"""``cp-observe replay`` on large OTLP/JSON-lines files: spans/s read and resident memory, over file sizes.

A file in the Collector ``file`` exporter's shape is generated under /tmp (agent + retrieval turns, five
300-character documents each, 200 turns per line) and deleted afterwards. Each size is replayed by
``python -m cp_observe.cli replay`` in a child process, sampled at 1 % with the offline judge (every span is
read and converted; 1 % of the turns are judged), while this process samples the child's RSS from /proc every
0.2 s. Constant memory shows as the same peak RSS for a small and a large file.

Baseline in the same run: a child that only reads the same file line by line and ``json.loads`` each line
(the floor any JSON-lines reader pays), with its RSS sampled the same way.

    .venv/bin/python benchmarks/judging/bench_replay.py              # 64 MB and 1024 MB (~15 min on 2 busy cores)
    .venv/bin/python benchmarks/judging/bench_replay.py --quick      # 16 MB and 64 MB
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import machine_line, markdown_table

_TURNS_PER_LINE = 200
_SPANS_PER_TURN = 2
_BASELINE = (
    "import json,sys\nn=0\nfor line in open(sys.argv[1],'rb'):\n    n+=len(json.loads(line)['resourceSpans'])\n"
    "print(n)"
)


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _turn(rng: random.Random, now_ns: int) -> list[dict[str, object]]:
    trace_id = f"{rng.getrandbits(128):032x}"
    agent_id, retrieval_id = f"{rng.getrandbits(64) | 1:016x}", f"{rng.getrandbits(64) | 1:016x}"
    question = f"how long are backups kept for account {rng.randrange(10**6)}"
    docs = [" ".join(rng.choice(("backup", "retention", "account", "restore", "days", "policy", "region"))
                     for _ in range(45))[:300] for _ in range(5)]
    retrieval = [_attr("gen_ai.operation.name", "retrieval"), _attr("openinference.span.kind", "RETRIEVER"),
                 _attr("gen_ai.data_source.id", "bench-kb"), _attr("gen_ai.retrieval.query.text", question),
                 _attr("input.value", question), _attr("context_precision.context.count", 5),
                 _attr("context_precision.sampled", True)]
    for i, doc in enumerate(docs):
        retrieval += [_attr(f"retrieval.documents.{i}.document.content", doc),
                      _attr(f"retrieval.documents.{i}.document.score", 1.0 - i / 10)]
    agent = [_attr("gen_ai.operation.name", "invoke_agent"), _attr("openinference.span.kind", "AGENT"),
             _attr("gen_ai.agent.name", "bench-agent"), _attr("input.value", question),
             _attr("output.value", f"backups are kept for {rng.randrange(90)} days after deletion"),
             _attr("context_precision.sampled", True)]
    return [
        {"traceId": trace_id, "spanId": retrieval_id, "parentSpanId": agent_id, "name": "retrieval bench-kb",
         "kind": 1, "startTimeUnixNano": str(now_ns + 1000), "endTimeUnixNano": str(now_ns + 2000),
         "attributes": retrieval, "status": {}},
        {"traceId": trace_id, "spanId": agent_id, "name": "invoke_agent bench-agent", "kind": 1,
         "startTimeUnixNano": str(now_ns), "endTimeUnixNano": str(now_ns + 3000), "attributes": agent, "status": {}},
    ]


def generate(path: Path, size_bytes: int, seed: int = 7) -> int:
    """Write at least ``size_bytes`` of OTLP/JSON lines; returns the number of spans written."""
    rng = random.Random(seed)
    resource = {"attributes": [_attr("service.name", "bench-app")]}
    written = spans = 0
    now = time.time_ns()
    with path.open("w", encoding="utf-8") as out:
        while written < size_bytes:
            turns = [span for _ in range(_TURNS_PER_LINE) for span in _turn(rng, now)]
            now += 10_000
            line = json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "cp_observe", "version": "bench"}, "spans": turns}]}]}, separators=(",", ":"))
            out.write(line + "\n")
            written += len(line) + 1
            spans += len(turns)
    return spans


def _run(command: list[str]) -> tuple[float, float, list[float], str]:
    """Run ``command``; returns (seconds, peak RSS MiB, RSS samples MiB, stdout)."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[float] = []
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        samples.append(int(line.split()[1]) / 1024)
        except OSError:
            pass
        time.sleep(0.2)
    out, err = child.communicate()
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"{command[:4]} failed ({child.returncode}): {err[-2000:]}")
    return seconds, max(samples, default=0.0), samples, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 MB and 64 MB instead of 64 MB and 1024 MB")
    parser.add_argument("--sizes-mb", type=int, nargs="+", help="file sizes to replay, in MB")
    parser.add_argument("--sample-rate", type=float, default=0.01)
    args = parser.parse_args()
    sizes = args.sizes_mb or ([16, 64] if args.quick else [64, 1024])
    print(machine_line())
    rows = []
    with tempfile.TemporaryDirectory(prefix="cp-replay-bench-", dir="/tmp") as tmp:
        for size in sizes:
            path = Path(tmp) / f"traces-{size}mb.jsonl"
            began = time.monotonic()
            spans = generate(path, size * 1024 * 1024)
            print(f"generated {path.stat().st_size / 2**20:.0f} MiB, {spans} spans in {time.monotonic() - began:.0f} s",
                  flush=True)
            base_s, base_rss, _, _ = _run([sys.executable, "-c", _BASELINE, str(path)])
            rows.append([f"{size} MB", "baseline: read + json.loads per line", f"{spans / base_s:,.0f}",
                         f"{base_s:.1f}", f"{base_rss:.0f}", "-"])
            output = Path(tmp) / "evaluations.jsonl"
            seconds, peak, samples, out = _run([
                sys.executable, "-m", "cp_observe.cli", "replay", str(path), "--judge", "lexical", "--sample-rate",
                str(args.sample_rate), "--output", str(output), "--quiet"])
            sampled = next((line.strip() for line in out.splitlines() if line.strip().startswith("sampled")), "")
            middle = samples[len(samples) // 2] if samples else 0.0
            rows.append([f"{size} MB", f"cp-observe replay (rate {args.sample_rate:g}, lexical)",
                         f"{spans / seconds:,.0f}", f"{seconds:.1f}", f"{peak:.0f}", f"{middle:.0f}"])
            print(f"  {sampled}", flush=True)
            path.unlink()
            output.unlink(missing_ok=True)
    print(markdown_table(["file", "reader", "spans/s", "seconds", "peak RSS MiB", "RSS at half-time MiB"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
