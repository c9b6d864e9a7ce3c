"""What the drop detection and canary rule groups cost a real Prometheus's rule manager, against the rules they replaced.

Two rule sets run over the same kind of history, each on its own Prometheus 2.42, in the same run:

- **baseline**: the rule files at ``--baseline-ref`` (git; default the commit before the window records), whose
  every window reads the raw counters, the baseline again at offsets 1..7 days. Their history is 8 days of raw
  counters at a 1-minute scrape (the score histogram's count and sum and the squares counter; in the "cascade"
  runs the cheap-plus-LLM cascade's nine PPI sums too; one replica per data source).
- **recorded**: the rule files in this tree: the 5-minute window from the raw counters, each longer window two
  recorded halves, the baseline group's pools the window records at ``offset 1d..7d``. Their history is
  synthesised: raw counters for the last RAW_MINUTES minutes at a 1-minute scrape (the rules read only the last
  5), and the window records written directly where the rules read them (each window's record half of the next
  window back, and every window's at the same time on each of the last 7 days; the canary's, which has no
  baseline days, only the first), for the run's length plus the 5-minute lookback, as a week of the rules' own
  evaluations would have left them. That keeps 1,000 data sources to a few million samples (about 9 million with
  the cascade); the rules read exactly what they would read in production.

Both are backfilled with ``promtool tsdb create-blocks-from openmetrics`` up to the minute the run starts: that
minute lies ahead while the history is written (sized from the samples, BACKFILL_RATE), and the run waits for it.
The groups' intervals are shortened to 15 s so that several evaluations are timed in a minute (an evaluation
costs the same at any interval). Prometheus's own metrics give each group's last duration (the median over the
run is reported). The **cost** is the rule-evaluation seconds per minute summed over the detection and canary
groups: each group's duration × 60 / its shipped interval (1 minute; 4 minutes for the canary's long windows'
group, 8 for the detection's baseline group).

    .venv/bin/python benchmarks/alerts/bench_rule_cost.py [--sources 10 100 1000] [--baseline-max 10]
        [--seconds 60] [--repeat 3] [--quick]
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
#: The commit before the window records: its detection rules read every window and baseline from raw counters.
BASELINE_REF = "0aa65b9"


def _pool_lead_s() -> int:
    """How far ahead of its evaluation the baseline group pools, in seconds (detection_rules.BASELINE_LEAD_MIN)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("detection_rules", RULES.parent / "detection_rules.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return int(module.BASELINE_LEAD_MIN) * 60


POOL_LEAD_S = _pool_lead_s()
SCRAPE_S = 60
DAYS = 8
TERMS = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")
EVAL_INTERVAL = "15s"
SETTLE_S = 30
WINDOWS = (5, 10, 20, 40, 80, 160, 320, 640, 1280)
RAW_MINUTES = 30  # the recorded rules' raw history: they read only the last 5 minutes (the rest are records)
BACKFILL_RATE = 10_000  # samples a second the backfill writes at least (Python and promtool), to size the lead
DS = "gen_ai_data_source_id"
SEGMENT = "retriever_version"
COSTED = ("detection", "canary")  # the groups the targets are about


def _labels(s: int, term: str | None) -> str:
    base = f'{DS}="kb{s}",instance="pod-1",job="rag-app",{SEGMENT}="v1"'
    return base + (f',term="{term}"' if term else ',stage="retrieval"')


def _raw_families(cascade: bool) -> list[tuple[str, str, tuple[str, ...] | None]]:
    families = [("context_precision_score_count", "gauge", None), ("context_precision_score_sum", "gauge", None),
                ("context_precision_score_squares", "counter", None),
                ("context_precision_cascade_sums", "counter", TERMS)]
    return families[: 4 if cascade else 3]


def _write_raw(handle, sources: int, start: int, end: int, cascade: bool) -> int:
    """Raw counters for every data source, one sample a SCRAPE_S from ``start`` to ``end``; the samples written."""
    written = 0
    times = range(start, end + 1, SCRAPE_S)
    for family, kind, terms in _raw_families(cascade):
        handle.write(f"# TYPE {family} {kind}\n")
        name = family + ("_total" if kind == "counter" else "")
        for s in range(sources):
            for term in terms or (None,):
                per_sample = 1.0 if term in (None, "count", "n") else 0.6
                labels = _labels(s, term)
                handle.writelines(f"{name}{{{labels}}} {(t - start) // SCRAPE_S * per_sample!r} {t}\n" for t in times)
                written += len(times)
    return written


def record_times(end: int, seconds: float, days: bool = True) -> dict[int, list[int]]:
    """Per window, the minutes at which the recorded rules read its record during a run that starts at ``end`` and
    lasts ``seconds`` after the settling time: half a window back (the chain reads the window that is half of the
    next one), and with ``days`` each baseline day back (every window) at the pools' time of day, POOL_LEAD_S
    ahead of the evaluation, with the 5-minute lookback."""
    span = range(-6 * 60, int(seconds) + SETTLE_S + 60, 60)
    out = {}
    for w in WINDOWS:
        backs = ([w * 60] if w != WINDOWS[-1] else []) + ([d * 86_400 - POOL_LEAD_S for d in range(1, 8)] if days
                                                           else [])
        out[w] = sorted({end - back + k for back in backs for k in span if end - back + k <= end})
    return out


def _write_records(handle, sources: int, times: dict[int, list[int]], halves: dict[int, list[int]],
                   cascade: bool) -> int:
    """The window records (detection: by data source; cascade: by term; canary: by stage and segment value) at
    ``times`` (per window; the canary, which has no baseline days, at ``halves``): the counts a 1-minute scrape of
    1 evaluation a minute gives (0.6 for sums)."""
    written = 0
    sets = [(f"{DS}_window:context_precision_score_{part}:window", part, None, False)
            for part in ("count", "sum", "squares")]
    sets += [(f"{DS}_stage_{SEGMENT}_window:context_precision_score_{part}:window", part, None, True)
             for part in ("count", "sum", "squares")]
    if cascade:
        sets.append((f"{DS}_term_window:context_precision_cascade_sums:window", None, TERMS, False))
    for name, part, terms, canary in sets:
        handle.write(f"# TYPE {name} gauge\n")
        for s in range(sources):
            for term in terms or (None,):
                per_minute = 1.0 if (term or part) in ("count", "n") else 0.6
                labels = f'{DS}="kb{s}"' + (f',stage="retrieval",{SEGMENT}="v1"' if canary else "") + \
                    (f',term="{term}"' if term else "")
                for w in WINDOWS:
                    value = repr(w * per_minute)
                    at = (halves if canary else times)[w]
                    handle.writelines(f'{name}{{{labels},window="{w}m"}} {value} {t}\n' for t in at)
                    written += len(at)
    return written


def history_samples(sources: int, cascade: bool, recorded: bool, seconds: float) -> int:
    """How many samples ``backfill`` writes (to size the lead before the run)."""
    families = 3 + (len(TERMS) if cascade else 0)
    if not recorded:
        return families * sources * (DAYS * 1440 + 1)
    times, halves = record_times(0, seconds), record_times(0, seconds, days=False)
    per_source = sum(len(t) for t in times.values()) * (3 + (len(TERMS) if cascade else 0))
    per_source += sum(len(t) for t in halves.values()) * 3
    return sources * (families * (RAW_MINUTES + 1) + per_source)


def backfill(data: Path, sources: int, end: int, cascade: bool, recorded: bool, seconds: float) -> int:
    """Write the history the rule set reads for ``sources`` data sources; the number of samples."""
    om = data.parent / "history.om"
    with om.open("w", encoding="utf-8") as handle:
        if recorded:
            written = _write_raw(handle, sources, end - RAW_MINUTES * 60, end, cascade)
            times = record_times(end, seconds)
            written += _write_records(handle, sources, times, record_times(end, seconds, days=False), cascade)
        else:
            written = _write_raw(handle, sources, end - DAYS * 86_400, end, cascade)
        handle.write("# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(data)],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    om.unlink()
    return written


def rule_files(recorded: bool, ref: str) -> dict[str, str]:
    """The rule files of a set by name: this tree's (recorded) or those at ``ref`` (baseline)."""
    if recorded:
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(RULES.glob("*.rules.yml"))}
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref, "deploy/prometheus/rules/"],
                            capture_output=True, text=True, check=True).stdout.split()
    return {Path(p).name: subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{p}"], capture_output=True,
                                         text=True, check=True).stdout for p in listed if p.endswith(".rules.yml")}


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


def measure(sources: int, seconds: float, cascade: bool, recorded: bool, ref: str) -> dict[str, dict[str, float]]:
    """Backfill, run Prometheus over one rule set, and sample the groups' costs for ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="cp-rule-cost-") as tmp:
        work = Path(tmp)
        # The history ends at the minute the run starts, in the future while it is written: Prometheus refuses rule
        # output older than its newest block, and a run that started long after the history ended would read
        # nothing in between (at 1,000 data sources the backfill takes minutes).
        lead = 30 + history_samples(sources, cascade, recorded, seconds) / BACKFILL_RATE
        end = (int(time.time() + lead) // 60 + 1) * 60
        began = time.perf_counter()
        written = backfill(work / "data", sources, end, cascade, recorded, seconds)
        print(f"# {sources} data sources{' with the cascade' if cascade else ''}, "
              f"{'recorded' if recorded else 'baseline'} rules: {written:,} samples backfilled in"
              f" {time.perf_counter() - began:.0f} s; {end - time.time():.0f} s left before the run", flush=True)
        if time.time() > end + 240:  # within the 5-minute lookback the run still reads the history's last samples
            print(f"# WARNING: the backfill ended {time.time() - end:.0f} s after the history: the last reads of the"
                  " run may find no record (lower BACKFILL_RATE)", flush=True)
        time.sleep(max(0.0, end - time.time()))
        files, shipped_interval = [], {}
        for name, text in rule_files(recorded, ref).items():
            rules = yaml.safe_load(text)
            for group in rules["groups"]:
                shipped_interval[group["name"]] = _seconds(group.get("interval", "1m"))
                group["interval"] = EVAL_INTERVAL
            copy = work / name
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
             "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
             # keep the backfilled 2-hour blocks as they are: compacting them would compete with the rules for the
             # cores while they are timed
             "--storage.tsdb.max-block-duration=2h"],
            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        durations: dict[str, list[float]] = {}
        last: dict[str, dict[str, float]] = {}
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError((work / "prometheus.log").read_text()) from None
                    time.sleep(0.3)
            time.sleep(SETTLE_S)  # the first evaluations also load the blocks' index into memory: not timed
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                time.sleep(int(EVAL_INTERVAL.rstrip("s")))
                last = group_metrics(base)
                for group, values in last.items():
                    if values.get("duration"):
                        durations.setdefault(group, []).append(values["duration"])
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
    return {group: {**last[group], "median": statistics.median(d), "evaluations": len(d),
                    "shipped_interval": shipped_interval.get(group, 60.0)}
            for group, d in durations.items()}


def _seconds(interval: str) -> float:
    unit = {"s": 1, "m": 60, "h": 3600}[interval[-1]]
    return float(interval[:-1]) * unit


def cost_per_minute(found: dict[str, dict[str, float]]) -> float:
    """Rule-evaluation seconds per minute over the detection and canary groups at their shipped intervals."""
    return sum(v["median"] * 60 / v["shipped_interval"] for g, v in found.items()
               if any(f".{name}." in f".{g}." for name in COSTED))


def main() -> int:
    """Measure each number of data sources, both rule sets where the baseline is affordable; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--baseline-max", type=int, default=10,
                        help="run the baseline rules only up to this many data sources (8 raw days each)")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the baseline rule files")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to sample each run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each case this many times, baseline and recorded alternating (the ratio's"
                             " spread between runs on a shared machine); the summary gives each run and the median")
    parser.add_argument("--quick", action="store_true", help="one data source, 30 s")
    args = parser.parse_args()
    if args.quick:
        args.sources, args.seconds = [1], 30.0
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print("needs prometheus and promtool on PATH (scripts/install-system-deps.sh)", file=sys.stderr)
        return 1
    blocked = block_network()
    print(f"# bench_rule_cost: 1-minute scrape, groups evaluated every {EVAL_INTERVAL}, costs at the shipped"
          f" intervals; baseline rules at {args.baseline_ref}")
    print(f"# {machine_line()}")
    groups, summary = [], []
    for sources in args.sources:
        for cascade in (False, True):
            ratios, per_source = [], []
            for run in range(1, args.repeat + 1):
                costs = {}
                for recorded in ((False, True) if sources <= args.baseline_max else (True,)):
                    found = measure(sources, args.seconds, cascade, recorded, args.baseline_ref)
                    label = "recorded" if recorded else "baseline"
                    costs[label] = cost_per_minute(found)
                    for group in sorted(found):
                        values = found[group]
                        if not any(f".{name}." in f".{group}." for name in COSTED):
                            continue
                        groups.append([sources, "yes" if cascade else "no", run, label, group,
                                       f"{values.get('rules', 0):.0f}", f"{values.get('samples', 0):,.0f}",
                                       f"{values['median'] * 1000:.1f} ms",
                                       f"{values['median'] / values['shipped_interval']:.1%}", values["evaluations"]])
                if "baseline" in costs:
                    ratios.append(costs["recorded"] / costs["baseline"])
                per_source.append(costs["recorded"] * 1000 / sources)
                summary.append([sources, "yes" if cascade else "no", f"{run}/{args.repeat}",
                                f"{costs['baseline'] * 1000:.0f} ms" if "baseline" in costs else "—",
                                f"{costs['recorded'] * 1000:.0f} ms", f"{ratios[-1]:.3f}×" if ratios else "—",
                                f"{per_source[-1]:.2f} ms"])
            if args.repeat > 1:
                summary.append([sources, "yes" if cascade else "no", "median", "", "",
                                f"{statistics.median(ratios):.3f}×" if ratios else "—",
                                f"{statistics.median(per_source):.2f} ms"])
    print()
    print(markdown_table(["data sources", "cascade", "run", "rules", "group", "rules in group", "samples written",
                          "median evaluation", "share of its interval", "evaluations timed"], groups))
    print()
    print(markdown_table(["data sources", "cascade", "run", "baseline cost / min", "recorded cost / min",
                          "recorded / baseline", "recorded per data source / min"], summary))
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
