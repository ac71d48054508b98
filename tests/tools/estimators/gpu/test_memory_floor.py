"""The memory floor of memory-bound kernels and the level solved through it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tools.estimators.gpu.estimator import GpuStepModel, load_step_model
from tools.estimators.gpu.features import class_features
from tools.estimators.gpu.level import GpuLevel
from tools.estimators.gpu.ops import GpuKernels
from tools.estimators.gpu.specs import datasheet_spec


def _streaming() -> GpuKernels:
    kernels = GpuKernels()
    for count in (2.0**26, 2.0**20, 2.0**12):
        kernels.add("elementwise", False, N=count, Inputs=2.0, Heavy=0.0)
    kernels.add("ln", True, B=8192.0, H=4096.0)
    kernels.add("linear", False, B=1.0, M=4096.0, N=4096.0, K=4096.0)
    return kernels


def test_the_memory_floor_holds_memory_bound_kernels_at_their_roofline() -> None:
    shipped = load_step_model()
    floored = dataclasses.replace(shipped, memory_floor=True)
    spec = datasheet_spec("NVIDIA H100 80GB HBM3")
    kernels = _streaming()
    free, held = shipped.kernel_times_ms(kernels, spec), floored.kernel_times_ms(kernels, spec)
    for op_class in ("elementwise", "ln"):
        columns = {k: np.full(len(kernels.factor[op_class]), v) for k, v in
                   {"sms": 132.0, "fp32_gflops": spec.fp32_gflops,
                    "bandwidth_gbs": spec.bandwidth_gbs, "l2_mb": spec.l2_mb}.items()}  # fmt: skip
        roofline, _ = class_features(op_class, kernels.columns(op_class), columns)
        assert np.all(held[op_class] >= roofline * (1 - 1e-9))
        assert np.all(held[op_class] >= free[op_class])
        assert np.allclose(held[op_class], np.maximum(free[op_class], roofline))
    # Products are no memory-bound class: never floored.
    assert held["linear"] == pytest.approx(free["linear"])


@pytest.mark.parametrize("floor", [False, True])
def test_level_for_gives_back_the_measured_time(floor: bool) -> None:
    shipped = load_step_model()
    spec = datasheet_spec("NVIDIA Tesla V100 PCIe")
    kernels = _streaming()
    shape_only = dataclasses.replace(
        shipped, level=GpuLevel(0.0, 0.0, 0.0, 0.0), memory_floor=floor
    )
    at_zero, _ = shape_only.forward_backward_s(kernels, spec)
    for measured in (at_zero * 0.7, at_zero * 1.9):
        level = shape_only.level_for(kernels, spec, measured)
        solved = dataclasses.replace(shape_only, level=GpuLevel(level, 0.0, level, level))
        assert solved.forward_backward_s(kernels, spec)[0] == pytest.approx(measured, rel=1e-6)
    if not floor:
        assert shape_only.level_for(kernels, spec, at_zero * 2) == pytest.approx(math.log(2))


def test_a_model_file_keeps_its_memory_floor(tmp_path: Path) -> None:
    shipped = load_step_model()
    path = tmp_path / "opcost.json"
    dataclasses.replace(shipped, memory_floor=True).save(path)
    assert GpuStepModel.from_json(json.loads(path.read_text())).memory_floor
    assert not GpuStepModel.from_json(shipped.to_json()).memory_floor


@pytest.mark.parametrize(("optimizer", "floats"), [("sgd", 8.0), ("adam", 18.0)])
def test_the_optimizer_update_moves_its_floats_no_faster_than_the_memory(
    optimizer: str, floats: float
) -> None:
    model = load_step_model()
    h100 = datasheet_spec("NVIDIA H100 80GB HBM3")
    for parameters in (10_000, 25_000_000, 1_000_000_000):
        step = model.estimate(_streaming(), h100, parameters=parameters, optimizer=optimizer)
        bound_s = floats * 4.0 * parameters / (h100.bandwidth_gbs * 1e9)
        assert step.optimizer_s >= bound_s * (1 - 1e-9)
    # A billion parameters: the element-wise trees at the whole-model level price the
    # update below the bound on this board, so the bound is the price.
    assert step.optimizer_s == pytest.approx(bound_s)


def test_a_level_recalibrated_on_measured_steps_gives_them_back() -> None:
    from tools.estimators.gpu.estimator import StepMeasurement

    shipped = load_step_model()
    spec = datasheet_spec("NVIDIA Tesla V100 PCIe")
    kernels = _streaming()
    for floor in (False, True):
        model = dataclasses.replace(shipped, memory_floor=floor)
        predicted = model.estimate(kernels, spec, parameters=50_000_000).step_s.p50
        measured = predicted * 1.37
        refitted = model.recalibrated([StepMeasurement(kernels, spec, 50_000_000, "sgd", measured)])
        again = refitted.estimate(kernels, spec, parameters=50_000_000)
        p50 = again.forward_backward_s.p50 + again.optimizer_s
        assert p50 == pytest.approx(measured, rel=1e-6)


def _many_small_kernels(count: int) -> GpuKernels:
    kernels = GpuKernels()
    for _ in range(count):
        kernels.add("elementwise", False, N=1024.0, Inputs=1.0, Heavy=0.0)
    return kernels


def test_a_step_of_many_small_operators_is_the_hosts() -> None:
    from tools.estimators.gpu.estimator import HOST_S_PER_OPERATOR

    model = load_step_model()
    h100 = datasheet_spec("NVIDIA H100 80GB HBM3")
    small = _many_small_kernels(400)
    step = model.estimate(small, h100, parameters=1000)
    assert step.host_floor_s == pytest.approx(400 * HOST_S_PER_OPERATOR)
    device = dataclasses.replace(model, host_s_per_operator=0.0).estimate(
        small, h100, parameters=1000
    )
    assert device.step_s.p50 < step.host_floor_s  # the device alone would be faster
    for q in (step.step_s, step.forward_backward_s):
        assert q.p10 == pytest.approx(step.host_floor_s)
        assert q.p50 == pytest.approx(step.host_floor_s)
        assert q.p90 > q.p50  # the host's time is no exact figure either
    # A recurrent model's traced operators say nothing of the host's work: no floor.
    small.recurrent = True
    assert model.estimate(small, h100, parameters=1000).host_floor_s == 0.0
    # Where the kernels carry the step the floor does not move it.
    big = _streaming()
    assert model.estimate(big, h100, parameters=1000).step_s == (
        dataclasses.replace(model, host_s_per_operator=0.0)
        .estimate(big, h100, parameters=1000)
        .step_s
    )
