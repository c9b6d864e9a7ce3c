"""Drop detection at the statistical limit: the shipped scan rules, the rules they replaced, and the oracle.

Per-evaluation AP streams shaped like production go through three detectors on the same evaluations:

- **new**: ``ContextPrecisionMAPRegression`` as shipped (``deploy/prometheus/detection_rules.py``): every minute,
  windows of 5 min doubling to 1280 min, each against
  the same window at the same time of day on the last 7 days, z = (drop - margin) / SE, fires when the largest z
  exceeds the family's threshold;
- **old**: the fixed 30-minute rules it replaced, ``ContextPrecisionMAPDrop`` (99 % upper bound below 0.5, for
  5m) and the former ``ContextPrecisionMAPRegression`` (30m against the same hour a day earlier, margin 0.05 at
  99 %, for 10m), quoted in ``old_rules``;
- **oracle**: Page's CUSUM that knows the pre-change mean at every minute, the standard deviation and the drop,
  with Lorden's threshold log(evaluations a month): at most one false alarm a month. No detector at that rate is
  faster on average (``cp_observe/_stats/_sequential.py``).

Streams (``healthy_mean``, ``traffic``, ``draw``): bimodal AP (Beta(9, 1) with probability p, else
1 - Beta(9, 1); SD ~0.38), MAP 0.65 +- 0.05 over the day (the query mix) and +- 0.02 over the week; traffic
tenfold between the quietest and busiest minute of the day, weekends at 60 %, and bursts (about one a day, 10 to
40 min at 3x); mean rate 1, 10 or 50 req/s times sampling 1, 5 or 10 %. Steady streams (no change) count false
alarms after the baseline's first week; changes (steps of 0.1, 0.2, 0.3 and a drift of 0.1 over 6 h) begin at a
random minute of the day after a healthy week, and count as caught when a detector fires within a day.

The big grid evaluates the rules' arithmetic in Python (``scan_z``: the same expression from the same counters at
the same evaluations, one a minute, the baseline group's every 4, windows and baselines built from the window
records as the rules build them: ``recorded_windows``). ``--crosscheck`` backfills a subset into a **real Prometheus**
(``promtool tsdb create-blocks-from openmetrics``, then the window records by ``cp-observe deploy backfill``),
evaluates the shipped recording group's z for every window there as range queries, and prints the largest
difference from Python and whether the firing minutes agree.

The canary tables (``ContextPrecisionVariantRegression``: one variant, 20 % of the traffic, against the rest of its
data source) run the canary scan's arithmetic (``deploy/prometheus/canary_rules.py``; ``canary_scan_z``) on the same
production-like streams, with the fixed 30-minute rule it replaced and an oracle CUSUM on the variant's own
evaluations.

    .venv/bin/python benchmarks/alerts/bench_alerts.py [--quick] [--months N] [--episodes N] [--seed N] [--crosscheck]
    .venv/bin/python benchmarks/alerts/bench_alerts.py --crosscheck-only
    .venv/bin/python benchmarks/alerts/bench_alerts.py --canary-only [--quick]
    .venv/bin/python benchmarks/alerts/bench_alerts.py --late-only [--quick]
    .venv/bin/python benchmarks/alerts/bench_alerts.py --phases-only [--quick] [--phase-episodes N]

``--late-only`` records the cascade's streams under the judge's latency (``draw_cascade(late=...)``: an LLM-judged
evaluation reaches the counters when the LLM answers, as the library emits it) and scans them with and without the
rules' ``--llm-offset``: ``late_rows``.
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
from types import ModuleType

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import block_network, machine_line, markdown_table
from _oracle import OracleCusum, lorden_threshold

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy" / "prometheus" / "rules" / "context_precision.rules.yml"
DETECTION_RULES_FILE = ROOT / "deploy" / "prometheus" / "rules" / "context_precision_detection.rules.yml"
DETECTION_GENERATOR = ROOT / "deploy" / "prometheus" / "detection_rules.py"
CANARY_GENERATOR = ROOT / "deploy" / "prometheus" / "canary_rules.py"

RATES = (1, 10, 50)  # requests/s
SAMPLING = (0.01, 0.05, 0.10)
HEALTHY = 0.65
DROPS = (0.1, 0.2, 0.3)
STEP = 60  # seconds between scrapes and between rule evaluations
DAY = 86_400
EPISODE_HOURS = (1, 7, 13, 19)
EPISODE_S = 2 * 3600
DS = "gen_ai_data_source_id"

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


def backfill(data: Path, named: dict[str, np.ndarray], start: int) -> None:
    """Write each data source's three counters (cumulative per-minute sums), one sample a minute, as TSDB blocks.

    Time-major: each 2-hour block is one OpenMetrics file (families contiguous, as the format requires) handed to
    ``promtool tsdb create-blocks-from openmetrics``. Sample i is the counter after minute i - 1, at start + 60 i.
    """
    cums = {name: np.concatenate([np.zeros((3, 1)), np.cumsum(sums, axis=1)], axis=1) for name, sums in named.items()}
    samples = max(c.shape[1] for c in cums.values())
    part = data.parent / "block.om"
    per_block = BLOCK // STEP
    for first in range(0, samples, per_block):
        with part.open("w", encoding="utf-8") as handle:
            for k, family in enumerate(FAMILIES):
                kind = "counter" if family.endswith("_total") else "gauge"
                handle.write(f"# TYPE {family.removesuffix('_total')} {kind}\n")
                for name, cum in cums.items():
                    labels = f'{{{DS}="{name}",job="sim"}}'
                    handle.writelines(f"{family}{labels} {float(cum[k, i])!r} {start + i * STEP}\n"
                                      for i in range(first, min(first + per_block, cum.shape[1])))
            handle.write("# EOF\n")
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(part), str(data)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    part.unlink()


# --- production-like streams, the rules' arithmetic in Python, the oracle ---------------------------------------

MINUTE = 60
PER_DAY = DAY // MINUTE  # minutes a day
WEEK_MIN = 7 * PER_DAY
DAILY_SWING = 0.05  # MAP over the day (the query mix), +-
WEEKLY_SWING = 0.02  # MAP over the week, +-
TRAFFIC_RANGE = 10.0  # busiest / quietest minute of the day
BURST_EVERY_MIN = 1440.0  # a burst starts about once a day ...
BURST_MINUTES = (10, 40)  # ... lasts this long ...
BURST_FACTOR = 3.0  # ... at this many times the traffic
DRIFT_MINUTES = 6 * 60  # a drift reaches its full drop over 6 h
DETECT_LIMIT_MIN = 24 * 60  # a change counts as caught if the alert fires within a day
HISTORY_DAYS = 7  # the baseline's days
LEAD_DAYS = HISTORY_DAYS + 1  # healthy days before anything is judged: every baseline window lies within the data
MONTH_DAYS = 30


def _detection_rules() -> ModuleType:
    """deploy/prometheus/detection_rules.py: the shipped rules' constants (one place for them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("detection_rules", DETECTION_GENERATOR)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def healthy_mean(minutes: np.ndarray, phase: float) -> np.ndarray:
    """The patterned MAP at these minutes: 0.65 +- 0.05 over the day, +- 0.02 over the week."""
    day = 2 * np.pi * (minutes / PER_DAY + phase)
    week = 2 * np.pi * (minutes / WEEK_MIN + phase / 7)
    return HEALTHY + DAILY_SWING * np.sin(day) + WEEKLY_SWING * np.sin(week)


def traffic(minutes: np.ndarray, per_minute: float, rng: np.random.Generator, phase: float) -> np.ndarray:
    """Expected evaluations per minute: tenfold over the day (mean ``per_minute``), weekends at 60 %, bursts."""
    alpha = math.log(TRAFFIC_RANGE) / 2
    shape = np.exp(alpha * np.sin(2 * np.pi * (minutes / PER_DAY + phase)))
    shape /= np.i0(alpha)  # the mean of exp(alpha sin) over a day
    weekday = ((minutes // PER_DAY) + round(phase * 7)) % 7
    shape *= np.where(weekday >= 5, 0.6, 1.16)  # weekends quieter; the week averages to ~1
    bursts = np.ones_like(shape)
    for begin in np.flatnonzero(rng.random(len(minutes)) < 1 / BURST_EVERY_MIN):
        bursts[begin : begin + rng.integers(*BURST_MINUTES)] = BURST_FACTOR
    return per_minute * shape * bursts


def draw(means: np.ndarray, expected: np.ndarray, rng: np.random.Generator,
         cascade: tuple[float, float] | None = None) -> np.ndarray:
    """Per minute: count, sum and sum of squares of bimodal AP (Beta(9, 1) w.p. p, else 1 - Beta(9, 1)).

    With ``cascade`` = (llm_share, agreement), the scores are what the library records where the cheap-plus-LLM
    cascade runs: the LLM judge's AP on a uniform ``llm_share`` of the evaluations, the cheap judge's on the rest;
    the cheap judge gives the LLM's AP with probability ``agreement``, else an AP of its own drawn at the healthy
    MAP (so it sees ``agreement`` of any drop).
    """
    counts = rng.poisson(expected)
    total = int(counts.sum())
    v = rng.beta(9, 1, total)
    good = (np.repeat(means, counts) - 0.1) / 0.8
    ap = np.where(rng.random(total) < good, v, 1 - v)
    if cascade is not None:
        share, agreement = cascade
        own = rng.beta(9, 1, total)
        own = np.where(rng.random(total) < (HEALTHY - 0.1) / 0.8, own, 1 - own)
        cheap = np.where(rng.random(total) < agreement, ap, own)
        ap = np.where(rng.random(total) < share, ap, cheap)
    minute = np.repeat(np.arange(len(counts)), counts)
    out = np.zeros((3, len(counts)))
    out[0] = counts
    out[1] = np.bincount(minute, ap, len(counts))
    out[2] = np.bincount(minute, ap * ap, len(counts))
    return out


def ap_sigma(means: np.ndarray) -> np.ndarray:
    """The standard deviation of one AP at these MAPs (the oracle knows it)."""
    p = (means - 0.1) / 0.8
    second = p * 90 / 110 + (1 - p) * (1 - 2 * 0.9 + 90 / 110)
    return np.sqrt(second - means * means)


def recorded_windows(cum: np.ndarray, rules: ModuleType) -> dict[int, np.ndarray]:
    """Every window record at every minute (columns of ``cum``, the cumulative sums), as the rules build them.

    The 5-minute record is ``increase(x[5m])``, which at a scrape-aligned evaluation is the counter at t minus the
    counter at t - 5 (Prometheus 2.x reads the closed range: both samples are in it, nothing is extrapolated); each
    longer window W is the W/2 record at t plus the same record at t - W/2 (``offset``). NaN where the chain reaches
    before the data: the rules have no record there.
    """
    out: dict[int, np.ndarray] = {}
    first = rules.WINDOWS[0]
    rec = np.full(cum.shape, np.nan)
    rec[:, first:] = cum[:, first:] - cum[:, :-first]
    out[first] = rec
    for half, w in zip(rules.WINDOWS, rules.WINDOWS[1:]):
        prev = out[half]
        rec = np.full(cum.shape, np.nan)
        rec[:, half:] = prev[:, half:] + prev[:, :-half]
        out[w] = rec
    return out


def _window_and_baseline(records: np.ndarray, at: np.ndarray, days: int, every: int = 1, lag: int = 0,
                         lead: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One window's record at ``at`` and the pooled records on each of the last ``days`` days (the rules' baseline:
    a day without a record is left out of the pool; NaN where no day has one), as the baseline group last wrote it:
    it runs every ``every`` minutes (on the minutes divisible by it) and pools the time of day ``lead`` minutes
    ahead of its evaluation, so at ``at`` it holds the pool of the last such minute plus ``lead``. ``lag``
    minutes: the window record that much before ``at`` and the pool of the records that much before each day's of
    that minute (the rules' ``offset`` and ``:baseline_early`` under --llm-offset)."""
    window = records[:, at - lag]
    base = np.zeros_like(window)
    present = np.zeros(len(at), dtype=bool)
    pooled_at = at - at % every + lead - lag
    for d in range(1, days + 1):
        back = pooled_at - d * PER_DAY
        ok = back >= 0
        day = np.full_like(window, np.nan)
        day[:, ok] = records[:, back[ok]]
        have = ~np.isnan(day[0])
        base[:, have] += day[:, have]
        present |= have
    base[:, ~present] = np.nan
    return window, base


def _long_scan(rules: ModuleType) -> tuple[tuple[int, ...], int]:
    """(the windows the rules' long group computes, its interval in minutes): the canary's generator has one; the
    drop detection's computes every window every minute."""
    return tuple(getattr(rules, "LONG_WINDOWS", ())), int(getattr(rules, "LONG_EVERY_MIN", 1))


def evaluated_at(at: np.ndarray, w: int, rules: ModuleType) -> np.ndarray:
    """The minutes whose evaluation of window ``w`` the rules hold at minutes ``at``.

    The recording group computes its windows every minute: ``at`` itself. The long group computes the longer ones
    every LONG_EVERY_MIN minutes (on the minutes divisible by it), and the alert group reads the z it wrote last
    until the next: its window record and its pool as of that minute (the baseline group runs on the same ones)."""
    windows, every = _long_scan(rules)
    return at - at % every if w in windows else at


def read_lag(lag: int, w: int, rules: ModuleType) -> int:
    """How far back an ``offset`` of ``lag`` minutes on window ``w``'s records reads: ``lag`` on the records written
    every minute; on the long group's, its evaluation at or before, so ``lag`` rounded up to a multiple of its
    interval (the window record ``offset`` lag, and the baseline group's pool of them ``offset 1d`` + lag ..)."""
    windows, every = _long_scan(rules)
    return -(-lag // every) * every if w in windows else lag


def weekly_shift(records: dict[int, np.ndarray], at: np.ndarray, rules: ModuleType) -> tuple[np.ndarray, np.ndarray]:
    """The rules' weekly shift of the baseline and its variance at minutes ``at`` (0 where they have none).

    Over the longest window: the record ``offset`` BASELINE_DAYS days (the same weekday a week ago) against the
    pool's mean, times sd^2 / (sd^2 + var(gap)) with sd the level SD, where that day holds MIN_COUNT evaluations.
    """
    rec = records[rules.WINDOWS[-1]]
    _, (big_n, big_s, big_q) = _window_and_baseline(rec, at, rules.BASELINE_DAYS, rules.BASELINE_EVERY_MIN,
                                                    lead=rules.BASELINE_LEAD_MIN)
    # the baseline group's, on its own minutes, at its pool's time of day
    back = at - at % rules.BASELINE_EVERY_MIN + rules.BASELINE_LEAD_MIN - rules.BASELINE_DAYS * PER_DAY
    then = np.full((3, len(at)), np.nan)
    then[:, back >= 0] = rec[:, back[back >= 0]]
    with np.errstate(divide="ignore", invalid="ignore"):
        pool = big_s / big_n
        gap = then[1] / then[0] - pool
        gap_var = np.maximum(big_q / big_n - pool**2, rules.VAR_FLOOR) * (1 / then[0] - 1 / big_n)
        tau2 = rules.LEVEL_SD**2
        ok = (then[0] >= rules.MIN_COUNT) & ~np.isnan(gap) & ~np.isnan(gap_var)
        shift = np.where(ok, gap * tau2 / (tau2 + gap_var), 0.0)
        shift_var = np.where(ok, gap_var * (tau2 * tau2) / (tau2 + gap_var) ** 2, 0.0)
    return shift, shift_var


def scan_z(per_minute: np.ndarray, at: np.ndarray, rules: ModuleType, weekly: bool = True) -> np.ndarray:
    """The rules' z per window at minutes ``at`` (rows: windows), from per-minute sums; NaN under the minimum.

    Windows and baselines are the window records (``recorded_windows``): the half-window chain and the records at
    ``offset 1d..7d``, as the rules evaluate them, the pool's mean moved by the weekly shift (``weekly_shift``;
    ``weekly=False``: the pool alone, the rules before the shift). Every window is the minute's; the pools and the
    weekly shift are the baseline group's, as of its last evaluation.
    """
    cum = np.concatenate([np.zeros((3, 1)), np.cumsum(per_minute, axis=1)], axis=1)  # cum[:, t] = up to minute t
    records = recorded_windows(cum, rules)
    shift, shift_var = weekly_shift(records, at, rules) if weekly else (0.0, 0.0)
    out = np.full((len(rules.WINDOWS), len(at)), np.nan)
    for row, w in enumerate(rules.WINDOWS):
        (n, s, _), (big_n, big_s, big_q) = _window_and_baseline(records[w], evaluated_at(at, w, rules),
                                                                rules.BASELINE_DAYS, rules.BASELINE_EVERY_MIN,
                                                                lead=rules.BASELINE_LEAD_MIN)
        with np.errstate(divide="ignore", invalid="ignore"):
            pool = big_s / big_n
            var = np.maximum(big_q / big_n - pool**2, rules.VAR_FLOOR)
            z = (pool + shift - s / n - rules.MARGIN) / np.sqrt(var * (1 / n + 1 / big_n) + shift_var
                                                                 + rules.LEVEL_SD**2)
            keep = (n >= rules.MIN_COUNT) & (big_n >= rules.MIN_COUNT)
        out[row] = np.where(keep, z, np.nan)
    return out


def old_rules(per_minute: np.ndarray, at: np.ndarray) -> dict[str, np.ndarray]:
    """The rules this change replaced, held (before ``for``) at minutes ``at``: MAPDrop and the 30m regression."""
    cum = np.concatenate([np.zeros((3, 1)), np.cumsum(per_minute, axis=1)], axis=1)

    def window(end: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, s, q = cum[:, end] - cum[:, np.maximum(end - w, 0)]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = s / n
            se = np.sqrt(np.maximum(q / n - mean**2, 0) / np.maximum(n - 1, 1))
        return n, mean, se

    n, mean, se = window(at, 30)
    nb, meanb, seb = window(np.maximum(at - PER_DAY, 0), 60)
    with np.errstate(invalid="ignore"):
        drop_held = (mean + 2.33 * se < 0.5) & (n >= 20)
        regression_held = ((meanb - mean) - 2.33 * np.sqrt(se**2 + seb**2) > 0.05) & (n >= 20) & (nb >= 20) \
            & (at >= PER_DAY)
    return {"MAPDrop": drop_held, "MAPRegression": regression_held}


def first_firing(held: np.ndarray, for_steps: int) -> int | None:
    """Index of the first evaluation at which an alert with ``for`` of ``for_steps`` evaluations fires."""
    run = 0
    for i, h in enumerate(held):
        run = run + 1 if h else 0
        if run > for_steps:
            return i
    return None


def firing_episodes(held: np.ndarray, for_steps: int) -> int:
    """How many separate firing episodes (a new one after the alert resolved) ``held`` gives."""
    episodes, run = 0, 0
    for h in held:
        run = run + 1 if h else 0
        if run == for_steps + 1:
            episodes += 1
    return episodes


def oracle_delay(per_minute: np.ndarray, means: np.ndarray, drop: float, threshold: float) -> int | None:
    """Minutes until the oracle CUSUM (started at the change: Lorden's worst case) fires, or None within a day."""
    cusum = OracleCusum(drop=drop, threshold=threshold)
    sigma = ap_sigma(means)
    for minute in range(min(per_minute.shape[1], DETECT_LIMIT_MIN)):
        if cusum.update(per_minute[0, minute], per_minute[1, minute], means[minute], sigma[minute]):
            return minute + 1
    return None


def oracle_alarms(per_minute: np.ndarray, means: np.ndarray, drop: float, threshold: float) -> int:
    """The oracle CUSUM's false alarms on a steady stream."""
    cusum = OracleCusum(drop=drop, threshold=threshold)
    sigma = ap_sigma(means)
    return sum(cusum.update(per_minute[0, m], per_minute[1, m], means[m], sigma[m]) for m in range(len(means)))


def poisson_upper(k: int, level: float = 0.95) -> float:
    """The one-sided upper confidence bound of a Poisson mean after observing ``k`` events."""
    lo, hi = 0.0, 10.0 + 10 * k
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _poisson_cdf(k, mid) > 1 - level else (lo, mid)
    return hi


def _poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for a Poisson mean ``mean``."""
    term = cdf = math.exp(-mean)
    for i in range(1, k + 1):
        term *= mean / i
        cdf += term
    return cdf


@dataclass(frozen=True)
class Cell:
    """One traffic level and sample rate: mean evaluations per minute over a week."""

    rate: int
    sampling: float

    @property
    def per_minute(self) -> float:
        """Mean scored evaluations per minute."""
        return self.rate * self.sampling * 60

    @property
    def month_evaluations(self) -> float:
        """Scored evaluations in a month: the oracle's ARL0 for one false alarm a month."""
        return self.per_minute * MONTH_DAYS * PER_DAY


CHANGES = (("step", 0.1), ("step", 0.2), ("step", 0.3), ("drift", 0.1))


def change_shape(kind: str, drop: float, minutes: int) -> np.ndarray:
    """The drop at each minute after the change began: a step, or a linear drift over DRIFT_MINUTES."""
    if kind == "step":
        return np.full(minutes, drop)
    return drop * np.minimum(np.arange(1, minutes + 1) / DRIFT_MINUTES, 1.0)


def steady_cell(cell: Cell, days: int, seed: int, rules: ModuleType) -> dict[str, object]:
    """False alarms on a patterned stream with no change: new rule, old rules, oracles (after the first week)."""
    rng = np.random.default_rng(seed)
    phase = rng.random()
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    sums = draw(means, traffic(minutes, cell.per_minute, rng, phase), rng)
    at = np.arange(LEAD_DAYS * PER_DAY, days * PER_DAY + 1)
    z = scan_z(sums, at, rules)
    with np.errstate(invalid="ignore"):
        held = np.nanmax(np.where(np.isnan(z), -np.inf, z), axis=0) > rules.Z
    old = old_rules(sums, at)
    tail = slice(LEAD_DAYS * PER_DAY, None)
    threshold = lorden_threshold(cell.month_evaluations)
    return {
        "days": days - LEAD_DAYS,
        "new": firing_episodes(held, 0),
        "old MAPDrop": firing_episodes(old["MAPDrop"], 5),
        "old MAPRegression": firing_episodes(old["MAPRegression"], 10),
        "oracle 0.1": oracle_alarms(sums[:, tail], means[tail], 0.1, threshold),
        "oracle 0.2": oracle_alarms(sums[:, tail], means[tail], 0.2, threshold),
    }


def change_cell(cell: Cell, episodes: int, seed: int, rules: ModuleType) -> dict[tuple[str, float], dict[str, list]]:
    """Per change: each detector's delay (minutes, None if not within a day) on ``episodes`` changes.

    One healthy stream of LEAD_DAYS + ``episodes`` days; episode i begins at a random minute of day
    LEAD_DAYS + i, where the stream is redrawn with the change for a day (the healthy draw stays the history of
    later episodes). The detectors see the same evaluations.
    """
    rng = np.random.default_rng(seed)
    phase = rng.random()
    days = LEAD_DAYS + episodes + 1
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    expected = traffic(minutes, cell.per_minute, rng, phase)
    healthy = draw(means, expected, rng)
    threshold = lorden_threshold(cell.month_evaluations)
    out: dict[tuple[str, float], dict[str, list]] = {c: {"new": [], "window": [], "old MAPDrop": [],
                                                         "old MAPRegression": [], "oracle": []} for c in CHANGES}
    for i in range(episodes):
        begin = (LEAD_DAYS + i) * PER_DAY + int(rng.integers(PER_DAY))
        after = slice(begin, begin + DETECT_LIMIT_MIN)
        for kind, drop in CHANGES:
            changed_means = means[after] - change_shape(kind, drop, DETECT_LIMIT_MIN)
            sums = healthy[:, : begin + DETECT_LIMIT_MIN].copy()
            sums[:, after] = draw(changed_means, expected[after], rng)
            at = np.arange(begin + 1, begin + DETECT_LIMIT_MIN + 1)
            z = scan_z(sums, at, rules)
            zmax = np.where(np.isnan(z), -np.inf, z)
            held = zmax.max(axis=0) > rules.Z
            fired = first_firing(held, 0)
            record = out[(kind, drop)]
            record["new"].append(None if fired is None else fired + 1)
            record["window"].append(None if fired is None else rules.WINDOWS[int(zmax[:, fired].argmax())])
            lead = np.arange(begin - 30, begin + DETECT_LIMIT_MIN + 1)  # the `for` may start before the change
            old = old_rules(sums, lead)
            for name, for_steps in (("MAPDrop", 5), ("MAPRegression", 10)):
                f = first_firing(old[name], for_steps)
                record[f"old {name}"].append(None if f is None or lead[f] > begin + DETECT_LIMIT_MIN
                                             else max(int(lead[f]) - begin, 1))
            record["oracle"].append(oracle_delay(sums[:, after], means[after], drop, threshold))
    return out


PHASES = 8  # weekly phases at which the phase table's changes begin: every 21 h across the week
PHASE_DROP = 0.1


def week_position(minutes: np.ndarray | int, phase: float) -> np.ndarray | float:
    """Where in the week's rhythm (0 to 1: ``healthy_mean``'s weekly sine) these minutes fall; it also fixes the time
    of day (a week is seven days)."""
    return ((np.asarray(minutes) / PER_DAY + phase) / 7) % 1


def phase_cell(cell: Cell, episodes: int, seed: int, rules: ModuleType) -> dict[str, list[list[int | None]]]:
    """Delays of a 0.1 step beginning at each of PHASES weekly phases: the rules, the pool alone (the rules before
    the weekly shift) and the oracle, ``episodes`` per phase (one a week, within 30 min of the phase).

    One healthy stream of LEAD_DAYS + 7 ``episodes`` + 2 days; episode (e, k) begins in week e after the lead
    where the weekly position is k / PHASES, and the stream is redrawn with the step for a day.
    """
    rng = np.random.default_rng(seed)
    phase = rng.random()
    days = LEAD_DAYS + 7 * episodes + 2
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    expected = traffic(minutes, cell.per_minute, rng, phase)
    healthy = draw(means, expected, rng)
    threshold = lorden_threshold(cell.month_evaluations)
    out: dict[str, list[list[int | None]]] = {k: [[] for _ in range(PHASES)] for k in ("new", "pool", "oracle")}
    for e in range(episodes):
        week = (LEAD_DAYS + 7 * e) * PER_DAY
        for k in range(PHASES):
            ahead = ((k / PHASES - float(week_position(week, phase))) % 1) * 7 * PER_DAY
            begin = week + int(round(ahead)) + int(rng.integers(-30, 31))
            after = slice(begin, begin + DETECT_LIMIT_MIN)
            sums = healthy[:, : begin + DETECT_LIMIT_MIN].copy()
            sums[:, after] = draw(means[after] - PHASE_DROP, expected[after], rng)
            at = np.arange(begin + 1, begin + DETECT_LIMIT_MIN + 1)
            for key, weekly in (("new", True), ("pool", False)):
                fired = _fired(scan_z(sums, at, rules, weekly), rules)
                out[key][k].append(None if fired is None else fired + 1)
            out["oracle"][k].append(oracle_delay(sums[:, after], means[after], PHASE_DROP, threshold))
    return out


def phase_rows(cells: Sequence[Cell], episodes: int, seed: int, rules: ModuleType) -> list[list[object]]:
    """Per cell: the median delay per weekly phase (rules, and the oracle's in parentheses), the worst phase's
    ratio to the oracle's median at that phase, the pool alone's, and the caught counts."""
    rows = []
    for cell in cells:
        began = time.perf_counter()
        d = phase_cell(cell, episodes, seed * 1_000 + cell.rate * 100 + round(cell.sampling * 100) + 3, rules)
        med = {key: [_median(d[key][k]) for k in range(PHASES)] for key in d}

        def worst(key: str) -> str:
            ratios = [(n / o, k) for k, (n, o) in enumerate(zip(med[key], med["oracle"], strict=True)) if n and o]
            missed = sum(v is None for k in range(PHASES) for v in d[key][k])
            if not ratios:
                return "—"
            ratio, k = max(ratios)
            return f"{ratio:.1f}× (phase {k}/{PHASES})" + (f", {missed} missed" if missed else "")

        def slowest(key: str) -> str:
            k = max(range(PHASES), key=lambda k: med[key][k] or math.inf)
            return f"{(med[key][k] or math.nan) / (med['oracle'][k] or math.nan):.1f}× ({_minutes(med[key][k])})"

        rows.append([cell.rate, f"{cell.sampling:.0%}",
                     *(f"{_minutes(n)} ({_minutes(o)})" for n, o in zip(med["new"], med["oracle"], strict=True)),
                     worst("new"), slowest("new"), worst("pool"), slowest("pool")])
        print(f"# phases {cell.rate} req/s x {cell.sampling:.0%}: {time.perf_counter() - began:.0f} s", flush=True)
    return rows


def _print_phases(rows: list, episodes: int) -> None:
    print(f"\n### A {PHASE_DROP} step by the weekly phase at the change: median delay, rules (oracle), "
          f"{episodes} per phase\n")
    levels = [f"{k}/{PHASES} ({WEEKLY_SWING * math.sin(2 * math.pi * k / PHASES):+.3f})" for k in range(PHASES)]
    print(markdown_table(["req/s", "sampled", *levels, "worst phase / oracle", "slowest phase / oracle",
                          "pool alone: worst phase / oracle", "pool alone: slowest phase / oracle"], rows))
    print("\nPhase k/8: the change begins k/8 of the way through the week's rhythm (in parentheses: the weekly "
          "swing's level there against the week's mean; a week is seven days, so each phase also falls at its own "
          "time of day). 'worst phase': the largest ratio of the rules' median to the oracle's median at the same "
          "phase; 'slowest phase': the phase of the largest median delay; 'pool alone': the rules without the "
          "weekly shift (the baseline the 7-day pool) on the same evaluations.")


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
    """Replace recorded series by their expressions, until none is left.

    A read of a record restricted to some windows (``{window=~"5m|10m"}``: a group reads records that hold every
    window with its own windows' matcher, so as to compute those alone) is replaced without its matcher: every
    operation between the records matches on data source and window, and the window records, which are not
    inlined, keep theirs, so the expression holds the same windows (the crosscheck compares which windows each
    side judges). A matcher on any other label would change more than that, and is refused."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(r) for r in sorted(records, key=len, reverse=True))
                         + r")\b(\{[^}]*\})?")

    def expand(match: re.Match[str]) -> str:
        if match[2] and not WINDOW_MATCHER.fullmatch(match[2]):
            raise ValueError(f"a recorded series read with a matcher other than its windows': {match[0]}")
        return f"({records[match[1]]})"

    for _ in range(10):
        expanded = pattern.sub(expand, expr)
        if expanded == expr:
            return expr
        expr = expanded
    raise RuntimeError("recording rules nest too deep")


WINDOW_RECORD = re.compile(r":window$")
WINDOW_MATCHER = re.compile(r'\{window=~?"[^"]*"\}')
PLAIN_Z = "gen_ai_data_source_id_window:context_precision_score_plain:drop_z"


def z_expr() -> str:
    """The shipped rules' z for every window as one PromQL expression: the recorded series inlined, except the
    window records themselves, which the crosscheck backfills (``cp-observe deploy backfill``) as an upgrade does.

    Every window's z is the recording group's; the pools are the baseline group's, held between its evaluations."""
    groups = {g["name"]: g for g in yaml.safe_load(DETECTION_RULES_FILE.read_text(encoding="utf-8"))["groups"]}

    def records(group: str) -> dict[str, str]:
        return {rule["record"]: " ".join(rule["expr"].split()) for rule in groups[group]["rules"]
                if "record" in rule and not WINDOW_RECORD.search(rule["record"])}

    def held(expr: str, group: str) -> str:
        """``expr`` as a group with an interval longer than the minute last wrote it: evaluated on the minutes
        divisible by its interval (the subquery's steps are aligned to them), the latest of those at or before
        each minute."""
        every = groups[group]["interval"]
        return f"last_over_time(({expr})[{every}:{every}])"

    baseline = {record: held(expr, "context_precision.detection.baseline")
                for record, expr in records("context_precision.detection.baseline").items()}
    # The minute group reads the baseline group's records through last_over_time over a little more than its
    # interval: the value it wrote last, which the held expression is.
    last = re.compile(r"last_over_time\(((?:" + "|".join(re.escape(r) for r in baseline)
                      + r")(?:\{[^}]*\})?)\[\d+m\]\)")
    # The score series' z: the crosscheck's streams run no cascade, so the alert reads this one (inlining the
    # chosen record would also inline the PPI++ branch, a hundred times longer and empty here).
    minute = {**baseline, **{record: last.sub(r"\1", expr)
                             for record, expr in records("context_precision.detection.recording").items()}}
    return inline(minute[PLAIN_Z], minute)


# --- canary: one variant against the rest of its data source, at the same stage ---------------------------------

CANARY_SHARE = 0.2  # of each data source's traffic goes to the canary variant v2
CANARY_CHANGES = (("step", 0.1), ("step", 0.2), ("step", 0.3), ("drift", 0.1))
OLD_CANARY_WINDOW, OLD_CANARY_FOR = 30, 10  # the fixed-window rule the scan replaced: 30m, for 10m


def _canary_rules() -> ModuleType:
    """deploy/prometheus/canary_rules.py: the shipped canary rules' constants (one place for them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("canary_rules", CANARY_GENERATOR)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _windowed(per_minute: np.ndarray, at: np.ndarray, w: int) -> np.ndarray:
    """Count, sum and squares over the last ``w`` minutes at minutes ``at`` (``increase`` on scrape-aligned samples)."""
    cum = np.concatenate([np.zeros((3, 1)), np.cumsum(per_minute, axis=1)], axis=1)
    return cum[:, at] - cum[:, np.maximum(at - w, 0)]


def canary_scan_z(value: np.ndarray, rest: np.ndarray, at: np.ndarray, rules: ModuleType) -> np.ndarray:
    """The canary rules' z of ``value`` against ``rest`` per window (rows) at minutes ``at``; NaN where not judged.

    The rules' arithmetic (``cp_observe/_stats/_canary_scan.gap_z``) vectorised: the stage's variance over the
    window from both sides' sums, SE = sqrt(max(var, floor) (1/n + 1/n_rest) + gap_sd^2), z = (gap - margin) / SE.
    The long group's windows are as of its last evaluation (``evaluated_at``), as the drop detection's.
    """
    out = np.full((len(rules.WINDOWS), len(at)), np.nan)
    for row, w in enumerate(rules.WINDOWS):
        held = evaluated_at(at, w, rules)
        n, s, _ = _windowed(value, held, w)
        rn, rs, _ = _windowed(rest, held, w)
        tn, ts, tq = _windowed(value + rest, held, w)
        with np.errstate(divide="ignore", invalid="ignore"):
            var = np.maximum(tq / tn - (ts / tn) ** 2, rules.VAR_FLOOR)
            z = (rs / rn - s / n - rules.MARGIN) / np.sqrt(var * (1 / n + 1 / rn) + rules.GAP_SD**2)
        out[row] = np.where((n >= rules.MIN_COUNT) & (rn >= rules.MIN_COUNT), z, np.nan)
    return out


def old_canary_held(value: np.ndarray, rest: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The fixed-window rule the scan replaced, before its ``for``: 30m, Welch at 99 %, margin 0.05, 20 a side."""
    def side(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, s, q = _windowed(sums, at, OLD_CANARY_WINDOW)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = s / n
            se = np.sqrt(np.maximum(q / n - mean**2, 0) / np.maximum(n - 1, 1))
        return n, mean, se

    n, mean, se = side(value)
    rn, rmean, rse = side(rest)
    with np.errstate(invalid="ignore"):
        return ((rmean - mean) - 2.33 * np.sqrt(se**2 + rse**2) > 0.05) & (n >= 20) & (rn >= 20)


def _canary_parts(cell: Cell, days: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The patterned MAP per minute and the expected evaluations per minute of v2 and of the rest (same shape)."""
    phase = rng.random()
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    expected = traffic(minutes, cell.per_minute, rng, phase)  # one shape: the variants share the traffic's rhythm
    return means, CANARY_SHARE * expected, (1 - CANARY_SHARE) * expected


def canary_steady(cell: Cell, days: int, seed: int, rules: ModuleType) -> dict[str, int]:
    """False-alarm episodes on equal variants with the daily and weekly patterns: scan and old rule, both values."""
    rng = np.random.default_rng(seed)
    means, v2_expected, v1_expected = _canary_parts(cell, days, rng)
    v2, v1 = draw(means, v2_expected, rng), draw(means, v1_expected, rng)
    at = np.arange(1, days * PER_DAY + 1)
    out = {"new": 0, "old": 0}
    for value, rest in ((v2, v1), (v1, v2)):
        z = canary_scan_z(value, rest, at, rules)
        out["new"] += firing_episodes(np.where(np.isnan(z), -np.inf, z).max(axis=0) > rules.Z, 0)
        out["old"] += firing_episodes(old_canary_held(value, rest, at), OLD_CANARY_FOR)
    threshold = lorden_threshold(cell.month_evaluations * CANARY_SHARE)
    out["oracle 0.1"] = oracle_alarms(v2, means, 0.1, threshold)
    return out


def canary_changes(cell: Cell, episodes: int, seed: int, rules: ModuleType) -> dict[tuple[str, float], dict]:
    """Per change of v2: delays (minutes; None if not within a day) of the scan, the old rule and the oracle.

    The oracle is Page's CUSUM on v2's evaluations alone, knowing v2's pre-change MAP at every minute (the rest's
    infinitely precise), the AP's standard deviation and the drop, with Lorden's threshold for one false alarm a
    month of v2's evaluations: no detector of v2's gap at that rate is faster on average.
    """
    rng = np.random.default_rng(seed)
    days = 1 + episodes + 1
    means, v2_expected, v1_expected = _canary_parts(cell, days, rng)
    v2_healthy, v1 = draw(means, v2_expected, rng), draw(means, v1_expected, rng)
    threshold = lorden_threshold(cell.month_evaluations * CANARY_SHARE)
    out: dict[tuple[str, float], dict] = {c: {"new": [], "window": [], "old": [], "oracle": []}
                                          for c in CANARY_CHANGES}
    for i in range(episodes):
        begin = (1 + i) * PER_DAY + int(rng.integers(PER_DAY))  # the scan needs no history: a day of lead is plenty
        after = slice(begin, begin + DETECT_LIMIT_MIN)
        for kind, drop in CANARY_CHANGES:
            v2 = v2_healthy[:, : begin + DETECT_LIMIT_MIN].copy()
            v2[:, after] = draw(means[after] - change_shape(kind, drop, DETECT_LIMIT_MIN), v2_expected[after], rng)
            rest = v1[:, : begin + DETECT_LIMIT_MIN]
            at = np.arange(begin + 1, begin + DETECT_LIMIT_MIN + 1)
            z = np.where(np.isnan(zz := canary_scan_z(v2, rest, at, rules)), -np.inf, zz)
            fired = first_firing(z.max(axis=0) > rules.Z, 0)
            record = out[(kind, drop)]
            record["new"].append(None if fired is None else fired + 1)
            record["window"].append(None if fired is None else rules.WINDOWS[int(z[:, fired].argmax())])
            lead = np.arange(begin - OLD_CANARY_FOR, begin + DETECT_LIMIT_MIN + 1)
            f = first_firing(old_canary_held(v2, rest, lead), OLD_CANARY_FOR)
            record["old"].append(None if f is None or lead[f] > begin + DETECT_LIMIT_MIN
                                 else max(int(lead[f]) - begin, 1))
            record["oracle"].append(oracle_delay(v2[:, after], means[after], drop, threshold))
    return out


def canary_grid(cells: Sequence[Cell], months: float, episodes: int, seed: int, rules: ModuleType
                ) -> tuple[list, list]:
    """False-alarm rows (per value per month, 95 % bound) and detection rows for every cell."""
    alarm_rows, detect_rows = [], []
    for cell in cells:
        cell_seed = seed * 1_000 + cell.rate * 100 + round(cell.sampling * 100) + 17
        days = round(months * MONTH_DAYS)
        steady = canary_steady(cell, days, cell_seed, rules)
        per_value_month = MONTH_DAYS / days / 2  # both values are judged, each against the other
        alarm_rows.append([cell.rate, f"{cell.sampling:.0%}", f"{cell.per_minute * CANARY_SHARE * PER_DAY:,.0f}",
                           *(f"{steady[k] * per_value_month:.2f} (≤ {poisson_upper(steady[k]) * per_value_month:.2f})"
                             for k in ("new", "old")),
                           f"{steady['oracle 0.1'] * 2 * per_value_month:.2f}"])
        for (kind, drop), record in canary_changes(cell, episodes, cell_seed + 1, rules).items():
            oracle, new = record["oracle"], record["new"]
            within = sum(1 for o, n in zip(oracle, new, strict=True)
                         if n is not None and n <= 3 * (o if o is not None else DETECT_LIMIT_MIN))
            med_o, med_n = _median(oracle), _median(new)
            windows = [w for w in record["window"] if w is not None]
            detect_rows.append([
                cell.rate, f"{cell.sampling:.0%}", f"{kind} {drop:.1f}",
                f"{sum(o is not None for o in oracle)}/{episodes}, {_minutes(med_o)}",
                f"{sum(n is not None for n in new)}/{episodes}, {_minutes(med_n)}",
                f"{med_n / med_o:.1f}×" if med_o and med_n else "—", f"{within}/{episodes}",
                f"{statistics.mode(windows)}m" if windows else "—",
                f"{sum(v is not None for v in record['old'])}/{episodes}, {_minutes(_median(record['old']))}",
            ])  # fmt: skip
    return alarm_rows, detect_rows


def _print_canary(alarm_rows: list, detect_rows: list, months: float, episodes: int) -> None:
    print(f"\n### Canary: v2 ({CANARY_SHARE:.0%} of traffic) against the rest of its data source, equal variants "
          f"with the daily and weekly patterns ({months:g} months per cell): false alarms per value per month "
          "(95 % upper bound)\n")
    print(markdown_table(["req/s", "sampled", "v2 evals / day", "new (scan)", "old (30m, 99 %, for 10m)",
                          "oracle δ=0.1 (v2)"], alarm_rows))
    print(f"\n### Canary: v2 drops from a patterned 0.65, the rest stays: caught within a day, median delay "
          f"({episodes} per row)\n")
    print(markdown_table(["req/s", "sampled", "v2 change", "oracle", "new", "new / oracle", "new within 3× oracle",
                          "new: usual window", "old (30m)"], detect_rows))
    print("\nThe oracle is Page's CUSUM on v2's evaluations alone, knowing v2's pre-change MAP at every minute, the "
          "AP's standard deviation and the drop, threshold log(v2's evaluations a month); the rules must also "
          "estimate the rest's MAP from the rest's evaluations (4× v2's here), which the oracle gets for free. "
          "Both values are judged (each against the other), so a data source with two values has twice the "
          "per-value rate. A drift counts from its start.")


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


def _median(values: list[int | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _minutes(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f} min" if value < 120 else f"{value / 60:.1f} h"


def grid(cells: Sequence[Cell], months: float, episodes: int, seed: int, rules: ModuleType) -> tuple[list, list]:
    """False-alarm rows and detection rows for every cell (seeds derived from ``seed`` and the cell)."""
    alarm_rows, detect_rows = [], []
    for cell in cells:
        cell_seed = seed * 1_000 + cell.rate * 100 + round(cell.sampling * 100)
        began = time.perf_counter()
        days = LEAD_DAYS + round(months * MONTH_DAYS)
        steady = steady_cell(cell, days, cell_seed, rules)
        per_month = MONTH_DAYS / steady["days"]  # type: ignore[operator]
        row: list[object] = [cell.rate, f"{cell.sampling:.0%}", f"{cell.per_minute * PER_DAY:,.0f}"]
        for key in ("new", "old MAPDrop", "old MAPRegression", "oracle 0.1", "oracle 0.2"):
            k = steady[key]
            row.append(f"{k * per_month:.2f} (≤ {poisson_upper(k) * per_month:.2f})")  # type: ignore[operator]
        alarm_rows.append(row)
        changes = change_cell(cell, episodes, cell_seed + 1, rules)
        for (kind, drop), record in changes.items():
            oracle, new = record["oracle"], record["new"]
            within = sum(1 for o, n in zip(oracle, new, strict=True)
                         if n is not None and n <= 3 * (o if o is not None else DETECT_LIMIT_MIN))
            med_o, med_n = _median(oracle), _median(new)
            ratio = f"{med_n / med_o:.1f}×" if med_o and med_n else "—"
            windows = [w for w in record["window"] if w is not None]
            detect_rows.append([
                cell.rate, f"{cell.sampling:.0%}", f"{kind} {drop:.1f}",
                f"{sum(o is not None for o in oracle)}/{episodes}, {_minutes(med_o)}",
                f"{sum(n is not None for n in new)}/{episodes}, {_minutes(med_n)}", ratio,
                f"{within}/{episodes}",
                f"{statistics.mode(windows)}m" if windows else "—",
                *(f"{sum(v is not None for v in record[k])}/{episodes}, {_minutes(_median(record[k]))}"
                  for k in ("old MAPRegression", "old MAPDrop")),
            ])  # fmt: skip
        print(f"# cell {cell.rate} req/s x {cell.sampling:.0%}: {time.perf_counter() - began:.0f} s", flush=True)
    return alarm_rows, detect_rows


def poisson_interval(k: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval (Garwood) of a Poisson mean after observing ``k`` events: each tail
    (1 - level) / 2; the upper bound is ``poisson_upper`` at that tail."""
    tail = (1 - level) / 2
    upper = poisson_upper(k, 1 - tail)
    if k == 0:
        return 0.0, upper
    lo, hi = 0.0, upper
    for _ in range(80):  # the lower bound: where P(X >= k), which grows with the mean, reaches the tail
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - _poisson_cdf(k - 1, mid) < tail else (lo, mid)
    return hi, upper


def every_minute(rules: ModuleType) -> ModuleType:
    """``rules`` with every record computed every minute, as the rules before the recordings computed them: the
    pools and the weekly shift too (shipped: the baseline group's, every BASELINE_EVERY_MIN minutes)."""
    copy = ModuleType(f"{rules.__name__}_every_minute")
    copy.__dict__.update({k: v for k, v in rules.__dict__.items() if k != "__name__"})
    copy.LONG_WINDOWS = ()  # type: ignore[attr-defined]
    copy.BASELINE_EVERY_MIN = 1  # type: ignore[attr-defined]
    copy.BASELINE_LEAD_MIN = 0  # type: ignore[attr-defined]
    return copy


BOOTSTRAP = 2_000  # paired resamples of a cell's episodes for the interval of its difference of medians


def median_difference_interval(before: list[int | None], after: list[int | None], rng: np.random.Generator,
                               resamples: int = BOOTSTRAP) -> tuple[float, float] | None:
    """The 95 % paired-bootstrap interval of median(after) - median(before) (each over the episodes it caught):
    the episodes are resampled together, so each keeps its delay under both rules. None where one caught none."""
    diffs = []
    for _ in range(resamples):
        pick = rng.integers(0, len(before), len(before))
        b, a = _median([before[i] for i in pick]), _median([after[i] for i in pick])
        if b is not None and a is not None:
            diffs.append(a - b)
    if not diffs:
        return None
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


def paired_rows(cells: Sequence[Cell], months: float, episodes: int, seed: int, rules: ModuleType) -> list[list]:
    """Per cell and change: the shipped rules against the same rules with every record computed every minute (the
    schedule of the rules before the recordings), on the same streams (the grid's seeds): false alarms with both
    95 % Poisson intervals, and median delays, the allowance being the slowest group's interval, with the
    difference of medians' paired-bootstrap interval (a few episodes whose z grazes the threshold at a minute
    one schedule evaluates and the other does not fire hours apart, either way, and move a median)."""
    before = every_minute(rules)
    every = max(rules.BASELINE_EVERY_MIN, _long_scan(rules)[1])
    rows = []
    rng = np.random.default_rng(seed)
    for cell in cells:
        cell_seed = seed * 1_000 + cell.rate * 100 + round(cell.sampling * 100)
        days = LEAD_DAYS + round(months * MONTH_DAYS)
        alarms = [int(steady_cell(cell, days, cell_seed, r)["new"]) for r in (before, rules)]  # type: ignore[call-overload]
        (lo_b, hi_b), (lo_n, hi_n) = (poisson_interval(k) for k in alarms)
        inside = lo_b <= alarms[1] <= hi_b and lo_n <= alarms[0] <= hi_n
        changes = [change_cell(cell, episodes, cell_seed + 1, r) for r in (before, rules)]
        for key in changes[0]:
            med = [_median(c[key]["new"]) for c in changes]
            caught = [sum(n is not None for n in c[key]["new"]) for c in changes]
            later = (med[1] - med[0]) if med[0] is not None and med[1] is not None else None
            # paired: each episode's delay under both, where both caught it
            each = [n - b for b, n in zip(changes[0][key]["new"], changes[1][key]["new"], strict=True)
                    if b is not None and n is not None]
            band = median_difference_interval(changes[0][key]["new"], changes[1][key]["new"], rng)
            rows.append([cell.rate, f"{cell.sampling:.0%}", f"{alarms[0]} [{lo_b:.1f}, {hi_b:.1f}]",
                         f"{alarms[1]} [{lo_n:.1f}, {hi_n:.1f}]", "yes" if inside else "NO",
                         f"{key[0]} {key[1]:.1f}", f"{caught[0]}/{episodes}, {_minutes(med[0])}",
                         f"{caught[1]}/{episodes}, {_minutes(med[1])}",
                         "—" if later is None else f"{later:+.1f} min",
                         "—" if band is None else f"[{band[0]:+.1f}, {band[1]:+.1f}]",
                         "yes" if later is None or later <= every else
                         ("NO (interval reaches it)" if band is not None and band[0] <= every else "NO"),
                         f"{statistics.median(each):+.1f} / {max(each):+.0f} min" if each else "—",
                         f"{sum(d > every for d in each)} / {sum(d < -every for d in each)} of {len(each)}"])
        print(f"# paired cell {cell.rate} req/s x {cell.sampling:.0%} done", flush=True)
    return rows


CASCADE = (0.1, 0.7)  # llm_share, the cheap judge's agreement with the LLM judge
PPI_TERMS = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")  # rows 3.. of draw_cascade's output
#: Seconds from an LLM judge call to its score's record, lognormal (median, sigma): stated, not measured, as in
#: benchmarks/judging/bench_flex_alert_delay.py. A flex request past FLEX_TIMEOUT_S goes again at the standard tier.
JUDGE_LATENCY = {"standard": (4.0, 0.5), "flex": (120.0, 1.0)}
FLEX_TIMEOUT_S = 900.0
LATE_LEAD_IN_MIN = 60  # minutes before a change drawn again with the change (longer than any latency)


def judge_latency(tier: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """Seconds from the LLM judge's call to its answer, per evaluation, on ``tier`` (JUDGE_LATENCY)."""
    median, sigma = JUDGE_LATENCY["standard"]
    standard = median * np.exp(sigma * rng.standard_normal(n))
    if tier == "standard":
        return np.asarray(standard)
    median, sigma = JUDGE_LATENCY[tier]
    late = median * np.exp(sigma * rng.standard_normal(n))
    return np.asarray(np.where(late > FLEX_TIMEOUT_S, FLEX_TIMEOUT_S + standard, late))


def draw_cascade(means: np.ndarray, seen: np.ndarray, expected: np.ndarray, rng: np.random.Generator,
                 share: float = CASCADE[0], agreement: float = CASCADE[1],
                 late: tuple[str, np.random.Generator] | None = None) -> np.ndarray:
    """Per minute, where the cheap-plus-LLM cascade runs: the score series (rows 0-2: count, sum, squares of the
    LLM's AP where it judged, the cheap judge's elsewhere), the PPI sums by term (rows 3-11, PPI_TERMS), and the
    LLM-judged count and AP sum by the minute of the retrieval (rows 12-13: what the oracle reads).

    The LLM judge's AP follows ``means``. The cheap judge gives, with probability ``agreement``, the AP the LLM
    would give at ``seen`` (``seen`` = ``means``: it sees a drop as far as it agrees; the healthy means: it is
    blind to the drop), else an AP of its own at the healthy MAP. The LLM judges a uniform ``share``.

    With ``late`` = (tier, generator), rows 0-11 count each evaluation in the minute it is emitted, as the library
    does: one that only the cheap judge scored in the minute of its retrieval, one the LLM judged (all its terms
    and its score together) when the LLM answers, ``judge_latency(tier)`` after a uniform second of that minute;
    those answering after the last minute are left out. The latencies come from the tier's own generator, so the
    evaluations are the same with and without them.
    """
    counts = rng.poisson(expected)
    total = int(counts.sum())
    v = rng.beta(9, 1, total)
    u = rng.random(total)
    y = np.where(u < (np.repeat(means, counts) - 0.1) / 0.8, v, 1 - v)
    y_seen = np.where(u < (np.repeat(seen, counts) - 0.1) / 0.8, v, 1 - v)
    own = rng.beta(9, 1, total)
    own = np.where(rng.random(total) < (HEALTHY - 0.1) / 0.8, own, 1 - own)
    f = np.where(rng.random(total) < agreement, y_seen, own)
    judged = rng.random(total) < share
    score = np.where(judged, y, f)
    minute = np.repeat(np.arange(len(counts)), counts)
    landed = minute
    if late is not None:
        tier, late_rng = late
        seconds = late_rng.random(total) * 60 + judge_latency(tier, late_rng, total)
        landed = np.where(judged, minute + (seconds // 60).astype(np.int64), minute)
    one = np.ones(total)
    rows = [one, score, score * score, one, f, f * f, judged.astype(float), y * judged, y * y * judged,
            f * judged, f * f * judged, f * y * judged]
    out = np.zeros((len(rows) + 2, len(counts)))
    keep = landed < len(counts)
    for k, values in enumerate(rows):
        out[k] = np.bincount(landed[keep], values[keep], len(counts))
    out[12] = np.bincount(minute, judged.astype(float), len(counts))
    out[13] = np.bincount(minute, y * judged, len(counts))
    return out


def scan_z_ppi(terms: np.ndarray, at: np.ndarray, rules: ModuleType, llm_offset: int = 0) -> np.ndarray:
    """The rules' PPI++ z per window (rows: windows) at minutes ``at``, from per-minute PPI sums (PPI_TERMS rows);
    NaN under the minimum. The arithmetic of ``ppi_drop_z`` (cp_observe/_judging/_ppi.py), vectorised.

    ``llm_offset`` (minutes) is the rules' ``--llm-offset``: the evaluations only the cheap judge scored (count - n,
    f - f_sub, f2 - f2_sub) are read that much earlier, in the window and in its baseline alike."""
    cum = np.concatenate([np.zeros((len(PPI_TERMS), 1)), np.cumsum(terms, axis=1)], axis=1)
    records = recorded_windows(cum, rules)
    out = np.full((len(rules.WINDOWS), len(at)), np.nan)
    for row, w in enumerate(rules.WINDOWS):
        held = evaluated_at(at, w, rules)
        win, base = _window_and_baseline(records[w], held, rules.BASELINE_DAYS, rules.BASELINE_EVERY_MIN,
                                         lead=rules.BASELINE_LEAD_MIN)
        if llm_offset:
            before = _window_and_baseline(records[w], held, rules.BASELINE_DAYS, rules.BASELINE_EVERY_MIN,
                                          read_lag(llm_offset, w, rules), rules.BASELINE_LEAD_MIN)
            for now, then in zip((win, base), before, strict=True):
                for total, sub in ((0, 3), (1, 6), (2, 7)):  # count - n, f - f_sub, f2 - f2_sub
                    now[total] = now[sub] + then[total] - then[sub]
        c, f, f2, n, y, y2, fs, f2s, fy = base
        wc, wf, _, wn, wy, _, wfs, _, _ = win
        with np.errstate(divide="ignore", invalid="ignore"):
            unl = c - n
            my, mfs = y / n, fs / n
            cov = fy / n - my * mfs
            var_f = np.maximum((f2 - f * f / c) / np.maximum(c - 1, 1), 0.0)
            lam = np.where((var_f > 0) & (unl > 0.5),
                           np.clip(cov / ((1 + n / np.maximum(unl, 1)) * var_f), 0.0, 1.0), 0.0)
            mfu = np.where(unl > 0.5, (f - fs) / unl, mfs)
            var_fu = np.where(unl > 0.5, np.maximum((f2 - f2s) / unl - mfu**2, 0.0), 0.0)
            resid = np.maximum(y2 / n - my**2 + lam**2 * (f2s / n - mfs**2) - 2 * lam * cov, rules.VAR_FLOOR)
            baseline_mean = my + lam * (mfu - mfs)
            wunl = wc - wn
            wmfs = wfs / wn
            wmfu = np.where(wunl > 0.5, (wf - wfs) / wunl, wmfs)
            mean = wy / wn + lam * (wmfu - wmfs)
            se = np.sqrt(resid * (1 / wn + 1 / n)
                         + lam**2 * var_fu * (1 / np.maximum(wunl, 1) + 1 / np.maximum(unl, 1)) + rules.LEVEL_SD**2)
            z = (baseline_mean - mean - rules.MARGIN) / se
        out[row] = np.where((wn >= rules.MIN_COUNT) & (n >= rules.MIN_COUNT), z, np.nan)
    return out


def _fired(z: np.ndarray, rules: ModuleType) -> int | None:
    return first_firing(np.where(np.isnan(z), -np.inf, z).max(axis=0) > rules.Z, 0)


CASCADE_MODES = ("oracle", "llm", "mixed", "ppi")


def cascade_steady(rate: int, sampling: float, days: int, seed: int, rules: ModuleType) -> dict[str, int]:
    """False alarms of the LLM-alone, mixed-series and PPI++ scans on a patterned cascade stream with no change."""
    rng = np.random.default_rng(seed)
    phase = rng.random()
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    rows = draw_cascade(means, means, traffic(minutes, rate * sampling * 60, rng, phase), rng)
    at = np.arange(LEAD_DAYS * PER_DAY, days * PER_DAY + 1)
    llm = rows[[6, 7, 8]]  # n, y, y2: the LLM's evaluations alone
    out = {}
    for mode, z in (("llm", scan_z(llm, at, rules)), ("mixed", scan_z(rows[:3], at, rules)),
                    ("ppi", scan_z_ppi(rows[3:12], at, rules))):
        with np.errstate(invalid="ignore"):
            out[mode] = firing_episodes(np.nanmax(np.where(np.isnan(z), -np.inf, z), axis=0) > rules.Z, 0)
    return out


def cascade_changes(rate: int, sampling: float, blind: bool, drop: float, episodes: int, seed: int,
                    rules: ModuleType) -> dict[str, list[int | None]]:
    """Delays of the oracle (on the LLM's evaluations), the scan on the LLM's evaluations alone, on the score
    series (mixed) and the PPI++ scan, on the same cascade evaluations with a step of ``drop``."""
    rng = np.random.default_rng(seed)
    phase = rng.random()
    days = LEAD_DAYS + episodes + 1
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    expected = traffic(minutes, rate * sampling * 60, rng, phase)
    healthy = draw_cascade(means, means, expected, rng)
    threshold = lorden_threshold(rate * sampling * CASCADE[0] * 60 * MONTH_DAYS * PER_DAY)
    out: dict[str, list[int | None]] = {m: [] for m in CASCADE_MODES}
    for i in range(episodes):
        begin = (LEAD_DAYS + i) * PER_DAY + int(rng.integers(PER_DAY))
        after = slice(begin, begin + DETECT_LIMIT_MIN)
        rows = healthy[:, : begin + DETECT_LIMIT_MIN].copy()
        changed = means[after] - drop
        rows[:, after] = draw_cascade(changed, means[after] if blind else changed, expected[after], rng)
        at = np.arange(begin + 1, begin + DETECT_LIMIT_MIN + 1)
        for mode, z in (("llm", scan_z(rows[[6, 7, 8]], at, rules)), ("mixed", scan_z(rows[:3], at, rules)),
                        ("ppi", scan_z_ppi(rows[3:12], at, rules))):
            fired = _fired(z, rules)
            out[mode].append(None if fired is None else fired + 1)
        out["oracle"].append(oracle_delay(rows[[12, 13], after], means[after], drop, threshold))
    return out


def cascade_rows(rates: Sequence[int], sampling: float, episodes: int, months: float, seed: int,
                 rules: ModuleType) -> tuple[list, list]:
    """False alarms and delays at the same LLM spend: the LLM's evaluations alone, the score series the cascade
    records (mixed), and the PPI++ scan the rules run where the cascade's sums exist; the oracle on the LLM's."""
    share, _ = CASCADE
    alarm_rows, rows = [], []
    for rate in rates:
        days = LEAD_DAYS + round(months * MONTH_DAYS)
        steady = cascade_steady(rate, sampling, days, seed * 31 + rate, rules)
        per_month = MONTH_DAYS / (days - LEAD_DAYS)
        alarm_rows.append([rate, f"{sampling:.0%}", f"{rate * sampling * share * 3600:,.0f}",
                           *(f"{steady[m] * per_month:.2f} (≤ {poisson_upper(steady[m]) * per_month:.2f})"
                             for m in ("llm", "mixed", "ppi"))])
        for blind in (False, True):
            for drop in (0.1, 0.2):
                d = cascade_changes(rate, sampling, blind, drop, episodes,
                                    seed * 7 + rate + round(drop * 10) + 1000 * blind, rules)
                med = {m: _median(d[m]) for m in CASCADE_MODES}
                within = sum(1 for o, n in zip(d["oracle"], d["ppi"], strict=True)
                             if n is not None and n <= 3 * (o if o is not None else DETECT_LIMIT_MIN))
                rows.append([rate, f"{rate * sampling * share * 3600:,.0f}",
                             "blind to it" if blind else f"sees {CASCADE[1]:.0%}", f"{drop:.1f}",
                             *(f"{sum(v is not None for v in d[m])}/{episodes}, {_minutes(med[m])}"
                               for m in CASCADE_MODES),
                             f"{med['ppi'] / med['oracle']:.1f}×" if med["ppi"] and med["oracle"] else "—",
                             f"{within}/{episodes}",
                             f"{med['llm'] / med['ppi']:.1f}×" if med["llm"] and med["ppi"] else "—"])
    return alarm_rows, rows


#: Late LLM scores: each row's latency model (None: every score recorded in its retrieval's minute, as the
#: tables above assume) and the rules' --llm-offset values (minutes) the PPI++ scan reads it with.
LATE_ROWS = (("none", None, (0,)), ("standard", "standard", (0, 1)), ("flex", "flex", (0, 2, 3)))
#: (the cheap judge, the step): "sees" and "blind" as above; "moves alone": the LLM's MAP stays, the cheap judge's
#: scores drop (a cheap judge changed or broken: nothing to page for, PPI++ corrects it once both are in).
LATE_CHANGES = (("sees", 0.1), ("sees", 0.2), ("blind", 0.1), ("blind", 0.2), ("moves alone", 0.3),
                ("moves alone", 0.5))


def _late_streams(rate: int, sampling: float, days: int, seed: int, tier: str | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.random.Generator, tuple | None]:
    """(means, expected, healthy rows, generator, latency) of one cell: the same evaluations on every tier."""
    rng = np.random.default_rng(seed)
    phase = rng.random()
    minutes = np.arange(days * PER_DAY)
    means = healthy_mean(minutes, phase)
    expected = traffic(minutes, rate * sampling * 60, rng, phase)
    late = None if tier is None else (tier, np.random.default_rng(seed + 1))
    return means, expected, draw_cascade(means, means, expected, rng, late=late), rng, late


def late_steady(rate: int, sampling: float, days: int, seed: int, rules: ModuleType) -> dict[tuple[str, int], int]:
    """False alarms of the PPI++ scan on a steady cascade stream, per latency row and offset."""
    at = np.arange(LEAD_DAYS * PER_DAY, days * PER_DAY + 1)
    out = {}
    for label, tier, offsets in LATE_ROWS:
        rows = _late_streams(rate, sampling, days, seed, tier)[2]
        for offset in offsets:
            z = scan_z_ppi(rows[3:12], at, rules, offset)
            out[(label, offset)] = firing_episodes(np.where(np.isnan(z), -np.inf, z).max(axis=0) > rules.Z, 0)
        del rows
    return out


def late_changes(rate: int, sampling: float, cheap: str, drop: float, episodes: int, seed: int,
                 rules: ModuleType) -> dict[tuple[str, int], list[int | None]]:
    """The PPI++ scan's delay (minutes, None: not within a day) per latency row and offset, on the same episodes;
    under ("oracle", 0) the oracle's on the LLM-judged evaluations by retrieval minute (no latency)."""
    days = LEAD_DAYS + episodes + 1
    threshold = lorden_threshold(rate * sampling * CASCADE[0] * 60 * MONTH_DAYS * PER_DAY)
    out: dict[tuple[str, int], list[int | None]] = {("oracle", 0): []}
    for label, tier, offsets in LATE_ROWS:
        means, expected, healthy, rng, late = _late_streams(rate, sampling, days, seed, tier)
        out.update({(label, offset): [] for offset in offsets})
        for i in range(episodes):
            begin = (LEAD_DAYS + i) * PER_DAY + int(rng.integers(PER_DAY))
            region = slice(begin - LATE_LEAD_IN_MIN, begin + DETECT_LIMIT_MIN)  # drawn again: late arrivals too
            llm, seen = means[region].copy(), means[region].copy()
            if cheap != "moves alone":
                llm[LATE_LEAD_IN_MIN:] -= drop
            if cheap != "blind":
                seen[LATE_LEAD_IN_MIN:] -= drop
            rows = healthy[:, : begin + DETECT_LIMIT_MIN].copy()
            rows[:, region] = draw_cascade(llm, seen, expected[region], rng, late=late)
            at = np.arange(begin + 1, begin + DETECT_LIMIT_MIN + 1)
            for offset in offsets:
                fired = _fired(scan_z_ppi(rows[3:12], at, rules, offset), rules)
                out[(label, offset)].append(None if fired is None else fired + 1)
            if tier is None:
                after = slice(begin, begin + DETECT_LIMIT_MIN)
                out[("oracle", 0)].append(None if cheap == "moves alone" else
                                          oracle_delay(rows[[12, 13], after], means[after], drop, threshold))
    return out


def _late_columns() -> list[tuple[str, int]]:
    return [(label, offset) for label, _, offsets in LATE_ROWS for offset in offsets]


def _late_header(key: tuple[str, int]) -> str:
    label, offset = key
    return f"{label}{f', offset {offset}m' if offset else ''}"


def late_rows(rates: Sequence[int], sampling: float, episodes: int, months: float, seed: int,
              rules: ModuleType) -> tuple[list, list]:
    """False alarms and delays of the PPI++ scan with the LLM's scores recorded late, with and without the offset."""
    alarm_rows, rows = [], []
    for rate in rates:
        began = time.perf_counter()
        days = LEAD_DAYS + round(months * MONTH_DAYS)
        steady = late_steady(rate, sampling, days, seed * 31 + rate, rules)
        per_month = MONTH_DAYS / (days - LEAD_DAYS)
        alarm_rows.append([rate, f"{rate * sampling * CASCADE[0] * 3600:,.0f}",
                           *(f"{steady[k] * per_month:.2f} (≤ {poisson_upper(steady[k]) * per_month:.2f})"
                             for k in _late_columns())])
        for cheap, drop in LATE_CHANGES:
            d = late_changes(rate, sampling, cheap, drop, episodes, seed * 7 + rate + round(drop * 10)
                             + 1000 * LATE_CHANGES.index((cheap, drop)), rules)
            if cheap == "moves alone":  # a false alarm within the hour is the misalignment's: count those
                cells = ["—", *(f"{sum(v is not None and v <= 60 for v in d[k])}/{episodes} within 1 h"
                                f" ({sum(v is not None for v in d[k])} within a day)" for k in _late_columns())]
            else:
                cells = [f"{sum(v is not None for v in d[k])}/{episodes}, {_minutes(_median(d[k]))}"
                         for k in [("oracle", 0), *_late_columns()]]
            rows.append([rate, cheap, f"{drop:.1f}", *cells])
        print(f"# late scores, {rate} req/s: {time.perf_counter() - began:.0f} s", flush=True)
    return alarm_rows, rows


def _print_late(alarm_rows: list, rows: list, months: float) -> None:
    heads = [_late_header(k) for k in _late_columns()]
    print(f"\n### Late LLM scores in the cascade (llm_share {CASCADE[0]}, 10 % sampled)\n")
    print(f"PPI++ false alarms per data source per month on steady patterned streams ({months:g} months; 95 % upper"
          " bound), by judge latency and --llm-offset:\n")
    print(markdown_table(["req/s", "LLM-judged / hour", *heads], alarm_rows))
    print("\nPPI++ steps from a patterned 0.65, caught within a day, median delay (for 'moves alone': the LLM's MAP"
          " stays, so every firing is a false alarm, and one within the hour is the latency's):\n")
    print(markdown_table(["req/s", "cheap judge", "step", "oracle (no latency)", *heads], rows))


def crosscheck(seed: int, rules: ModuleType) -> list[list[object]]:
    """A real Prometheus over backfilled blocks against ``scan_z``: per data source, the largest |z| difference.

    One data source at 10 req/s x 5 % with a 0.2 step and one at 50 req/s x 5 % with a 0.1 drift, each after a
    healthy week. The raw counters are backfilled, then the window records by ``cp-observe deploy backfill`` (one
    promtool pass per window length); every window's z is queried over the 6 hours from the change, once a minute,
    and the first minute the largest z exceeds Z is compared.
    """
    from cp_observe.deploy._backfill import backfill as backfill_records

    rng = np.random.default_rng(seed)
    span = 6 * 60
    named, begins = {}, {}
    for name, cell, kind, drop in (("step", Cell(10, 0.05), "step", 0.2), ("drift", Cell(50, 0.05), "drift", 0.1)):
        phase = rng.random()
        begin = LEAD_DAYS * PER_DAY + int(rng.integers(PER_DAY - span))
        minutes = np.arange(begin + span + 10)  # beyond the compared span: the blocks' last sample is not compared
        means = healthy_mean(minutes, phase)
        means[begin:] -= change_shape(kind, drop, span + 10)
        named[name] = draw(means, traffic(minutes, cell.per_minute, rng, phase), rng)
        begins[name] = begin
    rows: list[list[object]] = []
    start = (int(time.time()) // DAY - LEAD_DAYS - 3) * DAY  # whole days, in the past
    last = max(sums.shape[1] for sums in named.values())
    with tempfile.TemporaryDirectory(prefix="cp-bench-alerts-") as tmp:
        work = Path(tmp)
        backfill(work / "data", named, start)
        with prometheus(work / "data") as base:
            began = time.perf_counter()
            blocks = backfill_records(base, work / "records", [DETECTION_RULES_FILE.read_text(encoding="utf-8")],
                                      start=start, end=start + last * STEP)
            print(f"# crosscheck: window records backfilled in {time.perf_counter() - began:.0f} s"
                  f" ({len(blocks)} blocks)", flush=True)
        for block in blocks:
            block.rename(work / "data" / block.name)
        with prometheus(work / "data") as base:
            for name, sums in named.items():
                begin = begins[name]
                at = np.arange(begin + 1, begin + span + 1)
                ours = scan_z(sums, at, rules)
                theirs = np.full_like(ours, np.nan)
                values = query_values(base, z_expr(), start + int(at[0]) * STEP, start + int(at[-1]) * STEP, name)
                for (window, t), v in values.items():
                    theirs[rules.WINDOWS.index(window), (t - start) // STEP - int(at[0])] = v
                both = ~np.isnan(ours) & ~np.isnan(theirs)
                same_presence = bool((np.isnan(ours) == np.isnan(theirs)).all())
                diff = float(np.abs(ours[both] - theirs[both]).max()) if both.any() else 0.0
                first = [first_firing(np.where(np.isnan(z), -np.inf, z).max(axis=0) > rules.Z, 0) for z in (ours, theirs)]
                rows.append([name, int(both.sum()), "yes" if same_presence else "NO", f"{diff:.1e}",
                             *(f"{f + 1} min" if f is not None else "—" for f in first),
                             "yes" if first[0] == first[1] else "NO"])
    return rows


def query_values(base: str, expr: str, start: int, end: int, source: str) -> dict[tuple[int, int], float]:
    """``expr``'s value for one data source at every STEP in [start, end], by (window in minutes, time)."""
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": STEP})
    request = urllib.request.Request(f"{base}/api/v1/query_range", data=query.encode(),
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(request, timeout=900) as response:
        body = json.load(response)
    out: dict[tuple[int, int], float] = {}
    for series in body["data"]["result"]:
        if series["metric"].get(DS) == source:
            window = int(series["metric"]["window"].removesuffix("m"))
            out.update({(window, int(float(ts))): float(v) for ts, v in series["values"]})
    return out


def _print_cascade(alarm_rows: list, rows: list, months: float) -> None:
    share, agreement = CASCADE
    print(f"\n### Free evidence: the cheap-plus-LLM cascade at the same LLM spend (llm_share {share}, 10 % sampled)\n")
    print(f"False alarms per data source per month on steady patterned streams ({months:g} months; 95 % upper bound):\n")
    print(markdown_table(["req/s", "sampled", "LLM-judged / hour", "LLM alone", "score series (mixed)", "PPI++ (shipped)"],
                         alarm_rows))
    print("\nSteps from a patterned 0.65, caught within a day, median delay:\n")
    print(markdown_table(["req/s", "LLM-judged / hour", "cheap judge", "step", "oracle (LLM's)", "LLM alone",
                          "score series (mixed)", "PPI++ (shipped)", "PPI++ / oracle", "PPI++ within 3× oracle",
                          "PPI++ earlier than LLM alone by"], rows))
    print(f"\nThe cheap judge agrees with the LLM judge on {agreement:.0%} of evaluations (else an AP of its own at "
          "the healthy MAP); 'sees': it gives the post-change AP when it agrees, 'blind to it': the AP it would "
          "have given before the change (a degradation only the LLM judge can tell). All columns see the same "
          "evaluations; 'LLM alone' and the oracle see only the LLM-judged ones, which is the same LLM spend.")


def main() -> int:
    """Run the simulation and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two cells, 0.5 steady month, 4 episodes")
    parser.add_argument("--months", type=float, default=3.0, help="steady months per cell (false alarms)")
    parser.add_argument("--episodes", type=int, default=16, help="changes of each kind per cell")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--crosscheck", action="store_true", help="also compare with a real Prometheus")
    parser.add_argument("--crosscheck-only", action="store_true", help="only the comparison with a real Prometheus")
    parser.add_argument("--canary-only", action="store_true", help="only the canary tables (no Prometheus needed)")
    parser.add_argument("--paired", action="store_true",
                        help="only the shipped rules against every record computed every minute, on the same streams")
    parser.add_argument("--cascade-only", action="store_true", help="only the cascade table (no Prometheus needed)")
    parser.add_argument("--late-only", action="store_true",
                        help="only the cascade's late-LLM-score tables (no Prometheus needed)")
    parser.add_argument("--phase-episodes", type=int, default=48,
                        help="0.1 steps per weekly phase per cell in the phase table")
    parser.add_argument("--phases-only", action="store_true",
                        help="only the delays by weekly phase (no Prometheus needed)")
    args = parser.parse_args()
    if args.canary_only:
        cells = [Cell(r, s) for r in RATES for s in SAMPLING]
        months, episodes = args.months, args.episodes
        if args.quick:
            cells, months, episodes = [Cell(1, 0.05), Cell(10, 0.05)], 0.5, 4
        canary = _canary_rules()
        print(f"# bench_alerts --canary-only: {len(cells)} cells, {months:g} steady months and {episodes} changes of "
              f"each kind per cell, seed {args.seed}; rules: windows {canary.WINDOWS[0]}m..{canary.WINDOWS[-1]}m, "
              f"margin {canary.MARGIN}, z > {canary.Z}, minimum {canary.MIN_COUNT} a side")
        print(f"# {machine_line()}")
        _print_canary(*canary_grid(cells, months, episodes, args.seed, canary), months, episodes)
        return 0
    rules = _detection_rules()
    cells = [Cell(r, s) for r in RATES for s in SAMPLING]
    months, episodes = args.months, args.episodes
    if args.quick:
        cells, months, episodes = [Cell(1, 0.05), Cell(10, 0.05)], 0.5, 4
    blocked = block_network()  # the Prometheus server is on loopback; nothing else is reached
    print(f"# bench_alerts: {len(cells)} cells, {months:g} steady months and {episodes} changes of each kind per "
          f"cell, seed {args.seed}; rules: windows {rules.WINDOWS[0]}m..{rules.WINDOWS[-1]}m, margin {rules.MARGIN},"
          f" z > {rules.Z}, minimum {rules.MIN_COUNT}")
    print(f"# {machine_line()}")
    if args.crosscheck or args.crosscheck_only:
        if shutil.which("prometheus") is None or shutil.which("promtool") is None:
            print("--crosscheck needs prometheus and promtool on PATH (scripts/install-system-deps.sh)",
                  file=sys.stderr)
            return 1
        began = time.perf_counter()
        rows = crosscheck(args.seed + 99, rules)
        print(f"\n### The rules' arithmetic in Python against a real Prometheus ({time.perf_counter() - began:.0f} s)\n")
        print(markdown_table(["stream", "window-minutes compared", "same windows judged", "largest |z| difference",
                              "first firing (Python)", "first firing (Prometheus)", "same"], rows))
        if args.crosscheck_only:
            return 0
    if args.paired:
        began = time.perf_counter()
        rows = paired_rows(cells, months, episodes, args.seed, rules)
        print(f"\n### The shipped schedule against every record every minute, on the same streams"
              f" ({time.perf_counter() - began:.0f} s)\n")
        print(markdown_table(["req/s", "sampled", "false alarms, every minute [95 %]", "false alarms, shipped [95 %]",
                              "each within the other's interval", "change", "every minute: caught, median",
                              "shipped: caught, median", "median later by", "its 95 % interval",
                              "within the slowest interval",
                              "per episode: median / largest later by", "episodes later / earlier by more"], rows))
        return 0
    phase_episodes = 4 if args.quick else args.phase_episodes
    if args.phases_only:
        _print_phases(phase_rows(cells, phase_episodes, args.seed, rules), phase_episodes)
        return 0
    if args.late_only:
        rates = RATES
        if args.quick:
            rates, months, episodes = (10, 50), 0.5, 4
        _print_late(*late_rows(rates, 0.10, episodes, months, args.seed, rules), months)
        return 0
    if args.cascade_only:
        if args.quick:
            months, episodes = 0.5, 4
        _print_cascade(*cascade_rows(RATES, 0.10, episodes, months, args.seed, rules), months)
        return 0
    alarm_rows, detect_rows = grid(cells, months, episodes, args.seed, rules)
    print(f"\n### False alarms per data source per month on steady patterned streams (95 % upper bound)\n")
    print(markdown_table(["req/s", "sampled", "evals / day", "new", "old MAPDrop", "old Regression",
                          "oracle δ=0.1", "oracle δ=0.2"], alarm_rows))
    print(f"\n### Changes from a patterned 0.65: caught within a day, median delay ({episodes} per row)\n")
    print(markdown_table(["req/s", "sampled", "change", "oracle", "new", "new / oracle", "new within 3× oracle",
                          "new: usual window", "old Regression", "old MAPDrop"], detect_rows))
    _print_cascade(*cascade_rows(RATES, 0.10, episodes, months, args.seed, rules), months)
    _print_phases(phase_rows(cells, phase_episodes, args.seed, rules), phase_episodes)
    print("\nThe oracle knows the pre-change MAP at every minute (the daily and weekly pattern), the AP's standard "
          "deviation and the drop, and starts from 0 at the change (Lorden's worst case); its threshold is "
          "log(evaluations a month). 'within 3× oracle': the rule fired by 3× the oracle's delay on the same "
          "episode. A drift counts from its start.")
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
