"""The center's correction learns the host's floor where its runs show one (issue #16)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from tools.estimators.gpu.correction import (
    HOST_MIN_ROWS,
    GpuStepCorrection,
    GpuStepRow,
    fit_correction,
    heldout_errors,
)

GPU = "NVIDIA H100 80GB HBM3"
WHEN = datetime(2026, 11, 26, tzinfo=UTC)


def _rows(count: int, *, factor: float, host_s: float, seed: int = 0) -> list[GpuStepRow]:
    """Steps whose time is max(factor x predicted, host x operators), 3% noise."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        predicted = math.exp(rng.uniform(math.log(2e-4), math.log(0.2)))
        operators = rng.randint(20, 800)
        measured = max(factor * predicted, host_s * operators) * math.exp(rng.gauss(0, 0.03))
        rows.append(
            GpuStepRow(
                id=f"r{i}",
                gpu_model=GPU,
                measured_step_s=measured,
                predicted_step_s=predicted,
                measured_at=WHEN,
                operators=operators,
            )
        )
    return rows


def test_the_floor_and_its_factor_are_found_and_score_better_on_rows_not_fitted() -> None:
    fitted = fit_correction(_rows(120, factor=0.8, host_s=60e-6), "gpu-opcost-x")
    assert fitted.host_s_per_operator[GPU] == pytest.approx(60e-6, rel=0.1)
    assert fitted.factor(GPU) == pytest.approx(0.8, rel=0.1)
    heldout = _rows(60, factor=0.8, host_s=60e-6, seed=1)
    alone = fit_correction([r.model_copy(update={"operators": 0}) for r in heldout], "x")
    assert not alone.host_s_per_operator  # nothing counted: the factor alone, as before
    assert heldout_errors(heldout, fitted) < 0.05 < heldout_errors(heldout, alone)


def test_no_floor_where_the_host_never_bounds_the_step() -> None:
    fitted = fit_correction(_rows(60, factor=1.3, host_s=1e-9), "x")
    assert fitted.host_s_per_operator.get(GPU, 0.0) * 800 < 0.2e-3 * 1.3
    assert fitted.factor(GPU) == pytest.approx(1.3, rel=0.05)


def test_too_few_rows_or_uncounted_rows_fit_no_floor() -> None:
    few = _rows(HOST_MIN_ROWS - 1, factor=1.0, host_s=60e-6)
    assert fit_correction(few, "x").host_s_per_operator == {}


def test_a_step_is_floored_by_the_host_only_on_the_gpu_whose_runs_showed_it() -> None:
    correction = GpuStepCorrection(
        base_estimator="x",
        factors={GPU: 0.5},
        pooled_factor=2.0,
        rows={GPU: 9},
        host_s_per_operator={GPU: 50e-6},
    )
    assert correction.step_s(GPU, 0.010, operators=100) == pytest.approx(0.005)
    assert correction.step_s(GPU, 0.001, operators=100) == pytest.approx(0.005)  # the host
    assert correction.step_s(GPU, 0.001, operators=0) == pytest.approx(0.0005)  # not counted
    assert correction.step_s("NVIDIA A100 80GB", 0.001, operators=100) == pytest.approx(0.002)
    assert "50 us a dispatched operator" in correction.describe(GPU)


def test_a_correction_stored_before_the_floor_still_loads() -> None:
    stored = '{"base_estimator": "x", "factors": {"V100": 1.1}, "pooled_factor": 1.0, "rows": {}}'
    loaded = GpuStepCorrection.model_validate_json(stored)
    assert loaded.host_s_per_operator == {} and loaded.step_s("V100", 1.0, 10**6) == 1.1
