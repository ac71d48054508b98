"""What every MCP tool's input and result share: strict models, bounds, examples.

``_Input`` and ``_Result`` forbid unknown keys; ``_bounded`` refuses absurd workload sizes
with the field and the value; ``WORKLOAD_EXAMPLE`` is what an assistant sees as a worked
example of a workload.
"""

from __future__ import annotations

import math
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec

__all__ = [
    "MODEL_FILE_MAX_CHARS",
    "PLAN_ID_EXAMPLE",
    "WORKLOAD_EXAMPLE",
    "_Input",
    "_Result",
    "_WorkloadInput",
    "_bounded",
]

MODEL_FILE_MAX_CHARS = 200_000

# Bounds on what one request may ask for. The domain model has no upper limits (a trace may
# hold anything); a request past these is a mistake, and answering it would only burn CPU.
_LIMITS: dict[str, int] = {
    "workload.epochs": 100_000,
    "workload.dataset_samples": 10**12,
    "workload.max_nodes": 100_000,
    "workload.nodes": 100_000,
    "workload.cores": 10_000_000,
    "workload.gpus": 1_000_000,
    "workload.memory_mb": 10**9,
    "workload.walltime_s": 10 * 365 * 86_400,
}


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _bounded(spec: WorkloadSpec) -> WorkloadSpec:
    """Refuse absurd sizes with the field and the value."""
    w = spec.workload
    values: dict[str, int | None] = {}
    if isinstance(w, DNNTraining):
        values = {
            "workload.epochs": w.epochs,
            "workload.dataset_samples": w.dataset_samples,
            "workload.max_nodes": w.max_nodes,
        }
        if len(w.batch_sizes) > 64:
            raise ValueError(f"workload.batch_sizes: at most 64 sizes, got {len(w.batch_sizes)}")
        for size in w.batch_sizes:
            if size > 1_000_000:
                raise ValueError(f"workload.batch_sizes: {size} is past 1,000,000")
        if len(w.input_shape) > 8 or math.prod(w.input_shape or [1]) > 10**9:
            raise ValueError(f"workload.input_shape: {w.input_shape} is past 1e9 values")
    elif isinstance(w, GenericJob):
        values = {
            "workload.nodes": w.nodes,
            "workload.cores": w.cores,
            "workload.gpus": w.gpus,
            "workload.memory_mb": w.memory_mb,
            "workload.walltime_s": w.walltime_s,
        }
    for name, value in values.items():
        if value is not None and value > _LIMITS[name]:
            raise ValueError(f"{name}: {value} is past the limit {_LIMITS[name]:,}")
    return spec


# What an assistant sees as a worked example of a workload (examples/resnet50.yaml).
WORKLOAD_EXAMPLE: dict[str, Any] = {
    "name": "resnet50-20k",
    "user": "alice",
    "workload": {
        "kind": "dnn_training",
        "model": "resnet50",
        "dataset_samples": 20000,
        "input_shape": [3, 224, 224],
        "epochs": 50,
        "batch_sizes": [32, 64],
    },
    "goals": {"objective": "balanced", "systems": ["pitzer"]},
}
PLAN_ID_EXAMPLE = "resnet50-20k-dd6afb4072e9"


class _WorkloadInput(_Input):
    workload: WorkloadSpec = Field(
        description="What to run and for whom: a WorkloadSpec, as in examples/resnet50.yaml "
        "(kind dnn_training: model, dataset_samples, epochs, batch_sizes; kind generic: "
        "application, cores, memory_mb, walltime_s)",
        examples=[WORKLOAD_EXAMPLE],
    )

    @model_validator(mode="after")
    def _sizes(self) -> Self:
        _bounded(self.workload)
        return self
