"""Workloads: a slice keeps its jobs' columns together on the trace's timeline, and the
simulator and the synthetic-trace tables drop the same jobs for the same reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

import numpy as np
import pytest

from simulations.synth.columns import table_from_jobs
from simulations.workload import Workload, replayable, workload_from_jobs
from tools.traces.swf import SWFJob


def _workload() -> Workload:
    jobs = np.arange(10, dtype=np.int64)
    return Workload(
        name="ten",
        machine_procs=8,
        submit_s=100 + 10 * jobs,
        run_s=1 + jobs,
        req_s=2 + jobs,
        procs=1 + jobs % 8,
        user=jobs % 3,
        job_ids=1000 + jobs,
        dropped=Counter({"no run time": 4}),
        skipped_lines=2,
    )


def test_a_slice_holds_every_column_of_those_jobs_on_the_same_timeline() -> None:
    whole = _workload()
    part = whole.slice(3, 7)
    assert part.jobs == 4
    for column in fields(Workload):
        value = getattr(part, column.name)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, getattr(whole, column.name)[3:7])
        else:
            assert value == getattr(whole, column.name), column.name
    assert part.submit_s[0] == 130  # not rebased to zero


def test_a_slice_to_the_end_and_past_it_stops_at_the_last_job() -> None:
    whole = _workload()
    assert whole.slice(8).job_ids.tolist() == [1008, 1009]
    assert whole.slice(8, 50).job_ids.tolist() == [1008, 1009]
    assert whole.slice(10).jobs == 0


def test_changing_a_slice_leaves_the_trace_it_came_from_alone() -> None:
    whole = _workload()
    part = whole.slice(0, 5)
    part.run_s[0] = 999
    part.dropped["no run time"] += 1
    assert whole.run_s[0] == 1
    assert whole.dropped == Counter({"no run time": 4})


def _job(line: str) -> SWFJob:
    """An SWF line's 18 numbers, -1 read as unknown (as the reader reads them)."""
    return SWFJob(*(None if value == "-1" else int(value) for value in line.split()))


#        id submit wait run alloc cpu mem req_procs req_time req_mem status user ...
JOBS = [
    _job("1  1 0  50 4 -1 -1 -1 60 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("2  2 0  -1 4 -1 -1 -1 60 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("3  3 0   0 4 -1 -1 -1 60 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("4  4 0  50 4 -1 -1 -1 -1 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("5  5 0  50 -1 -1 -1 -1 60 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("6  6 0  50 9 -1 -1 -1 60 -1 1 7 -1 -1 -1 -1 -1 -1"),
    _job("7  7 0  90 1 -1 -1 8 60 -1 0 7 -1 -1 -1 -1 -1 -1"),
]


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (JOBS[0], (50, 60, 4)),
        (JOBS[1], "no run time"),
        (JOBS[2], "no run time"),
        (JOBS[3], "no requested time"),
        (JOBS[4], "no processor count"),
        (JOBS[5], "larger than the machine"),
        (JOBS[6], (90, 60, 8)),  # ran past its request: replayed, killed at it
    ],
)
def test_a_job_is_replayed_or_dropped_for_one_named_reason(
    job: SWFJob, expected: tuple[int, int, int] | str
) -> None:
    assert replayable(job, 8) == expected


def test_the_simulator_and_the_synthetic_tables_keep_the_same_jobs() -> None:
    workload = workload_from_jobs(JOBS, name="hand", machine_procs=8)
    table, dropped = table_from_jobs(JOBS, machine_procs=8)
    assert workload.dropped == dropped
    np.testing.assert_array_equal(workload.run_s, table.run_s)
    np.testing.assert_array_equal(workload.req_s, table.requested_time_s)
    np.testing.assert_array_equal(workload.procs, table.procs)
