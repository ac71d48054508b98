"""The Resource Estimation agent: estimates for every option, and predictions for every job.

Senses ``estimate.requested`` (the Intelligence Plane wants estimates for a workload),
``job.submitted`` (annotate the job with its prediction) and ``estimator.promoted`` (a
new estimator serves: drop the cache). For each request it enumerates every option the
workload allows (``tools.planning.whatif.enumerate_candidates``, the planner's own
enumeration) and asks the estimator chain in order, first answer wins
(``tools.planning.estimation.estimate_first``). The chain is the process's one
``tools.planning.chain.EstimatorChain`` (the CLI and the MCP server use the same one):
this workload's profiles, the promoted registry estimator (loaded by
``tools.estimators.promoted.runtime.promoted_runtime_estimator``, when promoted; no
restart needed), the per-hardware
estimators, the history estimator of each system (trained once, retrained when the
knowledge base has enough new jobs), then the analytic fallbacks.

It answers ``estimate.ready``. When the answer is not confident (no estimate at all, or
intervals wider than ``max_spread`` high/low, or only untrained fallbacks for a DNN) it
sets ``needs_profiling`` and asks Profiling for downsized runs (``profile.requested``).

``decide`` is pure: the chain is a list of pure estimators sense put together.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

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
from agents.rescheduler import planned_segments
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import ESTIMATES, ESTIMATORS, JOBS
from knowledge_base.cas import update_job
from knowledge_base.catalog import Catalog
from knowledge_base.errors import NotFoundError
from knowledge_base.records import (
    Interval,
    JobRecord,
    JobState,
    PlanOption,
    ResourceEstimate,
)
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.estimators.promoted.runtime import promoted_runtime_estimator
from tools.planning.analytic import ANALYTIC_ID
from tools.planning.chain import ChainConfig, EstimatorChain
from tools.planning.estimation import Candidate, Estimator, estimate_first
from tools.planning.generic import GUESS_ID
from tools.planning.profiled import PROFILE_FAMILY, ProfiledWorkloadEstimator
from tools.planning.service import shared_chain
from tools.planning.whatif import enumerate_candidates

__all__ = [
    "PROFILE_FAMILY",
    "Annotate",
    "EstimationConfig",
    "EstimationObservation",
    "ProfiledWorkloadEstimator",
    "ResourceEstimation",
    "estimate_all",
    "needs_profiling",
    "promoted_runtime_estimator",
]

log = logging.getLogger(__name__)

FALLBACK_IDS = frozenset({ANALYTIC_ID, GUESS_ID})


class EstimationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_spread: float = Field(
        default=4.0, gt=1, description="An interval wider than high/low = this is not confident"
    )
    max_estimates: int = Field(default=2000, ge=1, description="Most options in one answer")


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
    unavailable: list[str] = Field(default_factory=list, description="Left out, and why")
    submitted: JobSubmitted | None = None
    prediction: ResourceEstimate | None = None


class Annotate(Action):
    record: JobRecord
    estimate: ResourceEstimate


class ResourceEstimation(Agent[EstimationObservation]):
    """Answers estimate requests and annotates submitted jobs with their predictions."""

    name = "resource-estimation"
    topics = (ESTIMATES, JOBS, ESTIMATORS)

    def __init__(
        self,
        kb: KnowledgeBase,
        config: EstimationConfig | None = None,
        *,
        estimators: EstimatorChain | None = None,
        chain: ChainConfig | None = None,
    ) -> None:
        """``chain``: the center's chain settings (``CenterConfig.chain``, the CLI's and
        the MCP server's too), so the agent's estimates are every door's."""
        self.kb = kb
        self.config = config or EstimationConfig()
        # The process's one chain for these settings (the CLI and MCP share it):
        # histories trained once, kept until the knowledge base has new jobs.
        self.estimators = estimators or shared_chain(
            kb, config=chain or ChainConfig(), promoted=promoted_runtime_estimator
        )

    async def chain(self, spec: WorkloadSpec, catalog: Catalog, now: datetime) -> list[Estimator]:
        """The estimators for ``spec``, best first, for a job submitted at ``now``."""
        return await self.estimators.estimators(spec, catalog, now)

    async def sense(self, event: Envelope) -> EstimationObservation | None:
        payload = event.payload
        if isinstance(payload, EstimatorPromoted):
            self.estimators.forget_promoted()  # serve the new one from the next request
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
                unavailable=self.estimators.unavailable(),
            )
        if isinstance(payload, JobSubmitted):
            try:
                plan = await self.kb.get_plan(payload.plan_id)
            except NotFoundError:
                return None
            prediction = plan.estimate
            if prediction is not None and isinstance(plan.spec.workload, GenericJob):
                registry = await self.estimators.promoted()
                if registry is not None:
                    catalog = await self.kb.get_catalog()
                    candidate = _candidate(catalog, payload.option)
                    if candidate is not None:
                        answer = registry.at(event.time).estimate(plan.spec.workload, candidate)
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
                            coverage_basis=share.coverage_basis,
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
                        unavailable=observation.unavailable,
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
        """Store the prediction, compare-and-set: a job's end the Scheduler records while
        this annotates is kept (the annotation is applied again to it), never overwritten."""

        def annotate(known: JobRecord | None) -> JobRecord | None:
            if known is None:
                return record
            if known.predicted_runtime_s is not None:
                return None
            return known.model_copy(update={"predicted_runtime_s": record.predicted_runtime_s})

        await update_job(self.kb, record.system, record.job_id, annotate)


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
