"""The Optimization agent: what-if, plan builder and queue-aware selector over the estimates.

Senses ``plan.build_requested`` (the Intelligence Plane has estimates and wants plans)
and ``plan.replan_requested`` (the Scheduler saw a running plan fall behind its
estimate). Sense adds what planning needs from outside: the catalog (knowledge base),
the queue now (each system's executor's ``cluster_state()``) and the time.
Decide runs the planner exactly as ``rightsize plan`` does (``tools.planning.selector.plan``:
what-if over the catalog, plan builder, budget/deadline, objective), with the estimates
it was given behind the planner's estimator seam (``FixedEstimates``), and answers
``plan.options_ready``: the recommended plan as a knowledge-base ``Plan`` (cascade
segments included), the next best, and why the rest cannot run.

A re-plan plans the work that is left: the epochs still to run, at the pace the job
actually showed (``projected_run_s``), on every partition that shares the estimated
hardware, so that a partition with idle nodes now can win over a busy one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.events import Envelope, PlanBuildRequested, PlanOptionsReady, PlanReplanRequested
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import PLANS
from knowledge_base.catalog import Catalog
from knowledge_base.errors import NotFoundError, RightsizeError
from knowledge_base.records import Interval, Plan, ResourceEstimate
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining, WorkloadSpec
from tools.actuators.base import Executor
from tools.planning.builder import PlanningConfig
from tools.planning.cost import DollarRates
from tools.planning.fixed_estimates import FixedEstimates
from tools.planning.queue import QueueModel, QueueSnapshot, live_queue_and_waits
from tools.planning.results import PlannedOption
from tools.planning.selector import Selection, plan
from tools.waits.learned import LearnedWaits, PredictorCache

__all__ = [
    "FixedEstimates",
    "Optimization",
    "OptimizationConfig",
    "OptimizationObservation",
    "options_ready",
    "remaining_work",
]


class OptimizationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    planning: PlanningConfig = Field(default_factory=PlanningConfig)
    rates: DollarRates = Field(default_factory=DollarRates)
    alternatives: int = Field(default=4, ge=0, description="Next-best plans in the answer")
    infeasible: int = Field(default=10, ge=0, description="Reasons in the answer")
    live_queue: bool = Field(default=True, description="Ask executors for their queue")


def remaining_work(
    spec: WorkloadSpec,
    estimates: Sequence[ResourceEstimate],
    fraction: float,
    pace_run_s: float | None,
) -> tuple[WorkloadSpec, list[ResourceEstimate]]:
    """The spec and estimates of the work left (``fraction`` of it), at the observed pace."""
    workload = spec.workload
    if isinstance(workload, DNNTraining):
        epochs = max(1, math.ceil(workload.epochs * fraction))
        spec = spec.model_copy(update={"workload": workload.model_copy(update={"epochs": epochs})})
    scaled = []
    for estimate in estimates:
        runtime = estimate.runtime_s
        point = (pace_run_s or runtime.point) * fraction
        ratio = point / runtime.point if runtime.point else 1.0
        scaled.append(
            estimate.model_copy(
                update={
                    "runtime_s": Interval(
                        point=point,
                        low=min(point, runtime.low * ratio),
                        high=max(point, runtime.high * ratio),
                        coverage=runtime.coverage,
                        coverage_basis="assumed",  # rescaled: not what was measured
                    ),
                    "label": f"{estimate.label}; rescaled to the observed pace",
                }
            )
        )
    return spec, scaled


def _reason(chosen: PlannedOption, selection: Selection) -> str:
    o = chosen.option
    jobs = len(chosen.segment_walltimes_s)
    chain = f"{jobs} cascaded jobs" if jobs > 1 else "one job"
    wait = "unknown" if chosen.expected_wait_s is None else f"{chosen.expected_wait_s / 60:.0f} min"
    return (
        f"{selection.objective.value}: {o.system}/{o.partition}, {chain} of <= "
        f"{o.walltime_s // 60} min, {o.memory_mb} MB/node; run ~{chosen.expected_run_s / 60:.1f} "
        f"min, wait {wait} (estimator {chosen.estimate.estimator_id})"
    )


def options_ready(
    selection: Selection,
    spec: WorkloadSpec,
    plan_id: str,
    config: OptimizationConfig,
    *,
    replan: bool,
) -> PlanOptionsReady:
    """The planner's selection as the event the Intelligence Plane reads (pure)."""
    chosen = selection.recommended
    recommended = None
    if chosen is not None:
        recommended = chosen.to_record(spec, plan_id, _reason(chosen, selection))
    alternatives: list[Plan] = [
        p.to_record(spec, plan_id, _reason(p, selection))
        for p in selection.ranked[1 : 1 + config.alternatives]
    ]
    infeasible = [
        f"{i.system}/{i.partition}: {i.reason}" for i in selection.infeasible[: config.infeasible]
    ]
    return PlanOptionsReady(
        plan_id=plan_id,
        recommended=recommended,
        alternatives=alternatives,
        infeasible=infeasible,
        notes=list(selection.notes),
        replan=replan,
    )


class OptimizationObservation(Observation):
    kind: Literal["build", "replan"]
    plan_id: str
    spec: WorkloadSpec
    estimates: list[ResourceEstimate]
    catalog: Catalog
    snapshots: list[QueueSnapshot] = Field(default_factory=list)
    learned: dict[str, LearnedWaits] = Field(default_factory=dict)  # learned waits, by system
    now: datetime


class Optimization(Agent[OptimizationObservation]):
    """Builds policy-valid, priced, queue-aware plans and recommends one."""

    name = "optimization"
    topics = (PLANS,)

    def __init__(
        self,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor] | None = None,
        config: OptimizationConfig | None = None,
    ) -> None:
        self.kb = kb
        self.executors = dict(executors or {})
        self.config = config or OptimizationConfig()
        self.predictors = PredictorCache()  # one training per system, kept between plans

    async def _snapshots(
        self, spec: WorkloadSpec, catalog: Catalog
    ) -> tuple[list[QueueSnapshot], dict[str, LearnedWaits]]:
        if not self.config.live_queue:
            return [], {}
        snapshots = []
        learned = {}
        for name in spec.goals.systems or catalog.names():
            executor = self.executors.get(name)
            if executor is None:
                continue
            try:
                catalog.system(name)
                # Taken on the executor's clock: the queue's jobs started on it.
                # Where its recorded waits allow, the learned waits (docs/waits.md)
                snapshot, waits = await live_queue_and_waits(
                    executor, name, self.kb, self.predictors
                )
            except (RightsizeError, NotFoundError):
                continue  # no queue information: planning says the wait is unknown
            snapshots.append(snapshot)
            if waits is not None:
                learned[name] = waits
        return snapshots, learned

    async def sense(self, event: Envelope) -> OptimizationObservation | None:
        payload = event.payload
        if isinstance(payload, PlanBuildRequested):
            spec, estimates, kind = payload.spec, payload.estimates, "build"
        elif isinstance(payload, PlanReplanRequested):
            spec, estimates = remaining_work(
                payload.spec,
                payload.estimates,
                payload.remaining_fraction,
                payload.projected_run_s,
            )
            kind = "replan"
        else:
            return None
        catalog = await self.kb.get_catalog()
        snapshots, learned = await self._snapshots(spec, catalog)
        return OptimizationObservation(
            event=event,
            kind=kind,
            plan_id=payload.plan_id,
            spec=spec,
            estimates=estimates,
            catalog=catalog,
            snapshots=snapshots,
            learned=learned,
            now=event.time,  # the request's time, not the clock's: decisions replay
        )

    def decide(self, observation: OptimizationObservation) -> list[Action]:
        queue = (
            QueueModel(observation.snapshots, observation.catalog, learned=observation.learned)
            if observation.snapshots
            else None
        )
        replan = observation.kind == "replan"
        selection = plan(
            observation.spec,
            observation.catalog,
            now=observation.now,
            queue=queue,
            rates=self.config.rates,
            config=self.config.planning,
            estimators=[FixedEstimates(tuple(observation.estimates), any_partition=replan)],
        )
        answer = options_ready(
            selection, observation.spec, observation.plan_id, self.config, replan=replan
        )
        return [Emit(payload=answer)]
