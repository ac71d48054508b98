"""The analytic DNN fallback: its Gavel fit, its memory model, and seed 001's figures."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog, GPUSpec, NodeType, Partition, System
from knowledge_base.records import ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining, Precision
from tools.planning import hardware
from tools.planning.analytic import (
    ANALYTIC_ID,
    ANALYTIC_LABEL,
    STARTUP_POINT_S,
    STARTUP_S,
    AnalyticDNNEstimator,
    input_scale,
)
from tools.planning.estimation import Candidate, NoEstimate
from tools.planning.gavel_fit import fit_gpu_efficiency, load_gavel_points
from tools.planning.zoo import ZOO, lookup

SEED_001 = DNNTraining(model="resnet50", dataset_samples=20000, epochs=50, batch_sizes=[32, 64])


def _candidate(catalog: Catalog, partition: str, cores: int, gpus: int, batch: int) -> Candidate:
    system = catalog.system("pitzer")
    part = system.partition(partition)
    node_type = system.node_type_of(part)
    assert node_type is not None
    return Candidate(system, part, node_type, 1, cores, gpus, batch)


def _estimate(workload: DNNTraining, candidate: Candidate) -> ResourceEstimate:
    answer = AnalyticDNNEstimator().estimate(workload, candidate)
    assert isinstance(answer, ResourceEstimate), answer
    return answer


def _gpu_candidate(memory_gb: int, batch: int) -> Candidate:
    gpu = GPUSpec(model="test GPU", memory_mb=memory_gb * 1024, fp32_tflops=10.0)
    node = NodeType(name="g", cores=8, memory_mb=64000, gpus=1, gpu=gpu)
    part = Partition(
        name="gpu", node_type="g", max_nodes=1, max_cores_per_node=8, max_memory_mb=64000,
        max_minutes=60, gpus_per_node=1,
    )  # fmt: skip
    system = System(name="t", center="lab", node_types=[node], partitions=[part])
    return Candidate(system, part, node, 1, 8, 1, batch)


def test_the_shipped_efficiency_is_what_gavels_data_fits(shared_data: Path) -> None:
    fit = fit_gpu_efficiency(
        load_gavel_points(shared_data / "dnn_profiles/gavel/physical_cluster_throughputs.json")
    )
    assert fit.points == 18
    assert fit.efficiency == pytest.approx(hardware.GPU_EFFICIENCY, abs=5e-4)
    assert fit.overhead_s == pytest.approx(hardware.GPU_STEP_OVERHEAD_S, abs=5e-4)
    assert fit.mape == pytest.approx(hardware.GAVEL_FIT_MAPE, abs=5e-3)
    assert max(fit.leave_one_gpu_out_mape.values()) == pytest.approx(
        hardware.GAVEL_FIT_LOGO_MAPE, abs=5e-3
    )
    assert fit.k80_mape == pytest.approx(hardware.GAVEL_FIT_K80_MAPE, abs=5e-3)


def test_gpu_memory_reproduces_gavels_out_of_memory_boundary() -> None:
    """Gavel: ResNet-50 batch 128 fails on a 12 GB K80 and runs on a 16 GB P100; 64 runs."""
    workload = SEED_001.model_copy(update={"batch_sizes": [128]})

    def need_gb(batch: int) -> float:
        estimate = _estimate(workload, _gpu_candidate(16, batch))
        assert estimate.gpu_memory_mb is not None
        return estimate.gpu_memory_mb.point / 1024

    assert 12 < need_gb(128) < 16
    assert need_gb(64) < 12


def test_seed_001_cpu_node_estimate_brackets_its_9_hours(catalog: Catalog) -> None:
    for batch in (32, 64):
        runtime = _estimate(SEED_001, _candidate(catalog, "serial", 48, 0, batch)).runtime_s
        assert runtime.low <= 9 * 3600 <= runtime.high
        assert 6 * 3600 < runtime.point < 11 * 3600


def test_seed_001_v100_walltime_would_cover_its_2_hours(catalog: Catalog) -> None:
    """Seed 001 reports 2 h on a 32 GB V100; the fit to Gavel's V100 expects ~0.9 h.

    Gavel measured 254 ResNet-50 images/s at batch 32 on a V100 (1.1 h for 1 M samples);
    seed 001's figure likely includes data loading and evaluation the model does not
    see. The planned walltime (upper estimate x 1.1) still covers it.
    """
    runtime = _estimate(SEED_001, _candidate(catalog, "gpuserial", 24, 1, 32)).runtime_s
    assert runtime.point < 2 * 3600 <= runtime.high * 1.1


def test_two_gpus_are_faster_than_one_and_amp_faster_than_fp32(catalog: Catalog) -> None:
    one = _estimate(SEED_001, _candidate(catalog, "gpuserial", 24, 1, 64)).runtime_s.point
    two = _estimate(SEED_001, _candidate(catalog, "gpuserial", 48, 2, 64)).runtime_s.point
    amp = _estimate(
        SEED_001.model_copy(update={"precision": Precision.AMP}),
        _candidate(catalog, "gpuserial", 24, 1, 64),
    ).runtime_s.point
    assert two < one
    assert amp < one


def test_estimates_are_labelled_untrained_with_wide_ordered_intervals(catalog: Catalog) -> None:
    estimate = _estimate(SEED_001, _candidate(catalog, "serial", 48, 0, 32))
    assert (estimate.estimator_id, estimate.label) == (ANALYTIC_ID, ANALYTIC_LABEL)
    runtime = estimate.runtime_s
    assert runtime.low < runtime.point < runtime.high
    assert runtime.high / runtime.low >= 4


def test_larger_inputs_cost_more_flops_and_memory() -> None:
    resnet = lookup("ResNet-50")
    assert resnet is not None
    assert input_scale(resnet, [3, 448, 448]) == pytest.approx(4.0)
    assert input_scale(resnet, []) == 1.0
    bert = lookup("bert")
    assert bert is not None
    assert input_scale(bert, [256]) == pytest.approx(2.0)


def test_every_zoo_model_estimates_on_cpu_and_gpu(catalog: Catalog) -> None:
    for facts in ZOO:
        workload = SEED_001.model_copy(update={"model": facts.name})
        for candidate in (
            _candidate(catalog, "serial", 48, 0, 32),
            _candidate(catalog, "gpuserial", 24, 1, 32),
        ):
            assert _estimate(workload, candidate).runtime_s.point > 0


def test_an_unknown_model_is_declined_with_the_names_it_knows(catalog: Catalog) -> None:
    workload = SEED_001.model_copy(update={"model": "my_net.py"})
    answer = AnalyticDNNEstimator().estimate(workload, _candidate(catalog, "serial", 48, 0, 32))
    assert isinstance(answer, NoEstimate)
    assert "workload.model='my_net.py'" in answer.reason
    assert "resnet50" in answer.reason


def test_cpu_peaks_come_from_the_cpu_model_or_a_labelled_default(catalog: Catalog) -> None:
    pitzer = catalog.system("pitzer")
    cascade = next(n for n in pitzer.node_types if n.name == "cascadelake-48core-regular")
    assert hardware.cpu_peak(cascade).gflops_per_core == pytest.approx(2.9 * 64)
    unknown = NodeType(name="mystery")
    assert "unknown" in hardware.cpu_peak(unknown).source


TINY_MODEL = """\
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.body(x)


def example_batch(batch_size):
    return torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))
"""


def test_a_tiny_model_asks_for_what_its_estimate_says_not_fixed_floors(tmp_path: Path) -> None:
    # Issue #19 item 4: a 676-parameter model (a 34 s job) was asked 6 GB per node, over a
    # 4 GB debug queue, and 6 min of walltime: x2.5 of a fixed 120 s start-up and x1.4 of
    # a fixed 4 GB host base. The request is now the upper estimate x the stated margins.
    from tools.planning.builder import PlanningConfig
    from tools.planning.selector import plan
    from tools.planning.workload_files import parse_workload

    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    document = {
        "name": "tiny", "user": "alice",
        "workload": {"kind": "dnn_training", "model": str(tmp_path / "tiny.py"),
                     "model_class": "TinyNet", "dataset_samples": 640, "epochs": 3,
                     "batch_sizes": [32]},
        "goals": {"systems": ["pitzer"], "cpu_only": True},
    }  # fmt: skip
    spec = parse_workload(document, "test")
    selection = plan(spec, load_seed_catalog(), now=datetime(2026, 11, 25, 12, tzinfo=UTC))
    best = selection.recommended
    assert best is not None
    estimate = best.estimate
    assert estimate.memory_mb.point < 1024  # fits any debug queue
    assert best.option.memory_mb <= 1024
    assert estimate.runtime_s.point < 60
    margin = PlanningConfig().safety_factor
    assert estimate.runtime_s.high <= STARTUP_S + 2.5 * (estimate.runtime_s.point - STARTUP_POINT_S)
    assert best.option.walltime_s == 60 * math.ceil(estimate.runtime_s.high * margin / 60)
    assert best.option.walltime_s <= 180
