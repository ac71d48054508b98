"""The seeded center catalog that ships with Rightsize, and how it is built.

Built from three public sources in ``shared/data/centers`` (see its README):

- ``queue_limits.json`` (iScheduler, Apache-2.0): the 119 queues of OSC Pitzer, Owens,
  Ascend and TACC Frontera, Stampede2, Lonestar6 with their node, core, memory and
  minute limits;
- ``hardware.json``: node types, GPU peaks and charge rates, each with its source URL;
- the curation below: which node type each queue runs on. No source states it; the
  rules follow the queue names and limits and each partition records the rule it got.

``catalog.json`` beside this file is the built result, committed so an installed
package needs no data files; a test rebuilds it and fails if the two drift. Rebuild with
``python -m knowledge_base.seed --data ../shared/data/centers``.

Costs stay in each center's own unit: TACC SUs per node-hour (whole nodes, 15-minute
minimum), OSC core-hours (memory above the per-core share billed as cores, multi-node
jobs billed for whole nodes, GPU-hours recorded on top). Stampede3 and Cardinal are in
``hardware.json`` but not in ``queue_limits.json``; they are not seeded, so the seed is
exactly the 119 queues with limits from one consistent source (``rightsize catalog
import hardware`` adds Stampede3 from its TACC queue table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from knowledge_base.catalog import Catalog, ChargeBasis, ChargePolicy, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers.hardware import HardwareFile, HardwareSystem, read_hardware
from knowledge_base.importers.queue_limits import read_queue_limits

__all__ = ["SEEDED_SYSTEMS", "build_seed_catalog", "load_seed_catalog", "system_from_hardware"]

SEEDED_SYSTEMS = ("ascend", "frontera", "lonestar6", "owens", "pitzer", "stampede2")

OSC_CHARGING_URL = "https://www.osc.edu/supercomputing/knowledge-base/job_and_storage_charging"

HOSTS = {
    "pitzer": "pitzer.osc.edu",  # tapis_systems/osc-pitzer.json
    "frontera": "frontera.tacc.utexas.edu",  # tapis_systems/tacc-frontera.json
    "stampede2": "stampede2.tacc.utexas.edu",  # tapis_systems/tacc-stampede2.json
}

# (system, node type) -> the row of hardware.json's GPU table whose peaks apply.
GPU_MODELS = {
    ("pitzer", "skylake-40core-dual-gpu"): "V100 PCIe",
    ("pitzer", "cascadelake-48core-dual-gpu"): "V100 PCIe",
    ("pitzer", "quad-gpu-48core"): "V100 SXM2 (16/32GB HBM2)",  # NVLink per third party
    ("owens", "gpu"): "P100 PCIe 16GB (Owens)",
    ("ascend", "quad-gpu (original)"): "A100 SXM4 80GB (Ascend original nodes)",
    ("ascend", "nextgen (expansion late 2024-2025)"): "A100 PCIe 40GB (Lonestar6)",
    ("frontera", "rtx (GPU)"): "Quadro RTX 5000 (Frontera rtx)",
    ("lonestar6", "gpu-a100"): "A100 PCIe 40GB (Lonestar6)",
    ("lonestar6", "gpu-h100"): "H100 PCIe 80GB (Lonestar6)",
    ("stampede3", "h100"): "H100 SXM5 80GB",
    ("stampede3", "pvc"): "Intel Data Center GPU Max 1550 (Stampede3 pvc)",
    ("cardinal", "gpu (Dell PowerEdge XE9640)"): "H100 SXM5 80GB",
}


@dataclass(frozen=True)
class Rule:
    """Queues whose name matches ``pattern`` run on ``node_type``."""

    pattern: str
    node_type: str
    why: str


# First match wins. Pitzer's generic queues (serial, parallel, batch...) span both its
# 40- and 48-core node generations; they are planned on the 48-core node, the one their
# 48-core limit admits.
RULES: dict[str, list[Rule]] = {
    "pitzer": [
        Rule(r"hugemem", "huge-memory", "name says hugemem"),
        Rule(r"largemem", "large-memory", "name says largemem"),
        Rule(r"quad", "quad-gpu-48core", "name says quad (4 GPUs)"),
        Rule(r"gpu.*40core", "skylake-40core-dual-gpu", "GPU queue on 40-core nodes"),
        Rule(r"gpu", "cascadelake-48core-dual-gpu", "GPU queue, 48-core (or mixed) nodes"),
        Rule(
            r"40core|PYS1122|ccapp|tarnovsky|longserial",
            "skylake-40core-regular",
            "40-core CPU queue (max 40 cores per node)",
        ),
        Rule(r".*", "cascadelake-48core-regular", "CPU queue admitting 48 cores per node"),
    ],
    "owens": [
        Rule(r"hugemem", "huge-memory", "name says hugemem"),
        Rule(r"gpu", "gpu", "GPU queue"),
        Rule(r".*", "regular", "CPU queue"),
    ],
    "ascend": [
        # queue_limits' memory limits (~915 GB) match the original quad-GPU nodes only.
        Rule(r".*", "quad-gpu (original)", "limits match the 88-core quad-A100 nodes"),
    ],
    "frontera": [
        Rule(r"^rtx", "rtx (GPU)", "name says rtx"),
        Rule(r"nvdimm", "large-memory (nvdimm)", "name says nvdimm"),
        Rule(r".*", "CLX", "CPU queue on Cascade Lake nodes"),
    ],
    "stampede2": [
        Rule(r"^skx", "skx", "name says skx"),
        Rule(r"^icx", "icx", "name says icx"),
        Rule(r".*", "knl", "KNL queue"),
    ],
    "lonestar6": [
        Rule(r"gpu-a100", "gpu-a100", "name says gpu-a100"),
        Rule(r"gpu-h100", "gpu-h100", "name says gpu-h100"),
        Rule(r"vm-small", "vm-small (VM)", "name says vm-small"),
        Rule(r".*", "compute", "CPU queue"),
    ],
}


def node_types_from_hardware(
    system: HardwareSystem, hardware: HardwareFile, source: str
) -> list[NodeType]:
    """The system's node types with GPU peaks from the file's GPU table."""
    node_types = []
    for row in system.node_types:
        gpu = None
        if row.gpu_model is not None:
            key = GPU_MODELS.get((system.name, row.name))
            if key is None:
                raise InvalidInputError(
                    "GPU node type has no entry in the seed's GPU_MODELS table",
                    source=source,
                    field=f"{system.name}.node_types",
                    value=row.name,
                )
            gpu = hardware.gpu(key, source).spec(row.gpu_memory_gb, row.gpu_model)
        node_types.append(row.node_type(gpu))
    return node_types


def osc_charge(gpus: bool) -> ChargePolicy:
    """OSC bills core-hours (and GPU-hours for GPU jobs); no current dollar rate is public."""
    return ChargePolicy(
        unit="core-hour",
        basis=ChargeBasis.CORE_HOUR,
        rate=1.0,
        gpu_hour_rate=1.0 if gpus else None,
        memory_billed_as_cores=True,
        multi_node_whole_nodes=True,
        source=OSC_CHARGING_URL,
    )


def _curate(system: HardwareSystem, partition: Partition, node_types: list[NodeType]) -> Partition:
    rule = next(r for r in RULES[system.name] if re.search(r.pattern, partition.name))
    node_type = next(n for n in node_types if n.name == rule.node_type)
    cpu_only = "cpuonly" in partition.name
    gpus = 0 if cpu_only or node_type.gpus is None else node_type.gpus
    if system.center == "TACC":
        published = next((q for q in system.queues if q.name == partition.name), None)
        charge = published.tacc_charge() if published is not None else None
    else:
        charge = osc_charge(gpus=gpus > 0)
    return partition.model_copy(
        update={
            "node_type": node_type.name,
            "gpus_per_node": gpus,
            "charge": charge,
            "sources": {
                **partition.sources,
                "node_type": f"rightsize seed rule: {rule.why}",
                **({"charge": charge.source} if charge is not None else {}),
            },
        }
    )


def build_seed_catalog(data_dir: Path | str) -> Catalog:
    """The seeded catalog from ``queue_limits.json`` and ``hardware.json`` in ``data_dir``."""
    data = Path(data_dir)
    hardware_path = data / "hardware.json"
    hardware = read_hardware(hardware_path)
    queues = read_queue_limits(data / "queue_limits.json")
    systems = []
    for name in SEEDED_SYSTEMS:
        facts = hardware.system(name, str(hardware_path))
        node_types = node_types_from_hardware(facts, hardware, str(hardware_path))
        partitions = [_curate(facts, p, node_types) for p in queues[name]]
        systems.append(
            System(
                name=name,
                center=facts.center,
                host=HOSTS.get(name),
                node_types=node_types,
                partitions=partitions,
                notes=facts.charging_notes,
                sources={"hardware": "; ".join(facts.sources)},
            )
        )
    return Catalog(systems=systems)


def system_from_hardware(hardware: HardwareFile, name: str, source: str) -> System:
    """A system from the hardware file alone: its node types and its published queue table.

    Used for systems with no queue-limit documents (Stampede3). The queue table gives
    walltime and node limits only; cores and memory per node come from the node type.
    """
    facts = hardware.system(name, source)
    node_types = node_types_from_hardware(facts, hardware, source)
    by_name = {n.name: n for n in node_types}
    partitions = []
    for queue in facts.queues:
        node_type = by_name.get(queue.node_type or "")
        if node_type is None or queue.max_minutes is None or queue.max_nodes is None:
            raise InvalidInputError(
                "queue lacks a known node type, max_minutes or max_nodes; cannot plan on it",
                source=source,
                field=f"{name}.queues",
                value=queue.name,
            )
        charge = queue.tacc_charge() if facts.center == "TACC" else osc_charge(node_type.gpus != 0)
        partitions.append(
            Partition(
                name=queue.name,
                node_type=node_type.name,
                min_nodes=queue.min_nodes or 1,
                max_nodes=queue.max_nodes,
                min_cores_per_node=1,
                max_cores_per_node=node_type.cores or 1,
                max_memory_mb=node_type.usable_memory_mb or node_type.memory_mb or 0,
                min_minutes=0,
                max_minutes=queue.max_minutes,
                gpus_per_node=node_type.gpus or 0,
                charge=charge,
                sources={"limits": Path(source).name, "memory, cores": "node type"},
            )
        )
    if not partitions:
        raise InvalidInputError(
            "the hardware file lists no queues for this system; nothing to plan on",
            source=source,
            field="systems",
            value=name,
        )
    return System(
        name=name,
        center=facts.center,
        node_types=node_types,
        partitions=partitions,
        notes=facts.charging_notes,
        sources={"hardware": "; ".join(facts.sources)},
    )


def seed_path() -> Path:
    return Path(str(resources.files("knowledge_base.seed").joinpath("catalog.json")))


def load_seed_catalog() -> Catalog:
    """The catalog shipped with the package."""
    return Catalog.model_validate_json(seed_path().read_text(encoding="utf-8"))
