"""The alert simulation's own machinery: `for` as the rule manager applies it, rule inlining, detection counting."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "alerts" / "bench_alerts.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """benchmarks/alerts/bench_alerts.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_alerts", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_alerts"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_for_fires_only_after_the_expression_held_that_long(bench: ModuleType) -> None:
    """An expression true for 5 steps fires at the 5th with for = 4 steps; a gap restarts the count."""
    step = bench.STEP
    held = {t * step for t in (*range(10, 15), *range(20, 23), *range(30, 36))}
    assert bench.firing_times(held, 4 * step) == [14 * step, 34 * step, 35 * step]
    assert bench.firing_times(held, 0) == sorted(held)


def test_inline_expands_recorded_series_until_none_is_left(bench: ModuleType) -> None:
    """Nested recording rules are replaced by their expressions, parenthesised."""
    records = {"a:x:m": "sum(rate(x[5m]))", "a:x:se": "sqrt(a:x:m)", "a:x:m2": "a:x:m * 2"}
    assert bench.inline("a:x:se + a:x:m2 > 1", records) == "(sqrt((sum(rate(x[5m]))))) + ((sum(rate(x[5m]))) * 2) > 1"


def test_inline_drops_a_window_matcher_and_refuses_any_other(bench: ModuleType) -> None:
    """A group's read of a record restricted to its windows is inlined without the matcher (an expression takes
    none); a matcher on another label would change the result, so it is refused."""
    records = {"a:x:m": "sum by (window) (x)"}
    assert bench.inline('a:x:m{window=~"5m|10m"} / a:x:m{window="5m"}', records) == \
        "(sum by (window) (x)) / (sum by (window) (x))"
    with pytest.raises(ValueError, match="matcher"):
        bench.inline('a:x:m{term="n"}', records)


def test_z_expression_is_the_shipped_rules_inlined_down_to_the_window_records(bench: ModuleType) -> None:
    """Inlined, the z of every window reads only the window records (which the crosscheck backfills): now, and
    the same records 1d..7d back; no raw counter. Every window is the recording group's, evaluated every minute;
    the pools are the baseline group's, on its own minutes (a subquery on its interval around them)."""
    rules = bench._detection_rules()
    expr = bench.z_expr()
    assert set(re.findall(r"\b\w+:\w+:\w+\b", expr)) == {
        f"gen_ai_data_source_id_window:context_precision_score_{part}:window" for part in ("count", "sum", "squares")}
    assert "increase(" not in expr and not re.search(r"\)\{", expr)  # no matcher left on an inlined expression
    assert set(re.findall(r"offset (\w+)\b", expr)) - {f"{w}m" for w in rules.WINDOWS} == {
        rules.day_offset(d) for d in range(1, 8)}
    assert "window=~" not in expr  # every window, in one group
    held = re.findall(r"\)\[(\w+):(\w+)\]\)", expr)
    assert held and set(held) == {(rules.BASELINE_INTERVAL, rules.BASELINE_INTERVAL)}


def test_scan_z_is_the_shared_statistic(bench: ModuleType) -> None:
    """The vectorised z per window equals cp_observe._stats's drop_z on the same sums, with the weekly shift
    computed here from the raw sums: the longest window a week ago against its 7-day pool, shrunk by its noise,
    both as the baseline group last computed them (on a minute divisible by its interval)."""
    from cp_observe._stats._sequential import drop_z

    rules = bench._detection_rules()
    rng = np.random.default_rng(4)
    minutes = np.arange(9 * bench.PER_DAY)
    sums = bench.draw(bench.healthy_mean(minutes, 0.2), np.full(len(minutes), 3.0), rng)
    at = np.array([8 * bench.PER_DAY + 17, 8 * bench.PER_DAY + 900])
    assert any(at % rules.BASELINE_EVERY_MIN)  # one evaluation between the baseline group's
    z = bench.scan_z(sums, at, rules)
    cum = np.concatenate([np.zeros((3, 1)), np.cumsum(sums, axis=1)], axis=1)
    longest, tau2 = rules.WINDOWS[-1], rules.LEVEL_SD**2
    shifts = []
    for t in at - at % rules.BASELINE_EVERY_MIN + rules.BASELINE_LEAD_MIN:
        n7, s7, _ = cum[:, t - 7 * bench.PER_DAY] - cum[:, t - 7 * bench.PER_DAY - longest]
        pool = sum(cum[:, t - d * bench.PER_DAY] - cum[:, t - d * bench.PER_DAY - longest] for d in range(1, 8))
        mean = pool[1] / pool[0]
        gap_var = max(pool[2] / pool[0] - mean**2, rules.VAR_FLOOR) * (1 / n7 - 1 / pool[0])
        k = tau2 / (tau2 + gap_var)
        shifts.append((k * (s7 / n7 - mean), k * k * gap_var))
    assert all(abs(shift) > 1e-3 for shift, _ in shifts)  # the weekly swing is there, and the shift follows it
    for row, w in enumerate(rules.WINDOWS):
        for col, minute in enumerate(at):
            t = minute  # every window is the minute's
            n, s, _ = cum[:, t] - cum[:, t - w]
            pooled = t - t % rules.BASELINE_EVERY_MIN + rules.BASELINE_LEAD_MIN  # its last evaluation's time of day
            big = sum(cum[:, pooled - d * bench.PER_DAY] - cum[:, pooled - d * bench.PER_DAY - w] for d in range(1, 8))
            expected = drop_z(n, s, big[0], big[1], big[2], margin=rules.MARGIN, var_floor=rules.VAR_FLOOR, level_sd=rules.LEVEL_SD,
                              min_count=rules.MIN_COUNT, shift=shifts[col][0], shift_var=shifts[col][1])
            assert (expected is None and np.isnan(z[row, col])) or z[row, col] == pytest.approx(expected)


def test_scan_z_ppi_is_the_shared_ppi_statistic(bench: ModuleType) -> None:
    """The vectorised PPI++ z per window equals cp_observe._judging._ppi's ppi_drop_z on the same sums."""
    from cp_observe._judging._ppi import PpiSums, ppi_drop_z

    rules = bench._detection_rules()
    rng = np.random.default_rng(6)
    minutes = np.arange(9 * bench.PER_DAY)
    means = bench.healthy_mean(minutes, 0.4)
    rows = bench.draw_cascade(means, means, np.full(len(minutes), 6.0), rng)
    terms = rows[3:12]
    at = np.array([8 * bench.PER_DAY + 31, 8 * bench.PER_DAY + 1000])
    z = bench.scan_z_ppi(terms, at, rules)
    cum = np.concatenate([np.zeros((len(bench.PPI_TERMS), 1)), np.cumsum(terms, axis=1)], axis=1)
    checked = 0
    assert any(at % rules.BASELINE_EVERY_MIN)  # one evaluation between the baseline group's
    for row, w in enumerate(rules.WINDOWS):
        for col, minute in enumerate(at):
            t = minute  # every window is the minute's
            win = cum[:, t] - cum[:, t - w]
            pooled = t - t % rules.BASELINE_EVERY_MIN + rules.BASELINE_LEAD_MIN  # its last evaluation's time of day
            big = sum(cum[:, pooled - d * bench.PER_DAY] - cum[:, pooled - d * bench.PER_DAY - w] for d in range(1, 8))
            expected = ppi_drop_z(PpiSums(*win), PpiSums(*big), margin=rules.MARGIN, var_floor=rules.VAR_FLOOR, level_sd=rules.LEVEL_SD,
                                  min_count=rules.MIN_COUNT)
            if expected is None:
                assert np.isnan(z[row, col])
            else:
                assert z[row, col] == pytest.approx(expected.z, rel=1e-9)
                checked += 1
    assert checked >= 10
    # The score series carries the LLM's AP where it judged, the cheap judge's elsewhere: its count is every one.
    assert np.array_equal(rows[0], rows[3]) and rows[6].sum() < 0.2 * rows[0].sum()


def test_every_detection_window_moves_every_minute_and_the_canarys_long_ones_are_held(bench: ModuleType) -> None:
    """The drop detection computes every window every minute: each window's z moves every minute (its pool only
    at the baseline group's evaluations). The canary's long group writes its windows' z every LONG_EVERY_MIN
    minutes and the alert reads the last one in between: those stand still after each evaluation and move at the
    next; its short windows move every minute."""
    rules, canary = bench._detection_rules(), bench._canary_rules()
    assert not bench._long_scan(rules)[0] and bench._long_scan(canary) == (canary.LONG_WINDOWS, canary.LONG_EVERY_MIN)
    every = canary.LONG_EVERY_MIN
    rng = np.random.default_rng(12)
    minutes = np.arange(9 * bench.PER_DAY)
    sums = bench.draw(bench.healthy_mean(minutes, 0.3), np.full(len(minutes), 20.0), rng)
    first = 8 * bench.PER_DAY + 600  # an evaluation of the long group
    assert first % every == 0
    at = np.arange(first, first + 3 * every)
    for z in (bench.scan_z(sums, at, rules), bench.scan_z_ppi(
            bench.draw_cascade(bench.healthy_mean(minutes, 0.3), bench.healthy_mean(minutes, 0.3),
                               np.full(len(minutes), 60.0), rng)[3:12], at, rules, 3)):
        assert not np.isnan(z).any()
        assert (np.diff(z, axis=1) != 0).all()
    value, rest = (bench.draw(np.full(len(minutes), 0.6), np.full(len(minutes), k), rng) for k in (4.0, 16.0))
    z = bench.canary_scan_z(value, rest, at, canary)
    assert canary.LONG_WINDOWS
    for row, w in enumerate(canary.WINDOWS):
        moved = list(np.flatnonzero(np.diff(z[row]) != 0) + 1)
        assert moved == ([every, 2 * every] if w in canary.LONG_WINDOWS else list(range(1, len(at)))), w


def test_late_llm_scores_land_later_and_nothing_else_moves(bench: ModuleType) -> None:
    """With a judge latency, the same evaluations are drawn: the cheap-only ones stay in their minute, the
    LLM-judged ones (all their terms) land later, by flex's minutes; rows 12-13 keep the retrieval minute."""
    minutes = np.arange(600)
    means = np.full(len(minutes), 0.65)
    expected = np.full(len(minutes), 200.0)
    on_time = bench.draw_cascade(means, means, expected, np.random.default_rng(3))
    late = bench.draw_cascade(means, means, expected, np.random.default_rng(3), late=("flex", np.random.default_rng(4)))
    cheap_only = [(0, 3), (1, 6), (2, 7)]  # count - n, f - f_sub, f2 - f2_sub
    for total, sub in cheap_only:
        assert np.allclose(on_time[3 + total] - on_time[3 + sub], late[3 + total] - late[3 + sub])
    assert np.array_equal(on_time[12:], late[12:]) and np.array_equal(on_time[6], on_time[12])
    # Minutes each LLM-judged evaluation waited (those still out at the end: until the end), on average: flex's
    # mean latency, about 3.1 min with the timeout's cut, plus the half minute of the call, less the whole minutes.
    waited = float((np.cumsum(on_time[6]) - np.cumsum(late[6])).sum() / on_time[6].sum())
    assert 2.7 < waited < 3.5


def test_scan_z_ppi_with_an_offset_reads_the_cheap_only_terms_earlier(bench: ModuleType) -> None:
    """scan_z_ppi's llm_offset is the rules' --llm-offset: ppi_drop_z on sums whose cheap-only part (count - n,
    f - f_sub, f2 - f2_sub) is taken ``llm_offset`` minutes earlier, in the window and in each baseline day (of the
    pool the baseline group last wrote, on a minute divisible by its interval), for every window alike."""
    from cp_observe._judging._ppi import PpiSums, ppi_drop_z

    rules = bench._detection_rules()
    minutes = np.arange(9 * bench.PER_DAY)
    means = bench.healthy_mean(minutes, 0.1)
    rows = bench.draw_cascade(means, means, np.full(len(minutes), 8.0), np.random.default_rng(8),
                              late=("flex", np.random.default_rng(9)))
    terms = rows[3:12]
    at = np.array([8 * bench.PER_DAY + 45, 8 * bench.PER_DAY + 700])
    assert any(at % rules.BASELINE_EVERY_MIN)  # one evaluation between the baseline group's
    z = bench.scan_z_ppi(terms, at, rules, 3)
    cum = np.concatenate([np.zeros((len(bench.PPI_TERMS), 1)), np.cumsum(terms, axis=1)], axis=1)

    def sums(t: int, w: int, lag: int) -> np.ndarray:
        now, then = cum[:, t] - cum[:, t - w], cum[:, t - lag] - cum[:, t - lag - w]
        for total, sub in ((0, 3), (1, 6), (2, 7)):
            now[total] = now[sub] + then[total] - then[sub]
        return now

    checked = 0
    for row, w in enumerate(rules.WINDOWS):
        lag = 3
        for col, minute in enumerate(at):
            t = minute
            pooled = t - t % rules.BASELINE_EVERY_MIN + rules.BASELINE_LEAD_MIN
            big = sum(sums(pooled - d * bench.PER_DAY, w, lag) for d in range(1, 8))
            expected = ppi_drop_z(PpiSums(*sums(t, w, lag)), PpiSums(*big), margin=rules.MARGIN,
                                  var_floor=rules.VAR_FLOOR, level_sd=rules.LEVEL_SD, min_count=rules.MIN_COUNT)
            if expected is None:
                assert np.isnan(z[row, col])
            else:
                assert z[row, col] == pytest.approx(expected.z, rel=1e-9)
                checked += 1
    assert checked >= 10
    assert not np.allclose(z, bench.scan_z_ppi(terms, at, rules), equal_nan=True)  # the offset is read


def test_a_drop_the_cheap_judge_cannot_see_moves_ppi_not_the_score_series(bench: ModuleType) -> None:
    """Blind cheap judge: PPI++ catches a 0.2 step; the score series, mostly the cheap judge's, barely moves."""
    rules = bench._detection_rules()
    out = bench.cascade_changes(50, 0.10, True, 0.2, 1, 11, rules)
    assert out["ppi"][0] is not None and out["ppi"][0] <= 30
    assert out["mixed"][0] is None or out["mixed"][0] > 3 * out["ppi"][0]


def test_streams_have_the_daily_patterns(bench: ModuleType) -> None:
    """MAP swings 0.65 +- 0.07 at most; traffic spans about tenfold over a day and averages the cell's rate."""
    minutes = np.arange(14 * bench.PER_DAY)
    means = bench.healthy_mean(minutes, 0.0)
    assert 0.57 < means.min() < 0.6 and 0.7 < means.max() < 0.73
    expected = bench.traffic(minutes, 10.0, np.random.default_rng(1), 0.0)
    weekday = expected[: bench.PER_DAY]
    assert 8 < weekday.max() / weekday.min() < 12
    assert 8.5 < expected.mean() < 12.5


def test_the_oracle_finds_a_large_drop_and_the_counts_are_kept(bench: ModuleType) -> None:
    """On a busy cell the oracle and the scan catch a 0.3 step within minutes; old rules are quoted as held."""
    rules = bench._detection_rules()
    out = bench.change_cell(bench.Cell(10, 0.05), 1, 3, rules)
    record = out[("step", 0.3)]
    assert record["oracle"][0] is not None and record["oracle"][0] <= 10
    assert record["new"][0] is not None and record["new"][0] <= 20
    assert bench.poisson_upper(0) == pytest.approx(2.996, abs=1e-3)
    assert bench.first_firing(np.array([0, 1, 1, 0, 1, 1, 1]), 2) == 6
    assert bench.firing_episodes(np.array([1, 1, 0, 1, 1, 1, 0, 1]), 1) == 2


def test_detection_counts_the_first_firing_within_each_drop(bench: ModuleType) -> None:
    """A drop is detected by the first firing after its start and within its 2 hours; later ones are missed."""
    drops = [0, 10_000, 20_000]
    firing = [-60, 600, 660, 10_000 + bench.EPISODE_S + 60, 20_000 + 1_200]
    found, minutes = bench.detection(firing, drops)
    assert (found, minutes) == (2, [10.0, 20.0])


def test_streams_drop_on_odd_days_only(bench: ModuleType) -> None:
    """A drop stream is healthy on even days (the regression baseline) and drops four times on odd days."""
    stream = bench.Stream("s", 10, 0.05, 0.2, 4)
    assert len(stream.episodes(0)) == 8
    assert stream.mean_at(3600 + 60, 0) == bench.HEALTHY
    assert stream.mean_at(bench.DAY + 3600 + 60, 0) == pytest.approx(bench.HEALTHY - 0.2)
    assert bench.Stream("t", 10, 0.05, 0.0, 4).episodes(0) == []


def test_the_poisson_interval_is_garwoods(bench: ModuleType) -> None:
    """The exact two-sided 95 % interval: [0, 3.689] after none, [1.623, 11.668] after 5 (published tables)."""
    assert bench.poisson_interval(0) == (0.0, pytest.approx(3.689, abs=1e-3))
    low, high = bench.poisson_interval(5)
    assert low == pytest.approx(1.623, abs=1e-3) and high == pytest.approx(11.668, abs=1e-3)


def test_the_paired_comparison_differs_only_in_the_pools_schedule(bench: ModuleType) -> None:
    """every_minute() is the shipped rules with the pools (and the weekly shift) computed every minute, as the
    rules before the recordings computed them: z is the same on the minutes whose time of day the baseline group
    pools and differs on the others; the shipped module is left as it is."""
    rules = bench._detection_rules()
    before = bench.every_minute(rules)
    assert rules.BASELINE_EVERY_MIN == 8 and before.BASELINE_EVERY_MIN == 1 and before.Z == rules.Z
    rng = np.random.default_rng(9)
    minutes = 9 * bench.PER_DAY
    per_minute = bench.draw(bench.healthy_mean(np.arange(minutes), 0.3), np.full(minutes, 20.0), rng)
    at = np.arange(8 * bench.PER_DAY + 1, 8 * bench.PER_DAY + 41)
    shipped, each = bench.scan_z(per_minute, at, rules), bench.scan_z(per_minute, at, before)
    held = at % rules.BASELINE_EVERY_MIN == rules.BASELINE_LEAD_MIN  # where its pool's time of day is the minute's
    assert np.array_equal(shipped[:, held], each[:, held], equal_nan=True)
    assert not np.allclose(shipped[:, ~held], each[:, ~held], equal_nan=True)


def test_the_median_difference_interval_resamples_episodes_in_pairs(bench: ModuleType) -> None:
    """The bootstrap keeps each episode's two delays together: the same delays give [0, 0], every delay 5 minutes
    later gives [5, 5]; delays shuffled between episodes widen it; a side that caught nothing gives none."""
    rng = np.random.default_rng(1)
    before = [int(x) for x in rng.integers(10, 500, 64)]
    assert bench.median_difference_interval(before, before, rng, 200) == (0.0, 0.0)
    assert bench.median_difference_interval(before, [b + 5 for b in before], rng, 200) == (5.0, 5.0)
    low, high = bench.median_difference_interval(before, list(rng.permutation(before)), rng, 200)
    assert low < 0 < high
    assert bench.median_difference_interval(before, [None] * 64, rng, 50) is None
