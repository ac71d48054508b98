"""Peak GPU memory of one training step: traced storages replayed through the caching allocator.

``estimate_gpu_memory`` records the step's allocations on fake tensors (``recorder``),
replays PyTorch's CUDA caching allocator over them (``allocator``) and adds the step's
cuBLAS workspaces and the CUDA context (``context.on_device``). Per GPU: with ``gpus`` >
1 the batch is split evenly (data-parallel) and DDP's gradient buckets (25 MiB each, a
second copy of the gradients) are allocated before the first step.

The CUDA context (driver state, the kernels of PyTorch's, cuBLAS's and cuDNN's
libraries, their handles) is not allocated through the caching allocator, so
``torch.cuda.max_memory_allocated`` does not see it but the device does. ``CONTEXT_MB``
has it per GPU generation: measured on an H100 for Hopper, assumed for the others
(``tools.estimators.gpu.memory.context`` says on what).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.memory.context import CONTEXT_MB, on_device
from tools.estimators.gpu.memory.recorder import Optimizer, StepRecorder, record_training_step
from tools.estimators.gpu.memory.scaled import ddp_bucket_bytes
from tools.estimators.model_file import UserModel
from tools.profiling.zoo.registry import FAMILIES, TrainingTask, named_model

__all__ = [
    "CONTEXT_MB",
    "DDP_BUCKET_MB",
    "Generation",
    "GpuMemoryEstimate",
    "PrecisionName",
    "context_mb",
    "estimate_gpu_memory",
]

Generation = Literal["kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper"]
PrecisionName = Literal["fp32", "amp", "amp_fp16", "amp_bf16"]

DDP_BUCKET_MB = 25.0  # torch.nn.parallel.DistributedDataParallel's bucket_cap_mb
_MIB = float(1 << 20)


class GpuMemoryEstimate(BaseModel):
    """Peak memory per GPU of a training step, in MiB (``total_mb`` is what the device needs)."""

    model_config = ConfigDict(frozen=True)

    model: str
    batch_size: int = Field(gt=0, description="global batch, split over gpus")
    per_gpu_batch: int = Field(gt=0)
    gpus: int = Field(gt=0)
    optimizer: Optimizer
    precision: Literal["fp32", "amp_fp16", "amp_bf16"]
    peak_allocated_mb: float = Field(description="torch.cuda.max_memory_allocated")
    peak_reserved_mb: float = Field(description="torch.cuda.max_memory_reserved")
    peak_requested_mb: float = Field(description="sum of live tensor bytes at the peak")
    context_mb: float
    total_mb: float = Field(description="peak_reserved_mb + context_mb")
    gpu_memory_mb: float | None = None
    fits: bool | None = Field(
        default=None,
        description="replayed with the device's memory less the context: no allocation failed",
    )
    allocations: int
    method: str = "fake-tensor trace + CUDA caching allocator replay"


def context_mb(generation: str) -> float:
    """The CUDA context of a GPU generation (MiB); InvalidInputError lists the known ones."""
    try:
        return CONTEXT_MB[generation.lower()]
    except KeyError:
        raise InvalidInputError(
            f"unknown GPU generation; known: {', '.join(CONTEXT_MB)}",
            field="generation",
            value=generation,
        ) from None


ModelSpec = str | UserModel | Callable[[int], TrainingTask]


def _task_factory(model: ModelSpec) -> tuple[str, Callable[[int], TrainingTask]]:
    if isinstance(model, UserModel):  # rightsize's --model-file/--model-class
        user = model
        return user.class_name, lambda batch: user.task(batch, meta=True)
    if not isinstance(model, str):
        return str(getattr(model, "__name__", "model")), model
    found = named_model(model)
    if found is None:
        known = sorted(m for f in FAMILIES.values() for m in f.named)
        raise InvalidInputError(
            f"not a model of the zoo; known: {', '.join(known)}", field="model", value=model
        )
    family, params = found

    def build(batch: int) -> TrainingTask:
        with torch.device("meta"):
            return family.task(params, batch)

    return model, build


def _ddp_buckets(bucket_mb: float) -> Callable[[StepRecorder, list[nn.Parameter]], list[Tensor]]:
    def setup(recorder: StepRecorder, params: list[nn.Parameter]) -> list[Tensor]:
        sizes = ddp_bucket_bytes(params, bucket_mb)
        return [torch.empty(size // 4, dtype=torch.float32) for size in sizes]

    return setup


def estimate_gpu_memory(
    model: ModelSpec,
    batch_size: int,
    *,
    optimizer: Optimizer = "sgd",
    precision: PrecisionName = "fp32",
    gpus: int = 1,
    generation: str = "ampere",
    gpu_memory_mb: float | None = None,
) -> GpuMemoryEstimate:
    """Peak memory per GPU of one training step of ``model`` at ``batch_size``.

    ``model``: a zoo model's name ("resnet50"), a loaded model file
    (``tools.estimators.model_file.load_user_model``), or a function of the batch size
    returning a ``TrainingTask``. With ``gpu_memory_mb`` (the device's total) the replay
    runs with that limit less the context and says whether the step fits.
    InvalidInputError names the bad field, or the operator a model failed on.
    """
    if batch_size <= 0:
        raise InvalidInputError("must be positive", field="batch_size", value=batch_size)
    if gpus <= 0:
        raise InvalidInputError("must be positive", field="gpus", value=gpus)
    if gpu_memory_mb is not None and gpu_memory_mb <= 0:
        raise InvalidInputError("must be positive", field="gpu_memory_mb", value=gpu_memory_mb)
    if optimizer not in ("sgd", "adam"):
        raise InvalidInputError("must be 'sgd' or 'adam'", field="optimizer", value=optimizer)
    if precision not in ("fp32", "amp", "amp_fp16", "amp_bf16"):
        raise InvalidInputError(
            "must be 'fp32', 'amp', 'amp_fp16' or 'amp_bf16'", field="precision", value=precision
        )
    mode = "amp_fp16" if precision == "amp" else precision
    context = context_mb(generation)
    name, build = _task_factory(model)
    per_gpu = math.ceil(batch_size / gpus)
    events = record_training_step(
        build(per_gpu),
        optimizer=optimizer,
        precision=mode,
        setup=_ddp_buckets(DDP_BUCKET_MB) if gpus > 1 else None,
    )
    device = on_device(events, generation.lower(), gpu_memory_mb)
    peaks = device.peaks
    return GpuMemoryEstimate(
        model=name,
        batch_size=batch_size,
        per_gpu_batch=per_gpu,
        gpus=gpus,
        optimizer=optimizer,
        precision=mode,
        peak_allocated_mb=round(peaks.peak_allocated_bytes / _MIB, 1),
        peak_reserved_mb=round(peaks.peak_reserved_bytes / _MIB, 1),
        peak_requested_mb=round(peaks.peak_requested_bytes / _MIB, 1),
        context_mb=context,
        total_mb=round(device.total_mb, 1),
        gpu_memory_mb=gpu_memory_mb,
        fits=device.fits,
        allocations=device.allocations,
    )
