"""What Rightsize learns and decides: estimates, plans, job history, estimators, profiles.

These are the documents the knowledge base stores and agents pass around. Times are
timezone-aware UTC datetimes; durations are seconds (``_s``); memory is MB (``_mb``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge_base.catalog import MemoryMB
from knowledge_base.workload import DurationS, WorkloadSpec

__all__ = [
    "CascadeSegment",
    "Cost",
    "CoverageBasis",
    "EstimatorRecord",
    "EstimatorStatus",
    "GpuMemoryPeak",
    "Interval",
    "JobRecord",
    "JobState",
    "Plan",
    "PlanOption",
    "PlanRevision",
    "PlanStatus",
    "ProfileRecord",
    "ProfileStatus",
    "ResourceEstimate",
    "SegmentState",
    "WalltimeExtension",
    "utc_now",
]


def utc_now() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


CoverageBasis = Literal["held_out", "in_sample", "assumed"]
"""What an interval's ``coverage`` rests on.

- ``held_out``: calibrated on data the estimator was not fitted on (conformal or
  leave-one-out error quantiles): the coverage was measured;
- ``in_sample``: quantiles of the estimator's residuals on its own training data: the
  coverage is optimistic, real coverage is usually lower;
- ``assumed``: fixed multipliers around a point (x0.85-x1.4...), never measured: the
  coverage is a label, not a probability.
"""


class Interval(_Model):
    """A point estimate with the interval it probably falls in."""

    point: float = Field(ge=0)
    low: float = Field(ge=0)
    high: float = Field(ge=0)
    coverage: float = Field(
        default=0.8, gt=0, le=1, description="Intended probability that the truth is in [low, high]"
    )
    coverage_basis: CoverageBasis = Field(
        default="assumed",
        description="What the coverage rests on: held_out (measured on data the estimator "
        "was not fitted on), in_sample (its own training residuals: optimistic), assumed "
        "(fixed multipliers: never measured)",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not self.low <= self.point <= self.high:
            raise ValueError(
                f"interval: need low <= point <= high, got {self.low}, {self.point}, {self.high}"
            )
        return self


class PlanOption(_Model):
    """One concrete way to run a workload: where, on how much, for how long."""

    system: str
    partition: str
    node_type: str | None = None
    nodes: int = Field(ge=1)
    cores_per_node: int = Field(ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    memory_mb: MemoryMB = Field(description="Per node, MB")
    walltime_s: DurationS = Field(gt=0, description="Requested walltime")
    batch_size: int | None = Field(default=None, ge=1)


class GpuMemoryPeak(_Model):
    """Peak memory per GPU of a training step, white-box (fake-tensor trace replayed
    through PyTorch's CUDA caching allocator), in MiB."""

    allocated_mib: float = Field(ge=0, description="torch.cuda.max_memory_allocated")
    reserved_mib: float = Field(ge=0, description="torch.cuda.max_memory_reserved")
    context_mib: float = Field(ge=0, description="CUDA context, outside the allocator")
    total_mib: float = Field(ge=0, description="reserved + context: what the device must hold")
    capacity_mib: float | None = Field(default=None, description="The GPU's memory")
    fits: bool | None = Field(
        default=None, description="No allocation fails within the capacity (None: unknown)"
    )
    per_gpu_batch: int = Field(ge=1)
    optimizer: str
    precision: str
    context_basis: str = Field(description="Where the context size comes from")
    method: str = "fake-tensor trace + CUDA caching allocator replay"


class WorkPriced(_Model):
    """Shares of a traced step's work (FLOPs; bytes where it has none) an estimator priced
    from learned data, analytically, and not at all (they sum to 1)."""

    learned: float = Field(ge=0, le=1)
    analytic: float = Field(ge=0, le=1)
    unpriced: float = Field(ge=0, le=1)


class ResourceEstimate(_Model):
    """What a workload needs on one option, and how sure the estimator is."""

    option: PlanOption
    runtime_s: Interval
    memory_mb: Interval = Field(description="Peak host memory per node, MB")
    gpu_memory_mb: Interval | None = Field(default=None, description="Peak per GPU, MB")
    gpu_memory: GpuMemoryPeak | None = Field(
        default=None, description="White-box peak per GPU (allocated, reserved, context)"
    )
    estimator_id: str = Field(description="Registry id, or 'analytic-fallback'")
    validation_error: float | None = Field(
        default=None, ge=0, description="The estimator's held-out error (see error_metric)"
    )
    error_metric: str = "mape"
    label: str = Field(default="", description="Shown to users, e.g. 'untrained: wide interval'")
    work_priced: WorkPriced | None = Field(
        default=None, description="How the traced work was priced (None: not reported)"
    )


class Cost(_Model):
    """An amount in a center's own unit (SU, core-hour); dollars only as an assumption."""

    amount: float = Field(ge=0)
    unit: str = Field(min_length=1)


class JobState(StrEnum):
    """A batch job's state, one enum over every batch system's native states.

    ``ended`` is the one definition of a job that is over: COMPLETED, FAILED, TIMEOUT,
    OUT_OF_MEMORY, CANCELLED. PENDING and RUNNING are not, and neither is UNKNOWN (the
    batch system did not answer for it; it may still run).
    """

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def ended(self) -> bool:
        return self in _ENDED_JOB_STATES


_ENDED_JOB_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.CANCELLED,
    }
)


class SegmentState(StrEnum):
    """Where one submission of a plan's ledger (``Plan.segments``) stands.

    A job's own states (``JobState``, same values), plus ``submitting`` (the intent is
    recorded, the batch system has not answered with a job id yet) and ``replanned`` (a
    re-plan cancelled the job; its end decides nothing). Only the Scheduler writes it.
    """

    SUBMITTING = "submitting"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    REPLANNED = "replanned"

    @classmethod
    def of(cls, state: JobState) -> SegmentState:
        return cls(state.value)

    @property
    def ended(self) -> bool:
        """The job is over (``JobState.ended``), or a re-plan took it."""
        if self is SegmentState.REPLANNED:
            return True
        return self not in (SegmentState.SUBMITTING,) and JobState(self.value).ended


class WalltimeExtension(_Model):
    """One raise of a running job's time limit in place (same job id), or its refusal."""

    from_s: DurationS = Field(gt=0, description="The job's limit before")
    to_s: DurationS = Field(gt=0, description="The limit asked for")
    at: datetime
    refused: str | None = Field(
        default=None, description="Why the batch system did not raise it (then from_s holds)"
    )


class CascadeSegment(_Model):
    """One job of a checkpointed chain that together runs past a partition's limit.

    In a plan's ledger: a planned segment has neither ``job_id`` nor ``state``; a
    submission has a ``state`` (and its ``job_id`` once the batch system gave one).
    A submission's ``walltime_s`` is the limit it was submitted with; ``ceiling_s`` the
    most the plan lets its limit be raised to in place (the user's own request or the
    partition's MaxTime), and ``extensions`` each raise (or refusal) so far.
    """

    index: int = Field(ge=0)
    walltime_s: DurationS = Field(gt=0)
    job_id: str | None = None
    state: SegmentState | None = None
    ceiling_s: DurationS | None = Field(default=None, gt=0)
    extensions: list[WalltimeExtension] = Field(default_factory=list)

    @property
    def limit_s(self) -> int:
        """The job's time limit now: the last raise that took, else its request."""
        granted = [e.to_s for e in self.extensions if e.refused is None]
        return granted[-1] if granted else self.walltime_s


class PlanStatus(StrEnum):
    DRAFT = "draft"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SUBMITTED = "submitted"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        """COMPLETED, FAILED or CANCELLED: nothing more runs for the plan."""
        return self in (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)


class PlanRevision(_Model):
    """One re-plan of a running plan, as the Scheduler applied it (oldest first)."""

    revision: int = Field(ge=1, description="1 for the plan's first re-plan, and so on")
    action: Literal["keep", "extend", "resubmit", "stop"]
    reason: str = Field(min_length=1)


# Plans stored before re-plans were typed kept them in ``reason`` after this mark, one
# "re-plan N: ACTION: REASON" line each; ``Plan`` reads them into ``replans``.
_OLD_HISTORY_MARK = " || "
_OLD_HISTORY_LINE = re.compile(r"re-plan (\d+): (keep|extend|resubmit|stop): (.+)", re.DOTALL)


def _old_history(reason: str) -> tuple[str, list[dict[str, Any]]]:
    head, *lines = reason.split(_OLD_HISTORY_MARK)
    revisions = []
    for line in lines:
        found = _OLD_HISTORY_LINE.fullmatch(line.strip())
        if found is None:  # not a history line after all: the reason stays as it was
            return reason, []
        number, action, text = found.groups()
        revisions.append({"revision": int(number), "action": action, "reason": text})
    return head, revisions


class Plan(_Model):
    """A chosen (or proposed) way to run a workload, and what happened to it."""

    id: str = Field(min_length=1)
    user: str = Field(min_length=1)
    spec: WorkloadSpec
    status: PlanStatus = PlanStatus.DRAFT
    option: PlanOption | None = None
    estimate: ResourceEstimate | None = None
    expected_cost: Cost | None = None
    expected_wait_s: DurationS | None = None
    segments: list[CascadeSegment] = Field(default_factory=list)
    reason: str = Field(default="", description="Why this option was chosen or why it failed")
    replans: list[PlanRevision] = Field(
        default_factory=list, description="Re-plans applied while it ran, oldest first"
    )
    cancelled_by: str | None = Field(
        default=None, description="Who asked to cancel it (plan.cancel_requested); None: no one"
    )
    purpose: Literal["workload", "profiling"] = Field(
        default="workload",
        description="Set by whoever makes the plan: a user's workload, or a Profiling run "
        "(its job gets RIGHTSIZE_PROFILE_STEPS; its end feeds the Profiling agent)",
    )
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    version: int = Field(default=0, ge=0, description="Bumped by every stored update")

    @model_validator(mode="before")
    @classmethod
    def _read_old_history(cls, data: Any) -> Any:
        """A plan stored with its re-plan history in ``reason`` loads with it typed."""
        if isinstance(data, dict) and _OLD_HISTORY_MARK in str(data.get("reason", "")):
            if data.get("replans"):
                return data
            head, revisions = _old_history(str(data["reason"]))
            return {**data, "reason": head, "replans": revisions}
        return data


class JobRecord(_Model):
    """One batch job as history remembers it: request, use, outcome."""

    job_id: str = Field(min_length=1)
    system: str = Field(min_length=1)
    partition: str | None = None
    user: str | None = None
    group: str | None = None
    account: str | None = None
    application: str | None = None
    state: JobState = JobState.UNKNOWN
    submit_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None
    wait_s: DurationS | None = None
    run_s: DurationS | None = None
    requested_nodes: int | None = Field(default=None, ge=1)
    requested_cores: int | None = Field(default=None, ge=1)
    requested_gpus: int | None = Field(default=None, ge=0)
    requested_memory_mb: MemoryMB | None = None
    requested_walltime_s: DurationS | None = None
    used_memory_mb: MemoryMB | None = None
    used_cpu_s: float | None = Field(
        default=None, ge=0, description="CPU time used, all cores (SLURM TotalCPU)"
    )
    requested_tasks: int | None = Field(default=None, ge=1, description="SLURM NTasks")
    exit_code: int | None = None
    plan_id: str | None = None
    predicted_runtime_s: DurationS | None = None
    source: str = Field(default="", description="Where the record came from (trace, actuator)")


class EstimatorStatus(StrEnum):
    CANDIDATE = "candidate"
    SHADOW = "shadow"
    PROMOTED = "promoted"
    RETIRED = "retired"


class EstimatorRecord(_Model):
    """An estimator in the registry: what it predicts, how well, and whether it serves."""

    id: str = Field(min_length=1)
    kind: str = Field(min_length=1, description="xgboost, gnn, hybrid, history, analytic...")
    target: str = Field(min_length=1, description="What it predicts, e.g. 'runtime_s'")
    status: EstimatorStatus = EstimatorStatus.CANDIDATE
    validation: dict[str, float] = Field(
        default_factory=dict, description="metric -> held-out value"
    )
    training_rows: int = Field(default=0, ge=0)
    artifact_path: str | None = None
    features: list[str] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utc_now)
    notes: str = ""


class ProfileStatus(StrEnum):
    OK = "ok"
    OUT_OF_MEMORY = "out_of_memory"
    CRASHED = "crashed"


class ProfileRecord(_Model):
    """One profiled training configuration (a downsized run) and what it measured."""

    id: str = Field(min_length=1)
    family: str = Field(min_length=1, description="Model family, e.g. 'resnet'")
    model: str = Field(min_length=1)
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    hardware: dict[str, str | int | float] = Field(default_factory=dict)
    status: ProfileStatus = ProfileStatus.OK
    iteration_s: float | None = Field(default=None, ge=0, description="Median per iteration")
    iteration_s_spread: float | None = Field(default=None, ge=0)
    peak_memory_mb: float | None = Field(default=None, ge=0)
    peak_gpu_memory_mb: float | None = Field(default=None, ge=0)
    flops: float | None = Field(default=None, ge=0, description="Per training iteration")
    parameters: int | None = Field(default=None, ge=0)
    error: str = ""
    created_at: datetime = Field(default_factory=utc_now)
