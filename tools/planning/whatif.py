"""The what-if analyzer: every option a workload allows, estimated, built, or explained.

Options are (system, partition, node type, nodes, cores per node, GPUs per node, batch
size). For DNN training: GPU counts 1, 2, 4... up to the partition's GPUs per node,
nodes 1, 2, 4... up to ``workload.max_nodes`` (and the partition's minimum), every batch
size the user listed, all of a CPU node's cores. For a generic job: the nodes, cores and
GPUs the user asked for, laid out on each partition's nodes. Goals narrow the systems
and partitions (``goals.systems``, ``goals.partitions``, ``goals.exclude_partitions``) and
the device kind (``gpu_only``/``cpu_only``). Every option in scope that cannot run is
kept with its reason; nothing is dropped silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining, GenericJob, Goals, WorkloadSpec
from tools.planning.analytic import AnalyticDNNEstimator
from tools.planning.builder import BuildContext, build_plan
from tools.planning.estimation import Candidate, Estimator, NoEstimate, estimate_first
from tools.planning.generic import GuessFallbackEstimator, large_memory_reason
from tools.planning.model_files import check_model_file
from tools.planning.results import Infeasible, PlannedOption
from tools.planning.zoo import check_input_shape

__all__ = ["WhatIf", "default_estimators", "enumerate_candidates", "what_if"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Feasible plans (unordered) and infeasible options (with reasons)."""

    feasible: list[PlannedOption]
    infeasible: list[Infeasible]


def default_estimators(spec: WorkloadSpec) -> list[Estimator]:
    """The fallbacks: analytic for DNN training, the user's guess for generic jobs."""
    if isinstance(spec.workload, DNNTraining):
        return [AnalyticDNNEstimator()]
    return [GuessFallbackEstimator()]


def _systems(spec: WorkloadSpec, catalog: Catalog) -> list[System]:
    wanted = spec.goals.systems
    if wanted is None:
        return list(catalog.systems)
    known = set(catalog.names())
    for index, name in enumerate(wanted):
        if name not in known:
            raise InvalidInputError(
                f"no system {name!r} in the catalog (known: {', '.join(sorted(known))})",
                field=f"goals.systems[{index}]",
                value=name,
            )
    return [catalog.system(name) for name in wanted]


def _rejected(
    system: System,
    partition: Partition,
    node_type: NodeType | None,
    constraint: str,
    reason: str,
    shortfall: float | None = None,
    **shape: int | None,
) -> Infeasible:
    return Infeasible(
        system=system.name,
        partition=partition.name,
        node_type=node_type.name if node_type is not None else None,
        constraint=constraint,
        reason=reason,
        shortfall=shortfall,
        **shape,
    )


def _powers_up_to(limit: int) -> list[int]:
    values = {1, limit}
    value = 2
    while value < limit:
        values.add(value)
        value *= 2
    return sorted(v for v in values if v >= 1)


def _node_cores(partition: Partition, node_type: NodeType) -> int:
    return min(partition.max_cores_per_node, node_type.cores or partition.max_cores_per_node)


def _dnn_candidates(
    workload: DNNTraining, system: System, partition: Partition, node_type: NodeType
) -> Iterator[Candidate | Infeasible]:
    low = max(partition.min_nodes, 1)
    node_counts = [n for n in _powers_up_to(workload.max_nodes) if low <= n <= partition.max_nodes]
    if low <= min(workload.max_nodes, partition.max_nodes) and low not in node_counts:
        node_counts.insert(0, low)
    if not node_counts:
        yield _rejected(
            system,
            partition,
            node_type,
            "nodes",
            f"{system.name}/{partition.name} needs at least {low} nodes; the workload runs "
            f"on at most {workload.max_nodes} (workload.max_nodes)",
            low / workload.max_nodes - 1,
        )
        return
    node_cores = _node_cores(partition, node_type)
    gpu_counts = _powers_up_to(partition.gpus_per_node) if partition.gpus_per_node else [0]
    node_gpus = node_type.gpus or partition.gpus_per_node
    for nodes in node_counts:
        for gpus in gpu_counts:
            if gpus:
                share = math.ceil(node_cores * gpus / max(node_gpus, 1))
                cores = min(max(share, partition.min_cores_per_node, 1), node_cores)
            else:
                cores = node_cores
            for batch in workload.batch_sizes:
                if nodes * max(gpus, 1) > batch:
                    continue  # fewer than one sample per device: never a sensible plan
                yield Candidate(system, partition, node_type, nodes, cores, gpus, batch)


def _generic_candidates(
    workload: GenericJob, system: System, partition: Partition, node_type: NodeType
) -> Iterator[Candidate | Infeasible]:
    node_cores = _node_cores(partition, node_type)
    # Whole ranks per node, as srun lays them out: tasks x cpus_per_task cores each node.
    tasks, per_task = workload.total_tasks, workload.cpus_per_task
    nodes = workload.nodes
    if nodes is None:
        fit = max(node_cores // per_task, 1)
        nodes = math.ceil(tasks / fit) if (workload.tasks or workload.cores) else 1
        if workload.gpus and partition.gpus_per_node:
            nodes = max(nodes, math.ceil(workload.gpus / partition.gpus_per_node))
    cores = math.ceil(tasks / nodes) * per_task if (workload.tasks or workload.cores) else 1
    gpus = math.ceil(workload.gpus / nodes) if workload.gpus else 0
    shape: dict[str, int | None] = {"nodes": nodes, "gpus_per_node": gpus}
    where = f"{system.name}/{partition.name}"
    low = max(partition.min_nodes, 1)
    if not low <= nodes <= partition.max_nodes:
        yield _rejected(
            system,
            partition,
            node_type,
            "nodes",
            f"{nodes} nodes is outside {where}'s {low}-{partition.max_nodes}",
            (nodes / partition.max_nodes - 1) if nodes > partition.max_nodes else None,
            **shape,
        )
        return
    if cores > node_cores:
        yield _rejected(
            system,
            partition,
            node_type,
            "cores",
            f"needs {cores} cores per node; {where} allows {node_cores}",
            cores / node_cores - 1,
            **shape,
        )
        return
    if gpus > partition.gpus_per_node:
        yield _rejected(
            system,
            partition,
            node_type,
            "gpus",
            f"needs {gpus} GPUs per node; {where} has {partition.gpus_per_node}",
            (gpus / partition.gpus_per_node - 1) if partition.gpus_per_node else None,
            **shape,
        )
        return
    if partition.gpus_per_node and not gpus:
        yield _rejected(
            system,
            partition,
            node_type,
            "gpus",
            f"{where} is a GPU partition and the job asks for no GPUs (workload.gpus)",
            **shape,
        )
        return
    large = large_memory_reason(workload, system, partition, node_type, max(cores, 1))
    if large is not None:
        yield _rejected(system, partition, node_type, "memory", large, **shape)
        return
    yield Candidate(system, partition, node_type, nodes, max(cores, 1), gpus, None)


def _in_scope(partition: Partition, goals: Goals) -> bool:
    """Whether the goals' partition filters admit ``partition`` (out of scope: not listed)."""
    if goals.partitions is not None and not any(
        fnmatchcase(partition.name, pattern) for pattern in goals.partitions
    ):
        return False
    return not any(fnmatchcase(partition.name, pattern) for pattern in goals.exclude_partitions)


def enumerate_candidates(spec: WorkloadSpec, catalog: Catalog) -> Iterator[Candidate | Infeasible]:
    """Every candidate the workload allows, and a reason for each partition it cannot use.

    ``goals.systems``, ``goals.partitions`` and ``goals.exclude_partitions`` set the scope:
    what they leave out is not an option at all. ``gpu_only``/``cpu_only`` are constraints:
    what they rule out is listed with that reason.
    """
    workload, goals = spec.workload, spec.goals
    for system in _systems(spec, catalog):
        for partition in system.partitions:
            if not _in_scope(partition, goals):
                continue
            node_type = system.node_type_of(partition)
            if node_type is None:
                yield _rejected(
                    system,
                    partition,
                    None,
                    "catalog",
                    f"{system.name}/{partition.name} names no node type in the catalog; "
                    "nothing to estimate on",
                )
                continue
            if goals.gpu_only and not partition.gpus_per_node:
                yield _rejected(
                    system, partition, node_type, "goals", "no GPUs, and goals.gpu_only is set"
                )
                continue
            if goals.cpu_only and partition.gpus_per_node:
                yield _rejected(
                    system, partition, node_type, "goals", "a GPU partition, and goals.cpu_only"
                )
                continue
            if isinstance(workload, DNNTraining):
                yield from _dnn_candidates(workload, system, partition, node_type)
            else:
                yield from _generic_candidates(workload, system, partition, node_type)


def what_if(
    spec: WorkloadSpec,
    catalog: Catalog,
    context: BuildContext,
    estimators: Sequence[Estimator] | None = None,
) -> WhatIf:
    """Estimate and build every candidate; feasible plans and infeasible options with reasons."""
    for field, value in (("name", spec.name), ("account", spec.account or "")):
        if _CONTROL.search(value):  # they would end a directive line of the batch script
            raise InvalidInputError("control characters are not allowed", field=field, value=value)
    if isinstance(spec.workload, DNNTraining):
        check_model_file(spec.workload)  # an untraceable file is bad input, not N "no estimate"s
        if spec.workload.model_class is None:
            check_input_shape(spec.workload.model, spec.workload.input_shape)
    chain = list(estimators) if estimators is not None else default_estimators(spec)
    feasible: list[PlannedOption] = []
    rejected: list[Infeasible] = []
    for candidate in enumerate_candidates(spec, catalog):
        if isinstance(candidate, Infeasible):
            rejected.append(candidate)
            continue
        estimate = estimate_first(chain, spec.workload, candidate)
        if isinstance(estimate, NoEstimate):
            rejected.append(
                Infeasible(
                    system=candidate.system.name,
                    partition=candidate.partition.name,
                    node_type=candidate.node_type.name,
                    nodes=candidate.nodes,
                    gpus_per_node=candidate.gpus_per_node,
                    batch_size=candidate.batch_size,
                    constraint="estimator",
                    reason=estimate.reason,
                )
            )
            continue
        built = build_plan(candidate, estimate, context)
        if isinstance(built, Infeasible):
            rejected.append(built)
        else:
            feasible.append(built)
    return WhatIf(feasible, rejected)
