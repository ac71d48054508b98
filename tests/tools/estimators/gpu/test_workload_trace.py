"""A workload's step is traced once per model; every batch size is derived from two traces.

The derived allocation sequence and kernel list are compared with real traces at batch
sizes that were never traced (3 and 48), and a second batch size or a second request
costs no trace at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining
from tools.estimators.gpu import workload_trace
from tools.estimators.gpu.memory.allocator import replay
from tools.estimators.gpu.memory.context import CONTEXT_MB
from tools.estimators.gpu.memory.estimate import estimate_gpu_memory
from tools.estimators.gpu.memory.scaled import ScalableSteps
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.estimators.gpu.workload_trace import (
    KERNEL_BATCHES,
    _affine_kernels,
    _AffineKernels,
    _trace_kernels,
    cache_info,
    clear_caches,
    gpu_generation,
    kernels_at,
    memory_peak,
    task_factory,
)

REPO = Path(__file__).resolve().parents[4]
SMALL_CNN = REPO / "examples/models/small_cnn.py"
V100_16GB = GPUSpec(model="NVIDIA Tesla V100 (Volta)", memory_mb=16384, fp32_tflops=14.0)


def _workload(model: Path | str = SMALL_CNN, **extra: object) -> DNNTraining:
    fields: dict[str, object] = {
        "model": str(model),
        "dataset_samples": 1000,
        "epochs": 1,
        "batch_sizes": [32],
    }
    if isinstance(model, Path):
        fields["model_class"] = "SmallCNN"
    return DNNTraining.model_validate({**fields, **extra})


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    clear_caches()


def test_allocation_sequence_derived_from_two_traces_equals_a_real_trace() -> None:
    build = task_factory(_workload())
    derived = ScalableSteps.trace(build, optimizer="adam")
    assert derived is not None
    for batch in (1, 3, 48):
        real = ScalableSteps.exact(build, batch, optimizer="adam")
        assert replay(derived.events(batch)) == replay(real.events(batch))
        assert replay(derived.events(batch, ddp=True)) == replay(real.events(batch, ddp=True))


def test_derived_peak_matches_the_direct_estimate_with_ddp_buckets() -> None:
    from tools.estimators.model_file import load_user_model

    user = load_user_model(SMALL_CNN, "SmallCNN")
    direct = estimate_gpu_memory(user, 96, gpus=2, generation="volta")
    peak = memory_peak(_workload(), 96, 2, V100_16GB)
    assert (peak.allocated_mib, peak.reserved_mib) == (
        direct.peak_allocated_mb,
        direct.peak_reserved_mb,
    )
    assert peak.context_mib == direct.context_mb == 800.0
    assert peak.per_gpu_batch == 48 and peak.fits is True


def test_kernels_derived_from_two_traces_equal_a_real_trace() -> None:
    build = task_factory(_workload())
    first, parameters = _trace_kernels(build, KERNEL_BATCHES[0])
    second, _ = _trace_kernels(build, KERNEL_BATCHES[1])
    assert _affine_kernels(first, second)
    derived = _AffineKernels(first, second, parameters)
    for batch in (3, 48):
        real, _ = _trace_kernels(build, batch)
        got = derived.at(batch)
        assert got.factor == real.factor and got.backward == real.backward
        for op_class, columns in real.dims.items():
            for dim, values in columns.items():
                assert got.dims[op_class][dim] == pytest.approx(values, rel=1e-9), (op_class, dim)


def test_other_batch_sizes_and_requests_trace_nothing_new() -> None:
    workload = _workload()
    memory_peak(workload, 32, 1, V100_16GB)
    kernels_at(workload, 32)
    traced = cache_info()
    for batch in (1, 7, 64, 512):
        memory_peak(workload, batch, 1, V100_16GB)
        memory_peak(workload, batch, 4, V100_16GB)
        kernels_at(workload, batch)
    # the same file under another spec (epochs, samples) is the same model
    memory_peak(_workload(epochs=9, dataset_samples=77), 16, 1, V100_16GB)
    info = cache_info()
    assert info["memory_traces"][1] == traced["memory_traces"][1] == 1
    assert info["kernel_traces"][1] == traced["kernel_traces"][1] == 1


def test_peak_over_the_gpu_memory_does_not_fit() -> None:
    peak = memory_peak(_workload(), 2**17, 1, V100_16GB)
    assert peak.fits is False and peak.total_mib > 16384
    assert peak.capacity_mib == 16384


def test_a_model_that_does_not_trace_is_an_error_naming_the_model_once(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Broken(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(5, 3)\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    workload = DNNTraining.model_validate(
        {"model": str(broken), "model_class": "Broken", "dataset_samples": 10, "epochs": 1,
         "batch_sizes": [4], "input_shape": [7], "model_params": {"num_classes": 3}}
    )  # fmt: skip
    with pytest.raises(InvalidInputError, match="operator"):
        memory_peak(workload, 4, 1, V100_16GB)
    with pytest.raises(InvalidInputError, match="operator"):
        memory_peak(workload, 8, 1, V100_16GB)  # remembered, not traced again
    assert cache_info()["memory_traces"] == (1, 1)


def test_generation_of_catalog_gpu_names() -> None:
    assert gpu_generation("NVIDIA Tesla V100 (Volta), NVLink") == "volta"
    assert gpu_generation("NVIDIA Quadro RTX 5000") == "turing"
    assert gpu_generation("NVIDIA H100 PCIe 80GB") == "hopper"
    assert gpu_generation("NVIDIA A100 80GB") == "ampere"
    assert gpu_generation("Voodoo 5") is None
    unknown = GPUSpec(model="Voodoo 5", memory_mb=16384, fp32_tflops=1.0)
    peak = memory_peak(_workload(), 8, 1, unknown)
    assert peak.context_mib == max(CONTEXT_MB.values()) and "unknown" in peak.context_basis
    h100 = GPUSpec(model="NVIDIA H100 PCIe 80GB", memory_mb=81920, fp32_tflops=51.0)
    measured = memory_peak(_workload(), 8, 1, h100)
    assert measured.context_mib == CONTEXT_MB["hopper"] == 810.0
    assert "measured on an H100" in measured.context_basis


def test_module_keeps_no_reference_to_a_model_file_path_in_its_keys() -> None:
    key = workload_trace.step_key(_workload())
    assert key.model.startswith("file:") and str(SMALL_CNN) not in key.model


def test_a_new_process_reads_the_traces_back_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = TraceFolders(tmp_path / "traces")
    first = memory_peak(_workload(), 32, 1, V100_16GB, traces)
    [stored] = list((tmp_path / "traces").glob("*.json"))
    clear_caches()  # what a new process starts with

    def no_trace(*args: object, **kwargs: object) -> None:
        raise AssertionError("traced again")

    monkeypatch.setattr(ScalableSteps, "trace", no_trace)
    assert memory_peak(_workload(), 32, 1, V100_16GB, traces) == first
    # a damaged file is traced again (here: the trace is refused, so the error shows it)
    stored.write_text("{not json")
    clear_caches()
    with pytest.raises(AssertionError, match="traced again"):
        memory_peak(_workload(), 32, 1, V100_16GB, traces)


def test_a_new_process_reads_the_kernel_traces_back_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = TraceFolders(tmp_path / "traces")
    first = kernels_at(_workload(), 24, traces)
    [stored] = list((tmp_path / "traces").glob("kernels-*.json"))
    clear_caches()  # what a new process starts with

    def no_trace(*args: object, **kwargs: object) -> None:
        raise AssertionError("traced again")

    monkeypatch.setattr(workload_trace, "_trace_kernels", no_trace)
    again = kernels_at(_workload(), 24, traces)
    assert again[1] == first[1]
    assert again[0].dims == first[0].dims and again[0].factor == first[0].factor
    assert again[0].backward == first[0].backward
    # a damaged file is traced again (here: the trace is refused, so the error shows it)
    stored.write_text('{"first": {"dims": 1}}')
    clear_caches()
    with pytest.raises(AssertionError, match="traced again"):
        kernels_at(_workload(), 24, traces)


def test_off_keeps_nothing_on_disk(tmp_path: Path) -> None:
    traces = TraceFolders.from_setting(tmp_path / "home", "off")
    memory_peak(_workload(), 32, 1, V100_16GB, traces)
    kernels_at(_workload(), 24, traces)
    assert not (tmp_path / "home").exists()


def test_the_settings_say_where_traces_persist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset: under home, then the shipped traces; a folder: that folder alone."""
    from rightsize.settings import Settings

    monkeypatch.delenv("RIGHTSIZE_GPU_TRACES", raising=False)
    from tools.estimators.gpu.trace_folders import SHIPPED_TRACES

    default = Settings(home=tmp_path / "home").gpu_trace_folders()
    assert default == TraceFolders(tmp_path / "home" / "gpu_traces", shipped=True)
    name = tmp_path / "home" / "gpu_traces" / "x.json"
    assert default.readable(name) == [name, SHIPPED_TRACES / "x.json"]
    named = Settings(home=tmp_path / "home", gpu_traces=str(tmp_path / "t")).gpu_trace_folders()
    assert named == TraceFolders(tmp_path / "t") and named.readable(name) == [name]
    assert Settings(gpu_traces="OFF").gpu_trace_folders() == TraceFolders()
    # nothing passed: this process's caches only
    memory_peak(_workload(), 32, 1, V100_16GB)
    assert not (tmp_path / "home").exists()


def test_zoo_input_shapes_that_build_the_same_model_share_one_trace() -> None:
    """What-ifs that only restate a zoo model's reference input trace nothing new."""
    key = workload_trace.step_key
    assert key(_workload("resnet50")) == key(_workload("resnet50", input_shape=[3, 224, 224]))
    assert key(_workload("ResNet-50")) == key(_workload("resnet50"))
    assert key(_workload("resnet50", input_shape=[3, 32, 32])) != key(_workload("resnet50"))
    assert key(_workload("resnet50", epochs=7)) == key(_workload("resnet50"))
