"""The gates between a ready evaluation and the judge: the circuit breaker, the rate cap, the daily budget.

One function, so the order is written once: the circuit is asked last, because in its half-open state a
pass takes the single probe, and a skip after taking it would keep the probe forever.
"""

from __future__ import annotations

from cp_observe._config._sampling import DailyBudget, RateLimiter
from cp_observe._judging._circuit import CircuitBreaker

__all__ = ["refusal"]


def refusal(circuit: CircuitBreaker, rate: RateLimiter, budget: DailyBudget) -> str | None:
    """Why the next evaluation may not call the judge (the ``skipped`` reason), or None when it may."""
    if circuit.state == "open":
        return "circuit_open"
    if not rate.allow():
        return "rate_limited"
    if not budget.allow():
        return "budget_exhausted"
    if not circuit.allow():
        return "circuit_open"
    return None
