"""Answering "how long on this GPU?" for a model: by catalog name or by a spec file.

``gpu_targets`` resolves ``--gpu NAME`` by the one resolver (``specs.resolve_gpu_name``:
a catalog GPU's model, or a datasheet GPU's exact name or listed alias, ``L4``, ``H100
SXM``, ``T4``, in any case; anything else refused with every candidate), and
``--gpu-spec FILE.json`` through NeuSight's keys.
``gpu_option_estimates`` traces each batch size once and prices it on every GPU asked:
per-iteration time (the per-operator model, p10/p50/p90), ``forward_backward_s`` without
the optimizer step (what published measurements, NeuSight's among them, time), peak
memory per GPU, white-box (``gpu_memory_mib``: the step's allocations, traced twice and
derived for every batch size, replayed through PyTorch's CUDA caching allocator, plus
the CUDA context of the GPU's generation, measured on Hopper, assumed before it) and
walltime (start-up as the analytic model's: 10/30/120 s at p10/p50/p90). The time goes
through ``promoted.gpu_step``, as the planner's, so the center's promoted per-GPU
correction applies here too; each entry's ``correction`` says what was applied (factor,
the runs of that GPU it rests on) or is null.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.estimator import GpuStepModel, Quantiles, load_step_model
from tools.estimators.gpu.promoted import CorrectionApplied, ServingCorrection, gpu_step
from tools.estimators.gpu.specs import (
    GpuSpec,
    catalog_gpus,
    load_spec_file,
    resolve_gpu_name,
    spec_for_catalog_gpu,
)
from tools.planning.analytic import STARTUP_LOW_S, STARTUP_POINT_S, STARTUP_S
from tools.profiling.zoo.registry import TrainingTask

__all__ = [
    "GpuMemoryMib",
    "GpuOptionEstimate",
    "gpu_option_estimates",
    "gpu_targets",
]

_MIB = float(1 << 20)


class GpuMemoryMib(BaseModel):
    """White-box peak memory per GPU (MiB): what torch reports and what the device holds."""

    model_config = ConfigDict(extra="forbid")

    allocated: float = Field(description="torch.cuda.max_memory_allocated")
    reserved: float = Field(description="torch.cuda.max_memory_reserved")
    context: float = Field(description="CUDA context per GPU generation (see context_basis)")
    total: float = Field(description="reserved + context")
    context_basis: str


class GpuOptionEstimate(BaseModel):
    """One GPU and batch size: ``rightsize estimate --json`` keys plus forward_backward_s."""

    model_config = ConfigDict(extra="forbid")

    hardware: str
    batch_size: int
    iteration_time_s: Quantiles
    forward_backward_s: Quantiles
    peak_memory_mb: Quantiles
    gpu_memory_mib: GpuMemoryMib
    walltime_s: Quantiles
    fits: bool
    estimator: str
    iterations: int
    validation_mape: float | None = None
    correction: CorrectionApplied | None = Field(
        default=None, description="The center's promoted per-GPU correction, when one applied"
    )
    note: str = ""


def gpu_targets(
    names: Sequence[str], spec_files: Sequence[Path], catalog: Catalog | None
) -> list[GpuSpec]:
    """The GPUs asked for; an unknown or ambiguous name or a bad spec file is an
    InvalidInputError. A name goes through the one resolver (``specs.resolve_gpu_name``:
    a catalog GPU's model, a datasheet GPU's exact name or alias); a catalog GPU keeps
    its own figures."""
    targets = [load_spec_file(path) for path in spec_files]
    known = catalog_gpus(catalog) if catalog is not None else {}
    targets += [
        spec_for_catalog_gpu(resolve_gpu_name(name, known, field="--gpu")) for name in names
    ]
    return targets


def gpu_option_estimates(
    task_for: Callable[[int], TrainingTask],
    summaries: Mapping[int, object],
    targets: Sequence[GpuSpec],
    *,
    epochs: int,
    samples: int,
    optimizer: str,
    model: GpuStepModel | None = None,
    correction: ServingCorrection | None = None,
) -> list[GpuOptionEstimate]:
    """Estimates for every (GPU, batch size); the batch sizes are ``summaries``' keys;
    ``correction``: the serving one (``PromotedGpuCorrection.current``), None for none."""
    from tools.estimators.gpu.memory.context import context_basis, on_device
    from tools.estimators.gpu.memory.scaled import ScalableSteps
    from tools.estimators.gpu.ops import kernels_of
    from tools.estimators.gpu.trace import trace_training_step
    from tools.estimators.gpu.workload_trace import gpu_generation

    if optimizer not in ("sgd", "adam"):
        raise InvalidInputError("must be sgd or adam", field="--optimizer", value=optimizer)
    model = model or load_step_model()
    steps = ScalableSteps.trace(task_for, optimizer=optimizer)  # type: ignore[arg-type]
    out: list[GpuOptionEstimate] = []
    for batch in summaries:
        task = task_for(batch)
        kernels = kernels_of(trace_training_step(task))
        parameters = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
        scaled = steps or ScalableSteps.exact(task_for, batch, optimizer=optimizer)  # type: ignore[arg-type]
        traced = scaled.events(batch)
        iterations = epochs * math.ceil(samples / batch)
        for spec in targets:
            device = on_device(traced, gpu_generation(spec.name), spec.memory_gb * 1024)
            context, fits = device.context_mb, bool(device.fits)
            memory = GpuMemoryMib(
                allocated=round(device.peaks.peak_allocated_bytes / _MIB, 1),
                reserved=round(device.peaks.peak_reserved_bytes / _MIB, 1),
                context=context,
                total=round(device.total_mb, 1),
                context_basis=context_basis(spec.name),
            )
            step = gpu_step(
                model, kernels, spec, parameters=parameters, optimizer=optimizer,
                correction=correction,
            )  # fmt: skip
            walltime = Quantiles(
                p10=iterations * step.step_s.p10 + STARTUP_LOW_S,
                p50=iterations * step.step_s.p50 + STARTUP_POINT_S,
                p90=iterations * step.step_s.p90 + STARTUP_S,
            )
            out.append(
                GpuOptionEstimate(
                    hardware=spec.name,
                    batch_size=batch,
                    iteration_time_s=step.step_s,
                    forward_backward_s=step.forward_backward_s,
                    peak_memory_mb=Quantiles(
                        p10=memory.allocated + context, p50=memory.total, p90=memory.total
                    ),
                    gpu_memory_mib=memory,
                    walltime_s=walltime,
                    fits=fits,
                    estimator=step.estimator,
                    iterations=iterations,
                    validation_mape=step.validation_mape,
                    correction=step.correction,
                    note="per-operator GPU model (specs only; leave-one-GPU-out validated)"
                    + (f"; {step.describe()}" if step.correction else "")
                    + "; GPU memory white-box (caching allocator replay + CUDA context)",
                )
            )
    return out
