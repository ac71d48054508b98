"""The plan builder: one estimated option to a request every policy limit accepts, or a reason.

For each candidate and its estimate, in order:

1. GPU memory: the point estimate per GPU must fit the GPU (the reason names both sizes).
2. Host memory: the point estimate must fit the node; the request is the upper estimate
   or the point x ``memory_headroom``, whichever is more, rounded up to whole GB and
   capped at what the node and partition allow.
3. Walltime: the upper run-time estimate x ``safety_factor``, in whole minutes, at least
   the partition's minimum. Past the partition's maximum, a workload that checkpoints
   runs as a cascade (``tools.planning.cascade``); one that cannot is infeasible.
4. Jobs per user, from the queue snapshot when there is one.
5. Every job of the plan is checked with ``tools.actuators.policy.violations``, the same
   check an executor makes before submitting; nothing that check refuses is emitted.
6. Charges (``tools.planning.cost``) and the expected wait (``tools.planning.queue``):
   each segment of a cascade is charged on its own and queues on its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import PlanOption, ResourceEstimate
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.actuators.model import JobRequest
from tools.actuators.policy import violations
from tools.planning.cascade import Segment, cascade_length, split_run
from tools.planning.cost import DollarRates, chain_charge, dollars
from tools.planning.estimation import Candidate
from tools.planning.queue import Availability, QueueModel
from tools.planning.results import Infeasible, PlannedOption

__all__ = [
    "BuildContext",
    "PlanningConfig",
    "build_plan",
    "gpu_memory_bound",
    "infeasible",
    "job_request",
]

_GB = 1024


class PlanningConfig(BaseModel):
    """The builder's margins; the defaults are what the CLI uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    safety_factor: float = Field(default=1.1, ge=1, description="Walltime over the upper estimate")
    memory_headroom: float = Field(default=1.2, ge=1, description="Memory over the point estimate")
    checkpoint_overhead_s: int = Field(
        default=300, ge=0, description="Per cascade segment: start, load and save a checkpoint"
    )
    max_segments: int = Field(default=100, ge=1, description="Longest cascade worth proposing")
    gpu_efficiency: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="An added GPU must speed the run by this share of its own (0: no limit)",
    )


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What every option of one what-if shares."""

    spec: WorkloadSpec
    config: PlanningConfig
    rates: DollarRates
    queue: QueueModel | None = None


def infeasible(
    candidate: Candidate, constraint: str, reason: str, shortfall: float | None = None
) -> Infeasible:
    return Infeasible(
        system=candidate.system.name,
        partition=candidate.partition.name,
        node_type=candidate.node_type.name,
        nodes=candidate.nodes,
        gpus_per_node=candidate.gpus_per_node,
        batch_size=candidate.batch_size,
        constraint=constraint,
        reason=reason,
        shortfall=shortfall,
    )


def _gb(mb: float) -> str:
    return f"{mb / _GB:.1f} GB" if mb < 10 * _GB else f"{mb / _GB:.0f} GB"


def _hours(seconds: float) -> str:
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 100 * 3600 else f"{seconds / 3600:.0f} h"


def job_request(
    spec: WorkloadSpec, option: PlanOption, qos: str | None, walltime_s: int, command: str = "true"
) -> JobRequest:
    """The batch request for one job of ``option`` (the check and the renderers share it).

    A generic job runs its ranks as laid out (``cores_per_node / cpus_per_task`` ranks per
    node, srun starts them all); a DNN training is one process per node using its cores.
    """
    workload = spec.workload
    per_task = workload.cpus_per_task if isinstance(workload, GenericJob) else option.cores_per_node
    per_task = min(per_task, option.cores_per_node)
    return JobRequest(
        name=spec.name[:128],
        partition=option.partition,
        command=command,
        nodes=option.nodes,
        tasks_per_node=max(option.cores_per_node // per_task, 1),
        cpus_per_task=per_task,
        gpus_per_node=option.gpus_per_node,
        memory_mb=option.memory_mb,
        walltime_s=walltime_s,
        account=spec.account,
        qos=qos,
    )


_GPU_FAMILY = re.compile(r"\b(?:[A-Z]\d{2,3}|RTX ?\d{4})\b")  # V100, A100, K80, RTX 5000


def gpu_memory_bound(candidate: Candidate) -> tuple[float | None, bool]:
    """(GPU memory, exact): the catalog's figure, else the largest same-family GPU's."""
    gpu = candidate.node_type.gpu
    if gpu is None:
        return None, False
    if gpu.memory_mb is not None:
        return float(gpu.memory_mb), True
    family = _GPU_FAMILY.search(gpu.model)
    if family is None:
        return None, False
    token = family.group(0).replace(" ", "")
    known = [
        n.gpu.memory_mb
        for n in candidate.system.node_types
        if n.gpu is not None
        and n.gpu.memory_mb is not None
        and token in n.gpu.model.replace(" ", "")
    ]
    return (float(max(known)), False) if known else (None, False)


def _memory_request(
    candidate: Candidate, estimate: ResourceEstimate, config: PlanningConfig
) -> int | Infeasible:
    partition, node_type = candidate.partition, candidate.node_type
    capacity = partition.max_memory_mb
    node_memory = node_type.usable_memory_mb or node_type.memory_mb
    if node_memory:
        capacity = min(capacity, node_memory)
    need = estimate.memory_mb.point
    if need > capacity:
        return infeasible(
            candidate,
            "memory",
            f"needs {_gb(need)} of memory per node, {candidate.where} allows {_gb(capacity)}",
            need / capacity - 1,
        )
    wanted = max(estimate.memory_mb.high, need * config.memory_headroom)
    request = math.ceil(wanted / _GB) * _GB
    return max(min(request, capacity), partition.min_memory_mb, 1)


def _segments(
    candidate: Candidate, estimate: ResourceEstimate, ctx: BuildContext, notes: list[str]
) -> list[Segment] | Infeasible:
    partition = candidate.partition
    config = ctx.config
    total_s = math.ceil(estimate.runtime_s.high * config.safety_factor)
    total_s = max(total_s, partition.min_minutes * 60, 60)
    max_s = partition.max_minutes * 60
    workload = ctx.spec.workload
    checkpointable = isinstance(workload, DNNTraining) and workload.checkpointable
    if total_s > max_s and not checkpointable and estimate.runtime_s.point <= max_s:
        # Only the safety margin is cut: run at the limit and say what that risks.
        notes.append(
            f"the upper estimate x {config.safety_factor:g} ({_hours(total_s)}) is over "
            f"{candidate.where}'s {_hours(max_s)} limit: asks for the limit, so the job times "
            f"out if it runs past it (the point estimate is {_hours(estimate.runtime_s.point)})"
        )
        return [Segment(max_s, max_s)]
    if total_s > max_s and not checkpointable:
        return infeasible(
            candidate,
            "walltime",
            f"needs {_hours(total_s)} (upper estimate x {config.safety_factor:g}); "
            f"{_hours(max_s)} is {candidate.where}'s limit and the workload cannot "
            "checkpoint (workload.checkpointable)",
            total_s / max_s - 1,
        )
    count = cascade_length(total_s, max_walltime_s=max_s, overhead_s=config.checkpoint_overhead_s)
    if count is None:
        return infeasible(
            candidate,
            "walltime",
            f"{candidate.where}'s {partition.max_minutes} min limit leaves no time for work "
            f"after the {config.checkpoint_overhead_s // 60} min restart overhead of a cascade",
        )
    if count > config.max_segments:
        return infeasible(
            candidate,
            "walltime",
            f"needs {_hours(total_s)}: a cascade of {count} jobs through "
            f"{candidate.where}'s {_hours(max_s)} limit (more than {config.max_segments})",
            count / config.max_segments - 1,
        )
    segments = split_run(
        total_s,
        max_walltime_s=max_s,
        overhead_s=config.checkpoint_overhead_s,
        min_walltime_s=partition.min_minutes * 60,
    )
    assert segments is not None  # cascade_length said the run splits
    return segments


def _expected_runs(segments: list[Segment], point_s: float, overhead_s: int) -> list[float]:
    """How long each job of the chain is expected to run, up to the expected total."""
    if len(segments) == 1:
        return [point_s]
    runs = []
    remaining = point_s
    for segment in segments:
        if remaining <= 0:
            break
        work = min(float(segment.work_s), remaining)
        runs.append(work + overhead_s)
        remaining -= work
    return runs or [float(overhead_s)]


def _jobs_per_user(candidate: Candidate, ctx: BuildContext) -> Infeasible | None:
    if ctx.queue is None:
        return None
    user = ctx.spec.user
    for limit, have, scope in (
        (
            candidate.partition.max_jobs_per_user,
            ctx.queue.user_jobs(candidate.system.name, candidate.partition.name, user),
            candidate.where,
        ),
        (
            candidate.system.max_jobs_per_user,
            ctx.queue.user_jobs_on(candidate.system.name, user),
            candidate.system.name,
        ),
    ):
        if limit is not None and have + 1 > limit:
            return infeasible(
                candidate,
                "jobs_per_user",
                f"{user} already has {have} jobs in {scope}; the limit is {limit} "
                "(max_jobs_per_user)",
                (have + 1) / limit - 1,
            )
    return None


def build_plan(
    candidate: Candidate, estimate: ResourceEstimate, ctx: BuildContext
) -> PlannedOption | Infeasible:
    """The plan for one estimated candidate, or the first limit it cannot meet."""
    notes: list[str] = []
    gpu = candidate.node_type.gpu
    peak = estimate.gpu_memory
    if candidate.gpus_per_node and peak is not None and peak.fits is not None and gpu is not None:
        # White-box: the caching allocator was replayed within the GPU's memory.
        if not peak.fits:
            capacity_mib = peak.capacity_mib or 0.0
            return infeasible(
                candidate,
                "gpu_memory",
                f"needs {peak.total_mib:,.0f} MiB of GPU memory (batch {peak.per_gpu_batch} "
                f"per GPU: {peak.reserved_mib:,.0f} MiB reserved by PyTorch's caching "
                f"allocator, {peak.allocated_mib:,.0f} MiB of it allocated, + "
                f"{peak.context_mib:,.0f} MiB CUDA context, {peak.context_basis}); "
                f"{gpu.model} has {capacity_mib:,.0f} MiB",
                peak.total_mib / max(capacity_mib, 1.0) - 1,
            )
        if peak.capacity_mib is not None and peak.total_mib > peak.capacity_mib:
            notes.append(
                f"GPU memory is tight: {peak.total_mib:,.0f} MiB at the peak, fits "
                f"{gpu.model}'s {peak.capacity_mib:,.0f} MiB only by freeing the allocator's cache"
            )
    elif candidate.gpus_per_node and estimate.gpu_memory_mb is not None and gpu is not None:
        need = estimate.gpu_memory_mb.point
        capacity, exact = gpu_memory_bound(candidate)
        batch = candidate.batch_size
        per_gpu = f" (batch {math.ceil(batch / candidate.gpus)} per GPU)" if batch else ""
        if capacity is None:
            notes.append(f"GPU memory of {gpu.model} is not in the catalog; not checked")
        elif need > capacity:
            has = (
                f"{gpu.model} has {_gb(capacity)}"
                if exact
                else f"{gpu.model}'s memory is not in the catalog and no GPU of its kind "
                f"on {candidate.system.name} has more than {_gb(capacity)}"
            )
            return infeasible(
                candidate,
                "gpu_memory",
                f"needs {_gb(need)} of GPU memory{per_gpu}, {has}",
                need / capacity - 1,
            )
        elif not exact:
            notes.append(
                f"GPU memory of {gpu.model} is not in the catalog; the estimate "
                f"({_gb(need)}) fits the largest of its kind here ({_gb(capacity)})"
            )
        elif estimate.gpu_memory_mb.high > capacity:
            notes.append(
                f"GPU memory is tight: up to {_gb(estimate.gpu_memory_mb.high)} of {_gb(capacity)}"
            )
    memory = _memory_request(candidate, estimate, ctx.config)
    if isinstance(memory, Infeasible):
        return memory
    segments = _segments(candidate, estimate, ctx, notes)
    if isinstance(segments, Infeasible):
        return segments
    limited = _jobs_per_user(candidate, ctx)
    if limited is not None:
        return limited

    partition = candidate.partition
    option = PlanOption(
        system=candidate.system.name,
        partition=partition.name,
        node_type=candidate.node_type.name,
        nodes=candidate.nodes,
        cores_per_node=candidate.cores_per_node,
        gpus_per_node=candidate.gpus_per_node,
        memory_mb=memory,
        walltime_s=max(s.walltime_s for s in segments),
        batch_size=candidate.batch_size,
    )
    for walltime_s in sorted({s.walltime_s for s in segments}):
        broken = violations(
            job_request(ctx.spec, option, partition.qos, walltime_s), candidate.system
        )
        if broken:  # the builder's own rules should make this unreachable; never emit it
            return infeasible(candidate, "policy", "; ".join(broken))

    overhead_s = ctx.config.checkpoint_overhead_s if len(segments) > 1 else 0
    runtime = estimate.runtime_s
    expected_runs = _expected_runs(segments, runtime.point, overhead_s)
    shape = {
        "nodes": candidate.nodes,
        "cores_per_node": candidate.cores_per_node,
        "gpus_per_node": candidate.gpus_per_node,
        "memory_mb": memory,
    }
    expected = chain_charge(partition, candidate.node_type, runs_s=expected_runs, **shape)
    worst = chain_charge(
        partition, candidate.node_type, runs_s=[float(s.walltime_s) for s in segments], **shape
    )
    usd, basis = dollars(expected, ctx.rates)
    usd_max, _ = dollars(worst, ctx.rates)

    wait_s: float | None = None
    wait_basis = "no queue information"
    availability: Availability | None = None
    if ctx.queue is not None:
        waited = ctx.queue.wait(candidate.system, partition, candidate.nodes, option.walltime_s)
        if waited.never:
            return infeasible(candidate, "queue", waited.basis)
        if waited.wait_s is not None:
            wait_s = waited.wait_s * len(expected_runs)
        wait_basis = waited.basis + (
            f"; each of {len(expected_runs)} segments queues" if len(expected_runs) > 1 else ""
        )
        seen = ctx.queue.availability(candidate.system.name, partition.name)
        if seen is not None:
            availability = seen
    expected_run_s = runtime.point + overhead_s * len(expected_runs)
    run_high_s = runtime.high + overhead_s * len(segments)
    per_segment_wait = (wait_s or 0.0) / len(expected_runs)
    if partition.charge is None:
        notes.append(f"{candidate.where} publishes no charge rate: cost unknown")
    return PlannedOption(
        option=option,
        qos=partition.qos,
        estimate=estimate,
        segment_walltimes_s=[s.walltime_s for s in segments],
        segment_work_s=[s.work_s for s in segments],
        expected_segments=len(expected_runs),
        expected_run_s=expected_run_s,
        run_high_s=run_high_s,
        cost=expected,
        cost_max=worst,
        cost_usd=usd,
        cost_usd_max=usd_max,
        cost_usd_basis=basis,
        expected_wait_s=wait_s,
        wait_basis=wait_basis,
        expected_finish_s=(wait_s or 0.0) + expected_run_s,
        finish_high_s=per_segment_wait * len(segments) + run_high_s,
        availability=availability,
        notes=tuple(notes),
        workload=ctx.spec.workload,
    )
