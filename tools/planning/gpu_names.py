"""GPU names as users type them: resolved exactly, or refused with every candidate.

The GPUs one can name are the catalog's (as the center names them, with its own
figures) and the datasheet GPUs no partition has (``tools.estimators.gpu.specs``:
``DATASHEET_GPUS``, with SM count, clock and L2 from the vendors). A name resolves when
it is one of them whole (any case), one of ``ALIASES``, or when its words are all words
of exactly one; words of several (``H100``: the H100 SXM and the H100 PCIe) is an error
that lists every one, as is a name that is none. Nothing is picked silently.
"""

from __future__ import annotations

import re

from knowledge_base.catalog import Catalog, GPUSpec
from knowledge_base.errors import InvalidInputError

__all__ = ["ALIASES", "GPU_SYSTEM", "gpu_names", "resolve_gpu"]

GPU_SYSTEM = "gpu"
"""The system name of an answer about a GPU no partition stands for."""

# Short names people use for one card, lower case -> the datasheet name.
ALIASES: dict[str, str] = {
    "h100 sxm": "NVIDIA H100 SXM 80GB HBM3",
    "h100 pcie": "NVIDIA H100 PCIe 80GB",
    "a100 80gb pcie": "NVIDIA A100 80GB PCIe",
    "l4": "NVIDIA L4",
    "t4": "NVIDIA Tesla T4",
    "p4": "NVIDIA Tesla P4",
    "k80": "NVIDIA Tesla K80 (one GK210)",
}


def _words(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower()))


def gpu_names(catalog: Catalog | None) -> dict[str, GPUSpec]:
    """Every GPU one can name, by its name: the catalog's, then the datasheets'."""
    from tools.estimators.gpu.specs import DATASHEET_GPUS, datasheet_spec

    found: dict[str, GPUSpec] = {}
    for system in catalog.systems if catalog is not None else []:
        for node in system.node_types:
            if node.gpu is not None:
                found.setdefault(node.gpu.model, node.gpu)
    catalog_words = [_words(name) for name in found]
    for name in DATASHEET_GPUS:
        if any(_words(name) <= words for words in catalog_words):
            continue  # the catalog's own name for that card (its figures win)
        sheet = datasheet_spec(name)
        found[name] = GPUSpec(
            model=name,
            memory_mb=int(sheet.memory_gb * 1024),
            fp32_tflops=sheet.fp32_gflops / 1000,
            memory_bandwidth_gbs=sheet.bandwidth_gbs,
            sources={"model": "datasheet (tools.estimators.gpu.specs)"},
        )
    return found


def resolve_gpu(
    name: str, catalog: Catalog | None, *, field: str = "hardware", required: bool = False
) -> GPUSpec | None:
    """The GPU ``name`` means; None where it names no GPU and ``required`` is False
    (a system, ``all``); an ambiguous name, or an unknown one when ``required``, raises
    an InvalidInputError listing the candidates."""
    if not required and (
        name == "all" or "/" in name or (catalog is not None and name in catalog.names())
    ):
        return None
    known = gpu_names(catalog)
    needle = name.strip().lower()
    whole = [model for model in known if model.lower() == needle]
    if not whole and needle in ALIASES and ALIASES[needle] in known:
        whole = [ALIASES[needle]]
    if whole:
        return known[whole[0]]
    words = _words(needle)
    matches = sorted(model for model in known if words and words <= _words(model))
    if len(matches) == 1:
        return known[matches[0]]
    if len(matches) > 1:
        raise InvalidInputError(
            f"more than one GPU has that name ({'; '.join(matches)}): give one whole",
            field=field,
            value=name,
        )
    if not required:
        systems = ", ".join(catalog.names()) if catalog is not None else "none"
        raise InvalidInputError(
            f"neither a system (known: {systems}) nor a GPU (known: {'; '.join(sorted(known))})",
            field=field,
            value=name,
        )
    raise InvalidInputError(
        f"unknown GPU (known: {'; '.join(sorted(known))})", field=field, value=name
    )
