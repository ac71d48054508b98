"""A GPU's whole-model efficiency level, read off its specs (never its name).

The per-operator shape model (``opcost``) says how far from its roofline each kernel of a
given shape runs *relative to its GPU's mean*; the level says where that mean sits for
whole training steps. It is fitted on end-to-end runs, not on isolated kernels:
NeuSight's isolated kernels run well below what the same shapes reach inside a model run
on some boards (large GEMMs on P100 at a median 57% of peak in isolation, 75-90% inside
BERT/GPT runs; T4 37% against ~50%; V100 83% against 85-95%), so a level taken from the
kernels over-predicted whole models by x1.3-1.4 on P100, T4 and V100.

    level(GPU) = clip(intercept + slope x log(memory bandwidth GB/s), lowest, highest)

Memory bandwidth stands for the board's class: the 70-75 W GDDR inference boards (P4,
T4: 192-320 GB/s) sustain far below their boost-clock peak, the HBM boards (P100, V100,
A100: 732-1555 GB/s) near it. A GPU outside the training range gets the nearest end's
level, never one beyond any seen: a faster HBM board is never put nearer its roofline
than the best board seen, and a low-bandwidth board never further than the worst.
Leave-one-GPU-out on NeuSight's 34 end-to-end runs, the line in log bandwidth errs 10.3%
(mean), in log peak FP32 9.2%, in log ridge point (peak / bandwidth) 14.7%; bandwidth is
kept because peak FP32 would put a 72 W board with a high boost-clock peak (an L4) at the
best HBM board's level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tools.estimators.gpu.specs import GpuSpec

__all__ = ["GpuLevel", "fit_level", "level_feature"]


def level_feature(spec: GpuSpec) -> float:
    """log(memory bandwidth, GB/s): the level's one input."""
    return math.log(spec.bandwidth_gbs)


@dataclass(slots=True)
class GpuLevel:
    """The fitted line, its clip range, and each training GPU's own level (provenance)."""

    intercept: float
    slope: float
    lowest: float
    highest: float
    levels: dict[str, float] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)

    def __call__(self, spec: GpuSpec) -> float:
        return float(self.at(np.array([level_feature(spec)]))[0])

    def at(self, feature: NDArray[np.float64]) -> NDArray[np.float64]:
        """The level at each feature value (the line, clipped to the seen range)."""
        line = self.intercept + self.slope * np.asarray(feature, dtype=np.float64)
        return np.clip(line, self.lowest, self.highest)

    def to_json(self) -> dict[str, Any]:
        return {
            "feature": "log(bandwidth_gbs)",
            "intercept": self.intercept,
            "slope": self.slope,
            "lowest": self.lowest,
            "highest": self.highest,
            "levels": self.levels,
            "features": self.features,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> GpuLevel:
        return cls(
            float(document["intercept"]),
            float(document["slope"]),
            float(document["lowest"]),
            float(document["highest"]),
            {k: float(v) for k, v in document.get("levels", {}).items()},
            {k: float(v) for k, v in document.get("features", {}).items()},
        )


def fit_level(levels: dict[str, float], specs: dict[str, GpuSpec]) -> GpuLevel:
    """Least-squares line of each GPU's level over its log bandwidth.

    ``levels`` are mean log(measured / shape-model) over each GPU's end-to-end runs. With
    fewer than two distinct bandwidths the level is their mean for every GPU.
    """
    if not levels:
        raise ValueError("fit_level needs at least one GPU's level")
    names = sorted(levels)
    x = np.array([level_feature(specs[n]) for n in names])
    y = np.array([levels[n] for n in names])
    if len(names) >= 2 and np.ptp(x) > 0:
        slope, intercept = (float(v) for v in np.polyfit(x, y, 1))
    else:
        slope, intercept = 0.0, float(np.mean(y))
    return GpuLevel(
        intercept,
        slope,
        float(y.min()),
        float(y.max()),
        {n: float(levels[n]) for n in names},
        {n: float(v) for n, v in zip(names, x, strict=True)},
    )
