"""Queue-state features of each pending job at one instant, from the snapshot and the past.

One function, ``queue_features``, serves training (instants of the past rebuilt from the
history) and prediction (the snapshot given): what the model learns from and what it is
asked about are computed the same way. Everything comes from jobs that had started (for
waits) or ended (for run times) by the instant: nothing from the future.

Run times of running and pending jobs come from the history online, EASY++ style: the
mean of the user's last two finished run times, capped at the request; a user with no
finished job gets the request times the median run/request ratio of the last 500 jobs
that ended. A running job past its expected end is expected to run half its remaining
limit more (at least a minute).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tools.waits.jobs import JobTable
from tools.waits.simulate import backfill_starts
from tools.waits.snapshot import WaitSnapshot

__all__ = ["FEATURE_NAMES", "QueueFeatures", "RunIndex", "queue_features"]

FloatArray = NDArray[np.float64]
DAY_S = 86400.0
_FLOOR_S = 60.0

FEATURE_NAMES = (
    "log_elapsed",
    "log_procs",
    "procs_share",
    "log_requested",
    "log_sim_wait",
    "log_request_sim_wait",
    "log_fcfs_wait",
    "rank_share",
    "ahead_work_h",
    "ahead_procs_share",
    "pending_work_h",
    "pending_count",
    "busy_share",
    "free_share",
    "fits_now",
    "user_running_share",
    "user_pending",
    "user_ahead",
    "user_day_share",
    "log_recent_wait",
    "log_recent_wait_size",
    "log_recent_wait_user",
    "log_recent_wait_request",
    "starts_day",
    "hour",
    "weekday",
    "queue",
)


class RunIndex:
    """Each user's finished run times by end time, for "the last two before t"."""

    def __init__(self, table: JobTable) -> None:
        finished = np.flatnonzero(np.isfinite(table.end_s))
        order = finished[np.argsort(table.end_s[finished], kind="stable")]
        self.end_s = table.end_s[order]
        self.run_s = table.run_s[order]
        self.ratio = np.minimum(self.run_s / table.requested_s[order], 1.5)
        self._users: dict[int, tuple[FloatArray, FloatArray]] = {}
        users = table.user[order]
        by_user = np.argsort(users, kind="stable")
        bounds = np.searchsorted(users[by_user], np.arange(len(table.users) + 1))
        for user in range(len(table.users)):
            rows = by_user[bounds[user] : bounds[user + 1]]
            if len(rows):
                self._users[user] = (self.end_s[rows], self.run_s[rows])

    def ratio_before(self, t: float) -> float:
        count = int(np.searchsorted(self.end_s, t, side="right"))
        recent = self.ratio[max(count - 500, 0) : count]
        return float(np.median(recent)) if len(recent) else 0.4

    def last_two_mean(self, user: int, t: float) -> float | None:
        found = self._users.get(user)
        if found is None:
            return None
        ends, runs = found
        count = int(np.searchsorted(ends, t, side="right"))
        if count == 0:
            return None
        return float(runs[max(count - 2, 0) : count].mean())


@dataclass(frozen=True)
class QueueFeatures:
    """The features of a snapshot's pending jobs, and the two simulations' starts."""

    matrix: NDArray[np.float32]
    sim_wait_s: FloatArray  # conservative backfilling with predicted run times
    request_wait_s: FloatArray  # the same with the requested times (squeue --start)


def _user_indices(table: JobTable, names: list[str | None]) -> NDArray[np.int64]:
    known = {name: index for index, name in enumerate(table.users)}
    return np.array([known.get(name or "?", -1) for name in names], dtype=np.int64)


def _log(values: FloatArray | float) -> FloatArray:
    return np.log(np.maximum(values, 0.0) + _FLOOR_S)


def _median_wait(waits: FloatArray) -> float:
    return float(np.median(waits)) if len(waits) else np.nan


def queue_features(snapshot: WaitSnapshot, history: JobTable, runs: RunIndex) -> QueueFeatures:
    """Features of every pending job (rows in ``snapshot.pending`` order)."""
    t = snapshot.taken_at
    total = snapshot.total_procs
    pending, running = snapshot.pending, snapshot.running
    n = len(pending)
    if n == 0:
        return QueueFeatures(
            np.zeros((0, len(FEATURE_NAMES)), np.float32), np.zeros(0), np.zeros(0)
        )
    ratio = runs.ratio_before(t)

    def expected_run(user: int, requested: float) -> float:
        last = runs.last_two_mean(user, t) if user >= 0 else None
        return min(requested, last) if last is not None else ratio * requested

    p_user = _user_indices(history, [j.user for j in pending])
    p_procs = np.array([min(j.procs, total) for j in pending], dtype=np.int64)
    p_submit = np.array([j.submit_s for j in pending])
    p_request = np.array([j.requested_s for j in pending])
    p_run = np.array([expected_run(int(u), r) for u, r in zip(p_user, p_request, strict=True)])
    r_user = _user_indices(history, [j.user for j in running])
    r_procs = np.array([j.procs for j in running], dtype=np.int64)
    r_elapsed = np.array([t - j.start_s for j in running])
    r_request = np.array([j.requested_s for j in running])
    r_run = np.array([expected_run(int(u), r) for u, r in zip(r_user, r_request, strict=True)])
    r_remaining = np.where(
        r_run > r_elapsed, r_run - r_elapsed, np.maximum(0.5 * (r_request - r_elapsed), _FLOOR_S)
    )
    r_request_left = np.maximum(r_request - r_elapsed, _FLOOR_S)

    order = np.lexsort((np.arange(n), p_submit))
    sim = backfill_starts(total, r_remaining, r_procs, p_run, p_procs, order)
    by_request = backfill_starts(total, r_request_left, r_procs, p_request, p_procs, order)
    # strict first-come-first-served with the expected run times: no backfilling
    fcfs_wait = backfill_starts(
        total, r_remaining, r_procs, p_run, p_procs, order, overtaking=False
    )

    rank = np.empty(n)
    rank[order] = np.arange(n)
    work = p_procs * p_request / total / 3600.0
    ahead_work = np.empty(n)
    ahead_work[order] = np.cumsum(work[order]) - work[order]
    ahead_procs = np.empty(n)
    ahead_procs[order] = np.cumsum(p_procs[order]) - p_procs[order]
    busy = float(r_procs.sum())
    free = max(total - busy, 0.0)

    user_running: dict[int, int] = {}
    for user, procs in zip(r_user, r_procs, strict=True):
        user_running[int(user)] = user_running.get(int(user), 0) + int(procs)
    user_pending: dict[int, int] = {}
    user_ahead = np.empty(n)
    for index in order:
        user = int(p_user[index])
        user_ahead[index] = user_pending.get(user, 0)
        user_pending[user] = user_pending.get(user, 0) + 1

    # the day before t: who used the machine, and how long the jobs that started waited
    started = (history.start_s > t - DAY_S) & (history.start_s <= t)
    day_wait = history.wait_s[started]
    day_user = history.user[started]
    day_procs = history.procs[started]
    day_request = history.requested_s[started]
    day_use = (
        history.procs[started] * np.minimum(history.end_s[started], t)
        - history.procs[started] * history.start_s[started]
    )
    day_total = float(day_use.sum()) or 1.0
    recent = _median_wait(day_wait)
    size_class = np.floor(np.log2(np.maximum(day_procs, 1)))
    request_class = np.floor(np.log2(np.maximum(day_request, 60.0)))
    week = np.flatnonzero((history.start_s > t - 7 * DAY_S) & (history.start_s <= t))
    week_wait, week_user = history.wait_s[week], history.user[week]

    rows = np.zeros((n, len(FEATURE_NAMES)), dtype=np.float64)
    for index in range(n):
        user = int(p_user[index])
        same_size = day_wait[size_class == np.floor(np.log2(max(p_procs[index], 1)))]
        same_request = day_wait[request_class == np.floor(np.log2(max(p_request[index], 60.0)))]
        user_waits = week_wait[week_user == user][-3:] if user >= 0 else []
        rows[index, 16] = user_pending.get(user, 0)
        rows[index, 15] = user_running.get(user, 0) / total
        rows[index, 18] = float(day_use[day_user == user].sum()) / day_total
        rows[index, 20] = _median_wait(same_size)
        rows[index, 21] = _median_wait(np.asarray(user_waits, dtype=np.float64))
        rows[index, 22] = _median_wait(same_request)
    rows[:, 0] = _log(t - p_submit)
    rows[:, 1] = np.log2(np.maximum(p_procs, 1))
    rows[:, 2] = p_procs / total
    rows[:, 3] = _log(p_request)
    rows[:, 4] = _log(sim)
    rows[:, 5] = _log(by_request)
    rows[:, 6] = _log(fcfs_wait)
    rows[:, 7] = rank / max(n, 1)
    rows[:, 8] = ahead_work
    rows[:, 9] = ahead_procs / total
    rows[:, 10] = float(work.sum())
    rows[:, 11] = n
    rows[:, 12] = busy / total
    rows[:, 13] = free / total
    rows[:, 14] = (p_procs <= free).astype(np.float64)
    rows[:, 17] = user_ahead
    rows[:, 19] = recent
    rows[:, 20] = _log(rows[:, 20])
    rows[:, 21] = _log(rows[:, 21])
    rows[:, 22] = _log(rows[:, 22])
    rows[:, 19] = _log(rows[:, 19])
    rows[:, 23] = float(started.sum())
    rows[:, 24] = (t % DAY_S) / 3600.0
    rows[:, 25] = (t // DAY_S) % 7
    rows[:, 26] = [
        history.queues.index(j.queue) if j.queue in history.queues else -1 for j in pending
    ]
    return QueueFeatures(rows.astype(np.float32), sim, by_request)
