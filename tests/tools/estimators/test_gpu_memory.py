"""GPU peak memory: the caching-allocator replay by hand, the fake trace against torch's own
accounting of a real CPU step, and the estimate's API and errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.memory.allocator import (
    CachingAllocator,
    MemoryEvent,
    replay,
    round_size,
    segment_size,
)
from tools.estimators.gpu.memory.cudnn_conv import conv_workspace_bytes
from tools.estimators.gpu.memory.estimate import estimate_gpu_memory
from tools.estimators.gpu.memory.recorder import record_training_step
from tools.estimators.model_file import load_user_model
from tools.profiling.zoo.registry import TrainingTask

MIB = 1 << 20
SMALL_CNN = Path(__file__).resolve().parents[3] / "examples" / "models" / "small_cnn.py"


def test_requests_round_to_512_bytes_and_segments_to_the_allocators_sizes() -> None:
    assert [round_size(n) for n in (1, 512, 513, 4000)] == [512, 512, 1024, 4096]
    assert segment_size(512) == 2 * MIB  # small pool: 2 MiB buffers
    assert segment_size(MIB) == 2 * MIB
    assert segment_size(MIB + 512) == 20 * MIB  # 1-10 MiB: a 20 MiB block to split
    assert segment_size(10 * MIB) == 10 * MIB
    assert segment_size(10 * MIB + 1) == 12 * MIB  # rounded to 2 MiB


def test_small_requests_share_a_segment_and_a_freed_block_is_reused_best_fit() -> None:
    alloc = CachingAllocator()
    alloc.malloc(1, 100)  # 512 B
    alloc.malloc(2, 3000)  # 3072 B
    alloc.malloc(3, 1000)  # 1024 B
    assert alloc.reserved_bytes == 2 * MIB and alloc.allocated_bytes == 512 + 3072 + 1024
    alloc.free(2)
    alloc.malloc(4, 1024)  # best fit: the freed 3072 B block, split (2048 B stay free)
    assert alloc.reserved_bytes == 2 * MIB and alloc.allocated_bytes == 512 + 1024 + 1024
    alloc.free(1)
    alloc.free(3)
    alloc.free(4)
    alloc.malloc(5, MIB)  # the blocks merged back into one: it fits the small segment
    assert alloc.reserved_bytes == 2 * MIB and alloc.allocated_bytes == MIB
    alloc.malloc(6, MIB + 512)  # a large request: the large pool, a new 20 MiB segment
    assert alloc.reserved_bytes == 22 * MIB


def test_large_pool_splits_only_when_more_than_a_mebibyte_remains() -> None:
    alloc = CachingAllocator()
    alloc.malloc(1, 13 * MIB)  # a 14 MiB segment; 1 MiB left is not more than 1 MiB
    assert alloc.reserved_bytes == 14 * MIB and alloc.allocated_bytes == 14 * MIB
    alloc.free(1)
    alloc.malloc(2, 11 * MIB)  # the cached 14 MiB block, split: 3 MiB stay free
    assert alloc.reserved_bytes == 14 * MIB and alloc.allocated_bytes == 11 * MIB
    alloc.malloc(3, 3 * MIB)  # the remainder, exactly
    assert alloc.reserved_bytes == 14 * MIB and alloc.allocated_bytes == 14 * MIB
    assert alloc.peak_requested_bytes == 14 * MIB


def test_out_of_memory_only_after_the_cache_is_released() -> None:
    events = [
        MemoryEvent("alloc", 1, 30 * MIB),
        MemoryEvent("free", 1),
        MemoryEvent("alloc", 2, 40 * MIB),  # 30 MiB cached + 40 > 50: release, then fits
    ]
    fits = replay(events, capacity_bytes=50 * MIB)
    assert not fits.out_of_memory and fits.peak_reserved_bytes == 40 * MIB
    assert replay(events).peak_reserved_bytes == 70 * MIB  # no limit: nothing released
    held = [MemoryEvent("alloc", 1, 30 * MIB), MemoryEvent("alloc", 2, 40 * MIB)]
    assert replay(held, capacity_bytes=50 * MIB).out_of_memory


def _mlp_task() -> TrainingTask:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    return TrainingTask(model, (torch.randn(32, 64),), torch.randint(0, 10, (32,)))


def _profiled_peak_bytes(task: TrainingTask, optimizer: str) -> int:
    """Peak of live CPU tensor bytes over two real steps, by torch's memory profiler."""
    model = task.model
    opt: torch.optim.Optimizer = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
        if optimizer == "sgd"
        else torch.optim.Adam(model.parameters(), foreach=True)
    )
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            output = model(*task.inputs)  # held to the end of the step, as loops do
            loss = nn.functional.cross_entropy(output, task.targets)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            del output, loss
    live = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action in (Action.PREEXISTING, Action.CREATE):
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fake_trace_peak_equals_torchs_own_accounting_of_a_real_cpu_step(optimizer: str) -> None:
    task = _mlp_task()
    events = record_training_step(task, optimizer=optimizer)  # type: ignore[arg-type]
    traced = replay(events).peak_requested_bytes
    # Adam's step counters: 0-d tensors the profiler counts differently; on a GPU they
    # stay on the CPU (capturable=False), so they do not belong in the GPU's peak.
    counters = 4 * len(list(task.model.parameters())) if optimizer == "adam" else 0
    assert abs(traced - _profiled_peak_bytes(task, optimizer)) <= counters


def test_amp_keeps_fp32_weights_and_halves_activations() -> None:
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
    task = TrainingTask(model, (torch.randn(256, 512),), torch.randint(0, 10, (256,)))
    fp32 = replay(record_training_step(task)).peak_requested_bytes
    amp = replay(record_training_step(task, precision="amp_fp16")).peak_requested_bytes
    params = sum(p.numel() * 4 for p in model.parameters())
    assert amp < fp32
    assert amp > 3 * params  # weights, gradients and momentum stay fp32


def test_adam_keeps_one_more_copy_of_the_parameters_than_sgd() -> None:
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024))
    task = TrainingTask(model, (torch.randn(2, 1024),), torch.randint(0, 1024, (2,)))
    params = sum(p.numel() * 4 for p in model.parameters())
    sgd = replay(record_training_step(task, optimizer="sgd")).peak_requested_bytes
    adam = replay(record_training_step(task, optimizer="adam")).peak_requested_bytes
    assert adam - sgd >= 0.95 * params


def test_estimate_of_a_model_file_adds_the_context_and_says_whether_it_fits() -> None:
    user = load_user_model(SMALL_CNN, "SmallCNN")
    est = estimate_gpu_memory(user, 64, optimizer="adam", precision="amp", generation="volta")
    assert est.model == "SmallCNN" and est.precision == "amp_fp16"
    assert est.peak_reserved_mb >= est.peak_allocated_mb >= est.peak_requested_mb > 0
    assert est.total_mb == pytest.approx(est.peak_reserved_mb + est.context_mb, abs=0.1)
    assert est.fits is None
    small = estimate_gpu_memory(user, 64, generation="volta", gpu_memory_mb=801)
    assert small.fits is False
    big = estimate_gpu_memory(user, 64, generation="volta", gpu_memory_mb=16160)
    assert big.fits is True


def test_data_parallel_splits_the_batch_and_adds_gradient_buckets() -> None:
    user = load_user_model(SMALL_CNN, "SmallCNN")
    one = estimate_gpu_memory(user, 32)
    two = estimate_gpu_memory(user, 64, gpus=2)
    assert two.per_gpu_batch == 32
    params_mb = sum(p.numel() * 4 for p in user.build().parameters()) / MIB
    assert two.peak_requested_mb == pytest.approx(one.peak_requested_mb + params_mb, abs=0.2)


def test_hugging_face_model_built_from_a_config_traces() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=500,
    )

    def task(batch: int) -> TrainingTask:
        with torch.device("meta"):
            model = transformers.BertForMaskedLM(config)
        ids = torch.zeros(batch, 16, dtype=torch.long)

        def loss(output: object, targets: torch.Tensor) -> torch.Tensor:
            logits = output.logits  # type: ignore[attr-defined]
            return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

        return TrainingTask(model, (ids,), ids, criterion=loss)

    est = estimate_gpu_memory(task, 4, optimizer="adam")
    with torch.device("meta"):
        params_mb = sum(p.numel() * 4 for p in transformers.BertForMaskedLM(config).parameters())
    # weights, gradients and Adam's two moments, plus activations
    assert est.peak_requested_mb > 4 * params_mb / MIB


def test_a_model_that_does_not_trace_is_an_error_naming_the_operator() -> None:
    model = nn.Sequential(nn.Linear(3, 4))
    task = TrainingTask(model, (torch.randn(2, 5),), torch.randint(0, 4, (2,)))
    with pytest.raises(InvalidInputError, match="addmm") as raised:
        estimate_gpu_memory(lambda batch: task, 2)
    assert "Sequential" in str(raised.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"optimizer": "lamb"}, "optimizer"),
        ({"precision": "int8"}, "precision"),
        ({"gpus": 0}, "gpus"),
        ({"generation": "blackwellish"}, "generation"),
        ({"gpu_memory_mb": -1}, "gpu_memory_mb"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"batch_size": 4, **kwargs}
    with pytest.raises(InvalidInputError, match=field):
        estimate_gpu_memory(_mlp_task_factory, **args)  # type: ignore[arg-type]


def test_an_unknown_zoo_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInputError, match="resnet50"):
        estimate_gpu_memory("resnet5000", 4)


def _mlp_task_factory(batch: int) -> TrainingTask:
    return _mlp_task()


def test_dropout_saves_a_one_byte_mask_as_cudas_fused_kernel_does() -> None:
    model = nn.Sequential(nn.Linear(256, 4096), nn.Dropout(0.1), nn.Linear(4096, 10))
    task = TrainingTask(model, (torch.randn(64, 256),), torch.randint(0, 10, (64,)))
    sizes = [e.size_bytes for e in record_training_step(task, steps=1) if e.action == "alloc"]
    elements = 64 * 4096
    assert elements in sizes  # the mask, bool
    assert sizes.count(4 * elements) <= 4  # no fp32 noise beside the activations' own
    plain = nn.Sequential(nn.Linear(256, 4096), nn.Identity(), nn.Linear(4096, 10))
    base = TrainingTask(plain, task.inputs, task.targets)
    extra = (
        replay(record_training_step(task)).peak_requested_bytes
        - replay(record_training_step(base)).peak_requested_bytes
    )
    assert extra <= 4 * elements + elements  # its output and the mask, not a noise tensor too


def test_each_convolution_holds_a_workspace_for_the_length_of_its_call() -> None:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Flatten(), nn.Linear(16 * 64, 10))
    task = TrainingTask(model, (torch.randn(8, 3, 8, 8),), torch.randint(0, 10, (8,)))
    events = record_training_step(task, steps=1)
    # half the im2col buffer: batch x channels x kernel area x output pixels x 4 bytes
    size = int(0.5 * 8 * 3 * 9 * 8 * 8 * 4)
    held = [
        (a, b)
        for a, b in itertools.pairwise(events)
        if a.action == "alloc" and a.size_bytes == size
    ]
    assert len(held) == 2  # the forward's and the backward's (weight gradient only)
    assert all(b.action == "free" and b.key == a.key for a, b in held)  # given back at once
    big = torch.empty(512, 256, 64, 64, device="meta")
    weight = torch.empty(256, 256, 3, 3, device="meta")
    assert conv_workspace_bytes(big, weight, big, 1) == 64 << 20  # the cap
