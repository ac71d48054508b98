"""The Scheduler extending a job in place: a job outliving its predicted walltime gets
more time up to the user's request and the partition's limit, on the simulated cluster
and on the real SLURM (the rest of the Scheduler: ``test_scheduler.py``)."""

from pathlib import Path

import pytest

from agents.events import (
    Envelope,
    JobSubmitted,
    PlanApproved,
    ScheduleDecision,
)
from agents.rescheduler import ReschedulePolicy
from agents.scheduler import ExtendWalltime
from knowledge_base.records import CascadeSegment, Plan, PlanStatus
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, make_plan
from tests.agents.test_scheduler import (
    _running,
    behaving,
    local_slurm_plan,
    on_local_slurm,
    run_plan,
    start_scheduler,
    until_over,
)
from tools.actuators.model import WalltimeNotExtended


@pytest.fixture
async def center(tmp_path: Path):
    async with MiniCenter(tmp_path) as c:
        yield c


EXTENDING = ReschedulePolicy(extend_in_place=True)


def _cause(plan: Plan) -> Envelope:
    return Envelope.of(PlanApproved(plan=plan), source="test", correlation_id=plan.id)


def _long_spec(walltime_s: int) -> WorkloadSpec:
    """A generic job whose user asked for ``walltime_s``: the ceiling of an extension."""
    return WorkloadSpec(
        name="lammps",
        user="bob",
        workload=GenericJob(application="lmp", nodes=1, cores=2, walltime_s=walltime_s),
    )


async def test_a_job_outliving_its_predicted_walltime_is_extended_in_place_and_completes(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=100), policy=EXTENDING)
    plan = make_plan("plan-extend", _long_spec(600), partition="batch", walltime_s=60)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    assert len(center.cluster._jobs) == 1  # the same job, nothing resubmitted
    [job] = [s for s in final.segments if s.job_id]
    assert job.state == "completed" and job.walltime_s == 60 and job.ceiling_s == 600
    [extension] = job.extensions
    assert extension.from_s == 60 and extension.refused is None
    assert 100 < extension.to_s <= 600 and extension.to_s % 60 == 0
    decisions = await center.recorder.of(ScheduleDecision)
    assert [d.action for d in decisions] == ["submit", "extend", "complete"]
    assert decisions[1].job_id == job.job_id and decisions[1].walltime_s == extension.to_s


async def test_an_extension_never_passes_the_users_request_and_then_the_rescheduler_takes_over(
    center: MiniCenter,
) -> None:
    scheduler = await start_scheduler(center, behaving(run_s=200), policy=EXTENDING)
    plan = make_plan("plan-ceiling", _long_spec(120), partition="batch", walltime_s=60)

    final = await run_plan(center, scheduler, plan)

    jobs = [s for s in final.segments if s.job_id]
    assert [(e.from_s, e.to_s) for e in jobs[0].extensions] == [(60, 120)]  # once, to the cap
    assert jobs[0].state == "timeout" and jobs[0].limit_s == 120
    decisions = await center.recorder.of(ScheduleDecision)
    assert [d.action for d in decisions][:3] == ["submit", "extend", "longer_walltime"]
    assert jobs[1].walltime_s == 240  # the Re-scheduler doubles the limit the job died at


async def test_a_refused_extension_is_recorded_once_and_the_timeout_is_resubmitted(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, int]] = []

    async def refuse(job_id: str, new_limit_s: int) -> None:
        calls.append((job_id, new_limit_s))
        raise WalltimeNotExtended("Access/permission denied")

    monkeypatch.setattr(center.cluster, "extend_walltime", refuse)
    scheduler = await start_scheduler(center, behaving(run_s=100), policy=EXTENDING)
    plan = make_plan("plan-refused", _long_spec(600), partition="batch", walltime_s=60)

    final = await run_plan(center, scheduler, plan)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    # Each job asked once for its limit, however many progress events came (the
    # resubmitted one too: it is another job, with its own limit).
    assert [job_id for job_id, _ in calls] == [s.job_id for s in jobs]
    assert jobs[0].state == "timeout"
    assert [e.refused for e in jobs[0].extensions] == ["Access/permission denied"]
    decisions = await center.recorder.of(ScheduleDecision)
    assert "extend" not in [d.action for d in decisions]
    assert decisions[1].action == "longer_walltime"


async def test_a_transient_extension_failure_keeps_the_plan_and_is_retried(
    center: MiniCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    late = ReschedulePolicy(extend_in_place=True, extend_margin_s=10)  # not while it starts
    scheduler = await start_scheduler(center, behaving(run_s=100), policy=late)
    plan = make_plan("plan-flaky", _long_spec(600), partition="batch", walltime_s=60)
    job_id = await _running(center, scheduler, plan)
    action = ExtendWalltime(
        plan_id=plan.id, job_id=job_id, segment_index=0, from_s=60, to_s=180, reason="near"
    )
    real = center.cluster.extend_walltime

    async def down(job_id: str, new_limit_s: int) -> None:
        raise WalltimeNotExtended("Unable to contact slurm controller", transient=True)

    monkeypatch.setattr(center.cluster, "extend_walltime", down)
    with pytest.raises(WalltimeNotExtended):
        await scheduler.act([action], cause=_cause(plan))
    [job] = [s for s in (await center.kb.get_plan(plan.id)).segments if s.job_id]
    assert job.extensions == []  # nothing recorded: the retry decides again
    monkeypatch.setattr(center.cluster, "extend_walltime", real)
    first = await scheduler.act([action], cause=_cause(plan))
    again = await scheduler.act([action], cause=_cause(plan))  # a redelivery
    assert [type(e.payload).__name__ for e in first] == ["ScheduleDecision"] and again == []
    [job] = [s for s in (await center.kb.get_plan(plan.id)).segments if s.job_id]
    assert [(e.from_s, e.to_s) for e in job.extensions] == [(60, 180)]
    entries = {e.job_id: e for e in await center.cluster.queue()}
    assert entries[job_id].time_limit_s == 180


@pytest.mark.slurm
async def test_on_real_slurm_a_job_outliving_its_prediction_is_extended_and_completes(
    tmp_path: Path, slurm_cluster: dict[str, str]
) -> None:
    """Predicted 1 min, runs 90 s: scontrol raises its limit, same job id, nothing resubmitted."""
    command = (
        'for i in $(seq 1 30); do echo "RIGHTSIZE_PROGRESS second=$((i * 3))/90"; sleep 3; done'
    )
    plan = local_slurm_plan(
        "plan-slurm-extend", "outlives", command, asked_s=240, memory_mb=256, walltime_s=60
    )
    policy = ReschedulePolicy(extend_in_place=True, extend_margin_s=40)  # after ~20 s
    async with on_local_slurm(tmp_path, plan, policy) as (center, scheduler):
        final = await until_over(
            center, scheduler, plan.id, steps=150, what="the extended plan over"
        )
        decisions = await center.recorder.of(ScheduleDecision)
        submissions = await center.recorder.of(JobSubmitted)
    assert final.status is PlanStatus.COMPLETED, final.reason
    [job] = [s for s in final.segments if s.job_id]  # one job: nothing resubmitted
    assert job.state == "completed" and job.walltime_s == 60
    # Usually one raise; on a loaded machine the projection may fall short and a second raise
    # follows from the first one's limit. Each is granted, chained, and within the request.
    extensions = job.extensions
    assert extensions and all(e.refused is None for e in extensions)
    assert [e.from_s for e in extensions] == [60] + [e.to_s for e in extensions[:-1]]
    assert 90 < extensions[-1].to_s <= 240
    actions = [d.action for d in decisions]
    assert actions == ["submit"] + ["extend"] * len(extensions) + ["complete"]
    assert all(d.job_id == job.job_id for d in decisions[1:-1])
    assert [s.job_id for s in submissions] == [job.job_id]


def test_a_job_that_can_still_be_extended_is_judged_against_its_ceiling_not_its_limit() -> None:
    """A re-plan for 'past its walltime' is asked against the limit the job can reach."""
    from datetime import UTC, datetime

    from agents.scheduler import _reachable_limit_s
    from knowledge_base.records import WalltimeExtension

    job = CascadeSegment(index=0, walltime_s=60, job_id="7", state="running", ceiling_s=600)
    assert _reachable_limit_s(job, EXTENDING) == 600
    assert _reachable_limit_s(job, ReschedulePolicy()) == 60  # extension off
    at = datetime(2026, 1, 1, tzinfo=UTC)
    refused = job.model_copy(
        update={"extensions": [WalltimeExtension(from_s=60, to_s=180, at=at, refused="denied")]}
    )
    assert _reachable_limit_s(refused, EXTENDING) == 60
    granted = job.model_copy(update={"extensions": [WalltimeExtension(from_s=60, to_s=180, at=at)]})
    assert granted.limit_s == 180 and _reachable_limit_s(granted, EXTENDING) == 600
