"""NeuSight's measured kernels as training rows for the per-operator cost model.

Source: ``shared/data/dnn_profiles/neusight`` (MIT; Lee et al., "Forecasting GPU
Performance for Deep Learning Training and Inference", ASPLOS 2025): one operator kernel
timed in isolation per row, PyTorch 2.1, FP32, on Tesla P4, P100, T4, V100 and A100-40GB
(convolutions: A100-80GB instead). Only the shape columns and the GPU's spec file are
read; the launched kernel's grid and names describe what a GPU did and are never inputs.
"""

from __future__ import annotations

import csv
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.features import DIMS, OP_CLASSES
from tools.estimators.gpu.specs import GpuSpec, spec_from_mapping

__all__ = [
    "ELEMENTWISE_KINDS",
    "TRAINING_GPUS",
    "KernelRows",
    "default_neusight_root",
    "load_device_specs",
    "load_kernels",
]

# NeuSight's element-wise files: (tensor inputs, transcendental math).
ELEMENTWISE_KINDS: dict[str, tuple[int, int]] = {
    "add": (2, 0),
    "mul": (2, 0),
    "div": (2, 0),
    "pow": (2, 1),
    "addu": (1, 0),
    "mulu": (1, 0),
    "divu": (1, 0),
    "powu": (1, 1),
    "relu": (1, 0),
    "gelu": (1, 1),
    "tanh": (1, 1),
}

TRAINING_GPUS: tuple[str, ...] = (
    "Tesla_P4",
    "Tesla_P100-PCIE-16GB",
    "Tesla_T4",
    "Tesla_V100-PCIE-32GB",
    "NVIDIA_A100-PCIE-40GB",
)
_CONV_STAND_IN = {"NVIDIA_A100-PCIE-40GB": "NVIDIA_A100_80GB_PCIe"}


def default_neusight_root(override: Path | None = None) -> Path:
    """``override`` (the settings' ``neusight``) or the shared data folder beside the
    repository."""
    if override is not None:
        return override.expanduser()
    return Path(__file__).resolve().parents[3].parent / "shared/data/dnn_profiles/neusight"


@dataclass(slots=True)
class KernelRows:
    """One operator class's measured kernels: shapes, the GPU of each row, latency.

    ``in_model`` marks rows timed inside a whole-model run (``inmodel``) rather than in
    isolation; None: all isolated.
    """

    op_class: str
    dims: dict[str, NDArray[np.float64]]
    gpu: NDArray[np.str_]
    latency_ms: NDArray[np.float64]
    spec: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    in_model: NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        return len(self.latency_ms)

    @property
    def in_model_mask(self) -> NDArray[np.bool_]:
        if self.in_model is None:
            return np.zeros(len(self), dtype=bool)
        return self.in_model

    def subset(self, mask: NDArray[np.bool_]) -> KernelRows:
        return KernelRows(
            self.op_class,
            {k: v[mask] for k, v in self.dims.items()},
            self.gpu[mask],
            self.latency_ms[mask],
            {k: v[mask] for k, v in self.spec.items()},
            None if self.in_model is None else self.in_model[mask],
        )


def load_device_specs(root: Path) -> dict[str, GpuSpec]:
    """Every device config in NeuSight's folder, by file stem (``Tesla_T4``)."""
    specs = {}
    for path in sorted((root / "device_configs").glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        if "SingleFLOPs" in document:  # AMD files give matrix/vector peaks instead
            specs[path.stem] = spec_from_mapping(document, source=str(path))
    return specs


def _read(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def load_kernels(
    root: Path, gpus: tuple[str, ...] = TRAINING_GPUS, max_rows_per_file: int | None = None
) -> dict[str, KernelRows]:
    """Training rows of every operator class on ``gpus`` (NeuSight file stems)."""
    if not (root / "kernels").is_dir():
        raise InvalidInputError("NeuSight kernel folder not found", field="root", value=str(root))
    specs = load_device_specs(root)
    out: dict[str, KernelRows] = {}
    for op_class in OP_CLASSES:
        files = list(ELEMENTWISE_KINDS) if op_class == "elementwise" else [op_class]
        columns: dict[str, list[float]] = {name: [] for name in DIMS[op_class]}
        gpu_of: list[str] = []  # the fold: A100-80GB's convolutions count as A100's
        device_of: list[str] = []
        latency: list[float] = []
        for gpu in gpus:
            device = _CONV_STAND_IN.get(gpu, gpu) if op_class == "conv" else gpu
            for name in files:
                path = root / "kernels" / name / f"{device}.csv.gz"
                if not path.exists():
                    continue
                rows = _read(path)[:max_rows_per_file]
                for row in rows:
                    value = float(row["Latency"])
                    if not value > 0:
                        continue
                    if op_class == "elementwise":
                        inputs, heavy = ELEMENTWISE_KINDS[name]
                        columns["N"].append(float(row["B"]) * float(row["H"]))
                        columns["Inputs"].append(inputs)
                        columns["Heavy"].append(heavy)
                    elif op_class == "conv":
                        for key, source in zip(
                            DIMS["conv"],
                            (
                                "B",
                                "Input_Channel",
                                "Output_Channel",
                                "Kernel_Szie",
                                "Input_Size",
                                "Stride",
                                "Padding",
                            ),
                            strict=True,
                        ):
                            columns[key].append(float(row[source]))
                    else:
                        for key in DIMS[op_class]:
                            columns[key].append(float(row[key]))
                    gpu_of.append(gpu)
                    device_of.append(device)
                    latency.append(value)
        gpu_array = np.array(gpu_of)
        spec = {
            key: np.array([getattr(specs[d], key) for d in device_of], dtype=np.float64)
            for key in ("sms", "fp32_gflops", "bandwidth_gbs", "l2_mb")
        }
        out[op_class] = KernelRows(
            op_class,
            {k: np.array(v, dtype=np.float64) for k, v in columns.items()},
            gpu_array,
            np.array(latency, dtype=np.float64),
            spec,
        )
    return out
