"""Queue-limit documents (the iScheduler format of ``queue_limits.json``) to partitions.

One document per queue: ``{"cluster", "queue", "minNodeCount", "maxNodeCount",
"minCoresPerNode", "maxCoresPerNode", "minMemoryMB", "maxMemoryMB", "minMinutes",
"maxMinutes"}``; memory is MB per node.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from knowledge_base.catalog import Catalog, Partition
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers._errors import invalid, load_json

__all__ = ["QueueLimit", "export_queue_limits", "parse_queue_limits", "read_queue_limits"]


class QueueLimit(BaseModel):
    """One queue document, exactly as the file spells it."""

    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(min_length=1)
    queue: str = Field(min_length=1)
    minNodeCount: StrictInt = Field(ge=0)
    maxNodeCount: StrictInt = Field(ge=1)
    minCoresPerNode: StrictInt = Field(ge=0)
    maxCoresPerNode: StrictInt = Field(ge=1)
    minMemoryMB: StrictInt = Field(ge=0)
    maxMemoryMB: StrictInt = Field(ge=0)
    minMinutes: StrictInt = Field(ge=0)
    maxMinutes: StrictInt = Field(ge=1)

    def to_partition(self, source: str) -> Partition:
        return Partition(
            name=self.queue,
            min_nodes=self.minNodeCount,
            max_nodes=self.maxNodeCount,
            min_cores_per_node=self.minCoresPerNode,
            max_cores_per_node=self.maxCoresPerNode,
            min_memory_mb=self.minMemoryMB,
            max_memory_mb=self.maxMemoryMB,
            min_minutes=self.minMinutes,
            max_minutes=self.maxMinutes,
            sources={"limits": source},
        )


def parse_queue_limits(documents: Any, source: str) -> dict[str, list[Partition]]:
    """System name -> its partitions, in file order; rejects the whole input on any error."""
    if not isinstance(documents, list):
        raise InvalidInputError(
            f"expected a JSON list of queue documents, got {type(documents).__name__}",
            source=source,
        )
    by_system: dict[str, list[Partition]] = {}
    seen: set[tuple[str, str]] = set()
    for index, document in enumerate(documents):
        label = f"[{index}]"
        if isinstance(document, dict) and "cluster" in document and "queue" in document:
            label = f"[{index}] ({document['cluster']}/{document['queue']})"
        try:
            limit = QueueLimit.model_validate(document)
            partition = limit.to_partition(Path(source).name)
        except ValidationError as exc:
            raise invalid(exc, source, prefix=label) from exc
        key = (limit.cluster, limit.queue)
        if key in seen:
            raise InvalidInputError(
                "duplicate queue", source=source, field=f"{label}.queue", value=limit.queue
            )
        seen.add(key)
        by_system.setdefault(limit.cluster, []).append(partition)
    return by_system


def read_queue_limits(path: Path | str) -> dict[str, list[Partition]]:
    return parse_queue_limits(load_json(path), str(path))


def export_queue_limits(
    catalog: Catalog, systems: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The catalog's partition limits in the same format ``parse_queue_limits`` reads."""
    wanted = set(systems) if systems is not None else None
    return [
        QueueLimit(
            cluster=system.name,
            queue=p.name,
            minNodeCount=p.min_nodes,
            maxNodeCount=p.max_nodes,
            minCoresPerNode=p.min_cores_per_node,
            maxCoresPerNode=p.max_cores_per_node,
            minMemoryMB=p.min_memory_mb,
            maxMemoryMB=p.max_memory_mb,
            minMinutes=p.min_minutes,
            maxMinutes=p.max_minutes,
        ).model_dump()
        for system in catalog.systems
        if wanted is None or system.name in wanted
        for p in system.partitions
    ]
