"""The per-operator cost model: levels per GPU, shape trees, extrapolation and round trip."""

from __future__ import annotations

import numpy as np

from tools.estimators.gpu.features import class_features
from tools.estimators.gpu.kernels import KernelRows
from tools.estimators.gpu.opcost import ClassModel, fit_class, spec_columns
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


def _rows(gpus: list[str], seed: int = 0) -> KernelRows:
    rng = np.random.default_rng(seed)
    count = 300
    dims = {k: 2.0 ** rng.integers(4, 12, count).astype(float) for k in ("M", "N", "K")}
    dims["B"] = np.ones(count)
    all_dims = {k: np.tile(v, len(gpus)) for k, v in dims.items()}
    spec: dict[str, np.ndarray] = {}
    for name in gpus:
        for key, column in spec_columns(GPUS[name], count).items():
            spec[key] = np.concatenate([spec.get(key, np.empty(0)), column])
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
