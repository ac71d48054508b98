"""The rightsize order's decision (pure): the simulator's key, the bound, the priorities."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from pydantic import ValidationError

from agents.ordering import (
    OrderingConfig,
    PendingJob,
    decide_order,
    expansion_factor,
    pending_from_queue,
)
from knowledge_base.records import JobState
from simulations.engine import EXPANSION, NO_BOUND, _order_queue
from tools.actuators.model import QueueEntry

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _job(job_id: str, waited_s: float, estimate_s: float) -> PendingJob:
    return PendingJob(
        job_id=job_id, submit_time=NOW - timedelta(seconds=waited_s), estimate_s=estimate_s
    )


def test_largest_expansion_factor_goes_first_and_priorities_fall_by_rank() -> None:
    jobs = [_job("long", 600, 3600), _job("short", 60, 30), _job("mid", 600, 600)]
    ordering = decide_order(jobs, NOW, OrderingConfig(starve_h=None, base_priority=100))
    assert [j.job_id for j in ordering.jobs] == ["short", "mid", "long"]
    assert [j.priority for j in ordering.jobs] == [102, 101, 100]
    assert ordering.jobs[0].expansion_factor == pytest.approx((60 + 30) / 30)
    assert ordering.starved == []


def test_a_job_past_the_bound_goes_before_younger_jobs_with_larger_factors() -> None:
    jobs = [_job("young-short", 60, 10), _job("old-long", 7200, 86_400), _job("older", 9000, 1e5)]
    unbounded = decide_order(jobs, NOW, OrderingConfig(starve_h=None))
    assert unbounded.jobs[0].job_id == "young-short"
    bounded = decide_order(jobs, NOW, OrderingConfig(starve_h=1.0))
    # the oldest past the bound ahead of everything else; the other one keeps its factor's place
    assert [j.job_id for j in bounded.jobs] == ["older", "young-short", "old-long"]
    assert bounded.starved == ["older", "old-long"]


def test_the_factor_floors_short_estimates_at_ten_seconds() -> None:
    assert expansion_factor(90, 1) == pytest.approx(9.1)
    assert expansion_factor(0, 100) == 1.0


def test_the_order_is_the_simulators_queue_order() -> None:
    """decide_order and the engine's xf queue (with a bound) rank the same jobs alike."""
    rng = np.random.default_rng(7)
    n = 40
    submit = np.sort(rng.integers(0, 20_000, n)).astype(np.int64)
    est = rng.integers(1, 30_000, n).astype(np.int64)
    t = 30_000
    for bound_s in (NO_BOUND, 15_000):
        queue = np.arange(n, dtype=np.int64)
        _order_queue(
            queue, t, submit, est, est, EXPANSION, bound_s, 0.0, np.empty(n), np.empty(n, np.int64)
        )
        now = NOW + timedelta(seconds=t)
        jobs = [
            PendingJob(
                job_id=f"{k:03d}",
                submit_time=NOW + timedelta(seconds=int(submit[k])),
                estimate_s=float(est[k]),
            )
            for k in range(n)
        ]
        config = OrderingConfig(starve_h=None if bound_s == NO_BOUND else bound_s / 3600)
        ranked = [int(j.job_id) for j in decide_order(jobs, now, config).jobs]
        assert ranked == queue.tolist()


def test_pending_jobs_come_from_the_queue_with_predictions_else_their_limit() -> None:
    entries = [
        QueueEntry(job_id="1", state=JobState.PENDING, submit_time=NOW, time_limit_s=600),
        QueueEntry(job_id="2", state=JobState.PENDING, submit_time=NOW, time_limit_s=600),
        QueueEntry(job_id="3", state=JobState.RUNNING, submit_time=NOW, time_limit_s=600),
        QueueEntry(job_id="4", state=JobState.PENDING, submit_time=None, time_limit_s=600),
    ]
    found = pending_from_queue(entries, {"1": 120.0})
    assert [(j.job_id, j.estimate_s) for j in found] == [("1", 120.0), ("2", 600.0)]


def test_a_bad_setting_names_the_field() -> None:
    with pytest.raises(ValidationError, match="starve_h"):
        OrderingConfig(starve_h=-1)
    with pytest.raises(ValidationError, match="estimate_s"):
        PendingJob(job_id="1", submit_time=NOW, estimate_s=0)
