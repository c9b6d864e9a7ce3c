"""Flex or standard tier for live judging: which catches a MAP drop sooner at the same spend?

The flex tier charges half, so the same budget judges twice the evaluations (the sample rate doubled), but each
score reaches the metrics only when the judge answers: minutes later instead of seconds. This runs the shipped
drop rule's arithmetic (``scan_z`` from ``benchmarks/alerts/bench_alerts.py``, on the same production-shaped
streams: patterned MAP, tenfold daily traffic, weekends, bursts) on both, per traffic cell.

Judge latency, from a score's request to its record (seconds), per evaluation:

- standard: lognormal, median 4 s, sigma 0.5 (p99 about 13 s);
- flex: lognormal, median 120 s, sigma 1.0 (p90 about 7 min, p99 about 20 min), cut at the flex timeout of
  900 s, where the request is sent again at the standard tier (so it is recorded after 900 s plus a standard
  latency). These are stated assumptions, not measurements: providers publish no flex latency distribution.

The history (the baseline's days) is drawn per minute as ``bench_alerts.py`` draws it; the 20 minutes before
each change and the day after it are drawn per evaluation with the tier's latency, so healthy scores still
arriving after the change are counted where they land. A change counts as caught when the rule fires within a
day of its first changed evaluation; the delay is measured from there.

    .venv/bin/python benchmarks/judging/bench_flex_alert_delay.py [--quick] [--episodes N] [--seed N]
"""

# ruff: noqa: RUF001, RUF003 - the tables print × and en dashes, as benchmarks/README.md writes them

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "alerts"))  # bench_alerts (it adds benchmarks/)
import bench_alerts as ba

STANDARD_MEDIAN_S, STANDARD_SIGMA = 4.0, 0.5
FLEX_MEDIAN_S, FLEX_SIGMA, FLEX_TIMEOUT_S = 120.0, 1.0, 900.0
LEAD_IN_MIN = 20  # minutes before a change drawn per evaluation (longer than any latency but the rare timeout)
CHANGES = (("step", 0.1), ("step", 0.2), ("drift", 0.1))

Latency = Callable[[np.random.Generator, int], np.ndarray]


def standard_latency(rng: np.random.Generator, n: int) -> np.ndarray:
    """Seconds from request to record on the standard tier."""
    return np.asarray(STANDARD_MEDIAN_S * np.exp(STANDARD_SIGMA * rng.standard_normal(n)))


def flex_latency(rng: np.random.Generator, n: int) -> np.ndarray:
    """Seconds on the flex tier: past the flex timeout the request goes again at the standard tier."""
    flex = FLEX_MEDIAN_S * np.exp(FLEX_SIGMA * rng.standard_normal(n))
    return np.asarray(np.where(flex > FLEX_TIMEOUT_S, FLEX_TIMEOUT_S + standard_latency(rng, n), flex))


def draw_late(means: np.ndarray, expected: np.ndarray, length: int, *, latency: Latency,
              rng: np.random.Generator) -> np.ndarray:
    """Per-minute count, sum and squares of AP for arrivals in minutes ``0 .. len(means) - 1``, recorded late.

    Returns ``length`` minutes from the first arrival minute: each evaluation lands in the minute its judge
    answered (those landing later are left out).
    """
    counts = rng.poisson(expected)
    total = int(counts.sum())
    v = rng.beta(9, 1, total)
    good = (np.repeat(means, counts) - 0.1) / 0.8
    ap = np.where(rng.random(total) < good, v, 1 - v)
    arrival_s = np.repeat(np.arange(len(counts)), counts) * 60.0 + rng.random(total) * 60.0
    minute = ((arrival_s + latency(rng, total)) // 60).astype(np.int64)
    keep = minute < length
    out = np.zeros((3, length))
    out[0] = np.bincount(minute[keep], minlength=length)[:length]
    out[1] = np.bincount(minute[keep], ap[keep], length)[:length]
    out[2] = np.bincount(minute[keep], ap[keep] ** 2, length)[:length]
    return out


def delays(per_minute: float, latency: Latency, *, episodes: int, seed: int,
           rules: ModuleType) -> dict[tuple[str, float], list[int | None]]:
    """Per change: the rule's delay in minutes (None when not within a day) on ``episodes`` changes.

    The traffic pattern, its bursts and the minutes the changes begin come from ``seed`` alone, so both tiers
    meet the same episodes (a paired comparison); the evaluations are drawn from their own generator.
    """
    setup = np.random.default_rng(seed)
    rng = np.random.default_rng(seed + 1)
    phase = setup.random()
    days = ba.LEAD_DAYS + episodes + 1
    minutes = np.arange(days * ba.PER_DAY)
    means = ba.healthy_mean(minutes, phase)
    expected = ba.traffic(minutes, per_minute, setup, phase)
    begins = [(ba.LEAD_DAYS + i) * ba.PER_DAY + int(setup.integers(ba.PER_DAY)) for i in range(episodes)]
    healthy = ba.draw(means, expected, rng)
    out: dict[tuple[str, float], list[int | None]] = {c: [] for c in CHANGES}
    for begin in begins:
        lead = slice(begin - LEAD_IN_MIN, begin)
        length = LEAD_IN_MIN + ba.DETECT_LIMIT_MIN
        before = draw_late(means[lead], expected[lead], length, latency=latency, rng=rng)
        for kind, drop in CHANGES:
            after = slice(begin, begin + ba.DETECT_LIMIT_MIN)
            changed = means[after] - ba.change_shape(kind, drop, ba.DETECT_LIMIT_MIN)
            late = draw_late(changed, expected[after], ba.DETECT_LIMIT_MIN, latency=latency, rng=rng)
            sums = healthy[:, : begin + ba.DETECT_LIMIT_MIN].copy()
            sums[:, begin - LEAD_IN_MIN :] = before
            sums[:, after] += late
            at = np.arange(begin + 1, begin + ba.DETECT_LIMIT_MIN + 1)
            z = ba.scan_z(sums, at, rules)
            held = np.where(np.isnan(z), -np.inf, z).max(axis=0) > rules.Z
            fired = ba.first_firing(held, 0)
            out[(kind, drop)].append(None if fired is None else fired + 1)
    return out


def _median(values: Sequence[int | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _better(standard: Sequence[int | None], flex: Sequence[int | None]) -> str:
    """Which tier caught the changes sooner: more caught first, then the smaller median delay."""
    caught_s, caught_f = sum(v is not None for v in standard), sum(v is not None for v in flex)
    if caught_s != caught_f:
        return "flex" if caught_f > caught_s else "standard"
    med_s, med_f = _median(standard), _median(flex)
    if med_s is None or med_f is None or med_s == med_f:
        return "tie"
    return "flex" if med_f < med_s else "standard"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-cell table, the recommended default and whether a simple rule picks the better tier."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=3940)
    parser.add_argument("--quick", action="store_true", help="3 cells, 3 episodes")
    args = parser.parse_args(argv)
    blocked = ba.block_network()
    rules = ba._detection_rules()
    cells = [ba.Cell(r, s) for r in ba.RATES for s in ba.SAMPLING]
    episodes = args.episodes
    if args.quick:
        cells, episodes = [ba.Cell(1, 0.05), ba.Cell(10, 0.05), ba.Cell(50, 0.10)], 3
    rng = np.random.default_rng(args.seed)
    sample = flex_latency(rng, 200_000)
    print("# Flex or standard: drop detection at the same spend\n")
    print(ba.machine_line())
    print(f"\nseed {args.seed}, {episodes} changes per row; flex latency median {np.median(sample):.0f} s, "
          f"p90 {np.percentile(sample, 90):.0f} s, p99 {np.percentile(sample, 99):.0f} s "
          f"({(sample > FLEX_TIMEOUT_S).mean():.1%} past the {FLEX_TIMEOUT_S:.0f} s timeout, sent again at "
          f"standard); standard median {STANDARD_MEDIAN_S:.0f} s\n")
    rows, ratios = [], []
    for cell in cells:
        began = time.perf_counter()
        seed = args.seed * 1_000 + cell.rate * 100 + round(cell.sampling * 100)
        standard = delays(cell.per_minute, standard_latency, episodes=episodes, seed=seed, rules=rules)
        flex = delays(2 * cell.per_minute, flex_latency, episodes=episodes, seed=seed, rules=rules)
        for change in CHANGES:
            s, f = standard[change], flex[change]
            med_s, med_f = _median(s), _median(f)
            better = _better(s, f)
            ratio = med_s * 60 / FLEX_MEDIAN_S if med_s is not None else None
            ratios.append((ratio, better))
            rows.append([cell.rate, f"{cell.sampling:.0%}", f"{change[0]} {change[1]:.1f}",
                         f"{sum(v is not None for v in s)}/{episodes}, {ba._minutes(med_s)}",
                         f"{sum(v is not None for v in f)}/{episodes}, {ba._minutes(med_f)}",
                         f"{med_f / med_s:.2f}×" if med_s and med_f else "—", better,
                         f"{ratio:.0f}" if ratio is not None else "—"])
        print(f"# cell {cell.rate} req/s x {cell.sampling:.0%}: {time.perf_counter() - began:.0f} s", flush=True)
    print()
    print(ba.markdown_table(["req/s", "sampled (standard)", "change", "standard: caught, median delay",
                             "flex at 2× the sample: caught, median delay", "flex ÷ standard", "sooner",
                             "standard delay ÷ flex median latency"], rows))
    wins = {b for _, b in ratios}
    print(f"\nflex sooner in {sum(b == 'flex' for _, b in ratios)} of {len(ratios)} rows, standard in "
          f"{sum(b == 'standard' for _, b in ratios)}, ties {sum(b == 'tie' for _, b in ratios)}")
    flex_ratios = [r for r, b in ratios if b == "flex" and r is not None]
    standard_ratios = [r for r, b in ratios if b == "standard" and r is not None]
    if flex_ratios and standard_ratios and min(flex_ratios) > max(standard_ratios):
        print(f"a simple rule separates them: flex where the standard tier's median delay exceeds "
              f"{max(standard_ratios):.0f}–{min(flex_ratios):.0f}× the flex median latency")
    elif wins <= {"flex", "tie"} or wins <= {"standard", "tie"}:
        print(f"one tier is never later: {sorted(wins)}")
    else:
        print("no threshold on (standard delay ÷ flex latency) picks the sooner tier in every row")
    print(f"\nnon-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
