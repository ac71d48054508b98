"""What an executor is asked to run and what it reports back.

ActuatorError (RightsizeError)     root of executor failures; ``transient`` per failure
                                   (see knowledge_base.errors for the retry rule)
+-- RequestRejected                the request breaks a partition limit or is malformed;
|                                  nothing was submitted, and retrying cannot help
+-- SubmissionFailed               the batch system refused or did not answer
+-- JobNotFound                    the executor knows no such job
+-- WalltimeNotExtended            a running job's limit could not be raised in place:
                                   refused (rights, partition MaxTime, job ended), not
                                   supported (Tapis), or transient (controller down)
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from knowledge_base.catalog import MemoryMB
from knowledge_base.errors import RightsizeError
from knowledge_base.records import JobRecord, JobState
from knowledge_base.workload import DurationS

__all__ = [
    "ActuatorError",
    "JobNotFound",
    "JobRequest",
    "JobStatus",
    "QueueEntry",
    "RequestRejected",
    "SimulatedWork",
    "SubmissionFailed",
    "WalltimeNotExtended",
]

# Control characters would end a directive line or a log record; everything printable,
# shell metacharacters included, is passed as data and never through a shell.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ActuatorError(RightsizeError):
    """An executor failed; ``transient`` says whether the same call may succeed later."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message, transient=transient)


class RequestRejected(ActuatorError):
    """The request can never be accepted as written; it names the limit it breaks."""

    def __init__(self, message: str, *, field: str | None = None, value: object = None) -> None:
        super().__init__(message, transient=False)
        self.field = field
        self.value = value


class SubmissionFailed(ActuatorError):
    """The batch system refused the submission or could not be reached."""


class JobNotFound(ActuatorError, LookupError):
    """No job with that id is known to the executor."""


class WalltimeNotExtended(ActuatorError):
    """A job's time limit was not raised; ``transient`` when a retry may help (the
    controller did not answer), never when the batch system refused or cannot do it."""


class SimulatedWork(BaseModel):
    """How a job behaves on the simulated cluster (ignored by real backends)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_s: DurationS = Field(description="How long the job would run if not killed")
    peak_memory_mb: MemoryMB = Field(default=0, description="Peak memory per node, MB")
    exit_code: int = 0


class JobRequest(BaseModel):
    """One batch job, validated whole before any executor sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    partition: str = Field(min_length=1)
    command: str = Field(min_length=1, description="Body of the batch script (bash)")
    nodes: int = Field(default=1, ge=1)
    tasks_per_node: int = Field(default=1, ge=1)
    cpus_per_task: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    ntasks: int | None = Field(
        default=None,
        ge=1,
        description="Ranks in all (sbatch --ntasks); None: nodes x tasks_per_node. "
        "A layout that does not fill its last node starts exactly these",
    )
    memory_mb: MemoryMB = Field(gt=0, description="Per node, MB")
    memory_per_cpu_mb: MemoryMB | None = Field(
        default=None,
        description="Per core, MB (sbatch --mem-per-cpu), when the user asked memory per "
        "core; memory_mb stays the per-node total every check uses",
    )
    walltime_s: DurationS = Field(gt=0)
    working_dir: Path | None = None
    account: str | None = None
    qos: str | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    plan_id: str | None = None
    simulated: SimulatedWork | None = None

    @field_validator("name", "partition", "account", "qos")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and _CONTROL.search(value):
            raise ValueError(f"control characters are not allowed, got {value!r}")
        return value

    @field_validator("working_dir")
    @classmethod
    def _absolute_dir(cls, value: Path | None) -> Path | None:
        if value is None:
            return value
        if _CONTROL.search(str(value)):
            raise ValueError(f"control characters are not allowed, got {str(value)!r}")
        if not value.is_absolute():
            raise ValueError(f"working_dir must be absolute, got {str(value)!r}")
        return value

    @field_validator("environment")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"environment: {name!r} is not a valid variable name")
        return value

    @model_validator(mode="after")
    def _cores(self) -> Self:
        if self.cores_per_node < 1:
            raise ValueError("a job needs at least one core per node")
        return self

    @model_validator(mode="after")
    def _ranks(self) -> Self:
        if self.ntasks is not None and not (
            self.nodes <= self.ntasks <= self.nodes * self.tasks_per_node
        ):
            raise ValueError(
                f"ntasks: {self.ntasks} ranks do not fit {self.nodes} nodes of "
                f"{self.tasks_per_node} tasks (at least one per node)"
            )
        return self

    @property
    def cores_per_node(self) -> int:
        return self.tasks_per_node * self.cpus_per_task

    @property
    def walltime_minutes(self) -> int:
        """What batch systems accept: whole minutes, rounded up."""
        return -(-self.walltime_s // 60)


class JobStatus(BaseModel):
    """A job's state as the executor last saw it."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    state: JobState
    native_state: str = Field(description="The batch system's own word for the state")
    name: str | None = None
    partition: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state.ended

    def to_record(self, system: str, source: str, **extra: Any) -> JobRecord:
        """The job as history keeps it; wait and run derive from the times known."""
        submit = self.submit_time or self.start_time or self.end_time
        if submit is None:
            raise ValueError(f"job {self.job_id!r} has no submit, start or end time to record")
        fields: dict[str, Any] = {
            "job_id": self.job_id,
            "system": system,
            "partition": self.partition,
            "application": self.name,
            "state": self.state,
            "submit_time": submit,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "wait_s": _seconds(submit, self.start_time),
            "run_s": _seconds(self.start_time, self.end_time),
            "exit_code": self.exit_code,
            "source": source,
        }
        fields.update(extra)
        return JobRecord.model_validate(fields)


def _seconds(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, int((end - start).total_seconds()))


class QueueEntry(BaseModel):
    """One job in a queue snapshot: what planning needs to guess the wait."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    state: JobState
    partition: str | None = None
    user: str | None = None
    nodes: int = 1
    cpus: int = 1
    time_limit_s: int | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
