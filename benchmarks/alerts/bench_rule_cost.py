"""What the shipped rule groups cost a real Prometheus's rule manager, per evaluation, as data sources grow.

Eight days of counters (the score histogram's count and sum and the squares counter, and, in the runs marked
"cascade", the cheap-plus-LLM cascade's nine PPI sums too; one replica per data source) are backfilled at a 15 s scrape interval up
to the current minute with ``promtool tsdb create-blocks-from openmetrics``; a Prometheus then evaluates the three
shipped rule files (their groups' interval shortened to 15 s so that many evaluations are timed in a minute; an
evaluation costs the same whatever its interval). Its own metrics give, per group, the duration of the last
evaluation (``prometheus_rule_group_last_duration_seconds``, the median over the run is reported) and the samples it
wrote. The baseline in the same run is the 30-minute group (``context_precision.recording``: one window, no
baseline days); the drop detection's and the canary's groups scan nine windows up to 1280m, the first against seven
days of offsets.

    .venv/bin/python benchmarks/alerts/bench_rule_cost.py [--sources 1 10] [--seconds 60] [--quick]

At the shipped 1-minute interval a group's share of one core is its duration / 60 s.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import block_network, machine_line, markdown_table

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules"
SCRAPE_S = 15
DAYS = 8
TERMS = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")
EVAL_INTERVAL = "15s"


def backfill(data: Path, sources: int, end: int, cascade: bool) -> int:
    """Write DAYS days of the series the rules read for ``sources`` data sources; the number of samples."""
    start = end - DAYS * 86_400
    times = range(start, end + 1, SCRAPE_S)
    om = data.parent / "history.om"
    written = 0
    with om.open("w", encoding="utf-8") as handle:
        families = [("context_precision_score_count", "gauge", None), ("context_precision_score_sum", "gauge", None),
                    ("context_precision_score_squares", "counter", None),
                    ("context_precision_cascade_sums", "counter", TERMS)][: 4 if cascade else 3]
        for family, kind, terms in families:
            handle.write(f"# TYPE {family} {kind}\n")
            name = family + ("_total" if kind == "counter" else "")
            for s in range(sources):
                base = f'gen_ai_data_source_id="kb{s}",instance="pod-1",job="rag-app",retriever_version="v1"'
                for term in terms or (None,):
                    labels = base + (f',term="{term}"' if term else ',stage="retrieval"')
                    per_sample = 1.0 if term in (None, "count", "n") else 0.6
                    handle.writelines(f"{name}{{{labels}}} {i * per_sample!r} {t}\n" for i, t in enumerate(times))
                    written += len(times)
        handle.write("# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(data)],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    om.unlink()
    return written


def group_metrics(base: str) -> dict[str, dict[str, float]]:
    """Per rule group: the last evaluation's duration (s) and samples, from Prometheus's own /metrics."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[str, float]] = {}
    for metric, key in (("prometheus_rule_group_last_duration_seconds", "duration"),
                        ("prometheus_rule_group_last_evaluation_samples", "samples"),
                        ("prometheus_rule_group_rules", "rules")):
        for match in re.finditer(rf'^{metric}{{rule_group="[^"]*;([^"]+)"}} (\S+)$', text, re.M):
            out.setdefault(match[1], {})[key] = float(match[2])
    return out


def measure(sources: int, seconds: float, cascade: bool) -> dict[str, dict[str, float]]:
    """Backfill, run Prometheus over the shipped rules, and sample the groups' costs for ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="cp-rule-cost-") as tmp:
        work = Path(tmp)
        end = int(time.time()) // 60 * 60
        began = time.perf_counter()
        written = backfill(work / "data", sources, end, cascade)
        print(f"# {sources} data sources{' with the cascade' if cascade else ''}: {written:,} samples backfilled in"
              f" {time.perf_counter() - began:.0f} s", flush=True)
        files = []
        for path in sorted(RULES.glob("*.rules.yml")):
            rules = yaml.safe_load(path.read_text(encoding="utf-8"))
            for group in rules["groups"]:
                group["interval"] = EVAL_INTERVAL
            copy = work / path.name
            copy.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
            files.append(str(copy))
        config = work / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"evaluation_interval": EVAL_INTERVAL},
                                          "rule_files": files}), encoding="utf-8")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = (work / "prometheus.log").open("w", encoding="utf-8")
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        durations: dict[str, list[float]] = {}
        last: dict[str, dict[str, float]] = {}
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError((work / "prometheus.log").read_text()) from None
                    time.sleep(0.3)
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                time.sleep(int(EVAL_INTERVAL.rstrip("s")))
                last = group_metrics(base)
                for group, values in last.items():
                    if values.get("duration"):
                        durations.setdefault(group, []).append(values["duration"])
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    return {group: {**last[group], "median": statistics.median(d), "evaluations": len(d)}
            for group, d in durations.items()}


def main() -> int:
    """Measure each number of data sources and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to sample each run")
    parser.add_argument("--quick", action="store_true", help="one data source, 30 s")
    args = parser.parse_args()
    if args.quick:
        args.sources, args.seconds = [1], 30.0
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print("needs prometheus and promtool on PATH (scripts/install-system-deps.sh)", file=sys.stderr)
        return 1
    blocked = block_network()
    print(f"# bench_rule_cost: {DAYS} days at a {SCRAPE_S} s scrape, groups evaluated every {EVAL_INTERVAL}")
    print(f"# {machine_line()}")
    rows = []
    for sources in args.sources:
        for cascade in (False, True):
            found = measure(sources, args.seconds, cascade)
            baseline = found.get("context_precision.recording", {}).get("median")
            for group in sorted(found):
                values = found[group]
                if not group.endswith(".recording"):
                    continue  # the alert groups read recorded series only: a millisecond or two
                ratio = f"{values['median'] / baseline:.1f}×" if baseline else "—"
                rows.append([sources, "yes" if cascade else "no", group, f"{values.get('rules', 0):.0f}",
                             f"{values.get('samples', 0):,.0f}",
                             f"{values['median'] * 1000:.1f} ms", ratio, f"{values['median'] / 60:.2%}",
                             values["evaluations"]])
    print()
    print(markdown_table(["data sources", "cascade", "group", "rules", "samples written", "median evaluation",
                          "vs the 30m group", "share of a core at 1m", "evaluations timed"], rows))
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
