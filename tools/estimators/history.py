"""The online history estimator: a batch job's run time (and memory) from the center's past.

For any job, at its submit time, it gives two run times:

- ``p50`` (also ``estimate``): for backfilling, the value with the best expected Tsafrir
  accuracy (min(p, r) / max(p, r)). Named p50 after the issue's key; it is not the
  median: run times are bimodal (a job fails in a minute or runs to its limit), and the
  point that maximizes expected min/max accuracy sits on a mode, not between them;
- ``safe``: the walltime to request, chosen job by job so that about
  ``target_under_rate`` (4 %) of jobs run longer, never past the request plus grace.

What it learns from (online: nothing from the future). Features come from
:class:`~tools.estimators.features.FeatureState` at the job's submit time: the request,
the recent finished jobs of the user, of user+application, user+request, user+processors
and of every job of the same shape (request, processors), time of day and week, and the
load (jobs submitted and not yet finished). The row is kept until the job ends; only then
does it join the training set, with its run time as the label. A model trained at time t
has therefore seen only jobs that ended before t.

When it retrains. First after ``first_train_jobs`` finished jobs (1,000), then each time
``max(retrain_min_jobs, retrain_fraction x jobs seen)`` more have finished (2,000, growing
to 10 % of the history: about 30 retrains over HPC2N's 203,000 jobs), always on the latest
``window_jobs`` (20,000). A sliding window because workloads drift and it bounds a
retrain's cost; periodic rather than incremental because boosted trees do not update one
row at a time, and because a model that is fixed between retrains can predict a whole
batch at once, which is what makes a 200,000-job replay take a minute.

The models (XGBoost, ``hist``, one snapshot at a time) score candidates. Each job has
``len(CANDIDATES) + len(SAFE_CANDIDATES)`` candidate run times: past run times of the
user and of narrower keys (the last run, the mean of the last two, the last run with
the same request, the median of five, the same shape's last run...), the request, the
request times the user's recent ratio, and larger values for the safe request (the
user's longest recent run times 1.5 to 3, EASY++ times 2 and 4, the request plus grace).
Two multi-output models predict, for every candidate c, its expected accuracy
exp(-|log c - log r|) (squared error) and its coverage P(r <= c) (logistic).

- ``p50`` is the candidate with the highest expected accuracy.
  A regression of the run time (squared, quantile or robust loss, with or without a base
  margin) lands between the modes and scores worse on both (docs/history.md: 0.01 to
  0.12 lower on KTH and SDSC).
- ``safe`` spends an under-prediction budget where it buys the most accuracy: the
  candidate that maximizes ``accuracy - weight x (1 - coverage)``, never below ``p50``.
  Jobs whose history is tight get a tight request; jobs that may run to their limit get
  the limit. A uniform upper quantile plus a margin gives every job the same coverage,
  and pays for the unpredictable jobs with the predictable ones' accuracy.
  The weight (one number per snapshot, a Lagrange multiplier) is calibrated online, split
  conformal style: a snapshot's choices on the jobs that finished after it was trained
  (data it never saw), pooled over the last ``calibration_jobs``, give for each weight
  of a fixed grid (``SAFE_WEIGHTS``) the share of jobs under-predicted; the smallest
  weight that leaves at most ``target_under_rate`` is kept. This happens at each retrain
  and, between retrains, every ``recalibrate_jobs`` (1,000) finished jobs: a new snapshot
  with the same trees and a re-chosen weight. Late in a long trace retrains are 20,000
  jobs apart, and a weight fixed that long drifted: HPC2N's safe request under-predicted
  5.1 % of its jobs (7.7 % in its last tenth) with retrains alone, 4.5 % with
  recalibration. The first snapshot is calibrated on a held-out fifth of its window.

The cap. No prediction exceeds the user's request plus the grace the scheduler allows:
the job is killed there anyway, so asking for more cannot help it and hurts backfilling.
But the cap is not the bare request: in these traces jobs run past their requests
(SDSC-SP2 7 %, a median 33 s past, the kill's delay; LANL-CM5 a third of its jobs by a
median 990 s, since the CM5 did not enforce requests), and with a cap at the request
every such job is an under-prediction by construction (the request itself
under-predicts 7-9 % of SDSC and CTC jobs). The graces are learned from the window: for
``p50``, the smallest allowance past the request that leaves at most half the under
budget (2 %) of the jobs beyond it (about a minute on SDSC, 0 on KTH, hours on LANL); for
``safe``, one that leaves an eighth of it (0.5 %), so that the allowance itself uses
little of the budget. A caller wanting the strict cap takes ``min(safe, request)``; the
benchmark reports both.

Memory (KB per processor) is predicted by a quantile model of its own
(``objective="reg:quantileerror"``, ``quantile_alpha=[0.5, safe_quantile]`` on log used
memory, its upper quantile calibrated by a conformal margin) where the history has
used memory that is not the request echoed back (HPC2N's trace copies the request into the
used field: when at least half the finished jobs with both show used == requested, the
memory model stays off). It is not capped at the request: on LANL-CM5, the one trace that
records real use, jobs often used more than they asked for.

Before the first training the estimator falls back to EASY++ (the mean of the user's last
two run times capped at the request, else the request) and to the request as safe value.
The snapshot class keeps its first name, ``QuantileModel``, for the modules that import it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import Interval
from tools.estimators.features import FEATURE_NAMES, FeatureState, HistoryJob

__all__ = [
    "CANDIDATES",
    "SAFE_CANDIDATES",
    "SAFE_WEIGHTS",
    "HistoryConfig",
    "HistoryEstimator",
    "HistoryPrediction",
    "PredictionBatch",
    "QuantileModel",
    "allowance_s",
    "distribution_quantile",
    "fit_snapshot",
    "predict_rows",
    "runtime_distribution",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_COL = {name: index for index, name in enumerate(FEATURE_NAMES)}
_REQ_TIME = _COL["log_requested_time"]
_REQ_MEM = _COL["log_requested_mem"]
_USER_LAST = _COL["user_last_log_run"]
_LAST2 = _COL["user_last2_log_run"]
_USER_RATIO = _COL["user_mean5_log_ratio"]
_USER_LAST_MEM = _COL["user_last_log_mem"]
_RECENT = _COL["center_recent_mean_log_run"]
_DEFAULT_LOG_RUN = math.log(3600.0)
# A run time or a size below 1 (second, KB) is noise the log cannot take.
_FLOOR = 1.0
# Margins past e^2 (7x) say the model is lost, not that the margin should grow further.
_MARGIN_BOUNDS = (-1.0, 2.0)
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

    safe_quantile: float = Field(
        default=0.95, gt=0.5, lt=1, description="The memory model's upper quantile"
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


class HistoryPrediction(BaseModel):
    """One job's run time (and memory, where a memory model exists), at its submit time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtime_estimate_s: float = Field(
        ge=0, description="For backfilling: the candidate with the best expected accuracy"
    )
    runtime_p50_s: float = Field(
        ge=0, description="The same point (the issue's p50): best expected accuracy"
    )
    runtime_safe_s: float = Field(ge=0, description="Walltime to request")
    runtime_schedule_s: float | None = Field(
        default=None,
        ge=0,
        description="For a backfilling scheduler's reservations and shortest-first order: "
        "the schedule_quantile of the run-time distribution (a low one: for bsld an "
        "under-estimate costs less than an over-estimate; kills stay at the request)",
    )
    safe_coverage: float = Field(gt=0, lt=1, description="Intended P(run <= safe)")
    memory_p50_kb_per_proc: float | None = Field(default=None, ge=0)
    memory_safe_kb_per_proc: float | None = Field(default=None, ge=0)
    source: Literal["model", "fallback"]
    model_version: int = Field(ge=0, description="Retrains so far; 0 before the first")
    trained_on_jobs: int = Field(ge=0)

    def runtime_interval(self) -> Interval:
        """As the knowledge base's interval: the estimate, within [0, safe] at its coverage."""
        high = max(self.runtime_safe_s, self.runtime_estimate_s)
        # The safe value's weight is calibrated on jobs the snapshot was not trained on.
        return Interval(
            point=self.runtime_estimate_s,
            low=0.0,
            high=high,
            coverage=self.safe_coverage,
            coverage_basis="held_out",
        )


@dataclass(frozen=True, slots=True)
class PredictionBatch:
    """Predictions for many rows at once; memory arrays are NaN where none was made."""

    runtime_estimate_s: FloatArray
    runtime_p50_s: FloatArray
    runtime_safe_s: FloatArray
    memory_p50_kb_per_proc: FloatArray
    memory_safe_kb_per_proc: FloatArray


@dataclass(frozen=True, slots=True)
class QuantileModel:
    """One trained snapshot: fixed until the next retrain replaces it (never mutated).

    ``accuracy`` predicts each candidate's expected accuracy, ``coverage`` P(r <= it);
    ``safe_weight`` is the calibrated price of coverage (see the module docstring).
    """

    accuracy: xgb.Booster
    coverage: xgb.Booster
    memory: xgb.Booster | None
    safe_weight: float
    memory_margin_log: float
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


def predict_rows(model: QuantileModel | None, rows: NDArray[np.floating]) -> PredictionBatch:
    """Predictions for feature rows (from ``FeatureState.row``) with one model snapshot."""
    # float32 for the trees, as in training; float64 for the arithmetic.
    values = np.asarray(rows, dtype=np.float64)
    if model is None:
        cap_log = _cap_log(values, 0.0)
        estimate_log = _base_log(values, cap_log)
        # The request, else a wide guess.
        safe_log = np.maximum(
            _fill(values[:, _REQ_TIME], estimate_log + math.log(4.0)), estimate_log
        )
    else:
        candidates = _candidates(values, model.grace_s, model.safe_grace_s)
        accuracy, coverage = _scores(model, candidates)
        estimate_log = _estimate_log(accuracy, candidates)
        safe_log = _safe_log(accuracy, coverage, candidates, estimate_log, model.safe_weight)
    requested_mem = np.exp(values[:, _REQ_MEM])
    if model is not None and model.memory is not None:
        mem = np.asarray(model.memory.inplace_predict(values.astype(np.float32)), dtype=np.float64)
        mem_p50 = np.maximum(np.exp(mem[:, 0]), _FLOOR)
        mem_safe = np.maximum(np.exp(mem[:, 1] + model.memory_margin_log), mem_p50)
    else:
        # Without a memory model: the user's last used memory, else the request.
        mem_p50 = _fill(np.exp(values[:, _USER_LAST_MEM]), requested_mem)
        mem_safe = np.fmax(mem_p50, requested_mem)
    estimate_s = np.exp(estimate_log)
    return PredictionBatch(
        runtime_estimate_s=estimate_s,
        runtime_p50_s=estimate_s,
        # Whole seconds (a walltime): exp(log(request)) can land a hair below the request,
        # which would count a job that ran exactly to it as under-predicted.
        runtime_safe_s=np.maximum(np.round(np.exp(safe_log)), estimate_s),
        memory_p50_kb_per_proc=mem_p50,
        memory_safe_kb_per_proc=mem_safe,
    )


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


class _Buffer:
    """Finished jobs' rows and labels, growing by doubling (appends are O(1))."""

    def __init__(self, width: int) -> None:
        self.size = 0
        self.rows = np.empty((1024, width), dtype=np.float32)
        # columns: log run, log used memory, requested time, run
        self.labels = np.empty((1024, 4), dtype=np.float64)

    def append(self, row: list[float], labels: tuple[float, float, float, float]) -> None:
        if self.size == len(self.rows):
            self.rows = np.concatenate([self.rows, np.empty_like(self.rows)])
            self.labels = np.concatenate([self.labels, np.empty_like(self.labels)])
        self.rows[self.size] = row
        self.labels[self.size] = labels
        self.size += 1


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


def _quantile_params(config: HistoryConfig) -> dict[str, object]:
    return _params(
        config,
        objective="reg:quantileerror",
        quantile_alpha=np.array([0.5, config.safe_quantile]),
    )


def _margin(needed_log: FloatArray, target_under_rate: float) -> float:
    """The log margin that leaves ``target_under_rate`` of ``needed_log`` uncovered."""
    if needed_log.size == 0:
        return 0.0
    value = float(np.quantile(needed_log, 1.0 - target_under_rate, method="higher"))
    return min(max(value, _MARGIN_BOUNDS[0]), _MARGIN_BOUNDS[1])


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


def fit_snapshot(
    rows: NDArray[np.float32],
    labels: FloatArray,
    config: HistoryConfig,
    *,
    grace_s: float,
    safe_grace_s: float,
    version: int,
    safe_weight: float,
    with_memory: bool = False,
    memory_margin_log: float = 0.0,
) -> QuantileModel:
    """Train one snapshot on finished jobs' rows and labels (``finished_table``'s layout).

    The estimator calls it on its window; offline studies call it on any rows they like.
    """
    candidates = _candidates(rows.astype(np.float64), grace_s, safe_grace_s)
    log_run = labels[:, :1]
    # Each candidate's accuracy (min/max ratio = exp(-|log difference|)) and whether
    # it covered the run. Coverage is a probability: logistic, because a squared-error
    # fit overshoots 1 out of sample (1.14 seen), and an overshoot buys a short
    # candidate a bonus at a high weight.
    accuracy = np.exp(-np.abs(candidates.values - log_run))
    covered = (log_run <= candidates.values + _LOG_TOLERANCE).astype(np.float64)
    data = xgb.DMatrix(candidates.inputs)
    fitted = []
    for objective, label in (
        ("reg:squarederror", accuracy),
        ("binary:logistic", covered),
    ):
        data.set_label(label)
        params = _params(
            config,
            objective=objective,
            max_depth=config.estimate_depth,
            eta=config.estimate_learning_rate,
        )
        fitted.append(xgb.train(params, data, num_boost_round=config.estimate_trees))
    memory = None
    if with_memory:
        known = ~np.isnan(labels[:, 1])
        memory = xgb.train(
            _quantile_params(config),
            xgb.DMatrix(rows[known], label=labels[known, 1]),
            num_boost_round=config.quantile_trees,
        )
    return QuantileModel(
        accuracy=fitted[0],
        coverage=fitted[1],
        memory=memory,
        safe_weight=safe_weight,
        memory_margin_log=memory_margin_log,
        grace_s=grace_s,
        safe_grace_s=safe_grace_s,
        version=version,
        trained_on_jobs=len(rows),
    )


class HistoryEstimator:
    """Predicts run time and memory quantiles for any job from the center's own history.

    The calls, in time order: ``submit(job)`` when a job enters the queue (returns its
    prediction and counts it in the load); ``observe(job)`` when a job ends, with its
    ``run_s`` (and ``used_memory_kb_per_proc`` if known) set. ``predict(job)`` answers a
    what-if without changing anything. An ``observe`` for a job never submitted here
    (history loaded from elsewhere) uses the features as they are at that moment.
    """

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        self.state = FeatureState()
        self.model: QuantileModel | None = None
        self._buffer = _Buffer(len(FEATURE_NAMES))
        self._pending: dict[str, list[float]] = {}
        self._since_train = 0
        self._seen = 0
        self._trained_upto = 0  # buffer rows the current model was trained on
        self._calibrated_upto = 0  # buffer rows whose outcomes are in the calibration pool
        # Out-of-sample outcomes, newest last: under-predicted at each of SAFE_WEIGHTS.
        self._safe_under = np.zeros((0, len(SAFE_WEIGHTS)), dtype=np.bool_)
        self._memory_needed: deque[float] = deque(maxlen=self.config.calibration_jobs)
        self._memory_known = 0
        self._memory_echoed = 0

    # --- the calls agents make -------------------------------------------------------

    def predict(self, job: HistoryJob) -> HistoryPrediction:
        """Quantiles for ``job`` from the history so far; changes no state."""
        return self._prediction(self.state.row(job))

    def submit(self, job: HistoryJob) -> HistoryPrediction:
        """``job`` entered the queue: predict it, and count it in the load until it ends."""
        return self._prediction(self.submit_row(job))

    def observe(self, job: HistoryJob) -> None:
        """``job`` ended: learn from it (needs ``run_s``), retraining when one is due."""
        row = self._pending.pop(job.job_id, None)
        if row is None:
            row = self.state.row(job)
        self.state.finished(job)
        if job.run_s is None or job.run_s <= 0:
            return  # nothing to learn: a job that never ran says nothing about run time
        used = job.used_memory_kb_per_proc
        asked = job.requested_memory_kb_per_proc
        if used is not None and used > 0:
            self._memory_known += 1
            if asked is not None and asked == used:
                self._memory_echoed += 1
        requested = job.requested_time_s
        self._buffer.append(
            row,
            (
                math.log(max(job.run_s, _FLOOR)),
                math.log(used) if used is not None and used > 0 else math.nan,
                requested if requested is not None and requested > 0 else math.nan,
                float(job.run_s),
            ),
        )
        self._since_train += 1
        self._seen += 1
        if self.model is None:
            due = self._buffer.size >= self.config.first_train_jobs
        else:
            every = max(self.config.retrain_min_jobs, self.config.retrain_fraction * self._seen)
            due = self._since_train >= every
        if due:
            self.retrain()
        elif (
            self.model is not None
            and self.config.recalibrate_jobs
            and self._buffer.size - self._calibrated_upto >= self.config.recalibrate_jobs
        ):
            self.recalibrate()

    def learn_history(self, jobs: Iterable[HistoryJob]) -> int:
        """Learn from past finished jobs, replayed as they happened; returns how many.

        Each job is submitted at its submit time and observed at its end time, in one
        time-ordered stream, so every row sees only what was known when it was submitted
        (observing past jobs one by one would let early rows see later jobs). Jobs
        without a run time or end time are skipped.
        """
        ending: list[tuple[float, int, HistoryJob]] = []
        learned = 0
        usable = (job for job in jobs if job.run_s is not None and job.end_time_s is not None)
        for index, job in enumerate(sorted(usable, key=lambda job: job.submit_time_s)):
            while ending and ending[0][0] < job.submit_time_s:
                self.observe(heapq.heappop(ending)[2])
                learned += 1
            self.submit_row(job)
            heapq.heappush(ending, (float(job.end_time_s or 0.0), index, job))
        while ending:
            self.observe(heapq.heappop(ending)[2])
            learned += 1
        return learned

    # --- what replays use --------------------------------------------------------------

    def submit_row(self, job: HistoryJob) -> list[float]:
        """Register ``job`` as submitted and return its feature row, without predicting.

        Replays use this to predict many rows at once with ``predict_rows(model, ...)``;
        the model to use is ``self.model`` as it was when the row was made.
        """
        row = self.state.row(job)
        self.state.submitted(job)
        self._pending[job.job_id] = row
        return row

    @property
    def memory_enabled(self) -> bool:
        if self.config.memory != "auto":
            return self.config.memory == "on"
        # Enough jobs with used memory, and not mostly the request copied back.
        return self._memory_known >= self.config.first_train_jobs and (
            self._memory_echoed * 2 < self._memory_known
        )

    def retrain(self) -> QuantileModel:
        """Train a new snapshot on the latest window of finished jobs and calibrate it."""
        config = self.config
        end = self._buffer.size
        start = max(0, end - config.window_jobs)
        window = self._buffer.labels[start:end]
        grace_s = allowance_s(window, config.target_under_rate / 2)
        safe_grace_s = allowance_s(window, config.target_under_rate / 8)
        previous = self.model
        if previous is not None:
            self._collect_calibration(previous, self._calibrated_upto)
        else:
            # No model has met unseen jobs yet: fit one without the latest fifth and
            # calibrate on that fifth, so the first model is calibrated too.
            split = start + (end - start) * 4 // 5
            held_out = self._fit(start, split, grace_s, safe_grace_s, version=0)
            self._collect_calibration(held_out, split)
        self.model = self._fit(
            start,
            end,
            grace_s,
            safe_grace_s,
            version=(previous.version + 1) if previous is not None else 1,
        )
        self._since_train = 0
        self._trained_upto = end
        self._calibrated_upto = end
        return self.model

    def recalibrate(self) -> QuantileModel:
        """The same trees with the safe weight re-chosen on the latest unseen outcomes."""
        if self.model is None:
            raise RuntimeError("recalibrate: no model has been trained yet")
        self._collect_calibration(self.model, self._calibrated_upto)
        self._calibrated_upto = self._buffer.size
        self.model = dataclasses.replace(
            self.model, safe_weight=_weight(self._safe_under, self.config.target_under_rate)
        )
        return self.model

    def _fit(
        self, start: int, end: int, grace_s: float, safe_grace_s: float, version: int
    ) -> QuantileModel:
        labels = self._buffer.labels[start:end]
        # Half the usual minimum: the first model's held-out fit sees 4/5 of the rows.
        with_memory = self.memory_enabled and (
            int((~np.isnan(labels[:, 1])).sum()) >= self.config.first_train_jobs // 2
        )
        return fit_snapshot(
            self._buffer.rows[start:end],
            labels,
            self.config,
            grace_s=grace_s,
            safe_grace_s=safe_grace_s,
            version=version,
            safe_weight=_weight(self._safe_under, self.config.target_under_rate),
            with_memory=with_memory,
            memory_margin_log=_margin(
                np.fromiter(self._memory_needed, dtype=np.float64), self.config.target_under_rate
            ),
        )

    def finished_table(self) -> tuple[NDArray[np.float32], FloatArray]:
        """Copies of every finished job's submit-time row and labels, in end order.

        Label columns: log run time, log used memory (NaN if unknown), requested time (NaN
        if none), run time. What :func:`fit_snapshot` trains on; for offline studies.
        """
        size = self._buffer.size
        return self._buffer.rows[:size].copy(), self._buffer.labels[:size].copy()

    # --- inside --------------------------------------------------------------------------

    def _collect_calibration(self, model: QuantileModel, since: int) -> None:
        """How ``model`` did on the jobs that ended after its training (unseen by it)."""
        rows32 = self._buffer.rows[since : self._buffer.size]
        labels = self._buffer.labels[since : self._buffer.size]
        if len(rows32) == 0:
            return
        candidates = _candidates(rows32.astype(np.float64), model.grace_s, model.safe_grace_s)
        accuracy, coverage = _scores(model, candidates)
        estimate_log = _estimate_log(accuracy, candidates)
        under = np.stack(
            [
                _safe_log(accuracy, coverage, candidates, estimate_log, weight) + _LOG_TOLERANCE
                < labels[:, 0]
                for weight in SAFE_WEIGHTS
            ],
            axis=1,
        )
        pooled = np.vstack([self._safe_under, under])
        self._safe_under = pooled[-self.config.calibration_jobs :]
        if model.memory is not None:
            known = ~np.isnan(labels[:, 1])
            if known.any():
                mem = np.asarray(model.memory.inplace_predict(rows32[known]), dtype=np.float64)
                self._memory_needed.extend((labels[known, 1] - mem[:, 1]).tolist())

    def _prediction(self, row: list[float]) -> HistoryPrediction:
        model = self.model
        batch = predict_rows(model, np.asarray([row], dtype=np.float64))
        mem_p50 = float(batch.memory_p50_kb_per_proc[0])
        mem_safe = float(batch.memory_safe_kb_per_proc[0])
        values, coverage = runtime_distribution(model, np.asarray([row], dtype=np.float64))
        schedule = distribution_quantile(values, coverage, self.config.schedule_quantile)
        return HistoryPrediction(
            runtime_estimate_s=float(batch.runtime_estimate_s[0]),
            runtime_p50_s=float(batch.runtime_p50_s[0]),
            runtime_safe_s=float(batch.runtime_safe_s[0]),
            runtime_schedule_s=float(schedule[0]),
            safe_coverage=1.0 - self.config.target_under_rate,
            memory_p50_kb_per_proc=None if math.isnan(mem_p50) else mem_p50,
            memory_safe_kb_per_proc=None if math.isnan(mem_safe) else mem_safe,
            source="fallback" if model is None else "model",
            model_version=0 if model is None else model.version,
            trained_on_jobs=0 if model is None else model.trained_on_jobs,
        )
