"""A queue at one instant, and the starts predicted for its pending jobs.

The file format of ``rightsize queue predict``: times are seconds on the history's clock
(an SWF trace's clock, or Unix seconds for a live system). Unknown fields, negative times
and a job listed both running and pending are errors that name the field and the value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from knowledge_base.errors import InvalidInputError

__all__ = [
    "PendingJob",
    "RunningJob",
    "SnapshotPredictions",
    "WaitPrediction",
    "WaitPredictions",
    "WaitSnapshot",
    "load_wait_snapshot",
]


class PendingJob(BaseModel):
    """A job waiting in the queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str = Field(min_length=1)
    user: str | None = None
    procs: int = Field(ge=1)
    submit_s: float = Field(ge=0)
    requested_s: float = Field(gt=0)
    queue: str | None = None


class RunningJob(PendingJob):
    """A job that has started and not ended."""

    start_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _started_after_submit(self) -> Self:
        if self.start_s < self.submit_s:
            raise ValueError(f"start_s {self.start_s} is before submit_s {self.submit_s}")
        return self


class WaitSnapshot(BaseModel):
    """The machine and its queue at ``taken_at``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    taken_at: float = Field(ge=0)
    total_procs: int = Field(ge=1)
    running: list[RunningJob] = Field(default_factory=list)
    pending: list[PendingJob] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        running = {job.job_id for job in self.running}
        seen: set[str] = set()
        jobs: list[tuple[str, list[RunningJob] | list[PendingJob]]] = [
            ("running", self.running),
            ("pending", self.pending),
        ]
        for name, listed in jobs:
            for index, job in enumerate(listed):
                where = f"{name}.{index}"
                if name == "pending" and job.job_id in running:
                    raise ValueError(
                        f"{where}.job_id {job.job_id!r} is also running; "
                        "a job is either running or pending"
                    )
                if job.job_id in seen:
                    raise ValueError(f"{where}.job_id {job.job_id!r} is listed twice")
                seen.add(job.job_id)
                if job.submit_s > self.taken_at:
                    raise ValueError(
                        f"{where}.submit_s {job.submit_s} is after taken_at {self.taken_at}"
                    )
                if isinstance(job, RunningJob) and job.start_s > self.taken_at:
                    raise ValueError(
                        f"{where}.start_s {job.start_s} is after taken_at {self.taken_at}"
                    )
        return self


class WaitPrediction(BaseModel):
    """One pending job's predicted start (p50) and its p10-p90 interval, in seconds."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    start_s: float
    p10_s: float
    p90_s: float


class WaitPredictions(BaseModel):
    """What ``queue predict`` prints."""

    model_config = ConfigDict(extra="forbid")

    predictions: list[WaitPrediction]
    # shown to people, left out of the JSON (the issue fixes that shape)
    basis: str = Field(default="", exclude=True, description="What the predictions rest on")


class SnapshotPredictions(BaseModel):
    """One instant of ``queue bench``."""

    model_config = ConfigDict(extra="forbid")

    taken_at: float
    predictions: list[WaitPrediction]


def _validation_error(exc: ValidationError, source: str) -> InvalidInputError:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return InvalidInputError(
        message, source=source, field=where or None, value=first.get("input") if where else None
    )


def parse_wait_snapshot(document: Any, source: str = "snapshot") -> WaitSnapshot:
    """A validated snapshot from decoded JSON; errors name the field and the value."""
    try:
        return WaitSnapshot.model_validate(document)
    except ValidationError as exc:
        raise _validation_error(exc, source) from exc


def load_wait_snapshot(path: Path) -> WaitSnapshot:
    """The snapshot in a JSON file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=str(path)) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"not JSON: {exc}", source=str(path)) from exc
    return parse_wait_snapshot(document, str(path))
