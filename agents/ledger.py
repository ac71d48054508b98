"""The plan ledger as front ends use it: submit what was confirmed, cancel, read, wait.

MCP tools (``submit_plan``, ``cancel_plan``, ``get_plan_status``) and the CLI
(``rightsize submit/status/watch/cancel/jobs``) call these, against the same knowledge
base and bus as the agents. They never write a job's or a segment's state: the
Scheduler owns the ledger. A submission is one ``plan.requested`` carrying the plan the
user confirmed (the Intelligence Plane hands exactly it to the Scheduler); a
cancellation is one ``plan.cancel_requested`` (the Scheduler cancels the jobs in flight
and ends the plan). Both events have ids derived from the plan id, so a retried call is
the same event and the agents handle it once.

    SubmissionRefused (ConflictError)   the confirmed option no longer fits, or differs
                                        from what was confirmed; nothing was submitted

``view`` turns a plan (and, where the caller can ask the executor, its jobs' status and
last progress line) into what ``status`` and ``watch`` show: state, segment k of n,
progress, elapsed against walltime.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from agents.bus.base import Bus, Message
from agents.events import Envelope, PlanCancelRequested, PlanRequested, event_id_for
from agents.topics import topic_for
from knowledge_base.cas import update_plan
from knowledge_base.errors import ConflictError, InvalidInputError, NotFoundError
from knowledge_base.records import CascadeSegment, Cost, Plan, PlanStatus, SegmentState
from knowledge_base.store import KnowledgeBase
from tools.actuators.model import JobStatus
from tools.actuators.monitor import Progress
from tools.planning.chain import EstimatorChain
from tools.planning.confirm import Confirmation, Refusal, confirm, draft_option_id
from tools.planning.cost import DollarRates
from tools.planning.queue import QueueModel
from tools.planning.service import gather_estimators, plan_workload

__all__ = [
    "CancelOutcome",
    "JobView",
    "PlanView",
    "SubmissionRefused",
    "SubmitOutcome",
    "cancel_event",
    "owned_plan",
    "request_cancel",
    "submission_event",
    "submit_confirmed",
    "unsubmitted_segments",
    "view",
    "wait_for",
    "withdraw_draft",
]


class SubmissionRefused(ConflictError):
    """The confirmed option is not submitted: it no longer fits, or is not what was shown."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"{field}: {reason}")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitOutcome(_Out):
    plan_id: str
    status: PlanStatus
    option_id: str | None = Field(description="The option submitted (or already submitted)")
    walltime_s: int | None
    cost: Cost | None
    submitted: bool
    already_submitted: bool
    event_id: str
    message: str


class CancelOutcome(_Out):
    plan_id: str
    status: PlanStatus = Field(description="As stored when the call returns")
    already_final: bool
    requested: bool = Field(description="A cancellation was handed to the Scheduler")
    jobs_in_flight: list[str] = Field(description="Jobs the Scheduler cancels")
    event_id: str | None
    message: str


class JobView(_Out):
    job_id: str | None = Field(description="None while the submission is under way")
    segment_index: int
    state: SegmentState
    walltime_s: int
    native_state: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    elapsed_s: float | None = Field(default=None, description="Running (or ran) so far")
    exit_code: int | None = None


class PlanView(_Out):
    """One plan as ``status`` and ``watch`` show it."""

    plan_id: str
    name: str
    user: str
    state: PlanStatus
    reason: str
    system: str | None
    partition: str | None
    option_id: str | None
    segment: int | None = Field(description="1-based: the segment running or last run")
    segments: int = Field(description="Segments planned (at least 1)")
    jobs: list[JobView]
    progress: float | None = Field(default=None, description="Share of the work done, 0..1")
    progress_line: str | None = None
    elapsed_s: float | None = Field(default=None, description="The current job's run so far")
    walltime_s: int | None = Field(default=None, description="The current job's limit")
    replans: int
    cancelled_by: str | None
    updated_at: datetime


async def owned_plan(kb: KnowledgeBase, plan_id: str, user: str) -> Plan:
    """The caller's plan; someone else's is not found (its existence is not disclosed)."""
    try:
        plan = await kb.get_plan(plan_id)
    except NotFoundError:
        plan = None
    if plan is None or plan.user != user:
        raise NotFoundError(f"plan_id: you have no plan {plan_id!r}")
    return plan


def submission_event(plan: Plan, text: str = "") -> Envelope:
    """The ``plan.requested`` carrying the confirmed ``plan``; its id depends only on the
    plan id, so a retried submission is the same event and the agents handle it once."""
    return Envelope.of(
        PlanRequested(plan_id=plan.id, spec=plan.spec, text=text, confirmed=plan),
        source="ledger",
        correlation_id=plan.id,
        id=event_id_for("ledger", "plan.requested", plan.id),
    )


def cancel_event(plan: Plan, user: str, reason: str) -> Envelope:
    return Envelope.of(
        PlanCancelRequested(plan_id=plan.id, reason=reason, by=user),
        source="ledger",
        correlation_id=plan.id,
        id=event_id_for("ledger", "plan.cancel_requested", plan.id),
    )


def _no_bus(plan_id: str, what: str) -> InvalidInputError:
    return InvalidInputError(
        "no agents listen here (run the center: `rightsize mcp --center`, `rightsize "
        f"center run`, or set RIGHTSIZE_KAFKA_BOOTSTRAP to the center's Kafka); nothing was "
        f"{what}",
        field="plan_id",
        value=plan_id,
    )


async def submit_confirmed(
    kb: KnowledgeBase,
    bus: Bus | None,
    plan_id: str,
    user: str,
    confirmation: Confirmation,
    *,
    rates: DollarRates | None = None,
    queue: QueueModel | None = None,
    text: str = "",
    chain: EstimatorChain | None = None,
) -> SubmitOutcome:
    """Submit the option of the caller's draft ``plan_id`` that they confirmed, unchanged.

    The planner runs again, now, only to check that the confirmed option still fits
    (the catalog's limits, the goals' budget and deadline, the queue where ``queue``
    is given), with the caller's estimator ``chain`` (the one that planned it; None:
    the default settings' chain); raises ``SubmissionRefused`` with the reason where it
    does not.
    """
    plan = await owned_plan(kb, plan_id, user)
    if plan.status.ended:
        raise ConflictError(f"plan_id: plan {plan.id!r} is {plan.status.value}; plan again")
    if plan.status is not PlanStatus.DRAFT:
        return await _already(bus, plan, confirmation, text)
    if bus is None:
        raise _no_bus(plan.id, "submitted")
    catalog = await kb.get_catalog()
    estimators = await gather_estimators(kb, plan.spec, catalog, chain=chain)
    selection = plan_workload(plan.spec, catalog, estimators, queue=queue, rates=rates)
    verdict = confirm(selection, plan, confirmation, catalog)
    if isinstance(verdict, Refusal):
        raise SubmissionRefused(verdict.field, verdict.reason)
    confirmed = verdict.plan

    def take(current: Plan) -> Plan | None:
        if current.status is not PlanStatus.DRAFT:
            return None
        return current.model_copy(
            update={
                "status": PlanStatus.APPROVED,
                "option": confirmed.option,
                "estimate": confirmed.estimate,
                "segments": confirmed.segments,
                "expected_cost": confirmed.expected_cost,
                "expected_wait_s": confirmed.expected_wait_s,
                "reason": f"option {verdict.option_id}, confirmed by {user}",
            }
        )

    # The confirmed option is recorded (compare-and-set) before it is sent: a second
    # call, or a racing one with another option, finds it; a lost send is sent again.
    stored = await update_plan(kb, plan.id, take)
    if draft_option_id(stored) != verdict.option_id or stored.status is PlanStatus.DRAFT:
        return await _already(bus, stored, confirmation, text)
    event = submission_event(stored, text)
    await bus.publish_many([Message.of(topic_for(event.type), event)])
    return _outcome(stored, verdict.option_id, event, already=False)


async def _already(
    bus: Bus | None, plan: Plan, confirmation: Confirmation, text: str
) -> SubmitOutcome:
    """A plan submitted before: the same option is answered as done (and, while no job
    runs yet, sent again under the same event id); another option is refused."""
    held = draft_option_id(plan)
    if confirmation.option_id is not None and confirmation.option_id != held:
        raise SubmissionRefused(
            "option_id",
            f"plan {plan.id!r} was already submitted with option {held}; cancel it and "
            f"plan again to run option {confirmation.option_id}",
        )
    event = submission_event(plan, text)
    nothing_ran = plan.status is PlanStatus.APPROVED and not any(s.state for s in plan.segments)
    if bus is not None and nothing_ran:
        # Deterministic id: if the first send arrived, the agents drop this copy.
        await bus.publish_many([Message.of(topic_for(event.type), event)])
    return _outcome(plan, held, event, already=True)


def _outcome(plan: Plan, option: str | None, event: Envelope, *, already: bool) -> SubmitOutcome:
    message = (
        "already with the agents; status follows it"
        if already
        else "handed to the Scheduler exactly as confirmed (through the Intelligence Plane, "
        "which follows it for re-plans); status follows it"
    )
    return SubmitOutcome(
        plan_id=plan.id,
        status=plan.status,
        option_id=option,
        walltime_s=plan.option.walltime_s if plan.option else None,
        cost=plan.expected_cost,
        submitted=True,
        already_submitted=already,
        event_id=str(event.id),
        message=message,
    )


def _in_flight(plan: Plan) -> list[str]:
    return [
        s.job_id
        for s in plan.segments
        if s.job_id is not None and s.state is not None and not s.state.ended
    ]


async def request_cancel(
    kb: KnowledgeBase,
    bus: Bus | None,
    plan_id: str,
    user: str,
    reason: str = "cancelled by the user",
    *,
    wait_s: float = 0.0,
) -> CancelOutcome:
    """Ask the Scheduler to cancel the caller's plan; wait up to ``wait_s`` for it.

    Without a bus only a plan that never reached the agents (a draft, nothing submitted)
    can be cancelled, here; anything else needs the Scheduler, and is refused.
    """
    plan = await owned_plan(kb, plan_id, user)
    if plan.status.ended:
        return CancelOutcome(
            plan_id=plan.id,
            status=plan.status,
            already_final=True,
            requested=False,
            jobs_in_flight=[],
            event_id=None,
            message=f"already {plan.status.value}: {plan.reason}",
        )
    if bus is None:
        if plan.status is not PlanStatus.DRAFT or any(s.state for s in plan.segments):
            raise _no_bus(plan.id, "cancelled")
        return await _cancel_draft(kb, plan, user, reason)
    event = cancel_event(plan, user, reason)
    await bus.publish_many([Message.of(topic_for(event.type), event)])
    if wait_s > 0:
        plan = await wait_for(kb, plan.id, lambda p: p.status.ended, timeout_s=wait_s)
    return CancelOutcome(
        plan_id=plan.id,
        status=plan.status,
        already_final=False,
        requested=True,
        jobs_in_flight=_in_flight(plan) if not plan.status.ended else [],
        event_id=str(event.id),
        message="cancelled by the Scheduler"
        if plan.status is PlanStatus.CANCELLED
        else "handed to the Scheduler; it cancels the jobs in flight and ends the plan",
    )


async def _cancel_draft(kb: KnowledgeBase, plan: Plan, user: str, reason: str) -> CancelOutcome:
    """A draft no agent has seen: no job, no ledger; its status is the caller's to end."""

    def change(current: Plan) -> Plan | None:
        if current.status is not PlanStatus.DRAFT:
            return None
        return current.model_copy(
            update={
                "status": PlanStatus.CANCELLED,
                "reason": f"{reason} (by {user})",
                "cancelled_by": user,
            }
        )

    stored = await update_plan(kb, plan.id, change)
    if stored.status is not PlanStatus.CANCELLED:
        raise ConflictError(
            f"plan_id: plan {plan.id!r} became {stored.status.value} meanwhile; it is with "
            "the agents now, and only the Scheduler can cancel it"
        )
    return CancelOutcome(
        plan_id=stored.id,
        status=stored.status,
        already_final=False,
        requested=False,
        jobs_in_flight=[],
        event_id=None,
        message="a draft: nothing had been submitted",
    )


async def withdraw_draft(kb: KnowledgeBase, plan_id: str, reason: str) -> Plan:
    """End a draft that will not be submitted (its submission was refused, or failed
    before anything was sent): CANCELLED with ``reason``, so ``status`` does not show it
    pending for ever. A plan the agents already have is left as it is (and returned)."""

    def change(current: Plan) -> Plan | None:
        if current.status is not PlanStatus.DRAFT:
            return None
        return current.model_copy(update={"status": PlanStatus.CANCELLED, "reason": reason})

    return await update_plan(kb, plan_id, change)


async def wait_for(
    kb: KnowledgeBase,
    plan_id: str,
    until: Callable[[Plan], bool],
    *,
    timeout_s: float,
    poll_s: float = 0.1,
) -> Plan:
    """The plan once ``until(plan)`` holds, or as it stands after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        plan = await kb.get_plan(plan_id)
        if until(plan) or time.monotonic() >= deadline:
            return plan
        await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def unsubmitted_segments(plan: Plan) -> list[CascadeSegment]:
    """The planned entries of ``plan``'s ledger that no submission stands for yet."""
    submitted = {s.index for s in plan.segments if s.state is not None}
    return [
        s
        for s in plan.segments
        if s.job_id is None and s.state is None and s.index not in submitted
    ]


def view(
    plan: Plan,
    *,
    statuses: Mapping[str, JobStatus] | None = None,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> PlanView:
    """What ``status`` and ``watch`` show of ``plan``; ``statuses`` (job id -> the
    executor's answer) and ``progress`` (the current job's last progress line) add what
    only the batch system knows."""
    statuses = statuses or {}
    planned = [s for s in plan.segments if s.job_id is None and s.state is None]
    jobs: list[JobView] = []
    for entry in plan.segments:
        if entry.state is None:
            continue
        status = statuses.get(entry.job_id or "")
        elapsed: float | None = None
        if status is not None and status.start_time is not None:
            end = status.end_time or now
            if end is not None:
                elapsed = max(0.0, (end - status.start_time).total_seconds())
        jobs.append(
            JobView(
                job_id=entry.job_id,
                segment_index=entry.index,
                state=entry.state,
                walltime_s=entry.walltime_s,
                native_state=status.native_state if status else None,
                start_time=status.start_time if status else None,
                end_time=status.end_time if status else None,
                elapsed_s=elapsed,
                exit_code=status.exit_code if status else None,
            )
        )
    current = jobs[-1] if jobs else None
    line = None
    if progress is not None:
        total = f"/{progress.total:g}" if progress.total else ""
        line = f"{progress.unit} {progress.done:g}{total}"
    option = plan.option
    return PlanView(
        plan_id=plan.id,
        name=plan.spec.name,
        user=plan.user,
        state=plan.status,
        reason=plan.reason,
        system=option.system if option else None,
        partition=option.partition if option else None,
        option_id=draft_option_id(plan),
        segment=current.segment_index + 1 if current else None,
        segments=max(
            1, len({s.index for s in planned}), current.segment_index + 1 if current else 1
        ),
        jobs=jobs,
        progress=progress.fraction if progress else None,
        progress_line=line,
        elapsed_s=current.elapsed_s if current else None,
        walltime_s=current.walltime_s if current else None,
        replans=len(plan.replans),
        cancelled_by=plan.cancelled_by,
        updated_at=plan.updated_at,
    )
