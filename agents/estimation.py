"""The Resource Estimation agent: estimates for every option, and predictions for every job.

Senses ``estimate.requested`` (the Intelligence Plane wants estimates for a workload),
``job.submitted`` (annotate the job with its prediction) and ``estimator.promoted`` (a
new estimator serves: drop the cache). For each request it enumerates every option the
workload allows (``tools.planning.whatif.enumerate_candidates``, the planner's own
enumeration) and asks the estimator chain in order, first answer wins
(``tools.planning.estimation.estimate_first``):

1. this very workload's profiles (``ProfiledWorkloadEstimator``: measured iteration time
   and peak memory from a downsized run the Profiling agent made),
2. the promoted registry estimators (``agents.promotion.RegistryRuntimeEstimator`` for
   generic jobs' run time), loaded when promoted, no restart needed,
3. HARP's trained DNN estimators (``tools.estimators.dnn.adapter.planner_estimators``)
   and, for generic jobs, the history estimator trained on the system's finished jobs,
4. the analytic fallbacks (``tools.planning.whatif.default_estimators``).

It answers ``estimate.ready``. When the answer is not confident (no estimate at all, or
intervals wider than ``max_spread`` high/low, or only untrained fallbacks for a DNN) it
sets ``needs_profiling`` and asks Profiling for downsized runs (``profile.requested``).

``decide`` is pure: the chain is a list of pure estimators sense put together.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.events import (
    Envelope,
    EstimateReady,
    EstimateRequested,
    EstimatorPromoted,
    JobAnnotated,
    JobSubmitted,
    ProfileRequested,
)
from agents.promotion import RUNTIME_TARGET, RegistryRuntimeEstimator, load_runtime_model
from agents.rescheduler import planned_segments
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import ESTIMATES, ESTIMATORS, JOBS
from knowledge_base.catalog import Catalog
from knowledge_base.errors import NotFoundError
from knowledge_base.records import (
    Interval,
    JobRecord,
    JobState,
    PlanOption,
    ProfileRecord,
    ProfileStatus,
    ResourceEstimate,
)
from knowledge_base.store import JobQuery, KnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.planning.analytic import ANALYTIC_ID
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload, estimate_first
from tools.planning.generic import GUESS_ID
from tools.planning.whatif import default_estimators, enumerate_candidates

if TYPE_CHECKING:  # xgboost is heavy: imported where a history estimator is trained
    from tools.estimators.history import HistoryEstimator

__all__ = [
    "PROFILE_FAMILY",
    "Annotate",
    "EstimationConfig",
    "EstimationObservation",
    "ProfiledWorkloadEstimator",
    "ResourceEstimation",
    "estimate_all",
    "needs_profiling",
]

log = logging.getLogger(__name__)

PROFILE_FAMILY = "workload"
"""Profiles of users' own workloads (not the model zoo) carry this family."""

FALLBACK_IDS = frozenset({ANALYTIC_ID, GUESS_ID})


class EstimationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_spread: float = Field(
        default=4.0, gt=1, description="An interval wider than high/low = this is not confident"
    )
    max_estimates: int = Field(default=2000, ge=1, description="Most options in one answer")
    history_min_jobs: int = Field(default=1000, ge=1, description="To train a history estimator")
    history_jobs: int = Field(default=50_000, ge=1)
    history_retrain_growth: float = Field(
        default=0.1,
        ge=0,
        description="Retrain a system's history estimator once the jobs submitted since its "
        "training reach this fraction of what it trained on (0: whenever one is new)",
    )


# -- the estimator built from a workload's own profiles ------------------------------------


@dataclass(frozen=True)
class ProfiledWorkloadEstimator:
    """A workload's run time and memory from its own downsized profiling runs.

    Per step = the profiled median iteration time, scaled linearly with the batch size
    (a CPU or a saturated GPU does proportionally more work per sample); run time =
    start-up + epochs x steps per epoch x per step. Memory = the profiled peak. Only
    hardware that was profiled (same system and node type) is answered; intervals are
    x0.85-x1.4 for time (the run's own noise, the machine's other load) and x0.9-x1.25
    for memory.
    """

    model: str
    profiles: tuple[ProfileRecord, ...]

    @property
    def estimator_id(self) -> str:
        return f"profiled-{self.model.rsplit('/', 1)[-1]}"

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining) or workload.model != self.model:
            return NoEstimate("no profile of this workload")
        matching = [
            p
            for p in self.profiles
            if p.hardware.get("system") == candidate.system.name
            and p.hardware.get("node_type") == candidate.node_type.name
            and int(p.hardware.get("gpus", 0)) == candidate.gpus_per_node
            and p.iteration_s is not None
        ]
        if not matching:
            return NoEstimate(
                f"{self.model} was not profiled on {candidate.where} ({candidate.node_type.name})"
            )
        batch = candidate.batch_size or workload.batch_sizes[0]
        best = min(matching, key=lambda p: abs(int(p.config.get("batch_size", batch)) - batch))
        profiled_batch = int(best.config.get("batch_size", batch)) or batch
        assert best.iteration_s is not None
        step_s = best.iteration_s * batch / profiled_batch
        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        startup_s = float(best.config.get("startup_s", 5.0))
        point = startup_s + steps * step_s
        runtime = Interval(point=point, low=point * 0.85, high=point * 1.4, coverage=0.8)
        peak = best.peak_memory_mb or 1024.0
        memory_point = peak * (1 + 0.1 * max(0.0, batch / profiled_batch - 1))
        memory = Interval(
            point=memory_point, low=memory_point * 0.9, high=memory_point * 1.25, coverage=0.8
        )
        spread = (
            statistics.pstdev([p.iteration_s or 0.0 for p in matching]) if len(matching) > 1 else 0
        )
        return ResourceEstimate(
            option=candidate.option(runtime, memory, batch),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.estimator_id,
            validation_error=spread / best.iteration_s if best.iteration_s else None,
            error_metric="profile spread",
            label=f"measured: {len(matching)} profiling run(s) of this workload on "
            f"{candidate.node_type.name}",
        )


def estimate_all(
    spec: WorkloadSpec, catalog: Catalog, chain: Sequence[Estimator], *, limit: int
) -> list[ResourceEstimate]:
    """The first estimate of ``chain`` for every option ``spec`` allows (pure)."""
    found: list[ResourceEstimate] = []
    for candidate in enumerate_candidates(spec, catalog):
        if not isinstance(candidate, Candidate):
            continue
        answer = estimate_first(chain, spec.workload, candidate)
        if isinstance(answer, ResourceEstimate):
            found.append(answer)
            if len(found) >= limit:
                break
    return found


def needs_profiling(
    spec: WorkloadSpec, estimates: Sequence[ResourceEstimate], max_spread: float
) -> str | None:
    """Why the estimates are not confident enough (None: they are). DNN training only."""
    if not isinstance(spec.workload, DNNTraining):
        return None
    if not estimates:
        return f"no estimator knows workload.model={spec.workload.model!r}"
    wide = [e for e in estimates if e.runtime_s.high > max_spread * max(e.runtime_s.low, 1e-9)]
    if len(wide) * 2 > len(estimates):
        first = wide[0]
        return (
            f"estimates too wide to plan on: {first.runtime_s.low:.0f}-"
            f"{first.runtime_s.high:.0f} s ({first.estimator_id}) is more than x{max_spread:g}"
        )
    if all(e.estimator_id in FALLBACK_IDS for e in estimates):
        return "only the untrained analytic fallback knows this workload"
    return None


# -- the agent -------------------------------------------------------------------------------


class EstimationObservation(Observation):
    kind: Literal["request", "annotate"]
    plan_id: str | None = None
    spec: WorkloadSpec | None = None
    catalog: Catalog | None = None
    chain: list[object] = Field(default_factory=list, description="Estimators, in order")
    submitted: JobSubmitted | None = None
    prediction: ResourceEstimate | None = None


class Annotate(Action):
    record: JobRecord
    estimate: ResourceEstimate


@dataclass(frozen=True)
class _TrainedHistory:
    jobs: int  # how many records it trained on
    latest: datetime  # the latest submit time among them
    estimator: HistoryEstimator


class ResourceEstimation(Agent[EstimationObservation]):
    """Answers estimate requests and annotates submitted jobs with their predictions."""

    name = "resource-estimation"
    topics = (ESTIMATES, JOBS, ESTIMATORS)

    def __init__(self, kb: KnowledgeBase, config: EstimationConfig | None = None) -> None:
        self.kb = kb
        self.config = config or EstimationConfig()
        self._registry: RegistryRuntimeEstimator | None = None
        self._registry_loaded = False
        self._history: dict[str, _TrainedHistory] = {}

    async def _registry_estimators(self) -> list[RegistryRuntimeEstimator]:
        if not self._registry_loaded:
            record = await self.kb.promoted_estimator(RUNTIME_TARGET)
            self._registry = None
            if record is not None:
                try:
                    self._registry = RegistryRuntimeEstimator(record, load_runtime_model(record))
                except (OSError, ValueError) as exc:
                    log.warning("promoted estimator %s cannot be loaded: %s", record.id, exc)
            self._registry_loaded = True
        return [self._registry] if self._registry is not None else []

    async def _history_estimators(
        self, spec: WorkloadSpec, catalog: Catalog, now: datetime
    ) -> list[Estimator]:
        """History estimators for generic jobs (trained per system, cached by job count),
        asked about a job submitted at ``now``."""
        if not isinstance(spec.workload, GenericJob):
            return []
        from tools.planning.generic import HistoryRuntimeEstimator

        found: list[Estimator] = []
        for system in spec.goals.systems or catalog.names():
            trained = await self._trained_history(system)
            if trained is not None:
                found.append(
                    HistoryRuntimeEstimator(
                        system,
                        trained.estimator,
                        user=spec.user,
                        now_s=now.timestamp(),
                    )
                )
        return found

    async def _trained_history(self, system: str) -> _TrainedHistory | None:
        """The system's history estimator, retrained once enough new jobs arrived.

        Retraining on every new job would cost a full training (tens of thousands of jobs)
        per request at a busy center; instead only the jobs submitted since the last
        training are counted, and a new model is trained when they reach
        ``history_retrain_growth`` of what the last one learned from.
        """
        from tools.planning.generic import train_history

        config = self.config
        cached = self._history.get(system)
        if cached is not None:
            newer = await self.kb.query_jobs(
                JobQuery(system=system, submitted_after=cached.latest, limit=config.history_jobs)
            )
            if len(newer) < max(1.0, config.history_retrain_growth * cached.jobs):
                return cached
        records = await self.kb.query_jobs(JobQuery(system=system, limit=config.history_jobs))
        if len(records) < config.history_min_jobs:
            return None
        estimator = await asyncio.to_thread(train_history, records)
        if estimator is None:
            return cached
        latest = max(record.submit_time for record in records)
        self._history[system] = fresh = _TrainedHistory(len(records), latest, estimator)
        return fresh

    async def chain(self, spec: WorkloadSpec, catalog: Catalog, now: datetime) -> list[Estimator]:
        """The estimators for ``spec``, best first, for a job submitted at ``now``."""
        chain: list[Estimator] = []
        workload = spec.workload
        if isinstance(workload, DNNTraining):
            profiles = [
                p
                for p in await self.kb.query_profiles(
                    family=PROFILE_FAMILY, status=ProfileStatus.OK
                )
                if p.model == workload.model
            ]
            if profiles:
                chain.append(ProfiledWorkloadEstimator(workload.model, tuple(profiles)))
        chain.extend(registry.at(now) for registry in await self._registry_estimators())
        if isinstance(workload, DNNTraining):
            try:
                from tools.estimators.dnn.adapter import planner_estimators

                chain.extend(planner_estimators(spec))
            except Exception as exc:  # another team's work in progress must not stop us
                log.debug("HARP DNN estimators unavailable: %s", exc)
        chain.extend(await self._history_estimators(spec, catalog, now))
        chain.extend(default_estimators(spec))
        return chain

    async def sense(self, event: Envelope) -> EstimationObservation | None:
        payload = event.payload
        if isinstance(payload, EstimatorPromoted):
            self._registry_loaded = False  # serve the new one from the next request
            return None
        if isinstance(payload, EstimateRequested):
            catalog = await self.kb.get_catalog()
            return EstimationObservation(
                event=event,
                kind="request",
                plan_id=payload.plan_id,
                spec=payload.spec,
                catalog=catalog,
                # the request's time, not the clock's: decisions replay, simulations repeat
                chain=list(await self.chain(payload.spec, catalog, event.time)),
            )
        if isinstance(payload, JobSubmitted):
            try:
                plan = await self.kb.get_plan(payload.plan_id)
            except NotFoundError:
                return None
            prediction = plan.estimate
            if prediction is not None and isinstance(plan.spec.workload, GenericJob):
                registry = await self._registry_estimators()
                if registry:
                    catalog = await self.kb.get_catalog()
                    candidate = _candidate(catalog, payload.option)
                    if candidate is not None:
                        answer = registry[0].at(event.time).estimate(plan.spec.workload, candidate)
                        if isinstance(answer, ResourceEstimate):
                            prediction = answer
            if prediction is None:
                return None
            segments = planned_segments(plan)
            if segments > 1:  # one job of a cascade runs its share
                share = prediction.runtime_s
                prediction = prediction.model_copy(
                    update={
                        "runtime_s": Interval(
                            point=share.point / segments,
                            low=share.low / segments,
                            high=share.high / segments,
                            coverage=share.coverage,
                        )
                    }
                )
            return EstimationObservation(
                event=event, kind="annotate", submitted=payload, prediction=prediction
            )
        return None

    def decide(self, observation: EstimationObservation) -> list[Action]:
        if observation.kind == "request":
            spec, catalog = observation.spec, observation.catalog
            assert spec is not None and catalog is not None and observation.plan_id
            chain = [e for e in observation.chain if isinstance(e, Estimator)]
            estimates = estimate_all(spec, catalog, chain, limit=self.config.max_estimates)
            why = needs_profiling(spec, estimates, self.config.max_spread)
            actions: list[Action] = [
                Emit(
                    payload=EstimateReady(
                        plan_id=observation.plan_id,
                        estimates=estimates,
                        needs_profiling=why is not None,
                    )
                )
            ]
            if why is not None:
                actions.append(
                    Emit(
                        payload=ProfileRequested(plan_id=observation.plan_id, spec=spec, reason=why)
                    )
                )
            return actions
        submitted, prediction = observation.submitted, observation.prediction
        assert submitted is not None and prediction is not None
        record = JobRecord(
            job_id=submitted.job_id,
            system=submitted.system,
            partition=submitted.option.partition,
            state=JobState.PENDING,
            submit_time=observation.event.time,
            plan_id=submitted.plan_id,
            requested_nodes=submitted.option.nodes,
            requested_cores=submitted.option.nodes * submitted.option.cores_per_node,
            requested_memory_mb=submitted.option.memory_mb,
            requested_walltime_s=submitted.option.walltime_s,
            predicted_runtime_s=round(prediction.runtime_s.point),
            source=f"annotated by {self.name}",
        )
        return [
            Annotate(record=record, estimate=prediction),
            Emit(
                payload=JobAnnotated(
                    system=submitted.system,
                    job_id=submitted.job_id,
                    plan_id=submitted.plan_id,
                    estimator_id=prediction.estimator_id,
                    runtime_s=prediction.runtime_s,
                    memory_mb=prediction.memory_mb,
                )
            ),
        ]

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Annotate):
                await self._annotate(action.record)
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(type(action).__name__)
        return emits

    async def _annotate(self, record: JobRecord) -> None:
        """Store the prediction; never overwrite what the job's end already recorded."""
        try:
            known = await self.kb.get_job(record.system, record.job_id)
        except NotFoundError:
            await self.kb.add_jobs([record])
            return
        if known.predicted_runtime_s is None:
            await self.kb.add_jobs(
                [known.model_copy(update={"predicted_runtime_s": record.predicted_runtime_s})]
            )


def _candidate(catalog: Catalog, option: PlanOption) -> Candidate | None:
    try:
        system = catalog.system(option.system)
        partition = system.partition(option.partition)
    except NotFoundError:
        return None
    node_type = system.node_type_of(partition)
    if node_type is None:
        return None
    return Candidate(
        system,
        partition,
        node_type,
        option.nodes,
        option.cores_per_node,
        option.gpus_per_node,
        option.batch_size,
    )
