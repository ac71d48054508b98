"""Job monitoring onto the bus: state changes, progress and finished jobs become events."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from agents.bus.base import BusError, Message
from agents.bus.memory import InMemoryBus
from agents.events import Envelope, JobFinished, JobProgress, JobStateChanged, decode_event
from agents.monitor import JobMonitor
from agents.topics import JOBS
from knowledge_base.records import JobState
from tests.agents.conftest import drain, unique
from tools.actuators.model import JobRequest, JobStatus, SimulatedWork
from tools.actuators.simulated import EPOCH, ManualClock, SimulatedCluster
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands


def _request(tmp_path: Path, **overrides: object) -> JobRequest:
    fields: dict[str, object] = dict(
        name="train",
        partition="batch",
        command="python train.py",
        memory_mb=100,
        walltime_s=300,
        working_dir=tmp_path,
        simulated=SimulatedWork(run_s=120),
    )
    fields.update(overrides)
    return JobRequest.model_validate(fields)


async def _events(bus: InMemoryBus, count: int) -> list[Envelope]:
    async with bus.consumer([JOBS], group_id=unique("reader")) as consumer:
        return [decode_event(r.value) for r in await drain(consumer, count, timeout_s=10)]


async def test_a_job_watched_to_the_end_yields_states_progress_and_its_record(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    cluster = SimulatedCluster(nodes=1, cores_per_node=4, memory_mb_per_node=8000, clock=clock)
    async with InMemoryBus() as bus:
        await bus.create_topics([JOBS])
        monitor = JobMonitor(cluster, bus, system="sim")
        job_id = await cluster.submit(_request(tmp_path, plan_id="plan-1"))
        monitor.watch(job_id, plan_id="plan-1")
        first = await monitor.poll_once()  # running from the start, at second 0
        clock.advance(60)
        middle = await monitor.poll_once()
        assert await monitor.poll_once() == []  # nothing changed, nothing said
        clock.advance(120)
        last = await monitor.poll_once()
        assert monitor.watching == []  # finished jobs are forgotten

        published = await _events(bus, len(first) + len(middle) + len(last))
    types = [e.type for e in published]
    assert types == [
        "job.state_changed",
        "job.progress",
        "job.progress",
        "job.state_changed",
        "job.progress",
        "job.finished",
    ]
    assert all(e.correlation_id == "plan-1" for e in published)
    changes = [e.payload_as(JobStateChanged) for e in published if e.type == "job.state_changed"]
    assert [(c.previous, c.state) for c in changes] == [
        (None, JobState.RUNNING),
        (JobState.RUNNING, JobState.COMPLETED),
    ]
    halfway = published[2].payload_as(JobProgress)
    assert (halfway.unit, halfway.done, halfway.total, halfway.fraction) == ("second", 60, 120, 0.5)
    record = published[-1].payload_as(JobFinished).job
    assert (record.state, record.run_s, record.plan_id) == (JobState.COMPLETED, 120, "plan-1")


async def test_restarted_monitor_republishes_the_same_event_ids(tmp_path: Path) -> None:
    clock = ManualClock()
    cluster = SimulatedCluster(nodes=1, cores_per_node=4, memory_mb_per_node=8000, clock=clock)
    async with InMemoryBus() as bus:
        job_id = await cluster.submit(_request(tmp_path))
        before, after = (
            JobMonitor(cluster, bus, system="sim"),
            JobMonitor(cluster, bus, system="sim"),
        )
        before.watch(job_id)
        after.watch(job_id)
        ids_before = [e.id for e in await before.poll_once()]
        ids_after = [e.id for e in await after.poll_once()]
    assert ids_before == ids_after  # consumers drop the repeats by id


async def test_a_job_the_executor_forgot_is_reported_unknown_once(tmp_path: Path) -> None:
    cluster = SimulatedCluster(nodes=1, cores_per_node=4, memory_mb_per_node=8000)
    async with InMemoryBus() as bus:
        monitor = JobMonitor(cluster, bus, system="sim", forget_after=3)
        monitor.watch("4242")
        for _ in range(2):  # missed, not yet given up
            assert await monitor.poll_once() == []
            assert monitor.watching == ["4242"]
        events = await monitor.poll_once()
        assert [e.payload_as(JobStateChanged).state for e in events] == [JobState.UNKNOWN]
        assert monitor.watching == []
        assert await monitor.poll_once() == []


class _BlindOnce(SimulatedCluster):
    """The simulated cluster, whose next status call knows no job: what SLURM 22.05's
    ``squeue --json`` answers (exit 0, no jobs) while ``slurmctld`` restarts. A double,
    because the real restart cannot be timed to one poll; the soak benchmark
    (``benchmarks/soak.py``) restarts the real controller under a running center."""

    blind = False

    async def statuses(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        if self.blind:
            self.blind = False
            return {}
        return await super().statuses(job_ids)


async def test_a_job_missing_from_one_poll_is_still_watched_and_its_end_published(
    tmp_path: Path,
) -> None:
    """The old monitor reported it UNKNOWN and forgot it at the first miss: its plan
    never ended (seen in the soak, after a slurmctld restart)."""
    clock = ManualClock()
    cluster = _BlindOnce(nodes=1, cores_per_node=4, memory_mb_per_node=8000, clock=clock)
    async with InMemoryBus() as bus:
        monitor = JobMonitor(cluster, bus, system="sim")
        job_id = await cluster.submit(_request(tmp_path, plan_id="plan-1"))
        monitor.watch(job_id, plan_id="plan-1")
        cluster.blind = True
        assert await monitor.poll_once() == []
        assert monitor.watching == [job_id]
        clock.advance(200)
        ended = await monitor.poll_once()
    assert "job.finished" in [e.type for e in ended]
    assert JobState.UNKNOWN not in [
        e.payload_as(JobStateChanged).state for e in ended if e.type == "job.state_changed"
    ]


class _RefusingBus(InMemoryBus):
    """The in-process bus, whose next ``refusals`` publishes fail as a broker that did not
    acknowledge does (a transient ``BusError``). A double, because the failure has to land
    on one chosen publish; the real broker's outage is in ``test_kafka_guarantees``."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    async def publish_many(self, messages: Sequence[Message]) -> None:
        if self.refusals:
            self.refusals -= 1
            raise BusError("the broker did not acknowledge in time")
        await super().publish_many(messages)


async def test_a_job_end_whose_publish_failed_is_published_at_the_next_poll(
    tmp_path: Path,
) -> None:
    """The old monitor forgot the job before publishing its end: the end was lost."""
    clock = ManualClock()
    cluster = SimulatedCluster(nodes=1, cores_per_node=4, memory_mb_per_node=8000, clock=clock)
    async with _RefusingBus(refusals=0) as bus:
        await bus.create_topics([JOBS])
        monitor = JobMonitor(cluster, bus, system="sim")
        job_id = await cluster.submit(_request(tmp_path, plan_id="plan-1"))
        monitor.watch(job_id, plan_id="plan-1")
        started = await monitor.poll_once()
        clock.advance(200)  # the job ends (120 s)
        bus.refusals = 2
        for _ in range(2):
            with contextlib.suppress(BusError):  # what the Scheduler's poll loop does
                assert await monitor.poll_once() == []
            assert monitor.watching == [job_id]  # still watched: its end is not out yet
        ended = await monitor.poll_once()
        assert monitor.watching == []
        published = await _events(bus, len(started) + len(ended))
    assert [e.type for e in ended] == ["job.state_changed", "job.progress", "job.finished"]
    finished = [e.payload_as(JobFinished) for e in published if e.type == "job.finished"]
    assert [f.job.state for f in finished] == [JobState.COMPLETED]


@pytest.mark.slurm
async def test_progress_printed_by_a_real_slurm_job_reaches_the_bus(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    tmp_path.chmod(0o777)
    script = (
        f'{sys.executable} -c "import time\n'
        "for e in range(1, 4):\n"
        "    time.sleep(1); print(f'RIGHTSIZE_PROGRESS epoch={e}/3', flush=True)\""
    )
    executor = SlurmExecutor(system=import_slurm_system("local", "lab", SlurmCommands()))
    async with InMemoryBus() as bus:
        monitor = JobMonitor(executor, bus, system="local")
        job_id = await executor.submit(
            _request(tmp_path, command=script, walltime_s=60, partition="debug")
        )
        monitor.watch(job_id)
        seen: list[Envelope] = []
        for _ in range(600):  # it may wait behind a 2-core job of the e2e lane beside
            seen.extend(await monitor.poll_once())
            if not monitor.watching:
                break
            await asyncio.sleep(0.5)
    finals = [e.payload_as(JobProgress) for e in seen if e.type == "job.progress"]
    assert finals[-1].done == 3
    assert finals[-1].fraction == 1.0
    assert seen[-1].payload_as(JobFinished).job.state is JobState.COMPLETED


class _CountingCommands(SlurmCommands):
    """The real SLURM commands, counted by name (what a poll costs the controller)."""

    def __init__(self) -> None:
        super().__init__(timeout_s=30)
        self.calls: list[str] = []

    def run(self, args: Sequence[str], stdin: str | None = None) -> str:
        self.calls.append(args[0])
        return super().run(args, stdin)


@pytest.mark.slurm
async def test_a_poll_of_several_real_slurm_jobs_asks_squeue_once(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    tmp_path.chmod(0o777)
    commands = _CountingCommands()
    executor = SlurmExecutor(
        system=import_slurm_system("local", "lab", SlurmCommands()), commands=commands
    )
    jobs = [
        await executor.submit(_request(tmp_path, name=f"poll-{i}", command="sleep 30"))
        for i in range(3)
    ]
    try:
        async with InMemoryBus() as bus:
            monitor = JobMonitor(executor, bus, system="local")
            for job_id in jobs:
                monitor.watch(job_id)
            commands.calls.clear()
            events = await monitor.poll_once()
        assert commands.calls.count("squeue") == 1  # was two per job: status, then output
        assert {e.payload_as(JobStateChanged).job_id for e in events} == set(jobs)
    finally:
        for job_id in jobs:
            await executor.cancel(job_id)


async def test_a_simulated_clusters_events_carry_its_own_time(tmp_path: Path) -> None:
    # A simulated cluster keeps its own clock (a trace replay starts it in January);
    # events stamped with the wall clock would put a job's end months from its start.
    clock = ManualClock()
    cluster = SimulatedCluster(nodes=1, cores_per_node=4, memory_mb_per_node=8000, clock=clock)
    async with InMemoryBus() as bus:
        await bus.create_topics([JOBS])
        monitor = JobMonitor(cluster, bus, system="sim")
        monitor.watch(await cluster.submit(_request(tmp_path)))
        started = await monitor.poll_once()
        clock.advance(120)
        ended = await monitor.poll_once()
    assert {e.time for e in started} == {EPOCH}
    assert {e.time for e in ended} == {EPOCH + timedelta(seconds=120)}
