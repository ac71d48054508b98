"""The center catalog: systems, their node types and partitions, and how they charge.

Every limit a plan must respect lives here. Numbers keep their provenance in
``sources`` (field name -> URL or file), because center data is patchy and a planner's
user deserves to know whether "32 GB of GPU memory" came from the center's own page
or from a third party's notes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from knowledge_base.errors import NotFoundError
from knowledge_base.units import parse_memory_mb

__all__ = [
    "Catalog",
    "ChargeBasis",
    "ChargePolicy",
    "GPUSpec",
    "MemoryMB",
    "NodeType",
    "Partition",
    "System",
]


def _memory(value: object) -> object:
    return None if value is None else parse_memory_mb(value, field="memory")


MemoryMB = Annotated[int, BeforeValidator(_memory), Field(ge=0)]
"""Memory in MB: an int of MB, or a string with its unit ("16 GB"); never negative."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GPUSpec(_Model):
    """One GPU model and the peaks the white-box estimators scale by."""

    model: str = Field(description="GPU model as the center names it, e.g. 'NVIDIA V100 32GB'")
    memory_mb: MemoryMB | None = Field(default=None, description="Device memory per GPU, MB")
    fp32_tflops: float | None = Field(default=None, ge=0, description="Peak FP32, TFLOP/s")
    fp16_tensor_tflops: float | None = Field(
        default=None, ge=0, description="Peak FP16 tensor-core, TFLOP/s (None: no tensor cores)"
    )
    memory_bandwidth_gbs: float | None = Field(
        default=None, ge=0, description="Peak memory bandwidth, GB/s"
    )
    sources: dict[str, str] = Field(default_factory=dict, description="field -> source")


class NodeType(_Model):
    """A kind of node in a system; partitions point at one by name."""

    name: str = Field(min_length=1)
    count: int | None = Field(default=None, ge=0, description="Nodes of this type (None: unknown)")
    cpu_model: str | None = None
    cores: int | None = Field(default=None, ge=1, description="CPU cores per node")
    memory_mb: MemoryMB | None = Field(default=None, description="Physical memory per node, MB")
    usable_memory_mb: MemoryMB | None = Field(
        default=None, description="Memory a job can use per node, MB"
    )
    gpus: int | None = Field(
        default=0, ge=0, description="GPUs per node (None: the node has GPUs, count unknown)"
    )
    gpu: GPUSpec | None = None
    local_disk: str | None = None
    notes: str = ""
    sources: dict[str, str] = Field(default_factory=dict, description="field -> source")

    @model_validator(mode="after")
    def _gpu_matches_count(self) -> Self:
        if (self.gpus is None or self.gpus > 0) and self.gpu is None:
            raise ValueError(f"node type {self.name!r}: gpus={self.gpus} but no gpu model given")
        return self


class ChargeBasis(StrEnum):
    """What a center bills per hour."""

    NODE_HOUR = "node-hour"  # TACC: whole nodes
    CORE_HOUR = "core-hour"  # OSC: cores (memory above the per-core share counts as cores)


class ChargePolicy(_Model):
    """How a partition turns a job into a charge, in the center's own unit.

    TACC: ``cost = nodes * max(hours, 0.25) * rate`` SU. OSC: core-hours, plus GPU-hours
    recorded on top. A dollar conversion is not a property of the center (none publishes
    one in our sources); planning applies it as a labelled, configurable assumption.
    """

    unit: str = Field(min_length=1, description="The charge's unit, e.g. 'SU' or 'core-hour'")
    basis: ChargeBasis
    rate: float = Field(ge=0, description="Units charged per basis-hour")
    gpu_hour_rate: float | None = Field(
        default=None, ge=0, description="GPU-hours recorded per GPU-hour (OSC), if billed"
    )
    min_charge_minutes: int = Field(default=0, ge=0, description="Shortest billed walltime")
    memory_billed_as_cores: bool = Field(
        default=False, description="OSC: memory above the per-core share is billed as cores"
    )
    multi_node_whole_nodes: bool = Field(
        default=False, description="OSC: a multi-node job is billed for its whole nodes"
    )
    source: str = ""


class Partition(_Model):
    """A queue with its limits: what a submission must satisfy to be accepted."""

    name: str = Field(min_length=1)
    queue_name: str | None = Field(
        default=None, description="The batch scheduler's name for it, when it differs (Tapis)"
    )
    node_type: str | None = Field(default=None, description="Name of the system's node type")
    min_nodes: int = Field(default=0, ge=0)
    max_nodes: int = Field(ge=1)
    min_cores_per_node: int = Field(default=1, ge=0)
    max_cores_per_node: int = Field(ge=1)
    min_memory_mb: MemoryMB = Field(default=0, description="Per node, MB")
    max_memory_mb: MemoryMB = Field(description="Per node, MB")
    min_minutes: int = Field(default=0, ge=0, description="Shortest walltime accepted")
    max_minutes: int = Field(ge=1, description="Longest walltime accepted")
    gpus_per_node: int = Field(default=0, ge=0)
    max_jobs_per_user: int | None = Field(default=None, ge=1)
    qos: str | None = None
    charge: ChargePolicy | None = None
    sources: dict[str, str] = Field(default_factory=dict, description="field -> source")

    @model_validator(mode="after")
    def _ranges_are_ordered(self) -> Self:
        for low, high in (
            ("min_nodes", "max_nodes"),
            ("min_cores_per_node", "max_cores_per_node"),
            ("min_memory_mb", "max_memory_mb"),
            ("min_minutes", "max_minutes"),
        ):
            low_value, high_value = getattr(self, low), getattr(self, high)
            if high_value < low_value:
                raise ValueError(
                    f"partition {self.name!r}: {high}={high_value} is below {low}={low_value}"
                )
        return self


class System(_Model):
    """One machine a center runs, with its batch scheduler's partitions."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    center: str = Field(min_length=1, description="e.g. 'OSC', 'TACC'")
    scheduler: str = "slurm"
    host: str | None = None
    default_partition: str | None = None
    max_jobs: int | None = Field(default=None, ge=1, description="Queued jobs, all users")
    max_jobs_per_user: int | None = Field(default=None, ge=1)
    node_types: list[NodeType] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)
    notes: str = ""
    sources: dict[str, str] = Field(default_factory=dict, description="field -> source")

    @model_validator(mode="after")
    def _names_resolve(self) -> Self:
        _require_unique([n.name for n in self.node_types], f"system {self.name!r}: node type")
        _require_unique([p.name for p in self.partitions], f"system {self.name!r}: partition")
        known = {n.name for n in self.node_types}
        for partition in self.partitions:
            if partition.node_type is not None and partition.node_type not in known:
                raise ValueError(
                    f"system {self.name!r}: partition {partition.name!r} runs on node type "
                    f"{partition.node_type!r}, which the system does not define "
                    f"(known: {sorted(known)})"
                )
        if self.default_partition is not None and self.default_partition not in {
            p.name for p in self.partitions
        }:
            raise ValueError(
                f"system {self.name!r}: default_partition {self.default_partition!r} "
                "is not one of its partitions"
            )
        return self

    def partition(self, name: str) -> Partition:
        for partition in self.partitions:
            if partition.name == name:
                return partition
        raise NotFoundError(
            f"system {self.name!r} has no partition {name!r} "
            f"(known: {', '.join(p.name for p in self.partitions)})"
        )

    def node_type_of(self, partition: Partition) -> NodeType | None:
        for node_type in self.node_types:
            if node_type.name == partition.node_type:
                return node_type
        return None


class Catalog(_Model):
    """Every system a center (or several centers) offers."""

    systems: list[System] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_systems(self) -> Self:
        _require_unique([s.name for s in self.systems], "system")
        return self

    def system(self, name: str) -> System:
        for system in self.systems:
            if system.name == name:
                return system
        raise NotFoundError(
            f"no system {name!r} in the catalog (known: {', '.join(self.names()) or 'none'})"
        )

    def names(self) -> list[str]:
        return [s.name for s in self.systems]

    def with_system(self, system: System) -> Catalog:
        """A copy with ``system`` added, or replacing the one of the same name."""
        others = [s for s in self.systems if s.name != system.name]
        return Catalog(systems=sorted([*others, system], key=lambda s: s.name))


def _require_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}")
        seen.add(name)
