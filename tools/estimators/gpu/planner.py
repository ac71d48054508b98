"""The planner's seam for the per-operator GPU estimator (``tools.planning.estimation``).

``GpuOpCostEstimator`` answers DNN training on any GPU option whose GPU the catalog
describes (its datasheet fills SMs, clock and L2): run time from the per-operator model
on the step traced once per model (``workload_trace.kernels_at``: other batch sizes are
derived from two traces), memory and the option's shape from the analytic estimator
(``tools.estimators.gpu.memory.planner`` puts the white-box GPU memory on top). It
declines, with the reason, what it does not model: mixed precision (its kernels are
FP32), CPU-only options, workloads that do not trace; the planner then falls through.
So does an option whose analytic GPU memory is far above the GPU's
(``gpu_memory.planner.far_above_capacity``): refused for memory whatever its time, it is
not worth the kernels' trace.
The chain puts it in only where ``selection.choose_opcost`` says its validation error
beats the fallback's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining, Optimizer, Precision
from tools.estimators.gpu.memory.planner import far_above_capacity, ratio_band
from tools.estimators.gpu.promoted import CorrectedStep, ServingCorrection, gpu_step
from tools.estimators.gpu.specs import GpuSpec
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.lru import BoundedLru
from tools.planning import hardware
from tools.planning.analytic import (
    STARTUP_LOW_S,
    STARTUP_POINT_S,
    STARTUP_S,
    AnalyticDNNEstimator,
)
from tools.planning.builder import gpu_memory_bound
from tools.planning.estimation import Candidate, NoEstimate, Workload

if TYPE_CHECKING:  # torch loads with the traces, on first use
    from tools.estimators.gpu.workload_trace import StepKey

__all__ = ["GpuOpCostEstimator", "clear_step_cache", "step_cache_info"]

_LABEL = "per-operator GPU model (specs only; end-to-end leave-one-GPU-out validated)"


@dataclass(frozen=True, slots=True)
class _StepCacheKey:
    """What one step's per-operator estimate depends on (the epochs, samples, partition
    and node count do not, beyond the link speed): a what-if asks the same key for every
    partition with that GPU, and the MCP server again for every request about the model."""

    model: str  # the per-operator model's id
    step: StepKey  # the traced step: zoo parameters or the model file's content
    per_device_batch: int
    optimizer: str
    spec: GpuSpec
    gpus: int
    link_gbs: float
    gpu_model: str  # the catalog's name: the correction's factor is per GPU model
    correction_id: str | None


_STEPS: BoundedLru[_StepCacheKey, CorrectedStep] = BoundedLru(4096)
"""Bounded: a CorrectedStep is a few hundred bytes; 4,096 covers every GPU option of
dozens of models and batch sizes."""


def step_cache_info() -> tuple[int, int]:
    """(hits, misses) of the per-process step cache."""
    return _STEPS.hits, _STEPS.misses


def clear_step_cache() -> None:
    _STEPS.clear()


class GpuOpCostEstimator:
    """Run time of DNN training on catalog GPUs from the per-operator cost model."""

    def __init__(
        self,
        fallback: AnalyticDNNEstimator | None = None,
        reason: str = "",
        correction: ServingCorrection | None = None,
        traces: TraceFolders | None = None,
    ) -> None:
        self._fallback = fallback or AnalyticDNNEstimator()
        self.traces = traces or TraceFolders()  # where the step's traces persist
        self._model: Any = None
        self.reason = reason  # why the chain chose it (said in every answer's label)
        self.correction = correction  # the center's per-GPU factors (Model Promotion's)

    @property
    def estimator_id(self) -> str:
        return self._step_model().estimator_id if self._model is not None else "gpu-opcost"

    def _step_model(self) -> Any:
        if self._model is None:
            from tools.estimators.gpu.estimator import load_step_model

            self._model = load_step_model()
        return self._model

    def _step(
        self,
        workload: DNNTraining,
        per_device: int,
        spec: GpuSpec,
        gpus: int,
        link_gbs: float,
        gpu_model: str,
    ) -> CorrectedStep:
        """One step by the per-operator model, kept per process (``_STEPS``) under what
        decides it; InvalidInputError when the model does not trace."""
        from tools.estimators.gpu.workload_trace import kernels_at, step_key

        model = self._step_model()
        optimizer = "sgd" if workload.optimizer is Optimizer.SGD else "adam"  # AdamW: Adam's
        correction = self.correction
        key = _StepCacheKey(
            model=model.estimator_id,
            step=step_key(workload),
            per_device_batch=per_device,
            optimizer=optimizer,
            spec=spec,
            gpus=gpus,
            link_gbs=link_gbs,
            gpu_model=gpu_model,
            correction_id=correction.record_id if correction is not None else None,
        )

        def make() -> CorrectedStep:
            kernels, parameters = kernels_at(workload, per_device, self.traces)
            return gpu_step(
                model,
                kernels,
                spec,
                parameters=parameters,
                optimizer=optimizer,
                gpus=gpus,
                link_gbs=link_gbs,
                correction=correction,
                gpu_model=gpu_model,
            )

        return _STEPS.get(key, make)

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining):
            return NoEstimate("gpu-opcost: only DNN training")
        # Memory and the option's shape come from the analytic model; where it declines
        # (an unknown model) every option gets the same short reason, so the planner can
        # say the analytic model's own reason once.
        base = self._fallback.estimate(workload, candidate)
        if isinstance(base, NoEstimate):
            return NoEstimate("gpu-opcost: builds on the analytic estimate, which declined")
        if not candidate.gpus_per_node:
            return NoEstimate("gpu-opcost: not a GPU option")
        if workload.precision is not Precision.FP32:
            return NoEstimate("gpu-opcost: FP32 kernels only (mixed precision not modelled)")
        gpu = candidate.node_type.gpu
        if gpu is None:
            return NoEstimate("gpu-opcost: the catalog does not name this GPU")
        capacity_mib = gpu_memory_bound(candidate)[0]
        if far_above_capacity(base.gpu_memory_mb, capacity_mib, ratio_band(workload)):
            # Refused for its memory whatever the time: the fallback's answer says so
            # without the kernels' trace.
            return NoEstimate("gpu-opcost: the option's GPU memory is far above the GPU's")
        from tools.estimators.gpu.specs import spec_for_catalog_gpu

        try:
            spec = spec_for_catalog_gpu(gpu)
        except InvalidInputError as exc:
            return NoEstimate(f"gpu-opcost: {exc}")
        batch = candidate.batch_size or workload.batch_sizes[0]
        link_gbs = hardware.gpu_link_gbs(gpu)
        if candidate.nodes > 1:
            link_gbs = min(link_gbs, hardware.INTER_NODE_GBS)
        try:
            step = self._step(workload, math.ceil(batch / candidate.gpus), spec, candidate.gpus,
                              link_gbs, gpu.model)  # fmt: skip
        except InvalidInputError as exc:
            return NoEstimate(f"gpu-opcost: the model does not trace: {exc}")
        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        step_s = step.step_s
        label = f"{_LABEL}; {self.reason}" if self.reason else _LABEL
        if step.correction is not None:
            label = f"{label}; {step.describe()}"
        runtime = Interval(
            point=STARTUP_POINT_S + steps * step_s.p50,
            low=STARTUP_LOW_S + steps * step_s.p10,
            high=STARTUP_S + steps * step_s.p90,
            coverage=0.8,
            coverage_basis="held_out",  # end-to-end leave-one-GPU-out residuals
        )
        option = base.option.model_copy(update={"walltime_s": max(1, math.ceil(runtime.high))})
        return base.model_copy(
            update={
                "option": option,
                "runtime_s": runtime,
                "estimator_id": step.estimator,
                "validation_error": step.validation_mape,
                "label": label,
            }
        )
