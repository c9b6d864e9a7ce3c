"""The gates before a judge call: which one refuses, in which order, and that the circuit's probe is kept."""

from __future__ import annotations

from cp_observe._processing._gates import CircuitBreaker, DailyBudget, RateLimiter
from cp_observe._processing._gates import refusal


def _open_circuit(now: list[float]) -> CircuitBreaker:
    circuit = CircuitBreaker(failures=1, cooldown_s=10.0, clock=lambda: now[0])
    circuit.failure()
    return circuit


def test_all_open_lets_the_call_through() -> None:
    """With no limit reached, nothing refuses."""
    assert refusal(CircuitBreaker(failures=5, cooldown_s=1.0), RateLimiter(None), DailyBudget(None)) is None


def test_an_open_circuit_refuses_first() -> None:
    """An open circuit is the reason even when the rate cap would refuse too."""
    now = [0.0]
    rate = RateLimiter(1, clock=lambda: now[0])
    assert rate.allow()
    assert refusal(_open_circuit(now), rate, DailyBudget(None)) == "circuit_open"


def test_the_rate_cap_refuses() -> None:
    """Past the rate cap the reason is rate_limited."""
    now = [0.0]
    rate = RateLimiter(1, clock=lambda: now[0])
    assert refusal(CircuitBreaker(failures=5, cooldown_s=1.0), rate, DailyBudget(None)) is None
    assert refusal(CircuitBreaker(failures=5, cooldown_s=1.0), rate, DailyBudget(None)) == "rate_limited"


def test_a_spent_budget_refuses() -> None:
    """Once today's cost reaches the budget the reason is budget_exhausted."""
    budget = DailyBudget(0.01)
    budget.spend(0.02)
    assert refusal(CircuitBreaker(failures=5, cooldown_s=1.0), RateLimiter(None), budget) == "budget_exhausted"


def test_the_half_open_probe_is_not_spent_on_a_skip() -> None:
    """A half-open circuit keeps its single probe when the rate cap refuses: the circuit is asked last."""
    now = [0.0]
    circuit = _open_circuit(now)
    now[0] = 11.0  # past the cool-down: half-open
    rate = RateLimiter(1, clock=lambda: now[0])
    assert rate.allow()  # the cap is spent for this minute
    assert refusal(circuit, rate, DailyBudget(None)) == "rate_limited"
    now[0] = 80.0  # a new minute: the cap allows again, and the probe is still there to take
    assert refusal(circuit, rate, DailyBudget(None)) is None
