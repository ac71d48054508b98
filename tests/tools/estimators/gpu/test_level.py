"""The whole-model level: fitted on end-to-end runs, read off specs, clipped to the seen
range; refitted on a center's own measured steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.baselines import roofline_s
from tools.estimators.gpu.estimator import GpuStepModel, StepMeasurement
from tools.estimators.gpu.features import DIMS, OP_CLASSES, class_features
from tools.estimators.gpu.kernels import KernelRows
from tools.estimators.gpu.level import GpuLevel, fit_level
from tools.estimators.gpu.neusight import E2ERun
from tools.estimators.gpu.opcost import spec_columns
from tools.estimators.gpu.ops import GpuKernels
from tools.estimators.gpu.specs import GpuSpec
from tools.estimators.gpu.train import fit_all, fit_step_model, interval_quantiles

SPECS = {
    "gddr": GpuSpec.of(Device="gddr", Num_Sm=40, Core_Per_SM=64, Freq=1500, SingleFLOPs=8000,
                       Mem_Bw=300, L2Cache=4, Dev_Mem=16),
    "hbm": GpuSpec.of(Device="hbm", Num_Sm=56, Core_Per_SM=64, Freq=1300, SingleFLOPs=9500,
                      Mem_Bw=750, L2Cache=4, Dev_Mem=16),
    "hbm2": GpuSpec.of(Device="hbm2", Num_Sm=80, Core_Per_SM=64, Freq=1400, SingleFLOPs=14000,
                       Mem_Bw=900, L2Cache=6, Dev_Mem=32),
    "hbm3": GpuSpec.of(Device="hbm3", Num_Sm=108, Core_Per_SM=64, Freq=1400, SingleFLOPs=19500,
                       Mem_Bw=1550, L2Cache=40, Dev_Mem=40),
}  # fmt: skip
# Truth: whole models run at roofline x WHOLE[gpu]; isolated kernels a further x ISOLATION
# slower on some boards (as NeuSight's P100 and T4 kernels are against their model runs).
WHOLE = {"gddr": 1.8, "hbm": 1.3, "hbm2": 1.2, "hbm3": 1.1}
ISOLATION = {"gddr": 1.3, "hbm": 1.5, "hbm2": 1.1, "hbm3": 1.0}


def _dims(op_class: str, rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    out = {}
    for key in DIMS[op_class]:
        if key == "Inputs":
            out[key] = rng.integers(1, 3, count).astype(float)
        elif key in ("Heavy", "Padding"):
            out[key] = rng.integers(0, 2, count).astype(float)
        elif key in ("Kernel", "Stride"):
            out[key] = rng.choice([1.0, 3.0], count) if key == "Kernel" else np.ones(count)
        else:
            out[key] = 2.0 ** rng.integers(3, 11, count).astype(float)
    return out


def _kernel_data(seed: int = 0) -> dict[str, KernelRows]:
    rng = np.random.default_rng(seed)
    data = {}
    for op_class in OP_CLASSES:
        dims = _dims(op_class, rng, 80)
        parts: dict[str, list[np.ndarray]] = {k: [] for k in dims}
        spec: dict[str, list[np.ndarray]] = {}
        gpus, latency = [], []
        for name, gpu_spec in SPECS.items():
            columns = spec_columns(gpu_spec, 80)
            roof, _ = class_features(op_class, dims, columns)
            latency.append(roof * WHOLE[name] * ISOLATION[name])
            gpus.append(np.full(80, name))
            for k, v in dims.items():
                parts[k].append(v)
            for k, v in columns.items():
                spec.setdefault(k, []).append(v)
        data[op_class] = KernelRows(
            op_class,
            {k: np.concatenate(v) for k, v in parts.items()},
            np.concatenate(gpus),
            np.concatenate(latency),
            {k: np.concatenate(v) for k, v in spec.items()},
        )
    return data


def _model_kernels() -> GpuKernels:
    kernels = GpuKernels()
    for m, n, k in ((2048, 1024, 1024), (2048, 4096, 1024), (2048, 1024, 4096)):
        kernels.add("linear", False, B=1, M=m, N=n, K=k)
    kernels.add("elementwise", False, N=2048 * 4096, Inputs=1, Heavy=1)
    kernels.add("ln", False, B=2048, H=1024)
    return kernels


def test_level_line_is_clipped_to_the_range_it_saw() -> None:
    level = fit_level({"gddr": 0.6, "hbm2": 0.2, "hbm3": 0.1}, SPECS)
    assert level.slope < 0
    faster = GpuSpec.of(Num_Sm=132, Core_Per_SM=128, Freq=1980, SingleFLOPs=67000,
                        Mem_Bw=3400, L2Cache=50, Dev_Mem=80)  # fmt: skip
    slower = GpuSpec.of(Num_Sm=20, Core_Per_SM=64, Freq=1000, SingleFLOPs=2000,
                        Mem_Bw=100, L2Cache=1, Dev_Mem=4)  # fmt: skip
    assert level(faster) == pytest.approx(0.1)
    assert level(slower) == pytest.approx(0.6)
    assert 0.1 < level(SPECS["hbm"]) < 0.6
    again = GpuLevel.from_json(level.to_json())
    assert again(SPECS["hbm"]) == pytest.approx(level(SPECS["hbm"]))


def test_left_out_gpu_gets_its_whole_model_level_not_its_isolated_kernels() -> None:
    data = _kernel_data()
    kernels = _model_kernels()
    traced = {("m", False, 1, 1): (kernels, 0)}
    runs = [
        E2ERun(name, "m", False, 1, 1, roofline_s(kernels, spec) * WHOLE[name] * 1e3)
        for name, spec in SPECS.items()
    ]
    truth = roofline_s(kernels, SPECS["hbm"]) * WHOLE["hbm"]
    model = fit_step_model(data, runs, traced, SPECS, exclude="hbm")
    predicted, _ = model.forward_backward_s(kernels, SPECS["hbm"])
    assert predicted == pytest.approx(truth, rel=0.12)
    # The kernel data's own levels (the old model) carry hbm's x1.5 isolation slowdown.
    isolated, _ = fit_all(data, exclude="hbm").forward_backward_s(kernels, SPECS["hbm"])
    assert isolated / truth > 1.2
    restored = GpuStepModel.from_json(model.to_json())
    assert restored.forward_backward_s(kernels, SPECS["hbm"])[0] == pytest.approx(predicted)


def test_recalibrated_on_measured_steps_reproduces_them() -> None:
    model = fit_all(_kernel_data())
    model.level = GpuLevel(0.0, 0.0, 0.0, 0.0)
    kernels = _model_kernels()
    spec = SPECS["hbm2"]
    base = model.estimate(kernels, spec, parameters=1_000_000).step_s.p50
    center = model.recalibrated([StepMeasurement(kernels, spec, 1_000_000, "sgd", base * 1.4)])
    again = center.estimate(kernels, spec, parameters=1_000_000).step_s.p50
    assert again == pytest.approx(base * 1.4, rel=1e-6)
    assert center.level is not None and center.level(spec) == pytest.approx(math.log(1.4))
    with pytest.raises(InvalidInputError, match="measured"):
        model.recalibrated([])
    with pytest.raises(InvalidInputError, match="step_s"):
        model.recalibrated([StepMeasurement(kernels, spec, 1, "sgd", 0.0)])


def test_interval_widens_when_residuals_cluster_by_gpu() -> None:
    # Each GPU's runs agree with each other but the GPUs disagree: a new GPU's error is
    # mostly the between-GPU part, which pooled quantiles of all runs understate.
    clustered = {"a": [0.20, 0.21, 0.19, 0.20], "b": [-0.15, -0.16, -0.14], "c": [0.0, 0.01]}
    q = interval_quantiles(clustered)
    pooled = np.concatenate([np.array(v) for v in clustered.values()])
    assert q["p10"] < q["p50"] == 0.0 < q["p90"]
    assert q["p90"] - q["p10"] > np.quantile(pooled, 0.9) - np.quantile(pooled, 0.1)
    same = interval_quantiles({"a": [0.1, -0.1], "b": [0.1, -0.1]})
    assert same["p90"] == pytest.approx(-same["p10"])
    with pytest.raises(ValueError, match="no residuals"):
        interval_quantiles({})


def test_interval_is_a_prediction_interval_for_a_new_gpu() -> None:
    # Four GPUs whose runs agree within each: t with 3 degrees of freedom (1.638) over
    # the between-GPU spread x (1 + 1/4), not the normal 1.2816 over the spread alone.
    groups = {"a": [0.3, 0.3], "b": [0.1, 0.1], "c": [-0.1, -0.1], "d": [-0.3, -0.3]}
    q = interval_quantiles(groups)
    between = np.var([0.3, 0.1, -0.1, -0.3], ddof=1)
    assert q["p90"] == pytest.approx(1.6377 * math.sqrt(between * 1.25), rel=1e-3)
    assert q["p10"] == pytest.approx(-q["p90"])


def test_shipped_model_has_its_level_and_the_figures_the_planner_reads() -> None:
    from tools.estimators.gpu.estimator import load_step_model

    model = load_step_model()
    assert model.level is not None
    assert model.level.slope < 0  # more bandwidth, nearer the roofline
    validation = model.meta["validation"]
    # tools/estimators/gpu/selection.py compares these two (same runs, left-out GPUs).
    assert 0 < validation["e2e_mape"] < validation["analytic_e2e_mape"]
    assert set(validation["summary"]["kernel_by_class"]) == set(OP_CLASSES)
    q = model.log_residual_quantiles
    assert q["p10"] < 0 < q["p90"]


def test_family_out_level_comes_from_the_other_families_only() -> None:
    from tools.estimators.gpu.train import model_family, validate_family_out

    data = _kernel_data()
    kernels = _model_kernels()
    # Family "fast" runs at the whole-model truth, family "slow" x1.5 slower, on every GPU.
    traced = {(m, False, 1, 1): (kernels, 0) for m in ("fast_a", "slow_a")}
    runs = [
        E2ERun(name, model, False, 1, 1, roofline_s(kernels, spec) * WHOLE[name] * 1e3 * factor)
        for name, spec in SPECS.items()
        for model, factor in (("fast_a", 1.0), ("slow_a", 1.5))
    ]
    assert model_family("gpt3_xl") == model_family("gpt3_27") == "gpt3"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("tools.estimators.gpu.train.TRAINING_GPUS", ("hbm",))
        rows = validate_family_out(data, runs, traced, SPECS)
    ratio = {r["family"]: r["predicted_ms"] / r["measured_ms"] for r in rows}
    # Each family's level is read off the other family's runs: x1.5 off either way.
    assert ratio["fast"] == pytest.approx(1.5, rel=0.12)
    assert ratio["slow"] == pytest.approx(1 / 1.5, rel=0.12)


def test_spec_features_reach_only_the_named_classes_and_folds_still_leave_the_gpu_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from tools.estimators.gpu import train

    data = _kernel_data()
    seen: dict[str, tuple[bool, set[str], int]] = {}

    def fake_fit(rows: KernelRows, spec_features: bool = False, seed: int = 0) -> KernelRows:
        seen[rows.op_class] = (spec_features, set(rows.gpu.tolist()), seed)
        return rows

    monkeypatch.setattr(train, "fit_class", fake_fit)
    train.fit_all(data, exclude=("hbm", "gddr"), spec_classes=("linear", "bmm"), seed=3)
    assert {c for c, (flag, _, _) in seen.items() if flag} == {"linear", "bmm"}
    assert all(gpus == {"hbm2", "hbm3"} and seed == 3 for _, gpus, seed in seen.values())
    assert train.spec_classes_arg("all") == OP_CLASSES
    assert train.spec_classes_arg("none") == ()
    assert train.spec_classes_arg("linear, bmm") == ("linear", "bmm")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown operator class gemm"):
        train.spec_classes_arg("linear,gemm")
