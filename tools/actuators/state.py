"""A batch system at one moment: its node pools (idle nodes, queue depth) and its queue.

``Executor.cluster_state()`` answers with a ``ClusterState``; planning turns it into the
``QueueSnapshot`` its wait model reads (``tools.planning.queue.snapshot_from_state``).
A pool is the set of nodes some partitions share; its node counts are None where the
batch system does not say (Tapis), and planning then calls the wait unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import JobState
from tools.actuators.model import QueueEntry

__all__ = ["ClusterState", "NodePool"]


class NodePool(BaseModel):
    """Nodes some partitions share, now: how many are idle and how deep the queue is."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    partitions: list[str] = Field(description="Every partition that runs on these nodes")
    total_nodes: int | None = Field(default=None, ge=0, description="None: not reported")
    idle_nodes: int | None = Field(default=None, ge=0, description="None: not reported")
    running_jobs: int = Field(default=0, ge=0)
    pending_jobs: int = Field(default=0, ge=0, description="Queue depth")


class ClusterState(BaseModel):
    """One look at a batch system: pools and the jobs pending or running on them."""

    model_config = ConfigDict(extra="forbid")

    taken_at: datetime = Field(description="On the executor's clock")
    source: str = Field(description="Which backend answered, and with what")
    pools: list[NodePool] = Field(default_factory=list)
    jobs: list[QueueEntry] = Field(default_factory=list)

    @classmethod
    def of(
        cls,
        taken_at: datetime,
        source: str,
        pools: Sequence[NodePool],
        jobs: Sequence[QueueEntry],
    ) -> ClusterState:
        """The state with each pool's running and pending jobs counted from ``jobs``."""
        counted = []
        for pool in pools:
            members = set(pool.partitions)
            mine = [j for j in jobs if j.partition in members]
            counted.append(
                pool.model_copy(
                    update={
                        "running_jobs": sum(j.state is JobState.RUNNING for j in mine),
                        "pending_jobs": sum(j.state is JobState.PENDING for j in mine),
                    }
                )
            )
        return cls(taken_at=taken_at, source=source, pools=counted, jobs=list(jobs))

    def pool_of(self, partition: str) -> NodePool | None:
        """The pool ``partition`` runs on; None where the backend did not report it."""
        return next((p for p in self.pools if partition in p.partitions), None)
