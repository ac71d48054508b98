"""The planner's GPU estimator: answers catalog GPU options, declines what it does not model."""

from __future__ import annotations

from pathlib import Path

from knowledge_base.catalog import Catalog
from knowledge_base.records import ResourceEstimate
from knowledge_base.workload import DNNTraining, Precision
from tools.estimators.gpu.planner import GpuOpCostEstimator
from tools.planning.estimation import Candidate, NoEstimate

CATALOG = Path(__file__).resolve().parents[4] / "knowledge_base/seed/catalog.json"


def _gpu_candidate(gpus: int = 1) -> Candidate:
    catalog = Catalog.model_validate_json(CATALOG.read_text())
    for name in catalog.names():
        system = catalog.system(name)
        types = {t.name: t for t in system.node_types}
        for partition in system.partitions:
            node = types.get(partition.node_type or "")
            gpu = node.gpu if node is not None else None
            if partition.gpus_per_node and node is not None and gpu is not None and gpu.fp32_tflops:
                return Candidate(system, partition, node, 1, 4, gpus, batch_size=32)
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
