"""The one GPU table: exact names and aliases, Gavel's view derived from it, the catalog's
figures over the datasheet's, and the time model blind to a board's memory (issue #40)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from knowledge_base.seed import load_seed_catalog
from tools.estimators.gpu.gavel_roofline import GPU_BOARDS, GPU_SPECS
from tools.estimators.gpu.specs import (
    DATASHEETS,
    Datasheet,
    GpuSpec,
    _by_name,
    catalog_gpus,
    datasheet,
    datasheet_spec,
    resolve_gpu_name,
    spec_for_catalog_gpu,
)
from tools.planning.gavel_fit import GAVEL_PEAK_TFLOPS

KNOWN = catalog_gpus(load_seed_catalog())


def test_gavel_specs_are_the_table_s_rows_with_only_gavel_s_fp32_peaks_over_them() -> None:
    assert set(GPU_SPECS) == {"k80", "p100", "v100", "t4"}
    for gpu, spec in GPU_SPECS.items():
        row = datasheet_spec(GPU_BOARDS[gpu])
        assert isinstance(spec, GpuSpec)
        assert spec.model_dump(exclude={"fp32_gflops"}) == row.model_dump(exclude={"fp32_gflops"})
        peak = GAVEL_PEAK_TFLOPS.get(gpu)
        assert spec.fp32_tflops == pytest.approx(peak if peak else row.fp32_tflops)


def test_the_t4_has_one_memory_figure_in_every_view() -> None:
    sheet = datasheet_spec("T4")
    assert sheet.memory_gb == GPU_SPECS["t4"].memory_gb == 16  # 16 GB GDDR6, the datasheet's
    assert resolve_gpu_name("Tesla T4", KNOWN).memory_mb == 16 * 1024


def test_every_name_of_a_row_reads_that_row_in_any_case_and_punctuation() -> None:
    for row in DATASHEETS:
        for name in row.names:
            assert datasheet(name) is row
            assert datasheet(name.upper().replace(" ", "_")) is row
    assert datasheet("H100") is None  # a part is nobody's name
    with pytest.raises(InvalidInputError, match="no datasheet") as info:
        datasheet_spec("A100")
    assert info.value.value == "A100"


def test_no_name_may_stand_for_two_rows() -> None:
    t4 = DATASHEETS[[row.name for row in DATASHEETS].index("NVIDIA Tesla T4")]
    twin = Datasheet(t4.spec.model_copy(update={"name": "Other"}), ("tesla-t4",), "test")
    with pytest.raises(ValueError, match="tesla-t4"):
        _by_name([t4, twin])


def test_every_seed_catalog_gpu_has_its_row_and_keeps_its_own_figures() -> None:
    for model, gpu in KNOWN.items():
        row = datasheet(model)
        assert row is not None, model
        spec = spec_for_catalog_gpu(gpu)
        assert spec.name == model and spec.sms == row.spec.sms and spec.l2_mb == row.spec.l2_mb
        if gpu.fp32_tflops:
            assert spec.fp32_gflops == pytest.approx(gpu.fp32_tflops * 1000)
        if gpu.memory_bandwidth_gbs:
            assert spec.bandwidth_gbs == gpu.memory_bandwidth_gbs
        assert spec.memory_gb == (gpu.memory_mb / 1024 if gpu.memory_mb else row.spec.memory_gb)


def test_a_catalog_gpu_answers_for_its_row_with_the_catalog_s_figures() -> None:
    # The seed's A100 80GB (Ascend's SXM4 boards) stands for the SXM4 row: its name and
    # the row's aliases give the catalog's record, never the datasheet's.
    for name in ("NVIDIA A100 80GB", "A100 SXM4 80GB", "nvidia a100-sxm4-80gb"):
        assert resolve_gpu_name(name, KNOWN) is KNOWN["NVIDIA A100 80GB"]
    custom = {"NVIDIA Tesla T4": GPUSpec(model="NVIDIA Tesla T4", memory_mb=15 * 1024)}
    t4 = resolve_gpu_name("t4", custom)
    assert t4.memory_mb == 15 * 1024 and spec_for_catalog_gpu(t4).memory_gb == 15
    # Without a catalog, the same name is the datasheet's board.
    assert resolve_gpu_name("t4", {}).memory_mb == 16 * 1024


def test_a_row_two_catalog_gpus_stand_for_is_refused_with_both() -> None:
    with pytest.raises(InvalidInputError, match="more than one GPU has that name") as info:
        resolve_gpu_name("A100 40GB", KNOWN)
    assert "NVIDIA A100 40GB; NVIDIA A100 PCIe 40GB" in str(info.value)
    assert info.value.field == "gpu"


def test_an_unknown_name_lists_the_catalog_and_the_datasheets_and_systems_when_asked() -> None:
    with pytest.raises(InvalidInputError, match="unknown GPU") as info:
        resolve_gpu_name("Voodoo 5", KNOWN, field="--gpu")
    text = str(info.value)
    assert info.value.field == "--gpu" and "NVIDIA Tesla K80 (one GK210)" in text
    assert all(model in text for model in KNOWN)
    with pytest.raises(InvalidInputError, match="neither a system \\(known: pitzer\\)"):
        resolve_gpu_name("Voodoo 5", KNOWN, systems=["pitzer"])


def test_the_time_model_reads_no_memory_figure() -> None:
    """The T4's 16 GB (NeuSight's config: 15) moves no time: the trees' spec inputs and
    the level read SMs, FP32 peak, bandwidth and L2 only."""
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.ops import GpuKernels

    model = load_step_model()
    kernels = GpuKernels()
    kernels.add("linear", False, B=4096, M=1024, N=1024, K=1024)
    kernels.add("ln", False, B=4096, H=1024)
    t4 = datasheet_spec("T4")
    sixteen = model.estimate(kernels, t4, parameters=10**6, optimizer="sgd")
    fifteen = model.estimate(
        kernels, t4.model_copy(update={"memory_gb": 15.0}), parameters=10**6, optimizer="sgd"
    )
    assert sixteen.step_s == fifteen.step_s and sixteen.step_s.p50 > 0


def test_neusight_s_t4_differs_from_the_table_s_in_memory_only(shared_data: Path) -> None:
    config = shared_data / "dnn_profiles/neusight/device_configs/Tesla_T4.json"
    if not config.exists():
        pytest.skip(f"no NeuSight device configs at {config.parent}")
    document = json.loads(config.read_text())
    sheet = datasheet_spec(config.stem)  # "Tesla_T4": NeuSight's name is an alias
    neusight = GpuSpec.model_validate(document)
    assert neusight.model_dump(exclude={"name", "memory_gb"}) == sheet.model_dump(
        exclude={"name", "memory_gb"}
    )
    assert (neusight.memory_gb, sheet.memory_gb) == (15, 16)


@pytest.mark.parametrize(
    ("model", "architecture", "tensor_cores"),
    [
        ("NVIDIA H100 PCIe 80GB", "hopper", True),
        ("NVIDIA L40S", "ada", True),
        ("NVIDIA RTX 6000 Ada Generation", "ada", True),
        ("NVIDIA Quadro RTX 6000", "turing", True),
        ("NVIDIA RTX 4000", "turing", True),
        ("NVIDIA GeForce RTX 3090", "ampere", True),
        ("NVIDIA A40", "ampere", True),
        ("NVIDIA Tesla P100 PCIe 16GB", "pascal", False),
        ("NVIDIA Tesla K80 (one GK210)", "kepler", False),
        ("Voodoo 5", None, False),
    ],
)
def test_one_table_gives_a_cards_architecture_to_every_reader(
    model: str, architecture: str | None, tensor_cores: bool
) -> None:
    from knowledge_base.catalog import GPUSpec
    from tools.estimators.gpu.memory.context import gpu_generation
    from tools.estimators.gpu.specs import gpu_architecture
    from tools.planning.hardware import has_tensor_cores

    assert gpu_architecture(model) == gpu_generation(model) == architecture
    assert has_tensor_cores(GPUSpec(model=model)) is tensor_cores


def test_every_datasheet_gpu_has_an_architecture() -> None:
    from tools.estimators.gpu.specs import DATASHEETS, gpu_architecture

    assert all(gpu_architecture(row.name) is not None for row in DATASHEETS)
