"""Roofline bounds and shape x spec features of one GPU kernel, per operator class.

Every kernel's time is modelled as ``roofline_ms x exp(correction)``: the roofline is the
larger of FLOPs over peak FP32 and bytes over memory bandwidth (what a perfect kernel
would take), and the learned correction is a function of features that mean the same on
any GPU: how far the kernel sits from the ridge point (intensity over peak/bandwidth), how
many waves of tiles it launches over the SMs and how full the last wave is (NeuSight's
tile/wave idea, Lee et al. ASPLOS'25), its working set over the L2, and its roofline time
in microseconds (short kernels are dominated by fixed launch and tail costs). The GPU's
name is never an input, so the model answers for any GPU given its specs.

Functions take column arrays (numpy), so training over 100k kernels and predicting
thousands of operators are one vectorised pass each.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

__all__ = ["DIMS", "FEATURE_NAMES", "OP_CLASSES", "class_features"]

Array = NDArray[np.float64]

OP_CLASSES: tuple[str, ...] = ("linear", "bmm", "conv", "elementwise", "ln", "softmax")

# Shape columns each class needs (NeuSight's kernel-file columns, element-wise as one
# class with the element count, tensor inputs and whether the math is transcendental).
DIMS: dict[str, tuple[str, ...]] = {
    "linear": ("B", "M", "N", "K"),
    "bmm": ("B", "M", "N", "K"),
    "conv": ("B", "Cin", "Cout", "Kernel", "Input", "Stride", "Padding"),
    "elementwise": ("N", "Inputs", "Heavy"),
    "ln": ("B", "H"),
    "softmax": ("B", "H"),
}

_BYTES = 4.0  # FP32, as measured
_SPEC = ("sms", "fp32_gflops", "bandwidth_gbs", "l2_mb")

FEATURE_NAMES: dict[str, tuple[str, ...]] = {}


def _waves(tiles: Array, sms: Array) -> tuple[Array, Array]:
    waves = np.maximum(tiles, 1.0) / sms
    return np.log2(waves), waves / np.ceil(waves)


def _gemm(m: Array, n: Array, k: Array, batch: Array, sms: Array) -> dict[str, Array]:
    out = {
        "log_m": np.log2(m),
        "log_n": np.log2(n),
        "log_k": np.log2(k),
        "log_batch": np.log2(batch),
    }
    for tile in (64, 128):
        tiles = batch * np.ceil(m / tile) * np.ceil(n / tile)
        out[f"log_waves{tile}"], out[f"fill{tile}"] = _waves(tiles, sms)
    return out


def class_features(
    op_class: str, dims: Mapping[str, Array], spec: Mapping[str, Array]
) -> tuple[Array, Array]:
    """(roofline_ms, feature matrix) for kernels of ``op_class`` on the given specs."""
    sms, gflops, gbs, l2_mb = (np.asarray(spec[key], dtype=np.float64) for key in _SPEC)
    d = {key: np.asarray(dims[key], dtype=np.float64) for key in DIMS[op_class]}
    extra: dict[str, Array]
    if op_class in ("linear", "bmm"):
        b, m, n, k = d["B"], d["M"], d["N"], d["K"]
        flops = 2.0 * b * m * n * k
        weights = k * n * (b if op_class == "bmm" else 1.0)
        moved = _BYTES * (b * m * k + weights + b * m * n)
        rows = m * b if op_class == "linear" else m
        extra = _gemm(rows, n, k, np.ones_like(b) if op_class == "linear" else b, sms)
    elif op_class == "conv":
        b, cin, cout = d["B"], d["Cin"], d["Cout"]
        kernel, size, stride, pad = d["Kernel"], d["Input"], d["Stride"], d["Padding"]
        out_size = np.maximum(np.floor((size + 2 * pad - kernel) / stride) + 1, 1.0)
        gemm_m, gemm_k = b * out_size**2, cin * kernel**2
        flops = 2.0 * gemm_m * cout * gemm_k
        moved = _BYTES * (b * cin * size**2 + cout * gemm_k + gemm_m * cout)
        extra = _gemm(gemm_m, cout, gemm_k, np.ones_like(b), sms)
        extra |= {"log_kernel": np.log2(kernel), "stride": stride, "log_size": np.log2(size)}
    elif op_class == "elementwise":
        count, inputs, heavy = d["N"], d["Inputs"], d["Heavy"]
        flops = count * (1.0 + 15.0 * heavy)
        moved = _BYTES * count * (inputs + 1.0)
        log_waves, fill = _waves(count / 512.0, sms)  # 128 threads x 4 elements a block
        extra = {
            "log_count": np.log2(count),
            "inputs": inputs,
            "heavy": heavy,
            "log_waves": log_waves,
            "fill": fill,
        }
    elif op_class in ("ln", "softmax"):
        rows, width = d["B"], d["H"]
        count = rows * width
        flops = count * (8.0 if op_class == "ln" else 5.0)
        moved = _BYTES * 2.0 * count
        log_waves, fill = _waves(rows, sms)
        extra = {
            "log_rows": np.log2(rows),
            "log_width": np.log2(width),
            "log_waves": log_waves,
            "fill": fill,
        }
    else:
        raise ValueError(f"unknown operator class {op_class!r}")
    compute_ms = flops / (gflops * 1e6)
    memory_ms = moved / (gbs * 1e6)
    roofline_ms = np.maximum(compute_ms, memory_ms)
    common = {
        "log_roofline_us": np.log2(roofline_ms * 1e3),
        "log_intensity_over_ridge": np.log2((flops / moved) / (gflops / gbs)),
        "log_bytes_over_l2": np.log2(moved / (l2_mb * 1e6)),
        "log_flops_per_sm": np.log2(flops / sms),
        # Spec ratios, never the name: low bytes-per-FLOP boards (P4, T4) are the
        # power-limited ones that sustain far below their boost-clock peak.
        "log_ridge": np.log2(gflops / gbs),
        "log_gflops_per_sm": np.log2(gflops / sms),
    }
    columns = common | extra
    FEATURE_NAMES.setdefault(op_class, tuple(columns))
    return roofline_ms, np.column_stack(list(columns.values()))
