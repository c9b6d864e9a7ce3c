"""Alerts at low sample rates: today's point-estimate rules vs the confidence-bound rules, on the same streams.

Simulated per-evaluation score streams go through the shipped rules on a **real Prometheus**: the streams are
written as OpenMetrics (the ``context_precision_score_{count,sum}`` and ``context_precision_score_squares_total``
counters a scrape would see), turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``, and a
Prometheus server over those blocks evaluates each alert's expression (recording rules inlined) as a range query
at every evaluation step. ``for`` is applied to the result exactly as the rule manager does (firing once the
expression has held at every evaluation for the ``for`` duration).

Streams, per data source:

- **bimodal AP**, like real retrievers: each evaluation's AP is Beta(9, 1) (mean 0.9) with probability p and
  Beta(1, 9) (mean 0.1) otherwise; p sets the MAP (0.65 when healthy, standard deviation ≈ 0.38);
- **traffic** 1, 10, 50 requests/s times **sampling** 1, 5, 10 % gives Poisson evaluation arrivals;
- **steady** streams stay at 0.65 for ``--steady-days``: every firing is a false alarm;
- **drop** streams of 0.1, 0.2, 0.3 alternate a healthy day and a day with four 2-hour drops (01:00, 07:00,
  13:00, 19:00), so the regression rule's baseline (the same hour a day earlier) is healthy; a drop is detected
  when the alert fires within its 2 hours, time to detect counts from the drop's start.

The "old" rules are the point-estimate rules this issue replaced (quoted below); the "new" ones are read from
``deploy/prometheus/rules/context_precision.rules.yml``. Both see the same blocks. Scrape and evaluation step:
60 s (shipped config: 15 s; the windows are 30 min and longer, so this changes little but makes days cheap).

Canary scenario (issue 23, ``ContextPrecisionVariantRegression``): each data source sends ``CANARY_SHARE`` of its
traffic to variant v2, the rest to v1, at the same rates and sample rates. **Equal** variants (both 0.65) for
``--steady-days``: every firing is a false alarm; **worse** v2 (0.65 - 0.1 or - 0.2) in the same four 2-hour
episodes a day on odd days: time to detect counts from the episode's start. The alert's arithmetic is evaluated
in Python from the per-variant count, sum and sum of squares over the rule's 30-minute window, by
``cp_observe/demo/_canary.py`` (the formula the rules generator writes in PromQL; ``tests/integration`` checks
the two agree on promtool's edges and on a live Prometheus), once per STEP, with the rule's ``for``.

    .venv/bin/python benchmarks/alerts/bench_alerts.py [--quick] [--steady-days N] [--drop-days N] [--seed N]
    .venv/bin/python benchmarks/alerts/bench_alerts.py --canary-only [--quick]   (the canary tables only; no Prometheus)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import block_network, machine_line, markdown_table

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy" / "prometheus" / "rules" / "context_precision.rules.yml"

RATES = (1, 10, 50)  # requests/s
SAMPLING = (0.01, 0.05, 0.10)
HEALTHY = 0.65
DROPS = (0.1, 0.2, 0.3)
STEP = 60  # seconds between scrapes and between rule evaluations
DAY = 86_400
EPISODE_HOURS = (1, 7, 13, 19)
EPISODE_S = 2 * 3600
DS = "gen_ai_data_source_id"

#: Today's rules before issue 13 (point estimates), verbatim but for layout.
OLD_RULES: dict[str, tuple[str, int]] = {
    "ContextPrecisionMAPDrop": (
        f"(sum by ({DS}) (rate(context_precision_score_sum[30m])) / sum by ({DS}) "
        f"(rate(context_precision_score_count[30m]))) < 0.5 and sum by ({DS}) "
        f"(increase(context_precision_score_count[30m])) >= 20",
        300,
    ),
    "ContextPrecisionMAPRegression": (
        f"(sum by ({DS}) (rate(context_precision_score_sum[1h])) / sum by ({DS}) "
        f"(rate(context_precision_score_count[1h]))) < 0.8 * (sum by ({DS}) "
        f"(rate(context_precision_score_sum[1h] offset 1d)) / sum by ({DS}) "
        f"(rate(context_precision_score_count[1h] offset 1d))) and sum by ({DS}) "
        f"(increase(context_precision_score_count[1h])) >= 20 and sum by ({DS}) "
        f"(increase(context_precision_score_count[1h] offset 1d)) >= 20",
        900,
    ),
}
MAP_ALERTS = ("ContextPrecisionMAPDrop", "ContextPrecisionMAPRegression")


# --- streams ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """One simulated data source."""

    name: str
    rate: int
    sampling: float
    drop: float  # 0 for a steady stream
    days: int

    @property
    def per_second(self) -> float:
        """Evaluations per second."""
        return self.rate * self.sampling

    def episodes(self, start: int) -> list[int]:
        """Start times of the drops (odd days, four a day)."""
        if not self.drop:
            return []
        return [start + d * DAY + h * 3600 for d in range(1, self.days, 2) for h in EPISODE_HOURS]

    def mean_at(self, t: int, start: int) -> float:
        """The MAP the stream is drawn with at time t."""
        if self.drop:
            day, into = divmod(t - start, DAY)
            if day % 2 == 1 and any(h * 3600 <= into < h * 3600 + EPISODE_S for h in EPISODE_HOURS):
                return HEALTHY - self.drop
        return HEALTHY


def _poisson(rng: random.Random, mu: float) -> int:
    """Poisson draw (Knuth, split into parts of mean <= 20 so exp(-mu) does not underflow)."""
    total = 0
    while mu > 0:
        part = min(mu, 20.0)
        mu -= part
        limit, k, prod = math.exp(-part), 0, rng.random()
        while prod > limit:
            k += 1
            prod *= rng.random()
        total += k
    return total


def _ap(rng: random.Random, good: float) -> float:
    """One average precision: Beta(9, 1) with probability ``good``, else Beta(1, 9)."""
    v = rng.random() ** (1 / 9)
    return v if rng.random() < good else 1.0 - v


BLOCK = 2 * 3600  # promtool re-reads its whole input once per 2-hour block: one file per block keeps it linear
FAMILIES = ("context_precision_score_count", "context_precision_score_sum", "context_precision_score_squares_total")


def backfill(data: Path, streams: Sequence[Stream], start: int, seed: int) -> int:
    """Draw every stream's evaluations and write its three counters, one sample per STEP, as TSDB blocks.

    Time-major: each 2-hour block is one OpenMetrics file (families contiguous, as the format requires) handed
    to ``promtool tsdb create-blocks-from openmetrics``. Returns the number of evaluations drawn.
    """
    rngs = [random.Random(seed * 1_000_003 + index) for index in range(len(streams))]
    state = [[0.0, 0.0, 0.0] for _ in streams]  # count, sum, squares (cumulative counters)
    labels = [f'{{{DS}="{stream.name}",job="sim"}}' for stream in streams]
    end = start + max(stream.days for stream in streams) * DAY
    part = data.parent / "block.om"
    for block in range(start, end + 1, BLOCK):
        lines: list[list[str]] = [[], [], []]
        for index, stream in enumerate(streams):
            rng, counters = rngs[index], state[index]
            for t in range(block, min(block + BLOCK, start + stream.days * DAY + 1), STEP):
                if t > start:
                    good = (stream.mean_at(t - STEP, start) - 0.1) / 0.8
                    for _ in range(_poisson(rng, stream.per_second * STEP)):
                        ap = _ap(rng, good)
                        counters[0] += 1
                        counters[1] += ap
                        counters[2] += ap * ap
                for family, out, value in zip(FAMILIES, lines, counters, strict=True):
                    out.append(f"{family}{labels[index]} {value:.6f} {t}\n")
        with part.open("w", encoding="utf-8") as handle:
            for family, out in zip(FAMILIES, lines, strict=True):
                kind = "counter" if family.endswith("_total") else "gauge"
                handle.write(f"# TYPE {family.removesuffix('_total')} {kind}\n")
                handle.writelines(out)
            handle.write("# EOF\n")
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(part), str(data)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    part.unlink()
    return int(sum(counters[0] for counters in state))


# --- Prometheus -----------------------------------------------------------------------------------------------


@contextmanager
def prometheus(data: Path) -> Iterator[str]:
    """A Prometheus server on a free loopback port over the blocks in ``data``; yields its base URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = data.parent / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1m}\n", encoding="utf-8")
    log = (data.parent / "prometheus.log").open("w", encoding="utf-8")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=10y",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", "--query.timeout=10m"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError((data.parent / "prometheus.log").read_text())
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def query_range(base: str, expr: str, start: int, end: int) -> dict[str, set[int]]:
    """Evaluate ``expr`` at every STEP in [start, end]: per data source, the times it returned a sample."""
    out: dict[str, set[int]] = {}
    chunk = 10_000 * STEP  # Prometheus refuses more than 11,000 points per series
    t = start
    while t <= end:
        stop = min(end, t + chunk)
        query = urllib.parse.urlencode({"query": expr, "start": t, "end": stop, "step": STEP})
        # POST: with the cascade's PPI++ half inlined, MAPDrop's expression is ~20 kB (a long URL for GET).
        request = urllib.request.Request(f"{base}/api/v1/query_range", data=query.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=900) as response:
            body = json.load(response)
        for series in body["data"]["result"]:
            out.setdefault(series["metric"][DS], set()).update(int(float(ts)) for ts, _ in series["values"])
        t = stop + STEP
    return out


def firing_times(true_at: set[int], for_s: int) -> list[int]:
    """Times at which an alert with this ``for`` is firing, given the times its expression held."""
    firing = []
    held_since: int | None = None
    for t in sorted(true_at):
        if held_since is None or t - STEP not in true_at:
            held_since = t
        if t - held_since >= for_s:
            firing.append(t)
    return firing


def inline(expr: str, records: dict[str, str]) -> str:
    """Replace recorded series by their expressions, until none is left."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(r) for r in sorted(records, key=len, reverse=True)) + r")\b")
    for _ in range(10):
        expanded = pattern.sub(lambda m: f"({records[m.group(1)]})", expr)
        if expanded == expr:
            return expr
        expr = expanded
    raise RuntimeError("recording rules nest too deep")


def new_rules() -> dict[str, tuple[str, int]]:
    """The shipped MAP alerts and LowVolume, recording rules inlined, with their ``for`` in seconds."""
    groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    records = {r["record"]: " ".join(r["expr"].split()) for g in groups for r in g["rules"] if "record" in r}
    rules = {}
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") in (*MAP_ALERTS, "ContextPrecisionLowVolume"):
                for_s = int(re.fullmatch(r"(\d+)m", rule["for"]).group(1)) * 60  # type: ignore[union-attr]
                rules[rule["alert"]] = (inline(" ".join(rule["expr"].split()), records), for_s)
    return rules


# --- canary (issue 23): one variant against the rest of its data source ------------------------------------------

CANARY_SHARE = 0.2  # of each data source's traffic goes to the canary variant v2
CANARY_DROPS = (0.1, 0.2)
CANARY_WINDOW_STEPS = 30 * 60 // STEP  # the rule's 30m window
CANARY_FOR_S = 10 * 60  # the rule's `for`


def canary_stream(stream: Stream, start: int, seed: int) -> list[int]:
    """The times ``ContextPrecisionVariantRegression`` fires for v2 on ``stream`` (v2 gets ``stream.drop``)."""
    from cp_observe.demo._canary import Sums, verdict

    rng = random.Random(seed)
    window: list[tuple[Sums, Sums]] = []
    held: set[int] = set()
    for t in range(start + STEP, start + stream.days * DAY + 1, STEP):
        parts = []
        for share, mean in ((1 - CANARY_SHARE, HEALTHY), (CANARY_SHARE, stream.mean_at(t - STEP, start))):
            good = (mean - 0.1) / 0.8
            scores = [_ap(rng, good) for _ in range(_poisson(rng, stream.per_second * share * STEP))]
            parts.append(Sums.of(scores))
        window.append((parts[0], parts[1]))
        if len(window) > CANARY_WINDOW_STEPS:
            window.pop(0)
        v1 = v2 = Sums(0, 0, 0)
        for a, b in window:
            v1, v2 = v1 + a, v2 + b
        if verdict(v2, v1 + v2).fires:
            held.add(t)
    return firing_times(held, CANARY_FOR_S)


def canary_table(rates: Sequence[int], samplings: Sequence[float], steady_days: int, drop_days: int,
                 seed: int) -> list[list[object]]:
    """One row per rate and sampling: v2's evaluations per window, false alarms per day, detection per drop."""
    start = 0
    rows: list[list[object]] = []
    for rate in rates:
        for sampling in samplings:
            cell = seed + 1_000 * rate + round(sampling * 100)  # rows with equal rate x sampling draw apart
            steady = Stream("canary", rate, sampling, 0.0, steady_days)
            per_window = steady.per_second * CANARY_SHARE * 1800
            alarms = len(episodes_of(canary_stream(steady, start, cell)))
            row: list[object] = [rate, f"{sampling:.0%}", f"{per_window:g}", _fmt_rate(alarms, steady_days)]
            for drop in CANARY_DROPS:
                stream = Stream("canary", rate, sampling, drop, drop_days)
                found, minutes = detection(canary_stream(stream, start, cell + 7), stream.episodes(start))
                row.append(_fmt_detect(found, len(stream.episodes(start)), minutes))
            rows.append(row)
    return rows


def _print_canary(rows: list[list[object]], steady_days: int, drop_days: int) -> None:
    print(f"\n### Canary: v2 ({CANARY_SHARE:.0%} of traffic) against the rest of its data source "
          f"(ContextPrecisionVariantRegression; equal {steady_days} d, drops {drop_days} d)\n")
    print(markdown_table(["req/s", "sampled", "v2 evals / 30m", "false alarms / day (equal variants)",
                          "v2 drop 0.1: detected, median min", "v2 drop 0.2: detected, median min"], rows))
    print("\nThe rule needs 20 scored evaluations on each side in 30 min and a gap shown to exceed 0.05 at 99 % "
          "(one-sided): a canary with fewer evaluations is not judged (0 detected), by design.")


# --- scoring ---------------------------------------------------------------------------------------------------


def episodes_of(firing: list[int]) -> list[int]:
    """Start times of firing episodes (a gap of more than one step ends one)."""
    starts = []
    for i, t in enumerate(firing):
        if i == 0 or t - firing[i - 1] > STEP:
            starts.append(t)
    return starts


def detection(firing: list[int], drops: list[int]) -> tuple[int, list[float]]:
    """How many drops were detected within their 2 hours, and the minutes each took."""
    minutes = []
    index = 0
    for begin in drops:
        while index < len(firing) and firing[index] <= begin:
            index += 1
        if index < len(firing) and firing[index] <= begin + EPISODE_S:
            minutes.append((firing[index] - begin) / 60)
    return len(minutes), minutes


def _fmt_rate(n: int, days: float) -> str:
    return f"{n / days:.2f} ({n})" if n else "0"


def _fmt_detect(found: int, total: int, minutes: list[float]) -> str:
    if not found:
        return f"0/{total}"
    return f"{found}/{total}, {statistics.median(minutes):.0f} min"


def main() -> int:
    """Run the simulation and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 steady days, 4 drop days")
    parser.add_argument("--steady-days", type=int, default=30)
    parser.add_argument("--drop-days", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--canary-only", action="store_true", help="only the canary tables (no Prometheus needed)")
    args = parser.parse_args()
    steady_days, drop_days = (4, 4) if args.quick else (args.steady_days, args.drop_days)
    if args.canary_only:
        print(f"# bench_alerts --canary-only: equal {steady_days} d, drops {drop_days} d, step {STEP}s, "
              f"seed {args.seed}")
        print(f"# {machine_line()}")
        _print_canary(canary_table(RATES, SAMPLING, steady_days, drop_days, args.seed), steady_days, drop_days)
        return 0
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print("needs prometheus and promtool on PATH (scripts/install-system-deps.sh)", file=sys.stderr)
        return 1

    streams = [
        Stream(f"r{rate}_s{round(sampling * 100)}_{'steady' if not drop else f'drop{round(drop * 100)}'}",
               rate, sampling, drop, drop_days if drop else steady_days)
        for rate in RATES for sampling in SAMPLING for drop in (0.0, *DROPS)
    ]  # fmt: skip
    blocked = block_network()  # the Prometheus server is on loopback; nothing else is reached
    longest = max(s.days for s in streams)
    start = (int(time.time()) // DAY - longest - 3) * DAY  # whole days, in the past
    rules = {"old": OLD_RULES, "new": new_rules()}
    print(f"# bench_alerts: {len(streams)} streams, steady {steady_days} d, drops {drop_days} d, step {STEP}s, "
          f"seed {args.seed}")  # fmt: skip
    print(f"# {machine_line()}")
    with tempfile.TemporaryDirectory(prefix="cp-bench-alerts-") as tmp:
        work = Path(tmp)
        began = time.perf_counter()
        drawn = backfill(work / "data", streams, start, args.seed)
        print(f"# drew {drawn:,} evaluations and backfilled them in {time.perf_counter() - began:.0f} s", flush=True)
        results: dict[tuple[str, str], dict[str, list[int]]] = {}
        with prometheus(work / "data") as base:
            for version, table in rules.items():
                for alert, (expr, for_s) in table.items():
                    began = time.perf_counter()
                    true_at = query_range(base, expr, start + STEP, start + longest * DAY)
                    results[(version, alert)] = {ds: firing_times(ts, for_s) for ds, ts in true_at.items()}
                    print(f"# {version} {alert}: {time.perf_counter() - began:.0f} s", flush=True)

    _print_tables(streams, results, start)
    _print_canary(canary_table(RATES, SAMPLING, steady_days, drop_days, args.seed), steady_days, drop_days)
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


def _print_tables(streams: list[Stream], results: dict[tuple[str, str], dict[str, list[int]]], start: int) -> None:
    steady = [s for s in streams if not s.drop]
    print("\n### False alarms per day on steady traffic (MAP 0.65; episodes in parentheses)\n")
    rows = []
    totals = {key: 0 for key in results}
    for s in steady:
        window_n = s.per_second * 1800
        row: list[object] = [s.rate, f"{s.sampling:.0%}", f"{window_n:g}"]
        for version in ("old", "new"):
            for alert in MAP_ALERTS:
                # The regression rule has no baseline on day 0: count from day 1 for both versions.
                since = start + (DAY if alert == "ContextPrecisionMAPRegression" else 0)
                days = s.days - (1 if alert == "ContextPrecisionMAPRegression" else 0)
                n = len([t for t in episodes_of(results[(version, alert)].get(s.name, [])) if t >= since])
                totals[(version, alert)] += n
                row.append(_fmt_rate(n, days))
        low = results[("new", "ContextPrecisionLowVolume")].get(s.name, [])
        row.append(f"{len(low) * STEP / (s.days * DAY):.0%}")
        rows.append(row)
    stream_days = sum(s.days for s in steady)
    rows.append(["all", "", "", *(f"{totals[(v, a)]} in {stream_days - (len(steady) if 'Regr' in a else 0)} d"
                                  for v in ("old", "new") for a in MAP_ALERTS), ""])  # fmt: skip
    print(markdown_table(["req/s", "sampled", "evals / 30m", "old MAPDrop", "old Regression", "new MAPDrop",
                          "new Regression", "new LowVolume firing"], rows))  # fmt: skip

    print("\n### Detection of drops from 0.65 (detected / drops, median minutes to fire; 2 h per drop)\n")
    rows = []
    for s in (s for s in streams if s.drop):
        drops = s.episodes(start)
        row = [s.rate, f"{s.sampling:.0%}", f"{s.per_second * 1800:g}", f"{s.drop:.1f} -> {HEALTHY - s.drop:.2f}"]
        for version in ("old", "new"):
            for alert in MAP_ALERTS:
                found, minutes = detection(results[(version, alert)].get(s.name, []), drops)
                row.append(_fmt_detect(found, len(drops), minutes))
        rows.append(row)
    print(markdown_table(["req/s", "sampled", "evals / 30m", "drop", "old MAPDrop", "old Regression", "new MAPDrop",
                          "new Regression"], rows))  # fmt: skip
    print("\nMAPDrop's line is 0.5: a drop of 0.1 (to 0.55) should not fire it; 0.2 and 0.3 cross it.")
    print("Regression (old: below 0.8 x yesterday; new: at least 0.05 below yesterday, 99 % one-sided) should "
          "fire on every drop.")


if __name__ == "__main__":
    sys.exit(main())
