"""What the per-operator model is compared with: the roofline and the analytic fallback.

- roofline: each kernel at the larger of FLOPs over peak FP32 and bytes over bandwidth
  (what a perfect kernel would take), summed;
- analytic fallback (``tools.planning.hardware``, the planner's answer for GPUs without
  this model): the step's matrix FLOPs over peak x one Gavel-fitted efficiency, plus one
  per-step overhead. Per kernel it prices only FLOPs, so memory-bound kernels get no
  time from it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from tools.estimators.gpu.features import OP_CLASSES, class_features
from tools.estimators.gpu.ops import GpuKernels
from tools.estimators.gpu.specs import GpuSpec

__all__ = ["MATRIX_CLASSES", "analytic_s", "kernel_flops", "roofline_s"]

Array = NDArray[np.float64]
MATRIX_CLASSES: tuple[str, ...] = ("linear", "bmm", "conv")


def kernel_flops(op_class: str, dims: dict[str, Array]) -> Array:
    """FLOPs of each kernel of a matrix class (linear, bmm, conv)."""
    if op_class == "conv":
        out = np.maximum(
            np.floor((dims["Input"] + 2 * dims["Padding"] - dims["Kernel"]) / dims["Stride"]) + 1,
            1.0,
        )
        return np.asarray(
            2 * dims["B"] * out**2 * dims["Cout"] * dims["Cin"] * dims["Kernel"] ** 2,
            dtype=np.float64,
        )
    if op_class in ("linear", "bmm"):
        return np.asarray(2 * dims["B"] * dims["M"] * dims["N"] * dims["K"], dtype=np.float64)
    raise ValueError(f"no FLOP count for operator class {op_class!r}")


def _flops(kernels: GpuKernels) -> float:
    total = 0.0
    for op_class in MATRIX_CLASSES:
        if kernels.factor[op_class]:
            factor = np.array(kernels.factor[op_class])
            total += float((kernel_flops(op_class, kernels.columns(op_class)) * factor).sum())
    return total


def roofline_s(kernels: GpuKernels, spec: GpuSpec) -> float:
    """Sum of the kernels' roofline times."""
    from tools.estimators.gpu.opcost import spec_columns

    total = 0.0
    for op_class in OP_CLASSES:
        factor = np.array(kernels.factor[op_class])
        if len(factor):
            roof, _ = class_features(
                op_class, kernels.columns(op_class), spec_columns(spec, len(factor))
            )
            total += float((roof * factor).sum()) / 1e3
    return total


def analytic_s(kernels: GpuKernels, spec: GpuSpec) -> float:
    """The analytic fallback's step: FLOPs / (peak x efficiency) + per-step overhead."""
    from tools.planning.hardware import GPU_EFFICIENCY, GPU_STEP_OVERHEAD_S

    return GPU_STEP_OVERHEAD_S + _flops(kernels) / (spec.fp32_gflops * 1e9 * GPU_EFFICIENCY)
