"""Online learning for the per-operator GPU model: a per-GPU correction fitted on the
center's own measurements.

The per-operator model is trained on NeuSight's kernels and never saw a center's GPUs,
drivers or data pipelines. A center does measure: Profiling's downsized runs on GPU
partitions (step time of the workload itself) and finished GPU jobs of planned DNN
workloads (run time less the start-up, over the planned steps). Each measurement is
stored as a ``ProfileRecord`` of family ``GPU_STEP_FAMILY`` with the workload it ran
(``measurement_record``). ``fit_correction`` fits, per GPU model, the median log ratio
of measured to predicted step time, shrunk toward the pooled median by the GPU's row
count (the pool weighs as much as ``SHRINK_ROWS`` rows), so a GPU with one measurement
moves a little and one with many moves to its own median; GPUs never measured get the
pooled factor. ``heldout_errors`` scores a correction (or none: the model as shipped) on
rows it was not fitted on; Model Promotion promotes a new correction only when it errs
less there than the one serving.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import ProfileRecord, ProfileStatus
from knowledge_base.workload import DNNTraining, Optimizer

__all__ = [
    "GPU_CORRECTION_KIND",
    "GPU_CORRECTION_TARGET",
    "GPU_STEP_FAMILY",
    "SHRINK_ROWS",
    "GpuStepCorrection",
    "GpuStepRow",
    "fit_correction",
    "heldout_errors",
    "load_correction",
    "measurement_record",
    "predicted_step_s",
    "rows_from_records",
]

GPU_STEP_FAMILY = "gpu_step"
GPU_CORRECTION_TARGET = "dnn_gpu_step_s"
GPU_CORRECTION_KIND = "gpu-opcost-correction"
SHRINK_ROWS = 1.0


class GpuStepRow(BaseModel):
    """One measured training step on a GPU beside the shipped model's prediction."""

    model_config = ConfigDict(frozen=True)

    id: str
    gpu_model: str
    measured_step_s: float = Field(gt=0)
    predicted_step_s: float = Field(gt=0)
    measured_at: datetime

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured_step_s / self.predicted_step_s)


class GpuStepCorrection(BaseModel):
    """Multiplicative factors on the per-operator model's step time, per GPU model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_estimator: str = Field(description="The per-operator model it corrects")
    factors: dict[str, float] = Field(description="GPU model -> factor")
    pooled_factor: float = Field(gt=0, description="For GPUs with no measurement")
    rows: dict[str, int] = Field(description="Measurements per GPU model it was fitted on")

    def factor(self, gpu_model: str) -> float:
        return self.factors.get(gpu_model, self.pooled_factor)

    def describe(self, gpu_model: str) -> str:
        rows = self.rows.get(gpu_model, 0)
        where = f"{rows} measurements of this GPU" if rows else "no measurement of this GPU"
        return f"x{self.factor(gpu_model):.2f} from the center's own runs ({where})"


def fit_correction(rows: Sequence[GpuStepRow], base_estimator: str) -> GpuStepCorrection:
    """Per-GPU median log ratio, shrunk toward the pooled median by the GPU's rows."""
    if not rows:
        raise InvalidInputError("no GPU step measurements to fit on", field="rows", value=0)
    pooled = statistics.median(r.log_ratio for r in rows)
    by_gpu: dict[str, list[float]] = {}
    for row in rows:
        by_gpu.setdefault(row.gpu_model, []).append(row.log_ratio)
    factors: dict[str, float] = {}
    for gpu, ratios in by_gpu.items():
        weight = len(ratios) / (len(ratios) + SHRINK_ROWS)
        factors[gpu] = math.exp(weight * statistics.median(ratios) + (1 - weight) * pooled)
    return GpuStepCorrection(
        base_estimator=base_estimator,
        factors=factors,
        pooled_factor=math.exp(pooled),
        rows={gpu: len(ratios) for gpu, ratios in by_gpu.items()},
    )


def heldout_errors(rows: Sequence[GpuStepRow], correction: GpuStepCorrection | None) -> float:
    """MAPE of the (corrected) per-operator step time on ``rows``."""
    if not rows:
        raise InvalidInputError("no held-out measurements", field="rows", value=0)
    errors = []
    for row in rows:
        predicted = row.predicted_step_s * (correction.factor(row.gpu_model) if correction else 1)
        errors.append(abs(predicted - row.measured_step_s) / row.measured_step_s)
    return sum(errors) / len(errors)


def load_correction(path: Path) -> GpuStepCorrection:
    """A promoted correction's artifact; OSError/ValueError when it cannot be read."""
    return GpuStepCorrection.model_validate_json(path.read_text(encoding="utf-8"))


def measurement_record(
    id: str,
    workload: DNNTraining,
    *,
    batch_size: int,
    gpus: int,
    gpu_model: str,
    step_s: float,
    source: str,
    hardware: dict[str, str | int | float] | None = None,
    created_at: datetime | None = None,
) -> ProfileRecord:
    """A GPU step measurement as the knowledge base stores it (family ``gpu_step``)."""
    if step_s <= 0:
        raise InvalidInputError("must be positive", field="step_s", value=step_s)
    extra = {"created_at": created_at} if created_at is not None else {}
    return ProfileRecord(
        id=id,
        family=GPU_STEP_FAMILY,
        model=workload.model,
        config={
            "batch_size": batch_size,
            "gpus": gpus,
            "workload": workload.model_dump_json(),
            "source": source,
        },
        hardware={**(hardware or {}), "gpu_model": gpu_model, "gpus": gpus},
        status=ProfileStatus.OK,
        iteration_s=step_s,
        **extra,
    )


def predicted_step_s(workload: DNNTraining, batch_size: int, gpus: int, gpu: GPUSpec) -> float:
    """The shipped per-operator model's p50 step time (no correction) of one option."""
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import spec_for_catalog_gpu
    from tools.estimators.gpu.workload_trace import kernels_at
    from tools.planning import hardware

    per_gpu = math.ceil(batch_size / gpus)
    kernels, parameters = kernels_at(workload, per_gpu)
    step = load_step_model().estimate(
        kernels,
        spec_for_catalog_gpu(gpu),
        parameters=parameters,
        optimizer="sgd" if workload.optimizer is Optimizer.SGD else "adam",
        gpus=gpus,
        link_gbs=hardware.gpu_link_gbs(gpu),
    )
    return step.step_s.p50


def rows_from_records(
    records: Sequence[ProfileRecord], gpus_by_model: dict[str, GPUSpec]
) -> tuple[list[GpuStepRow], list[str]]:
    """The measurements with the shipped model's prediction beside each, oldest first, and
    why any was left out (an unknown GPU, a workload that no longer traces)."""
    rows: list[GpuStepRow] = []
    skipped: list[str] = []
    for record in sorted(records, key=lambda r: (r.created_at, r.id)):
        if record.family != GPU_STEP_FAMILY or record.iteration_s is None:
            continue
        gpu_model = str(record.hardware.get("gpu_model", ""))
        gpu = gpus_by_model.get(gpu_model)
        if gpu is None:
            skipped.append(f"{record.id}: GPU {gpu_model!r} is not in the catalog")
            continue
        try:
            workload = DNNTraining.model_validate(json.loads(str(record.config["workload"])))
            predicted = predicted_step_s(
                workload, int(record.config["batch_size"]), int(record.config["gpus"]), gpu
            )
        except (InvalidInputError, KeyError, ValueError) as exc:
            skipped.append(f"{record.id}: {exc}")
            continue
        if predicted <= 0 or record.iteration_s <= 0:
            skipped.append(f"{record.id}: non-positive step time")
            continue
        rows.append(
            GpuStepRow(
                id=record.id,
                gpu_model=gpu_model,
                measured_step_s=record.iteration_s,
                predicted_step_s=predicted,
                measured_at=record.created_at,
            )
        )
    return rows, skipped
