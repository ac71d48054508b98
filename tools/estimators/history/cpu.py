"""CPU efficiency for any job from the center's history: the share of its cores it keeps busy.

The quantity is what the center's accounting records: CPU time used over elapsed time x
processors. In SWF that is field 6 (average CPU time used per processor) over field 4
(run time); from SLURM, ``TotalCPU / (Elapsed x CPUs)`` (``HistoryJob.from_job_record``
divides ``used_cpu_s`` by the cores). For a job at its submit time this module gives

- ``p50``: the median of its efficiency (the point that minimizes the absolute error);
- an interval ``[low, high]``: the 0.1 and 0.9 quantiles, widened (or narrowed) by one
  margin per snapshot so that 80 % of the jobs it never saw fell inside (conformalized
  quantile regression).

One XGBoost model (``reg:quantileerror``, the three levels ``CPU_LEVELS`` at once) learns
them from the run-time features (request, user, queue, size, load) and its own:
the user's last efficiencies (last, median, mean, spread, min and max of ten), the same
user's last ones at the same processor count, application and requested time, the job
shape's across users, and the center's recent median. Before the first model (and
where a job has nothing to go on) the point is the user's median of ten, else the
shape's, else the center's, and the interval the user's min and max (else 0 to 1).

Online, like memory: a job's row is made at its submit time and joins the training set
when it ends; the model retrains on the run-time schedule (first after
``first_train_jobs`` jobs with an efficiency, then every max(``retrain_min_jobs``,
``retrain_fraction`` x jobs) on the latest ``window_jobs``).

Values: an efficiency above 1 (a job's processes used more CPU than its processors had:
clock skew, hyperthreads; HPC2N records 16 % of its jobs so) is learned as 1 and counted
(``capped``); above ``MAX_EFFICIENCY``, a job that did not run (run time 0) or a negative
CPU time is kept out and counted by reason (``kept_out``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from tools.estimators.history.features import FEATURE_NAMES, HistoryJob

if TYPE_CHECKING:
    import xgboost as xgb

    from tools.estimators.history.runtime import HistoryConfig

__all__ = [
    "CPU_FEATURE_NAMES",
    "CPU_LEVELS",
    "MAX_EFFICIENCY",
    "CpuBatch",
    "CpuLearner",
    "CpuModel",
    "CpuState",
    "cpu_efficiency",
    "efficiency_outlier",
    "predict_cpu",
]

FloatArray = NDArray[np.float64]

CPU_LEVELS: tuple[float, ...] = (0.1, 0.5, 0.9)
"""The quantiles of efficiency the model predicts: the interval's ends and the median."""
MAX_EFFICIENCY = 2.0
"""A recorded efficiency above this is a broken record (or a job that ran threads on
processors it did not ask for), not a measure of how busy its own cores were."""


def cpu_efficiency(job: HistoryJob) -> float | None:
    """The recorded efficiency of an ended ``job`` (uncapped), or ``None`` when unknown."""
    if job.used_cpu_s_per_proc is None or job.run_s is None or job.run_s <= 0:
        return None
    return job.used_cpu_s_per_proc / job.run_s


def efficiency_outlier(job: HistoryJob) -> str | None:
    """Why ``job``'s CPU use cannot be learned from, or ``None`` when it can."""
    if job.used_cpu_s_per_proc is None:
        return "missing"
    if not math.isfinite(job.used_cpu_s_per_proc) or job.used_cpu_s_per_proc < 0:
        return "negative"
    if job.run_s is None or job.run_s <= 0:
        return "no_run_time"
    if job.used_cpu_s_per_proc / job.run_s > MAX_EFFICIENCY:
        return "absurd"
    return None


CPU_FEATURE_NAMES: tuple[str, ...] = (
    "user_cpu_jobs_log",
    "user_last_eff",
    "user_median10_eff",
    "user_mean10_eff",
    "user_std10_eff",
    "user_min10_eff",
    "user_max10_eff",
    "user_procs_jobs",
    "user_procs_last_eff",
    "user_procs_median5_eff",
    "user_app_last_eff",
    "user_app_median5_eff",
    "user_request_last_eff",
    "shape_median5_eff",
    "center_median_eff",
)
"""The CPU model's own features, after ``FEATURE_NAMES``."""
_USER_MEDIAN = len(FEATURE_NAMES) + CPU_FEATURE_NAMES.index("user_median10_eff")
_USER_MIN = len(FEATURE_NAMES) + CPU_FEATURE_NAMES.index("user_min10_eff")
_USER_MAX = len(FEATURE_NAMES) + CPU_FEATURE_NAMES.index("user_max10_eff")
_SHAPE_MEDIAN = len(FEATURE_NAMES) + CPU_FEATURE_NAMES.index("shape_median5_eff")
_CENTER_MEDIAN = len(FEATURE_NAMES) + CPU_FEATURE_NAMES.index("center_median_eff")


def _last(values: deque[float] | None) -> float:
    return values[-1] if values else math.nan


def _median(values: deque[float] | None) -> float:
    return float(median(values)) if values else math.nan


class CpuState:
    """Recent efficiencies of each user and of narrower keys, as of now (ended jobs only)."""

    def __init__(self) -> None:
        self._users: dict[str, deque[float]] = {}
        self._user_jobs: Counter[str] = Counter()
        self._keys: dict[tuple[str, object, object], deque[float]] = {}
        self._center: deque[float] = deque(maxlen=200)

    def _key(self, kind: str, first: object, second: object) -> deque[float] | None:
        if first is None or second is None:
            return None
        return self._keys.get((kind, first, second))

    def user_jobs_of_shape(self, job: HistoryJob) -> int:
        """How many of the user's recent jobs with ``job``'s processor count recorded one."""
        found = self._key("procs", job.user, job.procs)
        return len(found) if found else 0

    def user_last_and_median(self, job: HistoryJob) -> tuple[float, float]:
        """The baselines: the user's last efficiency and the median of their last ten."""
        recent = self._users.get(job.user) if job.user is not None else None
        return _last(recent), _median(recent)

    def center_median(self) -> float:
        return _median(self._center)

    def row(self, job: HistoryJob) -> list[float]:
        """Features of ``job`` (reads only its request) given the efficiencies seen so far."""
        user = self._users.get(job.user) if job.user is not None else None
        logs = list(user) if user else []
        procs = self._key("procs", job.user, job.procs)
        return [
            math.log1p(self._user_jobs[job.user]) if job.user is not None else 0.0,
            _last(user),
            _median(user),
            float(np.mean(logs)) if logs else math.nan,
            float(np.std(logs)) if len(logs) > 1 else math.nan,
            min(logs) if logs else math.nan,
            max(logs) if logs else math.nan,
            float(len(procs)) if procs else 0.0,
            _last(procs),
            _median(procs),
            _last(self._key("app", job.user, job.application)),
            _median(self._key("app", job.user, job.application)),
            _last(self._key("request", job.user, job.requested_time_s)),
            _median(self._key("shape", job.procs, job.requested_time_s)),
            _median(self._center),
        ]

    def finished(self, job: HistoryJob, efficiency: float) -> None:
        """A job's efficiency (already checked and capped at 1) joins the history."""
        self._center.append(efficiency)
        keys: list[tuple[str, object, object]] = [("shape", job.procs, job.requested_time_s)]
        if job.user is not None:
            self._users.setdefault(job.user, deque(maxlen=10)).append(efficiency)
            self._user_jobs[job.user] += 1
            keys += [
                ("procs", job.user, job.procs),
                ("app", job.user, job.application),
                ("request", job.user, job.requested_time_s),
            ]
        for key in keys:
            if key[1] is not None and key[2] is not None:
                self._keys.setdefault(key, deque(maxlen=5)).append(efficiency)


@dataclass(frozen=True, slots=True)
class CpuModel:
    """One trained CPU-efficiency snapshot; fixed until the next retrain replaces it."""

    booster: xgb.Booster
    version: int
    trained_on_jobs: int
    margin: float = 0.0  # added to both ends of the interval (conformal, on unseen jobs)


@dataclass(frozen=True, slots=True)
class CpuBatch:
    """Efficiency predictions for many rows, within [0, 1]; NaN where nothing is known."""

    p50: FloatArray
    low: FloatArray
    high: FloatArray


_ANCHORED = True


def _anchor(values: FloatArray) -> FloatArray:
    """The user's median of ten, else the shape's, else the center's, else 0.5."""
    point = values[:, _USER_MEDIAN].copy()
    for column in (_SHAPE_MEDIAN, _CENTER_MEDIAN):
        point = np.where(np.isnan(point), values[:, column], point)
    anchored: FloatArray = np.where(np.isnan(point), 0.5, point)
    return anchored if _ANCHORED else np.zeros(len(values))


def predict_cpu(model: CpuModel | None, rows: NDArray[np.floating]) -> CpuBatch:
    """Efficiency for rows (``FEATURE_NAMES`` then ``CPU_FEATURE_NAMES``), one snapshot."""
    values = np.asarray(rows, dtype=np.float64)
    if model is None:
        point = values[:, _USER_MEDIAN].copy()
        for column in (_SHAPE_MEDIAN, _CENTER_MEDIAN):
            point = np.where(np.isnan(point), values[:, column], point)
        has_user = ~np.isnan(values[:, _USER_MEDIAN])
        low = np.where(has_user, values[:, _USER_MIN], 0.0)
        high = np.where(has_user, values[:, _USER_MAX], 1.0)
        low, high = np.where(np.isnan(point), np.nan, low), np.where(np.isnan(point), np.nan, high)
        return CpuBatch(p50=point, low=low, high=high)
    raw = np.asarray(model.booster.inplace_predict(values.astype(np.float32)), dtype=np.float64)
    raw = raw.reshape(len(values), -1) + _anchor(values)[:, None]
    quantiles = np.maximum.accumulate(raw.reshape(len(values), -1), axis=1)
    return CpuBatch(
        p50=np.clip(quantiles[:, 1], 0.0, 1.0),
        low=np.clip(np.minimum(quantiles[:, 0] - model.margin, quantiles[:, 1]), 0.0, 1.0),
        high=np.clip(np.maximum(quantiles[:, 2] + model.margin, quantiles[:, 1]), 0.0, 1.0),
    )


class CpuLearner:
    """The online CPU-efficiency model: rows at submit, labels at end, periodic retrains."""

    def __init__(self, config: HistoryConfig) -> None:
        self.config = config
        self.state = CpuState()
        self.model: CpuModel | None = None
        self.kept_out: Counter[str] = Counter()
        self.capped = 0
        self.known = 0
        width = len(FEATURE_NAMES) + len(CPU_FEATURE_NAMES)
        self._size = 0
        self._rows = np.empty((1024, width), dtype=np.float32)
        self._labels = np.empty(1024)
        self._pending: dict[str, list[float]] = {}
        self._since_train = 0
        self._trained_upto = 0
        # How far outside its 0.1-0.9 interval each unseen job fell (negative: inside).
        self._scores: deque[float] = deque(maxlen=config.calibration_jobs)

    def row(self, base_row: list[float], job: HistoryJob) -> list[float]:
        return [*base_row, *self.state.row(job)]

    def submitted(self, base_row: list[float], job: HistoryJob) -> list[float]:
        """Remember ``job``'s row until it ends; returns the row."""
        row = self.row(base_row, job)
        self._pending[job.job_id] = row
        return row

    def observe(self, base_row: list[float], job: HistoryJob) -> bool:
        """``job`` ended: learn its efficiency when it has one. True when it retrained."""
        row = self._pending.pop(job.job_id, None)
        why = efficiency_outlier(job)
        if why is not None:
            if why != "missing":
                self.kept_out[why] += 1
            return False
        if row is None:
            row = self.row(base_row, job)
        efficiency = cpu_efficiency(job) or 0.0
        if efficiency > 1.0:
            self.capped += 1
            efficiency = 1.0
        self.known += 1
        self.state.finished(job, efficiency)
        if self._size == len(self._labels):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
            self._labels = np.concatenate([self._labels, np.empty_like(self._labels)])
        self._rows[self._size] = row
        self._labels[self._size] = efficiency
        self._size += 1
        self._since_train += 1
        config = self.config
        if self.model is None:
            due = self._size >= config.first_train_jobs
        else:
            due = self._since_train >= max(
                config.retrain_min_jobs, config.retrain_fraction * self._size
            )
        if due:
            self.retrain()
        return due

    def retrain(self) -> CpuModel | None:
        """Train on the latest window of ended jobs with an efficiency, and widen (or
        narrow) its interval so that 80 % of the jobs it never saw fall inside
        (conformalized quantile regression, Romano et al. 2019): on the jobs that ended
        since the previous snapshot, and for the first, on a held-out fifth."""
        end = self._size
        if end < 10:
            return self.model
        start = max(0, end - self.config.window_jobs)
        if self.model is None:
            split = start + (end - start) * 4 // 5
            self._score(self._fit(start, split, 0, 0.0), split)
        else:
            self._score(self.model, self._trained_upto)
        level = CPU_LEVELS[-1] - CPU_LEVELS[0]
        margin = float(np.quantile(self._scores, level)) if self._scores else 0.0
        version = self.model.version + 1 if self.model is not None else 1
        self.model = self._fit(start, end, version, margin)
        self._since_train = 0
        self._trained_upto = end
        return self.model

    def _score(self, model: CpuModel, since: int) -> None:
        if since >= self._size:
            return
        bare = dataclasses.replace(model, margin=0.0)  # scores against the raw quantiles
        batch = predict_cpu(bare, self._rows[since : self._size].astype(np.float64))
        labels = self._labels[since : self._size]
        self._scores.extend(np.maximum(batch.low - labels, labels - batch.high).tolist())

    def _fit(self, start: int, end: int, version: int, margin: float) -> CpuModel:
        import xgboost as xgb

        config = self.config
        params = {
            "tree_method": "hist",
            "objective": "reg:quantileerror",
            "quantile_alpha": np.array(CPU_LEVELS),
            "max_depth": config.cpu_depth,
            "eta": config.learning_rate,
            "max_bin": 64,
            "min_child_weight": 5,
            "subsample": 0.8,
            "nthread": config.threads,
            "seed": config.seed,
            "verbosity": 0,
        }
        rows = self._rows[start:end]
        labels = self._labels[start:end] - _anchor(rows.astype(np.float64))
        data = xgb.DMatrix(rows, label=labels)
        booster = xgb.train(params, data, num_boost_round=config.cpu_trees)
        return CpuModel(booster, version, end - start, margin)
