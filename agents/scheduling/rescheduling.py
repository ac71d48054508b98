"""Carrying out the Scheduler's other decisions: ending a plan, asking for and applying
a re-plan, raising a running job's limit in place, cancelling jobs.

A re-plan decision (``plan.replan_decided``) is recorded in the plan's re-plan history
and revises the ledger (option, estimate, the segments still to run) once (plan id +
revision); for ``resubmit`` the running job is cancelled and its replacement submitted
as any other ledger submission; for ``stop`` it is cancelled and the plan ends with the
reason.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Literal

from agents.events import PlanReplanRequested, ScheduleDecision
from agents.rescheduler import attempts_of, entry_of, revise, submitted
from agents.runtime import Emit
from agents.scheduling.actions import (
    CancelByName,
    CancelJob,
    Conclude,
    ExtendWalltime,
    RequestReplan,
    Revise,
)
from agents.scheduling.entries import (
    extension_tried,
    final_state,
    finished_event,
    replan_key,
    submission_of,
)
from agents.scheduling.parts import SchedulerParts
from knowledge_base.cas import update_plan
from knowledge_base.records import Plan, PlanRevision, PlanStatus, SegmentState, WalltimeExtension
from tools.actuators.model import JobNotFound, WalltimeNotExtended

__all__ = ["Rescheduling"]

log = logging.getLogger("agents.scheduler")


class Rescheduling(SchedulerParts):
    """Ends plans, asks for re-plans and applies them, extends and cancels jobs."""

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
                    else s.model_copy(update={"state": final_state(s.state, action.status)})
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
            finished_event(plan, action.purpose),
        ]

    async def _replan(self, action: RequestReplan) -> list[Emit]:
        # The processed-events store doubles as an idempotency-key store: one re-plan per
        # job (the plane bounds how many a plan gets; asking again for a job adds nothing).
        plan = await self.kb.get_plan(action.plan_id)
        entry = entry_of(plan, action.job_id)
        if entry is None or not await self.kb.complete_event(
            f"{self.name}.replan", replan_key(plan, entry)
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
        if extension_tried(entry, action.from_s):
            return []  # a redelivered event: done (or refused) already
        assert plan.option is not None
        executor = self.executors[plan.option.system]
        refused: str | None = None
        blocked = await self.extension_blocked(plan.option.system, action.job_id, action.to_s)
        try:
            if blocked is not None:
                # The wait bound's guarantee: kill times must not slip past a starved
                # job's reservation (docs/simulations.md, "The tail").
                raise WalltimeNotExtended(blocked)
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
            if segment is None or extension_tried(segment, action.from_s):
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
            intent = submission_of(stored, action.segment_index, action.attempt)
            if intent is None or intent.job_id is not None:
                return None
            segments = [
                s.model_copy(update={"job_id": found}) if s is intent else s
                for s in stored.segments
            ]
            return stored.model_copy(update={"segments": segments})

        await update_plan(self.kb, plan.id, keep_id)
