"""The executor interface every batch-system backend implements.

Callers (Optimization, the Scheduler and its monitors, ``rightsize plan --live-queue``)
reach a batch system only through these methods, never around them: submit, status (one
job, or every watched job in one look), cancel, find a job by name, the queue, the
partition state (idle nodes, queue depth), accounting, and the executor's clock.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from knowledge_base.catalog import System
from knowledge_base.records import JobRecord
from tools.actuators.model import (
    JobNotFound,
    JobRequest,
    JobStatus,
    QueueEntry,
    WalltimeNotExtended,
)
from tools.actuators.policy import check_request

if TYPE_CHECKING:
    from tools.actuators.ordering import PrioritySetter
from tools.actuators.state import ClusterState, NodePool

__all__ = ["Executor"]


class Executor(abc.ABC):
    """Submit, watch, cancel, snapshot the queue, and account for finished jobs.

    ``system`` is the catalog entry of the machine behind the executor; when given, every
    request is checked against its partition limits before it is submitted.
    """

    backend: str = "abstract"
    progress_is_run_time: bool = False
    """True where a job's progress lines count seconds of its own run, not the
    workload's steps or epochs (the simulated cluster runs no code)."""

    def __init__(self, system: System | None = None) -> None:
        self.system = system

    def now(self) -> datetime:
        """The executor's present. Real batch systems run on the wall clock (UTC); a
        simulated cluster keeps its own, and every time a caller compares with the
        executor's times (job starts, queue ages, event stamps) must come from here."""
        return datetime.now(UTC)

    async def submit(self, request: JobRequest) -> str:
        """Submit ``request``; returns the batch system's job id."""
        if self.system is not None:
            check_request(request, self.system)
        return await self._submit(request)

    @abc.abstractmethod
    async def _submit(self, request: JobRequest) -> str: ...

    @abc.abstractmethod
    async def status(self, job_id: str) -> JobStatus:
        """The job's current state; JobNotFound when the executor has never heard of it."""

    async def statuses(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """The state of every job in ``job_ids`` in one look (backends batch it: one
        ``squeue`` on SLURM); a job the executor has never heard of is left out."""
        found = {}
        for job_id in job_ids:
            try:
                found[job_id] = await self.status(job_id)
            except JobNotFound:
                continue
        return found

    @abc.abstractmethod
    async def find_by_name(self, name: str) -> str | None:
        """The id of the newest job named ``name`` the batch system knows, queued or
        finished; None when it knows none (a submission that never arrived)."""

    @abc.abstractmethod
    async def cancel(self, job_id: str) -> None:
        """Cancel a pending or running job; cancelling a finished job does nothing."""

    async def extend_walltime(self, job_id: str, new_limit_s: int) -> None:
        """Raise a pending or running job's time limit to ``new_limit_s`` (from its start)
        in place: same job id, nothing resubmitted. WalltimeNotExtended when the batch
        system refuses (rights, a partition's MaxTime, a finished job) or cannot do it;
        ``transient`` on it when a retry may help. Backends that can override this."""
        raise WalltimeNotExtended(
            f"the {self.backend} executor cannot extend job {job_id!r}'s walltime in place"
        )

    def priority_setter(self) -> PrioritySetter | None:
        """How pending jobs' priorities are set on this batch system (the rightsize order,
        agents/ordering.py); None where it takes none (the center keeps its own order)."""
        return None

    @abc.abstractmethod
    async def queue(self) -> list[QueueEntry]:
        """Every job the batch system holds now (pending and running)."""

    async def cluster_state(self) -> ClusterState:
        """The queue and each node pool's idle nodes and queue depth, taken now."""
        taken_at = self.now()
        jobs = await self.queue()
        pools = await self._node_pools()
        return ClusterState.of(taken_at, self.backend, pools, jobs)

    @abc.abstractmethod
    async def _node_pools(self) -> list[NodePool]:
        """The node pools and their node counts (job counts are filled in from the queue)."""

    @abc.abstractmethod
    async def finished_jobs(self, since: datetime | None = None) -> list[JobRecord]:
        """Accounting of jobs that ended at or after ``since`` (all known when None)."""

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        """The end of what the job printed so far, for progress lines; "" where unknown."""
        return ""
