"""Forward simulation of a queue: conservative backfilling over a profile of free processors.

Running jobs free their processors when they are expected to end; pending jobs, oldest
first, each reserve the earliest slot with enough free processors for their expected
run, and keep it (conservative backfilling, what ``squeue --start`` plans with the users'
requested times). The profile is a step function held in numpy arrays, so one job's slot
is a handful of vector operations: 500 pending jobs take milliseconds, not seconds.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["FreeProfile", "backfill_starts"]

FloatArray = NDArray[np.float64]


class FreeProfile:
    """Free processors over time from now (0): ``free[i]`` holds on [times[i], times[i+1])."""

    def __init__(self, capacity: int, busy_until: FloatArray, busy_procs: NDArray[np.int64]):
        busy = int(busy_procs.sum())
        self.capacity = max(capacity, busy)
        order = np.argsort(busy_until, kind="stable")
        ends = np.maximum(busy_until[order], 0.0)
        released = np.cumsum(busy_procs[order])
        times = np.unique(ends)
        # free after each distinct end: everything released at or before it
        index = np.searchsorted(ends, times, side="right") - 1
        free_after = self.capacity - busy + released[index]
        if len(times) and times[0] == 0.0:
            self.times = times
            self.free = free_after.astype(np.int64)
        else:
            self.times = np.concatenate(([0.0], times))
            self.free = np.concatenate(([self.capacity - busy], free_after)).astype(np.int64)

    def earliest(self, procs: int, duration_s: float, not_before: float = 0.0) -> float:
        """The earliest start, at ``not_before`` or later, with ``procs`` free for
        ``duration_s``."""
        procs = min(procs, self.capacity)
        ok = self.free >= procs
        if not_before > 0.0:
            self._split(not_before)
            ok = (self.free >= procs) & (self.times >= not_before)
        starts = np.flatnonzero(ok & ~np.concatenate(([False], ok[:-1])))
        stops = np.flatnonzero(~ok & np.concatenate(([True], ok[:-1])))
        # each run of "enough free" [starts[k], stops[k]) ends at the next breakpoint that
        # is not free enough; the last run goes on for ever
        ends = np.full(len(starts), np.inf)
        following = np.searchsorted(stops, starts)
        has_end = following < len(stops)
        ends[has_end] = self.times[stops[following[has_end]]]
        long_enough = np.flatnonzero(ends - self.times[starts] >= duration_s)
        return float(self.times[starts[long_enough[0]]])

    def _split(self, at: float) -> int:
        index = int(np.searchsorted(self.times, at))
        if index < len(self.times) and self.times[index] == at:
            return index
        self.times = np.insert(self.times, index, at)
        self.free = np.insert(self.free, index, self.free[index - 1])
        return index

    def reserve(self, start: float, duration_s: float, procs: int) -> None:
        procs = min(procs, self.capacity)
        first = self._split(start)
        last = self._split(start + max(duration_s, 1.0))
        self.free[first:last] -= procs


def backfill_starts(
    capacity: int,
    running_remaining_s: FloatArray,
    running_procs: NDArray[np.int64],
    pending_run_s: FloatArray,
    pending_procs: NDArray[np.int64],
    order: NDArray[np.int64],
    *,
    overtaking: bool = True,
) -> FloatArray:
    """Each pending job's start (seconds from now), reserving in ``order``; without
    ``overtaking`` no job starts before the one ahead of it (first come, first served)."""
    profile = FreeProfile(capacity, running_remaining_s, running_procs)
    starts = np.zeros(len(pending_run_s))
    previous = 0.0
    for index in order:
        run_s = float(max(pending_run_s[index], 1.0))
        procs = int(pending_procs[index])
        start = profile.earliest(procs, run_s, 0.0 if overtaking else previous)
        profile.reserve(start, run_s, procs)
        starts[index] = previous = start
    return starts
