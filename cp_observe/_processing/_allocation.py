"""Where the evaluations go: each data source's sample rate, chosen so the worst data source's drop is caught soonest.

A drop of ``δ`` in a data source's MAP is caught after about ``N(δ) = 2σ² ln(ARL) / δ²`` of its evaluations
(Lorden's bound; ``σ`` ≈ 0.38 for production-like AP, ``ARL`` a month of evaluations), so its delay is ``N(δ)``
over its evaluations a second, ``λ r`` (traffic times rate). One flat rate gives a busy data source far more
evaluations than its alerts can use and a quiet one too few. As survey sampling allocates across strata,
``allocate`` spends the same evaluations a second (``E``) so as to minimise the worst delay, under three bounds:

- no data source's delay grows past 1.5 times what the flat rate of the same spend gives it (``FLAT_DELAY_BOUND``):
  its rate never falls below ``flat / 1.25`` (``FLOOR_DIVISOR``, inside the bound: the scan's delays move in
  steps of its windows);
- no rate exceeds the ceiling (``sample_rate``);
- a data source needs no more than ``N(δ)`` evaluations within the drop scan's shortest window (``saturation``):
  beyond that its delay is the window's, and more evaluations buy nothing; what it leaves goes to the others, and
  what nobody can use is not spent.

Within those bounds the minimax is water-filling: every data source below its bounds gets the same evaluations a
second ``e``, found by bisection so that the rates spend ``E``. Traffic is estimated from the sampled retrievals
themselves (``TrafficEstimate``: each one stands for ``1 / rate`` calls), so the request path counts nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

__all__ = ["FLAT_DELAY_BOUND", "FLOOR_DIVISOR", "TrafficEstimate", "allocate", "saturation"]

#: No data source's delay may exceed this multiple of the flat rate's (at the same spend).
FLAT_DELAY_BOUND = 1.5
#: The floor keeps every data source above the flat rate / this: inside the bound, because the drop scan's delays
#: move in steps of its windows (5, 10, 20 min ...) rather than in proportion to the evaluations.
FLOOR_DIVISOR = 1.25
#: The standard deviation of one evaluation's AP in production-like streams (bimodal).
AP_SIGMA = 0.38
#: Evaluations a month at one a second: the false-alarm horizon in N(δ) (one false alarm a month).
_MONTH_EVALUATIONS = 30 * 86_400.0
#: The drop scan's shortest window (seconds): a data source with N(δ) evaluations in it is caught within it.
SHORTEST_WINDOW_S = 300.0
_BISECTIONS = 60
_MAX_KEYS = 1000  # data sources whose traffic is kept; the quietest are forgotten first past it
_SMOOTHING = 0.5  # the weight of the newest window in the traffic estimate
_LONG_RUN_MIN_SHARE = 24  # the long-run mean is used once it covers horizon / this
_MAX_HISTORY = 4096  # windows the long-run mean keeps (a day of 5-minute windows is 288)


def saturation(drop: float) -> float:
    """Evaluations a second past which a data source's delay to catch ``drop`` no longer shrinks."""
    needed = 2 * AP_SIGMA**2 * math.log(_MONTH_EVALUATIONS) / drop**2
    return needed / SHORTEST_WINDOW_S


def allocate(traffic: Mapping[str, float], evaluations_per_s: float, ceiling: float, *,
             drop: float = 0.1, allocation: bool = True, flat_rate: float | None = None,
             floor_spend: float = math.inf) -> dict[str, float]:
    """Each data source's rate so that ``traffic`` (calls a second by data source) yields ``evaluations_per_s``.

    Without ``allocation``: one flat rate, ``E / Σλ`` up to the ceiling. With it: the water-filling above, with
    no rate below ``flat_rate / FLOOR_DIVISOR``. ``flat_rate`` is the rate a flat sampler spending the same budget
    over the whole period would have (the budget spent evenly, over the last period's mean traffic; not the
    paced rate in force, which a fast morning lowers): pacing spends evenly over the day where a flat rate follows
    the traffic, so in busy hours the floor may spend more than ``E`` (the pacer takes it back from the quiet
    hours) and no data source falls behind what the flat rate would have given it then.
    Without ``flat_rate``, the floor is ``E / Σλ / FLOOR_DIVISOR``. ``floor_spend`` bounds what the floors may
    spend together (evaluations a second): past it they are lowered alike, so a busy hour cannot spend the reserve
    that keeps the rest of the period paced (``RatePlan``).
    """
    total = sum(traffic.values())
    if total <= 0:
        return dict.fromkeys(traffic, ceiling)
    flat = min(ceiling, max(evaluations_per_s, 0.0) / total)
    if not allocation or flat >= ceiling:
        return dict.fromkeys(traffic, flat)
    floor = min(ceiling, flat if flat_rate is None else flat_rate) / FLOOR_DIVISOR
    at_floor = floor * total
    if at_floor > max(floor_spend, evaluations_per_s):
        floor *= max(floor_spend, evaluations_per_s) / at_floor
    sat = saturation(drop)
    caps = {k: min(ceiling, max(floor, sat / lam)) if lam > 0 else ceiling for k, lam in traffic.items()}

    def rates_at(e: float) -> dict[str, float]:
        return {k: min(caps[k], max(floor, e / lam)) if lam > 0 else caps[k] for k, lam in traffic.items()}

    def spent(rates: Mapping[str, float]) -> float:
        return sum(traffic[k] * r for k, r in rates.items())

    hi = max(lam * caps[k] for k, lam in traffic.items()) or 1.0
    if spent(rates_at(hi)) <= evaluations_per_s:
        return rates_at(hi)  # every data source at its bound: spend no more than detection can use
    if spent(rates_at(0.0)) >= evaluations_per_s:
        return rates_at(0.0)  # the floors alone spend it (a busy hour): every data source at its floor
    lo = 0.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(rates_at(mid)) < evaluations_per_s else (lo, mid)
    return rates_at(lo)


class TrafficEstimate:
    """Calls a second by data source, from the sampled retrievals (each one stands for ``1 / rate`` calls).

    ``add`` sums a window's weights; ``close`` turns them into rates over the window and blends them into the
    estimate (half the newest window, half the past). A data source unseen in a window decays; at most
    ``_MAX_KEYS`` are kept, so a key per request (a bad ``gen_ai.data_source.id``) cannot grow it without bound.
    """

    def __init__(self, horizon_s: float = 86_400.0) -> None:
        self.per_s: dict[str, float] = {}
        #: Calls a second over all data sources, averaged over about ``horizon_s`` (the budget's period): the
        #: traffic a flat rate's spend over the period follows.
        self.long_run_total: float | None = None
        self._horizon_s = horizon_s
        self._history: deque[tuple[float, float]] = deque(maxlen=_MAX_HISTORY)  # (seconds, calls) per window
        self._seen_s = 0.0  # seconds of traffic the long-run mean covers
        self._window: dict[str, float] = {}

    def add(self, key: str, rate: float, count: float = 1.0) -> None:
        """``count`` sampled retrievals of ``key``, sampled at ``rate``."""
        if rate <= 0:
            return
        window = self._window
        if key in window or len(window) < _MAX_KEYS:
            window[key] = window.get(key, 0.0) + count / rate

    def close(self, seconds: float) -> dict[str, float]:
        """End a window of ``seconds``: the updated estimate (calls a second by data source)."""
        if seconds <= 0:
            return self.per_s
        window, self._window = self._window, {}
        merged: dict[str, float] = {}
        for key in set(self.per_s) | set(window):
            seen = window.get(key, 0.0) / seconds
            old = self.per_s.get(key)
            merged[key] = seen if old is None else _SMOOTHING * seen + (1 - _SMOOTHING) * old
        kept = sorted(merged.items(), key=lambda kv: kv[1], reverse=True)[:_MAX_KEYS]
        self.per_s = {k: v for k, v in kept if v > 0}
        # A plain mean over the last horizon's windows: a whole period holds every hour of the daily rhythm once,
        # where a running average would swing with it (high after the busy hours, low after the quiet ones).
        history = self._history
        history.append((seconds, sum(window.values())))
        while len(history) > 1 and sum(s for s, _ in history) - history[0][0] >= self._horizon_s:
            history.popleft()
        self._seen_s = sum(s for s, _ in history)
        self.long_run_total = sum(c for _, c in history) / self._seen_s
        return self.per_s

    def flat_rate(self, evaluations_per_s: float, ceiling: float) -> float | None:
        """The rate a flat sampler spending ``evaluations_per_s`` on average over the horizon would have.

        None until the mean covers a 24th of the horizon (an hour of a day): a mean of the first few windows
        (a process warming up, a quiet start) says little about the period's traffic.
        """
        total = self.long_run_total
        if not total or total <= 0 or self._seen_s < self._horizon_s / _LONG_RUN_MIN_SHARE:
            return None
        return min(ceiling, evaluations_per_s / total)
