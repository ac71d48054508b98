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
   history estimator (``tools.estimators.history.estimator``, XGBoost over each job's request and
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
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

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
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
)
from knowledge_base.store import JobQuery, KnowledgeBase
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.estimators.promoted.candidates import (
    Shadowed,
    best_candidate,
    candidate_record,
    serving_copy,
    shadow,
    write_artifact,
)
from tools.estimators.promoted.runtime import (
    DEFAULT_TRAINERS,
    RUNTIME_TARGET,
    VALIDATION_KEY,
    HistoryArtifact,
    HistoryRuntime,
    LogLinearRuntime,
    Metric,
    RegistryRuntimeEstimator,
    RuntimeModel,
    Trainer,
    errors_of,
    fit_history,
    fit_loglinear,
    load_runtime_model,
    log_error,
    mape,
    memory_oom_rate,
    score,
    usable,
)

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
    "memory_oom_rate",
    "metric_name",
    "score",
    "usable",
]

log = logging.getLogger(__name__)

# The models it manages (trainers, artifacts, loaders, error metrics) live in
# tools.estimators.promoted.runtime, the candidates' training, shadow test, artifacts and
# records in tools.estimators.promoted.candidates; both are re-exported here. The agent
# keeps the decisions: when to evaluate and retrain, and which candidate to promote.


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
    memory_drift_oom_rate: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Retrain when the promoted model's memory request leaves more live jobs "
        "short than this (its target is 2 %): memory drift, judged like run-time drift",
    )
    min_memory_jobs: int = Field(default=20, ge=1, description="Live jobs with a use to judge it")
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
    memory_jobs: int = Field(default=0, ge=0, description="Live jobs with a used memory judged")
    live_oom_rate: float | None = Field(
        default=None, description="Share of them whose memory request was below the use"
    )
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
    wanted = VALIDATION_KEY[policy.metric]
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
        gpu_traces: TraceFolders | None = None,
    ) -> None:
        self.kb = kb
        self.artifacts_dir = artifacts_dir
        self.gpu_traces = gpu_traces  # where the GPU measurements' traces persist
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
        # Newest first from the store, so a center past the cap still reads its latest jobs;
        # twice the limit leaves room for the unusable ones filtered out below.
        query = JobQuery(submitted_after=since, newest_first=True, limit=min(1_000_000, 2 * limit))
        jobs = await self.kb.query_jobs(query)
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
            # it, whoever reports it, so the numbers below include it. Insert-if-absent in
            # one step: a record another writer stored first (the Scheduler's, with the
            # user, request and prediction) is never replaced by this event's copy.
            await self.kb.add_new_jobs([payload.job])
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
            rate, judged = await asyncio.to_thread(memory_oom_rate, model, live)
            update["live_oom_rate"], update["memory_jobs"] = rate, judged
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
        oom = observation.live_oom_rate
        if (
            not drift(live_error, validation, policy)
            and oom is not None
            and observation.memory_jobs >= policy.min_memory_jobs
            and oom > policy.memory_drift_oom_rate
        ):
            return [
                Retrain(
                    target=RUNTIME_TARGET,
                    reason=f"memory drift: the memory request was below the use on {oom:.1%} "
                    f"of {observation.memory_jobs} live jobs (allowed "
                    f"{policy.memory_drift_oom_rate:.0%}); run time within bounds (live {name} "
                    f"{_value(live_error, metric)})",
                    live_error=live_error,
                    validation_error=validation,
                    incumbent_id=incumbent.id,
                    jobs=live,
                    metric=metric,
                ),
                Evaluated(),
            ]
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
                        traces=self.gpu_traces,
                    )
                )
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(type(action).__name__)
        return emits

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
            outcome = await asyncio.to_thread(shadow, trainer, train, holdout, newest, metric)
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
        for shadowed in trained:
            shadowed_model = shadowed.model
            if shadowed is best and verdict.promote:
                # Serving it: what loading the artifact gives.
                shadowed_model = await asyncio.to_thread(serving_copy, shadowed_model, holdout)
                serving: RuntimeModel = shadowed_model
            path = await asyncio.to_thread(
                write_artifact, self.artifacts_dir, ids[id(shadowed)], shadowed_model
            )
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
                candidate_record(
                    shadowed,
                    ids[id(shadowed)],
                    target=action.target,
                    status=status,
                    artifact=path,
                    training_rows=len(train),
                    incumbent_error=incumbent_error,
                    metric=metric,
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
