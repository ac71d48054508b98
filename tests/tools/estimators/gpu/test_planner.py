"""The planner's GPU estimator: answers catalog GPU options, declines what it does not model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.records import ResourceEstimate
from knowledge_base.workload import DNNTraining, Precision
from tools.estimators.gpu.planner import GpuOpCostEstimator
from tools.estimators.gpu.promoted import gpu_step
from tools.planning.analytic import STARTUP_POINT_S
from tools.planning.estimation import Candidate, NoEstimate

CATALOG = Path(__file__).resolve().parents[4] / "knowledge_base/seed/catalog.json"


def _gpu_candidate(gpus: int = 1, batch_size: int = 32) -> Candidate:
    catalog = Catalog.model_validate_json(CATALOG.read_text())
    for name in catalog.names():
        system = catalog.system(name)
        types = {t.name: t for t in system.node_types}
        for partition in system.partitions:
            node = types.get(partition.node_type or "")
            gpu = node.gpu if node is not None else None
            if partition.gpus_per_node and node is not None and gpu is not None and gpu.fp32_tflops:
                return Candidate(system, partition, node, 1, 4, gpus, batch_size=batch_size)
    raise AssertionError("the seeded catalog has no GPU partition")


def _workload(**extra: object) -> DNNTraining:
    return DNNTraining.model_validate(
        {"model": "resnet18", "dataset_samples": 3200, "epochs": 1, "batch_sizes": [32],
         "input_shape": [3, 32, 32], **extra}
    )  # fmt: skip


def test_gpu_option_answered_with_id_validation_error_and_held_out_interval() -> None:
    answer = GpuOpCostEstimator().estimate(_workload(), _gpu_candidate())
    assert isinstance(answer, ResourceEstimate)
    assert answer.estimator_id.startswith("gpu-opcost-")
    assert answer.validation_error is not None and answer.runtime_s.coverage_basis == "held_out"
    r = answer.runtime_s
    assert 10 < r.low <= r.point <= r.high
    assert answer.option.walltime_s >= r.high


def test_mixed_precision_and_cpu_options_fall_through_with_a_reason() -> None:
    estimator = GpuOpCostEstimator()
    amp = estimator.estimate(_workload(precision=Precision.AMP), _gpu_candidate())
    assert isinstance(amp, NoEstimate) and "mixed precision" in amp.reason
    cpu = _gpu_candidate(gpus=0)
    assert isinstance(estimator.estimate(_workload(), cpu), NoEstimate)


def test_the_same_step_asked_again_is_estimated_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A what-if asks every partition with the GPU, the MCP server every request about the
    model: the step (model, batch per GPU, optimizer, GPU, GPU count, link) is estimated
    once; the epochs and samples change the run time, not the step."""
    from tools.estimators.gpu import planner

    planner.clear_step_cache()
    calls: list[int] = []
    real = gpu_step

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["gpus"])
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "gpu_step", counted)
    candidate = _gpu_candidate()
    first = GpuOpCostEstimator().estimate(_workload(), candidate)
    for epochs in (1, 2, 3):  # other requests, other estimator objects, one step
        again = GpuOpCostEstimator().estimate(_workload(epochs=epochs), candidate)
    assert len(calls) == 1  # was one per request
    assert isinstance(first, ResourceEstimate) and isinstance(again, ResourceEstimate)
    steps_s = (first.runtime_s.point - STARTUP_POINT_S) / 100  # 3,200 samples / 32
    assert again.runtime_s.point - STARTUP_POINT_S == pytest.approx(3 * 100 * steps_s)
    # What decides the step is still asked: another batch, another GPU count.
    GpuOpCostEstimator().estimate(_workload(), _gpu_candidate(batch_size=64))
    GpuOpCostEstimator().estimate(_workload(), _gpu_candidate(gpus=2))
    assert len(calls) == 3 and planner.step_cache_info() == (3, 3)
