"""Submitting a ledger entry exactly once, and finding the jobs again after a restart.

The plan's ledger (``Plan.segments``) records each submission in two steps: an intent
(an entry in state ``submitting``) before the executor is called, the job id right
after. A redelivered event finds the job id and submits nothing; an intent left by a
crash between the two steps is reconciled on start by looking the job up by its unique
name (``<name>-<plan>-s<segment>a<attempt>``) before anything is resubmitted. A job the
executor can never run (``RequestRejected``, a non-transient refusal) ends its intent
and its plan FAILED with the executor's reason: nothing waits for a job that will never
exist. The job itself is the job contract's (``tools.planning.render.segment_request``),
as ``rightsize plan --sbatch`` prints it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from agents.events import JobSubmitted, ScheduleDecision
from agents.monitor import JobMonitor
from agents.rescheduler import planned_segments, submitted
from agents.runtime import Emit
from agents.scheduling.actions import Conclude, Submit
from agents.scheduling.entries import (
    ceiling_s_of,
    job_name,
    purpose_of,
    segment_ended,
    submission_of,
)
from agents.scheduling.parts import SchedulerParts
from knowledge_base.cas import update_plan
from knowledge_base.errors import NotFoundError, RightsizeError
from knowledge_base.records import CascadeSegment, Plan, PlanStatus, SegmentState
from tools.actuators.model import ActuatorError, JobRequest
from tools.planning.render import segment_request

__all__ = ["Submission", "poll_forever"]

log = logging.getLogger("agents.scheduler")


class Submission(SchedulerParts):
    """Submits through the executors; re-watches and reconciles after a restart."""

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
        existing = submission_of(plan, action.segment_index, action.attempt)
        if existing is not None and existing.job_id is not None:
            # A redelivered event: this submission happened. Say so again, submit nothing.
            self._watch(plan, existing.job_id)
            return self._submitted_events(plan, action, existing.job_id)
        job_id: str | None = None
        if existing is None:
            limits = await self._limits(plan)
            ceiling = ceiling_s_of(
                plan, action.walltime_s, limits.max_walltime_s if limits else None
            )

            def intend(plan: Plan) -> Plan | None:
                if plan.status.ended:
                    return None
                if submission_of(plan, action.segment_index, action.attempt) is not None:
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
            intent = submission_of(plan, action.segment_index, action.attempt)
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
            intent = submission_of(stored, action.segment_index, action.attempt)
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
        return segment_request(
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
            profile_steps=self.config.profile_steps if purpose_of(plan) == "profiling" else None,
        )

    async def _qos(self, plan: Plan) -> str | None:
        """The partition's QOS, as the planner gave the plan (the catalog's)."""
        assert plan.option is not None
        try:
            system = await self.kb.get_system(plan.option.system)
            return system.partition(plan.option.partition).qos
        except NotFoundError:
            return None

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
                    if segment.job_id and not segment_ended(segment):
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
            asyncio.create_task(
                poll_forever(
                    monitor, self.config.poll_interval_s, stop, partial(self.order_queue, system)
                )
            )
            for system, monitor in self.monitors.items()
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def poll_forever(
    monitor: JobMonitor,
    interval_s: float,
    stop: asyncio.Event,
    after_poll: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Poll ``monitor`` every ``interval_s`` until ``stop``; ``after_poll`` (the queue
    order) runs after each poll."""
    while not stop.is_set():
        try:
            await monitor.poll_once()
        except RightsizeError as exc:  # an executor error must not end the monitor
            log.warning("monitor %s: %s", monitor.system, exc)
        if after_poll is not None:
            try:
                await after_poll()
            except RightsizeError as exc:  # the center's own order stays; poll on
                log.warning("queue order %s: %s", monitor.system, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
