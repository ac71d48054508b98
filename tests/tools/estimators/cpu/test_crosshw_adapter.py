"""Cross-hardware (Gavel/Pollux) and the planner adapter in front of the analytic fallback."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.records import ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining, Precision
from tools.estimators.gpu.gavel_crosshw import cross_hardware, load_gpu_points, rank_held_out
from tools.estimators.gpu.gavel_estimator import GPU_ROOFLINE_ID, GPURooflineEstimator, gavel_points
from tools.estimators.gpu.gavel_roofline import BatchRoofline
from tools.planning.analytic import AnalyticDNNEstimator
from tools.planning.estimation import Candidate, NoEstimate, estimate_first


def test_a_faster_gpu_speeds_up_the_work_but_not_the_overhead() -> None:
    points = [p for p in gavel_points() if p.model == "ResNet-18" and p.gpu == "p100"]
    model = BatchRoofline().fit(points)
    overhead, per_sample = model.fits[("ResNet-18", "p100")]
    assert overhead > 0 and per_sample > 0
    here = model.step_s("ResNet-18", 64, 9.3)
    twice = model.step_s("ResNet-18", 64, 18.6)
    assert here / 2 < twice < here
    assert math.isclose(twice, overhead + per_sample * 64 / 2)
    assert math.isnan(model.step_s("CycleGAN", 64, 9.3))


def test_cross_hardware_never_selects_with_the_test_gpu(shared_data: Path) -> None:
    points = load_gpu_points(shared_data / "dnn_profiles")
    assert {p.gpu for p in points} == {"k80", "p100", "v100", "t4"}
    result = cross_hardware(points, ["k80", "p100"], "v100")
    assert result.rows_test > 0 and result.test_gpu == "v100"
    assert set(result.test) == {"blackbox", "whitebox", "scaling_law"}
    assert result.selected in result.test
    assert all(math.isfinite(s.mape) for s in result.test.values())


def test_held_out_ranking_does_not_reward_an_estimator_for_being_biased_high() -> None:
    rng = np.random.default_rng(0)
    truth = rng.uniform(0.1, 1.0, 200)
    held = {
        # Short half the time, by 10% at most.
        "close": truth * rng.uniform(0.9, 1.1, truth.size),
        # Short about 9% of the time, 50% over on average: biased high, and noisier.
        "high": truth * np.exp(rng.normal(0.4, 0.3, truth.size)),
    }
    calibrated, point = rank_held_out(held, truth)
    assert point[0].name == "high"  # counted on point estimates, the bias wins
    assert calibrated[0].name == "close"  # each p90 calibrated, the waste decides
    assert calibrated[0].over_error_pct < calibrated[1].over_error_pct


def test_cross_hardware_reports_both_rules(shared_data: Path) -> None:
    points = load_gpu_points(shared_data / "dnn_profiles")
    result = cross_hardware(points, ["k80", "p100"], "v100")
    assert result.selection[0].name == result.selected
    assert result.selection_point[0].name == result.selected_point
    assert {r.name for r in result.selection_point} == set(result.test)


def _candidate(catalog: Catalog, system: str, gpus: int, batch: int = 32) -> Candidate:
    sysm = catalog.system(system)
    types = {t.name: t for t in sysm.node_types}
    for partition in sysm.partitions:
        node = types.get(partition.node_type or "")
        if node is not None and partition.gpus_per_node >= gpus and (gpus > 0) == bool(node.gpus):
            return Candidate(sysm, partition, node, 1, min(node.cores or 1, 8), gpus, batch)
    raise AssertionError(f"no partition with {gpus} GPUs on {system}")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_seed_catalog()


RESNET50 = DNNTraining(
    model="resnet50", dataset_samples=20000, input_shape=[3, 224, 224], epochs=50, batch_sizes=[32]
)


def test_resnet50_on_one_v100_is_answered_before_the_fallback(catalog: Catalog) -> None:
    candidate = _candidate(catalog, "pitzer", 1)
    answer = estimate_first([GPURooflineEstimator(), AnalyticDNNEstimator()], RESNET50, candidate)
    assert isinstance(answer, ResourceEstimate)
    assert answer.estimator_id == GPU_ROOFLINE_ID
    assert answer.runtime_s.low <= answer.runtime_s.point <= answer.runtime_s.high
    assert answer.gpu_memory_mb is not None  # memory comes from the analytic model


@pytest.mark.parametrize(
    ("workload", "system", "gpus", "why"),
    [
        (RESNET50, "ascend", 1, "outside the measured GPUs"),
        (RESNET50, "pitzer", 2, "single GPUs"),
        (RESNET50, "pitzer", 0, "single GPUs"),
        (RESNET50.model_copy(update={"model": "vgg16"}), "pitzer", 1, "no measurements"),
        (RESNET50.model_copy(update={"precision": Precision.AMP}), "pitzer", 1, "FP32 only"),
    ],
)
def test_it_declines_where_it_is_not_confident(
    catalog: Catalog, workload: DNNTraining, system: str, gpus: int, why: str
) -> None:
    answer = GPURooflineEstimator().estimate(workload, _candidate(catalog, system, gpus))
    assert isinstance(answer, NoEstimate) and why in answer.reason
