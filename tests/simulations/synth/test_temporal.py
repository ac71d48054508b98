"""Time-aware fidelity: profiles, autocorrelation, sessions, sequence similarity."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.synth.clock import TraceClock
from simulations.synth.columns import JobTable, Trace
from simulations.synth.temporal import (
    autocorrelation,
    compare_time,
    sessions,
    time_profile,
    total_variation,
    work_profile,
)


def _table(
    submit_s: list[float] | np.ndarray,
    user: list[int] | np.ndarray,
    procs: np.ndarray | None = None,
    run_s: np.ndarray | None = None,
) -> JobTable:
    submit = np.array(submit_s, dtype=np.float64)
    n = submit.size
    return JobTable(
        interarrival_s=np.diff(submit, prepend=submit[:1]),
        procs=np.ones(n, dtype=np.int64) if procs is None else procs.astype(np.int64),
        requested_time_s=np.full(n, 100, dtype=np.int64)
        if run_s is None
        else run_s.astype(np.int64),
        run_s=np.full(n, 50, dtype=np.int64) if run_s is None else run_s.astype(np.int64),
        status=np.ones(n, dtype=np.int64),
        user=np.array(user, dtype=np.int64),
    )


def test_total_variation_is_zero_for_equal_and_one_for_disjoint_profiles() -> None:
    assert total_variation(np.array([1, 2, 3]), np.array([2, 4, 6])) == 0
    assert total_variation(np.array([1, 0]), np.array([0, 5])) == 1


def test_autocorrelation_finds_a_daily_cycle() -> None:
    hours = np.arange(24 * 30)
    per_hour = 10 + 8 * np.sin(2 * np.pi * hours / 24)
    acf = autocorrelation(per_hour, 48)
    assert acf[23] == pytest.approx(acf.max())
    assert acf[11] < -0.9
    assert not autocorrelation(np.ones(10), 3).any()


def test_sessions_split_on_a_twenty_minute_pause_per_user() -> None:
    table = _table([0, 60, 100, 200, 2000, 2100], [1, 1, 2, 1, 1, 2])
    s = sessions(table)
    assert s[0] == s[1] == s[3]  # user 1 within 20 minutes
    assert s[4] != s[3]  # 1,800 s later: a new session
    assert s[2] != s[5]  # user 2 waited 2,000 s
    assert len(set(s.tolist())) == 4


def test_hours_are_local_to_the_traces_zone() -> None:
    # 1998-05-01 07:26:33 in San Diego (PDT, UTC-7), a Friday.
    clock = TraceClock(epoch_s=893_466_664 + 566_129, zone_name="US/Pacific")
    profile = time_profile(_table([0, 3600, 7200], [1, 1, 1]), clock)
    assert np.flatnonzero(profile.hour_of_day).tolist() == [7, 8, 9]
    assert np.flatnonzero(profile.day_of_week).tolist() == [4]
    utc = time_profile(_table([0], [1]), TraceClock(epoch_s=0, zone_name=None))
    assert utc.hour_of_day[0] == 1 and utc.day_of_week[3] == 1  # 1970-01-01 was a Thursday


def test_shuffled_users_break_sessions_and_shifted_hours_break_the_profile(
    sdsc_trace: Trace,
) -> None:
    real = sdsc_trace.table
    same = compare_time(real, sdsc_trace.clock, real, sdsc_trace.clock)
    assert same.sequence_similarity == 1 and same.hour_of_day_tv == 0
    shuffled = real.take(slice(None))
    shuffled.user = np.random.default_rng(0).permutation(real.user)
    broken = compare_time(real, sdsc_trace.clock, shuffled, sdsc_trace.clock)
    assert broken.session_jobs_ks > 0.1
    assert broken.sequence_similarity < 0.95
    assert broken.hour_of_day_tv == 0  # same times
    later = TraceClock(epoch_s=sdsc_trace.clock.epoch_s + 6 * 3600, zone_name="US/Pacific")
    assert compare_time(real, sdsc_trace.clock, real, later).hour_of_day_tv > 0.1


def test_arrivals_that_avoid_the_queue_find_less_than_its_time_mean() -> None:
    """A big job every day at midnight fills the machine for 10 hours. Small jobs
    submitted only after it has drained find no backlog (ratio below 1); the same jobs
    submitted while it drains find about its time mean or more."""
    days = 30
    big = np.arange(days) * 86_400.0
    small_late = (big[:, None] + np.linspace(11, 23, 40)[None, :] * 3600).ravel()
    small_early = (big[:, None] + np.linspace(0.1, 9, 40)[None, :] * 3600).ravel()

    def trace(small: np.ndarray) -> JobTable:
        submit = np.concatenate([big, small])
        order = np.argsort(submit, kind="stable")
        procs = np.concatenate([np.full(days, 100), np.ones(small.size)])[order]
        run = np.concatenate([np.full(days, 36_000), np.full(small.size, 60)])[order]
        return _table(submit[order], np.ones(submit.size, dtype=np.int64), procs, run)

    avoiding = work_profile(trace(small_late), machine_procs=100)
    queuing = work_profile(trace(small_early), machine_procs=100)
    assert avoiding.arrival_backlog_ratio < 0.2
    assert queuing.arrival_backlog_ratio > 1.0
    assert work_profile(_table([0.0], [1]), machine_procs=100).arrival_backlog_ratio == 0


def test_busy_days_with_smaller_jobs_correlate_below_zero() -> None:
    rng = np.random.default_rng(0)
    jobs = rng.integers(5, 60, size=40)  # jobs per day
    submit = np.concatenate(
        [d * 86_400.0 + np.sort(rng.uniform(0, 86_000, n)) for d, n in enumerate(jobs)]
    )
    day = (submit // 86_400).astype(np.int64)
    users = np.ones(submit.size, dtype=np.int64)
    smaller = (6_000 / jobs[day]).astype(np.int64)  # a day's work shared by its jobs
    independent = rng.integers(50, 500, size=submit.size)
    busy_small = work_profile(_table(submit, users, run_s=smaller), machine_procs=10)
    unrelated = work_profile(_table(submit, users, run_s=independent), machine_procs=10)
    assert busy_small.daily_jobs_work_correlation < -0.9
    assert abs(unrelated.daily_jobs_work_correlation) < 0.4
    assert busy_small.daily_work_cv < unrelated.daily_work_cv


def test_compare_time_gives_the_work_profiles_when_it_knows_the_machines(
    sdsc_trace: Trace,
) -> None:
    real = sdsc_trace.table
    without = compare_time(real, sdsc_trace.clock, real, sdsc_trace.clock)
    assert without.real_work is None and without.synthetic_work is None
    procs = sdsc_trace.machine_procs
    same = compare_time(
        real, sdsc_trace.clock, real, sdsc_trace.clock, real_procs=procs, synthetic_procs=procs
    )
    assert same.real_work == same.synthetic_work
    assert same.real_work is not None and same.real_work.arrival_backlog_ratio >= 1.0
