"""The Scheduler's decisions: pure, one handler per kind of observation.

``decide`` maps what was sensed to actions with the Re-scheduler's rules
(``agents.rescheduler``); nothing here reads the knowledge base or an executor, so every
decision replays from its observation.
"""

from __future__ import annotations

from collections.abc import Collection

from agents.events import PlanCancelRequested, PlanReplanDecided
from agents.rescheduler import (
    Extend,
    Finish,
    NextJob,
    ReschedulePolicy,
    entry_of,
    in_flight,
    next_planned_walltime_s,
    on_job_end,
    on_near_limit,
    on_progress,
    planned_segments,
    resubmission,
)
from agents.runtime import Action
from agents.scheduling.actions import (
    CancelByName,
    CancelJob,
    Conclude,
    ExtendWalltime,
    Purpose,
    RecordJob,
    RecordState,
    RequestReplan,
    Revise,
    Submit,
    WatchJob,
)
from agents.scheduling.entries import attempt_of, finished_event, job_name
from agents.scheduling.observations import (
    CancelAsked,
    Closed,
    Ended,
    Ignored,
    NearLimit,
    Progressed,
    Revision,
    Rewatch,
    Running,
    SchedulerObservation,
    Start,
)
from knowledge_base.records import JobState, Plan, PlanStatus

__all__ = ["decide"]


def decide(
    observation: SchedulerObservation, *, systems: Collection[str], policy: ReschedulePolicy
) -> list[Action]:
    """The actions ``observation`` calls for; ``systems``: those this Scheduler runs jobs on."""
    match observation:
        case Ignored():
            return []
        case CancelAsked():
            return on_cancel(observation.plan, observation.cancel, observation.purpose)
        case Closed():
            return [finished_event(observation.plan, observation.purpose)]
        case Start():
            return on_start(observation, systems)
        case Rewatch():
            return [WatchJob(plan_id=observation.plan.id, job_id=observation.job_id)]
        case Running():
            plan_id, job_id = observation.plan.id, observation.job_id
            return [RecordState(plan_id=plan_id, job_id=job_id, state=JobState.RUNNING)]
        case NearLimit():
            return on_near_limit_seen(observation, policy)
        case Progressed():
            return on_progress_seen(observation, policy)
        case Revision():
            return on_revision(observation.plan, observation.revision, observation.checkpointable)
        case Ended():
            return on_end(observation, policy)


def on_start(observation: Start, systems: Collection[str]) -> list[Action]:
    """An approved plan: its first job, or why it cannot run here."""
    plan, purpose = observation.plan, observation.purpose
    if plan.option is None:
        reason = "the approved plan has no option to run"
        return [Conclude(plan_id=plan.id, purpose=purpose, status=PlanStatus.FAILED, reason=reason)]
    if plan.option.system not in systems:
        return [
            Conclude(
                plan_id=plan.id,
                purpose=purpose,
                status=PlanStatus.FAILED,
                reason=f"no executor for system {plan.option.system!r} here "
                f"(this Scheduler runs jobs on {', '.join(sorted(systems))})",
            )
        ]
    count = planned_segments(plan)
    chain = f"segment 0 of a {count}-job cascade" if count > 1 else "one job"
    return [
        Submit(
            plan_id=plan.id,
            purpose=purpose,
            segment_index=0,
            attempt=1,
            memory_mb=plan.option.memory_mb,
            walltime_s=next_planned_walltime_s(plan, 0, plan.option.walltime_s),
            decision="submit",
            reason=f"approved plan: {chain} on {plan.option.system}/"
            f"{plan.option.partition} ({plan.reason or 'as planned'})",
        )
    ]


def on_near_limit_seen(observation: NearLimit, policy: ReschedulePolicy) -> list[Action]:
    """Raise a running job's limit in place, when its ceiling and pace call for it."""
    plan = observation.plan
    entry = entry_of(plan, observation.job_id)
    extend = on_near_limit(
        job_elapsed_s=observation.job_elapsed_s,
        limit_s=observation.job_walltime_s,
        ceiling_s=observation.job_ceiling_s,
        tried=observation.extension_tried,
        projected_run_s=observation.projected_run_s,
        policy=policy,
    )
    if extend is None or entry is None:
        return []
    return [extend_action(plan, observation.job_id, entry.index, extend)]


def on_progress_seen(observation: Progressed, policy: ReschedulePolicy) -> list[Action]:
    """Ask for a re-plan (once per job) when the job's pace diverges from the estimate."""
    plan = observation.plan
    if observation.replan_asked or plan.estimate is None:
        return []
    replan = on_progress(
        plan.estimate.runtime_s,
        elapsed_s=observation.elapsed_s,
        fraction_at_start=observation.fraction_at_start,
        fraction_now=observation.fraction_now,
        policy=policy,
        job_elapsed_s=observation.job_elapsed_s,
        job_walltime_s=observation.job_walltime_s,
        checkpointable=observation.checkpointable,
    )
    if replan is None:
        return []
    entry = entry_of(plan, observation.job_id)
    return [
        RequestReplan(
            plan_id=plan.id,
            job_id=observation.job_id,
            reason=replan.reason,
            # What a new job would have to do: the rest from a checkpoint, else all.
            remaining_fraction=replan.remaining_fraction if observation.checkpointable else 1.0,
            projected_run_s=replan.projected_run_s,
            segment_index=entry.index if entry else None,
            done_fraction=observation.fraction_now,
            job_elapsed_s=observation.job_elapsed_s,
            job_walltime_s=observation.job_walltime_s,
            checkpointable=observation.checkpointable,
        )
    ]


def on_end(observation: Ended, policy: ReschedulePolicy) -> list[Action]:
    """A job ended: record it, then the Re-scheduler's rules say what follows."""
    plan, end, limits = observation.plan, observation.end, observation.limits
    actions: list[Action] = []
    if observation.record is not None:
        actions.append(RecordJob(record=observation.record))
    if observation.replaced:
        return actions  # a re-plan cancelled it and decided what came next
    if plan.status.ended and plan.cancelled_by is not None:
        # Cancelled on request: its end is recorded, and nothing more runs (a cascade
        # segment that checkpointed before the cancel took effect is not continued).
        actions.append(RecordState(plan_id=plan.id, job_id=end.job_id, state=end.state))
        return actions
    if limits is None:
        actions.append(
            Conclude(
                plan_id=plan.id,
                purpose=observation.purpose,
                status=PlanStatus.FAILED,
                reason=f"the catalog has no partition "
                f"{plan.option.system if plan.option else '?'}/"
                f"{plan.option.partition if plan.option else '?'}: cannot reschedule",
                about_job=end.job_id,
            )
        )
        return actions
    outcome = on_job_end(
        plan, end, limits=limits, checkpointable=observation.checkpointable, policy=policy
    )
    actions.append(RecordState(plan_id=plan.id, job_id=end.job_id, state=end.state))
    if isinstance(outcome, Finish):
        actions.append(
            Conclude(
                plan_id=plan.id,
                purpose=observation.purpose,
                status=outcome.status,
                reason=outcome.reason,
                about_job=end.job_id,
            )
        )
    else:
        actions.append(submit_from(plan, outcome, observation.purpose, end.job_id))
    return actions


def on_cancel(plan: Plan, request: PlanCancelRequested, purpose: Purpose) -> list[Action]:
    """Cancel every job still in flight, then end the plan CANCELLED.

    A submission under way has no job id yet: its job is looked for by name.
    """
    actions: list[Action] = []
    for entry in in_flight(plan):
        if entry.job_id is not None:
            actions.append(CancelJob(plan_id=plan.id, job_id=entry.job_id, reason=request.reason))
            continue
        attempt = attempt_of(plan, entry)
        actions.append(
            CancelByName(
                plan_id=plan.id,
                name=job_name(plan, entry.index, attempt),
                segment_index=entry.index,
                attempt=attempt,
                reason=request.reason,
            )
        )
    actions.append(
        Conclude(
            plan_id=plan.id,
            purpose=purpose,
            status=PlanStatus.CANCELLED,
            reason=f"{request.reason} (by {request.by})",
            cancelled_by=request.by,
        )
    )
    return actions


def on_revision(plan: Plan, decision: PlanReplanDecided, checkpointable: bool) -> list[Action]:
    """Carry out the plane's re-plan: what to record, cancel and submit."""
    if decision.action in ("keep", "extend"):
        return [Revise(decision=decision, about_job=decision.job_id)]
    target = resubmission(plan, decision.job_id, checkpointable)
    if target is None:
        # The job ended before the decision arrived and the Re-scheduler's rules
        # already acted on its end: revise what is still to come, replace nothing.
        later = decision.model_copy(
            update={
                "action": "extend" if decision.action == "resubmit" else "keep",
                "reason": f"{decision.reason} (job {decision.job_id} had already ended: "
                "applied to the jobs still to come)",
            }
        )
        return [Revise(decision=later, about_job=decision.job_id)]
    job_id = decision.job_id
    assert job_id is not None
    actions: list[Action] = [
        Revise(decision=decision, replaced=job_id, about_job=job_id),
        CancelJob(plan_id=plan.id, job_id=job_id, reason=decision.reason),
    ]
    if decision.action == "stop":
        actions.append(
            Conclude(
                plan_id=plan.id,
                status=PlanStatus.FAILED,
                reason=decision.reason,
                about_job=job_id,
            )
        )
        return actions
    option = decision.option or plan.option
    assert option is not None
    index, attempt = target
    walltime_s = decision.segments[0].walltime_s if decision.segments else option.walltime_s
    memory_mb = max(option.memory_mb, plan.option.memory_mb if plan.option else 0)
    actions.append(
        Submit(
            plan_id=plan.id,
            segment_index=index,
            attempt=attempt,
            memory_mb=memory_mb,
            walltime_s=walltime_s,
            decision="resubmit",
            reason=f"re-plan {decision.revision}: {decision.reason}",
            about_job=job_id,
        )
    )
    return actions


def submit_from(plan: Plan, outcome: NextJob, purpose: Purpose, about: str) -> Submit:
    return Submit(
        plan_id=plan.id,
        purpose=purpose,
        segment_index=outcome.segment_index,
        attempt=outcome.attempt,
        memory_mb=outcome.memory_mb,
        walltime_s=outcome.walltime_s,
        decision=outcome.kind,
        reason=outcome.reason,
        about_job=about,
    )


def extend_action(plan: Plan, job_id: str, index: int, extend: Extend) -> ExtendWalltime:
    return ExtendWalltime(
        plan_id=plan.id,
        job_id=job_id,
        segment_index=index,
        from_s=extend.from_s,
        to_s=extend.to_s,
        reason=extend.reason,
    )
