"""One owner of the serving GPU correction: O(1) registry reads for N requests, a new
promotion picked up on the bus's event or after ``recheck_s``, and one function that
applies it for every door (the planner's chain and ``rightsize estimate --gpu``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import WorkloadSpec
from tests.tools.conftest import (
    V100,
    Clock,
    count_registry_reads,
    opcost_of,
    small_cnn_spec,
)
from tests.tools.conftest import promote_gpu_correction as promote
from tools.estimators.gpu.correction import GPU_CORRECTION_TARGET, GpuStepCorrection
from tools.estimators.gpu.promoted import PromotedGpuCorrection, ServingCorrection, gpu_step
from tools.planning.chain import EstimatorChain


def count_reads(kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return count_registry_reads(kb, monkeypatch, GPU_CORRECTION_TARGET)


def _spec() -> WorkloadSpec:
    return small_cnn_spec(systems=["pitzer"])


async def test_n_requests_read_the_registry_once_and_a_promotion_is_picked_up(
    sqlite_kb: SQLiteKnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = load_seed_catalog()
    reads = count_reads(sqlite_kb, monkeypatch)
    first = await promote(sqlite_kb, tmp_path, "corr-1", {V100: 1.6})
    clock = Clock()
    chain = EstimatorChain(sqlite_kb)
    chain.gpu_correction = PromotedGpuCorrection(recheck_s=60, clock=clock)
    for _ in range(25):
        estimators = await chain.estimators(_spec(), catalog)
    assert len(reads) == 1  # was one per request
    served = opcost_of(estimators).correction
    assert served is not None and served.record_id == "corr-1"
    assert served.correction == first and "corr-1" in chain.gpu_time_choice().reason

    # Model Promotion promotes another; the agent hears estimator.promoted on the bus
    second = await promote(sqlite_kb, tmp_path, "corr-2", {V100: 1.3})
    chain.forget_promoted()
    for _ in range(10):
        estimators = await chain.estimators(_spec(), catalog)
    assert len(reads) == 2
    served = opcost_of(estimators).correction
    assert served is not None and served.correction == second
    assert "corr-2" in chain.gpu_time_choice().reason

    # a process that does not hear the bus sees the next one within recheck_s
    await promote(sqlite_kb, tmp_path, "corr-3", {V100: 1.1})
    clock.now_s += 59
    served = opcost_of(await chain.estimators(_spec(), catalog)).correction
    assert served is not None and served.record_id == "corr-2" and len(reads) == 2
    clock.now_s += 2
    for _ in range(10):
        estimators = await chain.estimators(_spec(), catalog)
    served = opcost_of(estimators).correction
    assert served is not None and served.record_id == "corr-3" and len(reads) == 3


async def test_a_recheck_that_finds_the_same_promotion_keeps_the_loaded_artifact(
    sqlite_kb: SQLiteKnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await promote(sqlite_kb, tmp_path, "corr-1", {V100: 1.6})
    clock = Clock()
    owner = PromotedGpuCorrection(recheck_s=10, clock=clock)
    served = await owner.current(sqlite_kb)
    assert served is not None
    (tmp_path / "corr-1.json").unlink()  # loaded once: not read again for the same id
    clock.now_s += 11
    assert await owner.current(sqlite_kb) is served and owner.registry_reads == 2


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda p: p.write_text("{not json"), "unreadable"),
        (lambda p: p.unlink(), "unreadable"),
        (None, "corrects gpu-opcost-older"),
    ],
)
async def test_a_promoted_correction_that_cannot_serve_is_said_once_and_not_applied(
    sqlite_kb: SQLiteKnowledgeBase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    damage: Callable[[Path], object] | None,
    words: str,
) -> None:
    reads = count_reads(sqlite_kb, monkeypatch)
    base = "gpu-opcost-older" if damage is None else None
    await promote(sqlite_kb, tmp_path, "corr-bad", {V100: 1.6}, base=base)
    if damage is not None:
        damage(tmp_path / "corr-bad.json")
    catalog = load_seed_catalog()
    chain = EstimatorChain(sqlite_kb)
    for _ in range(5):
        estimators = await chain.estimators(_spec(), catalog)
    assert len(reads) == 1
    if chain.gpu_time_choice().use:
        assert opcost_of(estimators).correction is None
    [problem] = [u for u in chain.unavailable() if "GPU correction" in u]
    assert "corr-bad" in problem and words in problem


def test_the_recheck_interval_is_checked() -> None:
    from knowledge_base.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="recheck_s"):
        PromotedGpuCorrection(recheck_s=-1)


def test_gpu_step_applies_the_gpu_factor_or_the_pooled_one_and_says_so() -> None:
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import catalog_gpus, spec_for_catalog_gpu
    from tools.estimators.gpu.workload_trace import kernels_at

    gpus = catalog_gpus(load_seed_catalog())
    model = load_step_model()
    kernels, parameters = kernels_at(_spec().workload, 64)  # type: ignore[arg-type]
    serving = ServingCorrection(
        "corr-1",
        GpuStepCorrection(
            base_estimator=model.estimator_id,
            factors={V100: 1.6},
            pooled_factor=1.25,
            rows={V100: 7},
        ),
        0.04,
    )
    for name, factor, runs in ((V100, 1.6, 7), ("NVIDIA A100 80GB", 1.25, 0)):
        spec = spec_for_catalog_gpu(gpus[name])
        plain = gpu_step(model, kernels, spec, parameters=parameters, optimizer="sgd")
        corrected = gpu_step(
            model, kernels, spec, parameters=parameters, optimizer="sgd", correction=serving
        )
        assert plain.correction is None and plain.describe() == ""
        assert corrected.step_s.p50 == pytest.approx(plain.step_s.p50 * factor)
        assert corrected.forward_backward_s.p90 == pytest.approx(
            plain.forward_backward_s.p90 * factor
        )
        applied = corrected.correction
        assert applied is not None and applied.factor == factor and applied.runs == runs
        assert applied.pooled is (runs == 0) and applied.correction_id == "corr-1"
        assert f"x{factor:.2f}" in corrected.describe()


def test_gpu_step_floors_a_host_bound_step_and_says_so() -> None:
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import catalog_gpus, spec_for_catalog_gpu
    from tools.estimators.gpu.workload_trace import kernels_at

    gpus = catalog_gpus(load_seed_catalog())
    model = load_step_model()
    kernels, parameters = kernels_at(_spec().workload, 64)  # type: ignore[arg-type]
    spec = spec_for_catalog_gpu(gpus[V100])
    plain = gpu_step(model, kernels, spec, parameters=parameters, optimizer="sgd")
    per_operator = 2 * plain.step_s.p90 / kernels.host_operators  # the host bounds it
    serving = ServingCorrection(
        "corr-2",
        GpuStepCorrection(
            base_estimator=model.estimator_id,
            factors={V100: 1.0},
            pooled_factor=1.0,
            rows={V100: 12},
            host_s_per_operator={V100: per_operator},
        ),
        0.05,
    )
    floored = gpu_step(
        model, kernels, spec, parameters=parameters, optimizer="sgd", correction=serving
    )
    floor = per_operator * kernels.host_operators
    assert floored.step_s.p10 == floored.step_s.p90 == pytest.approx(floor)
    assert floored.forward_backward_s.p50 == pytest.approx(floor)
    assert floored.correction is not None and floored.correction.host_floor_s == floor
    assert "(the host)" in floored.describe()
