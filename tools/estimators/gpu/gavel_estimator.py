"""The planner's seam for the trained DNN estimators (``tools.planning.estimation``).

``GPURooflineEstimator`` answers single-GPU DNN options from real GPU measurements
(Gavel's K80, P100, V100; ``data/dnn_profiles/gavel_single_gpu.json``) through the
cross-hardware white-box model (``crosshw.BatchRoofline``: per-step overhead and
per-sample work from the nearest measured GPU, work scaled by FP32 peak). It answers
only where it is confident, and says why not otherwise, so the planner falls through to
the analytic fallback:

- the workload is a model Gavel measured at the input it measured (ResNet-50 at
  3x224x224, ResNet-18 at 3x32x32), in FP32, with a batch size inside the measured range;
- the option is one GPU on one node whose FP32 peak lies within the measured GPUs'
  (4.4-15.7 TFLOPS: P100, V100, RTX 5000 in the seeded catalog; not A100/H100).

Run time comes from the trained model; memory (host and GPU) from the analytic
fallback, which this estimator has no data to improve. The CPU estimators of the bundle
are trained on this project's development machine and answer ``rightsize estimate
--hardware local``; no catalog CPU matches that machine, so they never answer here.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import numpy as np

from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining, Precision, WorkloadSpec
from tools.estimators.cpu.paths import default_dataset_path
from tools.estimators.gpu.gavel_roofline import GPU_SPECS, BatchRoofline, GPUPoint
from tools.planning.analytic import (
    STARTUP_LOW_S,
    STARTUP_POINT_S,
    STARTUP_S,
    AnalyticDNNEstimator,
)
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload

__all__ = [
    "GPU_ROOFLINE_ID",
    "GPURooflineEstimator",
    "gavel_points",
    "planner_estimators",
    "trained_roofline",
]

GPU_ROOFLINE_ID = "dnn-gpu-roofline-gavel"
_LABEL = "trained on Gavel GPU measurements (run time); memory: analytic"
# Zoo name and input shape -> the Gavel workload measured at exactly that input.
_GAVEL_WORKLOADS: dict[tuple[str, tuple[int, ...]], str] = {
    ("resnet50", (3, 224, 224)): "ResNet-50",
    ("resnet50", ()): "ResNet-50",  # the zoo's reference input is 3x224x224
    ("resnet18", (3, 32, 32)): "ResNet-18",
}


def gavel_points(path: Path | None = None) -> list[GPUPoint]:
    """The committed slice of Gavel: single-GPU step times (0 steps/s: did not fit)."""
    source = path or default_dataset_path().parent / "gavel_single_gpu.json"
    data = json.loads(source.read_text())
    points: list[GPUPoint] = []
    for gpu, rows in data["steps_per_s"].items():
        for name, throughput in rows.items():
            if not throughput:
                continue
            model, rest = name.split(" (batch size ")
            points.append(GPUPoint(model, int(rest.rstrip(")")), gpu, 1.0 / throughput, "gavel"))
    return points


@cache
def trained_roofline() -> tuple[
    BatchRoofline, tuple[float, float, float], dict[str, tuple[int, int]]
]:
    """The roofline on all GPUs, its leave-one-GPU-out error (MAPE, q10, q90), batch ranges."""
    points = gavel_points()
    errors: list[float] = []
    for held in sorted({p.gpu for p in points}):
        model = BatchRoofline().fit([p for p in points if p.gpu != held])
        target = [p for p in points if p.gpu == held]
        predicted = model.predict(target)
        for p, value in zip(target, predicted, strict=True):
            if math.isfinite(value):
                errors.append((value - p.step_s) / p.step_s)
    relative = np.array(errors)
    spread = (
        float(np.mean(np.abs(relative))),
        float(np.quantile(relative, 0.1)),
        float(np.quantile(relative, 0.9)),
    )
    ranges: dict[str, tuple[int, int]] = {}
    for p in points:
        low, high = ranges.get(p.model, (p.batch_size, p.batch_size))
        ranges[p.model] = (min(low, p.batch_size), max(high, p.batch_size))
    return BatchRoofline().fit(points), spread, ranges


class GPURooflineEstimator:
    """Single-GPU run time of Gavel's workloads on GPUs within the measured range."""

    def __init__(self, fallback: AnalyticDNNEstimator | None = None) -> None:
        self._fallback = fallback or AnalyticDNNEstimator()

    @property
    def estimator_id(self) -> str:
        return GPU_ROOFLINE_ID

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining):
            return NoEstimate(f"{GPU_ROOFLINE_ID}: only DNN training")
        key = (
            workload.model.lower().replace("-", "").replace("_", ""),
            tuple(workload.input_shape),
        )
        gavel_model = _GAVEL_WORKLOADS.get(key)
        if gavel_model is None:
            return NoEstimate(
                f"{GPU_ROOFLINE_ID}: no measurements of {workload.model} at this input"
            )
        if workload.precision is not Precision.FP32:
            return NoEstimate(f"{GPU_ROOFLINE_ID}: measured in FP32 only")
        if candidate.gpus_per_node != 1 or candidate.nodes != 1:
            return NoEstimate(f"{GPU_ROOFLINE_ID}: measured on single GPUs only")
        gpu = candidate.node_type.gpu
        if gpu is None or gpu.fp32_tflops is None:
            return NoEstimate(f"{GPU_ROOFLINE_ID}: the GPU's FP32 peak is not in the catalog")
        peaks = [s.fp32_tflops for s in GPU_SPECS.values() if s is not GPU_SPECS["t4"]]
        if not min(peaks) <= gpu.fp32_tflops <= max(peaks):
            return NoEstimate(
                f"{GPU_ROOFLINE_ID}: {gpu.model} ({gpu.fp32_tflops} TFLOPS) is outside the "
                f"measured GPUs' range ({min(peaks)}-{max(peaks)})"
            )
        model, (mape, q10, q90), ranges = trained_roofline()
        batch = candidate.batch_size or workload.batch_sizes[0]
        low_batch, high_batch = ranges[gavel_model]
        if not low_batch <= batch <= high_batch:
            return NoEstimate(
                f"{GPU_ROOFLINE_ID}: batch {batch} outside {gavel_model}'s measured "
                f"{low_batch}-{high_batch}"
            )
        base = self._fallback.estimate(workload, candidate)
        if isinstance(base, NoEstimate):
            return base
        step_s = model.step_s(gavel_model, batch, gpu.fp32_tflops)
        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        point = STARTUP_POINT_S + steps * step_s
        # Truth = prediction / (1 + relative error): the error quantiles bound the truth.
        # Start-up has its own range (the analytic model's), which the error does not scale.
        runtime = Interval(
            point=point,
            low=min(point, STARTUP_LOW_S + steps * step_s / (1 + max(q90, 0.0))),
            high=max(point, STARTUP_S + steps * step_s / (1 + min(q10, 0.0))),
            coverage=0.8,
            coverage_basis="held_out",  # leave-one-GPU-out error quantiles
        )
        option = base.option.model_copy(update={"walltime_s": max(1, math.ceil(runtime.high))})
        return base.model_copy(
            update={
                "option": option,
                "runtime_s": runtime,
                "estimator_id": GPU_ROOFLINE_ID,
                "validation_error": mape,
                "label": _LABEL,
            }
        )


def planner_estimators(spec: WorkloadSpec) -> list[Estimator]:
    """The trained DNN estimators to put in front of the planner's fallbacks."""
    if not isinstance(spec.workload, DNNTraining):
        return []
    return [GPURooflineEstimator()]
