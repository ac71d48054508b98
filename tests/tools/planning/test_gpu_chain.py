"""GPU options in the estimator chain: white-box GPU memory on every answer, the
per-operator time model only where its validation error beats the fallback's, and an
option whose peak exceeds the GPU refused with the GPU, the MiB needed and available."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_base.records import ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
from tools.estimators.gpu.planner import GpuOpCostEstimator
from tools.estimators.gpu.selection import choose_opcost
from tools.estimators.gpu_memory.planner import WhiteBoxGpuMemory
from tools.planning import hardware
from tools.planning.chain import EstimatorChain
from tools.planning.service import plan_workload

REPO = Path(__file__).resolve().parents[3]


def _spec(batch: int = 64, **goals: object) -> WorkloadSpec:
    return WorkloadSpec(
        name="cnn",
        user="alice",
        workload=DNNTraining(
            model=str(REPO / "examples/models/small_cnn.py"),
            model_class="SmallCNN",
            dataset_samples=5000,
            epochs=2,
            batch_sizes=[batch],
        ),
        goals=Goals.model_validate({"systems": ["owens"], **goals}),
    )


def test_the_rule_uses_the_per_operator_model_only_when_its_error_is_lower() -> None:
    better = choose_opcost({"validation": {"e2e_mape": 0.05}}, "gpu-opcost-x")
    assert better.use and "5.0%" in better.reason and "27.7%" in better.reason
    worse = choose_opcost({"validation": {"e2e_mape": 0.315}}, "gpu-opcost-x")
    assert not worse.use and "not used" in worse.reason and "31.5%" in worse.reason
    # the fallback measured on the same runs wins over its Gavel figure
    same = choose_opcost({"validation": {"logo_mape": 0.2, "analytic_e2e_mape": 0.195}})
    assert not same.use and same.fallback_error == 0.195 and "same runs" in same.reason
    garbage: list[dict[str, object]] = [
        {},
        {"validation": "x"},
        {"validation": {"e2e_mape": "0.1"}},
        {"validation": {"e2e_mape": float("nan")}},
        {"validation": {"e2e_mape": True}},
    ]
    for meta in garbage:
        choice = choose_opcost(meta)
        assert not choice.use and "records no" in choice.reason
    assert not choose_opcost(None).use
    assert worse.fallback_error == hardware.GAVEL_FIT_LOGO_MAPE


async def test_gpu_options_carry_white_box_memory_and_say_which_time_model_and_why(
    sqlite_kb: SQLiteKnowledgeBase,
) -> None:
    chain = EstimatorChain(sqlite_kb)
    spec = _spec()
    catalog = load_seed_catalog()
    estimators = await chain.estimators(spec, catalog)
    assert all(isinstance(e, WhiteBoxGpuMemory) for e in estimators)
    selection = plan_workload(spec, catalog, estimators)
    gpu = [o for o in selection.ranked if o.option.gpus_per_node]
    cpu = [o for o in selection.ranked if not o.option.gpus_per_node]
    assert gpu and cpu
    choice = chain.gpu_time_choice()
    for option in gpu:
        peak = option.estimate.gpu_memory
        assert peak is not None and peak.fits is True
        assert peak.allocated_mib <= peak.reserved_mib < peak.total_mib
        assert option.estimate.gpu_memory_mb is not None
        assert option.estimate.gpu_memory_mb.point == peak.total_mib
        assert "GPU memory white-box" in option.estimate.label
        if not choice.use:
            assert choice.reason in option.estimate.label
    assert all(o.estimate.gpu_memory is None for o in cpu)
    if not choice.use:
        assert choice.reason in chain.unavailable()


async def test_the_chain_puts_the_per_operator_model_in_when_it_wins(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = EstimatorChain(sqlite_kb)
    monkeypatch.setattr(chain, "_gpu_choice", choose_opcost({"validation": {"e2e_mape": 0.01}}))
    estimators = await chain.estimators(_spec(), load_seed_catalog())
    inner = [e.inner for e in estimators if isinstance(e, WhiteBoxGpuMemory)]
    assert any(isinstance(e, GpuOpCostEstimator) for e in inner)
    selection = plan_workload(_spec(), load_seed_catalog(), estimators)
    answered = {o.estimate.estimator_id for o in selection.ranked if o.option.gpus_per_node}
    assert any(a.startswith("gpu-opcost") for a in answered), answered
    for option in selection.ranked:
        if option.estimate.estimator_id.startswith("gpu-opcost"):
            assert isinstance(option.estimate, ResourceEstimate)
            assert "below the analytic fallback's" in option.estimate.label
            assert option.estimate.gpu_memory is not None
    assert chain.unavailable() == []


async def test_an_option_whose_peak_exceeds_the_gpu_is_infeasible_naming_gpu_and_mib(
    sqlite_kb: SQLiteKnowledgeBase,
) -> None:
    chain = EstimatorChain(sqlite_kb)
    spec = _spec(batch=2**17, gpu_only=True)
    catalog = load_seed_catalog()
    selection = plan_workload(spec, catalog, await chain.estimators(spec, catalog))
    refused = [i for i in selection.infeasible if i.constraint == "gpu_memory"]
    assert refused
    reason = refused[0].reason
    assert "MiB of GPU memory" in reason and "NVIDIA Tesla P100" in reason
    assert "has 16,384 MiB" in reason and "CUDA context" in reason


def test_gavel_roofline_walltime_uses_the_analytic_start_up_range() -> None:
    """The trained GPU estimators add the analytic model's start-up (10/30/120 s), not a
    fixed 120 s of their own (their point was 90 s long before)."""
    import math

    from tools.estimators.dnn.adapter import GPURooflineEstimator, trained_roofline
    from tools.planning.analytic import STARTUP_POINT_S
    from tools.planning.estimation import Candidate

    catalog = load_seed_catalog()
    system = catalog.system("pitzer")
    node = next(n for n in system.node_types if n.gpu and n.gpu.memory_mb == 32768)
    partition = next(p for p in system.partitions if p.node_type == node.name)
    workload = DNNTraining(
        model="resnet50", dataset_samples=6400, epochs=1, batch_sizes=[64],
        input_shape=[3, 224, 224],
    )  # fmt: skip
    answer = GPURooflineEstimator().estimate(
        workload, Candidate(system, partition, node, 1, 4, 1, 64)
    )
    assert isinstance(answer, ResourceEstimate)
    model, _, _ = trained_roofline()
    assert node.gpu is not None and node.gpu.fp32_tflops is not None
    steps = math.ceil(6400 / 64)
    work = steps * model.step_s("ResNet-50", 64, node.gpu.fp32_tflops)
    assert answer.runtime_s.point == pytest.approx(STARTUP_POINT_S + work)
