"""Watching submitted jobs and telling the bus: state changes, progress, finished jobs.

The Scheduler hands each job it submits to a ``JobMonitor``. Every poll asks the
executor for the status of every watched job in one call (``Executor.statuses``: one
``squeue`` on SLURM) and for each job the tail of its output, lets the pure
``tools.actuators.monitor.observe`` say what changed, and publishes:

- ``job.state_changed`` on every state change (first sight included),
- ``job.progress`` when the job printed a new ``RIGHTSIZE_PROGRESS unit=done/total`` line,
- ``job.finished`` with the job's record once it ends; the job is then forgotten, but
  only after the publish succeeded (a failed publish changes nothing: the next poll
  sees the same changes and publishes the same events again).

Event ids derive from (system, job, what happened), so a monitor restarted after a crash
re-publishes the same ids and consumers drop the repeats. A poll that fails transiently
(the controller restarting) is logged and retried on the next poll. A job the executor
no longer knows is reported once as UNKNOWN and forgotten, but only after
``forget_after`` polls in a row have missed it: a batch system in the middle of a
restart may answer "no such job" for jobs that exist (SLURM 22.05's ``squeue --json``
exits 0 with an empty list while ``slurmctld`` is down), and a job forgotten for that is
a plan that never ends.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from agents.bus.base import Bus, Message
from agents.events import Envelope, JobFinished, JobProgress, JobStateChanged, event_id_for
from agents.topics import topic_for
from knowledge_base.errors import RightsizeError
from knowledge_base.records import JobState
from tools.actuators.base import Executor
from tools.actuators.model import JobStatus
from tools.actuators.monitor import Progress, observe, parse_progress

__all__ = ["JobMonitor", "Watched"]

log = logging.getLogger(__name__)


@dataclass
class Watched:
    job_id: str
    plan_id: str | None
    last: JobStatus | None = None
    progress: Progress | None = None
    misses: int = 0  # polls in a row the executor did not know the job


class JobMonitor:
    """Polls ``executor`` for the jobs it watches and publishes what changed on ``bus``."""

    def __init__(
        self,
        executor: Executor,
        bus: Bus,
        *,
        system: str,
        source: str = "scheduler",
        forget_after: int = 3,
    ) -> None:
        """``forget_after``: polls in a row that must miss a job before it is UNKNOWN."""
        if forget_after < 1:
            raise ValueError(f"forget_after must be at least 1, got {forget_after}")
        self.executor = executor
        self.bus = bus
        self.system = system
        self.source = source
        self.forget_after = forget_after
        self._jobs: dict[str, Watched] = {}

    def watch(self, job_id: str, plan_id: str | None = None) -> None:
        self._jobs.setdefault(job_id, Watched(job_id, plan_id))

    @property
    def watching(self) -> list[str]:
        return list(self._jobs)

    async def poll_once(self) -> list[Envelope]:
        """Look at every watched job once; returns (and publishes) the events it made."""
        events: list[Envelope] = []
        if not self._jobs:
            return events
        try:  # one look at every watched job (one squeue on SLURM), not one per job
            statuses = await self.executor.statuses(list(self._jobs))
        except RightsizeError as exc:
            if not exc.transient:
                raise
            log.warning("%s: job states unavailable, will retry: %s", self.system, exc)
            return events
        looks: list[_Look] = []
        for job in list(self._jobs.values()):
            status = statuses.get(job.job_id)
            if status is None:
                job.misses += 1
                if job.misses < self.forget_after:
                    log.warning(
                        "job %s/%s: not known to the executor (%d of %d polls before it is "
                        "given up as unknown)",
                        self.system,
                        job.job_id,
                        job.misses,
                        self.forget_after,
                    )
                    continue
                reason = f"no longer known ({job.misses} polls in a row)"
                gone = self._state_event(job, _unknown(job.job_id), reason)
                looks.append(_Look(job, [gone], job.last, job.progress, forget=True))
                continue
            job.misses = 0
            try:
                looks.append(await self._look(job, status))
            except RightsizeError as exc:
                if not exc.transient:
                    raise
                log.warning(
                    "job %s/%s: output unavailable, will retry: %s", self.system, job.job_id, exc
                )
        events = [event for look in looks for event in look.events]
        if events:
            # Publish first, remember after: a publish that fails leaves every job as it
            # was, so the next poll sees the same changes and publishes the same event ids
            # again (consumers drop repeats); a job is forgotten only once its end is out.
            try:
                await self.bus.publish_many([Message.of(topic_for(e.type), e) for e in events])
            except RightsizeError as exc:
                if not exc.transient:
                    raise
                log.warning(
                    "%s: publishing %d job event(s) failed, will publish them at the next poll: %s",
                    self.system,
                    len(events),
                    exc,
                )
                return []
        for look in looks:
            look.job.last, look.job.progress = look.last, look.progress
            if look.forget:
                self._jobs.pop(look.job.job_id, None)
        return events

    async def run(self, interval_s: float, stop: asyncio.Event) -> None:
        """Poll every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            await self.poll_once()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except TimeoutError:
                continue

    async def _look(self, job: Watched, status: JobStatus) -> _Look:
        """What changed for ``job``; changes nothing (``poll_once`` applies it once published)."""
        progress = parse_progress(await self.executor.output_tail(job.job_id)) or job.progress
        seen = observe(job.last, status, job.progress, progress)
        if seen is None:
            return _Look(job, [], status, progress, forget=False)
        events = []
        if seen.state_changed:
            events.append(self._state_event(job, status, status.reason, seen.previous_state))
        if seen.progress_changed and seen.progress is not None:
            events.append(self._progress_event(job, seen.progress))
        if status.finished:
            events.append(self._finished_event(job, status))
        return _Look(job, events, status, progress, forget=status.finished)

    def _envelope(
        self, job: Watched, payload: JobStateChanged | JobProgress | JobFinished, *what: object
    ) -> Envelope:
        return Envelope.of(
            payload,
            source=self.source,
            correlation_id=job.plan_id or f"{self.system}/{job.job_id}",
            id=event_id_for(self.system, job.job_id, *what),
            time=self.executor.now(),
        )

    def _state_event(
        self, job: Watched, status: JobStatus, reason: str, previous: str | None = None
    ) -> Envelope:
        payload = JobStateChanged(
            system=self.system,
            job_id=job.job_id,
            plan_id=job.plan_id,
            previous=JobState(previous) if previous else None,
            state=status.state,
            reason=reason,
        )
        return self._envelope(job, payload, "state", status.state.value)

    def _progress_event(self, job: Watched, progress: Progress) -> Envelope:
        payload = JobProgress(
            system=self.system,
            job_id=job.job_id,
            plan_id=job.plan_id,
            unit=progress.unit,
            done=progress.done,
            total=progress.total,
            fraction=progress.fraction,
        )
        return self._envelope(job, payload, "progress", progress.unit, progress.done)

    def _finished_event(self, job: Watched, status: JobStatus) -> Envelope:
        record = status.to_record(
            self.system, f"monitor ({self.executor.backend})", plan_id=job.plan_id
        )
        return self._envelope(job, JobFinished(job=record), "finished")


@dataclass(frozen=True)
class _Look:
    """One job's poll: the events to publish and what to remember once they are out."""

    job: Watched
    events: list[Envelope]
    last: JobStatus | None
    progress: Progress | None
    forget: bool


def _unknown(job_id: str) -> JobStatus:
    return JobStatus(job_id=job_id, state=JobState.UNKNOWN, native_state="UNKNOWN")
