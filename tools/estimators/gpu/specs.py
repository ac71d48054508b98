"""GPUs described by their public specs only: what the per-operator cost model reads.

A ``GpuSpec`` carries NeuSight's device-config keys (``Num_Sm``, ``Core_Per_SM``,
``Freq`` MHz, ``SingleFLOPs`` GFLOP/s, ``Mem_Bw`` GB/s, ``L2Cache`` MB, ``Dev_Mem`` GB),
so a ``--gpu-spec FILE.json`` in NeuSight's format loads as is. The estimator never sees
a GPU's name as an input, only these numbers.

``DATASHEETS`` is the one table of GPU figures on the estimator side: each row one
board, with one exact name, the aliases people, ``torch.cuda.get_device_name``, NeuSight
and the seed catalog use for it, and where its figures come from. Gavel's roofline
(``gavel_roofline.GPU_SPECS``) is derived from it. The center catalog's ``GPUSpec``
holds peak FP32, bandwidth and memory but not the SM count, clock or L2;
``spec_for_catalog_gpu`` fills those from the catalog GPU's row and keeps the catalog's
own figures where it has them.

``resolve_gpu_name`` is the one place a typed GPU name becomes a GPU: a name resolves
when it is a catalog GPU's model, or a row's exact name or one of its aliases (compared
in lower case with punctuation as spaces: ``Tesla_P100-PCIE-16GB`` is ``Tesla P100 PCIe
16GB``); a row a catalog GPU stands for answers with the catalog's GPU (its figures).
Anything else is refused: a part of some names (``h100``, ``A100``) with every
candidate, catalog and datasheet; an unknown name with them all. Nothing is picked
silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_base.catalog import Catalog, GPUSpec
from knowledge_base.errors import InvalidInputError

__all__ = [
    "ARCHITECTURES",
    "DATASHEETS",
    "DATASHEET_GPUS",
    "SPEC_FIELDS",
    "TENSOR_CORE_ARCHITECTURES",
    "Datasheet",
    "GpuSpec",
    "catalog_gpus",
    "datasheet",
    "datasheet_spec",
    "gpu_architecture",
    "load_spec_file",
    "nameable_gpus",
    "resolve_gpu_name",
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
    def fp32_tflops(self) -> float:
        """Peak FP32, TFLOP/s."""
        return self.fp32_gflops / 1000

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


@dataclass(frozen=True, slots=True)
class Datasheet:
    """One board's public figures: its exact name, the other names it goes by, sources."""

    spec: GpuSpec
    aliases: tuple[str, ...]
    source: str

    @property
    def name(self) -> str:
        """The exact name (``spec.name``)."""
        return self.spec.name

    @property
    def names(self) -> tuple[str, ...]:
        """The exact name, then the aliases."""
        return (self.name, *self.aliases)

    def as_catalog_gpu(self) -> GPUSpec:
        """This board as a catalog GPU record (for a GPU no partition has)."""
        return GPUSpec(
            model=self.name,
            memory_mb=round(self.spec.memory_gb * 1024),
            fp32_tflops=self.spec.fp32_gflops / 1000,
            memory_bandwidth_gbs=self.spec.bandwidth_gbs,
            sources={"model": f"datasheet: {self.source}"},
        )


def _sheet(
    name: str,
    aliases: tuple[str, ...],
    figures: tuple[int, int, float, float, float, float, float],
    source: str,
) -> Datasheet:
    """A row from (SMs, FP32 lanes per SM, boost MHz, L2 MB, FP32 GFLOP/s, GB/s, GB)."""
    sms, lanes, mhz, l2, gflops, gbs, memory_gb = figures
    spec = GpuSpec.of(
        Device=name, Num_Sm=sms, Core_Per_SM=lanes, Freq=mhz, SingleFLOPs=gflops,
        Mem_Bw=gbs, L2Cache=l2, Dev_Mem=memory_gb,
    )  # fmt: skip
    return Datasheet(spec, aliases, source)


_GA100 = "Ampere GA100 whitepaper (108 SMs x 64 FP32 lanes, 1410 MHz boost, 40 MB L2)"
_GV100 = "Volta GV100 whitepaper (80 SMs x 64 FP32 lanes, 6 MB L2)"

# Aliases: short names people type, torch.cuda.get_device_name's and NeuSight's names
# (its device-config files) and the seed catalog's model names, each the board it is.
# A name that could be either of two boards (``H100``, ``A100``, ``V100``, ``A100 80GB``)
# is nobody's alias: it is refused with both.
DATASHEETS: tuple[Datasheet, ...] = (
    _sheet(
        "NVIDIA H100 SXM 80GB HBM3",
        ("H100 SXM", "H100 SXM5", "H100 SXM5 80GB", "NVIDIA H100 80GB HBM3"),
        (132, 128, 1980, 50, 66908, 3350, 80),
        "NVIDIA H100 datasheet (SXM5: 67 TFLOPS FP32, 3.35 TB/s, 80 GB HBM3); Hopper "
        "GH100 whitepaper (132 SMs x 128 FP32 lanes, 1980 MHz boost, 50 MB L2)",
    ),
    _sheet(
        "NVIDIA H100 PCIe 80GB",
        ("H100 PCIe", "NVIDIA H100 PCIe"),
        (114, 128, 1755, 50, 51200, 2000, 80),
        "NVIDIA H100 datasheet (PCIe: 51 TFLOPS FP32, 2 TB/s, 80 GB HBM2e); Hopper GH100 "
        "whitepaper (114 SMs x 128 FP32 lanes, 1755 MHz boost, 50 MB L2)",
    ),
    # "NVIDIA A100 80GB": the seed catalog's Ascend quad-GPU nodes, SXM4 boards by its source.
    _sheet(
        "NVIDIA A100 SXM4 80GB",
        ("A100 SXM4 80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
        (108, 64, 1410, 40, 19492, 2039, 80),
        f"NVIDIA A100 datasheet (SXM4 80GB: 19.5 TFLOPS FP32, 2039 GB/s); {_GA100}",
    ),
    _sheet(
        "NVIDIA A100 80GB PCIe",
        ("A100 80GB PCIe",),
        (108, 64, 1410, 40, 19492, 1935, 80),
        f"NVIDIA A100 datasheet (80GB PCIe: 19.5 TFLOPS FP32, 1935 GB/s); {_GA100}",
    ),
    _sheet(
        "NVIDIA A100 40GB",
        (
            "A100 40GB",
            "A100 PCIe 40GB",
            "NVIDIA A100 PCIe 40GB",
            "NVIDIA A100-PCIE-40GB",
            "A100 SXM4 40GB",
            "NVIDIA A100-SXM4-40GB",
        ),
        (108, 64, 1410, 40, 19492, 1555, 40),
        f"NVIDIA A100 datasheet (40GB PCIe and SXM4: 19.5 TFLOPS FP32, 1555 GB/s); {_GA100}",
    ),
    _sheet(
        "NVIDIA L4",
        ("L4",),
        (58, 128, 2040, 48, 30300, 300, 24),
        "NVIDIA L4 datasheet (30.3 TFLOPS FP32, 300 GB/s, 24 GB GDDR6); Ada AD104 as L4 "
        "(58 SMs x 128 FP32 lanes, 2040 MHz boost, 48 MB L2; NeuSight's config says 60 SMs)",
    ),
    _sheet(
        "NVIDIA Quadro RTX 5000",
        ("Quadro RTX 5000", "RTX 5000"),
        (48, 64, 1815, 4, 11200, 448, 16),
        "Quadro RTX 5000 datasheet (11.2 TFLOPS FP32, 448 GB/s, 16 GB GDDR6); Turing "
        "TU104 (48 SMs x 64 FP32 lanes, 1815 MHz boost, 4 MB L2)",
    ),
    _sheet(
        "NVIDIA Tesla V100 SXM2 32GB",
        (
            "V100 SXM2 32GB",
            "Tesla V100-SXM2-32GB",
            "NVIDIA Tesla V100 (Volta), NVLink (per third-party guide)",
        ),
        (80, 64, 1530, 6, 15700, 900, 32),
        f"NVIDIA V100 datasheet (SXM2: 15.7 TFLOPS FP32, 900 GB/s, 1530 MHz boost); {_GV100}",
    ),
    _sheet(
        "NVIDIA Tesla V100 SXM2 16GB",
        ("V100 SXM2 16GB", "Tesla V100-SXM2-16GB"),
        (80, 64, 1530, 6, 15700, 900, 16),
        f"NVIDIA V100 datasheet (SXM2: 15.7 TFLOPS FP32, 900 GB/s, 1530 MHz boost); {_GV100}",
    ),
    _sheet(
        "NVIDIA Tesla V100 PCIe 32GB",
        (
            "V100 PCIe",
            "V100 PCIe 32GB",
            "NVIDIA Tesla V100 PCIe",
            "Tesla V100-PCIE-32GB",
            "NVIDIA Tesla V100 (Volta)",
        ),
        (80, 64, 1380, 6, 14029, 900, 32),
        f"NVIDIA V100 datasheet (PCIe: 14 TFLOPS FP32, 900 GB/s, 1380 MHz boost); {_GV100}",
    ),
    _sheet(
        "NVIDIA Tesla P100 PCIe 16GB",
        (
            "P100",
            "Tesla P100",
            "NVIDIA Tesla P100",
            "P100 PCIe",
            "Tesla P100-PCIE-16GB",
            "NVIDIA Tesla P100 (Pascal)",
        ),
        (56, 64, 1329, 4, 9519, 732, 16),
        "NVIDIA P100 datasheet (PCIe 16GB: 9.3 TFLOPS FP32, 732 GB/s, 16 GB HBM2); Pascal "
        "GP100 whitepaper (56 SMs x 64 FP32 lanes, 4 MB L2); 9519 GFLOP/s as NeuSight's config",
    ),
    _sheet(
        "NVIDIA Tesla T4",
        ("T4", "Tesla T4"),
        (40, 64, 1590, 4, 8141, 320, 16),
        "NVIDIA T4 datasheet (8.1 TFLOPS FP32, 320 GB/s, 16 GB GDDR6); Turing TU104 as T4 "
        "(40 SMs x 64 FP32 lanes, 1590 MHz boost, 4 MB L2). NeuSight's config says 15 GB "
        "(likely the ~15 GiB the driver reports); the time model reads no memory figure",
    ),
    _sheet(
        "NVIDIA Tesla P4",
        ("P4", "Tesla P4"),
        (40, 64, 1113, 2, 5699, 192, 8),
        "NVIDIA P4 datasheet (5.5 TFLOPS FP32, 192 GB/s, 8 GB GDDR5); GP104 as P4 counted "
        "as NeuSight's config does (40 SMs x 64 FP32 lanes, 1113 MHz, 2 MB L2)",
    ),
    _sheet(
        "NVIDIA Tesla K80 (one GK210)",
        ("K80", "Tesla K80"),
        (13, 192, 875, 1.5, 4370, 240, 12),
        "NVIDIA K80 datasheet, one of the board's two GK210 dies (what a job gets as one "
        "GPU): 13 SMs x 192 FP32 lanes, 875 MHz boost, 1.5 MB L2, half the board's 480 "
        "GB/s and 24 GB",
    ),
)

DATASHEET_GPUS: tuple[str, ...] = tuple(row.name for row in DATASHEETS)


# The architecture of a GPU model by a part of its name, most specific first (the first
# part found in the name, case-insensitive, wins): for cards beyond the datasheet rows
# too (an A40, a GeForce RTX), since what an architecture implies (the CUDA context's
# size, tensor cores) holds for every card of it.
ARCHITECTURES: tuple[tuple[str, str], ...] = (
    ("GH200", "hopper"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("L40", "ada"),
    ("L4", "ada"),
    ("Ada Generation", "ada"),
    ("RTX 6000 Ada", "ada"),
    ("RTX 5000 Ada", "ada"),
    ("RTX 4000 Ada", "ada"),
    ("GeForce RTX 40", "ada"),
    ("A100", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("A10", "ampere"),
    ("RTX A", "ampere"),
    ("GeForce RTX 30", "ampere"),
    ("GeForce RTX 20", "turing"),
    ("Quadro RTX", "turing"),
    ("RTX 4000", "turing"),
    ("RTX 5000", "turing"),
    ("RTX 6000", "turing"),
    ("RTX 8000", "turing"),
    ("T4", "turing"),
    ("V100", "volta"),
    ("P100", "pascal"),
    ("P40", "pascal"),
    ("P4", "pascal"),
    ("K80", "kepler"),
    ("K40", "kepler"),
)

# Architectures whose cards have tensor cores (Volta onwards).
TENSOR_CORE_ARCHITECTURES = frozenset({"volta", "turing", "ampere", "ada", "hopper"})


def gpu_architecture(model: str) -> str | None:
    """The architecture of a GPU model's name (``ARCHITECTURES``; None when unknown)."""
    lowered = model.lower()
    for part, architecture in ARCHITECTURES:
        if part.lower() in lowered:
            return architecture
    return None


"""The datasheet GPUs' exact names, in the table's order."""


def _key(name: str) -> str:
    """A name compared: lower case, punctuation and underscores as single spaces."""
    return " ".join(re.findall(r"[a-z0-9]+", name.lower()))


def _by_name(rows: Sequence[Datasheet]) -> dict[str, Datasheet]:
    found: dict[str, Datasheet] = {}
    for row in rows:
        for name in row.names:
            other = found.setdefault(_key(name), row)
            if other is not row:
                raise ValueError(f"{name!r} names both {other.name!r} and {row.name!r}")
    return found


_BY_NAME = _by_name(DATASHEETS)


def datasheet(name: str) -> Datasheet | None:
    """The row ``name`` is the exact name or an alias of (any case), None for none."""
    return _BY_NAME.get(_key(name))


def datasheet_spec(model: str) -> GpuSpec:
    """The datasheet spec of a GPU's exact name or alias (``NVIDIA H100 80GB HBM3``,
    ``T4``); InvalidInputError when no row has that name."""
    row = datasheet(model)
    if row is None:
        raise InvalidInputError(
            "no datasheet for this GPU model (SM count, clock, L2): pass --gpu-spec FILE.json",
            field="gpu.model",
            value=model,
        )
    return row.spec


def spec_for_catalog_gpu(gpu: GPUSpec) -> GpuSpec:
    """The full spec of a catalog GPU: its own peak, bandwidth and memory, datasheet rest."""
    sheet = datasheet_spec(gpu.model)
    return sheet.model_copy(
        update={
            "name": gpu.model,
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


def nameable_gpus(known: Mapping[str, GPUSpec]) -> dict[str, tuple[GPUSpec, tuple[str, ...]]]:
    """Every GPU one can name, by the name it is listed under, with the names it answers
    to: the catalog's (``known``; with the names of its datasheet row), then the datasheet
    rows no catalog GPU stands for."""
    found: dict[str, tuple[GPUSpec, tuple[str, ...]]] = {}
    carried: set[str] = set()
    for model, gpu in known.items():
        row = datasheet(model)
        found[model] = (gpu, (model, *(row.names if row is not None else ())))
        if row is not None:
            carried.add(row.name)
    for row in DATASHEETS:
        if row.name not in carried:
            found[row.name] = (row.as_catalog_gpu(), row.names)
    return found


def _part_of(needle: str, name: str) -> bool:
    """Every word of ``needle`` begins a word of ``name`` (``sxm`` of ``sxm2``)."""
    words = _key(name).split()
    return all(any(word.startswith(part) for word in words) for part in needle.split())


def resolve_gpu_name(
    name: str,
    known: Mapping[str, GPUSpec],
    *,
    field: str = "gpu",
    systems: Sequence[str] | None = None,
) -> GPUSpec:
    """The GPU ``name`` means, among the catalog's ``known`` GPUs and the datasheets':
    a catalog GPU's model, or a datasheet row's exact name or alias (the catalog's GPU
    where one stands for that row, with its own figures). Anything else raises an
    InvalidInputError naming ``field`` and the name: a part of some names lists every one
    of them; an unknown name lists all (and ``systems``, where it could have been one)."""
    needle = _key(name)
    gpus = nameable_gpus(known)
    whole = [listed for listed in known if _key(listed) == needle]
    if not whole:
        whole = [listed for listed, (_, names) in gpus.items() if needle in map(_key, names)]
    if len(whole) == 1:
        return gpus[whole[0]][0]
    candidates = whole or sorted(
        listed
        for listed, (_, names) in gpus.items()
        if needle and any(_part_of(needle, each) for each in names)
    )
    if candidates:
        said = "more than one GPU has that name"
        if len(candidates) == 1:
            said = "only a part of a GPU's name"
        raise InvalidInputError(
            f"{said} ({'; '.join(sorted(candidates))}): give one whole",
            field=field,
            value=name,
        )
    in_catalog = "; ".join(sorted(known)) or "none in the catalog"
    sheets = "; ".join(listed for listed in gpus if listed not in known)
    listed = f"known: {in_catalog}; from datasheets: {sheets}"
    if systems is not None:
        raise InvalidInputError(
            f"neither a system (known: {', '.join(systems) or 'none'}) nor a GPU ({listed})",
            field=field,
            value=name,
        )
    raise InvalidInputError(f"unknown GPU ({listed})", field=field, value=name)
