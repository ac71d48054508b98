"""The executor interface every batch-system backend implements."""

from __future__ import annotations

import abc
from datetime import datetime

from knowledge_base.catalog import System
from knowledge_base.records import JobRecord
from tools.actuators.model import JobRequest, JobStatus, QueueEntry
from tools.actuators.policy import check_request

__all__ = ["Executor"]


class Executor(abc.ABC):
    """Submit, watch, cancel, snapshot the queue, and account for finished jobs.

    ``system`` is the catalog entry of the machine behind the executor; when given, every
    request is checked against its partition limits before it is submitted.
    """

    backend: str = "abstract"

    def __init__(self, system: System | None = None) -> None:
        self.system = system

    async def submit(self, request: JobRequest) -> str:
        """Submit ``request``; returns the batch system's job id."""
        if self.system is not None:
            check_request(request, self.system)
        return await self._submit(request)

    @abc.abstractmethod
    async def _submit(self, request: JobRequest) -> str: ...

    @abc.abstractmethod
    async def status(self, job_id: str) -> JobStatus:
        """The job's current state; JobNotFound when the executor has never heard of it."""

    @abc.abstractmethod
    async def cancel(self, job_id: str) -> None:
        """Cancel a pending or running job; cancelling a finished job does nothing."""

    @abc.abstractmethod
    async def queue(self) -> list[QueueEntry]:
        """Every job the batch system holds now (pending and running)."""

    @abc.abstractmethod
    async def finished_jobs(self, since: datetime | None = None) -> list[JobRecord]:
        """Accounting of jobs that ended at or after ``since`` (all known when None)."""

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        """The end of what the job printed so far, for progress lines; "" where unknown."""
        return ""
