"""The per-operator CPU model's operator booster: its target, and the "hybrid" pair.

"seconds": log seconds of one operator (trees cannot go past the largest operator they
saw: a 10k-word output projection 100x the zoo's largest matrix product came out at
that product's time). "work": log(seconds / ``work_s``), ``work_s`` a fixed roofline of
the operator's FLOPs and bytes; trees then learn an efficiency, which past the data
stays the boundary's, so time grows with the work (batch, vocabulary, sequence).
"hybrid": both; an operator within its category's timed sizes is priced by the "seconds"
booster (the more accurate inside the data), any other by the "work" one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray

from tools.profiling.opgraph import CATEGORIES

__all__ = [
    "OP_TARGETS",
    "WORK_BOOSTER_FILE",
    "Booster",
    "HybridBooster",
    "category_bounds",
    "op_seconds",
    "within_bounds",
    "work_s",
]

LOG_SCALE = 20.0  # as dataset.graph_data scales log1p of FLOPs and bytes
FLOPS_COLUMN = len(CATEGORIES) + 1  # log_flops, then log input and output bytes
_LOG_SCALE, _FLOPS_COLUMN = LOG_SCALE, FLOPS_COLUMN


def with_threads(x: NDArray[np.float64], threads: int) -> NDArray[np.float64]:
    return np.hstack([x, np.full((x.shape[0], 1), float(threads))])


# The booster's target. "seconds": log seconds of one operator (trees cannot go past the
# largest operator they saw: a 10k-word output projection 100x the zoo's largest matrix
# product came out at its time). "work": log(seconds / work_s), work_s a fixed roofline
# of the operator's FLOPs and bytes (``WORK_FLOPS_PER_S``, ``WORK_BYTES_PER_S``, plus
# ``WORK_FLOOR_S``); trees then learn an efficiency, which past the data stays the
# boundary's, so time grows with the work (batch, vocabulary, sequence) as it does.
# "hybrid": both boosters; an operator within its category's timed sizes (``Domain``) is
# priced by the "seconds" one, any other by the "work" one.
OP_TARGETS = ("seconds", "work", "hybrid")
WORK_FLOPS_PER_S = 1e10
WORK_BYTES_PER_S = 1e10
WORK_FLOOR_S = 2e-6
_DOMAIN_SLACK = math.log(2.0) / _LOG_SCALE
WORK_BOOSTER_FILE = (
    "opcost_work.ubj"  # the "hybrid" target's second booster  # up to twice the largest timed size
)


def work_s(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """The reference seconds of operators given by their feature rows (``NODE_FEATURES``
    first): FLOPs at ``WORK_FLOPS_PER_S`` plus bytes in and out at ``WORK_BYTES_PER_S``."""
    flops = np.expm1(x[:, _FLOPS_COLUMN] * _LOG_SCALE)
    moved = np.expm1(x[:, _FLOPS_COLUMN + 1] * _LOG_SCALE) + np.expm1(
        x[:, _FLOPS_COLUMN + 2] * _LOG_SCALE
    )
    return np.asarray(
        flops / WORK_FLOPS_PER_S + moved / WORK_BYTES_PER_S + WORK_FLOOR_S, dtype=np.float64
    )


def category_bounds(x: NDArray[np.float64]) -> dict[str, list[float]]:
    """Per category, the largest scaled log FLOPs, bytes in and bytes out of rows ``x``."""
    out: dict[str, list[float]] = {}
    for i, name in enumerate(CATEGORIES):
        rows = x[x[:, i] > 0]
        if rows.shape[0]:
            top = rows[:, _FLOPS_COLUMN : _FLOPS_COLUMN + 3].max(axis=0)
            out[name] = [round(float(v), 6) for v in top]
    return out


def within_bounds(
    x: NDArray[np.float64], bounds: Mapping[str, Sequence[float]]
) -> NDArray[np.bool_]:
    """Which rows lie within their category's timed sizes (twice the largest, at most)."""
    inside = np.zeros(x.shape[0], dtype=bool)
    for i, name in enumerate(CATEGORIES):
        top = bounds.get(name)
        rows = x[:, i] > 0
        if top is None or not rows.any():
            continue
        sizes = x[rows, _FLOPS_COLUMN : _FLOPS_COLUMN + 3]
        inside[rows] = np.all(sizes <= np.asarray(top) + _DOMAIN_SLACK, axis=1)
    return inside


@dataclass(frozen=True, slots=True)
class HybridBooster:
    """The "hybrid" target's pair: seconds within the timed sizes, work past them."""

    seconds: xgb.Booster
    work: xgb.Booster
    bounds: dict[str, list[float]]


Booster = xgb.Booster | HybridBooster


def op_seconds(
    booster: Booster, x: NDArray[np.float64], threads: int, target: str = "seconds"
) -> NDArray[np.float64]:
    """Predicted seconds of one call of each operator row (the booster fitted on ``target``)."""
    if isinstance(booster, HybridBooster):
        inside = within_bounds(x, booster.bounds)
        return np.where(
            inside,
            op_seconds(booster.seconds, x, threads, "seconds"),
            op_seconds(booster.work, x, threads, "work"),
        )
    pred = booster.inplace_predict(with_threads(x, threads).astype(np.float32))
    seconds = np.exp(np.asarray(pred, dtype=np.float64))
    return seconds * work_s(x) if target == "work" else seconds
