"""The test cluster agent, actuator and planning tests run against.

Shaped like the local SLURM one (``scripts/slurm/start.sh``): one node of 2 cores and
20 GB, a ``debug`` partition (4 GB, 1 minute) and a ``batch`` one (20 GB, 10 minutes).
"""

from __future__ import annotations

from knowledge_base.catalog import NodeType, Partition, System

__all__ = ["TEST_SYSTEM"]


def _partition(name: str, *, max_memory_mb: int, max_minutes: int) -> Partition:
    return Partition(
        name=name,
        node_type="n",
        max_nodes=1,
        max_cores_per_node=2,
        max_memory_mb=max_memory_mb,
        max_minutes=max_minutes,
    )


TEST_SYSTEM = System(
    name="testcluster",
    center="lab",
    node_types=[NodeType(name="n", count=1, cores=2, memory_mb=20000)],
    partitions=[
        _partition("debug", max_memory_mb=4096, max_minutes=1),
        _partition("batch", max_memory_mb=20000, max_minutes=10),
    ],
)
