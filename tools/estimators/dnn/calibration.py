"""Calibrating intervals and sizing the safety factor on held-out validation data.

Intervals: split-conformal quantile regression (Romano et al., NeurIPS 2019). On a
validation set not used for fitting, each row's conformity score is how far the truth
falls outside its predicted [p10, p90] (negative when inside); the interval is widened
(or narrowed) by the score's ``ceil((n + 1) x 0.8) / n`` quantile, so that about 80% of
new rows fall inside. Everything is on the log scale, so the widening is a factor.

Safety factor (HARP): how much to scale a point estimate so that it rarely falls short.
From the validation rows the median under-predicts, the 90th percentile of their
relative shortfall ``(actual - p50) / p50``; 1 + that.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

__all__ = ["Calibration", "calibrate", "safety_factor"]

TARGET_COVERAGE = 0.8


class Calibration(BaseModel):
    """The log-scale widening of [p10, p90] and the safety factor of p50."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    widen_log: float = 0.0
    safety_factor: float = 1.0
    coverage_before: float | None = None
    rows: int = 0

    def apply(self, quantiles: NDArray[np.float64]) -> NDArray[np.float64]:
        """Calibrated (rows, 3) log-scale quantiles: p10 and p90 moved, p50 kept."""
        out = quantiles.copy()
        out[:, 0] = np.minimum(out[:, 0] - self.widen_log, out[:, 1])
        out[:, 2] = np.maximum(out[:, 2] + self.widen_log, out[:, 1])
        return out


def safety_factor(p50: NDArray[np.float64], actual: NDArray[np.float64]) -> float:
    under = actual > p50
    if not under.any():
        return 1.0
    shortfall = (actual[under] - p50[under]) / p50[under]
    return float(1.0 + np.quantile(shortfall, 0.9))


def calibrate(
    quantiles_log: NDArray[np.float64],
    actual_log: NDArray[np.float64],
    coverage: float = TARGET_COVERAGE,
) -> Calibration:
    """Fit a ``Calibration`` on validation predictions (log scale) and truths (log)."""
    n = actual_log.size
    if n == 0:
        return Calibration()
    low, high = quantiles_log[:, 0], quantiles_log[:, 2]
    scores = np.maximum(low - actual_log, actual_log - high)
    level = min(1.0, math.ceil((n + 1) * coverage) / n)
    widen = float(np.quantile(scores, level))
    before = float(np.mean((actual_log >= low) & (actual_log <= high)))
    return Calibration(
        widen_log=widen,
        safety_factor=safety_factor(np.exp(quantiles_log[:, 1]), np.exp(actual_log)),
        coverage_before=before,
        rows=n,
    )
