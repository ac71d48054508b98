"""What planning hands back: feasible plans, infeasible options with reasons, the choice.

``PlannedOption`` is everything the builder decided about one feasible option;
``PlanSummary`` is its flat, stable JSON form (the keys other programs read:
system, partition, nodes, cores_per_node, gpus_per_node, memory_mb, walltime_s,
segments, cost, cost_unit, cost_usd, expected_wait_s, expected_finish_s, estimator).
``Infeasible`` is an option that cannot run, with the reason and how close it came.
``option_id`` names one option (where, on how much, each job's walltime): what a user
confirms, and what ``tools.planning.confirm`` finds again at submission.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import (
    CascadeSegment,
    Cost,
    GpuMemoryPeak,
    Interval,
    Plan,
    PlanOption,
    ResourceEstimate,
)
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.planning.answer import OptionAnswer, answer_of
from tools.planning.cost import Charge
from tools.planning.queue import Availability

__all__ = [
    "AvailabilityInfo",
    "Infeasible",
    "PlanReport",
    "PlanSummary",
    "PlannedOption",
    "option_id",
]


def option_id(option: PlanOption, segment_walltimes_s: Sequence[int]) -> str:
    """A short stable id of one option: the same request and walltimes, the same id."""
    body = json.dumps(
        [option.model_dump(mode="json"), list(segment_walltimes_s)],
        sort_keys=True,
        separators=(",", ":"),
    )
    return "opt-" + hashlib.sha256(body.encode()).hexdigest()[:12]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AvailabilityInfo(_Model):
    """A partition's pool as the queue snapshot showed it."""

    pool: str
    idle_nodes: int | None
    total_nodes: int | None
    running_jobs: int
    pending_jobs: int


@dataclass(frozen=True, slots=True)
class PlannedOption:
    """One feasible plan: the request, its estimate, segments, charges and expected wait.

    A plain dataclass on purpose: a what-if builds hundreds of these from values already
    validated, and only the few shown leave the process, as ``PlanSummary``.
    """

    option: PlanOption  # the request; walltime_s is each job's (the longest segment's)
    qos: str | None
    estimate: ResourceEstimate
    segment_walltimes_s: list[int]  # each job of the chain (one if no cascade)
    segment_work_s: list[int]  # the work each does; sums to the planned run
    expected_segments: int  # jobs the expected (point) run needs
    expected_run_s: float  # point run time plus restart overheads
    run_high_s: float  # upper run time plus restart overheads
    cost: Charge | None  # expected charge (centers bill time used); None: unpublished
    cost_max: Charge | None  # if every job runs to its walltime
    cost_usd: float | None
    cost_usd_max: float | None
    cost_usd_basis: str | None  # the assumed rate behind the dollars
    expected_wait_s: float | None  # total queue wait; None: unknown
    wait_basis: str
    expected_finish_s: float  # wait (0 when unknown) + expected run
    finish_high_s: float  # wait + upper run time
    availability: Availability | None
    notes: tuple[str, ...] = ()
    workload: DNNTraining | GenericJob | None = None  # what ``estimate`` answers for

    def answer(self) -> OptionAnswer | None:
        """The option's estimate as every door gives it (``tools.planning.answer``)."""
        return None if self.workload is None else answer_of(self.estimate, self.workload)

    @property
    def where(self) -> str:
        return f"{self.option.system}/{self.option.partition}"

    @property
    def option_id(self) -> str:
        return option_id(self.option, self.segment_walltimes_s)

    @property
    def segments(self) -> list[CascadeSegment]:
        return [
            CascadeSegment(index=i, walltime_s=walltime_s)
            for i, walltime_s in enumerate(self.segment_walltimes_s)
        ]

    def summary(self) -> PlanSummary:
        runtime = self.estimate.runtime_s
        cost, cost_max = self.cost, self.cost_max
        seen = self.availability
        return PlanSummary(
            option_id=self.option_id,
            system=self.option.system,
            partition=self.option.partition,
            node_type=self.option.node_type,
            nodes=self.option.nodes,
            cores_per_node=self.option.cores_per_node,
            gpus_per_node=self.option.gpus_per_node,
            memory_mb=self.option.memory_mb,
            walltime_s=self.option.walltime_s,
            batch_size=self.option.batch_size,
            qos=self.qos,
            segments=self.segments,
            expected_segments=self.expected_segments,
            runtime_s=Interval(
                point=self.expected_run_s,
                low=min(runtime.low, self.expected_run_s),
                high=max(self.run_high_s, self.expected_run_s),
                coverage=runtime.coverage,
                coverage_basis=runtime.coverage_basis,
            ),
            gpu_memory_mb=self.estimate.gpu_memory_mb,
            gpu_memory=self.estimate.gpu_memory,
            host_memory_mb=self.estimate.memory_mb,
            cost=None if cost is None else round(cost.amount, 4),
            cost_unit=None if cost is None else cost.unit,
            cost_max=None if cost_max is None else round(cost_max.amount, 4),
            gpu_hours=None if cost is None or cost.gpu_hours is None else round(cost.gpu_hours, 4),
            cost_usd=None if self.cost_usd is None else round(self.cost_usd, 4),
            cost_usd_max=None if self.cost_usd_max is None else round(self.cost_usd_max, 4),
            cost_usd_basis=self.cost_usd_basis,
            expected_wait_s=None if self.expected_wait_s is None else round(self.expected_wait_s),
            wait_basis=self.wait_basis,
            expected_finish_s=round(self.expected_finish_s),
            availability=None
            if seen is None
            else AvailabilityInfo(
                pool=seen.pool,
                idle_nodes=seen.idle_nodes,
                total_nodes=seen.total_nodes,
                running_jobs=seen.running_jobs,
                pending_jobs=seen.pending_jobs,
            ),
            estimator=self.estimate.estimator_id,
            estimator_label=self.estimate.label,
            estimator_validation_error=self.estimate.validation_error,
            notes=list(self.notes),
            estimate=self.answer(),
        )

    def to_record(self, spec: WorkloadSpec, plan_id: str, reason: str = "") -> Plan:
        """This plan as the knowledge base stores it (``knowledge_base.records.Plan``)."""
        return Plan(
            id=plan_id,
            user=spec.user,
            spec=spec,
            option=self.option,
            estimate=self.estimate,
            expected_cost=None
            if self.cost is None
            else Cost(amount=self.cost.amount, unit=self.cost.unit),
            expected_wait_s=None if self.expected_wait_s is None else round(self.expected_wait_s),
            segments=self.segments,
            reason=reason,
        )


class PlanSummary(_Model):
    """A plan as JSON: the keys programs read (see module docstring) and a few more."""

    option_id: str = Field(description="Names this option to submit_plan / rightsize submit")
    system: str
    partition: str
    node_type: str | None
    nodes: int
    cores_per_node: int
    gpus_per_node: int
    memory_mb: int = Field(description="Requested per node, MB")
    walltime_s: int = Field(description="Requested per job (each segment asks for its own)")
    batch_size: int | None
    qos: str | None
    segments: list[CascadeSegment]
    expected_segments: int
    runtime_s: Interval = Field(description="Expected run, restart overheads included")
    gpu_memory_mb: Interval | None
    gpu_memory: GpuMemoryPeak | None = Field(
        default=None, description="White-box peak per GPU: allocated, reserved, context MiB"
    )
    host_memory_mb: Interval
    cost: float | None = Field(description="Expected charge in cost_unit; None: unpublished")
    cost_unit: str | None
    cost_max: float | None = Field(description="Charge if every job runs to its walltime")
    gpu_hours: float | None
    cost_usd: float | None = Field(description="Only from a configured (assumed) rate")
    cost_usd_max: float | None
    cost_usd_basis: str | None
    expected_wait_s: float | None = Field(description="Total queue wait; None: unknown")
    wait_basis: str
    expected_finish_s: float = Field(description="Wait (0 where unknown) + expected run")
    availability: AvailabilityInfo | None
    estimator: str
    estimator_label: str
    estimator_validation_error: float | None
    notes: list[str]
    estimate: OptionAnswer | None = Field(
        default=None, description="The option's estimate, as `rightsize estimate` gives it"
    )


class Infeasible(_Model):
    """An option that cannot run, the exact reason, and how close it came."""

    system: str
    partition: str
    node_type: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    batch_size: int | None = None
    constraint: str = Field(description="What it breaks: gpu_memory, walltime, budget...")
    reason: str
    shortfall: float | None = Field(
        default=None,
        description="How far past the limit, relative (0.28: 28% over); None: not a matter "
        "of degree (no GPUs, excluded by the goals)",
    )


class PlanReport(_Model):
    """What ``rightsize plan --json`` prints."""

    workload: str
    objective: str
    recommended: PlanSummary | None
    feasible: list[PlanSummary] = Field(description="Ordered by the objective")
    infeasible: list[Infeasible] = Field(description="Closest to feasible first")
    causes: list[str] = Field(
        default_factory=list,
        description="When nothing can run: the reasons every option of their kind gives, "
        "said once (an unknown model, a memory no node has)",
    )
    fastest: PlanSummary | None
    cheapest: PlanSummary | None
    earliest_finish: PlanSummary | None
    notes: list[str]
