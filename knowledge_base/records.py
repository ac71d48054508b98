"""What Rightsize learns and decides: estimates, plans, job history, estimators, profiles.

These are the documents the knowledge base stores and agents pass around. Times are
timezone-aware UTC datetimes; durations are seconds (``_s``); memory is MB (``_mb``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge_base.catalog import MemoryMB
from knowledge_base.workload import DurationS, WorkloadSpec

__all__ = [
    "CascadeSegment",
    "Cost",
    "EstimatorRecord",
    "EstimatorStatus",
    "Interval",
    "JobRecord",
    "JobState",
    "Plan",
    "PlanOption",
    "PlanStatus",
    "ProfileRecord",
    "ProfileStatus",
    "ResourceEstimate",
    "utc_now",
]


def utc_now() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Interval(_Model):
    """A point estimate with the interval it probably falls in."""

    point: float = Field(ge=0)
    low: float = Field(ge=0)
    high: float = Field(ge=0)
    coverage: float = Field(
        default=0.8, gt=0, le=1, description="Intended probability that the truth is in [low, high]"
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


class ResourceEstimate(_Model):
    """What a workload needs on one option, and how sure the estimator is."""

    option: PlanOption
    runtime_s: Interval
    memory_mb: Interval = Field(description="Peak host memory per node, MB")
    gpu_memory_mb: Interval | None = Field(default=None, description="Peak per GPU, MB")
    estimator_id: str = Field(description="Registry id, or 'analytic-fallback'")
    validation_error: float | None = Field(
        default=None, ge=0, description="The estimator's held-out error (see error_metric)"
    )
    error_metric: str = "mape"
    label: str = Field(default="", description="Shown to users, e.g. 'untrained: wide interval'")


class Cost(_Model):
    """An amount in a center's own unit (SU, core-hour); dollars only as an assumption."""

    amount: float = Field(ge=0)
    unit: str = Field(min_length=1)


class CascadeSegment(_Model):
    """One job of a checkpointed chain that together runs past a partition's limit."""

    index: int = Field(ge=0)
    walltime_s: DurationS = Field(gt=0)
    job_id: str | None = None
    state: str | None = None


class PlanStatus(StrEnum):
    DRAFT = "draft"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SUBMITTED = "submitted"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


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
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    version: int = Field(default=0, ge=0, description="Bumped by every stored update")


class JobState(StrEnum):
    """A batch job's state, one enum over every batch system's native states."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


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
