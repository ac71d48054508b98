"""The per-operator GPU cost model: roofline x learned efficiency, per operator class.

For a kernel of class c with roofline time ``r`` on a GPU with specs s:

    log(latency / r) = f_c(shape features) + u_c(s)

``f_c`` (gradient-boosted trees, XGBoost) learns how far from the roofline a kernel of a
given shape runs: waves of tiles over the SMs and the last wave's fill, intensity over
the ridge point, working set over L2, short-kernel overheads. ``u_c`` is the GPU's own
efficiency level for that class, fitted per training GPU and, for a GPU never seen, read
off a straight line in log(peak FP32) through the training GPUs' levels, clipped to the
range they span (the small boards, P4 and T4, are power-limited and sustain far below
their boost-clock peak; V100 and A100 reach 80-86% of it on large GEMMs), so a GPU faster
than any seen is never predicted nearer its roofline than the best one seen. Trees never
see the level, so they never memorise a GPU: the only spec dependence a new GPU gets is
through its roofline, its wave count and that one line, which is what lets the model
answer for GPUs faster than any it saw.

The trees also learn from in-model rows (``inmodel``: each node of NeuSight's whole-model
runs with its own measured forward latency), marked by an in-model flag, their last
input: each GPU's mean over its in-model rows is taken out of them as the isolated mean is
out of the isolated rows, so the flag carries how time varies with shape inside a model
(the in-model efficiency of each GPU stays with the whole-model level).

The step model (``estimator``) uses only the shape term (``shape_ms``: forward kernels
with the flag set, backward kernels as isolated ones, since only forward latencies were
measured in-model) and replaces the kernel levels with one whole-model level fitted on
end-to-end runs (``level``); ``predict_ms`` (with the kernel levels) prices an isolated
kernel.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tools.estimators.gpu.features import class_features
from tools.estimators.gpu.kernels import KernelRows
from tools.estimators.gpu.specs import GpuSpec

__all__ = [
    "SPEC_INPUTS",
    "ClassModel",
    "fit_class",
    "ridge_feature",
    "spec_columns",
    "spec_inputs",
]

Array = NDArray[np.float64]

# Spec-dependent features the trees must not see (they would identify the GPU).
_LEVEL_FEATURES = {"log_ridge", "log_gflops_per_sm"}
# Classes whose arithmetic intensity is one constant (layer norm 8 FLOPs, softmax 5, per
# 8 bytes moved): their intensity over the ridge is the GPU's ridge point alone, so it too
# only identifies the board, and a GPU beyond the training boards' ridges (12.5-29.7
# FLOP/byte; an L4's is 101) is priced as the most extreme of them. Fitted with it, the
# trees priced an L4's layer norms and softmaxes 1.2-1.4x a T4's, which has 1.07x its
# bandwidth; without it, 0.8-1.1x. Model files before gpu-opcost-20261201 were fitted with
# it (``ClassModel.ridge_feature``).
_CONSTANT_INTENSITY = frozenset({"ln", "softmax"})
TREE_PARAMS: dict[str, Any] = {
    "max_depth": 6,
    "eta": 0.1,
    "subsample": 0.8,
    "colsample_bytree": 0.9,
    "tree_method": "hist",
    "nthread": 1,  # two shared cores: spinning OpenMP threads only slow it down
    "seed": 0,
}
TREES = 60
MAX_ROWS = 6000
# In-model rows (``inmodel``): a few hundred a class against up to MAX_ROWS isolated
# kernels, each weighing this many isolated rows of the same latency. Chosen on the
# leave-one-GPU-out end-to-end runs among 0.5, 1, 2, 5, 20 (MAPE 10.8%, 10.8%, 11.1%,
# 12.9%, 14.9%; max APE 23%, 30%, 29%, 33%, 42%; before the roofline filter of
# ``inmodel``, after it 10.7%, max 22.6%): more weight lets the few in-model shapes (five
# model families) pull the trees too far. Not used by the shipped model (train --in-model).
IN_MODEL_WEIGHT = 0.5


# GPU-spec inputs the trees may take (``fit_class(spec_features=True)``), computed from the
# spec columns alone (never the GPU's name): NeuSight's idea that a kernel's utilization
# depends on the GPU's resources, not only on its shape. The per-GPU mean is still taken
# out of the target first, so these inputs can only learn how the shape effects vary
# with the specs (a GEMM's tile/wave behaviour on more SMs, a board's cache), never a
# GPU's whole-model level; without that (the trees learning the raw distance to the
# roofline from the specs) leaving one GPU out erred 23.2% end to end (max 50.6%).
SPEC_INPUTS: tuple[str, ...] = (
    "log_sms",
    "log_fp32_gflops",
    "log_bandwidth_gbs",
    "log_l2_mb",
    "log_ridge",
    "log_gflops_per_sm",
)


def spec_inputs(spec: dict[str, Array]) -> Array:
    """The ``SPEC_INPUTS`` columns, one row per kernel, from the spec columns only."""
    sms, gflops, gbs, l2_mb = (
        np.asarray(spec[key], dtype=np.float64)
        for key in ("sms", "fp32_gflops", "bandwidth_gbs", "l2_mb")
    )
    return np.column_stack(
        [np.log2(sms), np.log2(gflops), np.log2(gbs), np.log2(l2_mb), np.log2(gflops / gbs),
         np.log2(gflops / sms)]
    )  # fmt: skip


def spec_columns(spec: GpuSpec, count: int) -> dict[str, Array]:
    """One GPU's spec repeated for ``count`` kernels (the features' spec columns)."""
    return {
        "sms": np.full(count, float(spec.sms)),
        "fp32_gflops": np.full(count, spec.fp32_gflops),
        "bandwidth_gbs": np.full(count, spec.bandwidth_gbs),
        "l2_mb": np.full(count, spec.l2_mb),
    }


def ridge_feature(op_class: str) -> bool:
    """Whether a new fit of ``op_class`` sees its intensity over the ridge (not where the
    intensity is one constant, ``_CONSTANT_INTENSITY``)."""
    return op_class not in _CONSTANT_INTENSITY


def _tree_columns(
    op_class: str,
    features: Array,
    in_model: NDArray[Any] | None = None,
    spec: dict[str, Array] | None = None,
    ridge: bool = True,
) -> Array:
    """The trees' inputs: the GPU-agnostic features (with the intensity over the ridge
    where the class was fitted with it, ``ridge``), the ``SPEC_INPUTS`` when the class was
    fitted with them (``spec``), and the in-model flag, last, when it was fitted with
    in-model rows (1: timed inside a whole model, 0: isolated)."""
    from tools.estimators.gpu.features import FEATURE_NAMES

    hidden = _LEVEL_FEATURES if ridge else _LEVEL_FEATURES | {"log_intensity_over_ridge"}
    keep = [i for i, name in enumerate(FEATURE_NAMES[op_class]) if name not in hidden]
    parts = [features[:, keep]]
    if spec is not None:
        parts.append(spec_inputs(spec))
    if in_model is not None:
        parts.append(np.asarray(in_model, dtype=np.float64)[:, None])
    return parts[0] if len(parts) == 1 else np.column_stack(parts)


@dataclass(slots=True)
class ClassModel:
    """One operator class: the shape trees and the line that gives a GPU's level."""

    op_class: str
    booster: Any  # xgboost.Booster (imported lazily: the CLI must start fast)
    level_intercept: float
    level_slope: float
    levels: dict[str, float]
    # Fitted with in-model rows: the trees take the in-model flag as a last column.
    in_model_feature: bool = False
    # Fitted with the GPU-spec inputs (``SPEC_INPUTS``) after the shape features.
    spec_feature: bool = False
    # Fitted with the intensity over the ridge among the shape features (every class of
    # files before gpu-opcost-20261201; since, all but ``_CONSTANT_INTENSITY``).
    ridge_feature: bool = True

    def level(self, spec_gflops: Array, spec_gbs: Array) -> Array:
        line = self.level_intercept + self.level_slope * np.log2(spec_gflops)
        known = list(self.levels.values())
        return np.clip(line, min(known), max(known))

    def _roofline_and_shape(
        self, dims: dict[str, Array], spec: dict[str, Array], in_model: bool | Array
    ) -> tuple[Array, Array]:
        # inplace_predict: building a DMatrix took ~0.1 s a call on this loaded 2-core VM.
        roofline_ms, features = class_features(self.op_class, dims, spec)
        flag = np.broadcast_to(np.asarray(in_model, dtype=np.float64), roofline_ms.shape)
        columns = _tree_columns(
            self.op_class,
            features,
            flag if self.in_model_feature else None,
            spec if self.spec_feature else None,
            self.ridge_feature,
        )
        shape = self.booster.inplace_predict(columns)
        return roofline_ms, np.asarray(shape, dtype=np.float64)

    def predict_ms(self, dims: dict[str, Array], spec: dict[str, Array]) -> Array:
        """An isolated kernel's time: roofline x shape x the kernel data's GPU level."""
        roofline_ms, shape = self._roofline_and_shape(dims, spec, in_model=False)
        level = self.level(spec["fp32_gflops"], spec["bandwidth_gbs"])
        return np.asarray(roofline_ms * np.exp(shape + level), dtype=np.float64)

    def shape_ms(
        self, dims: dict[str, Array], spec: dict[str, Array], in_model: bool | Array = True
    ) -> Array:
        """Roofline x the shape term of a kernel inside a model (``in_model``, per kernel
        or for all; used where the class learned it); a GPU's level is applied by the step
        model."""
        roofline_ms, shape = self._roofline_and_shape(dims, spec, in_model=in_model)
        return np.asarray(roofline_ms * np.exp(shape), dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        raw = bytes(self.booster.save_raw("ubj"))
        return {
            "op_class": self.op_class,
            "booster_ubj_b64": base64.b64encode(raw).decode("ascii"),
            "level_intercept": self.level_intercept,
            "level_slope": self.level_slope,
            "levels": self.levels,
            "in_model_feature": self.in_model_feature,
            "spec_feature": self.spec_feature,
            "ridge_feature": self.ridge_feature,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ClassModel:
        import xgboost as xgb

        booster = xgb.Booster(params={"nthread": 1})
        booster.load_model(bytearray(base64.b64decode(document["booster_ubj_b64"])))
        return cls(
            document["op_class"],
            booster,
            float(document["level_intercept"]),
            float(document["level_slope"]),
            {k: float(v) for k, v in document["levels"].items()},
            bool(document.get("in_model_feature", False)),
            bool(document.get("spec_feature", False)),
            bool(document.get("ridge_feature", True)),
        )


def fit_class(rows: KernelRows, seed: int = 0, spec_features: bool = False) -> ClassModel:
    """Fit the per-GPU levels, then the shape trees on what the levels leave.

    Isolated kernels are subsampled to ``MAX_ROWS``; in-model rows (``rows.in_model``)
    are all kept, weigh ``IN_MODEL_WEIGHT`` times an isolated row, and reach the trees
    through the in-model flag. The GPU levels (and their line) come from the isolated
    kernels alone (the grid NeuSight timed on every GPU); a GPU's in-model rows have their
    own mean taken out, so the trees learn the in-model shape effects, not a GPU's
    in-model efficiency. ``spec_features``: the trees also take the ``SPEC_INPUTS`` (the
    per-GPU means are taken out all the same). The intensity over the ridge is an input
    except where the class's intensity is one constant (``ridge_feature``).
    """
    import xgboost as xgb

    rng = np.random.default_rng(seed)
    in_model = rows.in_model_mask
    isolated = np.flatnonzero(~in_model)
    if len(isolated) > MAX_ROWS:
        isolated = rng.choice(isolated, MAX_ROWS, replace=False)
    keep = np.zeros(len(rows), dtype=bool)
    keep[isolated] = True
    keep |= in_model
    part = rows.subset(keep)
    flag = part.in_model_mask
    uses_flag = bool(flag.any())
    roofline_ms, features = class_features(part.op_class, part.dims, part.spec)
    target = np.log(part.latency_ms / roofline_ms)
    # Long kernels carry a step's time: weigh them more than launch-bound ones.
    weight = np.sqrt(part.latency_ms) * np.where(flag, IN_MODEL_WEIGHT, 1.0)
    ridge = ridge_feature(part.op_class)
    tree_x = _tree_columns(
        part.op_class,
        features,
        flag if uses_flag else None,
        part.spec if spec_features else None,
        ridge,
    )
    gpus = sorted(set(part.gpu.tolist()))
    # Levels first, from each GPU's mean log distance to its roofline over the same shape
    # grid (NeuSight timed one grid on every GPU); then the trees learn only what is left,
    # the shape effects. Refitting the levels after the trees would let the trees, which
    # see roofline-relative features, take the GPU differences over.
    level = np.zeros(len(part))
    for gpu in gpus:
        mask = part.gpu == gpu
        # (Taking the isolated mean out of the in-model rows too, so that the flag learns
        # the mean in-model offset, erred 12.7% end to end leaving one GPU out, against
        # 10.7% with each set's own mean.)
        for part_mask in (mask & ~flag, mask & flag):
            if np.any(part_mask):
                level[part_mask] = float(
                    np.sum(weight[part_mask] * target[part_mask]) / np.sum(weight[part_mask])
                )
    booster = xgb.train(TREE_PARAMS, xgb.DMatrix(tree_x, target - level, weight=weight), TREES)
    assert booster is not None
    levels = {gpu: float(level[(part.gpu == gpu) & ~flag][0]) for gpu in gpus}
    peak = {gpu: float(np.log2(part.spec["fp32_gflops"][part.gpu == gpu][0])) for gpu in gpus}
    x = np.array([peak[g] for g in gpus])
    y = np.array([levels[g] for g in gpus])
    if len(gpus) >= 3 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        slope = min(float(slope), 0.0)  # a bigger board never runs further from its peak
        intercept = float(np.mean(y - slope * x))
    else:
        slope, intercept = 0.0, float(np.mean(y))
    return ClassModel(
        part.op_class,
        booster,
        float(intercept),
        float(slope),
        levels,
        uses_flag,
        spec_features,
        ridge,
    )
