"""The online history estimator: a batch job's run time (and memory) from the center's past.

For any job, at its submit time, it gives three run times:

- ``estimate``: for backfilling, the value with the best expected Tsafrir accuracy;
- ``p50``: the median;
- ``safe``: an upper quantile to request as walltime (calibrated so that about
  ``target_under_rate``, 4 %, of jobs run longer), never past the request plus grace.

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

The models (XGBoost, ``hist``, one snapshot of all three at a time):

- ``estimate`` picks among candidates (``CANDIDATES``: the user's last run, the mean of the
  last two, the last run of the same request, the median of five, the request...). A
  multi-output regression predicts each candidate's accuracy (exp(-|log p - log r|)) and
  the best is taken. Tsafrir's accuracy rewards being close to the run time that happens,
  and run times are bimodal (a job fails in a minute or runs to its limit): a regression
  to the middle scores badly on both modes, a chosen past value scores well on one.
- ``p50`` and ``safe``: one quantile model, ``objective="reg:quantileerror"`` with
  ``quantile_alpha=[0.5, safe_quantile]``, on log(run time) (the loss is relative, as the
  accuracy is). Each quantile starts from a base margin and learns the correction: the
  median from the chosen estimate, the upper quantile from EASY++.
- The safe quantile is then calibrated (split conformal): at each retrain the outgoing
  model's upper quantiles on the jobs that finished since it was trained (data it never
  saw), pooled over the last ``calibration_jobs``, give the log margin that leaves
  ``target_under_rate`` of them under-predicted. The first model is calibrated on a
  held-out fifth of its window. Quantile regression alone under-covers under drift.

The safe-request rule. A safe request never exceeds the user's request plus the grace the
scheduler allows: the job is killed there anyway, so asking for more cannot help it and
hurts backfilling. But the cap is not the bare request: in these traces jobs run past
their requests (SDSC-SP2 7 %, a median 33 s past, the kill's delay; LANL-CM5 a third of
its jobs by a median 990 s, since the CM5 did not enforce requests), and with a cap at the
request every such job is an under-prediction by construction (the request itself
under-predicts 7-9 % of SDSC and CTC jobs). ``grace_s`` is learned: the smallest
allowance past the request that leaves at most half the under budget (2 %) of the window's
jobs beyond it (about a minute on SDSC, 0 on KTH, hours on LANL). A caller wanting the
strict cap takes ``min(safe, request)``; the benchmark reports both. The estimate and the
median are capped the same way (Tsafrir's rule for EASY++).

Memory (KB per processor) is predicted by a quantile model of its own where the history has
used memory that is not the request echoed back (HPC2N's trace copies the request into the
used field: when at least half the finished jobs with both show used == requested, the
memory model stays off). It is not capped at the request: on LANL-CM5, the one trace that
records real use, jobs often used more than they asked for.

Before the first training the estimator falls back to EASY++ (the mean of the user's last
two run times capped at the request, else the request) and to the request as safe value.
"""

from __future__ import annotations

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
    "HistoryConfig",
    "HistoryEstimator",
    "HistoryPrediction",
    "PredictionBatch",
    "QuantileModel",
    "predict_rows",
]

FloatArray = NDArray[np.float64]

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
"""What the estimate picks from: past run times (named by their feature), the request, and
the request scaled by the user's recent run/request ratio; in log s, a missing one filled
with the user's last run (else the request), all capped like every prediction."""
_CANDIDATE_COLUMNS = [_COL[name] for name in CANDIDATES[:-2]]


class HistoryConfig(BaseModel):
    """How the estimator learns. The defaults serve every shared trace; none is per trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    safe_quantile: float = Field(default=0.95, gt=0.5, lt=1)
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
    estimate_trees: int = Field(default=40, ge=1)
    quantile_trees: int = Field(default=60, ge=1)
    max_depth: int = Field(default=6, ge=1)
    learning_rate: float = Field(default=0.15, gt=0, le=1)
    # One thread: on a shared machine, OpenMP threads that wait for a busy core stall a
    # retrain from 1 s to 20 s; one thread costs little and stays predictable.
    threads: int = Field(default=1, ge=1)
    memory: Literal["auto", "on", "off"] = "auto"
    seed: int = 0


class HistoryPrediction(BaseModel):
    """One job's run time (and memory, where a memory model exists), at its submit time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtime_estimate_s: float = Field(
        ge=0, description="For backfilling: the candidate with the best expected accuracy"
    )
    runtime_p50_s: float = Field(ge=0, description="Median")
    runtime_safe_s: float = Field(ge=0, description="Walltime to request")
    safe_coverage: float = Field(gt=0, lt=1, description="Intended P(run <= safe)")
    memory_p50_kb_per_proc: float | None = Field(default=None, ge=0)
    memory_safe_kb_per_proc: float | None = Field(default=None, ge=0)
    source: Literal["model", "fallback"]
    model_version: int = Field(ge=0, description="Retrains so far; 0 before the first")
    trained_on_jobs: int = Field(ge=0)

    def runtime_interval(self) -> Interval:
        """As the knowledge base's interval: the estimate, within [0, safe] at its coverage."""
        high = max(self.runtime_safe_s, self.runtime_estimate_s)
        return Interval(
            point=self.runtime_estimate_s, low=0.0, high=high, coverage=self.safe_coverage
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
    """One trained snapshot: fixed until the next retrain replaces it (never mutated)."""

    estimate: xgb.Booster
    runtime: xgb.Booster
    memory: xgb.Booster | None
    runtime_margin_log: float
    memory_margin_log: float
    grace_s: float
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


def _estimate_inputs(rows: FloatArray, candidates: FloatArray, base: FloatArray) -> FloatArray:
    # Each candidate relative to EASY++, so the trees see "how far from the usual guess".
    return np.hstack([rows, candidates - base[:, None]])


def _chosen(
    estimate: xgb.Booster, inputs: NDArray[np.float32], candidates: FloatArray
) -> FloatArray:
    """The candidate (log s) with the best predicted accuracy, row by row."""
    expected = np.asarray(estimate.inplace_predict(inputs), dtype=np.float64)
    picked = candidates[np.arange(len(candidates)), expected.argmax(axis=1)]
    return np.asarray(picked, dtype=np.float64)


def predict_rows(model: QuantileModel | None, rows: NDArray[np.floating]) -> PredictionBatch:
    """Predictions for feature rows (from ``FeatureState.row``) with one model snapshot."""
    # float32 for the trees, as in training; float64 for the arithmetic.
    values = np.asarray(rows, dtype=np.float64)
    rows32 = values.astype(np.float32)
    grace_s = 0.0 if model is None else model.grace_s
    cap_log = _cap_log(values, grace_s)
    base = _base_log(values, cap_log)
    if model is None:
        estimate_log = base
        p50_log = base
        # The request, else a wide guess.
        safe_log = _fill(values[:, _REQ_TIME], base + math.log(4.0))
    else:
        candidates = candidate_logs(values, cap_log)
        inputs = _estimate_inputs(values, candidates, base).astype(np.float32)
        estimate_log = _chosen(model.estimate, inputs, candidates)
        quantiles = np.asarray(
            model.runtime.inplace_predict(
                inputs, base_margin=np.stack([estimate_log, base], axis=1)
            ),
            dtype=np.float64,
        )
        p50_log = quantiles[:, 0]
        safe_log = quantiles[:, 1] + model.runtime_margin_log
    estimate_log = np.maximum(np.minimum(estimate_log, cap_log), 0.0)
    p50_log = np.maximum(np.minimum(p50_log, cap_log), 0.0)
    # A safe request below the median or the estimate would contradict them.
    safe_log = np.minimum(np.maximum(safe_log, np.maximum(p50_log, estimate_log)), cap_log)
    requested_mem = np.exp(values[:, _REQ_MEM])
    if model is not None and model.memory is not None:
        mem = np.asarray(model.memory.inplace_predict(rows32), dtype=np.float64)
        mem_p50 = np.maximum(np.exp(mem[:, 0]), _FLOOR)
        mem_safe = np.maximum(np.exp(mem[:, 1] + model.memory_margin_log), mem_p50)
    else:
        # Without a memory model: the user's last used memory, else the request.
        mem_p50 = _fill(np.exp(values[:, _USER_LAST_MEM]), requested_mem)
        mem_safe = np.fmax(mem_p50, requested_mem)
    return PredictionBatch(
        runtime_estimate_s=np.exp(estimate_log),
        runtime_p50_s=np.exp(p50_log),
        runtime_safe_s=np.exp(safe_log),
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
    # +inf marks jobs no margin can cover (they ran past the cap); they still count.
    value = float(np.quantile(needed_log, 1.0 - target_under_rate, method="higher"))
    if not math.isfinite(value):
        finite = needed_log[np.isfinite(needed_log)]
        value = float(finite.max()) if finite.size else 0.0
    return min(max(value, _MARGIN_BOUNDS[0]), _MARGIN_BOUNDS[1])


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
        self._runtime_needed: deque[float] = deque(maxlen=self.config.calibration_jobs)
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
        grace_s = self._grace_s(self._buffer.labels[start:end])
        previous = self.model
        if previous is not None:
            self._collect_calibration(previous, self._trained_upto)
        else:
            # No model has met unseen jobs yet: fit one without the latest fifth and
            # calibrate on that fifth, so the first model is calibrated too.
            split = start + (end - start) * 4 // 5
            self._collect_calibration(self._fit(start, split, grace_s, version=0), split)
        self.model = self._fit(
            start, end, grace_s, version=(previous.version + 1) if previous is not None else 1
        )
        self._since_train = 0
        self._trained_upto = end
        return self.model

    def _fit(self, start: int, end: int, grace_s: float, version: int) -> QuantileModel:
        config = self.config
        rows32 = self._buffer.rows[start:end]
        rows = rows32.astype(np.float64)
        labels = self._buffer.labels[start:end]
        cap_log = _cap_log(rows, grace_s)
        base = _base_log(rows, cap_log)
        candidates = candidate_logs(rows, cap_log)
        # Each candidate's accuracy (min/max ratio = exp(-|log difference|)) as the label.
        accuracy = np.exp(-np.abs(candidates - labels[:, :1]))
        inputs = _estimate_inputs(rows, candidates, base).astype(np.float32)
        estimate = xgb.train(
            _params(config, objective="reg:squarederror"),
            xgb.DMatrix(inputs, label=accuracy),
            num_boost_round=config.estimate_trees,
        )
        chosen = _chosen(estimate, inputs, candidates)
        runtime = xgb.train(
            _quantile_params(config),
            xgb.DMatrix(inputs, label=labels[:, 0], base_margin=np.stack([chosen, base], axis=1)),
            num_boost_round=config.quantile_trees,
        )
        memory = None
        known = ~np.isnan(labels[:, 1])
        # Half the usual minimum: the first model's held-out fit sees 4/5 of the rows.
        if self.memory_enabled and int(known.sum()) >= config.first_train_jobs // 2:
            memory = xgb.train(
                _quantile_params(config),
                xgb.DMatrix(rows32[known], label=labels[known, 1]),
                num_boost_round=config.quantile_trees,
            )
        return QuantileModel(
            estimate=estimate,
            runtime=runtime,
            memory=memory,
            runtime_margin_log=_margin(
                np.fromiter(self._runtime_needed, dtype=np.float64), config.target_under_rate
            ),
            memory_margin_log=_margin(
                np.fromiter(self._memory_needed, dtype=np.float64), config.target_under_rate
            ),
            grace_s=grace_s,
            version=version,
            trained_on_jobs=end - start,
        )

    # --- inside --------------------------------------------------------------------------

    def _grace_s(self, labels: FloatArray) -> float:
        """The allowance past the request that leaves at most half the under budget past it."""
        over = labels[:, 3] - labels[:, 2]
        over = over[~np.isnan(over)]
        if over.size == 0:
            return 0.0
        return max(0.0, float(np.quantile(over, 1.0 - self.config.target_under_rate / 2)))

    def _collect_calibration(self, model: QuantileModel, since: int) -> None:
        """Out-of-sample margins of ``model`` on the jobs that ended after its training."""
        rows32 = self._buffer.rows[since : self._buffer.size]
        labels = self._buffer.labels[since : self._buffer.size]
        if len(rows32) == 0:
            return
        rows = rows32.astype(np.float64)
        cap_log = _cap_log(rows, model.grace_s)
        base = _base_log(rows, cap_log)
        candidates = candidate_logs(rows, cap_log)
        inputs = _estimate_inputs(rows, candidates, base).astype(np.float32)
        chosen = _chosen(model.estimate, inputs, candidates)
        raw = np.asarray(
            model.runtime.inplace_predict(inputs, base_margin=np.stack([chosen, base], axis=1)),
            dtype=np.float64,
        )[:, 1]
        # A job that ran past request + grace cannot be covered by any margin: +inf.
        coverable = np.isnan(labels[:, 2]) | (labels[:, 3] <= labels[:, 2] + model.grace_s)
        self._runtime_needed.extend(np.where(coverable, labels[:, 0] - raw, np.inf).tolist())
        if model.memory is not None:
            known = ~np.isnan(labels[:, 1])
            if known.any():
                mem = np.asarray(model.memory.inplace_predict(rows32[known]), dtype=np.float64)
                self._memory_needed.extend((labels[known, 1] - mem[:, 1]).tolist())

    def _prediction(self, row: list[float]) -> HistoryPrediction:
        model = self.model
        batch = predict_rows(model, np.asarray([row], dtype=np.float32))
        mem_p50 = float(batch.memory_p50_kb_per_proc[0])
        mem_safe = float(batch.memory_safe_kb_per_proc[0])
        return HistoryPrediction(
            runtime_estimate_s=float(batch.runtime_estimate_s[0]),
            runtime_p50_s=float(batch.runtime_p50_s[0]),
            runtime_safe_s=float(batch.runtime_safe_s[0]),
            safe_coverage=1.0 - self.config.target_under_rate,
            memory_p50_kb_per_proc=None if math.isnan(mem_p50) else mem_p50,
            memory_safe_kb_per_proc=None if math.isnan(mem_safe) else mem_safe,
            source="fallback" if model is None else "model",
            model_version=0 if model is None else model.version,
            trained_on_jobs=0 if model is None else model.trained_on_jobs,
        )
