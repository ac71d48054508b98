"""One request, one chain, one answer: what ``rightsize estimate`` and MCP
``estimate_resources`` ask about a model file.

``ModelFileRequest`` is the request both doors validate into (a model file, its class,
batch sizes, how it trains, and the hardware: ``local``, ``all``, ``SYSTEM``,
``SYSTEM/PARTITION`` or a GPU's name); ``estimate_model_file`` turns it into a
``WorkloadSpec``, asks the estimator chain the planner asks (``EstimatorChain``) about
one node of each partition (one GPU on GPU partitions, every core on CPU ones), this
machine (``local``) and the GPUs named, and returns one ``OptionAnswer`` per option and
batch size (``tools.planning.answer``). ``rightsize plan`` and MCP ``what_if`` answer the
same options with the same chain and the same ``answer_of``, so their p50s are these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog, GPUSpec, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining, Goals, Optimizer, WorkloadSpec
from tools.planning.answer import OptionAnswer, answer_of
from tools.planning.chain import EstimatorChain
from tools.planning.cpu_model_file import LOCAL, local_system
from tools.planning.estimation import Candidate, Estimator, NoEstimate, estimate_first
from tools.planning.gpu_names import GPU_SYSTEM, resolve_gpu
from tools.planning.model_files import check_model_file
from tools.planning.results import Infeasible
from tools.planning.whatif import enumerate_candidates

__all__ = ["ModelFileRequest", "estimate_model_file", "model_file_spec"]


class ModelFileRequest(BaseModel):
    """What ``rightsize estimate`` and MCP ``estimate_resources`` ask about a model file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_file: Path
    model_class: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    batch_sizes: list[int] = Field(min_length=1, max_length=64)
    epochs: int = Field(default=50, ge=1)
    samples: int = Field(default=20_000, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    hardware: list[str] = Field(
        default_factory=lambda: [LOCAL],
        description="local, all (local and every partition), SYSTEM, SYSTEM/PARTITION, a GPU",
    )
    gpus: list[str] = Field(default_factory=list, description="GPU names (--gpu)")
    threads: int = Field(default=1, ge=1, description="CPU threads of the local option")
    input_shape: list[int] = Field(default_factory=list, max_length=8)
    num_classes: int | None = Field(default=None, ge=1)


def model_file_spec(request: ModelFileRequest, user: str = "rightsize") -> WorkloadSpec:
    """The request as the planner's workload (what ``rightsize plan`` reads from YAML)."""
    return WorkloadSpec(
        name=request.model_file.stem or "model",
        user=user,
        workload=DNNTraining(
            model=str(request.model_file),
            model_class=request.model_class,
            model_params=(
                {} if request.num_classes is None else {"num_classes": request.num_classes}
            ),
            dataset_samples=request.samples,
            input_shape=list(request.input_shape),
            epochs=request.epochs,
            batch_sizes=sorted(set(request.batch_sizes)),
            optimizer=Optimizer(request.optimizer),
        ),
        goals=Goals(),
    )


def _one_node(candidates: Sequence[Candidate | Infeasible]) -> list[Candidate]:
    """One node of each partition: one GPU on GPU partitions, every core on CPU ones."""
    return [
        c for c in candidates if isinstance(c, Candidate) and c.nodes == 1 and c.gpus_per_node <= 1
    ]


def _catalog_candidates(spec: WorkloadSpec, catalog: Catalog, value: str) -> list[Candidate]:
    """The one-node candidates of ``all``, ``SYSTEM`` or ``SYSTEM/PARTITION``."""
    if value == "all":
        return _one_node(list(enumerate_candidates(spec, catalog)))
    system_name, _, partition = value.partition("/")
    if system_name not in catalog.names():
        raise InvalidInputError(
            f"unknown system (known: {', '.join(catalog.names())})", field="hardware", value=value
        )
    if partition and partition not in [p.name for p in catalog.system(system_name).partitions]:
        raise InvalidInputError(
            f"{system_name} has no partition {partition!r}", field="hardware", value=value
        )
    goals = Goals(systems=[system_name], partitions=[partition] if partition else None)
    scoped = spec.model_copy(update={"goals": goals})
    return _one_node(list(enumerate_candidates(scoped, catalog)))


def _gpu_system(gpu: GPUSpec) -> System:
    """A GPU no partition stands for, as a one-GPU node of its own (``gpu/NAME``)."""
    memory = 1 << 20
    node = NodeType(name=gpu.model, cpu_model=None, cores=8, memory_mb=memory, gpus=1, gpu=gpu)
    partition = Partition(
        name=gpu.model,
        node_type=gpu.model,
        max_nodes=1,
        max_cores_per_node=8,
        max_memory_mb=memory,
        max_minutes=10**7,
        gpus_per_node=1,
    )
    return System(name=GPU_SYSTEM, center=GPU_SYSTEM, node_types=[node], partitions=[partition])


def _candidates(
    request: ModelFileRequest, spec: WorkloadSpec, catalog: Catalog | None
) -> list[tuple[Candidate, float | None]]:
    """Every (candidate, memory that must hold it) the request's hardware names."""
    assert isinstance(spec.workload, DNNTraining)
    batches = spec.workload.batch_sizes
    found: list[tuple[Candidate, float | None]] = []
    for value in request.hardware:
        if value in (LOCAL, "all"):
            system = local_system(request.threads)
            node, partition = system.node_types[0], system.partitions[0]
            capacity = float(node.memory_mb) if node.memory_mb else None
            found += [
                (Candidate(system, partition, node, 1, request.threads, 0, b), capacity)
                for b in batches
            ]
            if value == LOCAL:
                continue
        gpu = resolve_gpu(value, catalog)
        if gpu is not None:
            found += _gpu_candidates(gpu, batches)
            continue
        if catalog is None:
            raise InvalidInputError("no catalog to look it up in", field="hardware", value=value)
        found += [(c, _capacity(c)) for c in _catalog_candidates(spec, catalog, value)]
    for name in request.gpus:
        found += _gpu_candidates(resolve_gpu(name, catalog, field="gpus", required=True), batches)
    return found


def _gpu_candidates(
    gpu: GPUSpec | None, batches: list[int]
) -> list[tuple[Candidate, float | None]]:
    assert gpu is not None  # resolved with required=True, or checked by the caller
    system = _gpu_system(gpu)
    node, partition = system.node_types[0], system.partitions[0]
    capacity = float(gpu.memory_mb) if gpu.memory_mb else None
    return [(Candidate(system, partition, node, 1, 8, 1, b), capacity) for b in batches]


def _capacity(candidate: Candidate) -> float | None:
    node = candidate.node_type
    if candidate.gpus_per_node:
        return float(node.gpu.memory_mb) if node.gpu and node.gpu.memory_mb else None
    memory = node.usable_memory_mb or node.memory_mb or candidate.partition.max_memory_mb
    return float(memory) if memory else None


async def estimate_model_file(
    request: ModelFileRequest,
    chain: EstimatorChain,
    catalog: Catalog | None,
    *,
    now: datetime | None = None,
) -> tuple[list[OptionAnswer], list[str]]:
    """Every option's answer (options in the order asked, batch sizes ascending) and,
    for options no estimator answered, why. Bad input raises ``InvalidInputError``."""
    spec = model_file_spec(request)
    workload = spec.workload
    assert isinstance(workload, DNNTraining)
    # The names first (cheap), then the file: an unknown GPU is refused before tracing.
    candidates = _candidates(request, spec, catalog)
    # Tracing and pricing run the model's code and torch: off the event loop (the MCP
    # server keeps serving meanwhile).
    await asyncio.to_thread(check_model_file, workload, chain.traces)
    estimators: list[Estimator] = await chain.estimators(spec, catalog or Catalog(), now)

    def answer_all() -> tuple[list[OptionAnswer], list[str]]:
        answers: list[OptionAnswer] = []
        refused: list[str] = []
        for candidate, capacity in candidates:
            estimate = estimate_first(estimators, workload, candidate)
            if isinstance(estimate, NoEstimate):
                where = f"{candidate.where} at batch {candidate.batch_size}"
                refused.append(f"{where}: {estimate.reason}")
                continue
            answers.append(answer_of(estimate, workload, capacity_mb=capacity))
        return answers, refused

    return await asyncio.to_thread(answer_all)
