"""The online history estimator: a batch job's run time (and memory) from the center's past.

For any job, at its submit time, it gives two run times:

- ``p50`` (also ``estimate``): for backfilling, the value with the best expected Tsafrir
  accuracy (min(p, r) / max(p, r)). Named p50 after the issue's key; it is not the
  median: run times are bimodal (a job fails in a minute or runs to its limit), and the
  point that maximizes expected min/max accuracy sits on a mode, not between them;
- ``safe``: the walltime to request, chosen job by job so that about
  ``target_under_rate`` (4 %) of jobs run longer, never past the request plus grace.

What it learns from (online: nothing from the future). Features come from
:class:`~tools.estimators.history.features.FeatureState` at the job's submit time: the request,
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

CPU efficiency (the share of its cores a job keeps busy) has one too,
:class:`~tools.estimators.history.cpu.CpuLearner`, on its own count of jobs that record it.

Memory (KB per processor) has a learner of its own, :class:`~tools.estimators.
history.memory.MemoryLearner` (quantiles of the use, and a request calibrated for
``target_oom_rate`` of OOMs: that module says how), retrained and recalibrated on this
estimator's schedule, where the history has used memory that is not the request echoed
back (HPC2N's trace copies the request into the used field: when at least half the
finished jobs with both show used == requested, the memory model stays off). It is not
capped at the request: on LANL-CM5, the one trace that records real use, jobs often used
more than they asked for.

The module is three: this one (the online estimator, its predictions and its schedule),
:mod:`~tools.estimators.history.runtime` (settings, run-time candidates and their
scoring) and :mod:`~tools.estimators.history.memory` (memory); the names of the first
two are importable from here.

Before the first training the estimator falls back to EASY++ (the mean of the user's last
two run times capped at the request, else the request) and to the request as safe value.
The snapshot class keeps its first name, ``QuantileModel``, for the modules that import it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import Interval
from tools.estimators.history.cpu import CpuLearner, predict_cpu
from tools.estimators.history.features import FEATURE_NAMES, FeatureState, HistoryJob
from tools.estimators.history.memory import MemoryLearner, MemoryModel, predict_memory
from tools.estimators.history.runtime import (
    _COL,
    _FLOOR,
    _LOG_TOLERANCE,
    _REQ_TIME,
    CANDIDATES,
    SAFE_CANDIDATES,
    SAFE_WEIGHTS,
    HistoryConfig,
    QuantileModel,
    _base_log,
    _candidates,
    _cap_log,
    _estimate_log,
    _fill,
    _params,
    _safe_log,
    _scores,
    _weight,
    allowance_s,
    candidate_logs,
    distribution_quantile,
    runtime_distribution,
)

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
    "candidate_logs",
    "distribution_quantile",
    "fit_snapshot",
    "predict_rows",
    "runtime_distribution",
]

FloatArray = NDArray[np.float64]
_REQ_MEM = _COL["log_requested_mem"]
_USER_LAST_MEM = _COL["user_last_log_mem"]


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
    memory_safe_kb_per_proc: float | None = Field(
        default=None,
        ge=0,
        description="Memory to request: calibrated for target_oom_rate where the memory "
        "model answers; else the user's last use or the request",
    )
    memory_source: Literal["model", "fallback"] | None = Field(
        default=None, description="Whether the memory figures came from the memory model"
    )
    memory_distribution_kb_per_proc: tuple[tuple[float, float], ...] | None = Field(
        default=None,
        description="The memory model's distribution of the use: (P(use <= KB), KB), "
        "ascending; what the Re-scheduler conditions on after an OOM",
    )
    cpu_efficiency_p50: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Median share of its cores the job keeps busy (CPU time / (run x cores))",
    )
    cpu_efficiency_low: float | None = Field(default=None, ge=0, le=1, description="0.1 quantile")
    cpu_efficiency_high: float | None = Field(default=None, ge=0, le=1, description="0.9 quantile")
    cpu_source: Literal["model", "fallback"] | None = Field(
        default=None, description="Whether the efficiency came from the CPU model"
    )
    cpu_user_shape_jobs: int = Field(
        default=0, ge=0, description="The user's recent jobs of this processor count with one"
    )
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


def predict_rows(
    model: QuantileModel | None,
    rows: NDArray[np.floating],
    memory_rows: NDArray[np.floating] | None = None,
    memory_offsets: NDArray[np.floating] | None = None,
) -> PredictionBatch:
    """Predictions for feature rows (from ``FeatureState.row``) with one model snapshot.

    Memory comes from the snapshot's memory model when ``memory_rows`` (the rows
    :meth:`MemoryLearner.row` made, with the users' offsets then) are given; else the
    user's last use, else the request.
    """
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
    if model is not None and model.memory is not None and memory_rows is not None:
        memory = predict_memory(model.memory, memory_rows, memory_offsets)
        mem_p50 = np.maximum(memory.p50_kb, _FLOOR)
        mem_safe = np.maximum(memory.request_kb, _FLOOR)
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


def fit_snapshot(
    rows: NDArray[np.float32],
    labels: FloatArray,
    config: HistoryConfig,
    *,
    grace_s: float,
    safe_grace_s: float,
    version: int,
    safe_weight: float,
    memory: MemoryModel | None = None,
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
    return QuantileModel(
        accuracy=fitted[0],
        coverage=fitted[1],
        memory=memory,
        safe_weight=safe_weight,
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
        self.memory = MemoryLearner(self.config, schedule=False)
        self.cpu = CpuLearner(self.config)  # retrains on its own count of jobs with one

    # --- the calls agents make -------------------------------------------------------

    def predict(self, job: HistoryJob) -> HistoryPrediction:
        """Quantiles for ``job`` from the history so far; changes no state."""
        return self._prediction(self.state.row(job), job)

    def submit(self, job: HistoryJob) -> HistoryPrediction:
        """``job`` entered the queue: predict it, and count it in the load until it ends."""
        return self._prediction(self.submit_row(job), job)

    def observe(self, job: HistoryJob) -> None:
        """``job`` ended: learn from it (needs ``run_s``), retraining when one is due."""
        row = self._pending.pop(job.job_id, None)
        if row is None:
            row = self.state.row(job)
        self.memory.observe(row, job)
        if self.config.cpu_efficiency:
            self.cpu.observe(row, job)
        self.state.finished(job)
        if job.run_s is None or job.run_s <= 0:
            return  # nothing to learn: a job that never ran says nothing about run time
        used = job.used_memory_kb_per_proc
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
        self.memory.submitted(row, job)
        if self.config.cpu_efficiency:
            self.cpu.submitted(row, job)
        return row

    @property
    def memory_enabled(self) -> bool:
        if self.config.memory != "auto":
            return self.config.memory == "on"
        # Enough jobs with used memory, and not mostly the request copied back.
        memory = self.memory
        return memory.known >= self.config.first_train_jobs and not memory.echoes_request

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
        if self.memory_enabled:
            self.memory.retrain()
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
            self.model,
            safe_weight=_weight(self._safe_under, self.config.target_under_rate),
            memory=self.memory.recalibrate() if self.model.memory is not None else None,
        )
        return self.model

    def _fit(
        self, start: int, end: int, grace_s: float, safe_grace_s: float, version: int
    ) -> QuantileModel:
        return fit_snapshot(
            self._buffer.rows[start:end],
            self._buffer.labels[start:end],
            self.config,
            grace_s=grace_s,
            safe_grace_s=safe_grace_s,
            version=version,
            safe_weight=_weight(self._safe_under, self.config.target_under_rate),
            memory=self.memory.model if version > 0 and self.memory_enabled else None,
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

    def _prediction(self, row: list[float], job: HistoryJob) -> HistoryPrediction:
        model = self.model
        memory_row = np.asarray([self.memory.row(row, job)], dtype=np.float64)
        offset = np.array([self.memory.offset(job.user)])
        batch = predict_rows(model, np.asarray([row], dtype=np.float64), memory_row, offset)
        distribution = None
        if model is not None and model.memory is not None:
            memory = predict_memory(model.memory, memory_row, offset)
            distribution = tuple(
                (float(level), float(kb))
                for level, kb in zip(memory.levels, memory.quantiles_kb[0], strict=True)
            )
        mem_p50 = float(batch.memory_p50_kb_per_proc[0])
        mem_safe = float(batch.memory_safe_kb_per_proc[0])
        values, coverage = runtime_distribution(model, np.asarray([row], dtype=np.float64))
        schedule = distribution_quantile(values, coverage, self.config.schedule_quantile)
        cpu = predict_cpu(self.cpu.model, np.asarray([self.cpu.row(row, job)], dtype=np.float64))
        cpu_p50 = float(cpu.p50[0])

        def share(value: float) -> float | None:
            return None if math.isnan(value) else min(max(value, 0.0), 1.0)

        return HistoryPrediction(
            runtime_estimate_s=float(batch.runtime_estimate_s[0]),
            runtime_p50_s=float(batch.runtime_p50_s[0]),
            runtime_safe_s=float(batch.runtime_safe_s[0]),
            runtime_schedule_s=float(schedule[0]),
            safe_coverage=1.0 - self.config.target_under_rate,
            memory_p50_kb_per_proc=None if math.isnan(mem_p50) else mem_p50,
            memory_safe_kb_per_proc=None if math.isnan(mem_safe) else mem_safe,
            memory_source="model"
            if model is not None and model.memory is not None
            else (None if math.isnan(mem_safe) else "fallback"),
            memory_distribution_kb_per_proc=distribution,
            cpu_efficiency_p50=share(cpu_p50),
            cpu_efficiency_low=share(float(cpu.low[0])),
            cpu_efficiency_high=share(float(cpu.high[0])),
            cpu_source=None
            if math.isnan(cpu_p50)
            else ("model" if self.cpu.model is not None else "fallback"),
            cpu_user_shape_jobs=self.cpu.state.user_jobs_of_shape(job),
            source="fallback" if model is None else "model",
            model_version=0 if model is None else model.version,
            trained_on_jobs=0 if model is None else model.trained_on_jobs,
        )
