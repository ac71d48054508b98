"""The Scheduler / Orchestrator agent: submits approved plans, watches every job, reschedules.

Senses ``plan.approved`` (run a plan: the Intelligence Plane's choice, or a Profiling
run), the job events its own monitors publish (``job.state_changed``, ``job.progress``,
``job.finished``); decides with the pure rules of ``agents.rescheduler``; acts through the
actuator (``tools.actuators``) and the knowledge base, publishing ``job.submitted``, a
``schedule.decision`` with the reason for every choice, ``plan.replan_requested`` when a
job's progress diverges from the estimate, and ``plan.finished`` when a plan is over. It
also senses ``plan.replan_decided`` (the Intelligence Plane's answer to a re-plan) and
carries it out: records it in the plan's re-plan history, revises the ledger (option,
estimate, the segments still to run), and, for ``resubmit``, cancels the running job and
submits its replacement; for ``stop``, cancels it and ends the plan with the reason. A
revision is applied once (plan id + revision: the ledger's history and the processed-
events store both say so), and the replacement is a ledger submission like any other.

Nothing is submitted twice. The plan's ledger (``Plan.segments`` in the knowledge base)
records each submission in two steps: an intent (an entry in state ``submitting``) before
the actuator is called, the job id right after. A redelivered event finds the job id
and submits nothing; an intent left by a crash between the two steps is reconciled on
start by looking the job up by its unique name (``<name>-<plan>-s<segment>a<attempt>``)
before anything is resubmitted. Events carry deterministic ids (the runtime derives
them from the cause), so their consumers drop repeats.

A job its monitor gave up on (``job.state_changed`` to UNKNOWN: the batch system did not
know it, poll after poll) is looked up once more through the executor (queue, then
accounting): ended there, it is taken as ended; still queued or running, it is watched
again; unknown, its segment ends FAILED, "lost by the batch system", and the
Re-scheduler's rules decide (a failure: the plan ends FAILED with that reason).

Each system has one executor and one ``JobMonitor``; ``run_monitors`` polls them beside
the agent's runner. ``recover`` re-watches, after a restart, every job the ledgers say is
still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.bus.base import Bus
from agents.events import (
    Envelope,
    JobFinished,
    JobProgress,
    JobStateChanged,
    JobSubmitted,
    PlanApproved,
    PlanCancelRequested,
    PlanFinished,
    PlanReplanDecided,
    PlanReplanRequested,
    ScheduleDecision,
)
from agents.monitor import JobMonitor
from agents.rescheduler import (
    Extend,
    Finish,
    JobEnd,
    Limits,
    NextJob,
    ReschedulePolicy,
    as_of,
    attempts_of,
    entry_of,
    in_flight,
    next_planned_walltime_s,
    on_job_end,
    on_near_limit,
    on_progress,
    planned_segments,
    resubmission,
    revise,
    submitted,
)
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import JOBS, PLANS
from knowledge_base.cas import PlanRaced, update_job, update_plan
from knowledge_base.errors import ConflictError, NotFoundError, RightsizeError
from knowledge_base.records import (
    CascadeSegment,
    JobRecord,
    JobState,
    Plan,
    PlanRevision,
    PlanStatus,
    ResourceEstimate,
    SegmentState,
    WalltimeExtension,
)
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob
from tools.actuators.base import Executor
from tools.actuators.model import (
    ActuatorError,
    JobNotFound,
    JobRequest,
    SimulatedWork,
    WalltimeNotExtended,
)
from tools.actuators.monitor import Progress, parse_progress
from tools.planning.render import job_name as render_job_name
from tools.planning.render import segment_request

__all__ = [
    "CancelByName",
    "CancelJob",
    "Conclude",
    "ExtendWalltime",
    "PlanRaced",
    "RecordJob",
    "RecordState",
    "RequestReplan",
    "Revise",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerObservation",
    "Submit",
    "WatchJob",
    "job_name",
    "update_plan",
]

log = logging.getLogger(__name__)

Purpose = Literal["workload", "profiling"]
SimulatedBehaviour = Callable[[Plan, int, int], SimulatedWork | None]
"""(plan, segment index, attempt) -> how the job behaves on the simulated cluster."""


class SchedulerConfig(BaseModel):
    """Where jobs run and how far the Re-scheduler may go on its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: ReschedulePolicy = Field(default_factory=ReschedulePolicy)
    checkpoint_overhead_s: int = Field(
        default=300,
        ge=0,
        description="Per cascade segment: start-up, loading and saving a checkpoint; a "
        "segment's work budget (RIGHTSIZE_SEGMENT_WORK_S) is its walltime minus this",
    )
    poll_interval_s: float = Field(default=5.0, gt=0, description="How often monitors poll")
    profile_steps: int = Field(
        default=20, ge=1, description="Timed steps of a profiling run (RIGHTSIZE_PROFILE_STEPS)"
    )
    work_dir: Path | None = Field(
        default=None, description="Jobs run in WORK_DIR/<plan id>; None: the executor's default"
    )


# -- observations and actions -------------------------------------------------------------


class SchedulerObservation(Observation):
    """What the Scheduler knows when it decides: the plan, and what happened to which job."""

    kind: Literal[
        "start",
        "running",
        "progress",
        "near_limit",
        "ended",
        "revise",
        "cancel",
        "closed",
        "rewatch",
        "ignore",
    ]
    plan: Plan | None = None
    purpose: Purpose = "workload"
    limits: Limits | None = None
    checkpointable: bool = False
    job_id: str | None = None
    end: JobEnd | None = None
    elapsed_s: float | None = None
    fraction_at_start: float | None = None
    fraction_now: float | None = None
    record: JobRecord | None = None
    replan_asked: bool = False
    job_elapsed_s: float | None = None
    job_walltime_s: int | None = None
    job_ceiling_s: int | None = Field(default=None, description="The most the plan allows it")
    extension_tried: bool = Field(default=False, description="The ledger has one from its limit")
    projected_run_s: float | None = None
    replaced: bool = Field(default=False, description="The job ended after a re-plan took it")
    revision: PlanReplanDecided | None = None
    cancel: PlanCancelRequested | None = None


class Submit(Action):
    plan_id: str
    purpose: Purpose = "workload"
    segment_index: int = Field(ge=0)
    attempt: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    walltime_s: int = Field(ge=1)
    decision: Literal["submit", "next_segment", "more_memory", "longer_walltime", "resubmit"]
    reason: str
    about_job: str | None = None


class Conclude(Action):
    """End the plan; CANCELLED marks every job still in flight cancelled in the ledger."""

    plan_id: str
    purpose: Purpose = "workload"
    status: PlanStatus
    reason: str
    about_job: str | None = None
    cancelled_by: str | None = Field(default=None, description="A cancel request's sender")


class RecordState(Action):
    plan_id: str
    job_id: str
    state: JobState


class RecordJob(Action):
    record: JobRecord


class RequestReplan(Action):
    plan_id: str
    job_id: str
    reason: str
    remaining_fraction: float
    projected_run_s: float | None = None
    segment_index: int | None = None
    done_fraction: float | None = None
    job_elapsed_s: float | None = None
    job_walltime_s: int | None = None
    checkpointable: bool = True


class Revise(Action):
    """Apply a re-plan decision to the ledger (and say so); the job it replaces, if any."""

    decision: PlanReplanDecided
    replaced: str | None = None
    about_job: str | None = None


class ExtendWalltime(Action):
    """Raise a running job's limit in place from ``from_s`` to ``to_s``; record it."""

    plan_id: str
    job_id: str
    segment_index: int = Field(ge=0)
    from_s: int = Field(ge=1)
    to_s: int = Field(ge=1)
    reason: str


class CancelJob(Action):
    plan_id: str
    job_id: str
    reason: str


class CancelByName(Action):
    """Cancel the job a submission under way (an intent with no job id) may have started.

    The batch system may have taken the job before the intent got its id (a crash
    between the two, another replica): it is found by its unique name, cancelled, and
    its id kept in the ledger.
    """

    plan_id: str
    name: str
    segment_index: int = Field(ge=0)
    attempt: int = Field(ge=1)
    reason: str


class WatchJob(Action):
    """Watch a job again: the monitor gave it up, but the batch system still has it."""

    plan_id: str
    job_id: str


# -- helpers -----------------------------------------------------------------------------


def job_name(plan: Plan, index: int, attempt: int) -> str:
    """A job's unique name: how a submission is found again after a crash."""
    return render_job_name(plan.spec, plan.id, index, attempt)


def _own_clock(executor: Executor, unit: str) -> bool:
    """A plain simulated job's progress is seconds of its own run, not the workload's."""
    return executor.backend == "simulated" and unit == "second"


def _purpose_of(plan: Plan) -> Purpose:
    """Set when the plan was made (``Plan.purpose``), never read from its id: a user's
    workload named ``profile-x`` is a workload."""
    return plan.purpose


def _checkpointable(plan: Plan) -> bool:
    return isinstance(plan.spec.workload, DNNTraining) and plan.spec.workload.checkpointable


def _mark_state(action: RecordState, plan: Plan) -> Plan | None:
    return _mark(plan, action.job_id, SegmentState.of(action.state))


def _mark(plan: Plan, job_id: str, state: SegmentState) -> Plan | None:
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


def simulated_from_estimate(plan: Plan, index: int, attempt: int) -> SimulatedWork | None:
    """On the simulated cluster, a job behaves as its estimate says (its share of it)."""
    estimate: ResourceEstimate | None = plan.estimate
    if estimate is None:
        return None
    segments = planned_segments(plan)
    run_s = max(1, math.ceil(estimate.runtime_s.point / segments))
    return SimulatedWork(run_s=run_s, peak_memory_mb=math.ceil(estimate.memory_mb.point))


# -- the agent ---------------------------------------------------------------------------


class Scheduler(Agent[SchedulerObservation]):
    """Submits plans through the actuators, tracks every job and acts on its outcome."""

    name = "scheduler"
    topics = (PLANS, JOBS)

    def __init__(
        self,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor],
        bus: Bus,
        config: SchedulerConfig | None = None,
        *,
        simulated: SimulatedBehaviour | None = simulated_from_estimate,
    ) -> None:
        self.kb = kb
        self.executors = dict(executors)
        self.config = config or SchedulerConfig()
        self.simulated = simulated
        self.monitors = {
            system: JobMonitor(executor, bus, system=system, source=self.name)
            for system, executor in self.executors.items()
        }
        # job -> (first progress fraction seen, when): the base of its pace
        self._first_seen: dict[str, tuple[float, datetime]] = {}

    # -- sense ------------------------------------------------------------------------------

    async def sense(self, event: Envelope) -> SchedulerObservation | None:
        payload = event.payload
        if isinstance(payload, PlanApproved):
            return await self._sense_approved(event, payload)
        if isinstance(payload, JobStateChanged) and payload.plan_id:
            plan = await self._plan(payload.plan_id)
            if plan is None or (entry := entry_of(plan, payload.job_id)) is None:
                return None
            if payload.state is JobState.RUNNING:
                return SchedulerObservation(
                    event=event, kind="running", plan=plan, job_id=payload.job_id
                )
            if payload.state is JobState.UNKNOWN and not plan.status.ended and not _ended(entry):
                return await self._sense_unknown(event, plan, payload)
            return None
        if isinstance(payload, JobProgress) and payload.plan_id:
            return await self._sense_progress(event, payload)
        if isinstance(payload, JobFinished) and payload.job.plan_id:
            return await self._sense_finished(event, payload)
        if isinstance(payload, PlanReplanDecided):
            return await self._sense_revision(event, payload)
        if isinstance(payload, PlanCancelRequested):
            plan = await self._plan(payload.plan_id)
            if plan is None:
                log.warning("cancel of plan %s: no such plan; nothing to do", payload.plan_id)
                return None
            kind: Literal["cancel", "ignore"] = "ignore" if plan.status.ended else "cancel"
            return SchedulerObservation(
                event=event, kind=kind, plan=plan, purpose=_purpose_of(plan), cancel=payload
            )
        return None

    async def _sense_revision(
        self, event: Envelope, payload: PlanReplanDecided
    ) -> SchedulerObservation | None:
        plan = await self._plan(payload.plan_id)
        if plan is None:
            return None
        over = plan.status.ended
        applied = await self.kb.is_processed(f"{self.name}.revision", _revision_key(payload))
        return SchedulerObservation(
            event=event,
            kind="ignore" if over or applied else "revise",
            plan=plan,
            checkpointable=_checkpointable(plan),
            revision=payload,
        )

    async def _plan(self, plan_id: str) -> Plan | None:
        try:
            return await self.kb.get_plan(plan_id)
        except NotFoundError:
            return None

    async def _sense_approved(self, event: Envelope, payload: PlanApproved) -> SchedulerObservation:
        approved = payload.plan
        stored = await self._plan(approved.id)
        if stored is None:
            fresh = approved.model_copy(
                update={
                    "version": 0,
                    "status": PlanStatus.APPROVED,
                    # the approval says what the plan is for, where its maker did not
                    "purpose": "profiling" if payload.purpose == "profiling" else approved.purpose,
                }
            )
            try:
                stored = await self.kb.put_plan(fresh)
            except ConflictError:
                stored = await self.kb.get_plan(approved.id)
        elif not submitted(stored) and stored.status in (
            PlanStatus.DRAFT,
            PlanStatus.AWAITING_APPROVAL,
            PlanStatus.APPROVED,
        ):
            # The Intelligence Plane stored it while planning; take the approved choice.
            def approve(plan: Plan) -> Plan | None:
                if submitted(plan):
                    return None
                return plan.model_copy(
                    update={
                        "status": PlanStatus.APPROVED,
                        "option": approved.option,
                        "estimate": approved.estimate,
                        "expected_cost": approved.expected_cost,
                        "expected_wait_s": approved.expected_wait_s,
                        "segments": approved.segments,
                        "reason": approved.reason,
                    }
                )

            stored = await update_plan(self.kb, approved.id, approve)
        kind: Literal["start", "closed", "ignore"] = "start"
        if stored.status.ended:
            # Cancelled before it was approved: say it is over, so the approver (the
            # Intelligence Plane's thread) stops waiting for it to run.
            kind = "closed" if stored.cancelled_by is not None else "ignore"
        # Not over: decide as on first sight; submitting segment 0 again is found in the
        # ledger and only its events are re-published (same ids: consumers drop them).
        return SchedulerObservation(
            event=event,
            kind=kind,
            plan=stored,
            purpose=payload.purpose,
            limits=await self._limits(stored),
        )

    async def _limits(self, plan: Plan) -> Limits | None:
        option = plan.option
        if option is None:
            return None
        try:
            system = await self.kb.get_system(option.system)
            partition = system.partition(option.partition)
        except NotFoundError:
            return None
        node = system.node_type_of(partition)
        memory = partition.max_memory_mb
        if node is not None and (node.usable_memory_mb or node.memory_mb):
            memory = min(memory, node.usable_memory_mb or node.memory_mb or memory)
        return Limits(
            where=f"{system.name}/{partition.name}",
            max_memory_mb=max(1, memory),
            max_walltime_s=max(60, partition.max_minutes * 60),
        )

    def _executor(self, plan: Plan) -> Executor | None:
        return self.executors.get(plan.option.system) if plan.option else None

    async def _sense_progress(
        self, event: Envelope, payload: JobProgress
    ) -> SchedulerObservation | None:
        assert payload.plan_id is not None
        plan = await self._plan(payload.plan_id)
        if plan is None or plan.status.ended:
            return None
        entry = entry_of(plan, payload.job_id)
        executor = self._executor(plan)
        if entry is None or executor is None:
            return None
        near = await self._sense_near_limit(event, plan, entry, executor, payload)
        if near is not None:
            return near
        if payload.fraction is None or plan.estimate is None:
            return None
        if _own_clock(executor, payload.unit):
            return None
        # The executor's clock: a simulated cluster's time is not the wall clock.
        now = executor.now()
        # Pace is judged from the first progress line seen, not from the job's start, so
        # start-up (interpreter, imports, loading a checkpoint) does not count as slowness.
        first, first_at = self._first_seen.setdefault(payload.job_id, (payload.fraction, now))
        elapsed = (now - first_at).total_seconds()
        job_elapsed: float | None = None
        checkpointable = _checkpointable(plan)
        if not checkpointable:  # whether it outruns its walltime counts from its start
            with contextlib.suppress(RightsizeError):
                status = await executor.status(payload.job_id)
                if status.start_time is not None:
                    job_elapsed = max(0.0, (now - status.start_time).total_seconds())
        asked = await self.kb.is_processed(f"{self.name}.replan", _replan_key(plan, entry))
        return SchedulerObservation(
            event=event,
            kind="progress",
            plan=plan,
            checkpointable=checkpointable,
            job_id=payload.job_id,
            elapsed_s=elapsed,
            fraction_at_start=first,
            fraction_now=payload.fraction,
            replan_asked=asked or _ended(entry),
            job_elapsed_s=job_elapsed,
            job_walltime_s=_reachable_limit_s(entry, self.config.policy),
        )

    async def _sense_near_limit(
        self,
        event: Envelope,
        plan: Plan,
        entry: CascadeSegment,
        executor: Executor,
        payload: JobProgress,
    ) -> SchedulerObservation | None:
        """A running job within the margin of its limit whose ceiling allows more."""
        policy = self.config.policy
        if not policy.extend_in_place or entry.ceiling_s is None:
            return None
        if entry.limit_s >= entry.ceiling_s or _extension_tried(entry):
            return None
        try:
            status = await executor.status(payload.job_id)
        except RightsizeError as exc:
            if exc.transient:
                raise  # the event is retried
            return None
        if status.state is not JobState.RUNNING or status.start_time is None:
            return None
        job_elapsed = max(0.0, (executor.now() - status.start_time).total_seconds())
        if entry.limit_s - job_elapsed > policy.extend_margin_s:
            return None
        projected: float | None = None
        # A job's own pace, where its progress is its own (no checkpoint to resume from).
        own = not _checkpointable(plan) or _own_clock(executor, payload.unit)
        if own and payload.fraction is not None and payload.fraction >= 0.05:
            projected = job_elapsed / payload.fraction
        return SchedulerObservation(
            event=event,
            kind="near_limit",
            plan=plan,
            job_id=payload.job_id,
            job_elapsed_s=job_elapsed,
            job_walltime_s=entry.limit_s,
            job_ceiling_s=entry.ceiling_s,
            extension_tried=_extension_tried(entry),
            projected_run_s=projected,
        )

    async def _progress_of(self, executor: Executor, job_id: str) -> Progress | None:
        try:
            return parse_progress(await executor.output_tail(job_id))
        except RightsizeError as exc:
            if exc.transient:
                raise
            return None

    async def _sense_unknown(
        self, event: Envelope, plan: Plan, payload: JobStateChanged
    ) -> SchedulerObservation | None:
        """The monitor stopped watching a job the batch system did not know, poll after poll.

        Asked once more (its queue, then its accounting: sacct or the jobcomp log on
        SLURM), a job that ended is taken as ended, one still queued or running is
        watched again, and one it does not know at all is lost: its segment ends FAILED
        ("lost by the batch system") and the Re-scheduler's rules decide what follows.
        Before, nobody acted on it and the plan stayed RUNNING for ever.
        """
        executor = self._executor(plan)
        if executor is None:
            return None
        try:
            status = await executor.status(payload.job_id)
        except JobNotFound as exc:
            said = payload.reason or "no longer known"
            return await self._sense_end(
                event,
                plan,
                payload.job_id,
                state=JobState.FAILED,
                reason=f"lost by the batch system: {said}, and then: {exc}",
            )
        if not status.finished:
            return SchedulerObservation(
                event=event, kind="rewatch", plan=plan, job_id=payload.job_id
            )
        try:  # accounting knew its end: that is the job's end, as job.finished says it
            record = status.to_record(
                plan.option.system if plan.option else "?",
                f"scheduler ({executor.backend})",
                plan_id=plan.id,
            )
        except ValueError:
            record = None
        return await self._sense_end(
            event,
            plan,
            payload.job_id,
            state=status.state,
            exit_code=status.exit_code,
            record=record,
        )

    async def _sense_finished(
        self, event: Envelope, payload: JobFinished
    ) -> SchedulerObservation | None:
        record = payload.job
        assert record.plan_id is not None
        stored = await self._plan(record.plan_id)
        if stored is None:
            return None
        return await self._sense_end(
            event,
            stored,
            record.job_id,
            state=record.state,
            exit_code=record.exit_code,
            record=record,
        )

    async def _sense_end(
        self,
        event: Envelope,
        stored: Plan,
        job_id: str,
        *,
        state: JobState,
        exit_code: int | None = None,
        reason: str = "",
        record: JobRecord | None = None,
    ) -> SchedulerObservation | None:
        """The observation of ``job_id``'s end; ``record`` (what the batch system
        accounted) goes to history, a lost job has none."""
        if (entry := entry_of(stored, job_id)) is None:
            return None
        executor = self._executor(stored)
        if executor is None:
            return None
        replaced = entry.state is SegmentState.REPLANNED
        plan = as_of(stored, job_id)
        progress = await self._progress_of(executor, job_id)
        if progress is not None and _own_clock(executor, progress.unit):
            # A simulated job reports seconds of its own run; in the workload's terms it
            # did its planned share: one more segment of the planned count.
            done_before = len([s for s in submitted(plan) if s.state is SegmentState.COMPLETED])
            progress = Progress("segment", done_before + 1, float(planned_segments(plan)))
            previous: Progress | None = Progress("segment", done_before, None)
        else:
            jobs = submitted(plan)
            at = next(i for i, s in enumerate(jobs) if s.job_id == job_id)
            before = jobs[at - 1].job_id if at > 0 else None
            previous = await self._progress_of(executor, before) if before else None
        end = JobEnd(
            job_id=job_id,
            state=state,
            reason=reason,
            exit_code=exit_code,
            done=progress.done if progress else None,
            total=progress.total if progress else None,
            unit=progress.unit if progress else "step",
            previous_done=previous.done if previous else None,
        )
        history = None
        if record is not None:
            history = await self._history(plan, entry, record)
        return SchedulerObservation(
            event=event,
            kind="ended",
            plan=plan,
            purpose=_purpose_of(plan),
            limits=await self._limits(plan),
            checkpointable=_checkpointable(plan),
            job_id=job_id,
            end=end,
            record=history,
            replaced=replaced,
        )

    async def _history(self, plan: Plan, entry: CascadeSegment, record: JobRecord) -> JobRecord:
        """``record`` as history keeps it: who ran it, what was asked, what was predicted."""
        option = plan.option
        try:
            known = await self.kb.get_job(record.system, record.job_id)
        except NotFoundError:
            known = None
        return record.model_copy(
            update={
                "user": plan.spec.user,
                "account": plan.spec.account,
                "application": _application(plan),
                "requested_nodes": option.nodes if option else None,
                "requested_cores": option.nodes * option.cores_per_node if option else None,
                "requested_gpus": option.nodes * option.gpus_per_node if option else None,
                "requested_memory_mb": option.memory_mb if option else None,
                "requested_walltime_s": entry.walltime_s,
                "predicted_runtime_s": known.predicted_runtime_s if known else None,
            }
        )

    # -- decide (pure) ------------------------------------------------------------------------

    def decide(self, observation: SchedulerObservation) -> list[Action]:
        plan = observation.plan
        if plan is None or observation.kind == "ignore":
            return []
        if observation.kind == "cancel":
            assert observation.cancel is not None
            return self._decide_cancel(plan, observation.cancel, observation.purpose)
        if observation.kind == "closed":
            return [_finished(plan, observation.purpose)]
        if observation.kind == "start":
            if plan.option is None:
                return [
                    Conclude(
                        plan_id=plan.id,
                        purpose=observation.purpose,
                        status=PlanStatus.FAILED,
                        reason="the approved plan has no option to run",
                    )
                ]
            if plan.option.system not in self.executors:
                return [
                    Conclude(
                        plan_id=plan.id,
                        purpose=observation.purpose,
                        status=PlanStatus.FAILED,
                        reason=f"no executor for system {plan.option.system!r} here "
                        f"(this Scheduler runs jobs on {', '.join(sorted(self.executors))})",
                    )
                ]
            count = planned_segments(plan)
            chain = f"segment 0 of a {count}-job cascade" if count > 1 else "one job"
            return [
                Submit(
                    plan_id=plan.id,
                    purpose=observation.purpose,
                    segment_index=0,
                    attempt=1,
                    memory_mb=plan.option.memory_mb,
                    walltime_s=next_planned_walltime_s(plan, 0, plan.option.walltime_s),
                    decision="submit",
                    reason=f"approved plan: {chain} on {plan.option.system}/"
                    f"{plan.option.partition} ({plan.reason or 'as planned'})",
                )
            ]
        if observation.kind == "rewatch":
            assert observation.job_id is not None
            return [WatchJob(plan_id=plan.id, job_id=observation.job_id)]
        if observation.kind == "running":
            assert observation.job_id is not None
            return [RecordState(plan_id=plan.id, job_id=observation.job_id, state=JobState.RUNNING)]
        if observation.kind == "near_limit":
            assert observation.job_id is not None and observation.job_elapsed_s is not None
            assert observation.job_walltime_s is not None
            entry = entry_of(plan, observation.job_id)
            extend = on_near_limit(
                job_elapsed_s=observation.job_elapsed_s,
                limit_s=observation.job_walltime_s,
                ceiling_s=observation.job_ceiling_s,
                tried=observation.extension_tried,
                projected_run_s=observation.projected_run_s,
                policy=self.config.policy,
            )
            if extend is None or entry is None:
                return []
            return [_extend_action(plan, observation.job_id, entry.index, extend)]
        if observation.kind == "progress":
            if observation.replan_asked or plan.estimate is None:
                return []
            assert observation.elapsed_s is not None and observation.job_id is not None
            replan = on_progress(
                plan.estimate.runtime_s,
                elapsed_s=observation.elapsed_s,
                fraction_at_start=observation.fraction_at_start or 0.0,
                fraction_now=observation.fraction_now or 0.0,
                policy=self.config.policy,
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
                    remaining_fraction=replan.remaining_fraction
                    if observation.checkpointable
                    else 1.0,
                    projected_run_s=replan.projected_run_s,
                    segment_index=entry.index if entry else None,
                    done_fraction=observation.fraction_now,
                    job_elapsed_s=observation.job_elapsed_s,
                    job_walltime_s=observation.job_walltime_s,
                    checkpointable=observation.checkpointable,
                )
            ]
        if observation.kind == "revise":
            assert observation.revision is not None
            return self._decide_revision(plan, observation.revision, observation.checkpointable)
        # ended
        end, limits = observation.end, observation.limits
        assert end is not None
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
            plan,
            end,
            limits=limits,
            checkpointable=observation.checkpointable,
            policy=self.config.policy,
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
            actions.append(self._submit_from(plan, outcome, observation.purpose, end.job_id))
        return actions

    @staticmethod
    def _decide_cancel(plan: Plan, request: PlanCancelRequested, purpose: Purpose) -> list[Action]:
        """Cancel every job still in flight, then end the plan CANCELLED (pure).

        A submission under way has no job id yet: its job is looked for by name.
        """
        actions: list[Action] = []
        for entry in in_flight(plan):
            if entry.job_id is not None:
                actions.append(
                    CancelJob(plan_id=plan.id, job_id=entry.job_id, reason=request.reason)
                )
                continue
            attempt = _attempt_of(plan, entry)
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

    @staticmethod
    def _decide_revision(
        plan: Plan, decision: PlanReplanDecided, checkpointable: bool
    ) -> list[Action]:
        """Carry out the plane's re-plan: what to record, cancel and submit (pure)."""
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

    @staticmethod
    def _submit_from(plan: Plan, outcome: NextJob, purpose: Purpose, about: str) -> Submit:
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

    # -- act ---------------------------------------------------------------------------------

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Submit):
                emits.extend(await self._submit(action))
            elif isinstance(action, Conclude):
                emits.extend(await self._conclude(action))
            elif isinstance(action, RecordState):
                await update_plan(self.kb, action.plan_id, partial(_mark_state, action))
            elif isinstance(action, RecordJob):
                ended = partial(_ended_record, action.record)
                await update_job(self.kb, action.record.system, action.record.job_id, ended)
            elif isinstance(action, RequestReplan):
                emits.extend(await self._replan(action))
            elif isinstance(action, Revise):
                emits.extend(await self._revise(action))
            elif isinstance(action, ExtendWalltime):
                emits.extend(await self._extend(action))
            elif isinstance(action, CancelJob):
                await self._cancel(action)
            elif isinstance(action, CancelByName):
                await self._cancel_by_name(action)
            elif isinstance(action, WatchJob):
                self._watch(await self.kb.get_plan(action.plan_id), action.job_id)
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(f"Scheduler.act does not handle {type(action).__name__}")
        revisions = [a.decision for a in actions if isinstance(a, Revise)]
        for decision in revisions:  # done: a repeat of this revision is dropped in sense
            await self.kb.complete_event(f"{self.name}.revision", _revision_key(decision))
        return emits

    async def _submit(self, action: Submit) -> list[Emit]:
        plan = await self.kb.get_plan(action.plan_id)
        if plan.status.ended:
            # Cancelled (or ended) since the decision: nothing more runs for it.
            log.info(
                "plan %s is %s: segment %d not submitted",
                plan.id,
                plan.status.value,
                action.segment_index,
            )
            return []
        assert plan.option is not None
        executor = self.executors[plan.option.system]
        existing = _submission(plan, action.segment_index, action.attempt)
        if existing is not None and existing.job_id is not None:
            # A redelivered event: this submission happened. Say so again, submit nothing.
            self._watch(plan, existing.job_id)
            return self._submitted_events(plan, action, existing.job_id)
        job_id: str | None = None
        if existing is None:
            limits = await self._limits(plan)
            ceiling = _ceiling_s(plan, action.walltime_s, limits.max_walltime_s if limits else None)

            def intend(plan: Plan) -> Plan | None:
                if plan.status.ended:
                    return None
                if _submission(plan, action.segment_index, action.attempt) is not None:
                    return None
                assert plan.option is not None
                option = plan.option.model_copy(update={"memory_mb": action.memory_mb})
                intent = CascadeSegment(
                    index=action.segment_index,
                    walltime_s=action.walltime_s,
                    state=SegmentState.SUBMITTING,
                    ceiling_s=ceiling,
                )
                return plan.model_copy(
                    update={"segments": [*plan.segments, intent], "option": option}
                )

            plan = await update_plan(self.kb, action.plan_id, intend)
            if plan.status.ended:  # cancelled between the read and the intent
                return []
        else:  # an intent without a job id: submitted before a crash, or not?
            job_id = await executor.find_by_name(
                job_name(plan, action.segment_index, action.attempt)
            )
        if job_id is None:
            try:
                job_id = await executor.submit(await self._request(plan, action))
            except ActuatorError as exc:
                if exc.transient:
                    raise  # the batch system may answer later: the event is retried
                return await self._refused(plan, action, exc)
            log.info(
                "plan %s: segment %d attempt %d is job %s (%s)",
                plan.id,
                action.segment_index,
                action.attempt,
                job_id,
                action.decision,
            )
        found = job_id

        def record(plan: Plan) -> Plan | None:
            intent = _submission(plan, action.segment_index, action.attempt)
            segments = [
                s.model_copy(update={"job_id": found, "state": SegmentState.PENDING})
                if s is intent
                else s
                for s in plan.segments
            ]
            status = plan.status if plan.status is PlanStatus.RUNNING else PlanStatus.SUBMITTED
            return plan.model_copy(update={"segments": segments, "status": status})

        plan = await update_plan(self.kb, action.plan_id, record)
        self._watch(plan, job_id)
        return self._submitted_events(plan, action, job_id)

    async def _refused(self, plan: Plan, action: Submit, error: ActuatorError) -> list[Emit]:
        """The executor can never run this job (a request beyond every node it has, a
        partition it does not know): the submission's intent ends FAILED and so does the
        plan, with the executor's reason. Nothing waits for a job that will never exist."""

        def fail_intent(stored: Plan) -> Plan | None:
            intent = _submission(stored, action.segment_index, action.attempt)
            if intent is None or intent.job_id is not None:
                return None
            segments = [
                s.model_copy(update={"state": SegmentState.FAILED}) if s is intent else s
                for s in stored.segments
            ]
            return stored.model_copy(update={"segments": segments})

        await update_plan(self.kb, plan.id, fail_intent)
        log.warning("plan %s: segment %d not submitted: %s", plan.id, action.segment_index, error)
        return await self._conclude(
            Conclude(
                plan_id=plan.id,
                purpose=action.purpose,
                status=PlanStatus.FAILED,
                reason=f"the batch system cannot run segment {action.segment_index}: {error}",
            )
        )

    def _watch(self, plan: Plan, job_id: str) -> None:
        assert plan.option is not None
        monitor = self.monitors.get(plan.option.system)
        if monitor is not None:
            monitor.watch(job_id, plan.id)

    def _submitted_events(self, plan: Plan, action: Submit, job_id: str) -> list[Emit]:
        assert plan.option is not None
        option = plan.option.model_copy(update={"walltime_s": action.walltime_s})
        return [
            Emit(
                payload=JobSubmitted(
                    plan_id=plan.id,
                    system=plan.option.system,
                    job_id=job_id,
                    option=option,
                    segment_index=action.segment_index,
                ),
                correlation_id=plan.id,
            ),
            Emit(
                payload=ScheduleDecision(
                    plan_id=plan.id,
                    action=action.decision,
                    reason=action.reason,
                    job_id=action.about_job,
                    new_job_id=job_id,
                    segment_index=action.segment_index,
                    attempt=action.attempt,
                    partition=plan.option.partition,
                    memory_mb=action.memory_mb,
                    walltime_s=action.walltime_s,
                ),
                correlation_id=plan.id,
            ),
        ]

    async def _request(self, plan: Plan, action: Submit) -> JobRequest:
        """The job contract's request (``tools.planning.render.segment_request``, as
        ``plan --sbatch`` prints it) for this submission, in its working directory."""
        option = plan.option
        assert option is not None
        option = option.model_copy(update={"memory_mb": action.memory_mb})
        working_dir = None
        if self.config.work_dir is not None:
            working_dir = self.config.work_dir.expanduser().resolve() / plan.id
            working_dir.mkdir(parents=True, exist_ok=True)
        request = segment_request(
            plan.spec,
            option,
            qos=await self._qos(plan),
            walltime_s=action.walltime_s,
            index=action.segment_index,
            segments=planned_segments(plan),
            attempt=action.attempt,
            checkpoint_overhead_s=self.config.checkpoint_overhead_s,
            plan_id=plan.id,
            working_dir=working_dir,
            profile_steps=self.config.profile_steps if _purpose_of(plan) == "profiling" else None,
        )
        simulated = (
            self.simulated(plan, action.segment_index, action.attempt) if self.simulated else None
        )
        return request.model_copy(update={"simulated": simulated}) if simulated else request

    async def _qos(self, plan: Plan) -> str | None:
        """The partition's QOS, as the planner gave the plan (the catalog's)."""
        assert plan.option is not None
        try:
            system = await self.kb.get_system(plan.option.system)
            return system.partition(plan.option.partition).qos
        except NotFoundError:
            return None

    async def _conclude(self, action: Conclude) -> list[Emit]:
        def finish(plan: Plan) -> Plan | None:
            if plan.status.ended:
                return None
            segments = plan.segments
            if action.cancelled_by is not None:  # every job still in flight was cancelled
                segments = [
                    s.model_copy(update={"state": SegmentState.CANCELLED})
                    if s.state is not None and not s.state.ended
                    else s
                    for s in segments
                ]
            elif action.about_job is not None:
                segments = [
                    s
                    if s.job_id != action.about_job
                    else s.model_copy(update={"state": _final_state(s.state, action.status)})
                    for s in segments
                ]
            return plan.model_copy(
                update={
                    "status": action.status,
                    "reason": action.reason,
                    "segments": segments,
                    "cancelled_by": action.cancelled_by,
                }
            )

        plan = await update_plan(self.kb, action.plan_id, finish)
        jobs = submitted(plan)
        log.info("plan %s: %s: %s", plan.id, action.status.value, action.reason)
        verdict: Literal["complete", "stop", "cancel"] = "stop"
        if action.status is PlanStatus.COMPLETED:
            verdict = "complete"
        elif action.cancelled_by is not None:
            verdict = "cancel"
        return [
            Emit(
                payload=ScheduleDecision(
                    plan_id=plan.id,
                    action=verdict,
                    reason=action.reason,
                    job_id=action.about_job,
                    segment_index=jobs[-1].index if jobs else 0,
                    attempt=max(1, attempts_of(plan, jobs[-1].index)) if jobs else 1,
                    partition=plan.option.partition if plan.option else None,
                ),
                correlation_id=plan.id,
            ),
            _finished(plan, action.purpose),
        ]

    async def _replan(self, action: RequestReplan) -> list[Emit]:
        # The processed-events store doubles as an idempotency-key store: one re-plan per
        # job (the plane bounds how many a plan gets; asking again for a job adds nothing).
        plan = await self.kb.get_plan(action.plan_id)
        entry = entry_of(plan, action.job_id)
        if entry is None or not await self.kb.complete_event(
            f"{self.name}.replan", _replan_key(plan, entry)
        ):
            return []
        return [
            Emit(
                payload=ScheduleDecision(
                    plan_id=plan.id,
                    action="replan",
                    reason=action.reason,
                    job_id=action.job_id,
                    partition=plan.option.partition if plan.option else None,
                ),
                correlation_id=plan.id,
            ),
            Emit(
                payload=PlanReplanRequested(
                    plan_id=plan.id,
                    spec=plan.spec,
                    estimates=[plan.estimate] if plan.estimate else [],
                    reason=action.reason,
                    remaining_fraction=action.remaining_fraction,
                    projected_run_s=action.projected_run_s,
                    job_id=action.job_id,
                    segment_index=action.segment_index,
                    done_fraction=action.done_fraction,
                    job_elapsed_s=action.job_elapsed_s,
                    job_walltime_s=action.job_walltime_s,
                    checkpointable=action.checkpointable,
                ),
                correlation_id=plan.id,
            ),
        ]

    async def _revise(self, action: Revise) -> list[Emit]:
        """Record the re-plan in the plan's history and revise the ledger (once)."""
        decision = action.decision
        record = PlanRevision(
            revision=decision.revision, action=decision.action, reason=decision.reason
        )

        def apply(plan: Plan) -> Plan | None:
            changes = decision.action in ("extend", "resubmit")
            return revise(
                plan,
                record,
                option=decision.option if changes else None,
                estimate=decision.estimate,
                start_index=decision.start_index if changes else None,
                segments=decision.segments if changes else None,
                replaced=action.replaced,
            )

        plan = await update_plan(self.kb, decision.plan_id, apply)
        log.info(
            "plan %s: re-plan %d: %s: %s",
            plan.id,
            decision.revision,
            decision.action,
            decision.reason,
        )
        if decision.action != "extend":
            return []  # resubmit and stop say so with the job they submit or the end
        option = plan.option
        return [
            Emit(
                payload=ScheduleDecision(
                    plan_id=plan.id,
                    action="revise",
                    reason=f"re-plan {decision.revision}: {decision.reason}",
                    job_id=action.about_job,
                    segment_index=decision.start_index or 0,
                    partition=option.partition if option else None,
                    memory_mb=option.memory_mb if option else None,
                    walltime_s=decision.segments[0].walltime_s
                    if decision.segments
                    else (option.walltime_s if option else None),
                ),
                correlation_id=plan.id,
            )
        ]

    async def _extend(self, action: ExtendWalltime) -> list[Emit]:
        """Ask the executor to raise the job's limit; record the raise (or the refusal)
        in the ledger once. A transient failure (controller down) leaves the plan as it
        was and raises, so the event is retried; a refusal is recorded and the job times
        out as before (the Re-scheduler resubmits it)."""
        plan = await self.kb.get_plan(action.plan_id)
        entry = entry_of(plan, action.job_id)
        if plan.status.ended or entry is None or entry.state is None or entry.state.ended:
            return []
        if _extension_tried(entry, action.from_s):
            return []  # a redelivered event: done (or refused) already
        assert plan.option is not None
        executor = self.executors[plan.option.system]
        refused: str | None = None
        try:
            await executor.extend_walltime(action.job_id, action.to_s)
        except WalltimeNotExtended as exc:
            if exc.transient:
                log.warning("plan %s: job %s not extended yet: %s", plan.id, action.job_id, exc)
                raise
            refused = str(exc)
            log.warning(
                "plan %s: job %s not extended (the Re-scheduler takes over if it times out): %s",
                plan.id,
                action.job_id,
                exc,
            )
        extension = WalltimeExtension(
            from_s=action.from_s, to_s=action.to_s, at=executor.now(), refused=refused
        )

        def record(stored: Plan) -> Plan | None:
            segment = entry_of(stored, action.job_id)
            if segment is None or _extension_tried(segment, action.from_s):
                return None
            updated = segment.model_copy(update={"extensions": [*segment.extensions, extension]})
            segments = [updated if s is segment else s for s in stored.segments]
            return stored.model_copy(update={"segments": segments})

        plan = await update_plan(self.kb, action.plan_id, record)
        if refused is not None:
            return []
        return [
            Emit(
                payload=ScheduleDecision(
                    plan_id=plan.id,
                    action="extend",
                    reason=action.reason,
                    job_id=action.job_id,
                    segment_index=action.segment_index,
                    attempt=max(1, attempts_of(plan, action.segment_index)),
                    partition=plan.option.partition if plan.option else None,
                    walltime_s=action.to_s,
                ),
                correlation_id=plan.id,
            )
        ]

    async def _cancel(self, action: CancelJob) -> None:
        plan = await self.kb.get_plan(action.plan_id)
        executor = self._executor(plan)
        if executor is None:
            return
        # Cancelling a job that already ended does nothing: safe to repeat. One the batch
        # system no longer knows (purged, or a simulated cluster of another process) has
        # nothing left to cancel; the plan's end must not wait on it.
        try:
            await executor.cancel(action.job_id)
        except JobNotFound:
            log.warning("plan %s: job %s is unknown to the batch system", plan.id, action.job_id)
            return
        log.info("plan %s: cancelled job %s: %s", plan.id, action.job_id, action.reason)

    async def _cancel_by_name(self, action: CancelByName) -> None:
        plan = await self.kb.get_plan(action.plan_id)
        executor = self._executor(plan)
        if executor is None:
            return
        found = await executor.find_by_name(action.name)
        if found is None:
            log.info(
                "plan %s: segment %d attempt %d never reached the batch system (no job %s)",
                plan.id,
                action.segment_index,
                action.attempt,
                action.name,
            )
            return
        with contextlib.suppress(JobNotFound):  # gone since: nothing left to cancel
            await executor.cancel(found)
        log.info(
            "plan %s: cancelled job %s (found by its name %s): %s",
            plan.id,
            found,
            action.name,
            action.reason,
        )

        def keep_id(stored: Plan) -> Plan | None:
            intent = _submission(stored, action.segment_index, action.attempt)
            if intent is None or intent.job_id is not None:
                return None
            segments = [
                s.model_copy(update={"job_id": found}) if s is intent else s
                for s in stored.segments
            ]
            return stored.model_copy(update={"segments": segments})

        await update_plan(self.kb, plan.id, keep_id)

    # -- recovery and monitors ---------------------------------------------------------------

    async def recover(self) -> list[str]:
        """After a restart: watch every job still in flight, reconcile interrupted submits.

        Returns the job ids it watches again.
        """
        watched: list[str] = []
        for status in (PlanStatus.APPROVED, PlanStatus.SUBMITTED, PlanStatus.RUNNING):
            for plan in await self.kb.list_plans(status=status):
                if plan.option is None or plan.option.system not in self.executors:
                    continue
                for segment in plan.segments:
                    if segment.state is SegmentState.SUBMITTING:
                        await self._reconcile(plan, segment)
                plan = await self.kb.get_plan(plan.id)
                for segment in submitted(plan):
                    if segment.job_id and not _ended(segment):
                        self._watch(plan, segment.job_id)
                        watched.append(segment.job_id)
        return watched

    async def _reconcile(self, plan: Plan, segment: CascadeSegment) -> None:
        """An intent without a job id: find the job by its name, or clear the intent."""
        assert plan.option is not None
        executor = self.executors[plan.option.system]
        attempt = sum(1 for s in submitted(plan) if s.index == segment.index and s is not segment)
        name = job_name(plan, segment.index, attempt + 1)
        found = await executor.find_by_name(name)

        def settle(stored: Plan) -> Plan | None:
            segments = []
            for s in stored.segments:
                submitting = s.state is SegmentState.SUBMITTING
                if s.index == segment.index and submitting and s.job_id is None:
                    if found is None:
                        continue  # never submitted: drop the intent; redelivery redoes it
                    s = s.model_copy(update={"job_id": found, "state": SegmentState.PENDING})
                segments.append(s)
            return stored.model_copy(update={"segments": segments})

        await update_plan(self.kb, plan.id, settle)
        log.warning(
            "plan %s: segment %d was being submitted when the Scheduler stopped: %s",
            plan.id,
            segment.index,
            f"found as job {found}" if found else "not submitted; it will be submitted again",
        )

    async def run_monitors(self, stop: asyncio.Event) -> None:
        """Poll every system's monitor until ``stop`` is set."""
        tasks = [
            asyncio.create_task(_poll_forever(monitor, self.config.poll_interval_s, stop))
            for monitor in self.monitors.values()
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _extension_tried(entry: CascadeSegment, from_s: int | None = None) -> bool:
    """Whether the ledger holds a raise or a refusal from ``from_s`` (default: the
    job's limit now): one limit is extended at most once, redeliveries included."""
    limit = entry.limit_s if from_s is None else from_s
    return any(e.from_s == limit for e in entry.extensions)


def _reachable_limit_s(entry: CascadeSegment, policy: ReschedulePolicy) -> int:
    """The limit a job can still reach: its ceiling while extensions are on and none was
    refused (a job that will be extended is not behind its walltime), else its limit."""
    refused = any(e.refused is not None for e in entry.extensions)
    if policy.extend_in_place and entry.ceiling_s is not None and not refused:
        return max(entry.limit_s, entry.ceiling_s)
    return entry.limit_s


def _extend_action(plan: Plan, job_id: str, index: int, extend: Extend) -> ExtendWalltime:
    return ExtendWalltime(
        plan_id=plan.id,
        job_id=job_id,
        segment_index=index,
        from_s=extend.from_s,
        to_s=extend.to_s,
        reason=extend.reason,
    )


def _ceiling_s(plan: Plan, walltime_s: int, max_walltime_s: int | None) -> int | None:
    """The most a job of ``plan`` may be extended to in place: the user's own walltime
    request (a generic job's), capped at the partition's MaxTime; without a request,
    the partition's MaxTime. None when neither is known."""
    workload = plan.spec.workload
    asked = workload.walltime_s if isinstance(workload, GenericJob) else None
    bounds = [b for b in (asked, max_walltime_s) if b is not None]
    if not bounds:
        return None
    return max(walltime_s, min(bounds))


def _replan_key(plan: Plan, entry: CascadeSegment) -> str:
    return f"{plan.id}/{entry.job_id}"


def _revision_key(decision: PlanReplanDecided) -> str:
    return f"{decision.plan_id}#r{decision.revision}"


def _submission(plan: Plan, index: int, attempt: int) -> CascadeSegment | None:
    """The ledger entry of the ``attempt``-th submission of segment ``index``, if any."""
    count = 0
    for entry in submitted(plan):
        if entry.index == index:
            count += 1
            if count == attempt:
                return entry
    return None


def _attempt_of(plan: Plan, entry: CascadeSegment) -> int:
    """Which submission of its segment ``entry`` is (1-based), as job names count them."""
    same = [s for s in submitted(plan) if s.index == entry.index]
    return next(i for i, s in enumerate(same, start=1) if s is entry)


def _finished(plan: Plan, purpose: Purpose) -> Emit:
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


def _ended_record(record: JobRecord, known: JobRecord | None) -> JobRecord | None:
    """The job's end as history keeps it: what the batch system accounted, and the
    prediction another agent annotated (kept whenever it landed)."""
    if known is not None and record.predicted_runtime_s is None:
        record = record.model_copy(update={"predicted_runtime_s": known.predicted_runtime_s})
    return None if record == known else record


def _ended(segment: CascadeSegment) -> bool:
    return segment.state is not None and segment.state.ended


def _final_state(state: SegmentState | None, status: PlanStatus) -> SegmentState | None:
    if state is not None and state.ended:
        return state
    return {
        PlanStatus.COMPLETED: SegmentState.COMPLETED,
        PlanStatus.CANCELLED: SegmentState.CANCELLED,
    }.get(status, state)


def _application(plan: Plan) -> str:
    """What history learns a job as: the application (or model), not the job's unique name."""
    workload = plan.spec.workload
    return workload.model if isinstance(workload, DNNTraining) else workload.application


async def _poll_forever(monitor: JobMonitor, interval_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await monitor.poll_once()
        except RightsizeError as exc:  # an executor error must not end the monitor
            log.warning("monitor %s: %s", monitor.system, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
