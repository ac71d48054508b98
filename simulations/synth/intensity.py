"""Operational time: a trace's clock stretched by its weekly arrival rate.

Users submit more by day than by night and more on weekdays. The sequence generator
draws its gaps in *operational time* (Brown et al.'s time-rescaling: a process with
rate ``lambda(t)`` is a rate-1 process in ``Lambda(t) = integral of lambda``), where
that cycle is taken out: one second of operational time holds as many arrivals, on
average, at 3 a.m. on a Sunday as at 11 a.m. on a Tuesday. Mapping sampled operational
times back through ``Lambda``'s inverse puts the cycle back, so the hour-of-day and
day-of-week profile comes out of the fitted rates, not out of how well a network learned
the clock.

The rate is one number per local hour of the week (168 bins, Monday 0:00 first), the
training trace's arrivals in that bin over the times the bin occurs in its span,
relative to the trace's mean rate (so operational and real time advance alike on
average); a bin with almost no arrivals keeps ``_FLOOR`` of the mean so the map stays
invertible. The map is piecewise linear on whole UTC hours, in which the local hour
does not change (half-hour zones aside), and is extended as far as a sample runs.
"""

from __future__ import annotations

import math

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock

__all__ = ["WEEK_BINS", "OperationalTime", "weekly_rates"]

WEEK_BINS = 168
_HOUR_S = 3600
_FLOOR = 0.02


def weekly_rates(submit_s: np.ndarray, clock: TraceClock) -> np.ndarray:
    """Arrival rate per local hour of the week, relative to the mean (168 numbers)."""
    submit = np.asarray(submit_s, dtype=np.float64)
    if submit.size < 2 or submit[-1] <= submit[0]:
        return np.ones(WEEK_BINS)
    hour, weekday = clock.hour_and_weekday(submit)
    counts = np.bincount(weekday * 24 + hour, minlength=WEEK_BINS).astype(np.float64)
    # How often each bin occurs in the span: the local bin of every hour the span covers.
    grid = np.arange(0.0, submit[-1] + _HOUR_S, _HOUR_S)
    g_hour, g_weekday = clock.hour_and_weekday(grid)
    occurrences = np.bincount(g_weekday * 24 + g_hour, minlength=WEEK_BINS).astype(np.float64)
    rates = counts / np.maximum(occurrences, 1.0)
    mean = counts.sum() / max(occurrences.sum(), 1.0)
    out: np.ndarray = np.maximum(rates / mean, _FLOOR)
    return out


class OperationalTime:
    """``Lambda`` and its inverse for one trace clock and its 168 weekly rates."""

    def __init__(self, clock: TraceClock, rates: np.ndarray) -> None:
        rates = np.asarray(rates, dtype=np.float64)
        if rates.shape != (WEEK_BINS,) or not np.all(np.isfinite(rates)) or rates.min() <= 0:
            raise InvalidInputError(
                f"weekly rates need {WEEK_BINS} positive numbers",
                field="rates",
                value=rates.shape,
            )
        self.clock = clock
        self.rates = rates
        # Grid point k sits on a whole UTC hour: t_k = k * 3600 - offset.
        self._offset_s = float(clock.epoch_s % _HOUR_S)
        self._rate = np.zeros(0)
        self._cumulative = np.zeros(1)
        self._extend(24 * 7 * 8)

    def _extend(self, hours: int) -> None:
        starts = np.arange(hours, dtype=np.float64) * _HOUR_S - self._offset_s
        hour, weekday = self.clock.hour_and_weekday(np.maximum(starts, 0.0) + 1.0)
        # Hour 0 may start before t=0: its bin is that of t=0's own hour.
        self._rate = self.rates[weekday * 24 + hour]
        self._cumulative = np.concatenate([[0.0], np.cumsum(self._rate * _HOUR_S)])

    def _start_s(self, k: np.ndarray) -> np.ndarray:
        out: np.ndarray = k * _HOUR_S - self._offset_s
        return out

    def _cover(self, hours: int) -> None:
        if hours >= self._rate.size:
            self._extend(max(2 * self._rate.size, hours + 1))

    def forward(self, t_s: float) -> float:
        """Operational time at ``t_s`` seconds after t=0 (0 at t=0's hour start)."""
        k = max(math.floor((t_s + self._offset_s) / _HOUR_S), 0)
        self._cover(k)
        start = float(self._start_s(np.array(k)))
        return float(self._cumulative[k] + (t_s - start) * self._rate[k])

    def forward_many(self, t_s: np.ndarray) -> np.ndarray:
        t = np.asarray(t_s, dtype=np.float64)
        k = np.maximum(np.floor((t + self._offset_s) / _HOUR_S).astype(np.int64), 0)
        if k.size:
            self._cover(int(k.max()))
        out: np.ndarray = self._cumulative[k] + (t - self._start_s(k)) * self._rate[k]
        return out

    def inverse(self, operational: float) -> float:
        """The real time (seconds after t=0) at which ``Lambda`` reaches ``operational``."""
        while operational >= self._cumulative[-1]:
            self._extend(2 * self._rate.size)
        k = int(np.searchsorted(self._cumulative, operational, side="right")) - 1
        k = min(max(k, 0), self._rate.size - 1)
        start = float(self._start_s(np.array(k)))
        return start + (operational - float(self._cumulative[k])) / float(self._rate[k])
