"""How good a run-time (or memory) predictor is, scored the way the literature scores it.

Accuracy is Tsafrir, Etsion and Feitelson's (IEEE TPDS 2007): the mean over jobs of
``min(p, r) / max(p, r)``, 1 for a perfect predictor. The median absolute percentage
error (in percent) and the under-prediction rate (the fraction with ``p < r``: jobs a
scheduler trusting ``p`` would kill or mis-plan) complete the picture.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PredictorScore", "score"]


class PredictorScore(BaseModel):
    """One predictor's figures over a set of jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accuracy: float = Field(ge=0, le=1, description="Mean of min(p, r) / max(p, r)")
    median_ape: float = Field(ge=0, description="Median of |p - r| / r, in percent")
    under_rate: float = Field(ge=0, le=1, description="Fraction of jobs with p < r")


def score(predicted: ArrayLike, actual: ArrayLike) -> PredictorScore:
    """Score ``predicted`` against ``actual`` (both positive, same length, at least one)."""
    p = np.asarray(predicted, dtype=np.float64)
    r = np.asarray(actual, dtype=np.float64)
    if p.shape != r.shape or p.ndim != 1 or p.size == 0:
        raise ValueError(f"score: need two equal, non-empty 1-D arrays, got {p.shape}, {r.shape}")
    if not (np.all(p > 0) and np.all(r > 0)):
        raise ValueError("score: predictions and actual values must be positive")
    return PredictorScore(
        accuracy=float(np.mean(np.minimum(p, r) / np.maximum(p, r))),
        median_ape=float(np.median(np.abs(p - r) / r) * 100.0),
        under_rate=float(np.mean(p < r)),
    )
