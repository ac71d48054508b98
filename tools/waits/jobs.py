"""The center's past as arrays, and the queue a trace implies at any instant.

A ``JobTable`` holds every job with a known submit, start and run time (SWF, or
accounting records), sorted by submit time. ``snapshot_at(t)`` is the queue a scheduler
saw at t: running (started by t, not ended) and pending (submitted by t, not started);
``finished_before(t)`` is what a predictor may learn from at t.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord
from tools.traces.swf import SWFJob, read_swf
from tools.waits.snapshot import PendingJob, RunningJob, WaitSnapshot

__all__ = ["JobTable", "load_history"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class JobTable:
    """Jobs sorted by submit time; times in seconds on the history's clock."""

    job_id: NDArray[np.str_]
    submit_s: FloatArray
    start_s: FloatArray
    end_s: FloatArray
    procs: IntArray
    requested_s: FloatArray
    user: IntArray  # an index into ``users``
    queue: IntArray  # an index into ``queues``
    users: tuple[str, ...]
    queues: tuple[str, ...]
    total_procs: int
    name: str = "history"

    def __len__(self) -> int:
        return len(self.submit_s)

    @property
    def wait_s(self) -> FloatArray:
        return self.start_s - self.submit_s

    @property
    def run_s(self) -> FloatArray:
        return self.end_s - self.start_s

    @classmethod
    def build(
        cls,
        rows: Sequence[tuple[str, float, float, float, int, float, str | None, str | None]],
        total_procs: int | None,
        name: str = "history",
    ) -> JobTable:
        """From (job_id, submit, start, end, procs, requested, user, queue) rows."""
        rows = sorted(rows, key=lambda r: (r[1], r[2]))
        users: dict[str, int] = {}
        queues: dict[str, int] = {}
        user_index = [users.setdefault(r[6] or "?", len(users)) for r in rows]
        queue_index = [queues.setdefault(r[7] or "", len(queues)) for r in rows]
        procs = np.array([r[4] for r in rows], dtype=np.int64)
        total = total_procs or (int(procs.max()) if len(procs) else 1)
        return cls(
            job_id=np.array([r[0] for r in rows], dtype=np.str_),
            submit_s=np.array([r[1] for r in rows], dtype=np.float64),
            start_s=np.array([r[2] for r in rows], dtype=np.float64),
            end_s=np.array([r[3] for r in rows], dtype=np.float64),
            procs=procs,
            requested_s=np.array([r[5] for r in rows], dtype=np.float64),
            user=np.array(user_index, dtype=np.int64),
            queue=np.array(queue_index, dtype=np.int64),
            users=tuple(users),
            queues=tuple(queues),
            total_procs=max(total, int(procs.max()) if len(procs) else 1),
            name=name,
        )

    @classmethod
    def from_swf(cls, jobs: Sequence[SWFJob], total_procs: int | None, name: str) -> JobTable:
        """Jobs with a wait, a run time and processors; an unknown request becomes the
        longest run seen (the archive's traces without requests)."""
        longest = max((j.run_s or 0 for j in jobs), default=3600) or 3600
        rows = []
        for job in jobs:
            procs = job.procs
            if job.wait_s is None or job.run_s is None or not procs or procs < 1:
                continue
            start = job.submit_time_s + job.wait_s
            requested = job.requested_time_s or max(longest, job.run_s)
            rows.append(
                (
                    str(job.job_id),
                    float(job.submit_time_s),
                    float(start),
                    float(start + job.run_s),
                    int(procs),
                    float(max(requested, 1)),
                    None if job.user_id is None else str(job.user_id),
                    None if job.queue_id is None else str(job.queue_id),
                )
            )
        return cls.build(rows, total_procs, name)

    @classmethod
    def from_records(cls, records: Sequence[JobRecord], total_procs: int | None) -> JobTable:
        """Accounting records (Unix seconds) with submit, start and end times."""
        rows = []
        for record in records:
            if record.start_time is None or record.end_time is None:
                continue
            procs = record.requested_cores or record.requested_nodes or 1
            submit = record.submit_time.timestamp()
            start = record.start_time.timestamp()
            end = record.end_time.timestamp()
            requested = record.requested_walltime_s or max(end - start, 60.0)
            rows.append(
                (
                    record.job_id,
                    submit,
                    start,
                    end,
                    int(procs),
                    float(requested),
                    record.user,
                    record.partition,
                )
            )
        return cls.build(rows, total_procs, "accounting")

    def before(self, t: float) -> JobTable:
        """Only what was known at ``t``: jobs that had started by then, ends clipped to
        "still running" when they came later (the end is not known yet)."""
        mask = self.start_s <= t
        end = np.where(self.end_s <= t, self.end_s, np.inf)
        return JobTable(
            job_id=self.job_id[mask],
            submit_s=self.submit_s[mask],
            start_s=self.start_s[mask],
            end_s=end[mask],
            procs=self.procs[mask],
            requested_s=self.requested_s[mask],
            user=self.user[mask],
            queue=self.queue[mask],
            users=self.users,
            queues=self.queues,
            total_procs=self.total_procs,
            name=self.name,
        )

    def pending_index(self, t: float) -> IntArray:
        """Rows of the jobs pending at ``t``, in the order ``snapshot_at`` lists them."""
        return np.flatnonzero((self.submit_s <= t) & (self.start_s > t))

    def snapshot_at(self, t: float) -> WaitSnapshot:
        """The queue at ``t`` from the recorded submit, start and end times."""
        running_mask = (self.start_s <= t) & (self.end_s > t)
        running = [
            RunningJob(
                job_id=str(self.job_id[i]),
                user=self.users[self.user[i]],
                procs=int(self.procs[i]),
                submit_s=float(self.submit_s[i]),
                start_s=float(self.start_s[i]),
                requested_s=float(self.requested_s[i]),
                queue=self.queues[self.queue[i]] or None,
            )
            for i in np.flatnonzero(running_mask)
        ]
        pending = [
            PendingJob(
                job_id=str(self.job_id[i]),
                user=self.users[self.user[i]],
                procs=int(self.procs[i]),
                submit_s=float(self.submit_s[i]),
                requested_s=float(self.requested_s[i]),
                queue=self.queues[self.queue[i]] or None,
            )
            for i in self.pending_index(t)
        ]
        return WaitSnapshot(
            taken_at=float(t), total_procs=self.total_procs, running=running, pending=pending
        )


def load_history(path: Path, total_procs: int | None = None) -> JobTable:
    """An SWF trace as history; a file that is not SWF is an InvalidInputError."""
    header, jobs, _ = read_swf(path)
    table = JobTable.from_swf(jobs, total_procs or header.max_procs, path.name)
    if len(table) == 0:
        raise InvalidInputError(
            "no job with a submit, wait and run time: not a usable SWF history",
            source=str(path),
            field="history",
        )
    return table
