"""Answering "how long on this GPU?" for a model: by catalog name or by a spec file.

``gpu_targets`` resolves ``--gpu NAME`` against the catalog's GPU models (an unknown name
is an error listing the known ones) and ``--gpu-spec FILE.json`` through NeuSight's keys.
``gpu_option_estimates`` traces each batch size once and prices it on every GPU asked:
per-iteration time (the per-operator model, p10/p50/p90), ``forward_backward_s``
without the optimizer step (what published measurements, NeuSight's among them, time),
peak memory (the analytic op-graph model plus the CUDA context) and walltime.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from knowledge_base.catalog import Catalog, GPUSpec
from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.estimator import GpuStepModel, Quantiles, load_step_model
from tools.estimators.gpu.specs import GpuSpec, load_spec_file, spec_for_catalog_gpu
from tools.profiling.zoo.registry import TrainingTask

__all__ = ["GpuOptionEstimate", "catalog_gpus", "gpu_option_estimates", "gpu_targets"]

STARTUP_S = 120.0  # as tools.planning.analytic: job start-up added to every walltime
CUDA_CONTEXT_MB = 1024.0


class GpuOptionEstimate(BaseModel):
    """One GPU and batch size: ``rightsize estimate --json`` keys plus forward_backward_s."""

    model_config = ConfigDict(extra="forbid")

    hardware: str
    batch_size: int
    iteration_time_s: Quantiles
    forward_backward_s: Quantiles
    peak_memory_mb: Quantiles
    walltime_s: Quantiles
    fits: bool
    estimator: str
    iterations: int
    validation_mape: float | None = None
    note: str = ""


def catalog_gpus(catalog: Catalog) -> dict[str, GPUSpec]:
    """Every GPU model the catalog's node types carry, by its name."""
    found: dict[str, GPUSpec] = {}
    for name in catalog.names():
        for node in catalog.system(name).node_types:
            if node.gpu is not None:
                found.setdefault(node.gpu.model, node.gpu)
    return found


def gpu_targets(
    names: Sequence[str], spec_files: Sequence[Path], catalog: Catalog | None
) -> list[GpuSpec]:
    """The GPUs asked for; an unknown name or a bad spec file is an InvalidInputError."""
    targets = [load_spec_file(path) for path in spec_files]
    known = catalog_gpus(catalog) if catalog is not None else {}
    for name in names:
        match = known.get(name) or next(
            (g for model, g in known.items() if model.lower() == name.lower()), None
        )
        if match is None:
            raise InvalidInputError(
                f"unknown GPU (known: {'; '.join(sorted(known)) or 'none in the catalog'})",
                field="--gpu",
                value=name,
            )
        targets.append(spec_for_catalog_gpu(match))
    return targets


def gpu_option_estimates(
    task_for: Callable[[int], TrainingTask],
    summaries: Mapping[int, Mapping[str, float]],
    targets: Sequence[GpuSpec],
    *,
    epochs: int,
    samples: int,
    optimizer: str,
    model: GpuStepModel | None = None,
) -> list[GpuOptionEstimate]:
    """Estimates for every (GPU, batch size); ``summaries`` are the batches' op-graph sums."""
    from tools.estimators.gpu.ops import kernels_of
    from tools.estimators.gpu.trace import trace_training_step
    from tools.profiling.analytic import analytic_memory_mb

    model = model or load_step_model()
    out: list[GpuOptionEstimate] = []
    for batch, summary in summaries.items():
        task = task_for(batch)
        kernels = kernels_of(trace_training_step(task))
        parameters = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
        memory_mb = analytic_memory_mb(summary, optimizer) + CUDA_CONTEXT_MB
        memory = Quantiles(p10=memory_mb * 0.85, p50=memory_mb, p90=memory_mb * 1.2)
        iterations = epochs * math.ceil(samples / batch)
        for spec in targets:
            step = model.estimate(kernels, spec, parameters=parameters, optimizer=optimizer)
            walltime = Quantiles(
                p10=iterations * step.step_s.p10 + STARTUP_S,
                p50=iterations * step.step_s.p50 + STARTUP_S,
                p90=iterations * step.step_s.p90 + STARTUP_S,
            )
            out.append(
                GpuOptionEstimate(
                    hardware=spec.name,
                    batch_size=batch,
                    iteration_time_s=step.step_s,
                    forward_backward_s=step.forward_backward_s,
                    peak_memory_mb=memory,
                    walltime_s=walltime,
                    fits=memory.p90 <= spec.memory_gb * 1024,
                    estimator=step.estimator,
                    iterations=iterations,
                    validation_mape=step.validation_mape,
                    note="per-operator GPU model (specs only; leave-one-GPU-out validated)",
                )
            )
    return out
