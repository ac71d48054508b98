"""A trace as the simulator wants it: numpy columns sorted by submit time, with drops counted.

Machine size comes from the trace header (MaxProcs, else MaxNodes) unless given. A job's
size is its requested processors (SWF field 8), else its allocated ones (field 5). Jobs
asking for more than the machine, or with no run time or no request, cannot be replayed
and are dropped and counted by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord
from tools.traces.swf import SWFJob, SWFReader

__all__ = [
    "Workload",
    "load_swf",
    "machine_size",
    "replayable",
    "workload_from_jobs",
    "workload_from_records",
]

_COLUMNS = ("submit_s", "run_s", "req_s", "procs", "user", "job_ids")


@dataclass
class Workload:
    """Jobs in submit order; ``est_s`` starts as the request (the ``user`` estimate)."""

    name: str
    machine_procs: int
    submit_s: np.ndarray
    run_s: np.ndarray
    req_s: np.ndarray
    procs: np.ndarray
    user: np.ndarray
    job_ids: np.ndarray
    dropped: Counter[str] = field(default_factory=Counter)
    skipped_lines: int = 0

    @property
    def jobs(self) -> int:
        return int(self.submit_s.size)

    def slice(self, start: int, stop: int | None = None) -> Workload:
        """Jobs ``start`` up to ``stop`` (to the end when None), as Python slices them, on
        the same timeline; the columns are copies, the drop counts the whole trace's."""
        cut = slice(start, stop)
        return replace(
            self,
            **{column: getattr(self, column)[cut].copy() for column in _COLUMNS},
            dropped=Counter(self.dropped),
        )


def replayable(job: SWFJob, machine_procs: int) -> tuple[int, int, int] | str:
    """The job's run time, request and processors, or why it cannot be replayed on
    ``machine_procs`` processors (the reason ``dropped`` counts it under)."""
    size = job.procs
    if not job.run_s or job.run_s <= 0:
        return "no run time"
    if not job.requested_time_s or job.requested_time_s <= 0:
        return "no requested time"
    if size is None or size <= 0:
        return "no processor count"
    if size > machine_procs:
        return "larger than the machine"
    return job.run_s, job.requested_time_s, size


def machine_size(reader: SWFReader, procs: int | None = None) -> int:
    """``procs`` when given, else the trace header's MaxProcs, else its MaxNodes."""
    machine = procs or reader.header.max_procs or reader.header.max_nodes
    if not machine:
        raise InvalidInputError(
            "the trace header gives neither MaxProcs nor MaxNodes; pass --procs",
            source=str(reader.path),
            field="MaxProcs",
        )
    return machine


def workload_from_jobs(jobs: Iterable[SWFJob], *, name: str, machine_procs: int) -> Workload:
    """Replayable jobs from SWF records; the rest counted in ``dropped`` by reason."""
    if machine_procs < 1:
        raise InvalidInputError(
            "the machine needs at least one processor", field="procs", value=machine_procs
        )
    rows: list[tuple[int, int, int, int, int, int]] = []
    dropped: Counter[str] = Counter()
    users: dict[int, int] = {}
    for job in jobs:
        checked = replayable(job, machine_procs)
        if isinstance(checked, str):
            dropped[checked] += 1
            continue
        run_s, req_s, size = checked
        user = -1 if job.user_id is None else users.setdefault(job.user_id, len(users))
        rows.append((job.submit_time_s, run_s, req_s, size, user, job.job_id))
    rows.sort(key=lambda r: (r[0], r[5]))
    table = np.array(rows, dtype=np.int64).reshape(-1, 6)
    return Workload(
        name=name,
        machine_procs=machine_procs,
        submit_s=table[:, 0].copy(),
        run_s=table[:, 1].copy(),
        req_s=table[:, 2].copy(),
        procs=table[:, 3].copy(),
        user=table[:, 4].copy(),
        job_ids=table[:, 5].copy(),
        dropped=dropped,
    )


def load_swf(path: str | Path, *, procs: int | None = None) -> Workload:
    """Read a whole SWF trace (plain or .gz) into a Workload."""
    with SWFReader(path) as reader:
        machine = machine_size(reader, procs)
        workload = workload_from_jobs(reader, name=Path(path).name, machine_procs=machine)
        workload.skipped_lines = reader.report.skipped
    return workload


def workload_from_records(
    records: Iterable[JobRecord], *, name: str, machine_procs: int
) -> Workload:
    """The project's own job history (e.g. a simulated cluster's) as a Workload."""
    origin: float | None = None
    jobs: list[SWFJob] = []
    for number, record in enumerate(sorted(records, key=lambda r: r.submit_time), start=1):
        origin = record.submit_time.timestamp() if origin is None else origin
        jobs.append(
            SWFJob(
                job_id=number,
                submit_time_s=int(record.submit_time.timestamp() - origin),
                wait_s=record.wait_s,
                run_s=record.run_s,
                allocated_procs=record.requested_cores,
                avg_cpu_time_s=None,
                used_memory_kb_per_proc=None,
                requested_procs=record.requested_cores,
                requested_time_s=record.requested_walltime_s,
                requested_memory_kb_per_proc=None,
                status=None,
                user_id=None,
                group_id=None,
                executable_id=None,
                queue_id=None,
                partition_id=None,
                preceding_job_id=None,
                think_time_s=None,
            )
        )
    return workload_from_jobs(jobs, name=name, machine_procs=machine_procs)
