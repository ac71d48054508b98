"""The Model Promotion agent: live error vs validation error, retrain, shadow-test, promote.

Senses finished jobs (``job.finished``) and retrain requests
(``estimator.retrain_requested``, from Profiling or an operator); keeps each target's
promoted estimator honest:

1. **Live error.** Every ``evaluate_every`` finished jobs it scores the promoted
   estimator on the jobs that finished since it was trained (MAPE of run time), and
   compares that with the error it was validated with. Live error above
   ``max(validation x drift_ratio, validation + drift_margin)`` is drift.
2. **Retrain.** A candidate is trained on the most recent finished jobs (after drift,
   on those since the incumbent was trained, once there are enough), leaving out the
   latest ``holdout_fraction`` of them.
3. **Shadow evaluation.** Candidate and incumbent predict the held-out jobs (data
   neither was trained on). The candidate is promoted only if its error is lower by at
   least ``min_improvement`` (relative); otherwise it is retired as rejected. A worse
   candidate is never promoted.
4. **Record.** Every decision goes into the registry (the candidate's record carries
   its held-out error and the verdict in ``notes``) and onto the bus as an
   ``estimator.decision``; a promotion also publishes ``estimator.promoted``, on which
   Resource Estimation drops its cache and serves the new estimator from the next
   request, without a restart.

The estimator it manages for ``runtime_s`` is ``LogLinearRuntime``: least squares on
log(run time) over the application (one-hot), log cores and log requested walltime,
with the interval from the residuals' 10th-90th percentiles. It is small on purpose:
fast to retrain on every drift, and enough to follow a center whose run times shift.
Other trainers plug in through ``Trainer`` (a target name -> fit function).

``judge`` and ``drift`` are pure; training is a tool call in ``act``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agents.events import (
    Envelope,
    EstimatorDecision,
    EstimatorPromoted,
    EstimatorRetrainRequested,
    JobFinished,
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
    PlanOption,
    ResourceEstimate,
)
from knowledge_base.store import JobQuery, KnowledgeBase
from knowledge_base.workload import GenericJob
from tools.planning.estimation import Candidate, NoEstimate, Workload
from tools.planning.generic import memory_share_mb

__all__ = [
    "RUNTIME_TARGET",
    "LogLinearRuntime",
    "ModelPromotion",
    "PromotionObservation",
    "PromotionPolicy",
    "RegistryRuntimeEstimator",
    "Retrain",
    "Trainer",
    "Verdict",
    "drift",
    "fit_loglinear",
    "judge",
    "load_runtime_model",
    "mape",
]

RUNTIME_TARGET = "runtime_s"
_MIN_RUN_S = 1.0


# -- the estimator it manages --------------------------------------------------------------


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

    def interval(self, point_s: float) -> Interval:
        low = point_s * math.exp(min(0.0, self.residual_low))
        high = point_s * math.exp(max(0.0, self.residual_high))
        return Interval(point=point_s, low=low, high=high, coverage=0.8)


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


def mape(model: LogLinearRuntime, records: Sequence[JobRecord]) -> float | None:
    """Mean absolute percentage error of run time on ``records`` (None: none usable)."""
    rows = [r for r in records if usable(r)]
    if not rows:
        return None
    errors = [
        abs(model.predict_record(r) - float(r.run_s or 0)) / float(r.run_s or 1) for r in rows
    ]
    return float(np.mean(errors))


def load_runtime_model(record: EstimatorRecord) -> LogLinearRuntime:
    if record.artifact_path is None:
        raise InvalidInputError(
            f"estimator {record.id} has no artifact", field="artifact_path", value=None
        )
    return LogLinearRuntime.model_validate_json(Path(record.artifact_path).read_text())


class RegistryRuntimeEstimator:
    """The promoted runtime model behind the planner's estimator seam (generic jobs)."""

    def __init__(self, record: EstimatorRecord, model: LogLinearRuntime) -> None:
        self.record = record
        self.model = model

    @property
    def estimator_id(self) -> str:
        return self.record.id

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, GenericJob):
            return NoEstimate("the registry runtime model estimates generic jobs only")
        cores = candidate.nodes * candidate.cores_per_node
        point = self.model.predict_s(workload.application, cores, workload.walltime_s)
        runtime = self.model.interval(point)
        high_mb = float(workload.memory_mb) if workload.memory_mb else memory_share_mb(candidate)
        memory = Interval(point=high_mb * 0.8, low=high_mb * 0.5, high=high_mb, coverage=0.8)
        return ResourceEstimate(
            option=PlanOption(
                system=candidate.system.name,
                partition=candidate.partition.name,
                node_type=candidate.node_type.name,
                nodes=candidate.nodes,
                cores_per_node=candidate.cores_per_node,
                gpus_per_node=candidate.gpus_per_node,
                memory_mb=max(1, math.ceil(memory.high)),
                walltime_s=max(1, math.ceil(runtime.high)),
            ),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.record.id,
            validation_error=self.record.validation.get("mape"),
            label=f"promoted runtime model ({self.model.rows} jobs)",
        )


Trainer = Callable[[Sequence[JobRecord]], LogLinearRuntime]
"""Fits a candidate for a target from finished jobs."""


# -- the pure rules ------------------------------------------------------------------------


class PromotionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    evaluate_every: int = Field(default=20, ge=1, description="Finished jobs between checks")
    min_live_jobs: int = Field(default=20, ge=1, description="Live jobs needed to judge drift")
    drift_ratio: float = Field(default=1.5, gt=1)
    drift_margin: float = Field(default=0.05, ge=0, description="Absolute MAPE margin")
    window_jobs: int = Field(default=400, ge=10, description="Recent jobs a candidate sees")
    holdout_fraction: float = Field(default=0.3, gt=0, lt=1)
    min_improvement: float = Field(default=0.05, ge=0, lt=1, description="Relative, to promote")
    min_train_jobs: int = Field(default=30, ge=2)
    lookback_days: float = Field(default=30, gt=0, description="History a window looks at")


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
    if incumbent_error is None:
        return Verdict(
            promote=True,
            reason=f"no promoted estimator yet; candidate's held-out MAPE {candidate_error:.1%}",
        )
    needed = incumbent_error * (1 - policy.min_improvement)
    if candidate_error < needed:
        return Verdict(
            promote=True,
            reason=f"candidate's held-out MAPE {candidate_error:.1%} beats the incumbent's "
            f"{incumbent_error:.1%} on the same jobs",
        )
    return Verdict(
        promote=False,
        reason=f"candidate's held-out MAPE {candidate_error:.1%} is not better than the "
        f"incumbent's {incumbent_error:.1%} by {policy.min_improvement:.0%}: kept the incumbent",
    )


# -- the agent -------------------------------------------------------------------------------


class PromotionObservation(Observation):
    kind: Literal["finished", "retrain"]
    target: str = RUNTIME_TARGET
    incumbent: EstimatorRecord | None = None
    model: LogLinearRuntime | None = None
    live_jobs: list[JobRecord] = Field(default_factory=list)
    reason: str = ""


class Retrain(Action):
    target: str
    reason: str
    live_error: float | None = None
    validation_error: float | None = None
    incumbent_id: str | None = None
    jobs: int = 0


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
        trainers: Mapping[str, Trainer] | None = None,
    ) -> None:
        self.kb = kb
        self.artifacts_dir = artifacts_dir
        self.policy = policy or PromotionPolicy()
        self.trainers: dict[str, Trainer] = dict(trainers or {RUNTIME_TARGET: fit_loglinear})

    async def _incumbent(
        self, target: str
    ) -> tuple[EstimatorRecord | None, LogLinearRuntime | None]:
        record = await self.kb.promoted_estimator(target)
        if record is None:
            return None, None
        try:
            return record, load_runtime_model(record)
        except (OSError, ValueError):
            return record, None

    async def _recent(self, limit: int) -> list[JobRecord]:
        """The latest ``limit`` usable finished jobs, oldest first (by end time)."""
        since = datetime.now(UTC) - timedelta(days=self.policy.lookback_days)
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
            incumbent, model = await self._incumbent(RUNTIME_TARGET)
            recent = await self._recent(self.policy.window_jobs)
            if model is not None:
                live = [j for j in recent if j.end_time and j.end_time > model.trained_until]
            else:
                live = recent
            return PromotionObservation(
                event=event, kind="finished", incumbent=incumbent, model=model, live_jobs=live
            )
        return None

    def decide(self, observation: PromotionObservation) -> list[Action]:
        policy = self.policy
        if observation.kind == "retrain":
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
                )
            ]
        live = observation.live_jobs
        if len(live) < policy.min_live_jobs or len(live) % policy.evaluate_every:
            return []
        incumbent, model = observation.incumbent, observation.model
        if incumbent is None or model is None:
            if len(live) < policy.min_train_jobs:
                return []
            return [
                Retrain(
                    target=RUNTIME_TARGET,
                    reason=f"no promoted {RUNTIME_TARGET} estimator; {len(live)} finished "
                    "jobs to train a first one",
                    jobs=len(live),
                )
            ]
        live_error = mape(model, live)
        validation = incumbent.validation.get("mape")
        if live_error is None or validation is None:
            return []
        if not drift(live_error, validation, policy):
            return [
                Emit(
                    payload=EstimatorDecision(
                        target=RUNTIME_TARGET,
                        decision="no_drift",
                        reason=f"live MAPE {live_error:.1%} on {len(live)} jobs is within what "
                        f"its validation MAPE {validation:.1%} allows",
                        estimator_id=incumbent.id,
                        live_error=live_error,
                        validation_error=validation,
                        jobs=len(live),
                    )
                )
            ]
        return [
            Retrain(
                target=RUNTIME_TARGET,
                reason=f"drift: live MAPE {live_error:.1%} on {len(live)} jobs against a "
                f"validation MAPE of {validation:.1%}",
                live_error=live_error,
                validation_error=validation,
                incumbent_id=incumbent.id,
                jobs=len(live),
            )
        ]

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Retrain):
                emits.extend(await self._retrain(action, cause))
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(type(action).__name__)
        return emits

    async def _retrain(self, action: Retrain, cause: Envelope) -> list[Emit]:
        policy = self.policy
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
                    )
                )
            )
        recent = await self._recent(policy.window_jobs)
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
                    )
                )
            )
            return emits
        candidate = self.trainers[action.target](train)
        # Its data cutoff is the newest job it was shown, held-out ones included: "live"
        # jobs, on which drift is judged, are those that finished after it.
        newest = max((j.end_time for j in pool if j.end_time), default=candidate.trained_until)
        candidate = candidate.model_copy(update={"trained_until": newest})
        candidate_error = mape(candidate, holdout)
        assert candidate_error is not None
        incumbent_error = mape(model, holdout) if model is not None else None
        verdict = judge(candidate_error, incumbent_error, policy)
        # A deterministic id: a redelivered request re-trains into the same record.
        candidate_id = f"{action.target}-{uuid.uuid5(uuid.NAMESPACE_URL, str(cause.id)).hex[:12]}"
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        path = self.artifacts_dir / f"{candidate_id}.json"
        path.write_text(candidate.model_dump_json())
        train_error = mape(candidate, train)
        record = EstimatorRecord(
            id=candidate_id,
            kind=candidate.kind,
            target=action.target,
            status=EstimatorStatus.SHADOW,
            validation={
                "mape": candidate_error,
                **({"train_mape": train_error} if train_error is not None else {}),
                **({"incumbent_mape": incumbent_error} if incumbent_error is not None else {}),
            },
            training_rows=len(train),
            artifact_path=str(path),
            features=["application", "log_cores", "log_requested_walltime_s"],
            created_at=datetime.now(UTC),
            notes=f"shadow-evaluated on {len(holdout)} held-out jobs: {verdict.reason} "
            f"(trained because: {action.reason})",
        )
        await self.kb.put_estimator(record)
        if verdict.promote:
            await self.kb.promote_estimator(candidate_id)
            emits.append(
                Emit(
                    payload=EstimatorDecision(
                        target=action.target,
                        decision="promoted",
                        reason=verdict.reason,
                        estimator_id=incumbent.id if incumbent else None,
                        candidate_id=candidate_id,
                        live_error=action.live_error,
                        validation_error=action.validation_error,
                        candidate_error=candidate_error,
                        incumbent_error=incumbent_error,
                        jobs=len(recent),
                    )
                )
            )
            emits.append(
                Emit(
                    payload=EstimatorPromoted(
                        estimator_id=candidate_id,
                        target=action.target,
                        replaced=incumbent.id if incumbent else None,
                        heldout_error=candidate_error,
                    )
                )
            )
        else:
            await self.kb.put_estimator(
                record.model_copy(update={"status": EstimatorStatus.RETIRED})
            )
            emits.append(
                Emit(
                    payload=EstimatorDecision(
                        target=action.target,
                        decision="rejected",
                        reason=verdict.reason,
                        estimator_id=incumbent.id if incumbent else None,
                        candidate_id=candidate_id,
                        live_error=action.live_error,
                        validation_error=action.validation_error,
                        candidate_error=candidate_error,
                        incumbent_error=incumbent_error,
                        jobs=len(recent),
                    )
                )
            )
        return emits
