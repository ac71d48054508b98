"""Teaching Rightsize a center's past: SLURM accounting (``sacct``) into job history.

``import_slurm_history`` asks ``sacct`` once for every job that ended since ``since``
(all of them when None), validates every row before it writes anything (a malformed
row is an error naming its line, field and value, and nothing is written), then writes
the finished jobs in batches, each batch one transaction that inserts only the jobs the
knowledge base does not know (``KnowledgeBase.add_new_jobs``). Each job keeps its peak
memory (``MaxRSS``), request (``ReqMem``), CPU time (``TotalCPU``) and task layout
(nodes, CPUs, ``NTasks``); a finished job whose accounting has no ``MaxRSS`` is stored
with no used memory (never a zero) and named in ``without_max_rss``. A second import of the
same past adds nothing; an import stopped half-way leaves whole batches, and running it
again adds the rest. The estimator chain (``tools.planning.chain``) sees the knowledge
base's job count move and retrains the history estimator on what was imported.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobState
from knowledge_base.store import KnowledgeBase
from tools.actuators.sacct import SACCT_ENV, parse_sacct, sacct_command
from tools.actuators.slurm import slurm_state
from tools.actuators.slurm_commands import SlurmCommands

__all__ = ["HistoryImport", "import_slurm_history"]

_NAMED = 20
_ENDED = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.CANCELLED,
    }
)


class HistoryImport(BaseModel):
    """What one import read and wrote."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="The command history came from")
    system: str = Field(description="The catalog system the jobs were recorded under")
    cluster: str | None = Field(description="sacct --clusters; None: the local one")
    since: datetime | None
    listed: int = Field(description="Jobs sacct listed (steps folded into their job)")
    finished: int = Field(description="Of them, jobs that had ended: what history keeps")
    added: int = Field(description="New to the knowledge base")
    already_known: int = Field(description="Known already (an earlier import, the monitor)")
    batches: int
    batch_size: int
    without_max_rss: int = Field(
        default=0, description="Finished jobs whose accounting reported no MaxRSS"
    )
    without_max_rss_ids: list[str] = Field(
        default_factory=list, description=f"The first {_NAMED} of them"
    )


async def import_slurm_history(
    kb: KnowledgeBase,
    commands: SlurmCommands,
    *,
    system: str,
    since: datetime | None = None,
    cluster: str | None = None,
    batch_size: int = 1000,
    now: datetime | None = None,
) -> HistoryImport:
    """Finished jobs from ``sacct`` into ``kb`` as ``system``'s history (see module doc)."""
    now = now or datetime.now(UTC)
    if since is not None:
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        if since > now:
            raise InvalidInputError(
                f"is in the future (now is {now.isoformat(timespec='seconds')}); "
                "no job can have ended after it",
                field="--since",
                value=since.isoformat(timespec="seconds"),
            )
    if batch_size < 1:
        raise InvalidInputError("must be at least 1", field="batch_size", value=batch_size)
    args = sacct_command(since=since, cluster=cluster)
    text = await asyncio.to_thread(commands.run, args, None, SACCT_ENV)
    jobs = parse_sacct(text, source="sacct")  # every row checked before anything is written
    records = []
    for job in jobs:
        output = Path(job.work_dir) / f"rightsize-{job.job_id}.out" if job.work_dir else None
        state = await asyncio.to_thread(slurm_state, job.native_state, job.signal, output)
        if state in _ENDED and job.end_time is not None:
            records.append(job.record(system, state, source="slurm sacct"))
    missing = [r.job_id for r in records if r.used_memory_mb is None]
    added = batches = 0
    for start in range(0, len(records), batch_size):
        added += await kb.add_new_jobs(records[start : start + batch_size])
        batches += 1
    return HistoryImport(
        source=" ".join(args),
        system=system,
        cluster=cluster,
        since=since,
        listed=len(jobs),
        finished=len(records),
        added=added,
        already_known=len(records) - added,
        batches=batches,
        batch_size=batch_size,
        without_max_rss=len(missing),
        without_max_rss_ids=missing[:_NAMED],
    )
