"""Replaying a trace online: the snapshot at each instant, predicted and scored.

``queue bench`` and ``benchmarks/waits.py`` both go through here: the snapshot at t is
rebuilt from the recorded submit/start/end times, and the predictor that answers it is
the one ``queue predict`` uses, with the trace as its history (it looks only at what
was known at t). Scores compare each pending job's predicted remaining wait with the one
the center recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from tools.waits.jobs import JobTable
from tools.waits.predictor import WaitPredictor, recent_wait_starts, request_starts
from tools.waits.rule import rule_starts
from tools.waits.snapshot import SnapshotPredictions

__all__ = ["FLOOR_S", "InstantWaits", "WaitScore", "bench_snapshots", "replay_waits", "score"]

FloatArray = NDArray[np.float64]
FLOOR_S = 600.0  # below ten minutes every wait counts as ten minutes


def bench_snapshots(
    table: JobTable, instants: Sequence[float], predictor: WaitPredictor
) -> list[SnapshotPredictions]:
    """``queue bench``: each instant's snapshot and the predicted starts."""
    out = []
    for t in sorted(instants):
        found = predictor.predict(table.snapshot_at(t))
        out.append(SnapshotPredictions(taken_at=t, predictions=found.predictions))
    return out


@dataclass(frozen=True)
class InstantWaits:
    """At one instant: each pending job's recorded remaining wait and what each answered."""

    taken_at: float
    actual_s: FloatArray
    p10_s: FloatArray
    p50_s: FloatArray
    p90_s: FloatArray
    simulation_s: FloatArray  # our simulation alone (learned run times), no learned model
    request_s: FloatArray  # baseline: conservative backfilling on requested times
    recent_s: FloatArray  # baseline: median wait of the last day's starts
    rule_s: FloatArray  # the planner's fixed rule (0.4 x limit), tools.waits.rule
    predict_s: float  # seconds one predict took (features + trees)


def replay_waits(
    table: JobTable, instants: Sequence[float], predictor: WaitPredictor
) -> list[InstantWaits]:
    """Predictions and baselines at each instant (the model trains as the replay goes)."""
    import time

    out = []
    for t in sorted(instants):
        snapshot = table.snapshot_at(t)
        if not snapshot.pending:
            continue
        predictor.model_for(t)  # train first: the timing below is one predict
        began = time.perf_counter()
        waits, features, _ = predictor.quantiles(snapshot)
        took = time.perf_counter() - began
        actual = table.start_s[table.pending_index(t)] - t
        out.append(
            InstantWaits(
                taken_at=t,
                actual_s=actual,
                p10_s=waits[:, 0],
                p50_s=waits[:, 1],
                p90_s=waits[:, 2],
                simulation_s=features.sim_wait_s,
                request_s=request_starts(snapshot),
                recent_s=recent_wait_starts(snapshot, table.before(t)),
                rule_s=rule_starts(snapshot),
                predict_s=took,
            )
        )
    return out


class WaitScore(BaseModel):
    """One predictor over many instants: the issue's three figures."""

    model_config = ConfigDict(extra="forbid")

    jobs: int
    within_2x: float
    median_abs_error_h: float
    coverage: float | None = None


def rule_log_error(instants: Sequence[InstantWaits]) -> tuple[float, float]:
    """p10 and p90 of log(actual + 60) - log(rule + 60): the planner's rule's error band."""
    actual = np.concatenate([i.actual_s for i in instants])
    rule = np.concatenate([i.rule_s for i in instants])
    error = np.log(actual + 60.0) - np.log(rule + 60.0)
    return float(np.quantile(error, 0.1)), float(np.quantile(error, 0.9))


def within_2x(predicted: FloatArray, actual: FloatArray) -> NDArray[np.bool_]:
    p = np.maximum(predicted, FLOOR_S)
    a = np.maximum(actual, FLOOR_S)
    return np.maximum(p / a, a / p) <= 2.0


def score(instants: Sequence[InstantWaits], which: str) -> WaitScore:
    """``which``: p50 (with coverage), simulation, request, recent or rule."""
    actual = np.concatenate([i.actual_s for i in instants]) if instants else np.zeros(0)
    if not len(actual):
        return WaitScore(jobs=0, within_2x=float("nan"), median_abs_error_h=float("nan"))
    column = f"{which}_s"
    predicted = np.concatenate([getattr(i, column) for i in instants])
    coverage = None
    if which == "p50":
        low = np.maximum(np.concatenate([i.p10_s for i in instants]), FLOOR_S)
        high = np.maximum(np.concatenate([i.p90_s for i in instants]), FLOOR_S)
        floored = np.maximum(actual, FLOOR_S)
        coverage = float(np.mean((low <= floored) & (floored <= high)))
    return WaitScore(
        jobs=len(actual),
        within_2x=float(np.mean(within_2x(predicted, actual))),
        median_abs_error_h=float(np.median(np.abs(predicted - actual)) / 3600.0),
        coverage=coverage,
    )
