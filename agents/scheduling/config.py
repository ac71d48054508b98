"""How the Scheduler is set up: where jobs run and how far the Re-scheduler may go alone."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

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
    work_dir: Path | None = Field(
        default=None, description="Jobs run in WORK_DIR/<plan id>; None: the executor's default"
    )
