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
pooled factor.

A step the host cannot launch fast enough takes what the host takes, whatever the GPU: a
small model's step on an H100 measured 1-20 ms where its kernels need a tenth of that,
about 65 us per operator on one lent machine and 0.4-0.9 of that on another of the same
kind (``data/gpu_measurements/``). So, for a GPU model with at least ``HOST_MIN_ROWS``
measurements that say how many operators their step dispatches, the fit also finds the
host's seconds per operator: step = max(factor x predicted, host x operators), the pair
that errs least (mean absolute log ratio) over that GPU's rows, kept only where it errs
less than ``HOST_GAIN`` of the factor alone's error (not for noise). The host belongs to
the center's nodes, so a GPU never measured gets no floor. ``heldout_errors`` scores a
correction (or none: the model as shipped) on rows it was not fitted on; Model Promotion
promotes a new correction only when it errs less there than the one serving.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import ProfileRecord, ProfileStatus
from knowledge_base.workload import DNNTraining, Optimizer
from tools.estimators.gpu.trace_folders import TraceFolders

__all__ = [
    "GPU_CORRECTION_KIND",
    "GPU_CORRECTION_TARGET",
    "GPU_STEP_FAMILY",
    "HOST_MIN_ROWS",
    "SHRINK_ROWS",
    "GpuStepCorrection",
    "GpuStepRow",
    "fit_correction",
    "heldout_errors",
    "load_correction",
    "measurement_record",
    "predicted_step",
    "predicted_step_s",
    "rows_from_records",
]

GPU_STEP_FAMILY = "gpu_step"
GPU_CORRECTION_TARGET = "dnn_gpu_step_s"
GPU_CORRECTION_KIND = "gpu-opcost-correction"
SHRINK_ROWS = 1.0
HOST_MIN_ROWS = 5
# A floor is kept where it cuts the factor's error by more than a tenth: not for noise.
HOST_GAIN = 0.9
_GRID = 64  # candidate values of the factor and of the host's time per operator


class GpuStepRow(BaseModel):
    """One measured training step on a GPU beside the shipped model's prediction."""

    model_config = ConfigDict(frozen=True)

    id: str
    gpu_model: str
    measured_step_s: float = Field(gt=0)
    predicted_step_s: float = Field(gt=0)
    measured_at: datetime
    operators: int = Field(
        default=0, ge=0, description="Operators the step dispatches (0: not known)"
    )

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
    host_s_per_operator: dict[str, float] = Field(
        default_factory=dict,
        description="GPU model -> the host's seconds per dispatched operator (a step floor)",
    )

    def factor(self, gpu_model: str) -> float:
        return self.factors.get(gpu_model, self.pooled_factor)

    def host_floor_s(self, gpu_model: str, operators: int) -> float:
        """The least a step of ``operators`` dispatched operators takes on this GPU's
        nodes (0 where the host was not fitted or the count is not known)."""
        return self.host_s_per_operator.get(gpu_model, 0.0) * operators

    def step_s(self, gpu_model: str, predicted_s: float, operators: int = 0) -> float:
        """A predicted step time, corrected."""
        return max(predicted_s * self.factor(gpu_model), self.host_floor_s(gpu_model, operators))

    def describe(self, gpu_model: str) -> str:
        rows = self.rows.get(gpu_model, 0)
        where = f"{rows} measurements of this GPU" if rows else "no measurement of this GPU"
        host = self.host_s_per_operator.get(gpu_model)
        floor = f", at least {host * 1e6:.0f} us a dispatched operator" if host else ""
        return f"x{self.factor(gpu_model):.2f}{floor} from the center's own runs ({where})"


def _host_fit(rows: Sequence[GpuStepRow]) -> tuple[float, float, float]:
    """(log factor, host s per operator, mean absolute log error) of the best pair on a
    grid of quantiles; memory grows with the rows times the grid, not its square."""
    measured = np.array([r.measured_step_s for r in rows])
    predicted = np.array([r.predicted_step_s for r in rows])
    operators = np.array([float(r.operators) for r in rows])
    levels = np.quantile(np.log(measured / predicted), np.linspace(0, 1, _GRID))
    scaled = np.exp(levels)[:, None] * predicted[None, :]  # factors x rows
    best = (0.0, 0.0, math.inf)
    for host in np.concatenate(
        [[0.0], np.quantile(measured / operators, np.linspace(0, 1, _GRID))]
    ):
        errors = np.abs(np.log(np.maximum(scaled, host * operators) / measured)).mean(axis=1)
        i = int(np.argmin(errors))
        if errors[i] < best[2]:
            best = (float(levels[i]), float(host), float(errors[i]))
    return best


def fit_correction(rows: Sequence[GpuStepRow], base_estimator: str) -> GpuStepCorrection:
    """Per-GPU median log ratio, shrunk toward the pooled median by the GPU's rows; and,
    for a GPU with enough rows that count their operators, the host's floor with the
    factor it goes with, where the pair errs less than the factor alone."""
    if not rows:
        raise InvalidInputError("no GPU step measurements to fit on", field="rows", value=0)
    pooled = statistics.median(r.log_ratio for r in rows)
    by_gpu: dict[str, list[GpuStepRow]] = {}
    for row in rows:
        by_gpu.setdefault(row.gpu_model, []).append(row)
    factors: dict[str, float] = {}
    hosts: dict[str, float] = {}
    for gpu, mine in by_gpu.items():
        level = statistics.median(r.log_ratio for r in mine)
        counted = [r for r in mine if r.operators > 0]
        if len(counted) >= HOST_MIN_ROWS:
            alone = statistics.fmean(abs(r.log_ratio - level) for r in counted)
            joint_level, host, joint = _host_fit(counted)
            if host > 0 and joint < HOST_GAIN * alone:
                level, hosts[gpu] = joint_level, host
        weight = len(mine) / (len(mine) + SHRINK_ROWS)
        factors[gpu] = math.exp(weight * level + (1 - weight) * pooled)
    return GpuStepCorrection(
        base_estimator=base_estimator,
        factors=factors,
        pooled_factor=math.exp(pooled),
        rows={gpu: len(mine) for gpu, mine in by_gpu.items()},
        host_s_per_operator=hosts,
    )


def heldout_errors(rows: Sequence[GpuStepRow], correction: GpuStepCorrection | None) -> float:
    """MAPE of the (corrected) per-operator step time on ``rows``."""
    if not rows:
        raise InvalidInputError("no held-out measurements", field="rows", value=0)
    errors = []
    for row in rows:
        predicted = (
            correction.step_s(row.gpu_model, row.predicted_step_s, row.operators)
            if correction
            else row.predicted_step_s
        )
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
    return predicted_step(workload, batch_size, gpus, gpu)[0]


def predicted_step(
    workload: DNNTraining,
    batch_size: int,
    gpus: int,
    gpu: GPUSpec,
    traces: TraceFolders | None = None,
) -> tuple[float, int]:
    """The shipped per-operator model's p50 step time (no correction) of one option and
    the operators its step dispatches (0: not known); ``traces``: where the step's traces
    persist (default: nowhere)."""
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import spec_for_catalog_gpu
    from tools.estimators.gpu.workload_trace import kernels_at
    from tools.planning import hardware

    per_gpu = math.ceil(batch_size / gpus)
    kernels, parameters = kernels_at(workload, per_gpu, traces or TraceFolders())
    step = load_step_model().estimate(
        kernels,
        spec_for_catalog_gpu(gpu),
        parameters=parameters,
        optimizer="sgd" if workload.optimizer is Optimizer.SGD else "adam",
        gpus=gpus,
        link_gbs=hardware.gpu_link_gbs(gpu),
    )
    return step.step_s.p50, kernels.host_operators


def rows_from_records(
    records: Sequence[ProfileRecord],
    gpus_by_model: dict[str, GPUSpec],
    traces: TraceFolders | None = None,
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
            predicted, operators = predicted_step(
                workload,
                int(record.config["batch_size"]),
                int(record.config["gpus"]),
                gpu,
                traces,
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
                operators=operators,
            )
        )
    return rows, skipped
