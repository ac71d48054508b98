"""Fitting the analytic model's GPU efficiency to Gavel's measured training throughputs.

Gavel (Narayanan et al., OSDI 2020; MIT licence) measured steps/s of real training jobs on
K80, P100 and V100 GPUs (``shared/data/dnn_profiles/gavel/physical_cluster_throughputs.json``,
key ``"('ResNet-50 (batch size 64)', 1)"`` -> ``{"null": isolated steps/s, ...}``). The
analytic model says one training step takes

    step_s = overhead_s + 3 * forward_flops_per_sample * batch / (peak_fp32 * efficiency)

(backward ~ 2x forward, Kaplan et al. 2020). ``fit_gpu_efficiency`` finds ``overhead_s``
and ``efficiency`` by least squares on the *relative* error, and reports how wrong the
fitted model is: in sample, per GPU, leaving one GPU out, and on K80 (left out of the fit:
Kepler is in no catalog and runs far below its peak).

Only the two Gavel workloads whose FLOPs are well established take part: ResNet-50 on
ImageNet (224x224) and ResNet-18 on CIFAR-10 (32x32, the CIFAR variant without the
ImageNet stem). Gavel's Transformer, LM, Recommendation, CycleGAN and A3C runs use
sequence lengths and sizes the file does not state.

The fitted constants live in ``tools.planning.hardware`` so planning never reads this
file at run time; ``tests/tools/planning/test_analytic.py`` refits and checks they agree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowledge_base.errors import InvalidInputError

__all__ = [
    "FIT_GPUS",
    "GAVEL_FORWARD_FLOPS",
    "GAVEL_PEAK_TFLOPS",
    "GavelFit",
    "GavelPoint",
    "fit_gpu_efficiency",
    "load_gavel_points",
]

# Peak FP32 of the GPUs Gavel measured on. The file does not name the exact boards; these
# are the boards of the cloud instances the Gavel paper's cluster used (assumed):
# V100 SXM2 (AWS p3; NVIDIA V100 datasheet: 15.7 TFLOPS), P100 PCIe (9.3 TFLOPS, P100
# datasheet), K80 one GK210 die at boost clock (8.73 TFLOPS per two-die board, K80
# datasheet). The boards' other figures are the GPU table's
# (``tools.estimators.gpu.gavel_roofline.GPU_BOARDS``); these peaks override its FP32 there.
GAVEL_PEAK_TFLOPS = {"v100": 15.7, "p100": 9.3, "k80": 8.73 / 2}

# True forward FLOPs (2 x multiply-accumulates) per sample of the workloads Gavel ran.
GAVEL_FORWARD_FLOPS = {
    # ImageNet ResNet-50 at 224x224: 4.09 GMACs (torchvision model card; He et al. 2016
    # Table 1 gives 3.8e9 multiply-adds for the original).
    "ResNet-50": 2 * 4.09e9,
    # CIFAR-10 ResNet-18 (kuangliu/pytorch-cifar, the variant Gavel's workload uses):
    # 0.556 GMACs per 32x32 image.
    "ResNet-18": 2 * 0.556e9,
}

FIT_GPUS = ("p100", "v100")
"""GPUs the efficiency is fitted on: the architectures nearest those in the catalog."""

_KEY = re.compile(r"^\('(?P<model>.+) \(batch size (?P<batch>\d+)\)', (?P<scale>\d+)\)$")


@dataclass(frozen=True, slots=True)
class GavelPoint:
    """One isolated, single-GPU measurement."""

    gpu: str
    model: str
    batch_size: int
    step_s: float

    @property
    def flops_over_peak_s(self) -> float:
        """Training FLOPs of one step over the GPU's peak: the step time at 100% efficiency."""
        flops = 3 * GAVEL_FORWARD_FLOPS[self.model] * self.batch_size
        return flops / (GAVEL_PEAK_TFLOPS[self.gpu] * 1e12)


@dataclass(frozen=True, slots=True)
class GavelFit:
    """The fitted constants and how far the model is from the measurements (MAPE)."""

    efficiency: float
    overhead_s: float
    points: int
    mape: float
    mape_by_gpu: dict[str, float]
    leave_one_gpu_out_mape: dict[str, float]
    k80_mape: float


def load_gavel_points(path: Path) -> list[GavelPoint]:
    """Isolated single-GPU points of the workloads with known FLOPs; OOM (0 steps/s) dropped."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read Gavel throughputs: {exc}", source=str(path)) from exc
    points = []
    for gpu in GAVEL_PEAK_TFLOPS:
        for key, measured in document.get(gpu, {}).items():
            match = _KEY.match(key)
            if match is None or match["model"] not in GAVEL_FORWARD_FLOPS:
                continue
            if int(match["scale"]) != 1:
                continue
            steps_per_s = float(measured["null"])
            if steps_per_s <= 0:  # Gavel records an out-of-memory run as 0 steps/s
                continue
            points.append(GavelPoint(gpu, match["model"], int(match["batch"]), 1 / steps_per_s))
    return points


def _solve(points: list[GavelPoint]) -> tuple[float, float]:
    """(overhead_s, 1/efficiency) minimising the squared relative error of step_s."""
    design = np.array([[1 / p.step_s, p.flops_over_peak_s / p.step_s] for p in points])
    (overhead_s, inverse_efficiency), *_ = np.linalg.lstsq(design, np.ones(len(points)), rcond=None)
    return float(overhead_s), float(inverse_efficiency)


def _mape(points: list[GavelPoint], overhead_s: float, inverse_efficiency: float) -> float:
    errors = [
        abs(overhead_s + inverse_efficiency * p.flops_over_peak_s - p.step_s) / p.step_s
        for p in points
    ]
    return float(np.mean(errors))


def fit_gpu_efficiency(points: list[GavelPoint]) -> GavelFit:
    """Fit on ``FIT_GPUS``; report in-sample, per-GPU, leave-one-GPU-out and K80 errors."""
    fitted = [p for p in points if p.gpu in FIT_GPUS]
    if len(fitted) < 3:
        raise InvalidInputError("too few Gavel points to fit", field="points", value=len(fitted))
    overhead_s, inverse = _solve(fitted)
    leave_out = {}
    for gpu in FIT_GPUS:
        train = [p for p in fitted if p.gpu != gpu]
        test = [p for p in fitted if p.gpu == gpu]
        leave_out[gpu] = _mape(test, *_solve(train))
    return GavelFit(
        efficiency=1 / inverse,
        overhead_s=overhead_s,
        points=len(fitted),
        mape=_mape(fitted, overhead_s, inverse),
        mape_by_gpu={
            gpu: _mape([p for p in fitted if p.gpu == gpu], overhead_s, inverse) for gpu in FIT_GPUS
        },
        leave_one_gpu_out_mape=leave_out,
        k80_mape=_mape([p for p in points if p.gpu == "k80"], overhead_s, inverse),
    )
