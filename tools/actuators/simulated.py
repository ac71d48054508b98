"""A simulated cluster behind the executor interface, on a clock you control.

Used by simulations, by tests, and by the embedded default when no SLURM answers. Its
nodes come in pools: one pool of identical nodes (``SimulatedCluster(nodes=...)``), or,
for a catalog system (``SimulatedCluster.of_system``), one pool per node type with the
partitions that run on it, each node as large as the largest request its partitions
accept, so every plan the planner makes for the system can run. Each pool schedules
first-come first-served (the head of its queue blocks the rest) or, with
``policy="easy"``, with EASY backfilling (a later job may start early if, by the requested
walltimes, it does not delay the head's reservation; the trace simulator in
``simulations/`` has the fast versions of these and more). A request no pool can ever
hold is refused at submission (``RequestRejected``), never queued for ever.

How a job behaves is the cluster's own model (``model``: a request to its
``SimulatedWork``; by default ``WalltimeShare``: it runs 80% of the walltime it asked,
as a planner's walltime carries a margin over its estimate, and peaks at half its
memory), never something the submitter says: a production request carries no
simulation. The work is kept in the journal with the job (``JobRequest.simulated``),
so every process replays the same outcome. A job runs ``run_s``, is killed at its
walltime (TIMEOUT), is killed for memory when its peak exceeds its request
(OUT_OF_MEMORY, after a tenth of its run, when training jobs typically reach their
peak), and fails with a non-zero ``exit_code``. A model that returns None: the job
runs its whole walltime and completes.

The cluster is its journal (``tools.actuators.simulated_journal``) replayed on its
clock: every submission, cancel and walltime change is written there first, and every
call brings the cluster up to the clock's present from it. Processes sharing a journal
file share the cluster (ids, jobs, outcomes). Time moves only through the clock:
``ManualClock.advance`` in tests and replays, ``WallClock`` for the embedded deployment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    SimulatedWork,
    WalltimeNotExtended,
)
from tools.actuators.simulated_journal import Entry, Journal, MemoryJournal
from tools.actuators.state import NodePool

__all__ = [
    "Clock",
    "ClusterPolicy",
    "ManualClock",
    "PoolSpec",
    "SimulatedCluster",
    "WallClock",
    "WalltimeShare",
    "WorkModel",
    "catalog_pools",
]

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
    """Real time (UTC), or ``speedup`` times faster counting from ``origin`` (a 60x clock
    runs an hour a minute). Processes that share a journal share its origin, so their
    sped-up clocks agree; at speedup 1 it is the wall clock itself."""

    def __init__(self, speedup: float = 1.0, *, origin: datetime | None = None) -> None:
        if speedup <= 0:
            raise ValueError(f"speedup must be positive, got {speedup}")
        self.speedup = speedup
        self._origin = origin or datetime.now(UTC)

    def now(self) -> datetime:
        wall = datetime.now(UTC)
        if self.speedup == 1.0:
            return wall
        return self._origin + (wall - self._origin) * self.speedup


WorkModel = Callable[[JobRequest], SimulatedWork | None]
"""The simulated cluster's model of a job: how long it runs, its peak, its exit code."""


@dataclass(frozen=True)
class WalltimeShare:
    """A job runs ``run_share`` of its walltime and peaks at ``memory_share`` of its
    memory: the planner's walltime and memory carry margins over what it estimated."""

    run_share: float = 0.8
    memory_share: float = 0.5

    def __call__(self, request: JobRequest) -> SimulatedWork:
        return SimulatedWork(
            run_s=max(1, math.ceil(request.walltime_s * self.run_share)),
            peak_memory_mb=math.ceil(request.memory_mb * self.memory_share),
        )


@dataclass(frozen=True)
class PoolSpec:
    """Identical nodes some partitions share; ``partitions`` empty: every partition."""

    name: str
    nodes: int
    cores_per_node: int
    memory_mb_per_node: int
    gpus_per_node: int = 0
    partitions: tuple[str, ...] = ()


def catalog_pools(system: System, default_nodes: int = 4) -> list[PoolSpec]:
    """One pool per node type of ``system`` (and one per partition that names none).

    A node is as large as the largest request its partitions accept (the catalog's node
    type and its partition limits disagree now and then: a partition's memory limit above
    the node's, a node type with no core count), and a pool has the node type's count,
    at least the most nodes one of its partitions lets a job ask for (``default_nodes``
    where neither is known), so a request within a partition's limits always fits.
    """
    pools = []
    by_type: dict[str | None, list[str]] = {}
    for partition in system.partitions:
        by_type.setdefault(partition.node_type, []).append(partition.name)
    for type_name, names in by_type.items():
        partitions = [system.partition(n) for n in names]
        node = next((t for t in system.node_types if t.name == type_name), None)
        groups = [[p] for p in partitions] if node is None else [partitions]
        for group in groups:
            cores = max(p.max_cores_per_node for p in group)
            memory = max(p.max_memory_mb for p in group)
            gpus = max(p.gpus_per_node for p in group)
            count = max(p.max_nodes for p in group)
            if node is not None:
                cores = max(cores, node.cores or 0)
                memory = max(memory, node.usable_memory_mb or node.memory_mb or 0)
                gpus = max(gpus, node.gpus or 0)
                count = max(count, node.count or default_nodes)
            pools.append(
                PoolSpec(
                    name=node.name if node is not None else group[0].name,
                    nodes=count,
                    cores_per_node=cores,
                    memory_mb_per_node=memory,
                    gpus_per_node=gpus,
                    partitions=tuple(p.name for p in group),
                )
            )
    return pools


@dataclass
class _Pool:
    spec: PoolSpec
    free: set[int]
    queue: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)


@dataclass
class _Job:
    job_id: str
    request: JobRequest
    submit: datetime
    pool: str
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
    """``nodes`` identical nodes of ``cores_per_node`` cores and ``memory_mb_per_node`` MB,
    or the ``pools`` given (``of_system``: a catalog system's)."""

    backend = "simulated"
    progress_is_run_time = True  # RIGHTSIZE_PROGRESS second=k/n: its own run, no code runs

    def __init__(
        self,
        *,
        nodes: int = 0,
        cores_per_node: int = 0,
        memory_mb_per_node: int = 0,
        gpus_per_node: int = 0,
        clock: Clock | None = None,
        system: System | None = None,
        policy: ClusterPolicy = "fcfs",
        pools: Sequence[PoolSpec] | None = None,
        journal: Journal | None = None,
        model: WorkModel | None = None,
    ) -> None:
        super().__init__(system)
        if policy not in ("fcfs", "easy"):
            raise ValueError(f"policy must be 'fcfs' or 'easy', got {policy!r}")
        if pools is None:
            pools = [PoolSpec("nodes", nodes, cores_per_node, memory_mb_per_node, gpus_per_node)]
        for spec in pools:
            if spec.nodes < 1 or spec.cores_per_node < 1 or spec.memory_mb_per_node < 1:
                raise ValueError(
                    f"a cluster needs nodes, cores and memory: got nodes={spec.nodes}, "
                    f"cores_per_node={spec.cores_per_node}, "
                    f"memory_mb_per_node={spec.memory_mb_per_node}"
                )
        self.pool_specs = list(pools)
        first = self.pool_specs[0]
        self.nodes = first.nodes
        self.cores_per_node = first.cores_per_node
        self.memory_mb_per_node = first.memory_mb_per_node
        self.gpus_per_node = first.gpus_per_node
        self.policy = policy
        self.clock: Clock = clock or ManualClock()
        self.journal: Journal = journal or MemoryJournal()
        self.model: WorkModel = model or WalltimeShare()
        self._key = system.name if system is not None else ""
        self._reset(self.clock.now())

    @classmethod
    def of_system(
        cls,
        system: System,
        *,
        clock: Clock | None = None,
        journal: Journal | None = None,
        policy: ClusterPolicy = "fcfs",
        default_nodes: int = 4,
        model: WorkModel | None = None,
    ) -> SimulatedCluster:
        """The catalog's ``system``: its node types and partitions (``catalog_pools``)."""
        return cls(
            pools=catalog_pools(system, default_nodes),
            clock=clock,
            system=system,
            policy=policy,
            journal=journal,
            model=model,
        )

    def _reset(self, at: datetime) -> None:
        self._pools = {s.name: _Pool(s, set(range(s.nodes))) for s in self.pool_specs}
        self._jobs: dict[str, _Job] = {}
        self._seq = 0
        self._caught_up_to = at

    @property
    def _running(self) -> set[str]:
        """Every running job, whichever pool it runs on."""
        return {job_id for pool in self._pools.values() for job_id in pool.running}

    def _pool_of(self, partition: str) -> _Pool | None:
        for pool in self._pools.values():
            if not pool.spec.partitions or partition in pool.spec.partitions:
                return pool
        return None

    # -- the event loop -----------------------------------------------------------------

    def _sync(self) -> None:
        """Apply what the journal holds beyond what this copy has seen, each change at its
        time, then run up to the clock's present. Another process's change from before
        this copy's present is replayed from the start, so every copy agrees."""
        entries = [e for e in self.journal.since(self._seq) if e.system == self._key]
        if entries and entries[0].at < self._caught_up_to:
            entries = [e for e in self.journal.since(0) if e.system == self._key]
            self._reset(entries[0].at)
        for entry in entries:
            self._advance(entry.at)
            self._apply(entry)
            self._seq = entry.seq
        self._advance(max(self.clock.now(), self._caught_up_to))

    def _advance(self, now: datetime) -> None:
        """Process every job end up to ``now``, starting jobs as nodes free."""
        for pool in self._pools.values():
            self._schedule(pool, self._caught_up_to)
        while True:
            ending = [
                (end, job_id)
                for pool in self._pools.values()
                for job_id in pool.running
                if (end := self._jobs[job_id].end) is not None and end <= now
            ]
            if not ending:
                break
            at = min(end for end, _ in ending)
            for end, job_id in ending:  # every job ending then frees its nodes, then schedule
                if end == at:
                    job = self._jobs[job_id]
                    job.state = job.outcome
                    pool = self._pools[job.pool]
                    pool.running.discard(job_id)
                    pool.free.update(job.nodes)
            for pool in self._pools.values():
                self._schedule(pool, at)
        self._caught_up_to = max(self._caught_up_to, now)

    def _apply(self, entry: Entry) -> None:
        if entry.kind == "submit":
            request = JobRequest.model_validate_json(entry.body)
            pool = self._pool_of(request.partition)
            if pool is None:  # refused at submission; a journal from elsewhere is skipped
                return
            self._jobs[entry.job_id] = _Job(
                job_id=entry.job_id, request=request, submit=entry.at, pool=pool.spec.name
            )
            pool.queue.append(entry.job_id)
            self._schedule(pool, entry.at)
            return
        job = self._jobs.get(entry.job_id)
        if job is None or job.state not in (JobState.PENDING, JobState.RUNNING):
            return
        pool = self._pools[job.pool]
        if entry.kind == "cancel":
            if job.state is JobState.PENDING:
                pool.queue.remove(job.job_id)
            else:
                pool.free.update(job.nodes)
                pool.running.discard(job.job_id)
            job.state = JobState.CANCELLED
            job.end = entry.at
            job.reason = "cancelled"
            self._schedule(pool, entry.at)
            return
        job.request = job.request.model_copy(update={"walltime_s": int(entry.body)})
        if job.state is JobState.RUNNING:
            job.end, job.outcome, job.exit_code, job.reason = job.planned_end()
            if job.end <= entry.at:  # lowered below what it already ran: ends now
                self._advance(entry.at)

    def next_event(self) -> datetime | None:
        """When the next running job ends (None when nothing runs): where a driver of a
        manual clock should stop next to see every end at its time."""
        self._sync()
        ends = [
            end
            for pool in self._pools.values()
            for job_id in pool.running
            if (end := self._jobs[job_id].end) is not None
        ]
        return min(ends, default=None)

    def _start(self, pool: _Pool, job: _Job, at: datetime) -> None:
        job.nodes = sorted(pool.free)[: job.request.nodes]
        pool.free.difference_update(job.nodes)
        job.state = JobState.RUNNING
        job.start = at
        job.end, job.outcome, job.exit_code, job.reason = job.planned_end()
        pool.running.add(job.job_id)

    def _schedule(self, pool: _Pool, at: datetime) -> None:
        while pool.queue:
            head = self._jobs[pool.queue[0]]
            if head.request.nodes > len(pool.free):
                break  # FCFS: the head waits, and so does everyone behind it
            pool.queue.pop(0)
            self._start(pool, head, at)
        if self.policy == "easy" and len(pool.queue) > 1:
            self._backfill(pool, at)

    def _backfill(self, pool: _Pool, at: datetime) -> None:
        """EASY: start later jobs that fit now without delaying the head's reservation."""
        head = self._jobs[pool.queue[0]]
        ends = sorted(
            (job.start + timedelta(seconds=job.request.walltime_s), len(job.nodes))
            for job in (self._jobs[job_id] for job_id in pool.running)
            if job.start is not None
        )
        available = len(pool.free)
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
        for job_id in list(pool.queue[1:]):
            if not pool.free:
                return
            job = self._jobs[job_id]
            nodes = job.request.nodes
            if nodes > len(pool.free):
                continue
            ends_by_shadow = at + timedelta(seconds=job.request.walltime_s) <= shadow
            if not ends_by_shadow and nodes > extra:
                continue
            if not ends_by_shadow:
                extra -= nodes
            pool.queue.remove(job_id)
            self._start(pool, job, at)

    # -- the executor interface -----------------------------------------------------------

    def now(self) -> datetime:
        """The cluster's own clock: simulated time, not the wall clock."""
        return self.clock.now()

    async def _submit(self, request: JobRequest) -> str:
        self._sync()
        pool = self._pool_of(request.partition)
        if pool is None:
            raise RequestRejected(
                f"job {request.name!r} can never run on this simulated cluster: no nodes "
                f"run partition {request.partition!r}",
                field="partition",
                value=request.partition,
            )
        spec = pool.spec
        too_big = [
            f"{what} {asked} > {have}"
            for what, asked, have in (
                ("nodes", request.nodes, spec.nodes),
                ("cores per node", request.cores_per_node, spec.cores_per_node),
                ("memory per node (MB)", request.memory_mb, spec.memory_mb_per_node),
                ("GPUs per node", request.gpus_per_node, spec.gpus_per_node),
            )
            if asked > have
        ]
        if too_big:
            raise RequestRejected(
                f"job {request.name!r} can never run on this simulated cluster: "
                + "; ".join(too_big),
                field="request",
            )
        if request.simulated is None:  # the cluster's own model says how the job behaves
            request = request.model_copy(update={"simulated": self.model(request)})
        entry = self.journal.append(
            "submit", self._key, self.clock.now(), body=request.model_dump_json()
        )
        self._sync()
        return entry.job_id

    def _job(self, job_id: str) -> _Job:
        self._sync()
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
        self._sync()
        ids = [job_id for job_id, job in self._jobs.items() if job.request.name == name]
        return ids[-1] if ids else None  # journal order: the last one is the newest

    async def _node_pools(self) -> list[NodePool]:
        """Each pool with the partitions that run on it. A cluster with no system (one
        pool standing in for every system of a catalog) cannot say which partitions its
        nodes are, and reports no pool."""
        self._sync()
        if self.system is None:
            return []
        every = [p.name for p in self.system.partitions]
        return [
            NodePool(
                name=pool.spec.name if pool.spec.partitions else self.system.name,
                partitions=list(pool.spec.partitions) or every,
                total_nodes=pool.spec.nodes,
                idle_nodes=len(pool.free),
            )
            for pool in self._pools.values()
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
        if job.state not in (JobState.PENDING, JobState.RUNNING):
            return
        self.journal.append("cancel", self._key, self.clock.now(), job_id=job_id)
        self._sync()

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
        self.journal.append(
            "extend", self._key, self.clock.now(), job_id=job_id, body=str(int(new_limit_s))
        )
        self._sync()

    async def queue(self) -> list[QueueEntry]:
        self._sync()
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
        self._sync()
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
