"""The machine's queue state as a sequence of submissions sees it: what the next gap is given.

Real users see the queue: when the machine is backed up they submit less, and that
self-regulation keeps a real trace's weekly offered load steady (SDSC-SP2's first 20,000
jobs: weekly CV 0.13). A generator that does not see it drifts into overloaded weeks.
:class:`QueueState` summarizes the work submitted so far, one submission at a time, in
numbers a network can condition on:

- the **backlog** of a fluid queue: the machine drains ``machine_procs`` processor-seconds
  per second, each job adds its processor-seconds (``backlog_i = max(0, backlog_{i-1} -
  machine_procs * gap_i) + work_i``), in hours of the whole machine;
- the **offered load** of the trailing 24 hours, 3 days and 7 days: processor-seconds
  submitted in the window over the machine's in it (in the trace's first week, over the
  time since t=0, at least an hour).

The same code runs over a real trace in training and over the jobs drawn so far in
sampling, so a network is given exactly the numbers it learned from. Sampling that draws
more load than it keeps (thinned later) counts each job's work at the share expected to
survive (``work_scale``), so that the numbers describe the trace that comes out.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from knowledge_base.errors import InvalidInputError

__all__ = [
    "QUEUE_NUMBERS",
    "QueueState",
    "backlog_time_mean_s",
    "found_backlog_s",
    "job_work",
    "machine_work_s",
]

_WINDOWS_S = (86_400.0, 3 * 86_400.0, 7 * 86_400.0)
QUEUE_NUMBERS = 1 + len(_WINDOWS_S)
_LOAD_CLIP = 4.0  # a window offering more than 4x the machine reads as 4x


def job_work(procs: float, requested_s: float, run_fraction: float, machine_procs: float) -> float:
    """Processor-seconds a job asks of the machine: what it ran (at most its request) on at
    most the machine's processors, as :func:`~simulations.synth.load.offered_load`
    counts it."""
    return min(max(run_fraction, 0.0), 1.0) * max(requested_s, 0.0) * min(procs, machine_procs)


def machine_work_s(
    run_s: np.ndarray, requested_s: np.ndarray, procs: np.ndarray, machine_procs: int
) -> np.ndarray:
    """Each job's work in machine-seconds: what it ran (at most its request) on at most
    the machine's processors, over the machine's processors."""
    ran = np.minimum(np.asarray(run_s, dtype=np.float64), np.asarray(requested_s, np.float64))
    out: np.ndarray = ran * np.minimum(np.asarray(procs, np.float64), machine_procs)
    return out / machine_procs


def found_backlog_s(submit_s: np.ndarray, work_s: np.ndarray) -> np.ndarray:
    """The fluid backlog each job finds when submitted, in machine-seconds, in submit
    order: the machine drains one machine-second a second, each job adds its ``work_s``
    (:func:`machine_work_s`)."""
    submit = np.asarray(submit_s, dtype=np.float64).tolist()
    work = np.asarray(work_s, dtype=np.float64).tolist()
    found = np.empty(len(submit))
    backlog, now = 0.0, submit[0] if submit else 0.0
    for i, (at, job) in enumerate(zip(submit, work, strict=True)):
        backlog = max(backlog - (at - now), 0.0)
        now = at
        found[i] = backlog
        backlog += job
    return found


def backlog_time_mean_s(
    submit_s: np.ndarray, work_s: np.ndarray, found_s: np.ndarray | None = None
) -> float:
    """The same fluid backlog's mean over time, from the first submission to the last
    (0 when they coincide). Between two submissions the backlog left after the first
    drains at one machine-second a second until it is empty. ``found_s``: what
    :func:`found_backlog_s` gives for them, when the caller has it."""
    submit = np.asarray(submit_s, dtype=np.float64)
    span = float(submit[-1] - submit[0]) if submit.size else 0.0
    if span <= 0:
        return 0.0
    found = found_backlog_s(submit, work_s) if found_s is None else np.asarray(found_s)
    after = found[:-1] + np.asarray(work_s, dtype=np.float64)[:-1]
    drained = np.minimum(after, np.diff(submit))
    return float((after * drained - 0.5 * drained * drained).sum() / span)


class QueueState:
    """Backlog and trailing offered loads, advanced one submission at a time."""

    def __init__(self, machine_procs: float, *, work_scale: float = 1.0) -> None:
        if not (math.isfinite(machine_procs) and machine_procs > 0):
            raise InvalidInputError(
                "machine_procs must be a positive number",
                field="machine_procs",
                value=machine_procs,
            )
        if not (math.isfinite(work_scale) and work_scale > 0):
            raise InvalidInputError(
                "work_scale must be a positive number", field="work_scale", value=work_scale
            )
        self.procs = float(machine_procs)
        self.work_scale = float(work_scale)
        self.now_s = 0.0
        self.backlog_s = 0.0  # machine-seconds of work not yet drained
        self._window_work = [0.0] * len(_WINDOWS_S)
        self._jobs: list[deque[tuple[float, float]]] = [deque() for _ in _WINDOWS_S]

    def submit(self, at_s: float, work: float) -> None:
        """A job of ``work`` processor-seconds submitted at ``at_s`` (not before the last)."""
        gap = max(at_s - self.now_s, 0.0)
        self.now_s = max(at_s, self.now_s)
        share = work * self.work_scale
        self.backlog_s = max(self.backlog_s - gap, 0.0) + share / self.procs
        for k in range(len(_WINDOWS_S)):
            self._jobs[k].append((self.now_s, share))
            self._window_work[k] += share

    def numbers(self) -> np.ndarray:
        """At the last submission: log backlog in machine-hours, then each window's load."""
        out = np.empty(QUEUE_NUMBERS, dtype=np.float32)
        out[0] = math.log1p(self.backlog_s / 3600.0) / 4.0
        for k, window in enumerate(_WINDOWS_S):
            jobs = self._jobs[k]
            while jobs and jobs[0][0] <= self.now_s - window:
                self._window_work[k] -= jobs.popleft()[1]
            if not jobs:
                self._window_work[k] = 0.0  # no drift from sums of many floats
            # A window longer than the trace so far counts the time there is.
            span = max(min(window, self.now_s), 3600.0)
            load = self._window_work[k] / (self.procs * span)
            out[1 + k] = min(max(load, 0.0), _LOAD_CLIP)
        return out
