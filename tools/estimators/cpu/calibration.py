"""Calibrating intervals and sizing the safety factor on held-out validation data.

Intervals: split-conformal quantile regression (Romano et al., NeurIPS 2019), each tail
on its own (their asymmetric variant). On a validation set not used for fitting, each
row's lower score is how far the truth falls below its predicted p10 and its upper
score how far it falls above its p90 (negative when inside); the p10 is moved down by
the lower scores' ``ceil((n + 1) x 0.9) / n`` quantile and the p90 up by the upper
scores', so that about 10% of new rows fall below the p10 and 10% above the p90 (80%
inside). Everything is on the log scale, so the moves are factors.

Why each tail on its own: the p90 is the figure a walltime or memory request is made
from, and HARP's rule counts the p90's under-predictions. A symmetric widening reaches
80% inside but lets a biased estimator put all of its 20% on one side: one biased high
then under-predicts its p90 rarely, however large its error, and wins the rule's first
criterion by its bias. Calibrated per tail, every estimator's p90 under-predicts about
10% of the validation rows, the rule's first criterion compares them at the same risk,
and the second (how much the p90 over-predicts: the request's waste) decides.

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
    """The log-scale moves of p10 (down) and p90 (up), and the safety factor of p50.

    ``widen_log`` moves both by one amount (bundles calibrated before the tails were
    calibrated on their own); ``widen_low_log`` / ``widen_high_log`` replace it when set.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    widen_log: float = 0.0
    widen_low_log: float | None = None
    widen_high_log: float | None = None
    safety_factor: float = 1.0
    coverage_before: float | None = None
    rows: int = 0

    def apply(self, quantiles: NDArray[np.float64]) -> NDArray[np.float64]:
        """Calibrated (rows, 3) log-scale quantiles: p10 and p90 moved, p50 kept."""
        low = self.widen_log if self.widen_low_log is None else self.widen_low_log
        high = self.widen_log if self.widen_high_log is None else self.widen_high_log
        out = quantiles.copy()
        out[:, 0] = np.minimum(out[:, 0] - low, out[:, 1])
        out[:, 2] = np.maximum(out[:, 2] + high, out[:, 1])
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
    tail = (1.0 - coverage) / 2
    level = min(1.0, math.ceil((n + 1) * (1.0 - tail)) / n)
    widen_low = float(np.quantile(low - actual_log, level))
    widen_high = float(np.quantile(actual_log - high, level))
    before = float(np.mean((actual_log >= low) & (actual_log <= high)))
    return Calibration(
        widen_log=(widen_low + widen_high) / 2,
        widen_low_log=widen_low,
        widen_high_log=widen_high,
        safety_factor=safety_factor(np.exp(quantiles_log[:, 1]), np.exp(actual_log)),
        coverage_before=before,
        rows=n,
    )
