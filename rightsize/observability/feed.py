"""What the status page remembers from the bus: recent failures, decisions, progress.

``EventFeed`` reads every topic in a consumer group of its own (one per process, never
committed), so it sees every event whichever process published it, takes nothing from
the agents' groups, and on start reads back what the bus still retains. It keeps only
bounded, recent views in memory; the knowledge base stays the record of plans and jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict

from agents.bus.base import Bus, Consumer
from agents.events import (
    DeadLettered,
    EstimatorDecision,
    JobProgress,
    JobStateChanged,
    MalformedEventError,
    PlanFinished,
    ScheduleDecision,
    decode_event,
)
from agents.topics import ALL_TOPICS
from knowledge_base.records import JobState, PlanStatus
from tools.actuators.model import JobStatus

__all__ = ["DecisionView", "EstimatorLook", "EventFeed", "FailureView", "JobLook"]

log = logging.getLogger(__name__)

_FAILED_JOB_STATES = frozenset({JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY})


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FailureView(_View):
    """A job or plan that failed, or an event an agent could not handle, and why."""

    time: datetime
    kind: Literal["job", "plan", "dead_letter"]
    plan_id: str | None = None
    job_id: str | None = None
    state: str
    reason: str


class DecisionView(_View):
    """What the Scheduler/Re-scheduler decided about a plan's jobs, and why."""

    time: datetime
    plan_id: str
    action: str
    reason: str
    job_id: str | None = None
    new_job_id: str | None = None
    segment_index: int = 0
    attempt: int = 1


class JobLook(_View):
    """The last the feed heard of one job: its state, since when, and its progress line."""

    plan_id: str | None = None
    state: str
    since: datetime
    running_since: datetime | None = None
    fraction: float | None = None
    progress: str | None = None

    def status(self, job_id: str) -> JobStatus:
        """What the feed heard of the job, as an executor's answer (for ``ledger.view``):
        started when it first ran, ended when its last state came, unless running."""
        return JobStatus(
            job_id=job_id,
            state=JobState(self.state),
            native_state=self.state,
            start_time=self.running_since,
            end_time=None if self.state == JobState.RUNNING else self.since,
        )


class EstimatorLook(_View):
    """Model Promotion's last decision about a target's estimator."""

    time: datetime
    target: str
    decision: str
    reason: str
    estimator_id: str | None = None
    live_error: float | None = None
    validation_error: float | None = None
    metric: str = "mape"
    jobs: int = 0


class EventFeed:
    """Recent failures, decisions and job progress, read off the bus."""

    def __init__(
        self,
        bus: Bus,
        *,
        keep: int = 50,
        keep_jobs: int = 2000,
        topics: Sequence[str] = ALL_TOPICS,
        poll_timeout_s: float = 0.2,
    ) -> None:
        self.bus = bus
        self.topics = tuple(topics)
        self.group_id = f"rightsize-status-{uuid.uuid4().hex[:12]}"
        self.poll_timeout_s = poll_timeout_s
        self.failures: deque[FailureView] = deque(maxlen=keep)
        self.decisions: deque[DecisionView] = deque(maxlen=keep)
        self.estimators: dict[str, EstimatorLook] = {}
        self.jobs: OrderedDict[str, JobLook] = OrderedDict()
        self._keep_jobs = keep_jobs
        self.events_seen = 0
        self.latest_event_at: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._consumer: Consumer | None = None

    async def __aenter__(self) -> Self:
        self._consumer = self.bus.consumer(self.topics, group_id=self.group_id)
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(self._consumer), name="status-feed")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _run(self, consumer: Consumer) -> None:
        while True:
            try:
                records = await consumer.poll(max_records=500, timeout_s=self.poll_timeout_s)
            except Exception as exc:  # an outage: the page shows what it has, and waits
                log.warning("status feed: poll failed: %s", exc)
                await asyncio.sleep(1.0)
                continue
            for record in records:
                self.add_bytes(record.value)

    def add_bytes(self, value: bytes) -> None:
        try:
            event = decode_event(value)
        except MalformedEventError:
            return  # the agents dead-letter it; their dead letter is what the page shows
        self.events_seen += 1
        payload, at = event.payload, event.time
        if self.latest_event_at is None or at > self.latest_event_at:
            self.latest_event_at = at
        if isinstance(payload, JobStateChanged):
            self._job_state(payload, at)
        elif isinstance(payload, JobProgress):
            look = self.jobs.get(payload.job_id)
            if look is not None:
                done = (
                    f"{payload.done:g}/{payload.total:g}" if payload.total else f"{payload.done:g}"
                )
                text = f"{done} {payload.unit}"
                self._remember(
                    payload.job_id,
                    look.model_copy(update={"fraction": payload.fraction, "progress": text}),
                )
        elif isinstance(payload, ScheduleDecision):
            self.decisions.append(
                DecisionView(
                    time=at,
                    plan_id=payload.plan_id,
                    action=payload.action,
                    reason=payload.reason,
                    job_id=payload.job_id,
                    new_job_id=payload.new_job_id,
                    segment_index=payload.segment_index,
                    attempt=payload.attempt,
                )
            )
        elif isinstance(payload, PlanFinished):
            if payload.status == PlanStatus.FAILED:
                self.failures.append(
                    FailureView(
                        time=at,
                        kind="plan",
                        plan_id=payload.plan_id,
                        state=str(payload.status),
                        reason=payload.reason or "no reason given",
                    )
                )
        elif isinstance(payload, DeadLettered):
            self.failures.append(
                FailureView(
                    time=at,
                    kind="dead_letter",
                    plan_id=event.correlation_id,
                    state=f"dead-lettered by {payload.agent}",
                    reason=f"{payload.error_type}: {payload.error}",
                )
            )
        elif isinstance(payload, EstimatorDecision):
            self.estimators[payload.target] = EstimatorLook(
                time=at,
                target=payload.target,
                decision=payload.decision,
                reason=payload.reason,
                estimator_id=payload.estimator_id,
                live_error=payload.live_error,
                validation_error=payload.validation_error,
                metric=payload.metric,
                jobs=payload.jobs,
            )

    def _job_state(self, payload: JobStateChanged, at: datetime) -> None:
        previous = self.jobs.get(payload.job_id)
        running_since = previous.running_since if previous is not None else None
        if payload.state == JobState.RUNNING and running_since is None:
            running_since = at
        self._remember(
            payload.job_id,
            JobLook(
                plan_id=payload.plan_id,
                state=str(payload.state),
                since=at,
                running_since=running_since,
                fraction=previous.fraction if previous is not None else None,
                progress=previous.progress if previous is not None else None,
            ),
        )
        if payload.state in _FAILED_JOB_STATES:
            self.failures.append(
                FailureView(
                    time=at,
                    kind="job",
                    plan_id=payload.plan_id,
                    job_id=payload.job_id,
                    state=str(payload.state),
                    reason=payload.reason or str(payload.state),
                )
            )

    def _remember(self, job_id: str, look: JobLook) -> None:
        self.jobs[job_id] = look
        self.jobs.move_to_end(job_id)
        while len(self.jobs) > self._keep_jobs:
            self.jobs.popitem(last=False)
