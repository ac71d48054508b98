"""A real batch system's queue and past, through its executor, as the predictor reads them.

The executor is the one seam to the batch system (``tools.actuators``: for SLURM,
``squeue --json`` and ``sinfo`` for the queue and pools, ``sacct`` or the jobcomp file
for the jobs that ended). Sizes are nodes here, as SLURM counts a machine; times are
Unix seconds.
"""

from __future__ import annotations

from datetime import timedelta

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord, JobState
from tools.actuators.base import Executor
from tools.actuators.state import ClusterState
from tools.waits.jobs import JobTable
from tools.waits.snapshot import PendingJob, RunningJob, WaitSnapshot

__all__ = ["history_from_records", "live_queue", "snapshot_from_cluster"]

_UNKNOWN_LIMIT_S = 24 * 3600


def snapshot_from_cluster(state: ClusterState) -> WaitSnapshot:
    """The snapshot a ``cluster_state()`` describes (every pool together, in nodes)."""
    total = sum(pool.total_nodes or 0 for pool in state.pools)
    taken_at = state.taken_at.timestamp()
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    for job in state.jobs:
        submit_s = min((job.submit_time or state.taken_at).timestamp(), taken_at)
        pending_job = PendingJob(
            job_id=job.job_id,
            user=job.user,
            procs=max(job.nodes, 1),
            submit_s=submit_s,
            requested_s=float(job.time_limit_s or _UNKNOWN_LIMIT_S),
            queue=job.partition,
        )
        if job.state is JobState.RUNNING:
            start = max(min((job.start_time or state.taken_at).timestamp(), taken_at), submit_s)
            running.append(RunningJob(**pending_job.model_dump(), start_s=start))
        elif job.state is JobState.PENDING:
            pending.append(pending_job)
    busy = sum(job.procs for job in running)
    if total < 1:
        raise InvalidInputError(
            "the batch system reported no node counts", source=state.source, field="pools"
        )
    return WaitSnapshot(
        taken_at=taken_at, total_procs=max(total, busy), running=running, pending=pending
    )


def history_from_records(records: list[JobRecord], total_nodes: int) -> JobTable:
    """Accounting records as history, in nodes."""
    rows = []
    for record in records:
        if record.start_time is None or record.end_time is None:
            continue
        start, end = record.start_time.timestamp(), record.end_time.timestamp()
        rows.append(
            (
                record.job_id,
                record.submit_time.timestamp(),
                start,
                end,
                int(record.requested_nodes or 1),
                float(record.requested_walltime_s or max(end - start, 60.0)),
                record.user,
                record.partition,
            )
        )
    return JobTable.build(rows, total_nodes, "accounting")


async def live_queue(
    executor: Executor, history_days: float = 60.0
) -> tuple[WaitSnapshot, JobTable]:
    """The queue now and the jobs that ended in the last ``history_days``."""
    state = await executor.cluster_state()
    snapshot = snapshot_from_cluster(state)
    since = state.taken_at - timedelta(days=history_days)
    records = await executor.finished_jobs(since=since)
    return snapshot, history_from_records(records, snapshot.total_procs)
