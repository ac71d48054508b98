"""The Scheduler agent on the simulated cluster: cascades, OOM, timeouts, no double submits.

A simulated cluster on a manual clock (see ``tests/agents/harness.py``) so that minutes
of job time pass in milliseconds; the same agent runs on the real SLURM in
``tests/e2e/test_cascade.py`` and in the slurm-marked OOM test below.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agents.events import (
    JobSubmitted,
    PlanApproved,
    PlanCancelRequested,
    PlanFinished,
    PlanReplanDecided,
    ScheduleDecision,
)
from agents.rescheduler import ReschedulePolicy
from agents.scheduler import Scheduler, SchedulerConfig, job_name
from knowledge_base.records import CascadeSegment, Plan, PlanStatus
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, dnn_spec, generic_spec, make_plan, until
from tools.actuators.model import JobRequest, SimulatedWork


def behaving(run_s: int, peak_mb: int = 100):
    """The simulated cluster's model of every job: runs ``run_s``, peaks at ``peak_mb``."""

    def behaviour(request: JobRequest) -> SimulatedWork:
        return SimulatedWork(run_s=run_s, peak_memory_mb=peak_mb)

    return behaviour


async def run_plan(
    center: MiniCenter,
    scheduler: Scheduler,
    plan: Plan,
    *,
    steps: int = 200,
    dt_s: float = 10,
    approve: bool = True,
) -> Plan:
    """Approve ``plan`` (unless it was) and let simulated time pass until the plan is over."""
    if approve:
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()

    async def over() -> Plan | None:
        stored = await center.kb.get_plan(plan.id)
        done = (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)
        return stored if stored.status in done else None

    async def step() -> None:
        center.clock.advance(dt_s)
        await scheduler.monitors["testcluster"].poll_once()
        await center.settle()

    result: Plan = await until(over, step, steps=steps, what=f"plan {plan.id} over")
    return result


@pytest.fixture
async def center(tmp_path: Path):
    async with MiniCenter(tmp_path) as c:
        yield c


async def start_scheduler(center: MiniCenter, behaviour, **config) -> Scheduler:
    center.cluster.model = behaviour  # how the simulated cluster runs every job
    scheduler = Scheduler(
        center.kb,
        {"testcluster": center.cluster},
        center.bus,
        SchedulerConfig(checkpoint_overhead_s=10, **config),
    )
    await center.start(scheduler)
    return scheduler


async def test_a_cascade_runs_its_segments_one_after_another_and_completes(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-cascade", dnn_spec(), segments=3)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [s.index for s in jobs] == [0, 1, 2]
    assert all(s.state == "completed" for s in jobs)
    decisions = await center.recorder.of(ScheduleDecision)
    assert [d.action for d in decisions] == ["submit", "next_segment", "next_segment", "complete"]
    assert "resumes from its checkpoint" in decisions[1].reason
    finished = await center.recorder.of(PlanFinished)
    assert [f.status for f in finished] == [PlanStatus.COMPLETED]
    assert finished[0].segments == 3
    assert len(finished[0].job_ids) == 3


async def test_each_cascade_segment_is_told_its_work_budget(center: MiniCenter) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-env", dnn_spec(), segments=2)
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()
    job_id = (await center.recorder.of(JobSubmitted))[0].job_id
    request = center.cluster._jobs[job_id].request  # what the batch system was given
    assert request.environment["RIGHTSIZE_SEGMENT"] == "0"
    assert request.environment["RIGHTSIZE_SEGMENTS"] == "2"
    assert request.environment["RIGHTSIZE_SEGMENT_WORK_S"] == "50"  # 60 s - 10 s overhead
    assert request.name == job_name(plan, 0, 1)
    assert scheduler.monitors["testcluster"].watching == [job_id]


async def test_an_out_of_memory_job_is_resubmitted_with_more_memory_and_completes(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=100, peak_mb=2900))
    plan = make_plan("plan-oom", generic_spec(), partition="batch", memory_mb=2048, walltime_s=300)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [s.state for s in jobs] == ["out_of_memory", "completed"]
    assert final.option is not None and final.option.memory_mb == 3072
    decisions = await center.recorder.of(ScheduleDecision)
    assert [d.action for d in decisions] == ["submit", "more_memory", "complete"]
    assert decisions[1].memory_mb == 3072
    assert "ran out of memory with 2.0 GB" in decisions[1].reason
    assert "attempt 1 of 3" in decisions[1].reason
    # history learns both jobs as the application and the user, not as job names
    for segment in jobs:
        assert segment.job_id is not None
        record = await center.kb.get_job("testcluster", segment.job_id)
        assert (record.application, record.user) == ("lmp", "bob")


async def test_a_job_that_can_never_fit_stops_with_an_explanation_after_bounded_attempts(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=100, peak_mb=19_000))
    plan = make_plan("plan-huge", generic_spec(), partition="debug", memory_mb=1024)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.FAILED
    jobs = [s for s in final.segments if s.job_id]
    assert len(jobs) <= 1 + scheduler.config.policy.max_oom_attempts
    assert all(s.state == "out_of_memory" for s in jobs)
    # 1 GB -> 2 GB -> 3 GB -> 4 GB (debug's limit), then it stops and says why.
    assert final.option is not None and final.option.memory_mb == 4096
    assert "the most testcluster/debug allows" in final.reason
    assert "cannot fit this partition" in final.reason
    finished = await center.recorder.of(PlanFinished)
    assert finished[-1].status is PlanStatus.FAILED and finished[-1].reason == final.reason


async def test_oom_attempts_are_bounded_even_below_the_partition_limit(
    center: MiniCenter,
) -> None:
    from agents.rescheduler import ReschedulePolicy

    scheduler = await start_scheduler(
        center,
        behaving(run_s=100, peak_mb=19_000),
        policy=ReschedulePolicy(max_oom_attempts=2),
    )
    plan = make_plan("plan-bounded", generic_spec(), partition="batch", memory_mb=1024)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.FAILED
    assert len([s for s in final.segments if s.job_id]) == 3  # the first and 2 retries
    assert "bounded attempts (max_oom_attempts=2) are used up" in final.reason


async def test_a_timeout_without_checkpoint_gets_a_longer_walltime_where_the_partition_allows(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=200))
    plan = make_plan("plan-slow", generic_spec(), partition="batch", walltime_s=120)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [(s.state, s.walltime_s) for s in jobs] == [("timeout", 120), ("completed", 240)]
    decisions = await center.recorder.of(ScheduleDecision)
    assert decisions[1].action == "longer_walltime"
    assert "cannot checkpoint" in decisions[1].reason


async def test_a_timeout_at_the_partition_limit_without_checkpoint_stops_and_explains(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=100))
    plan = make_plan("plan-toolong", generic_spec(), partition="debug", walltime_s=60)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.FAILED
    assert "the longest testcluster/debug allows" in final.reason
    assert "cannot checkpoint" in final.reason
    assert len([s for s in final.segments if s.job_id]) == 1


async def test_a_redelivered_approval_submits_nothing_twice(center: MiniCenter) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-twice", dnn_spec(), segments=2)
    # Two copies of the approval with different ids: what a restarted Intelligence Plane
    # that lost its outbox marker could send.
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    assert len(center.cluster._jobs) == 2  # one per segment, however often approved
    submitted = await center.recorder.of(JobSubmitted)
    assert len({s.job_id for s in submitted}) == 2


async def test_an_interrupted_submission_is_reconciled_before_anything_is_resubmitted(
    center: MiniCenter,
) -> None:
    """A crash between recording the intent and recording the job id leaves an intent."""
    scheduler = Scheduler(center.kb, {"testcluster": center.cluster}, center.bus)
    plan = make_plan("plan-crash", generic_spec(), partition="batch", walltime_s=120)
    stored = await center.kb.put_plan(
        plan.model_copy(
            update={
                "status": PlanStatus.APPROVED,
                "segments": [
                    *plan.segments,
                    CascadeSegment(index=0, walltime_s=120, state="submitting"),
                ],
            }
        )
    )
    # The submission did reach the batch system before the crash (and already ended).
    from tools.actuators.model import JobRequest

    job_id = await center.cluster.submit(
        JobRequest(
            name=job_name(stored, 0, 1),
            partition="batch",
            command="true",
            memory_mb=100,
            walltime_s=60,
            simulated=SimulatedWork(run_s=5),
        )
    )
    center.clock.advance(10)

    watched = await scheduler.recover()

    recovered = await center.kb.get_plan(plan.id)
    assert [(s.job_id, s.state) for s in recovered.segments if s.state] == [(job_id, "pending")]
    assert watched == [job_id]


async def test_a_job_the_batch_system_no_longer_knows_ends_failed_and_so_does_its_plan(
    center: MiniCenter,
) -> None:
    """The Scheduler restarts beside a batch system that never heard of the plan's job (a
    simulated cluster of another process; on SLURM, a job neither squeue nor accounting
    knows). Before, the monitor said UNKNOWN, nobody acted on it and the plan stayed
    RUNNING for ever; now the Scheduler asks the executor once more, then ends the
    segment FAILED as lost and lets the Re-scheduler's rules end the plan."""
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-lost", generic_spec(), partition="batch", walltime_s=120)
    lost = CascadeSegment(index=0, walltime_s=120, job_id="4242", state="running")
    await center.kb.put_plan(
        plan.model_copy(update={"status": PlanStatus.RUNNING, "segments": [*plan.segments, lost]})
    )
    assert await scheduler.recover() == ["4242"]

    final = await run_plan(center, scheduler, plan, approve=False, steps=20)

    assert final.status is PlanStatus.FAILED
    assert "lost by the batch system" in final.reason and "4242" in final.reason
    assert [(s.job_id, s.state) for s in final.segments if s.job_id] == [("4242", "failed")]
    assert scheduler.monitors["testcluster"].watching == []
    assert center.cluster._jobs == {}  # nothing was resubmitted for it
    [finished] = await center.recorder.of(PlanFinished)
    assert finished.status is PlanStatus.FAILED and finished.job_ids == ["4242"]


# -- re-plan decisions (the Intelligence Plane's plan.replan_decided) -----------------------


async def _running(center: MiniCenter, scheduler: Scheduler, plan: Plan) -> str:
    """Approve ``plan`` and let its first job start; returns that job's id."""
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()
    center.clock.advance(5)
    await scheduler.monitors["testcluster"].poll_once()
    await center.settle()
    job = next(s for s in (await center.kb.get_plan(plan.id)).segments if s.job_id)
    assert job.job_id is not None
    return job.job_id


def _decision(plan: Plan, action: str, job_id: str, **fields: object) -> PlanReplanDecided:
    return PlanReplanDecided.model_validate(
        {"plan_id": plan.id, "revision": 1, "action": action, "reason": "slower", "job_id": job_id}
        | fields
    )


async def test_an_extend_decision_reshapes_the_segments_to_come_and_cancels_nothing(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-extend", dnn_spec(), segments=3)
    first = await _running(center, scheduler, plan)
    assert plan.option is not None
    batch = plan.option.model_copy(update={"partition": "batch", "walltime_s": 300})
    decision = _decision(
        plan,
        "extend",
        first,
        option=batch,
        start_index=1,
        segments=[CascadeSegment(index=0, walltime_s=300)],
    )
    # Twice, with different event ids: a revision is applied once.
    await center.publish(decision, plan.id)
    await center.publish(decision, plan.id)
    await center.settle()

    final = await run_plan(center, scheduler, plan, approve=False)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [(s.index, s.walltime_s, s.state) for s in jobs] == [
        (0, 60, "completed"),
        (1, 300, "completed"),
    ]
    requests = {j.job_id: j.request for j in center.cluster._jobs.values()}
    assert requests[jobs[1].job_id or ""].partition == "batch"
    assert requests[jobs[1].job_id or ""].environment["RIGHTSIZE_SEGMENTS"] == "2"
    assert [(r.revision, r.action, r.reason) for r in final.replans] == [(1, "extend", "slower")]
    revised = [d for d in await center.recorder.of(ScheduleDecision) if d.action == "revise"]
    assert len(revised) == 1 and revised[0].walltime_s == 300


async def test_a_resubmit_decision_cancels_the_job_and_submits_its_replacement_once(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=100))
    plan = make_plan("plan-move", generic_spec(), partition="debug", walltime_s=60)
    first = await _running(center, scheduler, plan)
    assert plan.option is not None
    batch = plan.option.model_copy(update={"partition": "batch", "walltime_s": 240})
    decision = _decision(
        plan,
        "resubmit",
        first,
        option=batch,
        start_index=0,
        segments=[CascadeSegment(index=0, walltime_s=240)],
    )
    await center.publish(decision, plan.id)
    await center.publish(decision, plan.id)  # another copy: nothing more happens
    await center.settle()

    final = await run_plan(center, scheduler, plan, approve=False)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [(s.index, s.walltime_s, s.state) for s in jobs] == [
        (0, 60, "replanned"),
        (0, 240, "completed"),
    ]
    assert len(center.cluster._jobs) == 2
    assert (await center.cluster.status(first)).state.value == "cancelled"
    actions = [d.action for d in await center.recorder.of(ScheduleDecision)]
    assert actions == ["submit", "resubmit", "complete"]
    assert [(r.revision, r.action, r.reason) for r in final.replans] == [(1, "resubmit", "slower")]


async def test_a_resubmit_decision_for_a_job_that_already_ended_replaces_nothing(
    center: MiniCenter,
) -> None:
    """The job timed out and the Re-scheduler resubmitted it before the decision came."""
    scheduler = await start_scheduler(center, behaving(run_s=100))
    plan = make_plan("plan-late", generic_spec(), partition="batch", walltime_s=60)
    first = await _running(center, scheduler, plan)

    async def retried() -> bool:
        return len(center.cluster._jobs) == 2

    async def step() -> None:
        center.clock.advance(10)
        await scheduler.monitors["testcluster"].poll_once()
        await center.settle()

    await until(retried, step, steps=20, what="the timeout's retry")
    await center.publish(_decision(plan, "resubmit", first), plan.id)
    await center.settle()
    final = await run_plan(center, scheduler, plan, approve=False)

    assert final.status is PlanStatus.COMPLETED
    assert len(center.cluster._jobs) == 2  # the retry was not touched, nothing added
    jobs = [s for s in final.segments if s.job_id]
    assert [(s.walltime_s, s.state) for s in jobs] == [(60, "timeout"), (120, "completed")]
    [revision] = final.replans
    assert revision.action == "extend" and "had already ended" in revision.reason


# -- cancellation (plan.cancel_requested: MCP cancel_plan, rightsize cancel) -----------------


async def _advance(center: MiniCenter, scheduler: Scheduler, steps: int, dt_s: float = 10) -> None:
    for _ in range(steps):
        center.clock.advance(dt_s)
        await scheduler.monitors["testcluster"].poll_once()
        await center.settle()


async def test_a_cancelled_cascade_cancels_its_pending_job_and_submits_no_next_segment(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-cancel", dnn_spec(), segments=3)
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()
    [first] = list(center.cluster._jobs)

    await center.publish(PlanCancelRequested(plan_id=plan.id, by="alice"), plan.id)
    await center.publish(PlanCancelRequested(plan_id=plan.id, by="alice"), plan.id)  # again
    await center.settle()
    await _advance(center, scheduler, 12)  # two segments' worth of time

    final = await center.kb.get_plan(plan.id)
    assert final.status is PlanStatus.CANCELLED and final.cancelled_by == "alice"
    assert final.reason == "cancelled by the user (by alice)"
    assert list(center.cluster._jobs) == [first]  # no next segment, ever
    assert (await center.cluster.status(first)).state.value == "cancelled"
    assert [(s.job_id, s.state) for s in final.segments if s.job_id] == [(first, "cancelled")]
    actions = [d.action for d in await center.recorder.of(ScheduleDecision)]
    assert actions == ["submit", "cancel"]
    finished = await center.recorder.of(PlanFinished)
    assert [f.status for f in finished] == [PlanStatus.CANCELLED]


async def test_a_segment_that_checkpointed_as_the_plan_was_cancelled_is_not_continued(
    center: MiniCenter,
) -> None:
    """The job ends (checkpointed, segment 0 of 3) before the cancel reaches the batch
    system; its job.finished arrives after the plan was cancelled. Before the Scheduler
    owned cancellation, this end submitted segment 1 of the cancelled plan."""
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-race", dnn_spec(), segments=3)
    first = await _running(center, scheduler, plan)
    center.clock.advance(50)  # it completes on the cluster; the monitor has not looked yet

    await center.publish(PlanCancelRequested(plan_id=plan.id, by="alice"), plan.id)
    await center.settle()
    await _advance(center, scheduler, 6)

    final = await center.kb.get_plan(plan.id)
    assert final.status is PlanStatus.CANCELLED
    assert list(center.cluster._jobs) == [first]
    # The ledger keeps the batch system's last word on the job.
    assert [(s.job_id, s.state) for s in final.segments if s.job_id] == [(first, "completed")]
    assert [f.status for f in await center.recorder.of(PlanFinished)] == [PlanStatus.CANCELLED]
    assert [d.action for d in await center.recorder.of(ScheduleDecision)] == ["submit", "cancel"]


async def test_cancelling_a_submission_under_way_cancels_the_job_slurm_took_under_its_name(
    center: MiniCenter,
) -> None:
    """An intent with no job id (the Scheduler stopped between sbatch and recording the
    id) whose job the batch system did take. Before, the cancel marked the intent
    cancelled and the job ran on; now it is found by its unique name and cancelled."""
    from tools.actuators.model import JobRequest

    await start_scheduler(center, behaving(run_s=500))
    plan = make_plan("plan-under-way", generic_spec(), partition="batch", walltime_s=540)
    intent = CascadeSegment(index=0, walltime_s=540, state="submitting")
    stored = await center.kb.put_plan(
        plan.model_copy(
            update={"status": PlanStatus.APPROVED, "segments": [*plan.segments, intent]}
        )
    )
    job_id = await center.cluster.submit(
        JobRequest(
            name=job_name(stored, 0, 1),
            partition="batch",
            command="sleep 500",
            memory_mb=100,
            walltime_s=540,
            simulated=SimulatedWork(run_s=500),
        )
    )

    await center.publish(PlanCancelRequested(plan_id=plan.id, by="alice"), plan.id)
    await center.settle()

    final = await center.kb.get_plan(plan.id)
    assert final.status is PlanStatus.CANCELLED
    assert (await center.cluster.status(job_id)).state.value == "cancelled"
    assert [(s.job_id, s.state) for s in final.segments if s.state] == [(job_id, "cancelled")]
    [finished] = await center.recorder.of(PlanFinished)
    assert finished.job_ids == [job_id]
    assert list(center.cluster._jobs) == [job_id]  # nothing else was submitted


async def test_cancelling_a_submission_that_never_reached_the_batch_system_just_ends_it(
    center: MiniCenter,
) -> None:
    await start_scheduler(center, behaving(run_s=500))
    plan = make_plan("plan-never-sent", generic_spec(), partition="batch", walltime_s=540)
    intent = CascadeSegment(index=0, walltime_s=540, state="submitting")
    await center.kb.put_plan(
        plan.model_copy(
            update={"status": PlanStatus.APPROVED, "segments": [*plan.segments, intent]}
        )
    )

    await center.publish(PlanCancelRequested(plan_id=plan.id, by="alice"), plan.id)
    await center.settle()

    final = await center.kb.get_plan(plan.id)
    assert final.status is PlanStatus.CANCELLED
    assert [(s.job_id, s.state) for s in final.segments if s.state] == [(None, "cancelled")]
    assert center.cluster._jobs == {}


async def test_a_plan_cancelled_before_its_approval_arrives_never_runs(
    center: MiniCenter,
) -> None:
    """The Intelligence Plane approved it as the user cancelled it: the approval finds a
    cancelled plan, submits nothing, and says the plan is over (the plane stops waiting)."""
    scheduler = await start_scheduler(center, behaving(run_s=45))
    plan = make_plan("plan-early", generic_spec(), partition="batch", walltime_s=120)
    await center.kb.put_plan(plan)
    await center.publish(PlanCancelRequested(plan_id=plan.id, by="bob"), plan.id)
    await center.settle()
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()
    await _advance(center, scheduler, 2)

    assert (await center.kb.get_plan(plan.id)).status is PlanStatus.CANCELLED
    assert center.cluster._jobs == {}
    finished = await center.recorder.of(PlanFinished)
    assert {f.status for f in finished} == {PlanStatus.CANCELLED}


@asynccontextmanager
async def on_local_slurm(
    tmp_path: Path,
    plan: Plan,
    policy: ReschedulePolicy | None = None,
) -> AsyncIterator[tuple[MiniCenter, Scheduler]]:
    """A center whose Scheduler runs ``plan`` (on ``local``/``batch``) on the local SLURM,
    its catalog imported from it, polling every 2 s; ``plan`` is approved and handed over."""
    from knowledge_base.catalog import Catalog
    from tools.actuators.slurm import SlurmExecutor
    from tools.actuators.slurm_catalog import import_slurm_system
    from tools.actuators.slurm_commands import SlurmCommands

    system = import_slurm_system("local", "lab", SlurmCommands())
    workdir = tmp_path / "jobs"
    workdir.mkdir()
    os.chmod(workdir, 0o777)
    async with MiniCenter(tmp_path) as center:
        await center.kb.put_catalog(Catalog(systems=[system]))
        scheduler = Scheduler(
            center.kb,
            {"local": SlurmExecutor(system=system, output_dir=workdir)},
            center.bus,
            SchedulerConfig(
                work_dir=workdir, poll_interval_s=2, policy=policy or ReschedulePolicy()
            ),
        )
        await center.start(scheduler)
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()
        yield center, scheduler


def local_slurm_plan(
    plan_id: str, name: str, command: str, *, asked_s: int, memory_mb: int, walltime_s: int
) -> Plan:
    """One job of ``command`` on ``local``/``batch``: the user asked ``asked_s``, the plan
    gives it ``walltime_s`` and ``memory_mb``."""
    from knowledge_base.records import PlanOption

    spec = WorkloadSpec(
        name=name,
        user="root",
        workload=GenericJob(application=command, nodes=1, cores=1, walltime_s=asked_s),
    )
    option = PlanOption(
        system="local",
        partition="batch",
        nodes=1,
        cores_per_node=1,
        memory_mb=memory_mb,
        walltime_s=walltime_s,
    )
    return Plan(
        id=plan_id,
        user="root",
        spec=spec,
        option=option,
        segments=[CascadeSegment(index=0, walltime_s=walltime_s)],
    )


async def until_over(
    center: MiniCenter, scheduler: Scheduler, plan_id: str, *, steps: int, what: str
) -> Plan:
    """The plan once it completed or failed, polling the local SLURM every 2 s."""

    async def over() -> Plan | None:
        stored = await center.kb.get_plan(plan_id)
        done = (PlanStatus.COMPLETED, PlanStatus.FAILED)
        return stored if stored.status in done else None

    async def step() -> None:
        await asyncio.sleep(2)
        await scheduler.monitors["local"].poll_once()
        await center.settle()

    final: Plan = await until(over, step, steps=steps, what=what)
    return final


@pytest.mark.slurm
async def test_on_real_slurm_an_oom_kill_is_resubmitted_with_more_memory(
    tmp_path: Path, slurm_cluster: dict[str, str]
) -> None:
    """The local SLURM kills a job past its --mem; the Scheduler asks for more and it completes."""
    # Holds ~700 MB for 12 s: killed under 512 MB (OverMemoryKill samples every 5 s).
    command = (
        f'{sys.executable} -c "import time; b = bytearray(700 * 2**20); '
        '[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(12)"'
    )
    plan = local_slurm_plan(
        "plan-slurm-oom", "memhog", command, asked_s=60, memory_mb=512, walltime_s=120
    )
    async with on_local_slurm(tmp_path, plan) as (center, scheduler):
        final = await until_over(center, scheduler, plan.id, steps=150, what="the OOM plan over")
    assert final.status is PlanStatus.COMPLETED, final.reason
    jobs = [s for s in final.segments if s.job_id]
    assert [s.state for s in jobs] == ["out_of_memory", "completed"]
    assert final.option is not None and final.option.memory_mb == 1024


# -- extending a running job's limit in place (issue 17 item 4) ------------------------------
