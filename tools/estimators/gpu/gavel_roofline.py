"""GPUs described by their specs, and the batch roofline that scales step time across them.

Light on imports (numpy, scipy) because the planner's adapter loads it for every plan.
See ``crosshw`` for the evaluation and the data sources.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tools.planning.gavel_fit import GAVEL_PEAK_TFLOPS

__all__ = ["GPU_SPECS", "BatchRoofline", "GPUPoint", "GPUSpecs"]


@dataclass(frozen=True, slots=True)
class GPUSpecs:
    fp32_tflops: float
    bandwidth_gbs: float
    memory_gb: float
    source: str


# V100 and P100: the boards of Gavel's cloud instances as tools.planning.gavel_fit
# assumes them (V100 SXM2, P100 PCIe), figures from shared/data/centers/hardware.json.
# K80: one GK210 die (what one Gavel "GPU" is): FP32 from gavel_fit, 240 GB/s and
# 12 GB per die (half the K80 board's 480 GB/s, 24 GB; NVIDIA K80 datasheet).
# T4: NVIDIA T4 datasheet (8.1 TFLOPS FP32, 320 GB/s, 16 GB GDDR6).
GPU_SPECS: dict[str, GPUSpecs] = {
    "k80": GPUSpecs(GAVEL_PEAK_TFLOPS["k80"], 240.0, 12.0, "NVIDIA K80 datasheet, one die"),
    "p100": GPUSpecs(GAVEL_PEAK_TFLOPS["p100"], 732.0, 16.0, "hardware.json P100 PCIe 16GB"),
    "v100": GPUSpecs(GAVEL_PEAK_TFLOPS["v100"], 900.0, 16.0, "hardware.json V100 SXM2"),
    "t4": GPUSpecs(8.1, 320.0, 16.0, "NVIDIA T4 datasheet"),
}


@dataclass(frozen=True, slots=True)
class GPUPoint:
    model: str
    batch_size: int
    gpu: str
    step_s: float
    source: str


def _overhead_and_work(points: Sequence[GPUPoint]) -> tuple[float, float]:
    """Non-negative least squares of step time on (1, batch): overhead s, s per sample."""
    from scipy.optimize import nnls

    batch = np.array([p.batch_size for p in points], dtype=np.float64)
    step = np.array([p.step_s for p in points])
    coef, _ = nnls(np.column_stack([np.ones_like(batch), batch]), step)
    return float(coef[0]), float(coef[1])


class BatchRoofline:
    """Overhead + per-sample work from the nearest training GPU, work scaled by FP32 peak."""

    def __init__(self) -> None:
        self.fits: dict[tuple[str, str], tuple[float, float]] = {}

    def fit(self, points: Sequence[GPUPoint]) -> BatchRoofline:
        groups: dict[tuple[str, str], list[GPUPoint]] = {}
        for p in points:
            groups.setdefault((p.model, p.gpu), []).append(p)
        self.fits = {k: _overhead_and_work(v) for k, v in groups.items() if len(v) >= 2}
        return self

    def step_s(self, model: str, batch_size: int, fp32_tflops: float) -> float:
        """Step time of ``model`` at ``batch_size`` on a GPU of this FP32 peak (NaN: unknown)."""
        known = [gpu for name, gpu in self.fits if name == model]
        if not known:
            return math.nan
        nearest = min(known, key=lambda g: abs(math.log(GPU_SPECS[g].fp32_tflops / fp32_tflops)))
        overhead, per_sample = self.fits[(model, nearest)]
        return overhead + per_sample * batch_size * GPU_SPECS[nearest].fp32_tflops / fp32_tflops

    def predict(self, points: Sequence[GPUPoint]) -> NDArray[np.float64]:
        return np.array(
            [self.step_s(p.model, p.batch_size, GPU_SPECS[p.gpu].fp32_tflops) for p in points]
        )
