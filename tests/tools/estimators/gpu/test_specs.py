"""GPU specs: NeuSight's device-config keys, catalog GPUs, and the errors that name a field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.specs import load_spec_file, spec_for_catalog_gpu, spec_from_mapping

V100 = {
    "Device": "Tesla V100-PCIE-32GB", "Dev_Mem": 32, "Mem_Bw": 900, "Num_Sm": 80,
    "Core_Per_SM": 64, "Freq": 1370, "SingleFLOPs": 14029, "L2Cache": 6,
}  # fmt: skip


def test_neusight_device_config_loads_with_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(V100))
    spec = load_spec_file(path)
    assert (spec.sms, spec.fp32_gflops, spec.bandwidth_gbs, spec.l2_mb) == (80, 14029, 900, 6)
    assert spec.ridge_flops_per_byte == pytest.approx(14029 / 900)


@pytest.mark.parametrize("field", ["Num_Sm", "Mem_Bw", "SingleFLOPs", "L2Cache"])
def test_missing_field_is_named(field: str) -> None:
    document = {k: v for k, v in V100.items() if k != field}
    with pytest.raises(InvalidInputError, match=field):
        spec_from_mapping(document)


@pytest.mark.parametrize("value", [0, -5, "fast", True])
def test_non_positive_or_non_numeric_field_is_named(value: object) -> None:
    with pytest.raises(InvalidInputError, match="Mem_Bw"):
        spec_from_mapping({**V100, "Mem_Bw": value})


def test_unreadable_spec_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="bad.json"):
        load_spec_file(path)


def test_catalog_gpu_keeps_its_own_figures_and_fills_the_datasheet_rest() -> None:
    gpu = GPUSpec(
        model="NVIDIA A100 80GB", memory_mb=81920, fp32_tflops=19.5, memory_bandwidth_gbs=2039.0
    )
    spec = spec_for_catalog_gpu(gpu)
    assert spec.fp32_gflops == 19500 and spec.bandwidth_gbs == 2039.0
    assert spec.sms == 108 and spec.l2_mb == 40 and spec.memory_gb == 80


def test_catalog_gpu_without_a_datasheet_is_an_error_naming_it() -> None:
    with pytest.raises(InvalidInputError, match="Imaginary X1"):
        spec_for_catalog_gpu(GPUSpec(model="Imaginary X1", fp32_tflops=1.0))
