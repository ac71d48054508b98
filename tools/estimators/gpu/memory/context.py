"""What a training step holds on a GPU beside its tensors: the CUDA context per GPU
generation and PyTorch's cuBLAS workspaces (``on_device`` replays a traced step with
both); and a catalog GPU's generation.

Light (no torch): the white-box peak (``estimate``, ``tools.estimators.gpu.workload_trace``)
and the analytic fallback's GPU memory (``tools.planning.analytic``) add the same
amounts, so their ratio does not depend on which GPU is asked.

**Context.** Measured on Hopper only (an H100 80GB HBM3, torch 2.11, CUDA 13.0:
``data/gpu_measurements/h100-20261126-*``): the process held 619 MiB outside the caching
allocator right after CUDA's start and 771-809 MiB (median 809) once cuBLAS and cuDNN had
run, over 203 training configurations; Hopper's figure is that 810. The other generations
are assumptions, bracketed by what users report (the PyTorch forum: "depending on the CUDA
version, used GPU") and by NVIDIA's lazy module loading, the default on Linux since CUDA
12.2, which loads only the kernels a program calls (CUDA programming guide, "Lazy
Loading"). The H100's 810 says they may be low for today's CUDA 12-13 builds too: a
context holds per-SM state, so boards with fewer SMs should need less, but by how much was
not measured.

**cuBLAS workspaces.** PyTorch gives every (cuBLAS handle, CUDA stream) pair a workspace at
its first matrix multiply, allocated through the caching allocator (so
``max_memory_allocated`` counts it) and never freed (``ATen/cuda/CublasHandlePool.cpp``).
Handles are per thread, and a training step multiplies matrices on two threads: the
forward on the caller's, the backward on autograd's device thread. So a step holds two
workspaces from its first multiply on. Their size is PyTorch's default
``CUBLAS_WORKSPACE_CONFIG``: ``:4096:8`` (32 MiB) on Hopper, ``:4096:2:16:8`` (8 MiB +
128 KiB) before it; cuBLASLt shares them (PyTorch's unified workspace, its default). On
the H100 the white-box peak without them was 64.0-65.9 MiB under ``max_memory_allocated``
on most of the 203 configurations (every MLP, Transformer and DLRM, the small convnets);
the earlier generations' size is read from PyTorch's source, not measured. Every zoo model
and model file multiplies matrices (a linear layer at least); a model with none (purely
convolutional) is over-counted by the two workspaces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tools.estimators.gpu.memory.allocator import AllocatorPeaks, MemoryEvent, replay
from tools.estimators.gpu.specs import gpu_architecture as gpu_generation  # the one GPU table

__all__ = [
    "CONTEXT_MB",
    "CUBLAS_THREADS",
    "OnDevice",
    "context_basis",
    "context_for",
    "cublas_workspace_bytes",
    "gpu_generation",
    "on_device",
    "with_cublas_workspaces",
    "workspaces_mb",
]

# MiB per GPU. Up to Volta, assumed: the PyTorch 1.x / CUDA 10-11.0 builds those boards
# ran, which loaded every kernel of the libraries at start. Turing to Ada, assumed: CUDA
# 12 builds with lazy loading. Hopper: measured (the module's docstring).
CONTEXT_MB: dict[str, float] = {
    "kepler": 800.0,
    "maxwell": 800.0,
    "pascal": 800.0,
    "volta": 800.0,
    "turing": 500.0,
    "ampere": 500.0,
    "ada": 500.0,
    "hopper": 810.0,
}


_MEASURED = {"hopper": "measured on an H100 (PyTorch 2.11, CUDA 13.0)"}


def context_basis(model: str) -> str:
    """Where the context figure for a GPU model comes from, in words."""
    generation = gpu_generation(model)
    if generation is None:
        return f"assumed (architecture of {model} unknown: the largest figure)"
    return _MEASURED.get(generation, f"assumed for {generation}")


def context_for(model: str) -> float:
    """The context MiB of a GPU model (unknown architecture: the largest)."""
    generation = gpu_generation(model)
    return CONTEXT_MB[generation] if generation else max(CONTEXT_MB.values())


CUBLAS_THREADS = 2  # the forward's thread and autograd's backward thread
_HOPPER_WORKSPACE_BYTES = 4096 * 1024 * 8
_EARLIER_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
# Keys no traced storage has (the recorder's are addresses, DDP's buckets -1, -2...).
_FIRST_WORKSPACE_KEY = -(1 << 40)
_MIB = float(1 << 20)


def cublas_workspace_bytes(generation: str | None) -> int:
    """One cuBLAS workspace's bytes on ``generation`` (unknown: the larger, Hopper's)."""
    if generation is None or generation.lower() == "hopper":
        return _HOPPER_WORKSPACE_BYTES
    return _EARLIER_WORKSPACE_BYTES


def workspaces_mb(model: str) -> float:
    """MiB of a training step's cuBLAS workspaces on a GPU model."""
    return CUBLAS_THREADS * cublas_workspace_bytes(gpu_generation(model)) / _MIB


def with_cublas_workspaces(
    events: Iterable[MemoryEvent], generation: str | None
) -> list[MemoryEvent]:
    """``events`` after the step's cuBLAS workspaces, allocated first and held throughout."""
    size = cublas_workspace_bytes(generation)
    first = [MemoryEvent("alloc", _FIRST_WORKSPACE_KEY - i, size) for i in range(CUBLAS_THREADS)]
    return [*first, *events]


@dataclass(frozen=True, slots=True)
class OnDevice:
    """A traced step on one GPU: the allocator's peaks (cuBLAS workspaces included), the
    context beside them, what the device then holds, and whether it fits."""

    peaks: AllocatorPeaks
    context_mb: float
    total_mb: float
    fits: bool | None
    allocations: int


def on_device(
    events: Iterable[MemoryEvent], generation: str | None, capacity_mb: float | None = None
) -> OnDevice:
    """``events`` (one traced step) on a GPU of ``generation`` (None: unknown, the largest
    context): the step's cuBLAS workspaces first, PyTorch's caching allocator replayed,
    the context added. With ``capacity_mb`` (the device's memory), whether it fits: by
    the total, else as the allocator does near its limit, freeing its cache and retrying."""
    events = with_cublas_workspaces(events, generation)
    context = CONTEXT_MB[generation] if generation else max(CONTEXT_MB.values())
    peaks = replay(events)
    total = peaks.peak_reserved_bytes / _MIB + context
    fits: bool | None = None
    if capacity_mb is not None:
        fits = total <= capacity_mb or (
            capacity_mb > context
            and not replay(events, capacity_bytes=int((capacity_mb - context) * _MIB)).out_of_memory
        )
    allocations = sum(1 for e in events if e.action == "alloc")
    return OnDevice(peaks, context, total, fits, allocations)
