"""Does a request fit its partition? Checked before anything is submitted.

``violations`` is a pure function (planning reuses it to explain infeasible options);
``check_request`` raises ``RequestRejected`` naming every limit the request breaks.
"""

from __future__ import annotations

from knowledge_base.catalog import System
from knowledge_base.errors import NotFoundError
from tools.actuators.model import JobRequest, RequestRejected

__all__ = ["check_request", "violations"]


def violations(request: JobRequest, system: System) -> list[str]:
    """Every way ``request`` breaks ``system``'s limits, as sentences; empty if it fits."""
    try:
        partition = system.partition(request.partition)
    except NotFoundError as exc:
        return [str(exc)]
    name = f"{system.name}/{partition.name}"
    found = []
    if not partition.min_nodes <= request.nodes <= partition.max_nodes:
        found.append(
            f"{request.nodes} nodes is outside {name}'s {partition.min_nodes}-"
            f"{partition.max_nodes} (min_nodes/max_nodes)"
        )
    node_type = system.node_type_of(partition)
    max_cores = partition.max_cores_per_node
    if node_type is not None and node_type.cores is not None:
        max_cores = min(max_cores, node_type.cores)
    if request.cores_per_node > max_cores:
        found.append(
            f"{request.cores_per_node} cores per node exceeds {name}'s {max_cores} "
            "(max_cores_per_node)"
        )
    if request.memory_mb > partition.max_memory_mb:
        found.append(
            f"{request.memory_mb} MB per node exceeds {name}'s {partition.max_memory_mb} MB "
            "(max_memory_mb)"
        )
    minutes = request.walltime_minutes
    if minutes > partition.max_minutes:
        found.append(
            f"walltime {minutes} min exceeds {name}'s {partition.max_minutes} min (max_minutes)"
        )
    if minutes < partition.min_minutes:
        found.append(
            f"walltime {minutes} min is below {name}'s {partition.min_minutes} min (min_minutes)"
        )
    if request.gpus_per_node > partition.gpus_per_node:
        found.append(
            f"{request.gpus_per_node} GPUs per node exceeds {name}'s "
            f"{partition.gpus_per_node} (gpus_per_node)"
        )
    return found


def check_request(request: JobRequest, system: System) -> None:
    """Raise RequestRejected listing every limit broken; return quietly if it fits."""
    broken = violations(request, system)
    if broken:
        raise RequestRejected(
            f"job {request.name!r} refused before submission: {'; '.join(broken)}",
            field="partition",
            value=request.partition,
        )
