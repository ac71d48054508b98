"""Training-step time on a GPU from its specs: the sum of per-operator predictions.

    forward_backward_s = exp(level(GPU specs)) x sum over the step's kernels of
                         roofline(kernel, specs) x exp(shape_class(kernel, specs))
    step_s = forward_backward_s + optimizer update + gradient all-reduce (several GPUs)

The shape terms are fitted on NeuSight's isolated kernels (``opcost``), the level on its
whole-model runs (``level``: isolated kernels run slower than inside a model on some
boards). A model file without a level (older files) prices kernels with the kernel
data's per-class levels instead.

The optimizer update is element-wise over the parameters, priced by the element-wise
model as the floats PyTorch's default (foreach) implementations move a parameter: SGD with
momentum 8 (scale the buffer, add the gradient to it, add it to the parameter), Adam 18
(the first moment's lerp 3, the second's scale 2 and addcmul 3, its square root, the
bias correction and epsilon 2 each, the parameter's addcdiv 4), and never below its
memory roofline, those floats over the board's bandwidth (``update_s``). With
``memory_floor`` (a model file's flag; off in the shipped one) every element-wise, layer
norm and softmax kernel of the step is held at its memory roofline too, and the level is
solved through that floor (``level_for``). The all-reduce of a ring
over ``gpus`` moves ``2 (n-1)/n`` of the gradient bytes over the link (an assumed
bandwidth, ``link_gbs``). p10/p50/p90 are the point times the log residuals of the
end-to-end leave-one-GPU-out validation (each GPU predicted by a model that never saw
it), stored with the model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.features import OP_CLASSES, class_features
from tools.estimators.gpu.level import GpuLevel
from tools.estimators.gpu.opcost import ClassModel, spec_columns
from tools.estimators.gpu.ops import GpuKernels
from tools.estimators.gpu.specs import GpuSpec

__all__ = [
    "DEFAULT_MODEL_PATH",
    "MEMORY_BOUND_CLASSES",
    "GpuStepEstimate",
    "GpuStepModel",
    "Quantiles",
    "StepMeasurement",
    "load_step_model",
]

DEFAULT_MODEL_PATH = Path(__file__).resolve().parents[3] / "data" / "gpu_models" / "opcost.json"
# Floats a parameter moves in torch.optim's foreach steps (torch 2.13: _multi_tensor_sgd
# with momentum, _multi_tensor_adam; see the module's docstring).
_OPTIMIZER_FLOATS = {"sgd": 8.0, "adam": 18.0}
# Classes that move data and compute little: with ``GpuStepModel.memory_floor`` a kernel of
# these is never priced below its memory roofline.
MEMORY_BOUND_CLASSES = frozenset({"elementwise", "ln", "softmax"})
# What PyTorch's eager dispatch of one operator costs the host at least: the per-operator
# term of the CPU step law (``b`` of tools/estimators/cpu/eager.py, data/cpu_opcost/opcost.json:
# 31.4 us at 1 thread, 32.0 at 2, fitted on the zoo's and the probes' CPU steps on the AMD
# EPYC host), which has no CUDA launch in it. A GPU step is never priced below its traced
# operators x this: the step of a small model on a fast GPU is the host's (the H100
# measurements: 26-70 us an operator on two machines of the same kind). NeuSight's runs
# (at least 145 us a kernel) and Gavel's CNN steps never reach it.
HOST_S_PER_OPERATOR = 31.4e-6
DEFAULT_LINK_GBS = 10.0  # PCIe 3.0 x16, effective (tools.planning.hardware's assumption)


class Quantiles(BaseModel):
    p10: float = Field(ge=0)
    p50: float = Field(ge=0)
    p90: float = Field(ge=0)

    def scaled(self, factor: float) -> Quantiles:
        return Quantiles(p10=self.p10 * factor, p50=self.p50 * factor, p90=self.p90 * factor)

    def at_least(self, floor: float) -> Quantiles:
        return Quantiles(
            p10=max(self.p10, floor), p50=max(self.p50, floor), p90=max(self.p90, floor)
        )


class GpuStepEstimate(BaseModel):
    """One training step of one model on one GPU."""

    gpu: str
    estimator: str
    forward_backward_s: Quantiles
    step_s: Quantiles
    optimizer_s: float
    allreduce_s: float
    kernels: int
    by_class_s: dict[str, float]
    validation_mape: float | None = None
    # The least the host takes to dispatch the step's operators (0: not counted, a model
    # with a recurrent layer); forward_backward_s and step_s are at least this.
    host_floor_s: float = 0.0


@dataclass(frozen=True, slots=True)
class StepMeasurement:
    """One measured training step (optimizer included) of traced kernels on a GPU."""

    kernels: GpuKernels
    spec: GpuSpec
    parameters: int
    optimizer: str
    step_s: float


@dataclass(slots=True)
class GpuStepModel:
    """The fitted per-class models, the interval calibration, and their provenance."""

    classes: dict[str, ClassModel]
    log_residual_quantiles: dict[str, float] = field(
        default_factory=lambda: {"p10": -0.3, "p50": 0.0, "p90": 0.3}
    )
    meta: dict[str, Any] = field(default_factory=dict)
    # The whole-model level (fitted on end-to-end runs); None: the kernel data's levels.
    level: GpuLevel | None = None
    # Memory-bound kernels (``MEMORY_BOUND_CLASSES``) never priced below their memory
    # roofline (bytes over the board's bandwidth); files before gpu-opcost-20261207 have
    # none.
    memory_floor: bool = False
    # The host's least seconds per dispatched operator (0: no host floor).
    host_s_per_operator: float = HOST_S_PER_OPERATOR

    @property
    def estimator_id(self) -> str:
        return f"gpu-opcost-{self.meta.get('version', 'dev')}"

    def _priced_ms(
        self, kernels: GpuKernels, spec: GpuSpec, floor: bool | None = None
    ) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """Per class: each kernel's time at level 0 (x its multiplier) and, where floored
        (``floor``, default the model's ``memory_floor``), a memory-bound kernel's roofline
        (x the multiplier; else None)."""
        floored = self.memory_floor if floor is None else floor
        out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        for op_class in OP_CLASSES:
            factor = np.array(kernels.factor[op_class], dtype=np.float64)
            if not len(factor):
                out[op_class] = (factor, None)
                continue
            dims = kernels.columns(op_class)
            columns = spec_columns(spec, len(factor))
            if self.level is None:
                times = self.classes[op_class].predict_ms(dims, columns)
            else:
                # In-model rows are forward kernels: backward ones are priced as isolated.
                forward = ~np.array(kernels.backward[op_class], dtype=bool)
                times = self.classes[op_class].shape_ms(dims, columns, in_model=forward)
            roofline = None
            if floored and op_class in MEMORY_BOUND_CLASSES:
                roofline = class_features(op_class, dims, columns)[0] * factor
            out[op_class] = (times * factor, roofline)
        return out

    def _level_of(self, spec: GpuSpec) -> float:
        return 0.0 if self.level is None else self.level(spec)

    @staticmethod
    def _at_level(
        priced: dict[str, tuple[np.ndarray, np.ndarray | None]], level: float
    ) -> dict[str, np.ndarray]:
        scale = math.exp(level)
        return {
            c: times * scale if floor is None else np.maximum(times * scale, floor)
            for c, (times, floor) in priced.items()
        }

    def kernel_times_ms(self, kernels: GpuKernels, spec: GpuSpec) -> dict[str, np.ndarray]:
        return self._at_level(self._priced_ms(kernels, spec), self._level_of(spec))

    def level_for(
        self,
        kernels: GpuKernels,
        spec: GpuSpec,
        measured_s: float,
        update: GpuKernels | None = None,
    ) -> float:
        """The level at which these kernels' time (and the optimizer ``update``'s, priced
        as ``estimate`` prices it, at least at its memory roofline) is ``measured_s``:
        log(measured / the sum at level 0) where nothing is floored; else solved by
        bisection (the sum only grows with the level), within +-8."""
        parts = [self._priced_ms(kernels, spec)]
        if update is not None:
            parts.append(self._priced_ms(update, spec, floor=True))
        if all(floor is None for part in parts for _, floor in part.values()):
            free = sum(float(t.sum()) for part in parts for t, _ in part.values()) / 1e3
            return math.log(measured_s / free)

        def total_s(level: float) -> float:
            return (
                sum(float(t.sum()) for part in parts for t in self._at_level(part, level).values())
                / 1e3
            )

        low, high = -8.0, 8.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if total_s(middle) < measured_s else (low, middle)
        return (low + high) / 2

    def update_s(self, update: GpuKernels, spec: GpuSpec) -> float:
        """The optimizer update's time: at least its memory roofline (the floats it moves
        over the board's bandwidth), whether or not the model floors the step's kernels.
        The level is fitted on forward and backward passes only (NeuSight's runs have no
        optimizer), so the floor here moves no fitted number; without it the element-wise
        trees at the whole-model level priced the H100's foreach updates at x0.30 of their
        profiled time (x0.81 with it), below what its memory can move."""
        priced = self._at_level(self._priced_ms(update, spec, floor=True), self._level_of(spec))
        return sum(float(t.sum()) for t in priced.values()) / 1e3

    def forward_backward_s(
        self, kernels: GpuKernels, spec: GpuSpec
    ) -> tuple[float, dict[str, float]]:
        times = self.kernel_times_ms(kernels, spec)
        by_class = {c: float(t.sum()) / 1e3 for c, t in times.items()}
        return sum(by_class.values()), by_class

    def estimate(
        self,
        kernels: GpuKernels,
        spec: GpuSpec,
        *,
        parameters: int,
        optimizer: str = "sgd",
        gpus: int = 1,
        link_gbs: float = DEFAULT_LINK_GBS,
    ) -> GpuStepEstimate:
        if optimizer not in _OPTIMIZER_FLOATS:
            raise InvalidInputError("must be sgd or adam", field="optimizer", value=optimizer)
        if gpus < 1:
            raise InvalidInputError("must be at least 1", field="gpus", value=gpus)
        if link_gbs <= 0:
            raise InvalidInputError("must be positive", field="link_gbs", value=link_gbs)
        point_s, by_class = self.forward_backward_s(kernels, spec)
        update = _update_kernels(GpuKernels(), parameters, optimizer)
        optimizer_s = self.update_s(update, spec)
        allreduce_s = 0.0
        if gpus > 1:
            allreduce_s = 2.0 * (gpus - 1) / gpus * 4.0 * parameters / (link_gbs * 1e9)
        q = self.log_residual_quantiles
        fb = Quantiles(
            p10=point_s * math.exp(q["p10"]),
            p50=point_s * math.exp(q["p50"]),
            p90=point_s * math.exp(q["p90"]),
        )
        extra = optimizer_s + allreduce_s
        step = Quantiles(p10=fb.p10 + extra, p50=fb.p50 + extra, p90=fb.p90 + extra)
        host_s = kernels.host_operators * self.host_s_per_operator
        fb, step = _floored(fb, host_s, q), _floored(step, host_s, q)
        mape = self.meta.get("validation", {}).get("e2e_mape")
        return GpuStepEstimate(
            gpu=spec.name,
            estimator=self.estimator_id,
            forward_backward_s=fb,
            step_s=step,
            optimizer_s=optimizer_s,
            allreduce_s=allreduce_s,
            kernels=kernels.count,
            by_class_s=by_class,
            validation_mape=float(mape) if mape is not None else None,
            host_floor_s=host_s,
        )

    def recalibrated(self, measured: list[StepMeasurement]) -> GpuStepModel:
        """The same shape models, the level line refitted on measured steps (a center's
        own GPUs); the interval calibration and provenance are kept."""
        from tools.estimators.gpu.level import fit_level

        if not measured:
            raise InvalidInputError("needs at least one measured step", field="measured")
        shape_only = GpuStepModel(
            self.classes, level=GpuLevel(0.0, 0.0, 0.0, 0.0), memory_floor=self.memory_floor
        )
        residuals: dict[str, list[float]] = {}
        specs: dict[str, GpuSpec] = {}
        for point in measured:
            if not point.step_s > 0:
                raise InvalidInputError("must be positive", field="step_s", value=point.step_s)
            if point.optimizer not in _OPTIMIZER_FLOATS:
                raise InvalidInputError(
                    "must be sgd or adam", field="optimizer", value=point.optimizer
                )
            update = _update_kernels(GpuKernels(), point.parameters, point.optimizer)
            residuals.setdefault(point.spec.name, []).append(
                shape_only.level_for(point.kernels, point.spec, point.step_s, update)
            )
            specs[point.spec.name] = point.spec
        levels = {name: float(np.mean(values)) for name, values in residuals.items()}
        return GpuStepModel(
            self.classes,
            dict(self.log_residual_quantiles),
            dict(self.meta),
            fit_level(levels, specs),
            self.memory_floor,
            self.host_s_per_operator,
        )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "meta": self.meta,
            "log_residual_quantiles": self.log_residual_quantiles,
            "classes": {c: m.to_json() for c, m in self.classes.items()},
        }
        if self.level is not None:
            document["level"] = self.level.to_json()
        if self.memory_floor:
            document["memory_floor"] = True
        return document

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> GpuStepModel:
        return cls(
            {c: ClassModel.from_json(m) for c, m in document["classes"].items()},
            {k: float(v) for k, v in document["log_residual_quantiles"].items()},
            dict(document.get("meta", {})),
            GpuLevel.from_json(document["level"]) if "level" in document else None,
            bool(document.get("memory_floor", False)),
        )


def _floored(times: Quantiles, floor_s: float, q: dict[str, float]) -> Quantiles:
    """``times`` at least ``floor_s``, the upper bound kept above the point by the
    interval's own spread where the floor lifts it (the host's time is not exact either)."""
    lifted = times.at_least(floor_s)
    spread = math.exp(max(q["p90"] - q["p50"], 0.0))
    return lifted.model_copy(update={"p90": max(lifted.p90, lifted.p50 * spread)})


def _update_kernels(kernels: GpuKernels, parameters: int, optimizer: str) -> GpuKernels:
    """``kernels`` with the optimizer's update added (element-wise over the parameters;
    one pass of a two-input element-wise kernel moves 3 floats an element)."""
    if parameters > 0:
        kernels.add(
            "elementwise",
            False,
            _OPTIMIZER_FLOATS[optimizer] / 3.0,
            N=float(parameters),
            Inputs=2.0,
            Heavy=0.0,
        )
    return kernels


_CACHE: dict[Path, GpuStepModel] = {}


def load_step_model(path: Path | None = None) -> GpuStepModel:
    """The shipped model (``data/gpu_models/opcost.json``), loaded once per process."""
    path = path or DEFAULT_MODEL_PATH
    if path not in _CACHE:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInputError(
                f"cannot read the GPU cost model ({exc}); retrain: "
                "python -m tools.estimators.gpu.train",
                field="model",
                value=str(path),
            ) from exc
        _CACHE[path] = GpuStepModel.from_json(document)
    return _CACHE[path]
