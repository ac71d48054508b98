"""The measured GPUs' specs, and the batch roofline that scales step time across them.

``GPU_SPECS`` is derived from the one GPU table (``specs.DATASHEETS``), with Gavel's
assumed FP32 peaks as the only override. Light on imports (numpy, scipy; scipy late)
because the planner's adapter loads it for every plan. See ``gavel_crosshw`` for the
evaluation and the data sources.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tools.estimators.gpu.specs import GpuSpec, datasheet_spec
from tools.planning.gavel_fit import GAVEL_PEAK_TFLOPS

__all__ = ["GPU_BOARDS", "GPU_SPECS", "BatchRoofline", "GPUPoint"]

GPU_BOARDS: dict[str, str] = {
    "k80": "NVIDIA Tesla K80 (one GK210)",  # one Gavel "GPU" is one die of the board
    "p100": "NVIDIA Tesla P100 PCIe 16GB",  # Gavel's cloud boards as gavel_fit assumes them
    "v100": "NVIDIA Tesla V100 SXM2 16GB",  # (AWS p3: V100 SXM2 16GB)
    "t4": "NVIDIA Tesla T4",  # Pollux's testbed, AWS g4dn
}
"""The datasheet row (``specs.DATASHEETS``) of each GPU the measurements name."""


def _board(gpu: str) -> GpuSpec:
    """A measured GPU's datasheet row, with the FP32 peak Gavel's fit assumes where it
    assumes one (``gavel_fit.GAVEL_PEAK_TFLOPS``: the P100's rated 9.3 TFLOPS against the
    table's 9519 GFLOP/s, one K80 die's 4.365 against 4.370)."""
    sheet = datasheet_spec(GPU_BOARDS[gpu])
    if gpu not in GAVEL_PEAK_TFLOPS:
        return sheet
    return sheet.model_copy(update={"fp32_gflops": GAVEL_PEAK_TFLOPS[gpu] * 1000})


# Derived from the one GPU table: memory, bandwidth (and every figure but Gavel's FP32
# peaks) are the datasheet's.
GPU_SPECS: dict[str, GpuSpec] = {gpu: _board(gpu) for gpu in GPU_BOARDS}


@dataclass(frozen=True, slots=True)
class GPUPoint:
    model: str
    batch_size: int
    gpu: str
    step_s: float
    source: str


def _overhead_and_work(points: Sequence[GPUPoint]) -> tuple[float, float]:
    """Non-negative least squares of step time on (1, batch): overhead s, s per sample.

    Two unknowns: the unconstrained fit where both are >= 0, else the better of the two
    one-term fits (each >= 0), which is then the constrained optimum."""
    batch = np.array([p.batch_size for p in points], dtype=np.float64)
    step = np.array([p.step_s for p in points])
    design = np.column_stack([np.ones_like(batch), batch])
    coef = np.linalg.lstsq(design, step, rcond=None)[0]
    if np.any(coef < 0):
        fits = [
            np.array([max(float(step.mean()), 0.0), 0.0]),
            np.array([0.0, max(float(batch @ step) / float(batch @ batch), 0.0)]),
        ]
        coef = min(fits, key=lambda c: float(np.sum((design @ c - step) ** 2)))
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
