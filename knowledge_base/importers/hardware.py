"""Center hardware facts (``hardware.json``): node types, GPU peaks and queue charge rates.

The file gathers what OSC and TACC publish, every number with its source URL and a
``missing`` list of what no public source gave. This module reads it into catalog
models; which partition runs on which node type is a judgement the seed makes
(``knowledge_base.seed``), not a fact this file states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_base.catalog import ChargeBasis, ChargePolicy, GPUSpec, NodeType
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers._errors import invalid, load_json

__all__ = ["HardwareFile", "read_hardware"]

_GB = 1024  # the file's GB are the centers' GB of node memory; the catalog keeps MB


class _Loose(BaseModel):
    # The file carries free-form provenance fields; keep the ones we use, validate them.
    model_config = ConfigDict(extra="allow")


class HardwareGPU(_Loose):
    model: str
    fp32_tflops: float | None = None
    fp16_tensor_tflops: float | None = None
    memory_bandwidth_gbs: float | None = None
    source: list[str] = Field(default_factory=list)

    def spec(self, memory_gb: float | None, model_name: str) -> GPUSpec:
        sources = "; ".join(self.source)
        return GPUSpec(
            model=model_name,
            memory_mb=None if memory_gb is None else int(memory_gb * _GB),
            fp32_tflops=self.fp32_tflops,
            fp16_tensor_tflops=self.fp16_tensor_tflops,
            memory_bandwidth_gbs=self.memory_bandwidth_gbs,
            sources={"peaks": f"{self.model}: {sources}"},
        )


class HardwareNodeType(_Loose):
    name: str
    count: int | None = None
    cpu_model: str | None = None
    cores: int | None = None
    memory_gb: float | None = None
    usable_memory_gb: float | None = None
    gpus: int | None = 0
    gpu_model: str | None = None
    gpu_memory_gb: float | None = None
    local_disk: str | None = None
    source: str = ""
    notes: str = ""

    def node_type(self, gpu: GPUSpec | None) -> NodeType:
        return NodeType(
            name=self.name,
            count=self.count,
            cpu_model=self.cpu_model,
            cores=self.cores,
            memory_mb=None if self.memory_gb is None else int(self.memory_gb * _GB),
            usable_memory_mb=(
                None if self.usable_memory_gb is None else int(self.usable_memory_gb * _GB)
            ),
            gpus=self.gpus,
            gpu=gpu,
            local_disk=self.local_disk,
            notes=self.notes,
            sources={"hardware": self.source} if self.source else {},
        )


class HardwareCharge(_Loose):
    unit: str
    rate: float | None = None
    source: str = ""


class HardwareQueue(_Loose):
    name: str
    max_minutes: int | None = None
    max_nodes: int | None = None
    min_nodes: int | None = None
    node_type: str | None = None
    charge: HardwareCharge

    def tacc_charge(self) -> ChargePolicy | None:
        """TACC: SUs = nodes x max(hours, 0.25) x rate; None when no rate is published."""
        if self.charge.rate is None or "SU" not in self.charge.unit:
            return None
        return ChargePolicy(
            unit="SU",
            basis=ChargeBasis.NODE_HOUR,
            rate=self.charge.rate,
            min_charge_minutes=15,
            source=self.charge.source,
        )


class HardwareSystem(_Loose):
    name: str
    center: str
    node_types: list[HardwareNodeType]
    queues: list[HardwareQueue] = Field(default_factory=list)
    charging_notes: str = ""
    sources: list[str] = Field(default_factory=list)


class HardwareFile(_Loose):
    systems: list[HardwareSystem]
    gpus: list[HardwareGPU]
    missing: list[str] = Field(default_factory=list)

    def system(self, name: str, source: str) -> HardwareSystem:
        for system in self.systems:
            if system.name == name:
                return system
        raise InvalidInputError(
            "no such system in the hardware file", source=source, field="systems", value=name
        )

    def gpu(self, model: str, source: str) -> HardwareGPU:
        for gpu in self.gpus:
            if gpu.model == model:
                return gpu
        raise InvalidInputError(
            "no such GPU model in the hardware file", source=source, field="gpus", value=model
        )


def read_hardware(path: Path | str) -> HardwareFile:
    data: Any = load_json(path)
    try:
        return HardwareFile.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, str(path)) from exc
