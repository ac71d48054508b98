"""Availability now and the expected queue wait, from a snapshot of a batch system's queue.

A ``QueueSnapshot`` is what a system looked like at one moment: its node pools (how many
nodes, how many idle) and its jobs (``tools.actuators.model.QueueEntry``: pending and
running, with sizes and time limits). It comes from a file (``--queue-snapshot``), or
live from an executor (``executor.cluster_state()``: pools with their idle nodes, and
the queue; ``live_snapshot``).

The wait model is a short simulation of the pool, conservative backfilling:

- a pool is the set of nodes some partitions share: those the snapshot lists for it,
  else every partition of the system that runs on the pool's node type;
- running jobs free their nodes when they are expected to end. Jobs use about 40% of the
  time they ask for (the mean run/request ratio of the SDSC-SP2, CTC-SP2, KTH-SP2 and
  HPC2N traces in ``shared/data/traces`` is 0.33-0.48), so a running job is expected to
  end at ``max(0.4 x limit - elapsed, 0.5 x (limit - elapsed))`` from now;
- pending jobs, oldest first, each take the earliest slot with enough free nodes for
  their expected run time, and keep it (a reservation);
- our job then takes the earliest slot with enough free nodes for its full walltime (the
  scheduler reserves by the limit it is given).

The result is the expected wait, or None where the snapshot says nothing about the
partition's pool; planning then says the wait is unknown rather than assuming zero.
Its p10-p90 (in the basis) is the rule's error measured against the waits recorded on
the shared traces (``tools.waits.rule``; ``benchmarks/waits.py`` measures it), which is
what a plan can say without the center's history.

Where the plan reads the queue live and the knowledge base holds enough recorded waits
of the system (``learned``: ``tools.waits.learned.learned_waits``), the wait is the
learned predictor's instead: p50 and p10-p90 of a job of the option's size and walltime
submitted now, behind the queue as it stands (docs/waits.md). The rule still decides
whether the pool is known and whether the job can ever fit.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_base.catalog import Catalog, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobState
from tools.actuators.base import Executor
from tools.actuators.model import QueueEntry
from tools.actuators.state import ClusterState
from tools.waits.rule import rule_interval

if TYPE_CHECKING:
    from knowledge_base.store import KnowledgeBase
    from tools.waits.learned import LearnedWaits, PredictorCache

__all__ = [
    "RUNTIME_FRACTION",
    "Availability",
    "PoolState",
    "QueueModel",
    "QueueSnapshot",
    "WaitEstimate",
    "live_queue_and_waits",
    "live_snapshot",
    "load_snapshots",
    "snapshot_from_state",
]

log = logging.getLogger(__name__)

RUNTIME_FRACTION = 0.4
_UNKNOWN_LIMIT_S = 24 * 3600  # a job with no time limit in the snapshot: a day


class PoolState(BaseModel):
    """Nodes some partitions share; name them by node type or list the partitions."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    node_type: str | None = Field(default=None, description="Every partition on this node type")
    partitions: list[str] = Field(default_factory=list, description="Or exactly these")
    total_nodes: int | None = Field(default=None, ge=0)
    idle_nodes: int | None = Field(default=None, ge=0)


class QueueSnapshot(BaseModel):
    """One system's queue at one moment."""

    model_config = ConfigDict(extra="forbid")

    system: str = Field(min_length=1)
    taken_at: datetime
    source: str = ""
    pools: list[PoolState] = Field(default_factory=list)
    jobs: list[QueueEntry] = Field(default_factory=list)


class _SnapshotFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    snapshots: list[QueueSnapshot]


def load_snapshots(path: Path) -> list[QueueSnapshot]:
    """One snapshot, or ``{"snapshots": [...]}``, from a JSON file; errors name the field."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"not JSON: {exc.msg} at line {exc.lineno}", source=str(path)
        ) from exc
    try:
        if isinstance(document, dict) and "snapshots" in document:
            return _SnapshotFile.model_validate(document).snapshots
        return [QueueSnapshot.model_validate(document)]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInputError(
            first["msg"], source=str(path), field=where, value=first.get("input")
        ) from exc


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    """The expected wait (None: unknown, or never), its p10-p90, and what it rests on."""

    wait_s: float | None
    basis: str
    never: bool = False  # the pool has fewer nodes than the job needs
    p10_s: float | None = None
    p90_s: float | None = None


@dataclass(frozen=True, slots=True)
class Availability:
    """What a partition's pool looks like now."""

    pool: str
    idle_nodes: int | None
    total_nodes: int | None
    running_jobs: int
    pending_jobs: int


@dataclass
class _Profile:
    """Free nodes over time: ``free[i]`` holds from ``times[i]`` until ``times[i + 1]``."""

    capacity: int
    times: list[float] = field(default_factory=lambda: [0.0])
    free: list[int] = field(default_factory=lambda: [0])

    def _split(self, at: float) -> int:
        index = bisect.bisect_left(self.times, at)
        if index < len(self.times) and self.times[index] == at:
            return index
        self.times.insert(index, at)
        self.free.insert(index, self.free[index - 1])
        return index

    def earliest(self, nodes: int, duration_s: float) -> float | None:
        if nodes > self.capacity:
            return None
        times, free = self.times, self.free
        for start_index, start in enumerate(times):
            if free[start_index] < nodes:
                continue
            end = start + duration_s
            index = start_index + 1
            while index < len(times) and times[index] < end and free[index] >= nodes:
                index += 1
            if index >= len(times) or times[index] >= end:
                return start
        return None  # unreachable: the profile ends with every node free

    def reserve(self, start: float, duration_s: float, nodes: int) -> None:
        first = self._split(start)
        last = self._split(start + duration_s)
        for index in range(first, last):
            self.free[index] -= nodes


class _Pool:
    def __init__(self, state: PoolState, partitions: set[str]) -> None:
        self.state = state
        self.partitions = partitions
        self.running: list[tuple[float, int]] = []  # (expected end from now, nodes)
        self.pending: list[tuple[float, int]] = []  # (expected run, nodes), oldest first
        self.running_jobs = 0
        self.pending_jobs = 0
        self._profile: _Profile | None = None
        self.capacity: int | None = None

    @cached_property
    def basis(self) -> str:
        return (
            f"pool {self.state.name!r}: {self.running_jobs} running, "
            f"{self.pending_jobs} pending ahead"
        )

    def profile(self) -> _Profile | None:
        if self._profile is not None:
            return self._profile
        busy = sum(nodes for _, nodes in self.running)
        if self.state.idle_nodes is not None:
            idle = self.state.idle_nodes
        elif self.state.total_nodes is not None:
            idle = max(self.state.total_nodes - busy, 0)
        else:
            return None
        self.capacity = idle + busy
        profile = _Profile(capacity=self.capacity, free=[idle])
        for end, nodes in sorted(self.running):
            index = profile._split(end)
            for later in range(index, len(profile.times)):
                profile.free[later] += nodes
        for run_s, nodes in self.pending:
            start = profile.earliest(nodes, run_s)
            if start is not None:
                profile.reserve(start, run_s, nodes)
        self._profile = profile
        return profile


class QueueModel:
    """Expected waits and availability for the systems some snapshots describe.

    Pool profiles are built on first use and kept: one model serves every option of a
    what-if, and a what-if asks hundreds of questions of a handful of pools.
    """

    def __init__(
        self,
        snapshots: Iterable[QueueSnapshot],
        catalog: Catalog,
        *,
        runtime_fraction: float = RUNTIME_FRACTION,
        learned: Mapping[str, LearnedWaits] | None = None,
    ) -> None:
        self.snapshots = {s.system: s for s in snapshots}
        self.learned = dict(learned or {})
        self.runtime_fraction = runtime_fraction
        self._pools: dict[tuple[str, str], _Pool] = {}
        self._user_jobs: dict[tuple[str, str, str], int] = {}
        self._user_jobs_on: dict[tuple[str, str], int] = {}
        self._availability: dict[tuple[str, str], Availability | None] = {}
        for snapshot in self.snapshots.values():
            if snapshot.system in catalog.names():
                self._index(snapshot, catalog.system(snapshot.system))

    def taken_at(self, system: str) -> datetime | None:
        snapshot = self.snapshots.get(system)
        return snapshot.taken_at if snapshot is not None else None

    def _index(self, snapshot: QueueSnapshot, system: System) -> None:
        node_type_of = {p.name: p.node_type for p in system.partitions}
        pools = []
        for state in snapshot.pools:
            members = set(state.partitions) or {
                name for name, node_type in node_type_of.items() if node_type == state.node_type
            }
            pool = _Pool(state, members)
            pools.append(pool)
            for member in members:
                self._pools.setdefault((system.name, member), pool)
        now = snapshot.taken_at
        waiting: dict[int, list[tuple[float, int, float, int]]] = {}
        for index, job in enumerate(snapshot.jobs):
            if job.user is not None and job.partition is not None:
                key = (system.name, job.partition, job.user)
                self._user_jobs[key] = self._user_jobs.get(key, 0) + 1
                on = (system.name, job.user)
                self._user_jobs_on[on] = self._user_jobs_on.get(on, 0) + 1
            pool_of_job = self._pools.get((system.name, job.partition or ""))
            if pool_of_job is None:
                continue
            limit_s = float(job.time_limit_s or _UNKNOWN_LIMIT_S)
            if job.state is JobState.RUNNING:
                elapsed = (now - job.start_time).total_seconds() if job.start_time else 0.0
                remaining = max(
                    self.runtime_fraction * limit_s - elapsed, 0.5 * (limit_s - elapsed), 60.0
                )
                pool_of_job.running.append((remaining, job.nodes))
                pool_of_job.running_jobs += 1
            elif job.state is JobState.PENDING:
                submitted = job.submit_time.timestamp() if job.submit_time else 0.0
                waiting.setdefault(id(pool_of_job), []).append(
                    (submitted, index, self.runtime_fraction * limit_s, job.nodes)
                )
                pool_of_job.pending_jobs += 1
        for pool in pools:  # oldest first: the order a FIFO-with-backfill queue serves
            pool.pending = [
                (run_s, nodes) for _, _, run_s, nodes in sorted(waiting.get(id(pool), []))
            ]

    def availability(self, system: str, partition: str) -> Availability | None:
        key = (system, partition)
        if key not in self._availability:
            self._availability[key] = self._availability_of(key)
        return self._availability[key]

    def _availability_of(self, key: tuple[str, str]) -> Availability | None:
        pool = self._pools.get(key)
        if pool is None:
            return None
        pool.profile()
        return Availability(
            pool=pool.state.name,
            idle_nodes=pool.state.idle_nodes
            if pool.state.idle_nodes is not None
            else (pool.capacity - sum(n for _, n in pool.running) if pool.capacity else None),
            total_nodes=pool.state.total_nodes
            if pool.state.total_nodes is not None
            else pool.capacity,
            running_jobs=pool.running_jobs,
            pending_jobs=pool.pending_jobs,
        )

    def user_jobs(self, system: str, partition: str, user: str) -> int:
        """Jobs ``user`` has pending or running in the partition (for max_jobs_per_user)."""
        return self._user_jobs.get((system, partition, user), 0)

    def user_jobs_on(self, system: str, user: str) -> int:
        """Jobs ``user`` has pending or running anywhere on the system."""
        return self._user_jobs_on.get((system, user), 0)

    def wait(
        self, system: System, partition: Partition, nodes: int, walltime_s: float
    ) -> WaitEstimate:
        """Expected wait before a job of ``nodes`` x ``walltime_s`` starts in ``partition``."""
        pool = self._pools.get((system.name, partition.name))
        if pool is None:
            return WaitEstimate(None, f"no queue information for {system.name}/{partition.name}")
        profile = pool.profile()
        if profile is None:
            return WaitEstimate(None, f"pool {pool.state.name!r} has no node counts")
        start = profile.earliest(nodes, walltime_s)
        if start is None:
            return WaitEstimate(
                None,
                f"needs {nodes} nodes; pool {pool.state.name!r} has {profile.capacity}",
                never=True,
            )
        learned = self.learned.get(system.name)
        if learned is not None:  # the center's recorded waits answer (docs/waits.md)
            answer = learned.wait(nodes, walltime_s, partition.name)
            return WaitEstimate(
                answer.wait_s,
                learned.basis(answer),
                p10_s=answer.p10_s - answer.taken_at,
                p90_s=answer.p90_s - answer.taken_at,
            )
        # The interval is the rule's error measured against recorded waits (tools.waits.rule)
        low, high = rule_interval(start)
        return WaitEstimate(
            start,
            f"{pool.basis}; p10-p90 {low / 3600:.1f}-{high / 3600:.1f} h "
            "(the rule's error on recorded waits, docs/waits.md)",
            p10_s=low,
            p90_s=high,
        )


def snapshot_from_state(system: str, state: ClusterState) -> QueueSnapshot:
    """The snapshot an executor's ``cluster_state()`` describes: one pool per node set."""
    return QueueSnapshot(
        system=system,
        taken_at=state.taken_at,
        source=f"{state.source} executor",
        pools=[
            PoolState(
                name=pool.name,
                partitions=pool.partitions,
                total_nodes=pool.total_nodes,
                idle_nodes=pool.idle_nodes,
            )
            for pool in state.pools
        ],
        jobs=state.jobs,
    )


async def live_snapshot(executor: Executor, system: str) -> QueueSnapshot:
    """``system``'s queue and pools now, read through its executor (on its clock)."""
    return snapshot_from_state(system, await executor.cluster_state())


async def live_queue_and_waits(
    executor: Executor,
    system: str,
    kb: KnowledgeBase,
    predictors: PredictorCache | None = None,
) -> tuple[QueueSnapshot, LearnedWaits | None]:
    """``system``'s queue now and, where its recorded waits allow, the learned waits on it
    (one read of the queue serves both; the model trains here, not while planning)."""
    from tools.waits.learned import PREDICTORS, learned_waits

    state = await executor.cluster_state()
    snapshot = snapshot_from_state(system, state)
    try:
        learned = await learned_waits(kb, system, state, predictors or PREDICTORS)
    except InvalidInputError as exc:  # e.g. no node counts: the rule says what it can
        log.warning("learned waits on %s: %s; the planner's rule answers", system, exc)
        learned = None
    return snapshot, learned
