"""The simulated cluster's own behaviour: FCFS, limits, memory, clocks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowledge_base.records import JobState
from tests.tools.actuators.conftest import quick_job
from tools.actuators.model import RequestRejected, SimulatedWork
from tools.actuators.simulated import ManualClock, SimulatedCluster, WallClock


def _cluster(clock: ManualClock, nodes: int = 2) -> SimulatedCluster:
    return SimulatedCluster(nodes=nodes, cores_per_node=4, memory_mb_per_node=8000, clock=clock)


async def test_jobs_start_first_come_first_served_as_nodes_free_up(tmp_path: Path) -> None:
    clock = ManualClock()
    cluster = _cluster(clock)
    wide = await cluster.submit(
        quick_job(tmp_path, nodes=2, walltime_s=600, simulated=SimulatedWork(run_s=100))
    )
    narrow = await cluster.submit(
        quick_job(tmp_path, nodes=1, walltime_s=600, simulated=SimulatedWork(run_s=50))
    )
    assert (await cluster.status(narrow)).state is JobState.PENDING
    clock.advance(100)
    assert (await cluster.status(wide)).state is JobState.COMPLETED
    assert (await cluster.status(narrow)).state is JobState.RUNNING
    clock.advance(50)
    records = {r.job_id: r for r in await cluster.finished_jobs()}
    assert records[narrow].wait_s == 100
    assert records[narrow].run_s == 50


async def test_overrunning_job_times_out_at_its_walltime(tmp_path: Path) -> None:
    clock = ManualClock()
    cluster = _cluster(clock)
    job = await cluster.submit(
        quick_job(tmp_path, walltime_s=60, simulated=SimulatedWork(run_s=500))
    )
    clock.advance(61)
    status = await cluster.status(job)
    assert status.state is JobState.TIMEOUT
    assert status.end_time is not None
    assert status.start_time is not None
    assert (status.end_time - status.start_time).total_seconds() == 60


async def test_job_over_its_memory_request_is_killed_out_of_memory(tmp_path: Path) -> None:
    clock = ManualClock()
    cluster = _cluster(clock)
    job = await cluster.submit(
        quick_job(
            tmp_path,
            memory_mb=1000,
            walltime_s=60,
            simulated=SimulatedWork(run_s=50, peak_memory_mb=3000),
        )
    )
    clock.advance(60)
    status = await cluster.status(job)
    assert status.state is JobState.OUT_OF_MEMORY
    assert "peak 3000 MB > requested 1000 MB" in status.reason


async def test_request_larger_than_the_cluster_is_refused(tmp_path: Path) -> None:
    cluster = _cluster(ManualClock())
    with pytest.raises(RequestRejected, match="nodes 3 > 2"):
        await cluster.submit(quick_job(tmp_path, nodes=3))


def test_clocks_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="cannot go back"):
        ManualClock().advance(-1)
    with pytest.raises(ValueError, match="speedup must be positive"):
        WallClock(speedup=0)
    fast = WallClock(speedup=1000)
    before = fast.now()
    time.sleep(0.01)  # at least 10 ms of real time is at least 10 s of clock time
    assert (fast.now() - before).total_seconds() >= 10
