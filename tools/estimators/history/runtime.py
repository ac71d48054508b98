"""The history estimator's run-time side: its settings, candidates and their scoring.

Split from :mod:`tools.estimators.history.estimator` (which holds the online estimator and its
retrain schedule, and explains the method in its docstring): the candidate run times of
each feature row, the two boosters that score them (expected accuracy and coverage), the
point and safe choices, the run-time distribution a scheduler reads, and the learned
graces past the request. Every name here is re-exported by ``tools.estimators.history.estimator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from tools.estimators.history.features import FEATURE_NAMES

if TYPE_CHECKING:
    from tools.estimators.history.memory import MemoryModel

__all__ = [
    "CANDIDATES",
    "SAFE_CANDIDATES",
    "SAFE_WEIGHTS",
    "HistoryConfig",
    "QuantileModel",
    "allowance_s",
    "candidate_logs",
    "distribution_quantile",
    "runtime_distribution",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_COL = {name: index for index, name in enumerate(FEATURE_NAMES)}
_REQ_TIME = _COL["log_requested_time"]
_USER_LAST = _COL["user_last_log_run"]
_LAST2 = _COL["user_last2_log_run"]
_USER_RATIO = _COL["user_mean5_log_ratio"]
_RECENT = _COL["center_recent_mean_log_run"]
_DEFAULT_LOG_RUN = math.log(3600.0)
# A run time or a size below 1 (second, KB) is noise the log cannot take.
_FLOOR = 1.0
# Training rows are float32: a log time read back from one is off by up to 2 ulps (about
# 2e-6 at log 3600), enough to call a job that ran exactly to its request uncovered.
_LOG_TOLERANCE = 2e-6

CANDIDATES: tuple[str, ...] = (
    "user_request_last_log_run",
    "user_request_mean3_log_run",
    "user_last_log_run",
    "user_last2_log_run",
    "user_median5_log_run",
    "user_app_last_log_run",
    "user_procs_last_log_run",
    "shape_last_log_run",
    "shape_mean3_log_run",
    "user_max10_log_run",
    "user_min10_log_run",
    "requested_time",
    "requested_time_times_user_ratio",
)
"""What ``p50`` picks from, with ``SAFE_CANDIDATES``: past run times (named by their
feature), the request, and
the request scaled by the user's recent run/request ratio; in log s, a missing one filled
with the user's last run (else the request), all capped like every prediction."""
_CANDIDATE_COLUMNS = [_COL[name] for name in CANDIDATES[:-2]]
_MAX10 = CANDIDATES.index("user_max10_log_run")
_REQUEST_LAST = CANDIDATES.index("user_request_last_log_run")
_LAST = CANDIDATES.index("user_last_log_run")
_REQUESTED = CANDIDATES.index("requested_time")

SAFE_CANDIDATES: tuple[str, ...] = (
    "user_max10_x1.5",
    "user_max10_x2",
    "user_max10_x3",
    "easy_x2",
    "easy_x4",
    "user_request_last_x1.5",
    "user_last_x2",
    "requested_time_x0.75",
    "requested_time_plus_grace",
    "requested_time_plus_safe_grace",
)
"""Larger values ``safe`` may also pick (after ``CANDIDATES``): multiples of the user's
longest recent run, of EASY++ (``easy``), of the last run with the same request and of
the last run, three quarters of the request, and the two caps."""
_SAFE_STEPS = (math.log(1.5), math.log(2.0), math.log(3.0))

SAFE_WEIGHTS: tuple[float, ...] = (
    0.0,
    *np.geomspace(0.1, 1000.0, 41).tolist(),
    1e9,
    math.inf,
)
"""The grid the safe request's weight is calibrated on: from 0 (the accuracy alone) to
1e9 (the highest predicted coverage) and infinity (the request plus the safe grace,
whatever the model says: a weight that always meets the target)."""
_WEIGHTS = np.asarray(SAFE_WEIGHTS)


class HistoryConfig(BaseModel):
    """How the estimator learns. The defaults serve every shared trace; none is per trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_oom_rate: float = Field(
        default=0.02,
        gt=0,
        lt=0.5,
        description="The memory request's aim: the share of jobs that use more than it",
    )
    memory_user_step: float = Field(
        default=0.0,
        ge=0,
        description="A user's memory offset (log) moves by this x (oom - target) per job; "
        "off: on LANL-CM5 0.05 held more memory at the same OOM rate (docs/notebooks/memory.md)",
    )
    target_under_rate: float = Field(
        default=0.04, gt=0, lt=0.5, description="What the safe value's calibration aims for"
    )
    first_train_jobs: int = Field(default=1000, ge=10)
    retrain_min_jobs: int = Field(default=2000, ge=1)
    retrain_fraction: float = Field(
        default=0.1, ge=0, description="Retrain after max(retrain_min_jobs, this x jobs seen)"
    )
    window_jobs: int = Field(default=20000, ge=10)
    calibration_jobs: int = Field(default=4000, ge=10)
    recalibrate_jobs: int = Field(
        default=1000,
        ge=0,
        description="Between retrains, re-choose the safe weight after this many jobs end",
    )
    estimate_trees: int = Field(default=20, ge=1, description="The candidate model's rounds")
    estimate_depth: int = Field(default=4, ge=1)
    estimate_learning_rate: float = Field(default=0.3, gt=0, le=1)
    quantile_trees: int = Field(default=60, ge=1, description="The memory model's rounds")
    max_depth: int = Field(default=6, ge=1, description="The memory model's depth")
    learning_rate: float = Field(default=0.15, gt=0, le=1, description="The memory model's")
    cpu_efficiency: bool = Field(
        default=True, description="Learn CPU efficiency where the history records CPU time"
    )
    cpu_trees: int = Field(default=40, ge=1, description="The CPU-efficiency model's rounds")
    cpu_depth: int = Field(default=5, ge=1, description="The CPU-efficiency model's depth")
    # One thread: on a shared machine, OpenMP threads that wait for a busy core stall a
    # retrain from 1 s to 20 s; one thread costs little and stays predictable.
    threads: int = Field(default=1, ge=1)
    memory: Literal["auto", "on", "off"] = "auto"
    seed: int = 0
    schedule_quantile: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="The scheduling estimate: the smallest candidate predicted to cover "
        "this share of runs (chosen for the schedule's bsld, leave-one-trace-out: "
        "docs/simulations.md)",
    )


@dataclass(frozen=True, slots=True)
class QuantileModel:
    """One trained snapshot: fixed until the next retrain replaces it (never mutated).

    ``accuracy`` predicts each candidate's expected accuracy, ``coverage`` P(r <= it);
    ``safe_weight`` is the calibrated price of coverage (see ``history.estimator``);
    ``memory`` the memory snapshot trained with it (``tools.estimators.history.memory``).
    """

    accuracy: xgb.Booster
    coverage: xgb.Booster
    memory: MemoryModel | None
    safe_weight: float
    grace_s: float
    safe_grace_s: float
    version: int
    trained_on_jobs: int


def _fill(values: FloatArray, fallback: FloatArray) -> FloatArray:
    return np.where(np.isnan(values), fallback, values)


def _cap_log(rows: FloatArray, grace_s: float) -> FloatArray:
    """log(request + grace): no prediction goes past it (+inf where there is no request)."""
    limit = np.log(np.exp(rows[:, _REQ_TIME]) + grace_s)
    return _fill(limit, np.full(len(rows), np.inf))


def _base_log(rows: FloatArray, cap_log: FloatArray) -> FloatArray:
    """EASY++ in log space: last-2 capped at the request, else the request, else the center."""
    base = np.minimum(_fill(rows[:, _LAST2], rows[:, _REQ_TIME]), cap_log)
    base = _fill(_fill(base, rows[:, _RECENT]), np.full(len(rows), _DEFAULT_LOG_RUN))
    return np.maximum(base, 0.0)


def candidate_logs(rows: FloatArray, cap_log: FloatArray) -> FloatArray:
    """The candidates (``CANDIDATES``, log s) for each row, filled and capped."""
    fallback = _fill(rows[:, _USER_LAST], rows[:, _REQ_TIME])
    fallback = _fill(_fill(fallback, rows[:, _RECENT]), np.full(len(rows), _DEFAULT_LOG_RUN))
    columns = [_fill(rows[:, column], fallback) for column in _CANDIDATE_COLUMNS]
    requested = _fill(rows[:, _REQ_TIME], fallback)
    columns.append(requested)
    columns.append(requested + np.nan_to_num(rows[:, _USER_RATIO]))
    return np.maximum(np.minimum(np.stack(columns, axis=1), cap_log[:, None]), 0.0)


@dataclass(frozen=True, slots=True)
class _Candidates:
    """Every candidate of a set of rows (log s) and the model's inputs for them."""

    values: FloatArray  # CANDIDATES, then SAFE_CANDIDATES
    inputs: NDArray[np.float32]
    cap_log: FloatArray
    safe_cap_log: FloatArray


def _candidates(rows: FloatArray, grace_s: float, safe_grace_s: float) -> _Candidates:
    cap_log = _cap_log(rows, grace_s)
    safe_cap_log = _cap_log(rows, max(grace_s, safe_grace_s))
    base = _base_log(rows, cap_log)
    estimates = candidate_logs(rows, cap_log)
    longest = estimates[:, _MAX10]
    # Where there is no request the caps are +inf: the request's place is the fallback's.
    requested = estimates[:, _REQUESTED]
    larger = np.stack(
        [
            *(longest + step for step in _SAFE_STEPS),
            base + math.log(2.0),
            base + math.log(4.0),
            estimates[:, _REQUEST_LAST] + math.log(1.5),
            estimates[:, _LAST] + math.log(2.0),
            requested + math.log(0.75),
            np.where(np.isfinite(cap_log), cap_log, requested),
            np.where(np.isfinite(safe_cap_log), safe_cap_log, requested),
        ],
        axis=1,
    )
    larger = np.maximum(np.minimum(larger, safe_cap_log[:, None]), 0.0)
    values = np.hstack([estimates, larger])
    # Each candidate relative to EASY++, so the trees see "how far from the usual guess".
    inputs = np.hstack([rows, values - base[:, None]]).astype(np.float32)
    return _Candidates(values, inputs, cap_log, safe_cap_log)


def _scores(model: QuantileModel, candidates: _Candidates) -> tuple[FloatArray, FloatArray]:
    """Each candidate's predicted accuracy and coverage."""
    accuracy = model.accuracy.inplace_predict(candidates.inputs)
    coverage = model.coverage.inplace_predict(candidates.inputs)
    return np.asarray(accuracy, dtype=np.float64), np.asarray(coverage, dtype=np.float64)


def _estimate_log(accuracy: FloatArray, candidates: _Candidates) -> FloatArray:
    """The candidate with the best predicted accuracy, row by row, within [0, the cap]."""
    values = candidates.values
    picked = values[np.arange(len(values)), accuracy.argmax(axis=1)]
    return np.asarray(np.maximum(np.minimum(picked, candidates.cap_log), 0.0), dtype=np.float64)


def _safe_log(
    accuracy: FloatArray,
    coverage: FloatArray,
    candidates: _Candidates,
    estimate_log: FloatArray,
    weight: float,
) -> FloatArray:
    """The candidate worth the most at this price of coverage, never below the estimate."""
    if math.isinf(weight):
        # Coverage alone: not the highest predicted coverage, which near 1 is the trees'
        # noise (a user whose recent finished jobs were all short looks safe at 30 s),
        # but the cap, which covers all but 0.5 % of the window's jobs by construction.
        largest = candidates.values.max(axis=1)
        safe = np.where(np.isfinite(candidates.safe_cap_log), candidates.safe_cap_log, largest)
    else:
        picked = (accuracy - weight * (1.0 - coverage)).argmax(axis=1)
        safe = candidates.values[np.arange(len(picked)), picked]
    return np.asarray(np.minimum(np.maximum(safe, estimate_log), candidates.safe_cap_log))


def distribution_quantile(values: FloatArray, coverage: FloatArray, alpha: float) -> FloatArray:
    """Row by row, the smallest value whose coverage reaches ``alpha`` (else the largest);
    ``values`` and ``coverage`` as :func:`runtime_distribution` returns them."""
    reaches = coverage >= alpha
    first = np.where(reaches.any(axis=1), reaches.argmax(axis=1), values.shape[1] - 1)
    picked: FloatArray = values[np.arange(len(first)), first]
    return picked


def runtime_distribution(
    model: QuantileModel | None, rows: NDArray[np.floating]
) -> tuple[FloatArray, FloatArray]:
    """Each row's run-time distribution as the candidate model sees it, for scheduling.

    (run times in s, ascending, one column per candidate; P(run <= each), non-decreasing):
    every candidate of ``CANDIDATES`` and ``SAFE_CANDIDATES`` with its predicted coverage,
    sorted by value, the coverage made monotone (a running maximum: a longer run time
    covers at least what a shorter one does). A scheduler picks its estimate as a quantile
    of it and, when a job outlives that, the next one from the conditional distribution.
    Before the first model: the EASY++ estimate at one half and the request at one.
    """
    values = np.asarray(rows, dtype=np.float64)
    if model is None:
        cap_log = _cap_log(values, 0.0)
        estimate_log = _base_log(values, cap_log)
        request_log = np.maximum(
            _fill(values[:, _REQ_TIME], estimate_log + math.log(4.0)), estimate_log
        )
        logs = np.stack([estimate_log, request_log], axis=1)
        coverage = np.tile(np.array([0.5, 1.0]), (len(values), 1))
    else:
        candidates = _candidates(values, model.grace_s, model.safe_grace_s)
        _, coverage = _scores(model, candidates)
        logs = candidates.values
    order = np.argsort(logs, axis=1, kind="stable")
    sorted_logs = np.take_along_axis(logs, order, axis=1)
    sorted_cover = np.maximum.accumulate(
        np.clip(np.take_along_axis(coverage, order, axis=1), 0.0, 1.0), axis=1
    )
    return np.exp(sorted_logs), sorted_cover


def _params(config: HistoryConfig, **objective: object) -> dict[str, object]:
    return {
        "tree_method": "hist",
        "max_depth": config.max_depth,
        "eta": config.learning_rate,
        "max_bin": 64,
        "min_child_weight": 5,
        "subsample": 0.8,
        "nthread": config.threads,
        "seed": config.seed,
        "verbosity": 0,
        **objective,
    }


def _weight(under: BoolArray, target_under_rate: float) -> float:
    """The smallest weight of the grid whose choices left at most the target uncovered."""
    if len(under) == 0:
        return SAFE_WEIGHTS[-1]
    meeting = np.flatnonzero(under.mean(axis=0) <= target_under_rate)
    return float(_WEIGHTS[meeting[0]]) if meeting.size else SAFE_WEIGHTS[-1]


def allowance_s(labels: FloatArray, beyond: float) -> float:
    """The allowance past the request that leaves at most ``beyond`` of jobs past it.

    ``labels`` as :meth:`HistoryEstimator.finished_table` returns them.
    """
    over = labels[:, 3] - labels[:, 2]
    over = over[~np.isnan(over)]
    if over.size == 0:
        return 0.0
    return max(0.0, float(np.quantile(over, 1.0 - beyond)))
