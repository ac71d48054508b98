"""The Model Promotion agent: live error vs validation error, retrain, shadow-test, promote.

Senses finished jobs (``job.finished``) and retrain requests
(``estimator.retrain_requested``, from Profiling or an operator); keeps each target's
promoted estimator honest:

1. **Live error.** After every ``evaluate_every`` finished jobs it has sensed since its
   last evaluation (a counter, not the size of a window: once the window is full that
   would be every job), it scores the promoted estimator on the jobs that finished since
   it was trained, and compares that with the error it was validated with. Live error
   above ``max(validation x drift_ratio, validation + drift_margin)`` is drift. The
   error is the policy's ``metric``: by default the mean absolute log error,
   |ln(predicted / actual)| (relative and symmetric; MAPE, also recorded, explodes on
   the short jobs every center has: a 1 s job predicted at 5 min is 29,900%).
2. **Retrain.** Candidates are trained on the most recent finished jobs (after drift,
   on those since the incumbent was trained, once there are enough), leaving out the
   latest ``holdout_fraction`` of them. For ``runtime_s`` there are two: the center's
   history estimator (``tools.estimators.history``, XGBoost over each job's request and
   the recent history of its user, application and shape; ``HistoryRuntime``) and a
   log-linear model (``LogLinearRuntime``) as its challenger, which wins where the
   history has little to go on (no users, few jobs: it needs 50 to train at all).
3. **Shadow evaluation.** Candidates and incumbent predict the held-out jobs (data none
   was trained on; the history estimator online, each job at its submit time). The best
   candidate is promoted only if its error is lower than the incumbent's by at least
   ``min_improvement`` (relative); otherwise it is retired as rejected. A worse
   candidate is never promoted.
4. **Record.** Every decision goes into the registry (each candidate's record carries
   its held-out errors and the verdict in ``notes``; the challenger that lost is retired
   with the numbers) and onto the bus as an ``estimator.decision``; a promotion also
   publishes ``estimator.promoted``, on which Resource Estimation drops its cache and
   serves the new estimator from the next request, without a restart.

DNN time on GPUs (Profiling's ``dnn_runtime_s`` requests) is retrained in
``agents.promotion_gpu``: a per-GPU correction of the per-operator GPU model, fitted on
the center's own GPU step measurements and promoted only when its held-out error drops.

Artifacts are JSON under ``artifacts_dir``: the log-linear model's coefficients; the
history estimator's settings and the jobs it saw (replayed on load: no pickles). Other
trainers plug in through ``Trainer`` (finished jobs -> a ``RuntimeModel``).

``judge`` and ``drift`` are pure, and so is ``decide``: the heavy work (the history
query, scoring the incumbent on up to ``window_jobs`` jobs, training) runs in ``sense``
and ``act`` in worker threads, off the event loop, and only when an evaluation is due.
"Now" is the time of the event being handled, never the wall clock, so a simulation on
its own clock looks back over its own history and replays the same decisions. The
counter lives in memory: after a restart the next evaluation comes ``evaluate_every``
jobs later.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import json
import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agents.events import (
    Envelope,
    EstimatorDecision,
    EstimatorPromoted,
    EstimatorRetrainRequested,
    JobFinished,
)
from agents.promotion_gpu import (
    GPU_TARGETS,
    RetrainGpuStep,
    record_finished_gpu_job,
    retrain_gpu,
)
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import ESTIMATORS, JOBS
from knowledge_base.errors import InvalidInputError, NotFoundError
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    Interval,
    JobRecord,
    JobState,
    ResourceEstimate,
)
from knowledge_base.store import JobQuery, KnowledgeBase
from knowledge_base.workload import GenericJob
from tools.planning.estimation import Candidate, NoEstimate, Workload
from tools.planning.generic import memory_share_mb

if TYPE_CHECKING:  # imported where used: xgboost is heavy and only the history model needs it
    from tools.estimators.history import HistoryEstimator

__all__ = [
    "DEFAULT_TRAINERS",
    "RUNTIME_TARGET",
    "Evaluated",
    "HistoryArtifact",
    "HistoryRuntime",
    "LogLinearRuntime",
    "Metric",
    "ModelPromotion",
    "PromotionObservation",
    "PromotionPolicy",
    "RegistryRuntimeEstimator",
    "Retrain",
    "RuntimeModel",
    "Shadowed",
    "Trainer",
    "Verdict",
    "best_candidate",
    "drift",
    "errors_of",
    "fit_history",
    "fit_loglinear",
    "judge",
    "load_runtime_model",
    "log_error",
    "mape",
    "metric_name",
    "score",
    "usable",
]

log = logging.getLogger(__name__)

RUNTIME_TARGET = "runtime_s"
_MIN_RUN_S = 1.0

Metric = Literal["log", "mape"]
_VALIDATION_KEY: dict[str, str] = {"log": "log_error", "mape": "mape"}


# -- the estimators it manages ---------------------------------------------------------------


@runtime_checkable
class RuntimeModel(Protocol):
    """What Model Promotion needs of a run-time estimator it trains, scores and serves."""

    @property
    def kind(self) -> str: ...

    @property
    def trained_until(self) -> datetime: ...

    @property
    def rows(self) -> int: ...

    @property
    def features(self) -> list[str]: ...

    def predict_records(self, records: Sequence[JobRecord]) -> list[float]:
        """Each finished job's run time as predicted at its submit time (input order)."""
        ...

    def what_if(
        self, *, application: str | None, cores: int, requested_s: int | None, now: datetime
    ) -> Interval:
        """The run time of a job not yet submitted (changes nothing)."""
        ...

    def with_trained_until(self, when: datetime) -> RuntimeModel: ...

    def to_json(self) -> str: ...


class LogLinearRuntime(BaseModel):
    """log(run s) = w . [1, app one-hot, log(1 + cores), log(1 + requested s), has request]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["loglinear-runtime"] = "loglinear-runtime"
    applications: list[str]
    coefficients: list[float]
    residual_low: float = Field(description="10th percentile of log residuals")
    residual_high: float = Field(description="90th percentile of log residuals")
    trained_until: datetime = Field(
        description="End time of the newest job it was trained or validated on"
    )
    rows: int = Field(ge=1)

    @property
    def features(self) -> list[str]:
        return ["application", "log_cores", "log_requested_walltime_s"]

    def _row(
        self, application: str | None, cores: int | None, requested_s: int | None
    ) -> list[float]:
        apps = [1.0 if application == a else 0.0 for a in self.applications]
        return [
            1.0,
            *apps,
            math.log1p(cores or 1),
            math.log1p(requested_s or 0),
            1.0 if requested_s else 0.0,
        ]

    def predict_s(
        self, application: str | None, cores: int | None, requested_s: int | None
    ) -> float:
        value = float(np.dot(self.coefficients, self._row(application, cores, requested_s)))
        return max(_MIN_RUN_S, math.exp(min(value, 40.0)))

    def predict_record(self, record: JobRecord) -> float:
        return self.predict_s(
            record.application, record.requested_cores, record.requested_walltime_s
        )

    def predict_records(self, records: Sequence[JobRecord]) -> list[float]:
        return [self.predict_record(r) for r in records]

    def interval(self, point_s: float) -> Interval:
        low = point_s * math.exp(min(0.0, self.residual_low))
        high = point_s * math.exp(max(0.0, self.residual_high))
        # 10th-90th percentiles of its own training residuals: not calibrated held out.
        return Interval(point=point_s, low=low, high=high, coverage=0.8, coverage_basis="in_sample")

    def what_if(
        self, *, application: str | None, cores: int, requested_s: int | None, now: datetime
    ) -> Interval:
        return self.interval(self.predict_s(application, cores, requested_s))

    def with_trained_until(self, when: datetime) -> LogLinearRuntime:
        return self.model_copy(update={"trained_until": when})

    def to_json(self) -> str:
        return self.model_dump_json()


def usable(record: JobRecord) -> bool:
    """A finished job the runtime model can learn from or be scored on."""
    return (
        record.state is JobState.COMPLETED
        and record.run_s is not None
        and record.run_s > 0
        and record.end_time is not None
    )


def fit_loglinear(records: Sequence[JobRecord], *, ridge: float = 1e-3) -> LogLinearRuntime:
    """Least squares (lightly ridged) on log run time; raises on no usable rows."""
    rows = [r for r in records if usable(r)]
    if not rows:
        raise InvalidInputError("no completed jobs with a run time to train on", field="records")
    apps = sorted({r.application or "" for r in rows})[:200]
    probe = LogLinearRuntime(
        applications=apps,
        coefficients=[0.0] * (len(apps) + 4),
        residual_low=0,
        residual_high=0,
        trained_until=max(r.end_time for r in rows if r.end_time),
        rows=len(rows),
    )
    x = np.array(
        [probe._row(r.application, r.requested_cores, r.requested_walltime_s) for r in rows]
    )
    y = np.log(np.array([max(float(r.run_s or 0), _MIN_RUN_S) for r in rows]))
    a = x.T @ x + ridge * np.eye(x.shape[1])
    w = np.linalg.solve(a, x.T @ y)
    residuals = y - x @ w
    return probe.model_copy(
        update={
            "coefficients": [float(v) for v in w],
            "residual_low": float(np.percentile(residuals, 10)),
            "residual_high": float(np.percentile(residuals, 90)),
        }
    )


class HistoryArtifact(BaseModel):
    """What a trained history estimator is stored as: its settings and the jobs it saw.

    No pickled trees: loading replays ``jobs`` through a fresh ``HistoryEstimator`` with
    the same settings (one training at the end; XGBoost on one thread with a fixed seed is
    deterministic), then lets it observe ``observed`` (the held-out jobs: they update the
    features, never the trees). The result predicts exactly what the trained one did.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["history-runtime"] = "history-runtime"
    config: dict[str, Any] = Field(description="HistoryConfig, dumped")
    jobs: list[JobRecord] = Field(min_length=1, description="What the trees were trained on")
    observed: list[JobRecord] = Field(
        default_factory=list, description="Seen after training: features only"
    )
    trained_until: datetime
    rows: int = Field(ge=1)


class HistoryRuntime:
    """The history estimator (``tools.estimators.history``) as a registry run-time model.

    Trained on a window of the center's finished jobs, through the estimator's public API
    only (``HistoryEstimator.learn_history``, ``submit``, ``observe``, ``predict``). Its
    point is the estimator's own (``HistoryPrediction.runtime_interval``: the candidate
    with the best expected accuracy, within the calibrated safe quantile).
    """

    kind = "history-runtime"

    def __init__(self, artifact: HistoryArtifact, estimator: HistoryEstimator) -> None:
        self.artifact = artifact
        self._estimator = estimator

    @classmethod
    def from_artifact(cls, artifact: HistoryArtifact) -> HistoryRuntime:
        from tools.estimators.features import HistoryJob
        from tools.estimators.history import HistoryConfig, HistoryEstimator

        estimator = HistoryEstimator(HistoryConfig.model_validate(artifact.config))
        estimator.learn_history(HistoryJob.from_job_record(r) for r in artifact.jobs)
        if estimator.model is None:
            raise InvalidInputError(
                f"the history estimator did not train on {len(artifact.jobs)} jobs",
                field="jobs",
            )
        # Observed after training: learn_history with retraining out of reach (the
        # config's retrain_min_jobs) only moves the features on.
        estimator.learn_history(HistoryJob.from_job_record(r) for r in artifact.observed)
        return cls(artifact, estimator)

    @property
    def trained_until(self) -> datetime:
        return self.artifact.trained_until

    @property
    def rows(self) -> int:
        return self.artifact.rows

    @property
    def features(self) -> list[str]:
        from tools.estimators.features import FEATURE_NAMES

        return list(FEATURE_NAMES)

    def predict_records(self, records: Sequence[JobRecord]) -> list[float]:
        """Online, as the estimator is meant to run: each job predicted when submitted, then
        observed when it ends, in time order, on a copy (this model never changes)."""
        from tools.estimators.features import HistoryJob

        estimator = copy.deepcopy(self._estimator)
        order = sorted(range(len(records)), key=lambda i: records[i].submit_time)
        predictions: dict[int, float] = {}
        ending: list[tuple[float, int, HistoryJob]] = []
        for i in order:
            job = HistoryJob.from_job_record(records[i])
            while ending and ending[0][0] < job.submit_time_s:
                estimator.observe(heapq.heappop(ending)[2])
            predictions[i] = estimator.submit(job).runtime_interval().point
            if job.end_time_s is not None:
                heapq.heappush(ending, (job.end_time_s, i, job))
        return [max(_MIN_RUN_S, predictions[i]) for i in range(len(records))]

    def what_if(
        self, *, application: str | None, cores: int, requested_s: int | None, now: datetime
    ) -> Interval:
        from tools.estimators.features import HistoryJob

        prediction = self._estimator.predict(
            HistoryJob(
                job_id="what-if",
                submit_time_s=now.timestamp(),
                application=application,
                procs=cores,
                requested_time_s=float(requested_s) if requested_s else None,
            )
        )
        interval = prediction.runtime_interval()
        point = max(_MIN_RUN_S, interval.point)
        return Interval(
            point=point,
            low=min(point, interval.low),
            high=max(point, interval.high),
            coverage=interval.coverage,
            coverage_basis=interval.coverage_basis,
        )

    def with_trained_until(self, when: datetime) -> HistoryRuntime:
        artifact = self.artifact.model_copy(update={"trained_until": when})
        return HistoryRuntime(artifact, self._estimator)

    def observing(self, records: Sequence[JobRecord]) -> HistoryRuntime:
        """This model, having also seen ``records`` (features only; the trees stay)."""
        from tools.estimators.features import HistoryJob

        estimator = copy.deepcopy(self._estimator)
        estimator.learn_history(HistoryJob.from_job_record(r) for r in records)
        observed = [*self.artifact.observed, *records]
        return HistoryRuntime(self.artifact.model_copy(update={"observed": observed}), estimator)

    def to_json(self) -> str:
        return self.artifact.model_dump_json()


def fit_history(records: Sequence[JobRecord], *, min_rows: int = 50) -> HistoryRuntime:
    """The history estimator trained once on ``records`` (raises with fewer than ``min_rows``).

    Its settings are the estimator's defaults but for the schedule: one training on all
    the rows given (``first_train_jobs`` = their number) and none after it, because Model
    Promotion decides when a new model is trained, not the estimator.
    """
    from tools.estimators.history import HistoryConfig

    rows = sorted((r for r in records if usable(r)), key=lambda r: r.submit_time)
    if len(rows) < max(10, min_rows):
        raise InvalidInputError(
            f"{len(rows)} completed jobs; the history estimator trains on at least "
            f"{max(10, min_rows)}",
            field="records",
            value=len(rows),
        )
    size = len(rows)
    config = HistoryConfig(
        first_train_jobs=size,
        retrain_min_jobs=10**12,
        retrain_fraction=0.0,
        window_jobs=max(10, size),
        calibration_jobs=max(10, size),
    )
    artifact = HistoryArtifact(
        config=config.model_dump(mode="json"),
        jobs=rows,
        trained_until=max(r.end_time for r in rows if r.end_time),
        rows=size,
    )
    return HistoryRuntime.from_artifact(artifact)


def _errors(model: RuntimeModel, records: Sequence[JobRecord]) -> list[tuple[float, float]]:
    rows = [r for r in records if usable(r)]
    if not rows:
        return []
    predicted = model.predict_records(rows)
    return [(max(p, _MIN_RUN_S), float(r.run_s or 1)) for p, r in zip(predicted, rows, strict=True)]


def mape(model: RuntimeModel, records: Sequence[JobRecord]) -> float | None:
    """Mean absolute percentage error of run time on ``records`` (None: none usable)."""
    pairs = _errors(model, records)
    return float(np.mean([abs(p - r) / r for p, r in pairs])) if pairs else None


def log_error(model: RuntimeModel, records: Sequence[JobRecord]) -> float | None:
    """Mean |ln(predicted / actual)| of run time on ``records`` (None: none usable).

    Relative and symmetric: predicting twice or half the run time costs the same, and a
    one-second job predicted at five minutes costs ln 300 = 5.7, not MAPE's 29,900%.
    """
    pairs = _errors(model, records)
    return float(np.mean([abs(math.log(p / r)) for p, r in pairs])) if pairs else None


def errors_of(model: RuntimeModel, records: Sequence[JobRecord]) -> dict[str, float]:
    """Both metrics from one pass of predictions ({} when no job is usable)."""
    pairs = _errors(model, records)
    if not pairs:
        return {}
    return {
        "log_error": float(np.mean([abs(math.log(p / r)) for p, r in pairs])),
        "mape": float(np.mean([abs(p - r) / r for p, r in pairs])),
    }


def score(model: RuntimeModel, records: Sequence[JobRecord], metric: Metric) -> float | None:
    return log_error(model, records) if metric == "log" else mape(model, records)


def load_runtime_model(record: EstimatorRecord) -> RuntimeModel:
    """The model behind a registry record (either kind), from its JSON artifact."""
    if record.artifact_path is None:
        raise InvalidInputError(
            f"estimator {record.id} has no artifact", field="artifact_path", value=None
        )
    text = Path(record.artifact_path).read_text()
    kind = json.loads(text).get("kind")
    if kind == HistoryRuntime.kind:
        return HistoryRuntime.from_artifact(HistoryArtifact.model_validate_json(text))
    return LogLinearRuntime.model_validate_json(text)


class RegistryRuntimeEstimator:
    """The promoted runtime model behind the planner's estimator seam (generic jobs)."""

    def __init__(
        self, record: EstimatorRecord, model: RuntimeModel, *, now: datetime | None = None
    ) -> None:
        """``now``: when the job is submitted (the request's time); None: the wall clock."""
        self.record = record
        self.model = model
        self.now = now

    def at(self, now: datetime) -> RegistryRuntimeEstimator:
        """This estimator, asked about a job submitted at ``now`` (a simulation's time)."""
        return RegistryRuntimeEstimator(self.record, self.model, now=now)

    @property
    def estimator_id(self) -> str:
        return self.record.id

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, GenericJob):
            return NoEstimate("the registry runtime model estimates generic jobs only")
        cores = candidate.nodes * candidate.cores_per_node
        runtime = self.model.what_if(
            application=workload.application,
            cores=cores,
            requested_s=workload.walltime_s,
            now=self.now or datetime.now(UTC),
        )
        high_mb = float(workload.memory_mb) if workload.memory_mb else memory_share_mb(candidate)
        memory = Interval(
            point=high_mb * 0.8, low=high_mb * 0.5, high=high_mb, coverage_basis="assumed"
        )
        metric = "log_error" if "log_error" in self.record.validation else "mape"
        return ResourceEstimate(
            option=candidate.option(runtime, memory),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.record.id,
            validation_error=self.record.validation.get(metric),
            error_metric=metric,
            label=f"promoted runtime model ({self.model.kind}, {self.model.rows} jobs)",
        )


Trainer = Callable[[Sequence[JobRecord]], RuntimeModel]
"""Fits a candidate for a target from finished jobs (raises InvalidInputError: too few)."""

DEFAULT_TRAINERS: dict[str, tuple[Trainer, ...]] = {RUNTIME_TARGET: (fit_history, fit_loglinear)}
"""Candidates trained on every retrain, each shadow-evaluated: the history estimator, and
the log-linear model as its challenger (it wins where history has little to go on)."""


# -- the pure rules ------------------------------------------------------------------------


class PromotionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    evaluate_every: int = Field(
        default=20, ge=1, description="New finished jobs since the last evaluation before the next"
    )
    min_live_jobs: int = Field(default=20, ge=1, description="Live jobs needed to judge drift")
    drift_ratio: float = Field(default=1.5, gt=1)
    drift_margin: float = Field(default=0.05, ge=0, description="Absolute margin on the error")
    window_jobs: int = Field(default=400, ge=10, description="Recent jobs a candidate sees")
    holdout_fraction: float = Field(default=0.3, gt=0, lt=1)
    min_improvement: float = Field(default=0.05, ge=0, lt=1, description="Relative, to promote")
    min_train_jobs: int = Field(default=30, ge=2)
    lookback_days: float = Field(default=30, gt=0, description="History a window looks at")
    metric: Metric = Field(
        default="log",
        description="What drift and promotion are judged on: 'log' (mean |ln(predicted/"
        "actual)|) or 'mape'; both are recorded",
    )


def metric_name(metric: Metric) -> str:
    return "mean |log error|" if metric == "log" else "MAPE"


def _value(error: float, metric: Metric) -> str:
    return f"{error:.3f}" if metric == "log" else f"{error:.1%}"


def drift(live_error: float, validation_error: float, policy: PromotionPolicy) -> bool:
    """Whether the live error is past what the validation error allows."""
    bound = max(validation_error * policy.drift_ratio, validation_error + policy.drift_margin)
    return live_error > bound


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    promote: bool
    reason: str


def judge(
    candidate_error: float, incumbent_error: float | None, policy: PromotionPolicy
) -> Verdict:
    """Promote only a candidate better on held-out data by ``min_improvement`` (pure)."""
    name = f"held-out {metric_name(policy.metric)}"
    mine = _value(candidate_error, policy.metric)
    if incumbent_error is None:
        return Verdict(promote=True, reason=f"no promoted estimator yet; candidate's {name} {mine}")
    theirs = _value(incumbent_error, policy.metric)
    needed = incumbent_error * (1 - policy.min_improvement)
    if candidate_error < needed:
        return Verdict(
            promote=True,
            reason=f"candidate's {name} {mine} beats the incumbent's {theirs} on the same jobs",
        )
    return Verdict(
        promote=False,
        reason=f"candidate's {name} {mine} is not better than the incumbent's {theirs} by "
        f"{policy.min_improvement:.0%}: kept the incumbent",
    )


class Shadowed(BaseModel):
    """One candidate after the shadow test: its errors on the held-out jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    model: Any = Field(description="The RuntimeModel")
    error: float = Field(ge=0, description="On the policy's metric")
    errors: dict[str, float] = Field(description="Every metric, held out")
    train_errors: dict[str, float] = Field(default_factory=dict)


def best_candidate(candidates: Sequence[Shadowed]) -> Shadowed:
    """The candidate with the lowest held-out error (the first on a tie)."""
    return min(candidates, key=lambda c: c.error)


# -- the agent -------------------------------------------------------------------------------


class PromotionObservation(Observation):
    kind: Literal["finished", "retrain"]
    target: str = RUNTIME_TARGET
    incumbent: EstimatorRecord | None = None
    model: RuntimeModel | None = None
    new_jobs: int = Field(
        default=0, ge=0, description="Finished jobs sensed since the last evaluation, this one too"
    )
    live_jobs: int = Field(
        default=0, ge=0, description="Jobs finished since the incumbent was trained (all: none)"
    )
    live_error: float | None = Field(default=None, description="The incumbent's, on live jobs")
    validation_error: float | None = None
    metric: Metric = "log"
    reason: str = ""


class Evaluated(Action):
    """An evaluation took place: the count of new jobs starts again from zero."""


class Retrain(Action):
    target: str
    reason: str
    live_error: float | None = None
    validation_error: float | None = None
    incumbent_id: str | None = None
    jobs: int = 0
    metric: Metric = "log"


def _validation(record: EstimatorRecord, policy: PromotionPolicy) -> tuple[Metric, float | None]:
    """The incumbent's validation error on the policy's metric (older records: MAPE only)."""
    wanted = _VALIDATION_KEY[policy.metric]
    if wanted in record.validation:
        return policy.metric, record.validation[wanted]
    return "mape", record.validation.get("mape")


class ModelPromotion(Agent[PromotionObservation]):
    """Keeps each target's promoted estimator honest against the jobs that finish."""

    name = "model-promotion"
    topics = (JOBS, ESTIMATORS)

    def __init__(
        self,
        kb: KnowledgeBase,
        artifacts_dir: Path,
        *,
        policy: PromotionPolicy | None = None,
        trainers: Mapping[str, Trainer | Sequence[Trainer]] | None = None,
    ) -> None:
        self.kb = kb
        self.artifacts_dir = artifacts_dir
        self.policy = policy or PromotionPolicy()
        given = trainers if trainers is not None else DEFAULT_TRAINERS
        self.trainers: dict[str, tuple[Trainer, ...]] = {
            target: (found,) if callable(found) else tuple(found) for target, found in given.items()
        }
        # Loaded models by registry id: a history model is rebuilt by replaying its jobs.
        self._models: dict[str, RuntimeModel] = {}
        # Finished jobs sensed since the last evaluation; the last event counted, so that
        # sensing one event again (a retried handler) does not count it twice.
        self._new_jobs = 0
        self._counted: str | None = None

    async def _incumbent(self, target: str) -> tuple[EstimatorRecord | None, RuntimeModel | None]:
        record = await self.kb.promoted_estimator(target)
        if record is None:
            return None, None
        if record.id not in self._models:
            try:
                model = await asyncio.to_thread(load_runtime_model, record)
            except (OSError, ValueError) as exc:
                log.warning("promoted estimator %s cannot be loaded: %s", record.id, exc)
                return record, None
            self._models = {record.id: model}  # only the one serving now is kept
        return record, self._models[record.id]

    async def _recent(self, limit: int, now: datetime) -> list[JobRecord]:
        """The latest ``limit`` usable finished jobs up to ``now``, oldest first (by end)."""
        since = now - timedelta(days=self.policy.lookback_days)
        jobs = await self.kb.query_jobs(JobQuery(submitted_after=since, limit=1_000_000))
        finished = sorted((j for j in jobs if usable(j)), key=lambda j: j.end_time or j.submit_time)
        return finished[-limit:]

    async def sense(self, event: Envelope) -> PromotionObservation | None:
        payload = event.payload
        if isinstance(payload, EstimatorRetrainRequested):
            if payload.target not in self.trainers:
                return PromotionObservation(
                    event=event, kind="retrain", target=payload.target, reason=payload.reason
                )
            incumbent, model = await self._incumbent(payload.target)
            return PromotionObservation(
                event=event,
                kind="retrain",
                target=payload.target,
                incumbent=incumbent,
                model=model,
                reason=payload.reason,
            )
        if isinstance(payload, JobFinished) and usable(payload.job):
            # History is written by the Scheduler (or an importer); make sure this job is in
            # it, whoever reports it, so the numbers below include it.
            try:
                await self.kb.get_job(payload.job.system, payload.job.job_id)
            except NotFoundError:
                await self.kb.add_jobs([payload.job])
            await record_finished_gpu_job(self.kb, payload.job)  # DNN on GPUs only
            if self._counted != str(event.id):
                self._counted = str(event.id)
                self._new_jobs += 1
            observation = PromotionObservation(
                event=event, kind="finished", new_jobs=self._new_jobs
            )
            if self._new_jobs < self.policy.evaluate_every:
                return observation  # not due: nothing heavy on this job
            return await self._live(observation)
        return None

    async def _live(self, observation: PromotionObservation) -> PromotionObservation:
        """The observation with the incumbent's live error (the heavy part, off the loop)."""
        incumbent, model = await self._incumbent(RUNTIME_TARGET)
        recent = await self._recent(self.policy.window_jobs, observation.event.time)
        if model is None:
            return observation.model_copy(update={"incumbent": incumbent, "live_jobs": len(recent)})
        live = [j for j in recent if j.end_time and j.end_time > model.trained_until]
        update: dict[str, Any] = {"incumbent": incumbent, "model": model, "live_jobs": len(live)}
        if incumbent is not None and len(live) >= self.policy.min_live_jobs:
            metric, validation = _validation(incumbent, self.policy)
            update["metric"] = metric
            update["validation_error"] = validation
            update["live_error"] = await asyncio.to_thread(score, model, live, metric)
        return observation.model_copy(update=update)

    def decide(self, observation: PromotionObservation) -> list[Action]:
        policy = self.policy
        if observation.kind == "retrain":
            if observation.target in GPU_TARGETS and observation.target not in self.trainers:
                # DNN time: the per-operator GPU model's correction (agents.promotion_gpu)
                return [RetrainGpuStep(reason=observation.reason or "asked")]
            if observation.target not in self.trainers:
                return [
                    Emit(
                        payload=EstimatorDecision(
                            target=observation.target,
                            decision="skipped",
                            reason=f"no trainer for target {observation.target!r} in this "
                            f"center (trainers: {', '.join(sorted(self.trainers))}); asked "
                            f"because: {observation.reason}",
                        )
                    )
                ]
            return [
                Retrain(
                    target=observation.target,
                    reason=observation.reason,
                    incumbent_id=observation.incumbent.id if observation.incumbent else None,
                    metric=policy.metric,
                )
            ]
        if observation.new_jobs < policy.evaluate_every:
            return []
        live = observation.live_jobs
        if live < policy.min_live_jobs:
            return []  # too few to judge: look again at the next job
        incumbent, model = observation.incumbent, observation.model
        if incumbent is None or model is None:
            if live < policy.min_train_jobs:
                return []
            return [
                Retrain(
                    target=RUNTIME_TARGET,
                    reason=f"no promoted {RUNTIME_TARGET} estimator; {live} finished "
                    "jobs to train a first one",
                    jobs=live,
                    metric=policy.metric,
                ),
                Evaluated(),
            ]
        metric = observation.metric
        live_error, validation = observation.live_error, observation.validation_error
        if live_error is None or validation is None:
            return [Evaluated()]
        name = metric_name(metric)
        if not drift(live_error, validation, policy):
            return [
                Emit(
                    payload=EstimatorDecision(
                        target=RUNTIME_TARGET,
                        decision="no_drift",
                        reason=f"live {name} {_value(live_error, metric)} on {live} jobs "
                        f"is within what its validation {name} {_value(validation, metric)} "
                        "allows",
                        estimator_id=incumbent.id,
                        live_error=live_error,
                        validation_error=validation,
                        jobs=live,
                        metric=metric,
                    )
                ),
                Evaluated(),
            ]
        return [
            Retrain(
                target=RUNTIME_TARGET,
                reason=f"drift: live {name} {_value(live_error, metric)} on {live} jobs "
                f"against a validation {name} of {_value(validation, metric)}",
                live_error=live_error,
                validation_error=validation,
                incumbent_id=incumbent.id,
                jobs=live,
                metric=metric,
            ),
            Evaluated(),  # last: a retried handler finds the evaluation still due
        ]

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Evaluated):
                self._new_jobs = 0
            elif isinstance(action, Retrain):
                emits.extend(await self._retrain(action, cause))
            elif isinstance(action, RetrainGpuStep):
                emits.extend(
                    await retrain_gpu(
                        self.kb,
                        self.artifacts_dir,
                        action,
                        cause,
                        holdout_fraction=self.policy.holdout_fraction,
                    )
                )
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(type(action).__name__)
        return emits

    def _shadow(
        self,
        trainer: Trainer,
        train: Sequence[JobRecord],
        holdout: Sequence[JobRecord],
        newest: datetime,
        metric: Metric,
    ) -> Shadowed | str:
        """Train one candidate and score it on the held-out jobs (or say why it could not)."""
        try:
            candidate = trainer(train)
        except InvalidInputError as exc:
            return str(exc)
        # Its data cutoff is the newest job it was shown, held-out ones included: "live"
        # jobs, on which drift is judged, are those that finished after it.
        candidate = candidate.with_trained_until(newest)
        errors = errors_of(candidate, holdout)
        train_errors = {f"train_{key}": value for key, value in errors_of(candidate, train).items()}
        return Shadowed(
            model=candidate,
            error=errors[_VALIDATION_KEY[metric]],
            errors=errors,
            train_errors=train_errors,
        )

    async def _retrain(self, action: Retrain, cause: Envelope) -> list[Emit]:
        policy = self.policy
        metric = action.metric
        emits: list[Emit] = []
        if action.live_error is not None:
            emits.append(
                Emit(
                    payload=EstimatorDecision(
                        target=action.target,
                        decision="drift",
                        reason=action.reason,
                        estimator_id=action.incumbent_id,
                        live_error=action.live_error,
                        validation_error=action.validation_error,
                        jobs=action.jobs,
                        metric=metric,
                    )
                )
            )
        recent = await self._recent(policy.window_jobs, cause.time)
        incumbent, model = await self._incumbent(action.target)
        pool = recent
        if model is not None:
            # After drift the jobs since the incumbent was trained are what the center
            # looks like now: learn from them alone once they are enough.
            live = [j for j in recent if j.end_time and j.end_time > model.trained_until]
            if len(live) * (1 - policy.holdout_fraction) >= policy.min_train_jobs:
                pool = live
        held = max(1, math.ceil(len(pool) * policy.holdout_fraction))
        train, holdout = pool[:-held], pool[-held:]
        if len(train) < policy.min_train_jobs:
            emits.append(
                Emit(
                    payload=EstimatorDecision(
                        target=action.target,
                        decision="skipped",
                        reason=f"{len(train)} jobs to train on, fewer than min_train_jobs="
                        f"{policy.min_train_jobs}; asked because: {action.reason}",
                        estimator_id=action.incumbent_id,
                        jobs=len(recent),
                        metric=metric,
                    )
                )
            )
            return emits
        newest = max((j.end_time for j in pool if j.end_time), default=cause.time)
        trained: list[Shadowed] = []
        declined: list[str] = []
        for trainer in self.trainers[action.target]:
            # Training is CPU work (XGBoost for the history estimator): off the event loop.
            outcome = await asyncio.to_thread(self._shadow, trainer, train, holdout, newest, metric)
            if isinstance(outcome, str):
                declined.append(outcome)
            else:
                trained.append(outcome)
        if not trained:
            emits.append(
                Emit(
                    payload=EstimatorDecision(
                        target=action.target,
                        decision="skipped",
                        reason=f"no candidate could be trained ({'; '.join(declined)}); "
                        f"asked because: {action.reason}",
                        estimator_id=action.incumbent_id,
                        jobs=len(recent),
                        metric=metric,
                    )
                )
            )
            return emits
        best = best_candidate(trained)
        incumbent_error = (
            await asyncio.to_thread(score, model, holdout, metric) if model is not None else None
        )
        verdict = judge(best.error, incumbent_error, policy.model_copy(update={"metric": metric}))
        # Deterministic ids: a redelivered request re-trains into the same records.
        stem = uuid.uuid5(uuid.NAMESPACE_URL, str(cause.id)).hex[:12]
        ids = {id(c): f"{action.target}-{c.model.kind}-{stem}" for c in trained}
        candidate_id = ids[id(best)]
        others = [c for c in trained if c is not best]
        rivals = "; ".join(f"{c.model.kind} {_value(c.error, metric)}" for c in others) or "none"
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        for shadowed in trained:
            shadowed_model = shadowed.model
            if shadowed is best and verdict.promote and isinstance(shadowed_model, HistoryRuntime):
                # Serving it: let it see the held-out jobs too (its features, not its trees).
                shadowed_model = await asyncio.to_thread(shadowed_model.observing, holdout)
            path = self.artifacts_dir / f"{ids[id(shadowed)]}.json"
            path.write_text(shadowed_model.to_json())
            if shadowed is best and verdict.promote:
                serving: RuntimeModel = shadowed_model  # what loading the artifact gives
            if shadowed is best:
                notes = (
                    f"shadow-evaluated on {len(holdout)} held-out jobs: {verdict.reason}; "
                    f"other candidates: {rivals}{_declined(declined)} (trained because: "
                    f"{action.reason})"
                )
                status = EstimatorStatus.SHADOW
            else:
                notes = (
                    f"shadow-evaluated on {len(holdout)} held-out jobs: "
                    f"{metric_name(metric)} {_value(shadowed.error, metric)}, lost to "
                    f"{candidate_id} ({best.model.kind}, {_value(best.error, metric)}) "
                    f"(trained because: {action.reason})"
                )
                status = EstimatorStatus.RETIRED
            await self.kb.put_estimator(
                EstimatorRecord(
                    id=ids[id(shadowed)],
                    kind=shadowed.model.kind,
                    target=action.target,
                    status=status,
                    validation={
                        **shadowed.errors,
                        **shadowed.train_errors,
                        **(
                            {f"incumbent_{_VALIDATION_KEY[metric]}": incumbent_error}
                            if incumbent_error is not None
                            else {}
                        ),
                    },
                    training_rows=len(train),
                    artifact_path=str(path),
                    features=shadowed.model.features,
                    created_at=cause.time,
                    notes=notes,
                )
            )
        record = await self.kb.get_estimator(candidate_id)
        decision = EstimatorDecision(
            target=action.target,
            decision="promoted" if verdict.promote else "rejected",
            reason=f"{verdict.reason} ({best.model.kind}; other candidates: {rivals}"
            f"{_declined(declined)})",
            estimator_id=incumbent.id if incumbent else None,
            candidate_id=candidate_id,
            live_error=action.live_error,
            validation_error=action.validation_error,
            candidate_error=best.error,
            incumbent_error=incumbent_error,
            jobs=len(recent),
            metric=metric,
        )
        if verdict.promote:
            await self.kb.promote_estimator(candidate_id)
            self._models = {candidate_id: serving}
            emits.append(Emit(payload=decision))
            emits.append(
                Emit(
                    payload=EstimatorPromoted(
                        estimator_id=candidate_id,
                        target=action.target,
                        replaced=incumbent.id if incumbent else None,
                        heldout_error=best.error,
                    )
                )
            )
        else:
            await self.kb.put_estimator(
                record.model_copy(update={"status": EstimatorStatus.RETIRED})
            )
            emits.append(Emit(payload=decision))
        return emits


def _declined(reasons: Sequence[str]) -> str:
    return f"; not trained: {'; '.join(reasons)}" if reasons else ""
