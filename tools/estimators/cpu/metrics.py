"""Error measures of the DNN estimators: MAPE, under-prediction, interval coverage."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict

__all__ = ["Scores", "mape", "score", "under_rate"]


def _arrays(predicted: ArrayLike, actual: ArrayLike) -> tuple[NDArray[np.float64], ...]:
    return np.asarray(predicted, dtype=np.float64), np.asarray(actual, dtype=np.float64)


def mape(predicted: ArrayLike, actual: ArrayLike) -> float:
    """Mean absolute percentage error, in percent."""
    p, a = _arrays(predicted, actual)
    return float(np.mean(np.abs(p - a) / a) * 100)


def under_rate(predicted: ArrayLike, actual: ArrayLike, tolerance: float = 0.0) -> float:
    """Fraction predicted below ``actual x (1 - tolerance)``."""
    p, a = _arrays(predicted, actual)
    return float(np.mean(p < a * (1 - tolerance)))


class Scores(BaseModel):
    """One estimator on one target and split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mape: float
    under_rate: float
    coverage: float | None = None
    over_error: float = 0.0  # mean relative over-prediction, percent
    under_error: float = 0.0  # mean relative under-prediction where under, percent
    rows: int = 0


def score(
    p50: ArrayLike,
    actual: ArrayLike,
    p10: ArrayLike | None = None,
    p90: ArrayLike | None = None,
) -> Scores:
    p, a = _arrays(p50, actual)
    over = np.where(p > a, (p - a) / a, 0.0)
    under_mask = p < a
    under = float(np.mean((a - p)[under_mask] / a[under_mask]) * 100) if under_mask.any() else 0.0
    coverage = None
    if p10 is not None and p90 is not None:
        low, high = np.asarray(p10, dtype=np.float64), np.asarray(p90, dtype=np.float64)
        coverage = float(np.mean((a >= low) & (a <= high)))
    return Scores(
        mape=mape(p, a),
        under_rate=float(np.mean(under_mask)),
        coverage=coverage,
        over_error=float(np.mean(over) * 100),
        under_error=under,
        rows=int(a.size),
    )
