"""The CUDA context assumed per GPU generation, and a catalog GPU's generation.

Light (no torch): the white-box peak (``estimate``, ``tools.estimators.gpu.workload_trace``)
and the analytic fallback's GPU memory (``tools.planning.analytic``) add the same
assumption, so their ratio does not depend on which GPU is asked. Not measured here (no
GPU): bracketed by what users report (the PyTorch forum: "depending on the CUDA version,
used GPU") and by NVIDIA's lazy module loading, the default on Linux since CUDA 12.2,
which loads only the kernels a program calls (CUDA programming guide, "Lazy Loading").
"""

from __future__ import annotations

__all__ = ["CONTEXT_MB", "context_for", "gpu_generation"]

# MiB per GPU, assumed. Up to Volta: the PyTorch 1.x / CUDA 10-11.0 builds those boards
# ran, which loaded every kernel of the libraries at start. From Turing on: CUDA 12
# builds with lazy loading.
CONTEXT_MB: dict[str, float] = {
    "kepler": 800.0,
    "maxwell": 800.0,
    "pascal": 800.0,
    "volta": 800.0,
    "turing": 500.0,
    "ampere": 500.0,
    "ada": 500.0,
    "hopper": 500.0,
}

# (pattern on the catalog's GPU model, generation), most specific first.
_GENERATIONS = (
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("GH200", "hopper"),
    ("L4", "ada"),
    ("L40", "ada"),
    ("RTX 6000 Ada", "ada"),
    ("A100", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("A10", "ampere"),
    ("RTX A", "ampere"),
    ("RTX 5000", "turing"),
    ("RTX 6000", "turing"),
    ("Quadro RTX", "turing"),
    ("T4", "turing"),
    ("V100", "volta"),
    ("P100", "pascal"),
    ("P40", "pascal"),
    ("P4", "pascal"),
    ("K80", "kepler"),
    ("K40", "kepler"),
)


def gpu_generation(model: str) -> str | None:
    """The architecture of a catalog GPU model name (None when unknown)."""
    lowered = model.lower()
    for pattern, generation in _GENERATIONS:
        if pattern.lower() in lowered:
            return generation
    return None


def context_for(model: str) -> float:
    """The context MiB assumed for a GPU model (unknown architecture: the largest, as
    older CUDA builds loaded)."""
    generation = gpu_generation(model)
    return CONTEXT_MB[generation] if generation else max(CONTEXT_MB.values())
