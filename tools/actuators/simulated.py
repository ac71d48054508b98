"""A simulated cluster behind the executor interface, on a clock you control.

Used by simulations, by tests, and by the embedded default when no SLURM answers. It is
deliberately simple: one pool of identical nodes, first-come first-served (the head of
the queue blocks the rest) or, with ``policy="easy"``, EASY backfilling (a later job may
start early if, by the requested walltimes, it does not delay the head's reservation; the
trace simulator in ``simulations/`` has the fast versions of these and more). A job behaves
as its ``JobRequest.simulated`` says: it runs ``run_s``, is killed at its walltime
(TIMEOUT), is killed for memory when its peak exceeds its request (OUT_OF_MEMORY, after
a tenth of its run, when training jobs typically reach their peak), and fails with a
non-zero ``exit_code``. A job without a ``simulated`` description runs its whole walltime
and completes.

Time moves only through the clock: ``ManualClock.advance`` in tests and replays,
``WallClock`` (optionally sped up) for the embedded deployment. Every call first brings
the cluster up to the clock's present.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from knowledge_base.catalog import System
from knowledge_base.records import JobRecord, JobState
from tools.actuators.base import Executor
from tools.actuators.model import (
    JobNotFound,
    JobRequest,
    JobStatus,
    QueueEntry,
    RequestRejected,
    WalltimeNotExtended,
)
from tools.actuators.state import NodePool

__all__ = ["Clock", "ClusterPolicy", "ManualClock", "SimulatedCluster", "WallClock"]

ClusterPolicy = Literal["fcfs", "easy"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    def now(self) -> datetime: ...


class ManualClock:
    """Time that moves only when told to."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError(f"the clock cannot go back: advance({seconds})")
        self._now += timedelta(seconds=seconds)
        return self._now


class WallClock:
    """Real time, optionally ``speedup`` times faster (a 60x clock runs an hour a minute)."""

    def __init__(self, speedup: float = 1.0) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup must be positive, got {speedup}")
        self.speedup = speedup
        self._start_wall = datetime.now(UTC)
        self._start_mono = time.monotonic()

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._start_mono) * self.speedup
        return self._start_wall + timedelta(seconds=elapsed)


@dataclass
class _Job:
    job_id: str
    request: JobRequest
    submit: datetime
    state: JobState = JobState.PENDING
    start: datetime | None = None
    end: datetime | None = None
    outcome: JobState = JobState.COMPLETED  # what it will end as once started
    exit_code: int = 0
    reason: str = ""
    nodes: list[int] = field(default_factory=list)

    def planned_end(self) -> tuple[datetime, JobState, int, str]:
        """When and how a started job ends, from its simulated behaviour."""
        assert self.start is not None
        request = self.request
        work = request.simulated
        run_s = work.run_s if work is not None else request.walltime_s
        if work is not None and work.peak_memory_mb > request.memory_mb:
            at = min(run_s / 10, request.walltime_s)
            reason = f"peak {work.peak_memory_mb} MB > requested {request.memory_mb} MB"
            return self.start + timedelta(seconds=at), JobState.OUT_OF_MEMORY, 137, reason
        if run_s > request.walltime_s:
            end = self.start + timedelta(seconds=request.walltime_s)
            return end, JobState.TIMEOUT, 0, "walltime reached"
        end = self.start + timedelta(seconds=run_s)
        if work is not None and work.exit_code != 0:
            return end, JobState.FAILED, work.exit_code, "non-zero exit"
        return end, JobState.COMPLETED, 0, ""


class SimulatedCluster(Executor):
    """``nodes`` identical nodes of ``cores_per_node`` cores and ``memory_mb_per_node`` MB."""

    backend = "simulated"

    def __init__(
        self,
        *,
        nodes: int,
        cores_per_node: int,
        memory_mb_per_node: int,
        gpus_per_node: int = 0,
        clock: Clock | None = None,
        system: System | None = None,
        policy: ClusterPolicy = "fcfs",
    ) -> None:
        super().__init__(system)
        if policy not in ("fcfs", "easy"):
            raise ValueError(f"policy must be 'fcfs' or 'easy', got {policy!r}")
        if nodes < 1 or cores_per_node < 1 or memory_mb_per_node < 1:
            raise ValueError(
                f"a cluster needs nodes, cores and memory: got nodes={nodes}, "
                f"cores_per_node={cores_per_node}, memory_mb_per_node={memory_mb_per_node}"
            )
        self.nodes = nodes
        self.cores_per_node = cores_per_node
        self.memory_mb_per_node = memory_mb_per_node
        self.gpus_per_node = gpus_per_node
        self.policy = policy
        self.clock: Clock = clock or ManualClock()
        self._jobs: dict[str, _Job] = {}
        self._queue: list[str] = []
        self._running: set[str] = set()
        self._free_nodes = set(range(nodes))
        self._ids = itertools.count(1)
        self._caught_up_to = self.clock.now()

    # -- the event loop -----------------------------------------------------------------

    def _catch_up(self) -> None:
        """Process every job end up to the clock's present, starting jobs as nodes free."""
        now = self.clock.now()
        self._schedule(self._caught_up_to)
        while True:
            ending = [
                (end, job_id)
                for job_id in self._running
                if (end := self._jobs[job_id].end) is not None and end <= now
            ]
            if not ending:
                break
            at = min(end for end, _ in ending)
            for end, job_id in ending:  # every job ending then frees its nodes, then schedule
                if end == at:
                    job = self._jobs[job_id]
                    job.state = job.outcome
                    self._running.discard(job_id)
                    self._free_nodes.update(job.nodes)
            self._schedule(at)
        self._caught_up_to = now

    def next_event(self) -> datetime | None:
        """When the next running job ends (None when nothing runs): where a driver of a
        manual clock should stop next to see every end at its time."""
        self._catch_up()
        ends = [end for job_id in self._running if (end := self._jobs[job_id].end) is not None]
        return min(ends, default=None)

    def _start(self, job: _Job, at: datetime) -> None:
        job.nodes = sorted(self._free_nodes)[: job.request.nodes]
        self._free_nodes.difference_update(job.nodes)
        job.state = JobState.RUNNING
        job.start = at
        job.end, job.outcome, job.exit_code, job.reason = job.planned_end()
        self._running.add(job.job_id)

    def _schedule(self, at: datetime) -> None:
        while self._queue:
            head = self._jobs[self._queue[0]]
            if head.request.nodes > len(self._free_nodes):
                break  # FCFS: the head waits, and so does everyone behind it
            self._queue.pop(0)
            self._start(head, at)
        if self.policy == "easy" and len(self._queue) > 1:
            self._backfill(at)

    def _backfill(self, at: datetime) -> None:
        """EASY: start later jobs that fit now without delaying the head's reservation."""
        head = self._jobs[self._queue[0]]
        ends = sorted(
            (job.start + timedelta(seconds=job.request.walltime_s), len(job.nodes))
            for job in (self._jobs[job_id] for job_id in self._running)
            if job.start is not None
        )
        available = len(self._free_nodes)
        shadow = None
        for end, nodes in ends:
            if shadow is not None and end > shadow:
                break
            available += nodes  # every job ending at the shadow time frees its nodes then
            if shadow is None and available >= head.request.nodes:
                shadow = end
        if shadow is None:
            return  # cannot happen for a job that fits the cluster
        extra = available - head.request.nodes
        for job_id in list(self._queue[1:]):
            if not self._free_nodes:
                return
            job = self._jobs[job_id]
            nodes = job.request.nodes
            if nodes > len(self._free_nodes):
                continue
            ends_by_shadow = at + timedelta(seconds=job.request.walltime_s) <= shadow
            if not ends_by_shadow and nodes > extra:
                continue
            if not ends_by_shadow:
                extra -= nodes
            self._queue.remove(job_id)
            self._start(job, at)

    # -- the executor interface -----------------------------------------------------------

    def now(self) -> datetime:
        """The cluster's own clock: simulated time, not the wall clock."""
        return self.clock.now()

    async def _submit(self, request: JobRequest) -> str:
        self._catch_up()
        too_big = [
            f"{what} {asked} > {have}"
            for what, asked, have in (
                ("nodes", request.nodes, self.nodes),
                ("cores per node", request.cores_per_node, self.cores_per_node),
                ("memory per node (MB)", request.memory_mb, self.memory_mb_per_node),
                ("GPUs per node", request.gpus_per_node, self.gpus_per_node),
            )
            if asked > have
        ]
        if too_big:
            raise RequestRejected(
                f"job {request.name!r} can never run on this simulated cluster: "
                + "; ".join(too_big),
                field="request",
            )
        job_id = str(next(self._ids))
        self._jobs[job_id] = _Job(job_id=job_id, request=request, submit=self.clock.now())
        self._queue.append(job_id)
        self._schedule(self.clock.now())
        return job_id

    def _job(self, job_id: str) -> _Job:
        self._catch_up()
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFound(f"the simulated cluster has no job {job_id!r}") from None

    async def status(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        finished = job.state not in (JobState.PENDING, JobState.RUNNING)
        return JobStatus(
            job_id=job.job_id,
            state=job.state,
            native_state=job.state.value.upper(),
            name=job.request.name,
            partition=job.request.partition,
            exit_code=job.exit_code if finished else None,
            reason=job.reason if finished else "",
            submit_time=job.submit,
            start_time=job.start,
            end_time=job.end if finished else None,
        )

    async def find_by_name(self, name: str) -> str | None:
        self._catch_up()
        ids = [job_id for job_id, job in self._jobs.items() if job.request.name == name]
        return ids[-1] if ids else None  # ids count up: the last one is the newest

    async def _node_pools(self) -> list[NodePool]:
        """Every partition of the cluster's system runs on its one pool of nodes. A
        cluster with no system (standing in for every system of a catalog) cannot say
        which partitions its nodes are, and reports no pool."""
        self._catch_up()
        if self.system is None:
            return []
        return [
            NodePool(
                name=self.system.name,
                partitions=[p.name for p in self.system.partitions],
                total_nodes=self.nodes,
                idle_nodes=len(self._free_nodes),
            )
        ]

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        """A simulated job reports progress as the share of its run time done."""
        job = self._job(job_id)
        if job.start is None:
            return ""
        run_s = job.request.simulated.run_s if job.request.simulated else job.request.walltime_s
        now = self.clock.now() if job.state is JobState.RUNNING or job.end is None else job.end
        done = min(run_s, int((now - job.start).total_seconds()))
        return f"RIGHTSIZE_PROGRESS second={done}/{run_s}\n"

    async def cancel(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state is JobState.PENDING:
            self._queue.remove(job_id)
        elif job.state is JobState.RUNNING:
            self._free_nodes.update(job.nodes)
            self._running.discard(job_id)
        else:
            return
        job.state = JobState.CANCELLED
        job.end = self.clock.now()
        job.reason = "cancelled"
        self._schedule(self.clock.now())

    async def extend_walltime(self, job_id: str, new_limit_s: int) -> None:
        """Moves a job's kill time: its request's walltime becomes ``new_limit_s``, and a
        running job's end is planned again from its start."""
        job = self._job(job_id)
        if job.state not in (JobState.PENDING, JobState.RUNNING):
            raise WalltimeNotExtended(
                f"simulated job {job_id} already ended ({job.state.value}): not extended"
            )
        if new_limit_s < 1:
            raise WalltimeNotExtended(f"new_limit_s must be positive, got {new_limit_s}")
        job.request = job.request.model_copy(update={"walltime_s": int(new_limit_s)})
        if job.state is JobState.RUNNING:
            job.end, job.outcome, job.exit_code, job.reason = job.planned_end()
            if job.end <= self.clock.now():  # lowered below what it already ran: ends now
                self._catch_up()

    async def queue(self) -> list[QueueEntry]:
        self._catch_up()
        return [
            QueueEntry(
                job_id=j.job_id,
                state=j.state,
                partition=j.request.partition,
                nodes=j.request.nodes,
                cpus=j.request.nodes * j.request.cores_per_node,
                time_limit_s=j.request.walltime_s,
                submit_time=j.submit,
                start_time=j.start,
            )
            for j in self._jobs.values()
            if j.state in (JobState.PENDING, JobState.RUNNING)
        ]

    async def finished_jobs(self, since: datetime | None = None) -> list[JobRecord]:
        self._catch_up()
        system = self.system.name if self.system is not None else "simulated"
        return [
            JobRecord(
                job_id=j.job_id,
                system=system,
                partition=j.request.partition,
                application=j.request.name,
                state=j.state,
                submit_time=j.submit,
                start_time=j.start,
                end_time=j.end,
                wait_s=int((j.start - j.submit).total_seconds()) if j.start else None,
                run_s=int((j.end - j.start).total_seconds()) if j.start and j.end else None,
                requested_nodes=j.request.nodes,
                requested_cores=j.request.nodes * j.request.cores_per_node,
                requested_gpus=j.request.nodes * j.request.gpus_per_node,
                requested_memory_mb=j.request.memory_mb,
                requested_walltime_s=j.request.walltime_s,
                used_memory_mb=(
                    j.request.simulated.peak_memory_mb if j.request.simulated else None
                ),
                exit_code=j.exit_code,
                plan_id=j.request.plan_id,
                source="simulated cluster",
            )
            for j in self._jobs.values()
            if j.end is not None
            and j.state not in (JobState.PENDING, JobState.RUNNING)
            and (since is None or j.end >= since)
        ]
