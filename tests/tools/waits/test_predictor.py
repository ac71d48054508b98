"""The wait predictor on a real trace (KTH-SP2): it learns only from the past."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.waits.jobs import JobTable, load_history
from tools.waits.predictor import WaitConfig, WaitPredictor, recent_wait_starts, request_starts

KTH = "KTH-SP2-1996-2.1-cln.swf.gz"
# a small training window keeps the test to seconds
CONFIG = WaitConfig(window_s=20 * 86400.0, step_s=6 * 3600.0, min_rows=100)


@pytest.fixture(scope="module")
def kth(shared_data: Path) -> JobTable:
    return load_history(shared_data / "traces" / KTH)


def _busy_instant(table: JobTable) -> float:
    candidates = np.linspace(
        table.submit_s.min() + 60 * 86400, table.submit_s.min() + 90 * 86400, 60
    )
    return float(max(candidates, key=lambda t: len(table.pending_index(float(t)))))


def test_the_future_changes_nothing(kth: JobTable) -> None:
    t = _busy_instant(kth)
    snapshot = kth.snapshot_at(t)
    assert len(snapshot.pending) > 5
    keep = kth.start_s <= t  # the jobs known at t; ends after t are erased too
    past = JobTable(
        job_id=kth.job_id[keep],
        submit_s=kth.submit_s[keep],
        start_s=kth.start_s[keep],
        end_s=np.where(kth.end_s[keep] <= t, kth.end_s[keep], kth.end_s[keep] + 12345.0),
        procs=kth.procs[keep],
        requested_s=kth.requested_s[keep],
        user=kth.user[keep],
        queue=kth.queue[keep],
        users=kth.users,
        queues=kth.queues,
        total_procs=kth.total_procs,
    )
    full = WaitPredictor(kth, CONFIG).predict(snapshot)
    truncated = WaitPredictor(past, CONFIG).predict(snapshot)
    assert full == truncated
    assert "quantile trees" in WaitPredictor(kth, CONFIG).predict(snapshot).basis


def test_each_interval_is_ordered_and_starts_no_earlier_than_now(kth: JobTable) -> None:
    t = _busy_instant(kth)
    result = WaitPredictor(kth, CONFIG).predict(kth.snapshot_at(t))
    for row in result.predictions:
        assert t <= row.p10_s <= row.start_s <= row.p90_s


def test_an_empty_queue_gets_an_empty_list(kth: JobTable) -> None:
    snapshot = kth.snapshot_at(_busy_instant(kth)).model_copy(update={"pending": []})
    assert WaitPredictor(kth, CONFIG).predict(snapshot).predictions == []


def test_without_history_the_simulation_answers(kth: JobTable) -> None:
    snapshot = kth.snapshot_at(_busy_instant(kth))
    empty = JobTable.build([], kth.total_procs)
    result = WaitPredictor(empty, CONFIG).predict(snapshot)
    assert "no learned model" in result.basis
    assert len(result.predictions) == len(snapshot.pending)


def test_the_baselines_answer_every_pending_job(kth: JobTable) -> None:
    t = _busy_instant(kth)
    snapshot = kth.snapshot_at(t)
    by_request = request_starts(snapshot)
    recent = recent_wait_starts(snapshot, kth.before(t))
    assert len(by_request) == len(recent) == len(snapshot.pending)
    assert (by_request >= 0).all() and (recent >= 0).all()
    # a job that fits the idle processors now starts now under the requests rule
    free = snapshot.total_procs - sum(j.procs for j in snapshot.running)
    first = min(range(len(snapshot.pending)), key=lambda i: snapshot.pending[i].submit_s)
    if snapshot.pending[first].procs <= free:
        assert by_request[first] == 0.0
