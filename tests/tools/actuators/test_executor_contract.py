"""The executor contract, run over every backend: simulated, Tapis (local server), SLURM."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from knowledge_base.records import JobState
from tests.tools.actuators.conftest import Harness, long_job, quick_job
from tools.actuators.model import JobNotFound, RequestRejected, SimulatedWork, WalltimeNotExtended


async def test_submitted_job_runs_to_completion(harness: Harness, workdir: Path) -> None:
    job_id = await harness.executor.submit(quick_job(workdir))
    status = await harness.finished(job_id)
    assert status.state is JobState.COMPLETED
    assert status.exit_code == 0
    assert status.name == "quick"
    assert status.end_time is not None


async def test_failing_job_is_failed_with_its_exit_code(harness: Harness, workdir: Path) -> None:
    request = quick_job(
        workdir, name="fails", command="exit 3", simulated=SimulatedWork(run_s=5, exit_code=3)
    )
    status = await harness.finished(await harness.executor.submit(request))
    assert status.state is JobState.FAILED
    assert status.exit_code == 3


async def test_cancel_stops_a_running_job_and_twice_is_harmless(
    harness: Harness, workdir: Path
) -> None:
    job_id = await harness.executor.submit(long_job(workdir))
    await harness.running(job_id)
    await harness.executor.cancel(job_id)
    status = await harness.finished(job_id)
    assert status.state is JobState.CANCELLED
    await harness.executor.cancel(job_id)  # already finished: nothing to do, no error


async def test_queue_snapshot_lists_the_running_job(harness: Harness, workdir: Path) -> None:
    job_id = await harness.executor.submit(long_job(workdir))
    try:
        await harness.running(job_id)
        entries = {e.job_id: e for e in await harness.executor.queue()}
        assert entries[job_id].state is JobState.RUNNING
        assert entries[job_id].partition == "batch"
        assert entries[job_id].time_limit_s == 600
    finally:
        await harness.executor.cancel(job_id)


async def test_unknown_job_is_not_found(harness: Harness) -> None:
    unknown = "999999" if harness.executor.backend != "tapis" else "00000000-no-such-job"
    with pytest.raises(JobNotFound):
        await harness.executor.status(unknown)


async def test_request_over_a_partition_limit_is_refused_before_submission(
    harness: Harness, workdir: Path
) -> None:
    before = await harness.executor.queue()
    too_long = quick_job(workdir, walltime_s=300)  # debug allows 1 minute
    with pytest.raises(
        RequestRejected, match=r"walltime 5 min exceeds .*debug's 1 min \(max_minutes\)"
    ):
        await harness.executor.submit(too_long)
    too_wide = quick_job(workdir, nodes=4, tasks_per_node=64)
    with pytest.raises(RequestRejected, match="max_nodes") as caught:
        await harness.executor.submit(too_wide)
    assert "max_cores_per_node" in str(caught.value)  # every broken limit is named
    assert await harness.executor.queue() == before


async def test_finished_jobs_account_for_a_completed_job(harness: Harness, workdir: Path) -> None:
    job_id = await harness.executor.submit(quick_job(workdir, name="accounted"))
    await harness.finished(job_id)
    records = {}
    for _ in range(harness.max_steps):  # slurmdbd records a job's end a moment later
        records = {r.job_id: r for r in await harness.executor.finished_jobs()}
        if job_id in records:
            break
        await harness.step()
    assert records[job_id].state is JobState.COMPLETED
    assert records[job_id].application == "accounted"
    assert records[job_id].requested_walltime_s == 60


async def test_statuses_answer_every_watched_job_in_one_call_and_leave_out_unknown_ones(
    harness: Harness, workdir: Path
) -> None:
    first = await harness.executor.submit(quick_job(workdir, name="batched-a"))
    second = await harness.executor.submit(long_job(workdir))
    unknown = "999999" if harness.executor.backend != "tapis" else "00000000-no-such-job"
    try:
        await harness.finished(first)
        found = await harness.executor.statuses([first, second, unknown])
        assert set(found) == {first, second}
        assert found[first].state is JobState.COMPLETED
        assert found[second].job_id == second
        assert not found[second].finished
    finally:
        await harness.executor.cancel(second)


async def test_find_by_name_gives_the_newest_job_of_that_name_queued_or_finished(
    harness: Harness, workdir: Path
) -> None:
    name = f"named-{uuid.uuid4().hex[:8]}"
    assert await harness.executor.find_by_name(name) is None
    older = await harness.executor.submit(quick_job(workdir, name=name))
    await harness.finished(older)
    assert await harness.executor.find_by_name(name) == older  # finished: from accounting
    newer = await harness.executor.submit(long_job(workdir).model_copy(update={"name": name}))
    try:
        assert await harness.executor.find_by_name(name) == newer  # queued beats finished
    finally:
        await harness.executor.cancel(newer)


async def test_cluster_state_counts_a_running_job_in_its_partitions_pool(
    harness: Harness, workdir: Path
) -> None:
    job_id = await harness.executor.submit(long_job(workdir))
    try:
        await harness.running(job_id)
        state = await harness.executor.cluster_state()
        pool = state.pool_of("batch")
        assert pool is not None
        assert pool.running_jobs >= 1
        assert job_id in {j.job_id for j in state.jobs}
        if harness.executor.backend == "tapis":  # the Jobs API reports no nodes
            assert (pool.total_nodes, pool.idle_nodes) == (None, None)
        else:
            assert pool.total_nodes == 1
            assert pool.idle_nodes == 0  # the only node is busy
        assert abs((state.taken_at - harness.executor.now()).total_seconds()) < 60
    finally:
        await harness.executor.cancel(job_id)


async def test_extend_walltime_raises_a_running_jobs_limit_in_place_or_says_it_cannot(
    harness: Harness, workdir: Path
) -> None:
    job_id = await harness.executor.submit(long_job(workdir))
    try:
        await harness.running(job_id)
        if harness.executor.backend == "tapis":  # the Jobs API cannot: a typed refusal
            with pytest.raises(WalltimeNotExtended, match="maxMinutes") as refused:
                await harness.executor.extend_walltime(job_id, 1200)
            assert not refused.value.transient
            return
        await harness.executor.extend_walltime(job_id, 1200)
        entries = {e.job_id: e for e in await harness.executor.queue()}
        assert entries[job_id].time_limit_s == 1200  # same job id, new limit
        assert entries[job_id].state is JobState.RUNNING
    finally:
        await harness.executor.cancel(job_id)


async def test_extending_a_finished_job_is_refused_for_good(
    harness: Harness, workdir: Path
) -> None:
    job_id = await harness.executor.submit(quick_job(workdir))
    await harness.finished(job_id)
    with pytest.raises(WalltimeNotExtended) as refused:
        await harness.executor.extend_walltime(job_id, 600)
    assert not refused.value.transient
