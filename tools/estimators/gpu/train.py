"""Fit, validate (leave one GPU out) and ship the per-operator GPU cost model.

    python -m tools.estimators.gpu.train [--out data/gpu_models/opcost.json]

For each training GPU, every operator class is refitted on the other four GPUs' kernels
and the left-out GPU is predicted: per class (kernels) and end to end (NeuSight's whole
model runs on that GPU). The end-to-end log residuals of those folds calibrate p10/p90;
the shipped model is then fitted on all five GPUs. Reads only the shared NeuSight data
(``RIGHTSIZE_NEUSIGHT`` overrides its folder).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.estimators.gpu.estimator import DEFAULT_MODEL_PATH, GpuStepModel
from tools.estimators.gpu.features import OP_CLASSES, class_features
from tools.estimators.gpu.kernels import (
    TRAINING_GPUS,
    KernelRows,
    default_neusight_root,
    load_device_specs,
    load_kernels,
)
from tools.estimators.gpu.neusight import E2ERun, hf_task, load_e2e_runs
from tools.estimators.gpu.opcost import fit_class
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.trace import trace_training_step

__all__ = ["Validation", "e2e_kernels", "fit_all", "main", "validate"]


def fit_all(data: dict[str, KernelRows], exclude: str | None = None) -> GpuStepModel:
    classes = {}
    for op_class in OP_CLASSES:
        rows = data[op_class]
        if exclude is not None:
            rows = rows.subset(rows.gpu != exclude)
        classes[op_class] = fit_class(rows)
    return GpuStepModel(classes)


def e2e_kernels(root: Path, runs: list[E2ERun]) -> dict[tuple[str, bool, int, int], Any]:
    """Traced kernels (and FLOPs) of each distinct model, mode, length and batch."""
    out: dict[tuple[str, bool, int, int], Any] = {}
    for run in runs:
        if run.key in out:
            continue
        task = hf_task(root, run.model, run.seq, run.batch)
        graph = trace_training_step(task, backward=run.train)
        out[run.key] = (kernels_of(graph), sum(p.numel() for p in task.model.parameters()))
    return out


@dataclass(slots=True)
class Validation:
    """Leave-one-GPU-out results: per-class kernel errors and end-to-end predictions."""

    kernel: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    e2e: list[dict[str, Any]] = field(default_factory=list)

    def e2e_log_residuals(self) -> np.ndarray:
        return np.array([np.log(r["measured_ms"] / r["predicted_ms"]) for r in self.e2e])


def _kernel_metrics(model: GpuStepModel, rows: KernelRows) -> dict[str, float]:
    predicted = model.classes[rows.op_class].predict_ms(rows.dims, rows.spec)
    roofline, _ = class_features(rows.op_class, rows.dims, rows.spec)
    actual = rows.latency_ms
    return {
        "kernels": float(len(rows)),
        "mape": float(np.mean(np.abs(predicted / actual - 1))),
        "time_weighted_error": float(np.abs(predicted - actual).sum() / actual.sum()),
        "bias": float(predicted.sum() / actual.sum()),
        "under_rate": float(np.mean(predicted < actual)),
        "roofline_mape": float(np.mean(np.abs(roofline / actual - 1))),
    }


def validate(root: Path, data: dict[str, KernelRows], log: bool = True) -> Validation:
    specs = load_device_specs(root)
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = e2e_kernels(root, runs)
    result = Validation()
    for gpu in TRAINING_GPUS:
        started = time.perf_counter()
        model = fit_all(data, exclude=gpu)
        result.kernel[gpu] = {
            c: _kernel_metrics(model, data[c].subset(data[c].gpu == gpu))
            for c in OP_CLASSES
            if np.any(data[c].gpu == gpu)
        }
        for run in (r for r in runs if r.gpu == gpu):
            kernels, _ = traced[run.key]
            assert isinstance(kernels, GpuKernels)
            point_s, _ = model.forward_backward_s(kernels, specs[gpu])
            result.e2e.append(
                {
                    "gpu": gpu,
                    "model": run.model,
                    "mode": "train" if run.train else "inf",
                    "seq": run.seq,
                    "batch": run.batch,
                    "measured_ms": run.latency_ms,
                    "predicted_ms": point_s * 1e3,
                }
            )
        if log:
            print(f"fold {gpu}: {time.perf_counter() - started:.0f} s", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH)
    parser.add_argument("--neusight", type=Path, default=None)
    args = parser.parse_args(argv)
    root = args.neusight or default_neusight_root()
    started = time.perf_counter()
    data = load_kernels(root)
    validation = validate(root, data)
    residuals = validation.e2e_log_residuals()
    model = fit_all(data)
    ape = [abs(r["predicted_ms"] / r["measured_ms"] - 1) for r in validation.e2e]
    model.log_residual_quantiles = {
        "p10": float(np.quantile(residuals, 0.10)),
        "p50": 0.0,
        "p90": float(np.quantile(residuals, 0.90)),
    }
    model.meta = {
        "version": dt.date.today().strftime("%Y%m%d"),
        "trained_on": list(TRAINING_GPUS),
        "source": "NeuSight ASPLOS'25 artifact kernels (MIT), shared/data/dnn_profiles/neusight",
        "retrain": "python -m tools.estimators.gpu.train --out data/gpu_models/opcost.json",
        "fit_seconds": round(time.perf_counter() - started, 1),
        "validation": {
            "e2e_mape": float(np.mean(ape)),
            "e2e_max_ape": float(np.max(ape)),
            "e2e_runs": validation.e2e,
            "kernel": validation.kernel,
        },
    }
    model.save(args.out)
    print(
        f"saved {args.out}: e2e leave-one-GPU-out MAPE {np.mean(ape):.3f} "
        f"(max {np.max(ape):.3f}) over {len(ape)} runs",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
