"""The run-time models Model Promotion trains, scores, records and serves.

Moved out of ``agents.promotion`` (which keeps the decision loop: when to evaluate,
retrain, shadow-test and promote) because loading and serving a promoted model is
``tools``' job: the Resource Estimation agent, the planner's chain and the MCP server
serve what the registry promoted through :class:`RegistryRuntimeEstimator` and
:func:`load_runtime_model`, whichever process promoted it.

Two trainers: the center's history estimator (:class:`HistoryRuntime`, XGBoost over each
job's request and the recent history of its user, application and shape; its artifact is
its settings and the jobs it saw, replayed on load: no pickles) and a log-linear model
(:class:`LogLinearRuntime`, coefficients in JSON) as its challenger. Error metrics
(``log_error``: mean |ln(predicted / actual)|; ``mape``) score any ``RuntimeModel``.
Everything here is importable from ``agents.promotion`` as before.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import (
    EstimatorRecord,
    Interval,
    JobRecord,
    JobState,
    ResourceEstimate,
)
from knowledge_base.workload import GenericJob
from tools.planning.estimation import Candidate, NoEstimate, Workload
from tools.planning.generic import memory_share_mb

if TYPE_CHECKING:  # imported where used: xgboost is heavy and only the history model needs it
    from tools.estimators.history.estimator import HistoryEstimator, HistoryPrediction

__all__ = [
    "DEFAULT_TRAINERS",
    "RUNTIME_TARGET",
    "HistoryArtifact",
    "HistoryRuntime",
    "LogLinearRuntime",
    "Metric",
    "RegistryRuntimeEstimator",
    "RuntimeModel",
    "Trainer",
    "errors_of",
    "fit_history",
    "fit_loglinear",
    "load_runtime_model",
    "log_error",
    "mape",
    "memory_oom_rate",
    "promoted_runtime_estimator",
    "score",
    "usable",
]

RUNTIME_TARGET = "runtime_s"
_MIN_RUN_S = 1.0

Metric = Literal["log", "mape"]
VALIDATION_KEY: dict[str, str] = {"log": "log_error", "mape": "mape"}


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
    """The history estimator (``tools.estimators.history.estimator``) as a registry run-time model.

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
        from tools.estimators.history.estimator import HistoryConfig, HistoryEstimator
        from tools.estimators.history.features import HistoryJob

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
        from tools.estimators.history.features import FEATURE_NAMES

        return list(FEATURE_NAMES)

    def _online(self, records: Sequence[JobRecord]) -> list[HistoryPrediction]:
        """Online, as the estimator is meant to run: each job predicted when submitted, then
        observed when it ends, in time order, on a copy (this model never changes)."""
        from tools.estimators.history.features import HistoryJob

        estimator = copy.deepcopy(self._estimator)
        order = sorted(range(len(records)), key=lambda i: records[i].submit_time)
        predictions: dict[int, HistoryPrediction] = {}
        ending: list[tuple[float, int, HistoryJob]] = []
        for i in order:
            job = HistoryJob.from_job_record(records[i])
            while ending and ending[0][0] < job.submit_time_s:
                estimator.observe(heapq.heappop(ending)[2])
            predictions[i] = estimator.submit(job)
            if job.end_time_s is not None:
                heapq.heappush(ending, (job.end_time_s, i, job))
        return [predictions[i] for i in range(len(records))]

    def predict_records(self, records: Sequence[JobRecord]) -> list[float]:
        """Each job's run time, predicted online (``_online``)."""
        return [max(_MIN_RUN_S, p.runtime_interval().point) for p in self._online(records)]

    def memory_requests_mb(self, records: Sequence[JobRecord]) -> list[float | None]:
        """Each job's memory request (MB, the whole job) from the memory model, online;
        None where the memory model did not answer or the job has no core count."""
        requests: list[float | None] = []
        for record, prediction in zip(records, self._online(records), strict=True):
            per_proc_kb = prediction.memory_safe_kb_per_proc
            cores = record.requested_cores
            answered = prediction.memory_source == "model"
            if answered and per_proc_kb is not None and cores:
                requests.append(per_proc_kb * cores / 1024)
            else:
                requests.append(None)
        return requests

    def what_if(
        self, *, application: str | None, cores: int, requested_s: int | None, now: datetime
    ) -> Interval:
        from tools.estimators.history.features import HistoryJob

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
        from tools.estimators.history.features import HistoryJob

        estimator = copy.deepcopy(self._estimator)
        estimator.learn_history(HistoryJob.from_job_record(r) for r in records)
        observed = [*self.artifact.observed, *records]
        return HistoryRuntime(self.artifact.model_copy(update={"observed": observed}), estimator)

    def to_json(self) -> str:
        return self.artifact.model_dump_json()


def memory_oom_rate(model: RuntimeModel, records: Sequence[JobRecord]) -> tuple[float | None, int]:
    """The share of ``records`` with a used memory whose model request was below it, and
    how many were judged; (None, 0) for a model without memory or no such job."""
    if not isinstance(model, HistoryRuntime):
        return None, 0
    with_use = [r for r in records if r.used_memory_mb is not None]
    if not with_use:
        return None, 0
    judged = [
        (request, record.used_memory_mb or 0)
        for record, request in zip(with_use, model.memory_requests_mb(with_use), strict=True)
        if request is not None
    ]
    if not judged:
        return None, 0
    return sum(request < used for request, used in judged) / len(judged), len(judged)


def fit_history(records: Sequence[JobRecord], *, min_rows: int = 50) -> HistoryRuntime:
    """The history estimator trained once on ``records`` (raises with fewer than ``min_rows``).

    Its settings are the estimator's defaults but for the schedule: one training on all
    the rows given (``first_train_jobs`` = their number) and none after it, because Model
    Promotion decides when a new model is trained, not the estimator.
    """
    from tools.estimators.history.estimator import HistoryConfig

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


def promoted_runtime_estimator(record: EstimatorRecord) -> RegistryRuntimeEstimator:
    """The chain's loader for Model Promotion's registry records (generic jobs' run time):
    what the CLI, the MCP server and Resource Estimation serve."""
    return RegistryRuntimeEstimator(record, load_runtime_model(record))


Trainer = Callable[[Sequence[JobRecord]], RuntimeModel]
"""Fits a candidate for a target from finished jobs (raises InvalidInputError: too few)."""

DEFAULT_TRAINERS: dict[str, tuple[Trainer, ...]] = {RUNTIME_TARGET: (fit_history, fit_loglinear)}
"""Candidates trained on every retrain, each shadow-evaluated: the history estimator, and
the log-linear model as its challenger (it wins where history has little to go on)."""


# -- the pure rules ------------------------------------------------------------------------
