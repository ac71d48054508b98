"""Step time on a GPU from the shipped per-operator model: ordering, optimizer, all-reduce."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.answer import gpu_option_estimates, gpu_targets
from tools.estimators.gpu.estimator import load_step_model
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.specs import DATASHEET_GPUS, GpuSpec, datasheet_spec
from tools.estimators.gpu.trace import trace_training_step
from tools.profiling.zoo.registry import TrainingTask

P100 = GpuSpec.of(
    Device="P100",
    Num_Sm=56,
    Core_Per_SM=64,
    Freq=1380,
    SingleFLOPs=9519,
    Mem_Bw=732,
    L2Cache=4,
    Dev_Mem=16,
)
A100 = GpuSpec.of(
    Device="A100",
    Num_Sm=108,
    Core_Per_SM=64,
    Freq=1410,
    SingleFLOPs=19492,
    Mem_Bw=1555,
    L2Cache=40,
    Dev_Mem=40,
)


def _mlp_task(batch: int) -> TrainingTask:
    with torch.device("meta"):
        model = nn.Sequential(
            nn.Linear(1024, 4096),
            nn.GELU(),
            nn.Linear(4096, 1024),
            nn.LayerNorm(1024),
            nn.Linear(1024, 10),
        )
    x = torch.empty(batch, 1024, device="meta")
    return TrainingTask(model, (x,), torch.empty(batch, dtype=torch.long, device="meta"))


@pytest.fixture(scope="module")
def kernels() -> GpuKernels:
    return kernels_of(trace_training_step(_mlp_task(256)))


def test_interval_is_ordered_and_a_faster_gpu_is_faster(kernels: GpuKernels) -> None:
    model = load_step_model()
    slow = model.estimate(kernels, P100, parameters=8_000_000)
    fast = model.estimate(kernels, A100, parameters=8_000_000)
    for est in (slow, fast):
        q = est.step_s
        assert 0 < q.p10 <= q.p50 <= q.p90
        assert est.forward_backward_s.p50 < est.step_s.p50  # the optimizer step adds time
    assert fast.step_s.p50 < slow.step_s.p50
    assert slow.estimator.startswith("gpu-opcost-") and slow.validation_mape is not None


def test_adam_costs_more_than_sgd_and_several_gpus_add_an_all_reduce(
    kernels: GpuKernels,
) -> None:
    model = load_step_model()
    sgd = model.estimate(kernels, P100, parameters=8_000_000, optimizer="sgd")
    adam = model.estimate(kernels, P100, parameters=8_000_000, optimizer="adam")
    four = model.estimate(kernels, P100, parameters=8_000_000, gpus=4, link_gbs=10.0)
    # PyTorch's foreach steps: SGD with momentum moves 8 floats a parameter, Adam 18.
    assert adam.optimizer_s / sgd.optimizer_s == pytest.approx(18 / 8)
    assert sgd.optimizer_s > 0
    assert four.allreduce_s == pytest.approx(2 * 3 / 4 * 4 * 8e6 / 10e9)
    with pytest.raises(InvalidInputError, match="optimizer"):
        model.estimate(kernels, P100, parameters=1, optimizer="lion")


def test_unknown_gpu_name_lists_the_known_ones() -> None:
    catalog = Catalog.model_validate_json(
        (Path(__file__).resolve().parents[4] / "knowledge_base/seed/catalog.json").read_text()
    )
    with pytest.raises(InvalidInputError, match="NVIDIA A100 80GB") as info:
        gpu_targets(["Voodoo 5"], [], catalog)
    assert "--gpu" in str(info.value) and "Voodoo 5" in str(info.value)
    (spec,) = gpu_targets(["nvidia a100 80gb"], [], catalog)
    assert spec.sms == 108
    # A part of several names, or of one, is refused with them, never picked (issue #40:
    # --gpu h100 once silently took the H100 PCIe).
    with pytest.raises(InvalidInputError, match="H100 PCIe 80GB; NVIDIA H100 SXM") as h100:
        gpu_targets(["h100"], [], catalog)
    assert "give one whole" in str(h100.value) and "'h100'" in str(h100.value)
    with pytest.raises(InvalidInputError, match="Volta\\); NVIDIA Tesla V100") as twice:
        gpu_targets(["V100"], [], catalog)
    assert "give one whole" in str(twice.value) and "'V100'" in str(twice.value)
    with pytest.raises(InvalidInputError, match="unknown GPU"):
        gpu_targets(["  "], [], catalog)


def test_a_gpu_no_partition_has_is_found_among_the_datasheets() -> None:
    catalog = Catalog.model_validate_json(
        (Path(__file__).resolve().parents[4] / "knowledge_base/seed/catalog.json").read_text()
    )
    l4, sxm, t4 = gpu_targets(["L4", "h100 sxm", "NVIDIA Tesla T4"], [], catalog)
    assert (l4.name, l4.sms, l4.bandwidth_gbs, l4.l2_mb) == ("NVIDIA L4", 58, 300, 48)
    assert (sxm.sms, sxm.fp32_gflops, sxm.bandwidth_gbs) == (132, 66908, 3350)
    assert (t4.sms, t4.fp32_gflops, t4.memory_gb) == (40, 8141, 16)
    # The catalog's own GPU wins where it stands for the row (its figures, not the sheet's).
    (pcie,) = gpu_targets(["H100 PCIe"], [], catalog)
    assert pcie.name == "NVIDIA H100 PCIe 80GB"
    # Every datasheet name reads its own row of the table: no two give the same spec.
    specs = [datasheet_spec(name) for name in DATASHEET_GPUS]
    assert len({(s.sms, s.fp32_gflops, s.bandwidth_gbs, s.memory_gb) for s in specs}) == len(specs)
    # Unknown: both lists named, a datasheet GPU the catalog stands for listed once.
    with pytest.raises(InvalidInputError, match="from datasheets: ") as info:
        gpu_targets(["Voodoo 5"], [], catalog)
    assert "NVIDIA L4" in str(info.value)
    assert str(info.value).count("NVIDIA H100 PCIe 80GB") == 1
    # A part of several names, catalog's and datasheets', is refused, listing them.
    with pytest.raises(InvalidInputError, match="give one whole") as several:
        gpu_targets(["SXM"], [], catalog)
    assert "NVIDIA H100 SXM 80GB HBM3" in str(several.value)
    assert "NVIDIA Tesla V100 SXM2 16GB" in str(several.value)


def test_option_estimates_carry_forward_backward_and_walltime() -> None:
    summary = {
        "parameter_bytes": 4.0 * 8e6,
        "batch_bytes": 1e6,
        "saved_activation_bytes": 1e7,
        "peak_live_bytes": 1e7,
        "buffer_bytes": 0.0,
        "parameters": 8e6,
    }
    (row,) = gpu_option_estimates(
        _mlp_task, {64: summary}, [P100], epochs=2, samples=640, optimizer="sgd"
    )
    assert row.forward_backward_s.p50 < row.iteration_time_s.p50
    assert row.iterations == 20
    assert row.walltime_s.p50 == pytest.approx(20 * row.iteration_time_s.p50 + 30.0)
    memory = row.gpu_memory_mib
    assert memory.allocated <= memory.reserved < memory.total == row.peak_memory_mb.p50


def test_an_l4_is_not_priced_slower_than_a_t4_on_memory_bound_norms_and_softmaxes() -> None:
    # An L4 has 0.94x a T4's bandwidth, 3.7x its FP32 peak and 12x its L2: a layer norm or
    # softmax (memory-bound on both) can take it at most ~1.07x a T4's time. The trees
    # once read the L4's ridge (101 FLOP/byte, beyond every training board's) as the most
    # extreme board and priced them 1.2-1.4x.
    model = load_step_model()
    l4, t4 = datasheet_spec("NVIDIA L4"), datasheet_spec("NVIDIA Tesla T4")
    bound = t4.bandwidth_gbs / l4.bandwidth_gbs * 1.05
    shapes = ((512, 768), (4096, 1024), (65536, 512), (98304, 512), (24576, 128), (6144, 197))
    for op_class in ("ln", "softmax"):
        for rows, width in shapes:
            kernels = GpuKernels()
            kernels.add(op_class, False, B=rows, H=width)
            _, on_l4 = model.forward_backward_s(kernels, l4)
            _, on_t4 = model.forward_backward_s(kernels, t4)
            assert on_l4[op_class] <= on_t4[op_class] * bound, (op_class, rows, width)
