"""What the Scheduler senses: a tagged union, one model per kind of happening.

Each kind carries exactly what its decision needs (the plan always), so a decision
never asserts that an optional field happens to be set; ``decisions.decide`` has one
handler per kind.

    Start        an approved plan to run (its first job)
    Closed       a plan cancelled before it was approved: say it is over
    Ignored      nothing to do (a plan that ended, a revision applied already)
    Running      a job of the plan started
    Rewatch      a job the monitor gave up on that the batch system still has
    Progressed   a job's progress line: is it on pace?
    NearLimit    a running job within the margin of its limit, whose ceiling allows more
    Ended        a job of the plan ended (or was lost by the batch system)
    Revision     the Intelligence Plane's answer to a re-plan
    CancelAsked  a user asked to cancel the plan
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agents.events import PlanCancelRequested, PlanReplanDecided
from agents.rescheduler import JobEnd, Limits
from agents.runtime import Observation
from agents.scheduling.actions import Purpose
from knowledge_base.records import JobRecord, Plan

__all__ = [
    "CancelAsked",
    "Closed",
    "Ended",
    "Ignored",
    "NearLimit",
    "Progressed",
    "Revision",
    "Rewatch",
    "Running",
    "SchedulerObservation",
    "Start",
]


class _Seen(Observation):
    plan: Plan


class Start(_Seen):
    kind: Literal["start"] = "start"
    purpose: Purpose = "workload"
    limits: Limits | None = None


class Closed(_Seen):
    kind: Literal["closed"] = "closed"
    purpose: Purpose = "workload"


class Ignored(_Seen):
    kind: Literal["ignore"] = "ignore"


class Running(_Seen):
    kind: Literal["running"] = "running"
    job_id: str


class Rewatch(_Seen):
    kind: Literal["rewatch"] = "rewatch"
    job_id: str


class Progressed(_Seen):
    kind: Literal["progress"] = "progress"
    job_id: str
    checkpointable: bool
    elapsed_s: float = Field(description="Since the job's first progress line was seen")
    fraction_at_start: float
    fraction_now: float
    replan_asked: bool
    job_elapsed_s: float | None = Field(description="Since its start (jobs that cannot resume)")
    job_walltime_s: int | None = Field(description="The limit it can still reach")


class NearLimit(_Seen):
    kind: Literal["near_limit"] = "near_limit"
    job_id: str
    job_elapsed_s: float
    job_walltime_s: int
    job_ceiling_s: int | None = Field(description="The most the plan allows it")
    extension_tried: bool = Field(description="The ledger has one from its limit")
    projected_run_s: float | None = None


class Ended(_Seen):
    kind: Literal["ended"] = "ended"
    purpose: Purpose = "workload"
    limits: Limits | None
    checkpointable: bool
    end: JobEnd
    record: JobRecord | None = Field(description="What history keeps; a lost job has none")
    replaced: bool = Field(default=False, description="The job ended after a re-plan took it")


class Revision(_Seen):
    kind: Literal["revise"] = "revise"
    checkpointable: bool
    revision: PlanReplanDecided


class CancelAsked(_Seen):
    kind: Literal["cancel"] = "cancel"
    purpose: Purpose = "workload"
    cancel: PlanCancelRequested


SchedulerObservation = (
    Start
    | Closed
    | Ignored
    | Running
    | Rewatch
    | Progressed
    | NearLimit
    | Ended
    | Revision
    | CancelAsked
)
