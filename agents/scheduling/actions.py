"""What the Scheduler may decide to do: each action one thing its ``act`` carries out."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agents.events import PlanReplanDecided
from agents.runtime import Action
from knowledge_base.records import JobRecord, JobState, PlanStatus

__all__ = [
    "CancelByName",
    "CancelJob",
    "Conclude",
    "ExtendWalltime",
    "Purpose",
    "RecordJob",
    "RecordState",
    "RequestReplan",
    "Revise",
    "Submit",
    "WatchJob",
]

Purpose = Literal["workload", "profiling"]


class Submit(Action):
    plan_id: str
    purpose: Purpose = "workload"
    segment_index: int = Field(ge=0)
    attempt: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    walltime_s: int = Field(ge=1)
    decision: Literal["submit", "next_segment", "more_memory", "longer_walltime", "resubmit"]
    reason: str
    about_job: str | None = None


class Conclude(Action):
    """End the plan; CANCELLED marks every job still in flight cancelled in the ledger."""

    plan_id: str
    purpose: Purpose = "workload"
    status: PlanStatus
    reason: str
    about_job: str | None = None
    cancelled_by: str | None = Field(default=None, description="A cancel request's sender")


class RecordState(Action):
    plan_id: str
    job_id: str
    state: JobState


class RecordJob(Action):
    record: JobRecord


class RequestReplan(Action):
    plan_id: str
    job_id: str
    reason: str
    remaining_fraction: float
    projected_run_s: float | None = None
    segment_index: int | None = None
    done_fraction: float | None = None
    job_elapsed_s: float | None = None
    job_walltime_s: int | None = None
    checkpointable: bool = True


class Revise(Action):
    """Apply a re-plan decision to the ledger (and say so); the job it replaces, if any."""

    decision: PlanReplanDecided
    replaced: str | None = None
    about_job: str | None = None


class ExtendWalltime(Action):
    """Raise a running job's limit in place from ``from_s`` to ``to_s``; record it."""

    plan_id: str
    job_id: str
    segment_index: int = Field(ge=0)
    from_s: int = Field(ge=1)
    to_s: int = Field(ge=1)
    reason: str


class CancelJob(Action):
    plan_id: str
    job_id: str
    reason: str


class CancelByName(Action):
    """Cancel the job a submission under way (an intent with no job id) may have started.

    The batch system may have taken the job before the intent got its id (a crash
    between the two, another replica): it is found by its unique name, cancelled, and
    its id kept in the ledger.
    """

    plan_id: str
    name: str
    segment_index: int = Field(ge=0)
    attempt: int = Field(ge=1)
    reason: str


class WatchJob(Action):
    """Watch a job again: the monitor gave it up, but the batch system still has it."""

    plan_id: str
    job_id: str
