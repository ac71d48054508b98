"""The MCP tool for queue waits: when will this job start, with its p10-p90 interval.

    predict_job_start   read-only   a pending job's start, or a job not yet submitted

The answer is ``tools.waits.job_start.predict_job_start``, the function behind
``rightsize queue predict``; history is the knowledge base's finished jobs of ``system``
(times in Unix seconds, as a live snapshot has them), none when no system is named.
"""

from __future__ import annotations

from datetime import UTC, datetime

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.store import JobQuery
from mcp_server.context import AppContext
from mcp_server.tools import add_tools
from tools.waits.job_start import JobStart, NewJob, predict_job_start
from tools.waits.jobs import JobTable
from tools.waits.live import history_from_records
from tools.waits.snapshot import WaitSnapshot

__all__ = ["QUEUE_TOOLS", "PredictJobStartInput", "predict_start", "register_queue_tools"]

_HISTORY_DAYS = 60
_HISTORY_LIMIT = 200_000


class PredictJobStartInput(BaseModel):
    """The queue now, and which job: a pending one (job_id) or one not yet submitted."""

    model_config = ConfigDict(extra="forbid")

    snapshot: WaitSnapshot = Field(
        description=(
            "The queue: taken_at, total_procs, running [{job_id, user, procs, submit_s, "
            "start_s, requested_s, queue}], pending [{job_id, user, procs, submit_s, "
            "requested_s, queue}]; seconds"
        )
    )
    job_id: str | None = Field(default=None, description="A pending job of the snapshot")
    new_job: NewJob | None = Field(
        default=None, description="Or a job not submitted yet: procs, requested_s, user, queue"
    )
    system: str | None = Field(
        default=None,
        max_length=64,
        description="Learn from this system's job history in the knowledge base",
        examples=["pitzer"],
    )


async def _history(app: AppContext, system: str | None, request: PredictJobStartInput) -> JobTable:
    total = request.snapshot.total_procs
    if system is None:
        return JobTable.build([], total, "none")
    since = datetime.fromtimestamp(request.snapshot.taken_at, UTC)
    records = await app.kb.query_jobs(
        JobQuery(system=system, submitted_before=since, newest_first=True, limit=_HISTORY_LIMIT)
    )
    return history_from_records(records, total)


async def predict_start(request: PredictJobStartInput, app: AppContext, user: str) -> JobStart:
    """When the job will start (p50), with its p10-p90 interval and what that rests on."""
    history = await _history(app, request.system, request)
    return predict_job_start(
        request.snapshot, history, job_id=request.job_id, new_job=request.new_job
    )


_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True)
QUEUE_TOOLS = {
    "predict_job_start": (
        predict_start,
        PredictJobStartInput,
        JobStart,
        _READ,
        "When a pending job (or one not yet submitted) will start: p50 and p10-p90, "
        "learned from the center's recorded waits.",
    ),
}


def register_queue_tools(server: MCPServer[AppContext]) -> None:
    """The queue-wait tools on ``server``."""
    add_tools(server, QUEUE_TOOLS)
