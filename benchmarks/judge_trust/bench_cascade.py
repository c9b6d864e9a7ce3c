"""The cheap-plus-LLM cascade vs the LLM judge alone, at the same LLM spend.

Simulated streams of sampled retrievals, minute by minute. Each retrieval's LLM score ``y`` is bimodal like a real
retriever's AP (Beta(9, 1) with probability p, else Beta(1, 9); MAP 0.65 when healthy). A synthetic cheap judge
scores every retrieval with ``f = 0.75 + 0.3 (rho z + sqrt(1 - rho^2) e)``, where ``z`` is ``y`` standardised and
``e`` independent noise: correlation ``rho`` with the LLM judge (0, 0.5, 0.8), and a bias of +0.1 that only the
correction removes. A uniform ``--llm-share`` of the retrievals is also judged by the LLM; **the LLM-only baseline
judges exactly those same retrievals** (same spend), and estimates the window's MAP from them alone with the
shipped rules' standard error. The cascade estimates it with PPI++ (``cp_observe/_judging/_ppi.py``: the same
arithmetic as the recording rules, which tests/integration/test_cascade_prometheus.py checks against a live
Prometheus) over the 30 min window.

Measured, per correlation:

- **interval width**: the mean 95 % two-sided width of the 30 min window's MAP on steady streams;
- **bias**: the mean error of the estimate on steady streams (and the cheap judge's own mean, uncorrected);
- **false alarms** per day on steady streams, and **detection** of a 0.1 drop (0.65 to 0.55, 2 h, four a day):
  the detector is the regression alert's shape with no margin, ``(baseline - mean) - 2.33 SE_diff > 0`` for 10 min,
  the baseline being the same estimator over the same hour of a healthy day before; detected when it fires
  within the drop, time counted from the drop's start.

    .venv-bench/bin/python benchmarks/judge_trust/bench_cascade.py [--quick] [--rate N] [--llm-share S] [--seed N]

Also measures the shipped lexical judge against the labels of tests/data/lexical_*.jsonl (its correlation with
a reference judge; ``--lexical-only`` for just that); against the real-model judge: bench_cascade_real_model.py.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import machine_line, markdown_table

from cp_observe._judging._ppi import PpiSums, ppi_mean_from_sums

ROOT = Path(__file__).resolve().parents[2]

HEALTHY = 0.65
DROP = 0.1
RHOS = (0.0, 0.5, 0.8)
WINDOW = 30  # minutes, the MAP alerts' window
BASELINE = 60  # minutes, the regression alert's baseline window
FOR = 10  # minutes the condition must hold
Z_ONE_SIDED = 2.33
Z_TWO_SIDED = 1.959963984540054
MIN_LLM = 20  # the alerts' minimum count (of LLM-judged evaluations)
DAY = 1440
CHEAP_MEAN, CHEAP_SD = 0.75, 0.3


def _p_for(mean: float) -> float:
    """The share of good retrievals (Beta(9, 1)) that gives ``mean``."""
    return (mean - 0.1) / 0.8


def _y_moments(mean: float) -> tuple[float, float]:
    p = _p_for(mean)
    second = p * (0.81 + 9 / 1100) + (1 - p) * (0.01 + 9 / 1100)
    return mean, math.sqrt(second - mean * mean)


MU0, SD0 = _y_moments(HEALTHY)


@dataclass
class Minute:
    """One minute's sums: all retrievals' cheap scores per rho, and the LLM-judged subsample's."""

    count: int
    f: list[float]  # per rho: sum f, sum f^2 (flattened pairs)
    n: int
    y: float
    y2: float
    sub: list[float]  # per rho: sum f_sub, sum f2_sub, sum f*y


def simulate(rng: random.Random, minutes: int, rate: float, share: float, mean_at: Sequence[float]) -> list[Minute]:
    """``minutes`` of Poisson(rate) retrievals per minute; ``mean_at[t]`` is minute t's true MAP."""
    out = []
    root = [math.sqrt(1 - r * r) for r in RHOS]
    for t in range(minutes):
        p = _p_for(mean_at[t])
        arrivals = _poisson(rng, rate)
        f = [0.0] * (2 * len(RHOS))
        sub = [0.0] * (3 * len(RHOS))
        n = 0
        ys = ys2 = 0.0
        for _ in range(arrivals):
            y = rng.betavariate(9, 1) if rng.random() < p else rng.betavariate(1, 9)
            z = (y - MU0) / SD0
            e = rng.gauss(0.0, 1.0)
            judged = rng.random() < share
            if judged:
                n += 1
                ys += y
                ys2 += y * y
            for i, rho in enumerate(RHOS):
                fv = CHEAP_MEAN + CHEAP_SD * (rho * z + root[i] * e)
                f[2 * i] += fv
                f[2 * i + 1] += fv * fv
                if judged:
                    sub[3 * i] += fv
                    sub[3 * i + 1] += fv * fv
                    sub[3 * i + 2] += fv * y
        out.append(Minute(arrivals, f, n, ys, ys2, sub))
    return out


def _poisson(rng: random.Random, mu: float) -> int:
    if mu > 30:
        return max(0, round(rng.gauss(mu, math.sqrt(mu))))
    limit, k, prod = math.exp(-mu), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k


@dataclass
class Estimate:
    mean: float
    se: float
    n: int


class Windows:
    """Prefix sums over minutes, so any window's estimate is O(1) to assemble."""

    def __init__(self, minutes: list[Minute]) -> None:
        width = 3 + 2 * len(RHOS) + 3 * len(RHOS)
        self.prefix = [[0.0] * width]
        for m in minutes:
            row = [m.count, m.n, m.y, *m.f, *m.sub]
            # y2 kept separately to keep the layout readable
            last = self.prefix[-1]
            self.prefix.append([a + b for a, b in zip(last, [*row[:3], *row[3:]], strict=True)])
        self.y2 = [0.0]
        for m in minutes:
            self.y2.append(self.y2[-1] + m.y2)

    def _sum(self, start: int, end: int) -> list[float]:
        return [b - a for a, b in zip(self.prefix[start], self.prefix[end], strict=True)]

    def llm_only(self, start: int, end: int) -> Estimate | None:
        """The shipped rules' estimate from the LLM-judged retrievals alone: mean, SE with n - 1."""
        s = self._sum(start, end)
        n, sy, sy2 = round(s[1]), s[2], self.y2[end] - self.y2[start]
        if n < 2:
            return None
        mean = sy / n
        return Estimate(mean, math.sqrt(max(sy2 / n - mean * mean, 0.0) / max(n - 1, 1)), n)

    def cascade(self, start: int, end: int, rho_index: int) -> Estimate | None:
        """PPI++ from the window's sums, as the recording rules compute it."""
        s = self._sum(start, end)
        count, n, sy = round(s[0]), round(s[1]), s[2]
        if n < 2:
            return None
        k = len(RHOS)
        f, f2 = s[3 + 2 * rho_index], s[4 + 2 * rho_index]
        base = 3 + 2 * k + 3 * rho_index
        sums = PpiSums(count=count, sum_f=f, sum_f2=f2, n=n, sum_y=sy, sum_y2=self.y2[end] - self.y2[start],
                       sum_f_sub=s[base], sum_f2_sub=s[base + 1], sum_fy=s[base + 2])
        got = ppi_mean_from_sums(sums)
        return Estimate(got.estimate, got.standard_error, n)

    def cheap_only(self, start: int, end: int, rho_index: int) -> float | None:
        s = self._sum(start, end)
        return s[3 + 2 * rho_index] / s[0] if s[0] else None


def _estimators() -> list[tuple[str, int | None]]:
    return [("LLM only", None)] + [(f"cascade, rho {rho}", i) for i, rho in enumerate(RHOS)]


def _estimate(w: Windows, start: int, end: int, which: int | None) -> Estimate | None:
    return w.llm_only(start, end) if which is None else w.cascade(start, end, which)


def firing(today: Windows, yesterday: Windows, minutes: int, which: int | None) -> list[int]:
    """Minutes at which the no-margin regression detector fires (its condition held for FOR minutes)."""
    fired, held = [], 0
    for t in range(BASELINE, minutes + 1):
        current = _estimate(today, t - WINDOW, t, which)
        base = _estimate(yesterday, t - BASELINE, t, which)
        ok = (current is not None and base is not None and current.n >= MIN_LLM and base.n >= MIN_LLM
              and (base.mean - current.mean) - Z_ONE_SIDED * math.hypot(current.se, base.se) > 0)
        held = held + 1 if ok else 0
        if held >= FOR:
            fired.append(t)
    return fired


def episodes(fired: list[int]) -> list[int]:
    return [t for i, t in enumerate(fired) if i == 0 or fired[i - 1] != t - 1]


def drop_schedule(days: int) -> tuple[list[float], list[int]]:
    """Four 2 h drops a day (01:00, 07:00, 13:00, 19:00); the truth per minute and the drops' start minutes."""
    truth, starts = [HEALTHY] * (days * DAY), []
    for d in range(days):
        for hour in (1, 7, 13, 19):
            start = d * DAY + hour * 60
            starts.append(start)
            for t in range(start, start + 120):
                truth[t] = HEALTHY - DROP
    return truth, starts


def lexical_vs_labels() -> list[list[object]]:
    """The lexical judge's AP against the labels' AP per case of tests/data/lexical_*.jsonl: correlation, agreement."""
    import asyncio

    from cp_observe._judging._lexical import LexicalJudge
    from cp_observe._judging._map import exact_average_precision

    judge = LexicalJudge()
    rows = []
    for path in sorted((ROOT / "tests" / "data").glob("lexical_*.jsonl")):
        cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        f, y, agree, contexts = [], [], 0, 0
        for case in cases:
            verdicts = asyncio.run(judge.judge(case["query"], case["reference"], case["contexts"]))
            got = [v.relevant for v in (verdicts.verdicts if hasattr(verdicts, "verdicts") else verdicts)]
            labels = [bool(v) for v in case["labels"]]
            f.append(float(exact_average_precision(got)))
            y.append(float(exact_average_precision(labels)))
            agree += sum(a == b for a, b in zip(got, labels, strict=True))
            contexts += len(labels)
        rows.append([path.name, len(cases), f"{statistics.correlation(f, y):.2f}", f"{agree / contexts:.1%}",
                     f"{statistics.fmean(f):.3f}", f"{statistics.fmean(y):.3f}"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 steady days and 2 drop days (the smoke test's)")
    parser.add_argument("--steady-days", type=int, default=14)
    parser.add_argument("--drop-days", type=int, default=7)
    parser.add_argument("--rate", type=float, default=60.0, help="sampled retrievals per minute (default 60)")
    parser.add_argument("--llm-share", type=float, default=0.1, help="share also judged by the LLM (default 0.1)")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--lexical-only", action="store_true", help="only the lexical judge against the labels")
    args = parser.parse_args()
    print(machine_line())
    print()
    print("Lexical judge vs the labels of tests/data/lexical_*.jsonl (per-case AP; against the real-model judge: "
          "bench_cascade_real_model.py):")
    print(markdown_table(["file", "cases", "AP correlation", "context agreement", "lexical MAP", "labels' MAP"],
                         lexical_vs_labels()))
    if args.lexical_only:
        return 0
    steady_days, drop_days = (2, 2) if args.quick else (args.steady_days, args.drop_days)
    rng = random.Random(args.seed)
    steady_minutes = steady_days * DAY
    steady = Windows(simulate(rng, steady_minutes, args.rate, args.llm_share, [HEALTHY] * steady_minutes))
    steady_base = Windows(simulate(rng, steady_minutes, args.rate, args.llm_share, [HEALTHY] * steady_minutes))
    truth, starts = drop_schedule(drop_days)
    dropped = Windows(simulate(rng, len(truth), args.rate, args.llm_share, truth))
    drop_base = Windows(simulate(rng, len(truth), args.rate, args.llm_share, [HEALTHY] * len(truth)))

    print()
    print(f"{args.rate:g} sampled retrievals/min, llm_share {args.llm_share:g} (about "
          f"{args.rate * args.llm_share * WINDOW:.0f} LLM judgements per {WINDOW} min window, the same for every row); "
          f"{steady_days} steady days, {drop_days} days with {len(starts)} drops of {DROP} for 2 h; seed {args.seed}.")
    rows = []
    baseline_width = None
    for name, which in _estimators():
        widths, errors, cheap_means = [], [], []
        for t in range(WINDOW, steady_minutes + 1, 5):
            got = _estimate(steady, t - WINDOW, t, which)
            if got is None:
                continue
            widths.append(2 * Z_TWO_SIDED * got.se)
            errors.append(got.mean - HEALTHY)
            if which is not None:
                cheap = steady.cheap_only(t - WINDOW, t, which)
                if cheap is not None:
                    cheap_means.append(cheap)
        width = statistics.fmean(widths)
        baseline_width = baseline_width or width
        false_alarms = len(episodes(firing(steady, steady_base, steady_minutes, which)))
        fired = firing(dropped, drop_base, len(truth), which)
        delays = []
        for start in starts:
            hit = [t for t in fired if start <= t < start + 120]
            if hit:
                delays.append(hit[0] - start)
        rows.append([
            name,
            f"{width:.3f}",
            f"{width / baseline_width:.2f}",
            f"{statistics.fmean(errors):+.4f}",
            f"{statistics.fmean(cheap_means) - HEALTHY:+.3f}" if cheap_means else "—",
            f"{false_alarms / steady_days:.2f}",
            f"{len(delays)}/{len(starts)}",
            f"{statistics.median(delays):.0f} min" if delays else "—",
        ])
    print(markdown_table(
        ["estimator", "95% width (30 min)", "vs LLM only", "bias of the estimate", "bias of the cheap judge alone",
         "false alarms/day", "0.1 drops detected", "median time to detect"],
        rows,
    ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
