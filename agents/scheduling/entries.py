"""Reading and marking a plan's ledger (``Plan.segments``): pure functions of the plan.

A ledger entry is one submission (an intent ``submitting`` until the batch system gives
its job id); these say which entry is which submission, whether its job is over, what
a job is named, how far its limit may be raised, and mark a job's new state.
"""

from __future__ import annotations

from agents.events import PlanFinished, PlanReplanDecided
from agents.rescheduler import ReschedulePolicy, entry_of, submitted
from agents.runtime import Emit
from agents.scheduling.actions import Purpose, RecordState
from knowledge_base.records import (
    CascadeSegment,
    JobRecord,
    Plan,
    PlanStatus,
    SegmentState,
)
from knowledge_base.workload import DNNTraining, GenericJob
from tools.actuators.base import Executor
from tools.planning.render import job_name as render_job_name

__all__ = [
    "application_of",
    "attempt_of",
    "ceiling_s_of",
    "ended_record",
    "extension_tried",
    "final_state",
    "finished_event",
    "is_checkpointable",
    "job_name",
    "mark_segment",
    "mark_state",
    "own_clock",
    "purpose_of",
    "reachable_limit_s",
    "replan_key",
    "revision_key",
    "segment_ended",
    "submission_of",
]


def job_name(plan: Plan, index: int, attempt: int) -> str:
    """A job's unique name: how a submission is found again after a crash."""
    return render_job_name(plan.spec, plan.id, index, attempt)


def own_clock(executor: Executor, unit: str) -> bool:
    """A job whose executor runs no code (the simulated cluster) reports seconds of its
    own run, not the workload's progress: the executor says so, whatever it is."""
    return executor.progress_is_run_time and unit == "second"


def purpose_of(plan: Plan) -> Purpose:
    """Set when the plan was made (``Plan.purpose``), never read from its id: a user's
    workload named ``profile-x`` is a workload."""
    return plan.purpose


def is_checkpointable(plan: Plan) -> bool:
    return isinstance(plan.spec.workload, DNNTraining) and plan.spec.workload.checkpointable


def mark_state(action: RecordState, plan: Plan) -> Plan | None:
    return mark_segment(plan, action.job_id, SegmentState.of(action.state))


def mark_segment(plan: Plan, job_id: str, state: SegmentState) -> Plan | None:
    if (entry := entry_of(plan, job_id)) is None or entry.state == state:
        return None
    if entry.state is not None and entry.state.ended and not state.ended:
        return None  # a late "running" never reopens a job the ledger says is over
    segments = [
        s.model_copy(update={"state": state}) if s.job_id == job_id else s for s in plan.segments
    ]
    status = plan.status
    if state is SegmentState.RUNNING and status in (PlanStatus.APPROVED, PlanStatus.SUBMITTED):
        status = PlanStatus.RUNNING
    return plan.model_copy(update={"segments": segments, "status": status})


def extension_tried(entry: CascadeSegment, from_s: int | None = None) -> bool:
    """Whether the ledger holds a raise or a refusal from ``from_s`` (default: the
    job's limit now): one limit is extended at most once, redeliveries included."""
    limit = entry.limit_s if from_s is None else from_s
    return any(e.from_s == limit for e in entry.extensions)


def reachable_limit_s(entry: CascadeSegment, policy: ReschedulePolicy) -> int:
    """The limit a job can still reach: its ceiling while extensions are on and none was
    refused (a job that will be extended is not behind its walltime), else its limit."""
    refused = any(e.refused is not None for e in entry.extensions)
    if policy.extend_in_place and entry.ceiling_s is not None and not refused:
        return max(entry.limit_s, entry.ceiling_s)
    return entry.limit_s


def ceiling_s_of(plan: Plan, walltime_s: int, max_walltime_s: int | None) -> int | None:
    """The most a job of ``plan`` may be extended to in place: the user's own walltime
    request (a generic job's), capped at the partition's MaxTime; without a request,
    the partition's MaxTime. None when neither is known."""
    workload = plan.spec.workload
    asked = workload.walltime_s if isinstance(workload, GenericJob) else None
    bounds = [b for b in (asked, max_walltime_s) if b is not None]
    if not bounds:
        return None
    return max(walltime_s, min(bounds))


def replan_key(plan: Plan, entry: CascadeSegment) -> str:
    return f"{plan.id}/{entry.job_id}"


def revision_key(decision: PlanReplanDecided) -> str:
    return f"{decision.plan_id}#r{decision.revision}"


def submission_of(plan: Plan, index: int, attempt: int) -> CascadeSegment | None:
    """The ledger entry of the ``attempt``-th submission of segment ``index``, if any."""
    count = 0
    for entry in submitted(plan):
        if entry.index == index:
            count += 1
            if count == attempt:
                return entry
    return None


def attempt_of(plan: Plan, entry: CascadeSegment) -> int:
    """Which submission of its segment ``entry`` is (1-based), as job names count them."""
    same = [s for s in submitted(plan) if s.index == entry.index]
    return next(i for i, s in enumerate(same, start=1) if s is entry)


def finished_event(plan: Plan, purpose: Purpose) -> Emit:
    """``plan.finished`` for a plan that is over, as its ledger says."""
    jobs = submitted(plan)
    return Emit(
        payload=PlanFinished(
            plan_id=plan.id,
            status=plan.status,
            reason=plan.reason,
            job_ids=[s.job_id for s in jobs if s.job_id],
            segments=len({s.index for s in jobs}),
            purpose=purpose,
        ),
        correlation_id=plan.id,
    )


def ended_record(record: JobRecord, known: JobRecord | None) -> JobRecord | None:
    """The job's end as history keeps it: what the batch system accounted, and the
    prediction another agent annotated (kept whenever it landed)."""
    if known is not None and record.predicted_runtime_s is None:
        record = record.model_copy(update={"predicted_runtime_s": known.predicted_runtime_s})
    return None if record == known else record


def segment_ended(segment: CascadeSegment) -> bool:
    return segment.state is not None and segment.state.ended


def final_state(state: SegmentState | None, status: PlanStatus) -> SegmentState | None:
    if state is not None and state.ended:
        return state
    return {
        PlanStatus.COMPLETED: SegmentState.COMPLETED,
        PlanStatus.CANCELLED: SegmentState.CANCELLED,
    }.get(status, state)


def application_of(plan: Plan) -> str:
    """What history learns a job as: the application (or model), not the job's unique name."""
    workload = plan.spec.workload
    return workload.model if isinstance(workload, DNNTraining) else workload.application
