"""The per-operator cost model: levels per GPU, shape trees, extrapolation and round trip."""

from __future__ import annotations

import numpy as np

from tools.estimators.gpu.features import class_features
from tools.estimators.gpu.kernels import KernelRows
from tools.estimators.gpu.opcost import (
    SPEC_INPUTS,
    ClassModel,
    fit_class,
    spec_columns,
    spec_inputs,
)
from tools.estimators.gpu.specs import GpuSpec

GPUS = {
    "small": GpuSpec.of(Num_Sm=40, Core_Per_SM=64, Freq=1100, SingleFLOPs=5000, Mem_Bw=200,
                     L2Cache=2, Dev_Mem=8),
    "mid": GpuSpec.of(Num_Sm=56, Core_Per_SM=64, Freq=1300, SingleFLOPs=9000, Mem_Bw=700,
                   L2Cache=4, Dev_Mem=16),
    "big": GpuSpec.of(Num_Sm=108, Core_Per_SM=64, Freq=1400, SingleFLOPs=19000, Mem_Bw=1500,
                   L2Cache=40, Dev_Mem=40),
}  # fmt: skip
# A synthetic truth: each GPU runs at a fixed fraction of its roofline, plus a shape term.
EFFICIENCY = {"small": 0.3, "mid": 0.5, "big": 0.8}


def _linear_dims(
    gpus: list[str], specs: dict[str, GpuSpec], count: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``count`` random linear-kernel shapes, repeated on each of ``gpus``, and the spec
    columns of those rows."""
    rng = np.random.default_rng(seed)
    dims = {k: 2.0 ** rng.integers(4, 12, count).astype(float) for k in ("M", "N", "K")}
    dims["B"] = np.ones(count)
    all_dims = {k: np.tile(v, len(gpus)) for k, v in dims.items()}
    spec: dict[str, np.ndarray] = {}
    for name in gpus:
        for key, column in spec_columns(specs[name], count).items():
            spec[key] = np.concatenate([spec.get(key, np.empty(0)), column])
    return all_dims, spec


def _rows(gpus: list[str], seed: int = 0) -> KernelRows:
    count = 300
    all_dims, spec = _linear_dims(gpus, GPUS, count, seed)
    gpu = np.repeat(np.array(gpus), count)
    roofline, _ = class_features("linear", all_dims, spec)
    shape = 1.0 + 0.3 * (all_dims["K"] < 64)
    latency = roofline * shape / np.array([EFFICIENCY[g] for g in gpu])
    return KernelRows("linear", all_dims, gpu, latency, spec)


def test_levels_follow_each_gpu_and_a_new_gpu_is_read_off_the_line() -> None:
    model = fit_class(_rows(["small", "mid", "big"]))
    assert model.levels["small"] > model.levels["mid"] > model.levels["big"]
    assert model.level_slope < 0
    # A GPU faster than any seen is never put nearer its roofline than the best seen.
    huge = np.array([60000.0]), np.array([3000.0])
    assert model.level(*huge)[0] >= min(model.levels.values()) - 1e-9


def test_left_out_gpu_predicted_within_its_neighbours_range() -> None:
    model = fit_class(_rows(["small", "big"]))
    rows = _rows(["mid"], seed=1)
    predicted = model.predict_ms(rows.dims, rows.spec)
    ratio = predicted / rows.latency_ms
    # mid's truth (0.5) lies between small (0.3) and big (0.8): within those bounds.
    assert 0.5 / 0.8 * 0.9 < np.median(ratio) < 0.5 / 0.3 * 1.1


def test_json_round_trip_predicts_the_same() -> None:
    rows = _rows(["small", "mid", "big"])
    model = fit_class(rows)
    again = ClassModel.from_json(model.to_json())
    np.testing.assert_allclose(
        again.predict_ms(rows.dims, rows.spec), model.predict_ms(rows.dims, rows.spec), rtol=1e-6
    )


# GPU-spec inputs in the shape trees (train --spec-features): a shape effect that depends on
# the board (small GEMMs pay more on few-SM boards) is learnt from the specs alone.
SPEC_GPUS = {
    "few_sms": GpuSpec.of(Num_Sm=40, Core_Per_SM=64, Freq=1100, SingleFLOPs=5000, Mem_Bw=200,
                          L2Cache=2, Dev_Mem=8),
    "many_sms": GpuSpec.of(Num_Sm=108, Core_Per_SM=64, Freq=1400, SingleFLOPs=19000,
                           Mem_Bw=1500, L2Cache=40, Dev_Mem=40),
    # Never trained on; its specs lie near few_sms's.
    "new": GpuSpec.of(Num_Sm=44, Core_Per_SM=64, Freq=1100, SingleFLOPs=5500, Mem_Bw=240,
                      L2Cache=2, Dev_Mem=8),
}  # fmt: skip


def _spec_rows(gpus: list[str], names: list[str] | None = None, seed: int = 0) -> KernelRows:
    """Linear kernels whose small-K penalty is x1.6 on boards under 60 SMs, x1 above."""
    count = 400
    all_dims, spec = _linear_dims(gpus, SPEC_GPUS, count, seed)
    roofline, _ = class_features("linear", all_dims, spec)
    penalty = np.where(spec["sms"] < 60, 1.6, 1.0)
    latency = roofline * np.where(all_dims["K"] < 64, penalty, 1.0) * 2.0
    gpu = np.repeat(np.array(names or gpus), count)
    return KernelRows("linear", all_dims, gpu, latency, spec)


def _small_k_ratio(model: ClassModel, rows: KernelRows) -> float:
    shape = model.shape_ms(rows.dims, rows.spec, in_model=False) / rows.latency_ms
    small = rows.dims["K"] < 64
    return float(np.median(shape[small]) / np.median(shape[~small]))


def test_spec_inputs_let_the_trees_learn_a_board_dependent_shape_effect() -> None:
    train_rows = _spec_rows(["few_sms", "many_sms"])
    new = _spec_rows(["new"], seed=1)
    with_spec = fit_class(train_rows, spec_features=True)
    plain = fit_class(train_rows)
    assert with_spec.spec_feature and not plain.spec_feature
    # Truth on the new board: the small-K kernels' penalty is fully there (predicted /
    # measured the same for small and large K); the plain trees can only average it.
    assert abs(_small_k_ratio(with_spec, new) - 1.0) < 0.08
    assert abs(_small_k_ratio(plain, new) - 1.0) > 2 * abs(_small_k_ratio(with_spec, new) - 1.0)
    # Read from the specs only: the same specs under other names give the same answer.
    renamed = fit_class(_spec_rows(["few_sms", "many_sms"], names=["a", "b"]), spec_features=True)
    np.testing.assert_allclose(
        renamed.shape_ms(new.dims, new.spec), with_spec.shape_ms(new.dims, new.spec), rtol=1e-6
    )


def test_spec_inputs_are_the_spec_columns_logs() -> None:
    columns = spec_columns(SPEC_GPUS["many_sms"], 2)
    values = spec_inputs(columns)
    assert values.shape == (2, len(SPEC_INPUTS))
    expected = [
        np.log2(108), np.log2(19000), np.log2(1500), np.log2(40), np.log2(19000 / 1500),
        np.log2(19000 / 108),
    ]  # fmt: skip
    np.testing.assert_allclose(values[0], expected)


def test_spec_feature_model_round_trips_through_json() -> None:
    rows = _spec_rows(["few_sms", "many_sms"])
    model = fit_class(rows, spec_features=True)
    again = ClassModel.from_json(model.to_json())
    assert again.spec_feature
    np.testing.assert_allclose(
        again.shape_ms(rows.dims, rows.spec), model.shape_ms(rows.dims, rows.spec), rtol=1e-6
    )


def _norm_rows(gpus: list[str], seed: int = 0) -> KernelRows:
    """Layer-norm kernels on ``gpus``: each GPU at its own fraction of the roofline."""
    rng = np.random.default_rng(seed)
    count = 300
    dims = {"B": 2.0 ** rng.integers(6, 16, count), "H": 2.0 ** rng.integers(8, 13, count)}
    all_dims = {k: np.tile(v, len(gpus)) for k, v in dims.items()}
    spec: dict[str, np.ndarray] = {}
    for name in gpus:
        for key, column in spec_columns(GPUS[name], count).items():
            spec[key] = np.concatenate([spec.get(key, np.empty(0)), column])
    gpu = np.repeat(np.array(gpus), count)
    roofline, _ = class_features("ln", all_dims, spec)
    # A board-dependent shape effect (what a ridge input could latch on to).
    penalty = np.array([{"small": 0.2, "mid": 0.5, "big": 0.8}[g] for g in gpu])
    latency = (
        roofline * (1.0 + penalty * (all_dims["H"] < 1024)) / np.array([EFFICIENCY[g] for g in gpu])
    )
    return KernelRows("ln", all_dims, gpu, latency, spec)


def test_a_constant_intensity_class_is_not_priced_by_the_boards_fp32_peak() -> None:
    # Layer norm moves 8 bytes for 8 FLOPs whatever its shape: its intensity over the
    # ridge is the board's ridge alone, so the trees must not see it. Two boards alike
    # but for the FP32 peak (the L4 beside a T4: 3.7x the peak) price a memory-bound
    # layer norm the same; a fit that sees the ridge would read the peak as a board.
    model = fit_class(_norm_rows(["small", "mid", "big"]))
    assert not model.ridge_feature and fit_class(_rows(["small", "mid"])).ridge_feature
    new = _norm_rows(["mid"], seed=1)
    peaked = {**new.spec, "fp32_gflops": new.spec["fp32_gflops"] * 3.7}
    np.testing.assert_allclose(model.shape_ms(new.dims, peaked), model.shape_ms(new.dims, new.spec))
    # Files before the change were fitted with it, and read so.
    document = model.to_json()
    assert document["ridge_feature"] is False
    del document["ridge_feature"]
    assert ClassModel.from_json(document).ridge_feature
