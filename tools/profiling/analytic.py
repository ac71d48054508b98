"""Analytic time and memory of a training step from its op graph's totals and hardware peaks.

``tools.planning.analytic`` estimates the zoo's named models from per-model facts; this
module estimates *any* traced model from its operator graph (``tools.profiling.opgraph``),
which is what the white-box and hybrid estimators start from:

    memory = parameters x (1 weight + 1 gradient + optimizer states) + buffers + batch
             + max(activations saved for backward, peak of live intermediates)
    time   = FLOPs / (peak x efficiency) + (bytes moved + optimizer update) / bandwidth
             + operators x dispatch overhead

Optimizer states per weight follow ``tools.planning.analytic`` (SGD with momentum 1,
Adam 2). Peaks: CPUs use ``tools.planning.hardware.cpu_peak`` (clock x FLOPs/cycle per
core) times threads; GPUs their catalog ``fp32_tflops`` and ``memory_bandwidth_gbs``.
Efficiency, bandwidth per CPU core and dispatch overhead are assumptions (below); the
learned estimators correct them, and use these figures only as features.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from knowledge_base.catalog import GPUSpec, NodeType
from tools.planning import hardware

__all__ = [
    "HardwareSpec",
    "analytic_memory_mb",
    "analytic_time_s",
    "cpu_spec",
    "gpu_spec",
    "memory_terms_mb",
    "optimizer_states",
    "time_terms_s",
]

_MIB = 1024.0 * 1024.0
CPU_BANDWIDTH_GBS_PER_CORE = 10.0  # assumption: ~a fifth of a socket's STREAM per core
CPU_DISPATCH_S = 15e-6  # PyTorch eager overhead per ATen operator (assumption)
GPU_DISPATCH_S = 10e-6  # kernel launch + dispatch per operator (assumption)
MATMUL_EFFICIENCY = 0.5  # fraction of peak dense kernels reach (assumption)


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """What an estimator knows about a device: described by its specs, never its name."""

    kind: str  # "cpu" or "gpu"
    peak_gflops: float  # FP32, for the threads or the GPU in use
    bandwidth_gbs: float
    memory_mb: float | None
    threads: int = 1
    tensor_tflops: float = 0.0

    def features(self) -> dict[str, float]:
        return {
            "hw_gpu": 1.0 if self.kind == "gpu" else 0.0,
            "hw_peak_gflops": self.peak_gflops,
            "hw_bandwidth_gbs": self.bandwidth_gbs,
            "hw_threads": float(self.threads),
            "hw_memory_mb": self.memory_mb or 0.0,
            "hw_tensor_tflops": self.tensor_tflops,
        }


def cpu_spec(cpu_model: str, threads: int, memory_mb: float | None = None) -> HardwareSpec:
    """A CPU with ``threads`` cores in use, from the planner's table of CPU peaks."""
    peak = hardware.cpu_peak(NodeType(name="cpu", cpu_model=cpu_model, gpus=0))
    return HardwareSpec(
        kind="cpu",
        peak_gflops=peak.gflops_per_core * threads,
        bandwidth_gbs=CPU_BANDWIDTH_GBS_PER_CORE * threads,
        memory_mb=memory_mb,
        threads=threads,
    )


def gpu_spec(gpu: GPUSpec) -> HardwareSpec | None:
    """A GPU from its catalog peaks; None when the catalog lacks FP32 peak or bandwidth."""
    if gpu.fp32_tflops is None or gpu.memory_bandwidth_gbs is None:
        return None
    return HardwareSpec(
        kind="gpu",
        peak_gflops=gpu.fp32_tflops * 1000,
        bandwidth_gbs=gpu.memory_bandwidth_gbs,
        memory_mb=float(gpu.memory_mb) if gpu.memory_mb else None,
        tensor_tflops=gpu.fp16_tensor_tflops or 0.0,
    )


def optimizer_states(optimizer: str) -> int:
    return 2 if optimizer.lower() in {"adam", "adamw"} else 1


def memory_terms_mb(summary: Mapping[str, float], optimizer: str) -> dict[str, float]:
    """The analytic memory's terms, MiB: model state (weights, gradients, optimizer
    states), buffers, the batch, saved activations and the live peak. ``summary`` is
    ``OpGraph.summary()``."""
    return {
        "state": summary.get("parameter_bytes", 0.0) * (2 + optimizer_states(optimizer)) / _MIB,
        "buffers": summary.get("buffer_bytes", 0.0) / _MIB,
        "batch": summary.get("batch_bytes", 0.0) / _MIB,
        "saved": summary.get("saved_activation_bytes", 0.0) / _MIB,
        "live": summary.get("peak_live_bytes", 0.0) / _MIB,
    }


def analytic_memory_mb(summary: Mapping[str, float], optimizer: str) -> float:
    """Model state + batch + activations (saved, or the live peak if larger), MiB.

    ``summary`` is ``OpGraph.summary()``.
    """
    terms = memory_terms_mb(summary, optimizer)
    return terms["state"] + terms["buffers"] + terms["batch"] + max(terms["saved"], terms["live"])


def time_terms_s(
    summary: Mapping[str, float], spec: HardwareSpec, optimizer: str
) -> dict[str, float]:
    """The analytic step time's terms, s: FLOPs at peak x efficiency, bytes the operators
    move and the optimizer update's bytes at bandwidth, and dispatch per operator."""
    flops = summary.get("forward_flops", 0.0) + summary.get("backward_flops", 0.0)
    moved = summary.get("forward_bytes", 0.0) + summary.get("backward_bytes", 0.0)
    # The update reads weight, gradient and states and writes weight and states.
    update = summary.get("parameter_bytes", 0.0) * (3 + 2 * optimizer_states(optimizer))
    dispatch = GPU_DISPATCH_S if spec.kind == "gpu" else CPU_DISPATCH_S
    return {
        "compute": flops / (spec.peak_gflops * 1e9 * MATMUL_EFFICIENCY),
        "memory": moved / (spec.bandwidth_gbs * 1e9),
        "update": update / (spec.bandwidth_gbs * 1e9),
        "dispatch": (summary.get("graph_nodes", 0.0) + 4) * dispatch,
    }


def analytic_time_s(summary: Mapping[str, float], spec: HardwareSpec, optimizer: str) -> float:
    """Time of one step: FLOPs at peak x efficiency, bytes at bandwidth, dispatch per op.

    Additive rather than a per-operator max: an eager step runs its operators one after
    another, and on CPUs memory-bound operators rarely overlap compute.
    """
    return sum(time_terms_s(summary, spec, optimizer).values())
