"""Compare-and-set updates of the records several agents write: plans and jobs.

    update_plan(kb, plan_id, change)            read, change, store if nobody stored since
    update_job(kb, system, job_id, change)      the same for a job record (None: not known)

``change`` is a pure function of what is stored now; it returns the new record, or None
when there is nothing to do. On a lost race (another writer stored in between) it is
applied again to what is stored then, so no writer's change is lost: a prediction
annotated while the job ended keeps the job's end, and the end keeps the prediction.
After ``tries`` lost races the caller gets a transient error and retries its event.
"""

from __future__ import annotations

from collections.abc import Callable

from knowledge_base.errors import ConflictError, NotFoundError, RightsizeError
from knowledge_base.records import JobRecord, Plan
from knowledge_base.store import KnowledgeBase

__all__ = ["JobRaced", "PlanRaced", "update_job", "update_plan"]


class PlanRaced(RightsizeError):
    """Someone else kept updating the plan; the handler is retried from the start."""

    transient = True


class JobRaced(RightsizeError):
    """Someone else kept updating the job record; the handler is retried from the start."""

    transient = True


async def update_plan(
    kb: KnowledgeBase, plan_id: str, change: Callable[[Plan], Plan | None], *, tries: int = 8
) -> Plan:
    """Read the plan, apply ``change`` (None: nothing to do) and store it, compare-and-set
    on the plan's version (another agent, a second Scheduler replica, may update it)."""
    for _ in range(tries):
        plan = await kb.get_plan(plan_id)
        changed = change(plan)
        if changed is None:
            return plan
        try:
            return await kb.put_plan(changed)
        except ConflictError:
            continue
    raise PlanRaced(f"plan {plan_id!r} kept changing under {tries} updates; retrying")


async def update_job(
    kb: KnowledgeBase,
    system: str,
    job_id: str,
    change: Callable[[JobRecord | None], JobRecord | None],
    *,
    tries: int = 8,
) -> JobRecord | None:
    """Read the job (None when history has no such job), apply ``change`` (None: nothing
    to do) and store it only if the record is still what was read."""
    for _ in range(tries):
        try:
            known: JobRecord | None = await kb.get_job(system, job_id)
        except NotFoundError:
            known = None
        changed = change(known)
        if changed is None:
            return known
        if await kb.replace_job(known, changed):
            return changed
    raise JobRaced(f"job {system}/{job_id} kept changing under {tries} updates; retrying")
