"""The planner's seam for the per-operator GPU estimator (``tools.planning.estimation``).

``GpuOpCostEstimator`` answers DNN training on any GPU option whose GPU the catalog
describes (its datasheet fills SMs, clock and L2): run time from the per-operator model
on the step traced once per model and per-GPU batch, memory and the option's shape from
the analytic estimator (the per-operator model says nothing about memory). It declines,
with the reason, what it does not model: mixed precision (its kernels are FP32),
CPU-only options, workloads that do not trace; the planner then falls through.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining, Precision
from tools.planning import hardware
from tools.planning.analytic import STARTUP_S, AnalyticDNNEstimator
from tools.planning.estimation import Candidate, NoEstimate, Workload

__all__ = ["GpuOpCostEstimator"]

# Traced kernels per (model, class, input, file mtime, batch), shared by every request of
# the process: a chain is built per request and tracing takes seconds.
_TRACED: dict[tuple[str, int], tuple[Any, int] | str] = {}
_TRACED_MAX = 64
_LABEL = "per-operator GPU model (specs only; end-to-end leave-one-GPU-out validated)"


class GpuOpCostEstimator:
    """Run time of DNN training on catalog GPUs from the per-operator cost model."""

    def __init__(self, fallback: AnalyticDNNEstimator | None = None) -> None:
        self._fallback = fallback or AnalyticDNNEstimator()
        self._model: Any = None

    @property
    def estimator_id(self) -> str:
        return self._step_model().estimator_id if self._model is not None else "gpu-opcost"

    def _step_model(self) -> Any:
        if self._model is None:
            from tools.estimators.gpu.estimator import load_step_model

            self._model = load_step_model()
        return self._model

    def _traced(self, workload: DNNTraining, batch: int) -> tuple[Any, int] | str:
        source = Path(workload.model)
        stamp = source.stat().st_mtime if source.suffix == ".py" and source.is_file() else 0.0
        name = f"{workload.model}:{workload.model_class}:{workload.input_shape}:{stamp}"
        key = (name, batch)
        if key not in _TRACED:
            if len(_TRACED) >= _TRACED_MAX:
                _TRACED.pop(next(iter(_TRACED)))
            try:
                _TRACED[key] = _trace(workload, batch)
            except InvalidInputError as exc:
                _TRACED[key] = f"the model does not trace: {exc}"
        return _TRACED[key]

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
        from tools.estimators.gpu.specs import spec_for_catalog_gpu

        try:
            spec = spec_for_catalog_gpu(gpu)
        except InvalidInputError as exc:
            return NoEstimate(f"gpu-opcost: {exc}")
        batch = candidate.batch_size or workload.batch_sizes[0]
        per_device = math.ceil(batch / candidate.gpus)
        traced = self._traced(workload, per_device)
        if isinstance(traced, str):
            return NoEstimate(f"gpu-opcost: {traced}")
        kernels, parameters = traced
        link_gbs = hardware.gpu_link_gbs(gpu)
        if candidate.nodes > 1:
            link_gbs = min(link_gbs, hardware.INTER_NODE_GBS)
        step = self._step_model().estimate(
            kernels,
            spec,
            parameters=parameters,
            optimizer=workload.optimizer.value,
            gpus=candidate.gpus,
            link_gbs=link_gbs,
        )
        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        runtime = Interval(
            point=STARTUP_S + steps * step.step_s.p50,
            low=STARTUP_S + steps * step.step_s.p10,
            high=STARTUP_S + steps * step.step_s.p90,
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
                "label": _LABEL,
            }
        )


def _trace(workload: DNNTraining, batch: int) -> tuple[Any, int]:
    """The kernels of one training step at ``batch`` and the trainable parameter count."""
    import torch

    from tools.estimators.gpu.ops import kernels_of
    from tools.estimators.gpu.trace import trace_training_step

    if workload.model.endswith(".py") and workload.model_class:
        from tools.estimators.dnn.usermodel import load_user_model

        classes = workload.model_params.get("num_classes")
        user = load_user_model(
            Path(workload.model),
            workload.model_class,
            input_shape=list(workload.input_shape) or None,
            num_classes=classes if isinstance(classes, int) else None,
        )
        task = user.task(batch, meta=True)
    else:
        from tools.profiling.zoo.registry import named_model

        found = named_model(workload.model)
        if found is None:
            raise InvalidInputError("not a zoo model", field="workload.model", value=workload.model)
        family, params = found
        if family.kind == "image" and len(workload.input_shape) == 3:
            params["image_size"] = workload.input_shape[-1]
        full = {**family.defaults(), **params}
        with torch.device("meta"):
            inputs, targets = family.batch(full, batch)
            model = family.build(full)
        from tools.profiling.zoo.registry import TrainingTask

        task = TrainingTask(model, inputs, targets, family.loss)
    kernels = kernels_of(trace_training_step(task))
    return kernels, sum(p.numel() for p in task.model.parameters() if p.requires_grad)
