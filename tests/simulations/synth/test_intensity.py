"""Operational time: the weekly arrival rate taken out of a trace's clock and put back."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock
from simulations.synth.intensity import WEEK_BINS, OperationalTime, weekly_rates
from simulations.synth.temporal import total_variation

# 1998-05-01 07:26:33 in San Diego, a Friday; the span below crosses the October DST change.
_CLOCK = TraceClock(epoch_s=893_466_664 + 566_129, zone_name="US/Pacific")


def _office_hours_arrivals(rng: np.random.Generator, days: int) -> np.ndarray:
    """Arrivals ten times as frequent 9-17 on weekdays as at other times."""
    grid = np.arange(0, days * 86_400, 60, dtype=np.float64)
    hour, weekday = _CLOCK.hour_and_weekday(grid)
    busy = (hour >= 9) & (hour < 17) & (weekday < 5)
    rate_per_minute = np.where(busy, 0.5, 0.05)
    picks = rng.random(grid.size) < rate_per_minute
    return grid[picks] + rng.integers(0, 60, size=int(picks.sum()))


def test_forward_and_inverse_are_each_others_inverse_across_a_dst_change() -> None:
    rng = np.random.default_rng(0)
    submit = np.sort(_office_hours_arrivals(rng, 200))
    op = OperationalTime(_CLOCK, weekly_rates(submit, _CLOCK))
    times = np.sort(rng.uniform(0, 200 * 86_400, size=500))
    forward = op.forward_many(times)
    assert np.all(np.diff(forward) > 0)
    assert [op.forward(float(t)) for t in times[:20]] == pytest.approx(forward[:20].tolist())
    back = np.array([op.inverse(float(f)) for f in forward])
    np.testing.assert_allclose(back, times, atol=1e-3)
    # On average operational time runs as fast as real time.
    assert forward[-1] - forward[0] == pytest.approx(times[-1] - times[0], rel=0.05)


def test_arrivals_even_in_operational_time_come_back_with_the_weekly_cycle() -> None:
    rng = np.random.default_rng(1)
    submit = np.sort(_office_hours_arrivals(rng, 150))
    rates = weekly_rates(submit, _CLOCK)
    assert rates.shape == (WEEK_BINS,)
    op = OperationalTime(_CLOCK, rates)
    # A rate-1 process in operational time (no cycle at all), mapped back to real time.
    gaps = rng.exponential(submit[-1] / submit.size, size=submit.size)
    times = np.array([op.inverse(float(g)) for g in np.cumsum(gaps)])
    real_hour, real_day = _CLOCK.hour_and_weekday(submit)
    hour, day = _CLOCK.hour_and_weekday(times)
    hours_tv = total_variation(
        np.bincount(real_hour, minlength=24), np.bincount(hour, minlength=24)
    )
    days_tv = total_variation(np.bincount(real_day, minlength=7), np.bincount(day, minlength=7))
    assert hours_tv < 0.03 and days_tv < 0.03
    # Without the map the same process spreads round the clock.
    flat_hour, _ = _CLOCK.hour_and_weekday(np.cumsum(gaps))
    assert (
        total_variation(np.bincount(real_hour, minlength=24), np.bincount(flat_hour, minlength=24))
        > 0.2
    )


def test_bad_rates_are_named() -> None:
    with pytest.raises(InvalidInputError) as caught:
        OperationalTime(_CLOCK, np.zeros(WEEK_BINS))
    assert caught.value.field == "rates"
    with pytest.raises(InvalidInputError):
        OperationalTime(_CLOCK, np.ones(24))
