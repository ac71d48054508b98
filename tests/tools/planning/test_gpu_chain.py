"""GPU options in the estimator chain: white-box GPU memory where it can change the
verdict, the per-operator time model only where its validation error beats the
fallback's, and an option whose peak exceeds the GPU refused with the GPU and its size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from knowledge_base.catalog import GPUSpec
from knowledge_base.records import GpuMemoryPeak, Interval, ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining
from tests.tools.conftest import opcost_of, small_cnn_spec
from tools.estimators.gpu.memory.planner import (
    MODEL_FILE_RATIO,
    WHITE_BOX_RATIO,
    WhiteBoxGpuMemory,
    far_above_capacity,
    ratio_band,
    white_box_needed,
)
from tools.estimators.gpu.selection import choose_opcost
from tools.planning import hardware
from tools.planning.chain import EstimatorChain
from tools.planning.service import plan_workload

REPO = Path(__file__).resolve().parents[3]


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


class _CountedPeaks:
    """Counts the white-box memory traces the planner asks for (the real ones answer)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from tools.estimators.gpu import workload_trace

        self.calls: list[tuple[int, int]] = []
        real = workload_trace.memory_peak

        def counted(
            workload: DNNTraining, batch: int, gpus: int, gpu: GPUSpec, *rest: Any
        ) -> GpuMemoryPeak:
            self.calls.append((batch, gpus))
            return real(workload, batch, gpus, gpu, *rest)

        monkeypatch.setattr(workload_trace, "memory_peak", counted)


async def test_gpu_options_far_from_capacity_keep_analytic_memory_and_trace_nothing(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 64 of the small CNN: ~1 GB analytic against 16 GB P100s, so no option can
    change its verdict with the white-box peak and none is traced."""
    peaks = _CountedPeaks(monkeypatch)
    chain = EstimatorChain(sqlite_kb)
    spec = small_cnn_spec()
    catalog = load_seed_catalog()
    estimators = await chain.estimators(spec, catalog)
    assert all(isinstance(e, WhiteBoxGpuMemory) for e in estimators)
    selection = plan_workload(spec, catalog, estimators)
    gpu = [o for o in selection.ranked if o.option.gpus_per_node]
    cpu = [o for o in selection.ranked if not o.option.gpus_per_node]
    assert gpu and cpu
    assert peaks.calls == []
    choice = chain.gpu_time_choice()
    for option in gpu:
        assert option.estimate.gpu_memory is None
        assert option.estimate.gpu_memory_mb is not None
        assert "GPU memory analytic" in option.estimate.label
        assert "far below the GPU's 16,384 MiB: no white-box trace" in option.estimate.label
        if not choice.use:
            assert choice.reason in option.estimate.label
    assert all(o.estimate.gpu_memory is None for o in cpu)
    if not choice.use:
        assert choice.reason in chain.unavailable()


async def test_gpu_options_near_capacity_get_the_white_box_verdict(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 24,000: analytic ~16 GB per P100 (16 GB), where the analytic model cannot
    tell; the white-box peak (26 GB on one GPU) refuses one GPU and passes two."""
    peaks = _CountedPeaks(monkeypatch)
    chain = EstimatorChain(sqlite_kb)
    spec = small_cnn_spec(batch=24_000, gpu_only=True)
    catalog = load_seed_catalog()
    selection = plan_workload(spec, catalog, await chain.estimators(spec, catalog))
    assert (24_000, 1) in peaks.calls
    refused = [i for i in selection.infeasible if i.constraint == "gpu_memory"]
    assert refused
    reason = refused[0].reason
    assert "MiB of GPU memory" in reason and "NVIDIA Tesla P100" in reason
    assert "has 16,384 MiB" in reason and "CUDA context" in reason
    for option in selection.ranked:
        peak = option.estimate.gpu_memory
        assert peak is not None and peak.fits is True
        assert peak.allocated_mib <= peak.reserved_mib < peak.total_mib
        assert option.estimate.gpu_memory_mb is not None
        assert option.estimate.gpu_memory_mb.point == peak.total_mib
        assert "GPU memory white-box" in option.estimate.label


async def test_the_chain_puts_the_per_operator_model_in_when_it_wins(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = EstimatorChain(sqlite_kb)
    monkeypatch.setattr(chain, "_gpu_choice", choose_opcost({"validation": {"e2e_mape": 0.01}}))
    estimators = await chain.estimators(small_cnn_spec(), load_seed_catalog())
    assert opcost_of(estimators) is not None
    selection = plan_workload(small_cnn_spec(), load_seed_catalog(), estimators)
    answered = {o.estimate.estimator_id for o in selection.ranked if o.option.gpus_per_node}
    assert any(a.startswith("gpu-opcost") for a in answered), answered
    for option in selection.ranked:
        if option.estimate.estimator_id.startswith("gpu-opcost"):
            assert isinstance(option.estimate, ResourceEstimate)
            assert "below the analytic fallback's" in option.estimate.label
            assert "GPU memory analytic" in option.estimate.label  # 1 GB of 16: untraced
    assert chain.unavailable() == []


async def test_an_option_far_above_the_gpu_is_refused_by_the_analytic_model_untraced(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 2**17: analytic 80 GB per P100; the white-box peak (136 GB) cannot bring it
    under 16 GB, so the option is refused without a trace (neither memory nor, with the
    per-operator time model in the chain, kernels), naming the GPU and sizes."""
    from tools.estimators.gpu import workload_trace

    peaks = _CountedPeaks(monkeypatch)
    kernels: list[int] = []
    real_kernels = workload_trace.kernels_at

    def counted_kernels(workload: DNNTraining, batch: int, *rest: Any) -> object:
        kernels.append(batch)
        return real_kernels(workload, batch, *rest)

    monkeypatch.setattr(workload_trace, "kernels_at", counted_kernels)
    chain = EstimatorChain(sqlite_kb)
    monkeypatch.setattr(chain, "_gpu_choice", choose_opcost({"validation": {"e2e_mape": 0.01}}))
    spec = small_cnn_spec(batch=2**17, gpu_only=True)
    catalog = load_seed_catalog()
    selection = plan_workload(spec, catalog, await chain.estimators(spec, catalog))
    refused = [i for i in selection.infeasible if i.constraint == "gpu_memory"]
    assert refused and not selection.ranked
    assert (2**17, 1) not in peaks.calls and 2**17 not in kernels
    reason = refused[0].reason
    assert "of GPU memory (batch 131072 per GPU)" in reason
    assert "NVIDIA Tesla P100 (Pascal) has 16 GB" in reason


@pytest.mark.parametrize("band", [WHITE_BOX_RATIO, MODEL_FILE_RATIO])
def test_white_box_is_needed_only_where_it_can_change_the_verdict(
    band: tuple[float, float],
) -> None:
    low, high = band
    capacity = 16_384.0

    def analytic(point: float) -> Interval:  # the refusal reads the low end, here 0.8x
        return Interval(point=point, low=0.8 * point, high=1.4 * point)

    assert white_box_needed(None, capacity, band) is not None  # the analytic model declined
    assert white_box_needed(analytic(1_000), None, band) is None  # nothing to check against
    assert white_box_needed(analytic(capacity / high * 0.99), capacity, band) is None
    assert white_box_needed(analytic(capacity / low / 0.8 * 1.01), capacity, band) is None
    for point in (capacity / high * 1.01, capacity, capacity / low / 0.8 * 0.99):
        reason = white_box_needed(analytic(point), capacity, band)
        assert reason is not None and "16,384 MiB" in reason
    assert far_above_capacity(analytic(capacity / low / 0.8 * 1.01), capacity, band)
    assert not far_above_capacity(analytic(capacity / low / 0.8 * 0.99), capacity, band)


def test_the_narrow_band_is_for_zoo_models_at_their_reference_input_only() -> None:
    def workload(model: str, **extra: object) -> DNNTraining:
        return DNNTraining.model_validate(
            {"model": model, "dataset_samples": 100, "epochs": 1, "batch_sizes": [8], **extra}
        )

    assert ratio_band(workload("resnet50")) == WHITE_BOX_RATIO
    assert ratio_band(workload("ResNet-50")) == WHITE_BOX_RATIO  # an alias
    assert ratio_band(workload("resnet50", input_shape=[3, 224, 224])) == WHITE_BOX_RATIO
    assert ratio_band(workload("lstm")) == WHITE_BOX_RATIO
    # per-sample counts scaled to another input: a rule the count did not check
    assert ratio_band(workload("resnet50", input_shape=[3, 448, 448])) == MODEL_FILE_RATIO
    assert ratio_band(workload("bert_base", input_shape=[512])) == MODEL_FILE_RATIO
    file = workload(str(REPO / "examples/models/small_cnn.py"), model_class="SmallCNN")
    assert ratio_band(file) == MODEL_FILE_RATIO
    assert WHITE_BOX_RATIO[1] < MODEL_FILE_RATIO[1]  # the untraced "fits" comes sooner


@pytest.mark.parametrize(("model", "optimizer"), [("lstm", "sgd"), ("vgg11", "adam")])
def test_the_analytic_gpu_point_of_a_zoo_model_is_near_its_white_box_peak(
    model: str, optimizer: str
) -> None:
    """The two the analytic point missed most (white-box/analytic 1.64 for the LSTM at
    batch 256, whose cross-entropy over 33 k words keeps three logits-sized tensors a
    sample; 1.5-2.3 for VGG, whose caching allocator reserves 2x what it hands out per
    sample), on 1 and 2 GPUs: now within 15%, reserved against the analytic point and
    allocated against its low end, inside the narrow band the planner skips traces by."""
    from knowledge_base.workload import Optimizer
    from tools.estimators.gpu.workload_trace import memory_peak
    from tools.planning.analytic import AnalyticDNNEstimator
    from tools.planning.estimation import Candidate

    system = load_seed_catalog().system("pitzer")
    node = next(n for n in system.node_types if n.gpu and n.gpu.memory_mb == 32768)
    partition = next(p for p in system.partitions if p.node_type == node.name)
    assert node.gpu is not None
    for per_gpu, gpus in ((8, 1), (256, 1), (64, 2)):
        workload = DNNTraining(
            model=model,
            dataset_samples=1000,
            epochs=1,
            batch_sizes=[per_gpu * gpus],
            optimizer=Optimizer(optimizer),
        )
        candidate = Candidate(system, partition, node, 1, 8, gpus, per_gpu * gpus)
        answer = AnalyticDNNEstimator().estimate(workload, candidate)
        assert isinstance(answer, ResourceEstimate) and answer.gpu_memory_mb is not None
        peak = memory_peak(workload, per_gpu * gpus, gpus, node.gpu)
        analytic = answer.gpu_memory_mb
        held = peak.total_mib / analytic.point  # reserved + context
        handed_out = (peak.allocated_mib + peak.context_mib) / analytic.low
        assert 0.85 < held < 1.15 and 0.85 < handed_out < 1.15, (per_gpu, gpus, held)
        low, high = ratio_band(workload)
        assert held < high and handed_out > low


@pytest.mark.parametrize(("model", "optimizer"), [("resnet50", "sgd"), ("vgg11", "adam")])
def test_no_untraced_option_gets_another_verdict_than_the_white_box(
    model: str, optimizer: str
) -> None:
    """Safety of the narrow band: over batch sizes from far below to far above a 16 GB
    P100, every option the planner leaves untraced gets the verdict the white-box peak
    would give it (fits or is refused), and those near the capacity are traced."""
    from knowledge_base.workload import Optimizer
    from tools.estimators.gpu.workload_trace import memory_peak
    from tools.planning.analytic import AnalyticDNNEstimator
    from tools.planning.estimation import Candidate

    system = load_seed_catalog().system("owens")
    node = next(n for n in system.node_types if n.gpu is not None)
    partition = next(p for p in system.partitions if p.node_type == node.name)
    assert node.gpu is not None and node.gpu.memory_mb == 16_384
    traced = untraced = 0
    for batch in range(16, 400, 8):
        workload = DNNTraining(
            model=model,
            dataset_samples=1000,
            epochs=1,
            batch_sizes=[batch],
            optimizer=Optimizer(optimizer),
        )
        candidate = Candidate(system, partition, node, 1, 8, 1, batch)
        answer = WhiteBoxGpuMemory(AnalyticDNNEstimator()).estimate(workload, candidate)
        assert isinstance(answer, ResourceEstimate) and answer.gpu_memory_mb is not None
        if answer.gpu_memory is not None:
            traced += 1
            continue
        untraced += 1
        fits_analytic = answer.gpu_memory_mb.point <= node.gpu.memory_mb
        assert fits_analytic == memory_peak(workload, batch, 1, node.gpu).fits, batch
    assert traced and untraced


_NO_TORCH_PLAN = """
import asyncio, json, sys
from pathlib import Path
from typing import Any
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
from tools.estimators.gpu import selection
from tools.planning.chain import EstimatorChain
from tools.planning.service import plan_workload

folder = Path(sys.argv[1])
selection.MODEL_PATH = folder / "opcost.json"
meta = {"version": "t", "validation": {"e2e_mape": 0.9}}  # 90%: not chosen
selection.MODEL_PATH.write_text(json.dumps({"meta": meta}))
spec = WorkloadSpec(
    name="r50", user="alice",
    workload=DNNTraining(model="resnet50", dataset_samples=5000, epochs=1, batch_sizes=[32]),
    goals=Goals(systems=["owens"], gpu_only=True),
)

async def main():
    async with SQLiteKnowledgeBase(folder / "kb.db") as kb:
        chain = EstimatorChain(kb)
        catalog = load_seed_catalog()
        selection_ = plan_workload(spec, catalog, await chain.estimators(spec, catalog))
    labels = [o.estimate.label for o in selection_.ranked]
    print(json.dumps({"torch": "torch" in sys.modules, "labels": labels}))

asyncio.run(main())
"""


def test_a_plan_that_needs_no_trace_does_not_import_torch(tmp_path: Path) -> None:
    """ResNet-50 at batch 32 (~5 GB analytic) on 16 GB P100s, with a per-operator model
    that is not chosen: nothing is traced, so torch (seconds of CPU) is never imported.
    A new process: this one has torch loaded already."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH_PLAN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["labels"]
    assert all("GPU memory analytic" in label for label in found["labels"])
    assert all("not used" in label for label in found["labels"])
    assert found["torch"] is False


def test_the_light_metadata_read_agrees_with_the_loaded_model() -> None:
    from tools.estimators.gpu.estimator import DEFAULT_MODEL_PATH, load_step_model
    from tools.estimators.gpu.selection import MODEL_PATH, read_meta

    assert MODEL_PATH == DEFAULT_MODEL_PATH
    meta, model_id = read_meta()
    model = load_step_model()
    assert meta == model.meta and model_id == model.estimator_id


def test_gavel_roofline_walltime_uses_the_analytic_start_up_range() -> None:
    """The trained GPU estimators add the analytic model's start-up (10/30/120 s), not a
    fixed 120 s of their own (their point was 90 s long before)."""
    import math

    from tools.estimators.gpu.gavel_estimator import GPURooflineEstimator, trained_roofline
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
