"""How the Scheduler is set up: where jobs run and how far the Re-scheduler may go alone."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agents.ordering import OrderingConfig
from agents.rescheduler import ReschedulePolicy

__all__ = ["SchedulerConfig"]


class SchedulerConfig(BaseModel):
    """Where jobs run and how far the Re-scheduler may go on its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: ReschedulePolicy = Field(default_factory=ReschedulePolicy)
    checkpoint_overhead_s: int = Field(
        default=300,
        ge=0,
        description="Per cascade segment: start-up, loading and saving a checkpoint; a "
        "segment's work budget (RIGHTSIZE_SEGMENT_WORK_S) is its walltime minus this",
    )
    poll_interval_s: float = Field(default=5.0, gt=0, description="How often monitors poll")
    profile_steps: int = Field(
        default=20, ge=1, description="Timed steps of a profiling run (RIGHTSIZE_PROFILE_STEPS)"
    )
    ordering: OrderingConfig | None = Field(
        default=None,
        description="The rightsize order set as priorities where the executor takes them "
        "(SLURM: scontrol update Priority, operator rights); None: the center's own order",
    )
    order_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="Least time between two order rounds on a system (one after each "
        "monitor poll at most; SLURM's backfill uses a new order every bf_interval, 30 s)",
    )
    order_retry_s: float = Field(
        default=3600.0,
        ge=0,
        description="After SLURM refused priorities (no operator rights), how long the "
        "center's own order is left alone before the next try",
    )
    work_dir: Path | None = Field(
        default=None, description="Jobs run in WORK_DIR/<plan id>; None: the executor's default"
    )
