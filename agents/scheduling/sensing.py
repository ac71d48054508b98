"""From an event to what the Scheduler needs to decide: the plan, the job, the executor.

Reads only (the knowledge base, the executor's status and output); the one write is
storing an approved plan the Scheduler sees first, so it has a ledger to decide on. A
job the monitor gave up on (``job.state_changed`` to UNKNOWN: the batch system did not
know it, poll after poll) is asked about once more (queue, then accounting): ended
there, it is taken as ended; still queued or running, it is watched again; unknown, its
segment ends FAILED, "lost by the batch system", and the Re-scheduler's rules decide.
"""

from __future__ import annotations

import contextlib
import logging

from agents.events import (
    Envelope,
    JobFinished,
    JobProgress,
    JobStateChanged,
    PlanApproved,
    PlanCancelRequested,
    PlanReplanDecided,
)
from agents.rescheduler import JobEnd, as_of, entry_of, planned_segments, submitted
from agents.scheduling.entries import (
    application_of,
    extension_tried,
    is_checkpointable,
    own_clock,
    purpose_of,
    reachable_limit_s,
    replan_key,
    revision_key,
    segment_ended,
)
from agents.scheduling.memory import predicted_memory_mb
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
from agents.scheduling.parts import SchedulerParts
from knowledge_base.cas import update_plan
from knowledge_base.errors import ConflictError, NotFoundError, RightsizeError
from knowledge_base.records import (
    CascadeSegment,
    JobRecord,
    JobState,
    Plan,
    PlanStatus,
    SegmentState,
)
from tools.actuators.base import Executor
from tools.actuators.model import JobNotFound
from tools.actuators.monitor import Progress, parse_progress

__all__ = ["Sensing"]

log = logging.getLogger("agents.scheduler")


class Sensing(SchedulerParts):
    """The Scheduler's ``sense``: one observation per event it cares about, else None."""

    async def sense(self, event: Envelope) -> SchedulerObservation | None:
        payload = event.payload
        if isinstance(payload, PlanApproved):
            return await self._sense_approved(event, payload)
        if isinstance(payload, JobStateChanged) and payload.plan_id:
            plan = await self._plan(payload.plan_id)
            if plan is None or (entry := entry_of(plan, payload.job_id)) is None:
                return None
            if payload.state is JobState.RUNNING:
                return Running(event=event, plan=plan, job_id=payload.job_id)
            if (
                payload.state is JobState.UNKNOWN
                and not plan.status.ended
                and not segment_ended(entry)
            ):
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
            if plan.status.ended:
                return Ignored(event=event, plan=plan)
            return CancelAsked(event=event, plan=plan, purpose=purpose_of(plan), cancel=payload)
        return None

    async def _sense_revision(
        self, event: Envelope, payload: PlanReplanDecided
    ) -> SchedulerObservation | None:
        plan = await self._plan(payload.plan_id)
        if plan is None:
            return None
        over = plan.status.ended
        applied = await self.kb.is_processed(f"{self.name}.revision", revision_key(payload))
        if over or applied:
            return Ignored(event=event, plan=plan)
        return Revision(
            event=event, plan=plan, checkpointable=is_checkpointable(plan), revision=payload
        )

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
        if stored.status.ended:
            # Cancelled before it was approved: say it is over, so the approver (the
            # Intelligence Plane's thread) stops waiting for it to run.
            if stored.cancelled_by is not None:
                return Closed(event=event, plan=stored, purpose=payload.purpose)
            return Ignored(event=event, plan=stored)
        # Not over: decide as on first sight; submitting segment 0 again is found in the
        # ledger and only its events are re-published (same ids: consumers drop them).
        return Start(
            event=event,
            plan=stored,
            purpose=payload.purpose,
            limits=await self._limits(stored),
        )

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
        if own_clock(executor, payload.unit):
            return None
        # The executor's clock: a simulated cluster's time is not the wall clock.
        now = executor.now()
        # Pace is judged from the first progress line seen, not from the job's start, so
        # start-up (interpreter, imports, loading a checkpoint) does not count as slowness.
        first, first_at = self._first_seen.setdefault(payload.job_id, (payload.fraction, now))
        elapsed = (now - first_at).total_seconds()
        job_elapsed: float | None = None
        checkpointable = is_checkpointable(plan)
        if not checkpointable:  # whether it outruns its walltime counts from its start
            with contextlib.suppress(RightsizeError):
                status = await executor.status(payload.job_id)
                if status.start_time is not None:
                    job_elapsed = max(0.0, (now - status.start_time).total_seconds())
        asked = await self.kb.is_processed(f"{self.name}.replan", replan_key(plan, entry))
        return Progressed(
            event=event,
            plan=plan,
            checkpointable=checkpointable,
            job_id=payload.job_id,
            elapsed_s=elapsed,
            fraction_at_start=first,
            fraction_now=payload.fraction,
            replan_asked=asked or segment_ended(entry),
            job_elapsed_s=job_elapsed,
            job_walltime_s=reachable_limit_s(entry, self.config.policy),
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
        if entry.limit_s >= entry.ceiling_s or extension_tried(entry):
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
        own = not is_checkpointable(plan) or own_clock(executor, payload.unit)
        if own and payload.fraction is not None and payload.fraction >= 0.05:
            projected = job_elapsed / payload.fraction
        return NearLimit(
            event=event,
            plan=plan,
            job_id=payload.job_id,
            job_elapsed_s=job_elapsed,
            job_walltime_s=entry.limit_s,
            job_ceiling_s=entry.ceiling_s,
            extension_tried=extension_tried(entry),
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
            return Rewatch(event=event, plan=plan, job_id=payload.job_id)
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
        if progress is not None and own_clock(executor, progress.unit):
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
            memory_distribution_mb=await predicted_memory_mb(self.history, plan, executor.now())
            if state is JobState.OUT_OF_MEMORY
            else None,
        )
        history = None
        if record is not None:
            history = await self._history(plan, entry, record)
        return Ended(
            event=event,
            plan=plan,
            purpose=purpose_of(plan),
            limits=await self._limits(plan),
            checkpointable=is_checkpointable(plan),
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
                "application": application_of(plan),
                "requested_nodes": option.nodes if option else None,
                "requested_cores": option.nodes * option.cores_per_node if option else None,
                "requested_gpus": option.nodes * option.gpus_per_node if option else None,
                "requested_memory_mb": option.memory_mb if option else None,
                "requested_walltime_s": entry.walltime_s,
                "predicted_runtime_s": known.predicted_runtime_s if known else None,
            }
        )
