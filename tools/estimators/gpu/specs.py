"""GPUs described by their public specs only: what the per-operator cost model reads.

A ``GpuSpec`` carries NeuSight's device-config keys (``Num_Sm``, ``Core_Per_SM``,
``Freq`` MHz, ``SingleFLOPs`` GFLOP/s, ``Mem_Bw`` GB/s, ``L2Cache`` MB, ``Dev_Mem`` GB),
so a ``--gpu-spec FILE.json`` in NeuSight's format loads as is. The estimator never sees
a GPU's name as an input, only these numbers.

The center catalog's ``GPUSpec`` holds peak FP32, bandwidth and memory but not the SM
count, clock or L2; ``spec_for_catalog_gpu`` fills those from the vendors' datasheets
(the table below) and keeps the catalog's own figures where it has them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_base.catalog import Catalog, GPUSpec
from knowledge_base.errors import InvalidInputError

__all__ = [
    "DATASHEET_GPUS",
    "SPEC_FIELDS",
    "GpuSpec",
    "catalog_gpus",
    "datasheet_spec",
    "load_spec_file",
    "spec_for_catalog_gpu",
    "spec_from_mapping",
]

SPEC_FIELDS: tuple[str, ...] = (
    "Num_Sm",
    "Core_Per_SM",
    "Freq",
    "SingleFLOPs",
    "Mem_Bw",
    "L2Cache",
    "Dev_Mem",
)


class GpuSpec(BaseModel):
    """One GPU's public specs (NeuSight device-config keys as aliases)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    name: str = Field(default="custom GPU", alias="Device")
    sms: int = Field(alias="Num_Sm", gt=0, description="Streaming multiprocessors")
    cores_per_sm: int = Field(alias="Core_Per_SM", gt=0, description="FP32 lanes per SM")
    clock_mhz: float = Field(alias="Freq", gt=0, description="Boost clock, MHz")
    fp32_gflops: float = Field(alias="SingleFLOPs", gt=0, description="Peak FP32, GFLOP/s")
    bandwidth_gbs: float = Field(alias="Mem_Bw", gt=0, description="Memory bandwidth, GB/s")
    l2_mb: float = Field(alias="L2Cache", gt=0, description="L2 cache, MB")
    memory_gb: float = Field(alias="Dev_Mem", gt=0, description="Device memory, GB")

    @classmethod
    def of(cls, **fields: object) -> GpuSpec:
        """Build from NeuSight's keys (``GpuSpec.of(Num_Sm=80, ...)``)."""
        return cls.model_validate(fields)

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the roofline turns from memory- to compute-bound."""
        return self.fp32_gflops / self.bandwidth_gbs


def spec_from_mapping(document: object, source: str = "GPU spec") -> GpuSpec:
    """A ``GpuSpec`` from NeuSight's keys; a missing or non-positive field is named."""
    if not isinstance(document, dict):
        raise InvalidInputError("expected a JSON object with NeuSight's keys", source=source)
    for key in SPEC_FIELDS:
        if key not in document:
            raise InvalidInputError(
                f"missing field (needs {', '.join(SPEC_FIELDS)})", source=source, field=key
            )
        value = document[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise InvalidInputError(
                "must be a positive number", source=source, field=key, value=value
            )
    try:
        return GpuSpec.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(first["msg"], source=source, field=field) from exc


def load_spec_file(path: Path) -> GpuSpec:
    """Read a NeuSight-format device config (``--gpu-spec FILE.json``)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"not JSON: {exc.msg} at line {exc.lineno}", source=str(path)
        ) from exc
    return spec_from_mapping(document, source=str(path))


# (pattern on the catalog's model name, SMs, FP32 lanes per SM, boost MHz, L2 MB,
# fallback FP32 GFLOP/s, bandwidth GB/s, memory GB). Figures from NVIDIA's datasheets and
# architecture whitepapers (Kepler GK210, Pascal GP100/GP104, Volta GV100, Turing TU104,
# Ampere GA100, Ada AD104, Hopper GH100); the first match wins, so specific names first.
_DATASHEETS: tuple[tuple[str, int, int, float, float, float, float, float], ...] = (
    (r"H100.*(SXM|HBM3)", 132, 128, 1980, 50, 66908, 3350, 80),
    (r"H100", 114, 128, 1755, 50, 51200, 2000, 80),
    (r"A100.*80", 108, 64, 1410, 40, 19492, 1935, 80),
    (r"A100", 108, 64, 1410, 40, 19492, 1555, 40),
    (r"L4\b", 58, 128, 2040, 48, 30300, 300, 24),
    (r"RTX 5000", 48, 64, 1815, 4, 11200, 448, 16),
    (r"V100.*(SXM|NVLink)", 80, 64, 1530, 6, 15700, 900, 32),
    (r"V100", 80, 64, 1380, 6, 14029, 900, 32),
    (r"P100", 56, 64, 1329, 4, 9519, 732, 16),
    (r"T4\b", 40, 64, 1590, 4, 8141, 320, 15),
    (r"P4\b", 40, 64, 1113, 2, 5699, 192, 8),  # NeuSight counts P4 as 40 x 64
    # One GK210 die of a K80 board (what a job gets as one GPU).
    (r"K80", 13, 192, 875, 1.5, 4370, 240, 12),
)


# One name for each datasheet row, in the table's order (each matches its own row first):
# what ``--gpu`` accepts beside the catalog's GPUs, so a GPU no partition has (an L4, an
# H100 SXM) can be asked about by name.
DATASHEET_GPUS: tuple[str, ...] = (
    "NVIDIA H100 SXM 80GB HBM3",
    "NVIDIA H100 PCIe 80GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100 40GB",
    "NVIDIA L4",
    "NVIDIA Quadro RTX 5000",
    "NVIDIA Tesla V100 SXM2",
    "NVIDIA Tesla V100 PCIe",
    "NVIDIA Tesla P100",
    "NVIDIA Tesla T4",
    "NVIDIA Tesla P4",
    "NVIDIA Tesla K80 (one GK210)",
)


def datasheet_spec(model: str) -> GpuSpec:
    """The datasheet spec of a GPU model's name (``NVIDIA H100 80GB HBM3``, ``Tesla V100``);
    InvalidInputError when no datasheet row matches it."""
    for pattern, sms, lanes, mhz, l2, gflops, gbs, memory_gb in _DATASHEETS:
        if re.search(pattern, model, re.IGNORECASE):
            return GpuSpec.of(
                Device=model,
                Num_Sm=sms,
                Core_Per_SM=lanes,
                Freq=mhz,
                SingleFLOPs=gflops,
                Mem_Bw=gbs,
                L2Cache=l2,
                Dev_Mem=memory_gb,
            )
    raise InvalidInputError(
        "no datasheet for this GPU model (SM count, clock, L2): pass --gpu-spec FILE.json",
        field="gpu.model",
        value=model,
    )


def spec_for_catalog_gpu(gpu: GPUSpec) -> GpuSpec:
    """The full spec of a catalog GPU: its own peak, bandwidth and memory, datasheet rest."""
    sheet = datasheet_spec(gpu.model)
    return sheet.model_copy(
        update={
            "fp32_gflops": gpu.fp32_tflops * 1000 if gpu.fp32_tflops else sheet.fp32_gflops,
            "bandwidth_gbs": gpu.memory_bandwidth_gbs or sheet.bandwidth_gbs,
            "memory_gb": gpu.memory_mb / 1024 if gpu.memory_mb else sheet.memory_gb,
        }
    )


def catalog_gpus(catalog: Catalog) -> dict[str, GPUSpec]:
    """Every GPU model the catalog's node types carry, by its name."""
    found: dict[str, GPUSpec] = {}
    for name in catalog.names():
        for node in catalog.system(name).node_types:
            if node.gpu is not None:
                found.setdefault(node.gpu.model, node.gpu)
    return found
