"""The Scheduler gives the batch system the rightsize order after its monitor polls.

The simulated cluster (tests/agents/harness.py, one node of 2 cores on a manual clock)
holds the queue; what sets priorities is the executor's seam (``priority_setter``),
here a setter that writes them down (the simulated cluster takes none of its own; it runs
one job per node); the same Scheduler on the real SLURM is the slurm-marked test at the end.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from agents.events import PlanApproved
from agents.ordering import OrderingConfig
from agents.rescheduler import ReschedulePolicy
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.records import Plan, PlanStatus
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, make_plan, until
from tests.private_slurm import PrivateSlurm
from tools.actuators.model import JobRequest, SimulatedWork
from tools.actuators.ordering import PriorityNotSet, PrioritySetter


class Priorities(PrioritySetter):
    """Writes down every priority it is given; ``refuse`` makes it answer as SLURM does
    without operator rights."""

    def __init__(self, refuse: str | None = None) -> None:
        self.given: dict[str, int] = {}
        self.calls = 0
        self.refuse = refuse

    async def set_priority(self, job_id: str, priority: int) -> None:
        self.calls += 1
        if self.refuse is not None:
            raise PriorityNotSet(self.refuse, reason="rights")
        self.given[job_id] = priority


def _spec(walltime_s: int, cores: int = 1) -> WorkloadSpec:
    return WorkloadSpec(
        name="lammps",
        user="bob",
        workload=GenericJob(application="lmp", nodes=1, cores=cores, walltime_s=walltime_s),
    )


def _request(name: str, cores: int, walltime_s: int, run_s: int) -> JobRequest:
    return JobRequest(
        name=name,
        partition="batch",
        command="true",
        tasks_per_node=cores,
        memory_mb=100,
        walltime_s=walltime_s,
        simulated=SimulatedWork(run_s=run_s, peak_memory_mb=50),
    )


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        yield c


async def start(
    center: MiniCenter,
    setter: PrioritySetter | None,
    monkeypatch: pytest.MonkeyPatch,
    run_s: int = 100,
    **config: object,
) -> Scheduler:
    center.cluster.model = lambda request: SimulatedWork(run_s=run_s, peak_memory_mb=100)
    if setter is not None:
        monkeypatch.setattr(center.cluster, "priority_setter", lambda: setter)
    scheduler = Scheduler(
        center.kb,
        {"testcluster": center.cluster},
        center.bus,
        SchedulerConfig.model_validate(
            {"checkpoint_overhead_s": 10, "ordering": OrderingConfig(), **config}
        ),
    )
    await center.start(scheduler)
    return scheduler


async def test_pending_jobs_get_priorities_in_the_rightsize_order_after_a_poll(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    setter = Priorities()
    scheduler = await start(center, setter, monkeypatch, order_interval_s=0)
    blocker = await center.cluster.submit(_request("blocker", 2, 600, 590))
    long = make_plan("plan-long", _spec(600), partition="batch", walltime_s=500)
    short = make_plan("plan-short", _spec(600), partition="batch", walltime_s=120)
    for plan in (long, short):  # the long one came first
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()
        center.clock.advance(5)
    ids = {p.id: await _job_of(center, p.id) for p in (long, short)}

    stop = asyncio.Event()
    monitors = asyncio.create_task(scheduler.run_monitors(stop))  # polls, then orders
    try:
        for _ in range(500):
            if len(setter.given) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await monitors

    assert blocker not in setter.given  # running: not ordered
    # the shorter predicted walltime has the larger expansion factor: it goes first
    assert setter.given[ids["plan-short"]] > setter.given[ids["plan-long"]]
    assert await scheduler.extension_blocked("testcluster", ids["plan-long"], 600) is None


async def _job_of(center: MiniCenter, plan_id: str) -> str:
    [job_id] = [s.job_id for s in (await center.kb.get_plan(plan_id)).segments if s.job_id]
    return job_id


async def test_rounds_are_spaced_and_none_is_tried_without_a_setter(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = await start(center, None, monkeypatch)  # the simulated cluster takes none
    await center.cluster.submit(_request("blocker", 2, 600, 590))
    await center.cluster.submit(_request("queued", 1, 600, 10))
    assert await scheduler.order_queue("testcluster") is None
    assert await scheduler.order_queue("elsewhere") is None

    setter = Priorities()
    monkeypatch.setattr(center.cluster, "priority_setter", lambda: setter)
    off = Scheduler(center.kb, {"testcluster": center.cluster}, center.bus, SchedulerConfig())
    assert await off.order_queue("testcluster") is None  # the default: the center's order
    assert setter.calls == 0
    assert (await scheduler.order_queue("testcluster")) is not None
    assert await scheduler.order_queue("testcluster") is None  # within order_interval_s
    center.clock.advance(scheduler.config.order_interval_s)
    assert (await scheduler.order_queue("testcluster")) is not None
    assert setter.calls == 2  # one pending job, two rounds


async def test_no_rights_is_one_warning_and_the_center_keeps_its_order(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    setter = Priorities(refuse="Access/permission denied (needs SLURM operator rights)")
    scheduler = await start(center, setter, monkeypatch, order_interval_s=0, order_retry_s=200)
    await center.cluster.submit(_request("blocker", 2, 600, 590))
    await center.cluster.submit(_request("a", 1, 600, 10))
    await center.cluster.submit(_request("b", 1, 60, 10))
    caplog.set_level(logging.INFO)
    for _ in range(3):
        await scheduler.order_queue("testcluster")
        center.clock.advance(60)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "rights" in warnings[0].getMessage()
    assert "operator rights" in warnings[0].getMessage()
    assert setter.calls == 1  # refused at the first update; left alone for order_retry_s
    center.clock.advance(100)  # 300 s after the refusal, the blocker still running
    outcome = await scheduler.order_queue("testcluster")
    assert outcome is not None and outcome.stopped == "rights" and setter.calls == 2
    assert await scheduler.extension_blocked("testcluster", "x", 600) is None


async def test_a_starved_job_goes_first_and_no_running_job_is_extended_past_it(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    setter = Priorities()
    bound = OrderingConfig(starve_h=20 / 3600)  # 20 s
    scheduler = await start(
        center,
        setter,
        monkeypatch,
        run_s=100,
        order_interval_s=0,
        ordering=bound,
        policy=ReschedulePolicy(extend_in_place=True, extend_margin_s=10),
    )
    # The node runs the plan's job (predicted 60 s, runs 100 s, the user asked 600 s);
    # an older long job and two younger short ones wait behind it.
    plan = make_plan("plan-outlives", _spec(600), partition="batch", walltime_s=60)
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()
    wide = await center.cluster.submit(_request("wide", 2, 600, 10))
    young = await center.cluster.submit(_request("young", 1, 60, 10))
    center.clock.advance(1)
    young_later = await center.cluster.submit(_request("younger", 1, 30, 10))

    async def over() -> Plan | None:
        stored = await center.kb.get_plan(plan.id)
        return stored if stored.status.ended else None

    async def step() -> None:
        center.clock.advance(10)
        await scheduler.monitors["testcluster"].poll_once()
        await scheduler.order_queue("testcluster")
        await center.settle()

    final = await until(over, step, steps=200, what="plan over")

    # Past the bound the old long job went first, ahead of the younger, shorter ones.
    assert (
        setter.given[wide] > setter.given[young] and setter.given[wide] > setter.given[young_later]
    )
    assert final.status is PlanStatus.COMPLETED
    first = next(s for s in final.segments if s.job_id)
    [extension] = first.extensions
    assert extension.refused is not None and "starvation bound" in extension.refused
    assert wide in extension.refused and "would move its reservation" in extension.refused
    assert first.state == "timeout" and first.limit_s == 60  # killed at its limit


@pytest.mark.slurm
async def test_on_slurm_the_scheduler_sets_the_order_and_without_rights_leaves_it(
    private_slurm: PrivateSlurm,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import shutil
    import tempfile

    from tools.actuators.slurm import SlurmExecutor
    from tools.actuators.slurm_commands import SlurmCommands

    monkeypatch.setenv("SLURM_CONF", str(private_slurm.conf))
    if not private_slurm.controller_running():
        private_slurm.start_controller()

    def sbatch(name: str, minutes: int, partition: str = "batch") -> str:
        out = subprocess.run(
            [
                *("sbatch", "--parsable", "--exclusive", "-p", partition, "-t", str(minutes)),
                *("-J", name, "-o", "/dev/null", "--chdir", "/tmp", "--wrap", "sleep 30"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    def priority(job_id: str) -> int:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%Q"], capture_output=True, text=True, timeout=30
        )
        return int(out.stdout.strip())

    blocker = sbatch("blocker", 2)
    slow = sbatch("slow", 10)
    quick = sbatch("quick", 1)
    readable = Path(tempfile.mkdtemp(prefix="rightsize-ordering-"))
    try:
        async with MiniCenter(tmp_path) as center:
            executor = SlurmExecutor(output_dir=tmp_path)
            scheduler = Scheduler(
                center.kb,
                {"slurm": executor},
                center.bus,
                SchedulerConfig(order_interval_s=0, ordering=OrderingConfig()),
            )
            outcome = await scheduler.order_queue("slurm")
            assert outcome is not None and outcome.stopped is None
            assert {slow, quick} <= set(outcome.set)
            assert priority(quick) > priority(slow)  # by their limits: quick goes first
            before = (priority(quick), priority(slow))

            readable.chmod(0o755)
            conf = readable / "slurm.conf"
            shutil.copy(private_slurm.conf, conf)
            conf.chmod(0o644)
            as_nobody = ["runuser", "-u", "nobody", "--", "env", f"SLURM_CONF={conf}"]
            refused = Scheduler(
                center.kb,
                {"slurm": SlurmExecutor(commands=SlurmCommands(prefix=as_nobody))},
                center.bus,
                SchedulerConfig(order_interval_s=0, ordering=OrderingConfig()),
            )
            caplog.set_level(logging.INFO)
            for _ in range(3):
                outcome = await refused.order_queue("slurm")
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(warnings) == 1 and "rights" in warnings[0].getMessage()
            assert (priority(quick), priority(slow)) == before
    finally:
        subprocess.run(["scancel", blocker, slow, quick], timeout=30)
        shutil.rmtree(readable, ignore_errors=True)


async def test_an_extension_that_leaves_the_starved_jobs_reservation_where_it_is_goes_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with MiniCenter(tmp_path, nodes=2) as center:
        setter = Priorities()
        scheduler = await start(
            center,
            setter,
            monkeypatch,
            run_s=200,
            order_interval_s=0,
            ordering=OrderingConfig(starve_h=20 / 3600),
            policy=ReschedulePolicy(extend_in_place=True, extend_margin_s=10),
        )
        # Node 1 runs the plan's job (limit 120 s, runs 200 s), node 2 a job killed at
        # 120 s too; a job waits for either node: its reservation is at 120 s, and
        # raising the plan's job's limit leaves it there (the other node frees then).
        plan = make_plan("plan-slack", _spec(600), partition="batch", walltime_s=120)
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()
        await center.cluster.submit(_request("other", 1, 120, 119))
        wide = await center.cluster.submit(_request("wide", 1, 600, 10))
        await scheduler.order_queue("testcluster")

        async def over() -> Plan | None:
            stored = await center.kb.get_plan(plan.id)
            return stored if stored.status.ended else None

        starved_at: list[datetime] = []  # when the waiting job was past the bound

        async def step() -> None:
            center.clock.advance(10)
            await scheduler.monitors["testcluster"].poll_once()
            await scheduler.order_queue("testcluster")
            if wide in scheduler._orders["testcluster"].starved:
                starved_at.append(center.cluster.now())
            await center.settle()

        final = await until(over, step, steps=200, what="plan over")

        [job] = [s for s in final.segments if s.job_id]
        [extension] = job.extensions
        assert extension.refused is None and job.state == "completed"
        assert starved_at and starved_at[0] < extension.at <= starved_at[-1]  # while starved


def test_the_reservation_is_easys_with_the_running_jobs_limits() -> None:
    from datetime import UTC, datetime, timedelta

    from agents.scheduling.queue_order import reservation
    from knowledge_base.records import JobState
    from tools.actuators.model import QueueEntry
    from tools.actuators.state import ClusterState, NodePool

    now = datetime(2026, 1, 1, tzinfo=UTC)

    def entry(job_id: str, state: JobState, nodes: int, limit_s: int, started_s: int) -> QueueEntry:
        return QueueEntry(
            job_id=job_id,
            state=state,
            partition="batch",
            nodes=nodes,
            time_limit_s=limit_s,
            submit_time=now - timedelta(hours=1),
            start_time=now - timedelta(seconds=started_s) if state is JobState.RUNNING else None,
        )

    cluster = ClusterState(
        taken_at=now,
        source="test",
        pools=[NodePool(name="p", partitions=["batch"], total_nodes=4)],
        jobs=[
            entry("a", JobState.RUNNING, 2, 3600, 600),  # ends in 3000 s
            entry("b", JobState.RUNNING, 1, 1200, 600),  # ends in 600 s
            entry("c", JobState.RUNNING, 1, 7200, 0),  # ends in 7200 s
            entry("w", JobState.PENDING, 3, 3600, 0),
        ],
    )
    # 0 free; b frees 1 at +600 s, a frees 2 more at +3000 s: 3 free then
    assert reservation(cluster, "w") == now + timedelta(seconds=3000)
    # b's extension to +2000 s stays before a's end: the reservation does not move
    assert reservation(cluster, "w", extended=("b", 2600)) == now + timedelta(seconds=3000)
    # a's extension moves it
    assert reservation(cluster, "w", extended=("a", 4600)) == now + timedelta(seconds=4000)
    unknown = cluster.model_copy(
        update={"jobs": [*cluster.jobs[:3], cluster.jobs[3].model_copy(update={"nodes": 5})]}
    )
    assert reservation(unknown, "w") is None  # more nodes than the pool has
