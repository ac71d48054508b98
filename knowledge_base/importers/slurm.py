"""A live SLURM cluster to a catalog system: partitions, node types, GPUs, limits.

The importer reads what the cluster answered; it runs no command (the actuator does:
``tools.actuators.slurm_catalog.import_slurm_system`` asks and hands the answers here).
SLURM 23.02+ answers ``scontrol show partition --json`` and ``scontrol show node
--json``; older releases (Debian 12 ships 22.05) reject ``--json`` on scontrol and
list only nodes in ``sinfo --json``; ``scontrol show ... --oneliner`` text is read too,
so every release a center runs is understood. JSON
layouts differ too: 22.05's (``max_time_limit``, ``"min nodes per job"``) and 23.02+'s
(``maximums.time`` as ``{"set", "infinite", "number"}``) are both understood.

Node types are the distinct (cpus, memory, GPUs) shapes among the nodes; a partition
runs on the shape most of its nodes have.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from knowledge_base.catalog import GPUSpec, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers._errors import invalid
from knowledge_base.units import parse_duration_s

__all__ = [
    "SlurmNode",
    "SlurmPartition",
    "parse_nodes_json",
    "parse_nodes_text",
    "parse_partitions_json",
    "parse_partitions_text",
    "system_from_slurm",
]

UNLIMITED_MINUTES = 366 * 24 * 60
"""What a MaxTime=UNLIMITED partition is recorded as (the catalog needs a number)."""


@dataclass(frozen=True)
class SlurmPartition:
    name: str
    max_minutes: int | None  # None: UNLIMITED
    min_nodes: int
    max_nodes: int | None  # None: UNLIMITED
    max_cpus_per_node: int | None
    max_memory_per_node_mb: int | None
    max_memory_per_cpu_mb: int | None
    default: bool


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    real_memory_mb: int
    gpus: int
    gpu_model: str | None
    partitions: tuple[str, ...] = field(default_factory=tuple)


# -- JSON -------------------------------------------------------------------------------


def _number(value: Any) -> int | None:
    """A SLURM JSON number: plain (22.05) or {"set", "infinite", "number"} (23.02+)."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    number = int(value)
    return None if number < 0 or number >= 0xFFFFFFFE else number  # -1 / NO_VAL: unlimited


def _dig(doc: dict[str, Any], *paths: str) -> Any:
    for path in paths:
        node: Any = doc
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return node
    return None


def parse_partitions_json(text: str, source: str) -> list[SlurmPartition]:
    doc = _load(text, source)
    partitions = []
    for index, p in enumerate(doc.get("partitions", [])):
        name = p.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInputError(
                "partition without a name", source=source, field=f"partitions[{index}].name"
            )
        flags = p.get("flags") or _dig(p, "partition.state") or []
        partitions.append(
            SlurmPartition(
                name=name,
                max_minutes=_number(_dig(p, "max_time_limit", "maximums.time")),
                min_nodes=_number(_dig(p, "min nodes per job", "minimums.nodes")) or 0,
                max_nodes=_number(_dig(p, "maximum_nodes_per_job", "maximums.nodes")),
                max_cpus_per_node=_number(
                    _dig(p, "maximum_cpus_per_node", "maximums.cpus_per_node")
                ),
                max_memory_per_node_mb=_number(
                    _dig(
                        p,
                        "maximum_memory_per_node",
                        "maximums.partition_memory_per_node",
                        "maximums.memory_per_node",
                    )
                ),
                max_memory_per_cpu_mb=_number(
                    _dig(
                        p,
                        "maximum_memory_per_cpu",
                        "maximums.partition_memory_per_cpu",
                        "maximums.memory_per_cpu",
                    )
                ),
                default="default" in [str(f).lower() for f in flags]
                or bool(_dig(p, "partition.default")),
            )
        )
    return partitions


def parse_nodes_json(text: str, source: str) -> list[SlurmNode]:
    doc = _load(text, source)
    nodes = []
    for index, n in enumerate(doc.get("nodes", [])):
        try:
            name, cpus, memory = str(n["name"]), int(n["cpus"]), int(n["real_memory"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"node lacks name, cpus or real_memory ({exc})",
                source=source,
                field=f"nodes[{index}]",
            ) from exc
        gpus, model = _parse_gres(str(n.get("gres") or ""))
        nodes.append(SlurmNode(name, cpus, memory, gpus, model, tuple(n.get("partitions") or ())))
    return nodes


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", source=source
        ) from exc
    if not isinstance(doc, dict):
        raise InvalidInputError("expected a JSON object", source=source)
    return doc


# -- text (scontrol --oneliner) -----------------------------------------------------------

_PAIR = re.compile(r"(\S+?)=(\S*)")


def _records(text: str) -> list[dict[str, str]]:
    # --oneliner gives one record per line; the multi-line form separates records by a
    # blank line. Both parse the same once records are joined.
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    if (
        len(blocks) == 1
        and "\n" in blocks[0]
        and blocks[0].count("PartitionName=") + blocks[0].count("NodeName=") > 1
    ):
        blocks = blocks[0].splitlines()
    return [dict(_PAIR.findall(" ".join(block.split()))) for block in blocks]


def _text_number(value: str | None) -> int | None:
    if value is None or value.upper() in ("UNLIMITED", "NONE", "N/A", "(NULL)", ""):
        return None
    return int(value)


def parse_partitions_text(text: str, source: str) -> list[SlurmPartition]:
    partitions = []
    for record in _records(text):
        name = record.get("PartitionName")
        if not name:
            continue
        max_time = record.get("MaxTime", "UNLIMITED")
        try:
            minutes = (
                None
                if max_time.upper() in ("UNLIMITED", "INFINITE")
                else parse_duration_s(max_time, field=f"{name}.MaxTime") // 60
            )
            partitions.append(
                SlurmPartition(
                    name=name,
                    max_minutes=minutes,
                    min_nodes=_text_number(record.get("MinNodes")) or 0,
                    max_nodes=_text_number(record.get("MaxNodes")),
                    max_cpus_per_node=_text_number(record.get("MaxCPUsPerNode")),
                    max_memory_per_node_mb=_text_number(record.get("MaxMemPerNode")),
                    max_memory_per_cpu_mb=_text_number(record.get("MaxMemPerCPU")),
                    default=record.get("Default", "NO").upper() == "YES",
                )
            )
        except ValueError as exc:
            raise InvalidInputError(str(exc), source=source, field=name) from exc
    return partitions


def parse_nodes_text(text: str, source: str) -> list[SlurmNode]:
    nodes = []
    for record in _records(text):
        name = record.get("NodeName")
        if not name:
            continue
        try:
            cpus = int(record.get("CPUTot") or record["CPUEfctv"])
            memory = int(record["RealMemory"])
        except (KeyError, ValueError) as exc:
            raise InvalidInputError(
                f"node lacks CPUTot or RealMemory ({exc})", source=source, field=name
            ) from exc
        gpus, model = _parse_gres(record.get("Gres", ""))
        partitions = tuple(p for p in record.get("Partitions", "").split(",") if p)
        nodes.append(SlurmNode(name, cpus, memory, gpus, model, partitions))
    return nodes


_GRES_GPU = re.compile(r"gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")


def _parse_gres(gres: str) -> tuple[int, str | None]:
    """GPUs and model from a gres string such as 'gpu:a100:4(S:0-1),shard:8'."""
    total, model = 0, None
    for match in _GRES_GPU.finditer(gres):
        total += int(match.group(2))
        model = model or match.group(1)
    return total, model


# -- building the system ----------------------------------------------------------------


def _shape_name(node: SlurmNode) -> str:
    gpu = f"-{node.gpus}x{node.gpu_model or 'gpu'}" if node.gpus else ""
    return f"c{node.cpus}-m{node.real_memory_mb}{gpu}"


def system_from_slurm(
    name: str,
    center: str,
    partitions: list[SlurmPartition],
    nodes: list[SlurmNode],
    source: str,
) -> System:
    """The catalog system these partitions and nodes describe."""
    shapes: dict[str, NodeType] = {}
    counts: Counter[str] = Counter()
    for node in nodes:
        shape = _shape_name(node)
        counts[shape] += 1
        shapes[shape] = NodeType(
            name=shape,
            count=counts[shape],
            cores=node.cpus,
            memory_mb=node.real_memory_mb,
            usable_memory_mb=node.real_memory_mb,
            gpus=node.gpus,
            gpu=GPUSpec(model=node.gpu_model or "gpu") if node.gpus else None,
            sources={"hardware": source},
        )
    built = []
    for p in partitions:
        members = [n for n in nodes if p.name in n.partitions]
        if not members:
            raise InvalidInputError(
                "partition has no nodes; cannot tell its hardware", source=source, field=p.name
            )
        shape = Counter(_shape_name(n) for n in members).most_common(1)[0][0]
        node_type = shapes[shape]
        cores = node_type.cores or 1
        memory = p.max_memory_per_node_mb
        if memory is None and p.max_memory_per_cpu_mb is not None:
            memory = p.max_memory_per_cpu_mb * cores
        limits_note = source + (
            "; MaxTime=UNLIMITED recorded as 366 days" if p.max_minutes is None else ""
        )
        try:
            built.append(
                Partition(
                    name=p.name,
                    node_type=shape,
                    min_nodes=p.min_nodes,
                    max_nodes=p.max_nodes or len(members),
                    max_cores_per_node=min(p.max_cpus_per_node or cores, cores),
                    max_memory_mb=min(memory or node_type.memory_mb or 0, node_type.memory_mb or 0),
                    max_minutes=p.max_minutes or UNLIMITED_MINUTES,
                    gpus_per_node=node_type.gpus or 0,
                    sources={"limits": limits_note},
                )
            )
        except ValidationError as exc:
            raise invalid(exc, source, prefix=p.name) from exc
    default = next((p.name for p in partitions if p.default), None)
    return System(
        name=name,
        center=center,
        node_types=sorted(shapes.values(), key=lambda n: n.name),
        partitions=built,
        default_partition=default,
        sources={"partitions": source},
    )
