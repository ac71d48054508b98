"""One job's start: a pending job of the snapshot, or a job not yet submitted.

The MCP tool asks this question. A pending job's start comes from the same predictor
as ``rightsize queue predict``; a job not yet submitted joins the snapshot's queue as
submitted at ``taken_at``, the last in line, and its wait comes from the new-job model
(trained on jobs at the moment they were submitted), as a plan's does.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from tools.waits.jobs import JobTable
from tools.waits.predictor import WaitPredictor
from tools.waits.snapshot import WaitSnapshot

__all__ = ["JobStart", "NewJob", "predict_job_start"]

NEW_JOB_ID = "new-job"


class NewJob(BaseModel):
    """A job not submitted yet: its size and time limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    procs: int = Field(ge=1, description="Processors (nodes on a live SLURM snapshot)")
    requested_s: float = Field(gt=0, description="The time limit it would ask for, seconds")
    user: str | None = Field(default=None, description="Who would submit it")
    queue: str | None = Field(default=None, description="Queue or partition")


class JobStart(BaseModel):
    """When one job is predicted to start: p50 and its p10-p90 interval, and why."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    taken_at: float
    start_s: float
    p10_s: float
    p90_s: float
    wait_s: float = Field(description="start_s - taken_at")
    basis: str


def predict_job_start(
    snapshot: WaitSnapshot,
    history: JobTable,
    *,
    job_id: str | None = None,
    new_job: NewJob | None = None,
    predictor: WaitPredictor | None = None,
) -> JobStart:
    """The start of ``job_id`` (pending in the snapshot) or of ``new_job``; exactly one."""
    if (job_id is None) == (new_job is None):
        raise InvalidInputError("name a pending job_id or describe a new_job, exactly one")
    predictor = predictor or WaitPredictor(history)
    if new_job is not None:
        # The model of the question asked: jobs at the moment they were submitted (zero
        # waits included), not the pending-job model, which never sees a job start at once.
        (p10, p50, p90), model = predictor.new_job_waits(
            snapshot, new_job.procs, new_job.requested_s, new_job.queue
        )
        at = snapshot.taken_at
        return JobStart(
            job_id=NEW_JOB_ID,
            taken_at=at,
            start_s=at + float(p50),
            p10_s=at + float(p10),
            p90_s=at + float(p90),
            wait_s=float(p50),
            basis=f"new-job model: {model.basis(predictor.config.coverage)}",
        )
    if all(j.job_id != job_id for j in snapshot.pending):
        raise InvalidInputError(
            "is not a pending job of the snapshot", field="job_id", value=job_id
        )
    result = predictor.predict(snapshot)
    row = next(p for p in result.predictions if p.job_id == job_id)
    return JobStart(
        job_id=row.job_id,
        taken_at=snapshot.taken_at,
        start_s=row.start_s,
        p10_s=row.p10_s,
        p90_s=row.p90_s,
        wait_s=row.start_s - snapshot.taken_at,
        basis=result.basis,
    )
