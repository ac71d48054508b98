"""HARP's model selection: fewest under-predictions, then lowest over-prediction error.

An under-prediction is a validation row whose estimate falls short of the truth by more
than ``tolerance``; the over-prediction error is the mean relative excess over all rows.
Candidates are ranked by (under-predictions, over-prediction error); the first wins.
Under-prediction counts within ``tie_rows`` of the fewest (default 2% of the rows, at
least one) count as a tie: on a validation set of a few hundred rows a difference of a
handful is noise, and HARP's second criterion should decide then.

Which estimate is judged is the caller's choice. The bundle judges the calibrated p90,
the figure a walltime or memory request is made from: a p50 under-predicts half the
time by design, so counting its under-predictions ranks models by noise, while an
under-predicted p90 is a job killed at its limit. Calibration brings every model's p90
near 10% under-predictions, so the over-prediction error - how much a request wastes -
usually decides, which favours the most accurate model.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from tools.estimators.dnn.metrics import mape

__all__ = ["Ranked", "harp_select"]

DEFAULT_TOLERANCE = 0.0


class Ranked(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    under_predictions: int
    over_error_pct: float
    mape_pct: float


def harp_select(
    candidates: Mapping[str, NDArray[np.float64]],
    actual: NDArray[np.float64],
    tolerance: float = DEFAULT_TOLERANCE,
    tie_rows: int | None = None,
) -> list[Ranked]:
    """Candidates (name -> validation point estimates), best first by HARP's rule."""
    ranked: list[Ranked] = []
    for name, predicted in candidates.items():
        under = int(np.sum(predicted < actual * (1 - tolerance)))
        over = float(np.mean(np.where(predicted > actual, (predicted - actual) / actual, 0.0)))
        ranked.append(
            Ranked(
                name=name,
                under_predictions=under,
                over_error_pct=over * 100,
                mape_pct=mape(predicted, actual),
            )
        )
    if not ranked:
        return ranked
    margin = tie_rows if tie_rows is not None else max(1, int(0.02 * actual.size))
    fewest = min(r.under_predictions for r in ranked)

    def key(r: Ranked) -> tuple[int, int, float, float]:
        tied = r.under_predictions <= fewest + margin
        return (0 if tied else 1, 0 if tied else r.under_predictions, r.over_error_pct, r.mape_pct)

    ranked.sort(key=key)
    return ranked
