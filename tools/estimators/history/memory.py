"""Peak memory for any job from the center's history, and the request to make for it.

The quantity is what the center's accounting records: SWF field 7 (average memory used
per processor, KB) or SLURM's ``MaxRSS`` brought to KB per processor. For a job at its
submit time this module gives

- a distribution of its use: quantiles ``MEMORY_LEVELS`` of log memory from one XGBoost
  model (``reg:quantileerror``, every level at once), relative to an anchor (the
  largest of the user's last three uses, else the request, else the center's recent
  median), so the trees learn "how far from the usual guess" rather than the scale;
- ``p50``: its median;
- ``request``: what to ask for, chosen so that about ``target_oom_rate`` (2 %) of jobs
  use more (an out-of-memory kill where the center enforces the request).

How the request spends the OOM budget. The request is not one quantile for every job.
For each job the candidates are the predicted quantiles (and a few wider values past the
top one); for a price ``weight`` of an OOM, the job asks for the candidate that
minimizes ``value + weight x scale x P(use > value)`` (``scale``: the window's median
use). This is the Lagrangian of "least memory held for a given number of OOMs": a job
whose use is predictable gets a tight, high quantile; a job whose use spreads widely gets
a lower one, since covering its tail would cost more memory than the OOM it saves. A
single quantile for all jobs pays for the unpredictable ones with the predictable ones'
memory.

The weight is calibrated online, split-conformal style: the requests a snapshot would
have made at each weight of ``MEMORY_WEIGHTS`` on jobs that ended after it was trained
(jobs it never saw), pooled over the last ``calibration_jobs``, give each weight's OOM
rate; the smallest weight that meets the target is kept, at each retrain and every
``recalibrate_jobs`` jobs between retrains. Optionally each user also has an online
offset (adaptive conformal inference, Gibbs and Candes 2021): after each of the user's
jobs ends, the offset (log) moves by ``memory_user_step x (oom - target)``; a user who
keeps running out climbs fast, one who never does drifts slowly back down. The pooled
calibration sees the requests with the offsets the jobs had. Off by default
(``memory_user_step`` 0): on LANL-CM5 a step of 0.05 held more memory idle at the same
OOM rate (docs/notebooks/memory.md).

Learned only from the past: a job's row is made at its submit time and joins the
training set when the job ends. Values that cannot be memory (zero, negative, more than
``MAX_KB_PER_PROC``) are kept out and counted by reason (``kept_out``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from tools.estimators.history.features import FEATURE_NAMES, HistoryJob

if TYPE_CHECKING:  # xgboost is imported where a model is trained: the Re-scheduler reads
    # conditional_request from here without loading it
    import xgboost as xgb

    from tools.estimators.history.runtime import HistoryConfig

__all__ = [
    "MAX_KB_PER_PROC",
    "MEMORY_FEATURE_NAMES",
    "MEMORY_LEVELS",
    "MEMORY_WEIGHTS",
    "MemoryBatch",
    "MemoryLearner",
    "MemoryModel",
    "MemoryState",
    "conditional_request",
    "memory_outlier",
    "predict_memory",
    "raise_after_oom",
]

FloatArray = NDArray[np.float64]

MAX_KB_PER_PROC = float(2**30)
"""1 TiB per processor: a larger recorded use is a broken record, not a job."""

MEMORY_LEVELS: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995)
"""The quantiles of log use the model predicts in one pass."""
# Past the top quantile: wider candidates, each assumed to halve what it leaves out.
_WIDER = (math.log(1.25), math.log(1.5), math.log(2.0), math.log(3.0))
_LEVELS = np.array(
    [*MEMORY_LEVELS, *(1.0 - (1.0 - MEMORY_LEVELS[-1]) / 2 ** (i + 1) for i in range(4))]
)

MEMORY_WEIGHTS: tuple[float, ...] = (0.0, *np.geomspace(0.01, 10_000.0, 49).tolist(), math.inf)
"""The price of an OOM, in the window's median use, that the calibration chooses from;
infinity takes the widest candidate."""
_WEIGHTS = np.asarray(MEMORY_WEIGHTS)
_OFFSET_BOUNDS = (-math.log(2.0), math.log(8.0))
# exp(log(x)) can land a hair below x: a user who always uses the same amount would get a
# request a billionth short of it, an OOM in KB though none in log space. Requests are
# made in log space plus this, and judged the same way in calibration.
_LOG_TOLERANCE = 1e-9
_COL = {name: index for index, name in enumerate(FEATURE_NAMES)}
_REQ_MEM = _COL["log_requested_mem"]


def memory_outlier(used_kb: float | None) -> str | None:
    """Why a recorded use cannot be learned from, or ``None`` when it can."""
    if used_kb is None:
        return "missing"
    if not math.isfinite(used_kb) or used_kb < 0:
        return "negative"
    if used_kb == 0:
        return "zero"
    if used_kb > MAX_KB_PER_PROC:
        return "absurd"
    return None


class _Track:
    """One key's recent uses (log KB, newest last)."""

    __slots__ = ("logs", "n")

    def __init__(self, keep: int) -> None:
        self.n = 0
        self.logs: deque[float] = deque(maxlen=keep)

    def add(self, value: float) -> None:
        self.n += 1
        self.logs.append(value)

    def last3_max(self) -> float:
        return max(list(self.logs)[-3:]) if self.logs else math.nan


MEMORY_FEATURE_NAMES: tuple[str, ...] = (
    "anchor_log_mem",
    "anchor_kind",
    "user_mem_jobs_log",
    "user_last3_max_log_mem",
    "user_max10_log_mem",
    "user_min10_log_mem",
    "user_std10_log_mem",
    "user_oom_fraction10",
    "user_reqmem_last_log_mem",
    "user_reqmem_max3_log_mem",
    "user_app_max3_log_mem",
    "user_procs_max3_log_mem",
    "center_median_log_mem",
)
"""The memory model's own features, after ``FEATURE_NAMES``."""


class MemoryState:
    """Recent uses of each user and of narrower keys, as of now (ended jobs only)."""

    def __init__(self) -> None:
        self._users: dict[str, _Track] = {}
        self._user_over: dict[str, deque[float]] = {}
        self._keys: dict[tuple[str, str, object], _Track] = {}
        self._center: deque[float] = deque(maxlen=200)

    def _key(self, kind: str, user: str | None, value: object) -> _Track | None:
        if user is None or value is None:
            return None
        return self._keys.get((kind, user, value))

    def user_runs(self, user: str | None, application: str | None) -> int:
        """How many of ``user``'s ended runs of ``application`` recorded a use."""
        found = self._key("app", user, application)
        return 0 if found is None else found.n

    def row(self, job: HistoryJob) -> list[float]:
        """Features of ``job`` (reads only its request) given the uses seen so far."""
        user = self._users.get(job.user) if job.user is not None else None
        reqmem = self._key("reqmem", job.user, job.requested_memory_kb_per_proc)
        app = self._key("app", job.user, job.application)
        procs = self._key("procs", job.user, job.procs)
        center = float(np.median(self._center)) if self._center else math.nan
        asked = job.requested_memory_kb_per_proc
        anchor, kind = math.nan, 3.0
        if user is not None:
            anchor, kind = user.last3_max(), 0.0
        elif asked is not None and 0 < asked <= MAX_KB_PER_PROC:
            anchor, kind = math.log(asked), 1.0
        elif self._center:
            anchor, kind = center, 2.0
        logs = list(user.logs) if user is not None else []
        over = self._user_over.get(job.user) if job.user is not None else None
        return [
            anchor,
            kind,
            math.log1p(user.n) if user is not None else 0.0,
            user.last3_max() if user is not None else math.nan,
            max(logs) if logs else math.nan,
            min(logs) if logs else math.nan,
            float(np.std(logs)) if len(logs) > 1 else math.nan,
            sum(over) / len(over) if over else math.nan,
            reqmem.logs[-1] if reqmem is not None else math.nan,
            reqmem.last3_max() if reqmem is not None else math.nan,
            app.last3_max() if app is not None else math.nan,
            procs.last3_max() if procs is not None else math.nan,
            center,
        ]

    def finished(self, job: HistoryJob, log_used: float) -> None:
        """A job's use (log KB, already checked) joins the history."""
        self._center.append(log_used)
        if job.user is None:
            return
        self._users.setdefault(job.user, _Track(10)).add(log_used)
        asked = job.requested_memory_kb_per_proc
        if asked is not None and asked > 0:
            over = self._user_over.setdefault(job.user, deque(maxlen=10))
            over.append(float(math.log(asked) < log_used))
        for kind, value in (
            ("reqmem", asked),
            ("app", job.application),
            ("procs", job.procs),
        ):
            if value is not None:
                self._keys.setdefault((kind, job.user, value), _Track(3)).add(log_used)


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """One trained memory snapshot; fixed until the next retrain replaces it."""

    booster: xgb.Booster
    weight: float  # the calibrated price of an OOM, in units of ``scale_kb``
    scale_kb: float  # the training window's median use
    version: int
    trained_on_jobs: int


@dataclass(frozen=True, slots=True)
class MemoryBatch:
    """Memory predictions for many rows (KB per processor)."""

    p50_kb: FloatArray
    request_kb: FloatArray
    quantiles_kb: FloatArray  # one column per level of ``levels``, ascending
    levels: FloatArray


def _grid_log(model: MemoryModel | None, rows: NDArray[np.floating]) -> FloatArray:
    """Each row's candidate log uses (ascending), one column per ``_LEVELS``."""
    values = np.asarray(rows, dtype=np.float64)
    anchor = values[:, len(FEATURE_NAMES)]
    if model is None:
        # Before any training: the anchor times 1, 1.5, 2 ... as a coarse, assumed spread.
        steps = np.array([-0.5, -0.3, 0.0, 0.0, 0.1, math.log(1.5), *[math.log(2.0)] * 4])
        steps = np.concatenate([steps, steps[-1] + np.array(_WIDER)])
        fallback: FloatArray = anchor[:, None] + steps[None, :]
        return fallback
    raw = np.asarray(model.booster.inplace_predict(values.astype(np.float32)), dtype=np.float64)
    quantiles = np.maximum.accumulate(raw.reshape(len(values), -1), axis=1)
    top = quantiles[:, -1:]
    wider = top + np.array(_WIDER)[None, :]
    grid: FloatArray = anchor[:, None] + np.hstack([quantiles, wider])
    return grid


def _choose(grid_log: FloatArray, offsets: FloatArray, weights: FloatArray) -> FloatArray:
    """Requested log memory per row (rows) and weight (columns): the cheapest candidate."""
    shifted = grid_log + offsets[:, None]
    value = np.exp(shifted)
    out = np.empty((len(grid_log), len(weights)))
    for column, weight in enumerate(weights):
        if math.isinf(weight):
            out[:, column] = shifted[:, -1]
            continue
        cost = value + weight * (1.0 - _LEVELS)[None, :]
        out[:, column] = shifted[np.arange(len(shifted)), cost.argmin(axis=1)]
    return out


def predict_memory(
    model: MemoryModel | None,
    rows: NDArray[np.floating],
    offsets: NDArray[np.floating] | None = None,
) -> MemoryBatch:
    """Memory for rows (``FEATURE_NAMES`` then ``MEMORY_FEATURE_NAMES``) with one snapshot.

    ``offsets`` are the users' log offsets as they were at each row's submit time.
    NaN where a row has no anchor (no use seen, no request): nothing to say.
    """
    grid = _grid_log(model, rows)
    shift = np.zeros(len(grid)) if offsets is None else np.asarray(offsets, dtype=np.float64)
    if model is None:
        request = grid[:, 5] + shift  # the anchor times 1.5
    else:
        weight = model.weight * model.scale_kb
        request = _choose(grid, shift, np.array([weight]))[:, 0]
    return MemoryBatch(
        p50_kb=np.exp(grid[:, MEMORY_LEVELS.index(0.5)]),
        request_kb=np.exp(request + _LOG_TOLERANCE),
        quantiles_kb=np.exp(grid),
        levels=_LEVELS.copy(),
    )


def conditional_request(
    levels: NDArray[np.floating] | Sequence[float],
    values: NDArray[np.floating] | Sequence[float],
    needed_more_than: float,
    target: float,
) -> float | None:
    """After a kill at ``needed_more_than``: the smallest of ``values`` (ascending, with
    P(use <= value) = ``levels``) that covers all but ``target`` of the jobs that need
    more than that, i.e. P(use <= v | use > x) = (F(v) - F(x)) / (1 - F(x)) >= 1 - target.

    ``None`` when the distribution has nothing above ``needed_more_than`` (the kill
    already went past what it foresaw): the caller falls back to a fixed factor.
    """
    level = np.asarray(levels, dtype=np.float64)
    value = np.asarray(values, dtype=np.float64)
    above = value > needed_more_than
    if not above.any():
        return None
    below = float(np.interp(needed_more_than, value, level, left=0.0, right=float(level[-1])))
    rest = 1.0 - below
    if rest <= 0:
        return float(value[above][-1])
    conditional = (level - below) / rest
    reaching = np.flatnonzero(above & (conditional >= 1.0 - target))
    return float(value[reaching[0]] if reaching.size else value[above][-1])


def raise_after_oom(
    batch: MemoryBatch, row: int, needed_more_than_kb: float, target: float
) -> float:
    """The next request (KB) for row ``row`` of ``batch`` after a kill at
    ``needed_more_than_kb``: :func:`conditional_request`, and never less than 1.25 x the
    amount that was not enough (past the widest candidate, that floor alone)."""
    found = conditional_request(batch.levels, batch.quantiles_kb[row], needed_more_than_kb, target)
    floor = needed_more_than_kb * 1.25
    return floor if found is None else max(found, floor)


class MemoryLearner:
    """The online memory model: rows at submit, labels at end, periodic retrains.

    Used on its own by the memory replay and inside :class:`HistoryEstimator` (which then
    drives ``retrain``/``recalibrate`` on its own schedule: ``schedule=False``).
    """

    def __init__(self, config: HistoryConfig, *, schedule: bool = True) -> None:
        self.config = config
        self.schedule = schedule
        self.state = MemoryState()
        self.model: MemoryModel | None = None
        self.kept_out: Counter[str] = Counter()
        self.offsets: dict[str, float] = {}
        # Ended jobs with a use, in end order: the row, log use minus anchor, and the
        # user's offset at the row's submit time; arrays grown by doubling (a list of
        # Python floats would take 30 bytes a number: 300 MB over LANL-CM5).
        width = len(FEATURE_NAMES) + len(MEMORY_FEATURE_NAMES)
        self._size = 0
        self._rows = np.empty((1024, width))
        self._labels = np.empty(1024)
        self._offsets = np.empty(1024)
        self._pending: dict[str, tuple[list[float], float]] = {}
        self._trained_upto = 0
        self._calibrated_upto = 0
        self._since_train = 0
        self._under = np.zeros((0, len(MEMORY_WEIGHTS)), dtype=np.bool_)
        self._scales: deque[float] = deque(maxlen=config.calibration_jobs)
        self.known = 0
        self.echoed = 0

    def offset(self, user: str | None) -> float:
        return self.offsets.get(user, 0.0) if user is not None else 0.0

    def row(self, base_row: list[float], job: HistoryJob) -> list[float]:
        return [*base_row, *self.state.row(job)]

    def submitted(self, base_row: list[float], job: HistoryJob) -> list[float]:
        """Remember ``job``'s row and its user's offset until it ends; returns the row."""
        row = self.row(base_row, job)
        self._pending[job.job_id] = (row, self.offset(job.user))
        return row

    def forget(self, job: HistoryJob) -> None:
        self._pending.pop(job.job_id, None)

    def observe(self, base_row: list[float], job: HistoryJob) -> bool:
        """``job`` ended: learn its use when it is one. True when a retrain is due."""
        pending = self._pending.pop(job.job_id, None)
        row, offset = pending if pending is not None else (self.row(base_row, job), 0.0)
        used = job.used_memory_kb_per_proc
        why = memory_outlier(used)
        if why is not None or used is None:
            if why != "missing":
                self.kept_out[why or "missing"] += 1
            return False
        log_used = math.log(max(used, 1.0))
        self.known += 1
        if job.requested_memory_kb_per_proc == used:
            self.echoed += 1
        anchor = row[len(FEATURE_NAMES)]
        if math.isnan(anchor):
            self.state.finished(job, log_used)
            return False  # the first use of a center with no request: nothing to anchor to
        if self.model is not None or not self.schedule:
            self._update_offset(job, row, offset, log_used)
        self.state.finished(job, log_used)
        if self._size == len(self._labels):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
            self._labels = np.concatenate([self._labels, np.empty_like(self._labels)])
            self._offsets = np.concatenate([self._offsets, np.empty_like(self._offsets)])
        self._rows[self._size] = row
        self._labels[self._size] = log_used - anchor
        self._offsets[self._size] = offset
        self._size += 1
        self._since_train += 1
        if not self.schedule:
            return False
        config = self.config
        if self.model is None:
            due = self._size >= config.first_train_jobs
        else:
            every = max(config.retrain_min_jobs, config.retrain_fraction * self._size)
            due = self._since_train >= every
        if due:
            self.retrain()
        elif (
            config.recalibrate_jobs
            and self._size - self._calibrated_upto >= config.recalibrate_jobs
        ):
            self.recalibrate()
        return due

    @property
    def echoes_request(self) -> bool:
        """Most recorded uses equal the request: the trace copied it, it is not use."""
        return self.known > 0 and self.echoed * 2 >= self.known

    def _update_offset(
        self, job: HistoryJob, row: list[float], offset: float, log_used: float
    ) -> None:
        if job.user is None or self.model is None or self.config.memory_user_step == 0:
            return
        batch = predict_memory(self.model, np.asarray([row]), np.array([offset]))
        oom = float(math.log(batch.request_kb[0]) < log_used)
        step = self.config.memory_user_step * (oom - self.config.target_oom_rate)
        current = self.offsets.get(job.user, 0.0) + step
        self.offsets[job.user] = min(max(current, _OFFSET_BOUNDS[0]), _OFFSET_BOUNDS[1])

    def retrain(self) -> MemoryModel | None:
        """Train on the latest window and calibrate the OOM price on unseen jobs."""
        end = self._size
        if end < max(10, self.config.first_train_jobs // 2):
            return self.model
        start = max(0, end - self.config.window_jobs)
        previous = self.model
        if previous is not None:
            self._collect(previous, self._calibrated_upto)
        else:
            split = start + (end - start) * 4 // 5
            self._collect(self._fit(start, split, version=0), split)
        self.model = self._fit(start, end, version=(previous.version + 1) if previous else 1)
        self._since_train = 0
        self._trained_upto = end
        self._calibrated_upto = end
        return self.model

    def recalibrate(self) -> MemoryModel | None:
        """The same trees with the OOM price re-chosen on the latest unseen outcomes."""
        if self.model is None:
            return None
        self._collect(self.model, self._calibrated_upto)
        self._calibrated_upto = self._size
        self.model = dataclasses.replace(self.model, weight=self._weight())
        return self.model

    def _weight(self) -> float:
        if len(self._under) == 0:
            return MEMORY_WEIGHTS[-1]
        meeting = np.flatnonzero(self._under.mean(axis=0) <= self.config.target_oom_rate)
        return float(_WEIGHTS[meeting[0]]) if meeting.size else MEMORY_WEIGHTS[-1]

    def _fit(self, start: int, end: int, version: int) -> MemoryModel:
        config = self.config
        rows = self._rows[start:end].astype(np.float32)
        labels = self._labels[start:end]
        params = {
            "tree_method": "hist",
            "objective": "reg:quantileerror",
            "quantile_alpha": np.array(MEMORY_LEVELS),
            "max_depth": config.max_depth,
            "eta": config.learning_rate,
            "max_bin": 64,
            "min_child_weight": 5,
            "subsample": 0.8,
            "nthread": config.threads,
            "seed": config.seed,
            "verbosity": 0,
        }
        import xgboost as xgb

        booster = xgb.train(
            params, xgb.DMatrix(rows, label=labels), num_boost_round=config.quantile_trees
        )
        anchors = rows[:, len(FEATURE_NAMES)].astype(np.float64)
        scale = float(np.exp(np.median(anchors + labels)))
        return MemoryModel(booster, self._weight(), scale, version, end - start)

    def _collect(self, model: MemoryModel, since: int) -> None:
        """Each weight's OOMs on jobs ``model`` never saw (rows ``since`` onwards)."""
        if since >= self._size:
            return
        rows = self._rows[since : self._size]
        labels = self._labels[since : self._size] + rows[:, len(FEATURE_NAMES)]
        grid = _grid_log(model, rows)
        chosen = _choose(grid, self._offsets[since : self._size], _WEIGHTS * model.scale_kb)
        under = chosen + _LOG_TOLERANCE < labels[:, None]
        self._under = np.vstack([self._under, under])[-self.config.calibration_jobs :]
