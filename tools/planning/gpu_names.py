"""GPU names as users type them, where a system's name could stand instead.

The one resolver is ``tools.estimators.gpu.specs.resolve_gpu_name`` (the catalog's GPUs
and the datasheet table: exact names and listed aliases resolve, anything else is
refused with every candidate); this module puts it behind the planner's ``hardware``
values, where ``all``, a system or ``SYSTEM/PARTITION`` is no GPU.
"""

from __future__ import annotations

from knowledge_base.catalog import Catalog, GPUSpec

__all__ = ["GPU_SYSTEM", "gpu_names", "resolve_gpu"]

GPU_SYSTEM = "gpu"
"""The system name of an answer about a GPU no partition stands for."""


def gpu_names(catalog: Catalog | None) -> dict[str, GPUSpec]:
    """Every GPU one can name, by its name: the catalog's, then the datasheets' that no
    catalog GPU stands for."""
    from tools.estimators.gpu.specs import catalog_gpus, nameable_gpus

    known = catalog_gpus(catalog) if catalog is not None else {}
    return {name: gpu for name, (gpu, _) in nameable_gpus(known).items()}


def resolve_gpu(
    name: str, catalog: Catalog | None, *, field: str = "hardware", required: bool = False
) -> GPUSpec | None:
    """The GPU ``name`` means; None where it names no GPU and ``required`` is False
    (a system, ``all``); an ambiguous name, or an unknown one, raises an
    InvalidInputError listing the candidates (and the systems, unless ``required``)."""
    from tools.estimators.gpu.specs import catalog_gpus, resolve_gpu_name

    if not required and (
        name == "all" or "/" in name or (catalog is not None and name in catalog.names())
    ):
        return None
    known = catalog_gpus(catalog) if catalog is not None else {}
    systems = None if required else (catalog.names() if catalog is not None else [])
    return resolve_gpu_name(name, known, field=field, systems=systems)
