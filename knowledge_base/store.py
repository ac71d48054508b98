"""The one async interface every part of Rightsize reads and writes its state through.

Two backends implement it (``SQLiteKnowledgeBase``, ``MongoKnowledgeBase``); one
contract test suite runs over both. Writes that belong together are atomic:

- the catalog is stored as one document, so an import replaces it whole or not at all;
- ``complete_event`` records an event as handled together with the messages its handler
  wants published (an outbox), so a crash can neither lose those messages nor let a
  redelivered event act twice;
- ``promote_estimator`` retires the previous promoted estimator for the same target in
  the same write as it promotes the new one;
- ``put_plan`` is a compare-and-set on the plan's version.

What the status page and the metrics read of the plans (``count_plans``,
``count_plan_jobs``, ``query_plans`` with a status filter and a limit) is answered by the
database from indexed columns, without loading every plan: a center stores tens of
thousands of plans a day.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog, Partition, System
from knowledge_base.errors import NotFoundError
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    Plan,
    PlanStatus,
    ProfileRecord,
    ProfileStatus,
)

__all__ = ["JobQuery", "KnowledgeBase", "OutboxMessage", "PlanQuery", "plan_jobs"]


class OutboxMessage(BaseModel):
    """A message a handler wants published, stored with its event's completion."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message_id: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    key: str
    value: str = Field(description="The serialized message (JSON)")


class JobQuery(BaseModel):
    """Filters for job history; all optional, combined with AND."""

    model_config = ConfigDict(extra="forbid")

    system: str | None = None
    user: str | None = None
    application: str | None = None
    plan_id: str | None = None
    submitted_after: datetime | None = None
    submitted_before: datetime | None = None
    newest_first: bool = Field(
        default=False,
        description="Ordered by submit time, newest first (the latest ``limit`` jobs); "
        "else oldest first",
    )
    limit: int = Field(default=1000, ge=1, le=1_000_000)


class PlanQuery(BaseModel):
    """Filters for plans; all optional, combined with AND."""

    model_config = ConfigDict(extra="forbid")

    user: str | None = None
    statuses: frozenset[PlanStatus] | None = Field(
        default=None, description="Plans in any of these states; None: any state"
    )
    ids: frozenset[str] | None = Field(default=None, description="Only these plans")
    newest_first: bool = Field(
        default=False,
        description="Ordered by last update, newest first; else by creation, oldest first",
    )
    limit: int | None = Field(default=None, ge=1, le=1_000_000)


def plan_jobs(plan: Plan) -> list[tuple[str, str]]:
    """A plan's jobs as (state, partition), from its segment ledger.

    Every submitted segment is one job; its partition is the plan's (``none`` without an
    option); a job no monitor has reported on yet is ``submitted``.
    """
    partition = plan.option.partition if plan.option is not None else "none"
    return [
        (str(s.state) if s.state is not None else "submitted", partition)
        for s in plan.segments
        if s.job_id is not None
    ]


class KnowledgeBase(abc.ABC):
    """Catalog, policies, job history, profiles, estimators, plans, processed events."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abc.abstractmethod
    async def close(self) -> None: ...

    # -- catalog and policies -------------------------------------------------------

    @abc.abstractmethod
    async def get_catalog(self) -> Catalog:
        """The whole catalog; empty when nothing was imported yet."""

    @abc.abstractmethod
    async def put_catalog(self, catalog: Catalog) -> None:
        """Replace the whole catalog atomically."""

    async def get_system(self, name: str) -> System:
        return (await self.get_catalog()).system(name)

    async def put_system(self, system: System) -> None:
        """Add a system or replace the one with its name (the rest stay as they are)."""
        await self.put_catalog((await self.get_catalog()).with_system(system))

    async def get_partition(self, system: str, partition: str) -> Partition:
        """The policy a submission to ``system``/``partition`` must satisfy."""
        return (await self.get_system(system)).partition(partition)

    # -- job history ------------------------------------------------------------------

    @abc.abstractmethod
    async def add_jobs(self, jobs: Sequence[JobRecord]) -> int:
        """Insert or replace jobs keyed by (system, job_id); returns how many were written."""

    @abc.abstractmethod
    async def get_job(self, system: str, job_id: str) -> JobRecord: ...

    @abc.abstractmethod
    async def replace_job(self, expected: JobRecord | None, new: JobRecord) -> bool:
        """Store ``new`` only if the job's record is still ``expected`` (None: only if
        there is none), in one atomic step; False when another writer came first
        (``knowledge_base.cas.update_job`` retries)."""

    @abc.abstractmethod
    async def query_jobs(self, query: JobQuery) -> list[JobRecord]:
        """Matching jobs ordered by submit time, oldest first."""

    async def count_jobs(self, query: JobQuery) -> int:
        """How many jobs match ``query`` (its ``limit`` is ignored): a cheap check of
        whether history changed. Backends count in the database."""
        return len(await self.query_jobs(query.model_copy(update={"limit": 1_000_000})))

    async def add_new_jobs(self, jobs: Sequence[JobRecord]) -> int:
        """Insert the jobs not known yet, keyed by (system, job_id), all in one write;
        known jobs are left as they are. Returns how many were inserted. Backends do it
        in one transaction, so a failed batch writes nothing."""
        new = []
        for job in jobs:
            try:
                await self.get_job(job.system, job.job_id)
            except NotFoundError:
                new.append(job)
        return await self.add_jobs(new) if new else 0

    # -- profiles ---------------------------------------------------------------------

    @abc.abstractmethod
    async def add_profiles(self, profiles: Sequence[ProfileRecord]) -> int: ...

    @abc.abstractmethod
    async def query_profiles(
        self, *, family: str | None = None, status: ProfileStatus | None = None
    ) -> list[ProfileRecord]: ...

    # -- estimator registry -----------------------------------------------------------

    @abc.abstractmethod
    async def put_estimator(self, record: EstimatorRecord) -> None: ...

    @abc.abstractmethod
    async def get_estimator(self, estimator_id: str) -> EstimatorRecord: ...

    @abc.abstractmethod
    async def list_estimators(
        self, *, target: str | None = None, status: EstimatorStatus | None = None
    ) -> list[EstimatorRecord]: ...

    @abc.abstractmethod
    async def promote_estimator(self, estimator_id: str) -> EstimatorRecord:
        """Promote one estimator and retire the one it replaces, atomically."""

    async def promoted_estimator(self, target: str) -> EstimatorRecord | None:
        promoted = await self.list_estimators(target=target, status=EstimatorStatus.PROMOTED)
        return promoted[0] if promoted else None

    # -- plans ------------------------------------------------------------------------

    @abc.abstractmethod
    async def put_plan(self, plan: Plan) -> Plan:
        """Store a plan whose ``version`` is the stored one (0 for new); returns it bumped.

        Raises ConflictError when someone else updated the plan in between.
        """

    @abc.abstractmethod
    async def get_plan(self, plan_id: str) -> Plan: ...

    @abc.abstractmethod
    async def list_plans(
        self, *, user: str | None = None, status: PlanStatus | None = None
    ) -> list[Plan]: ...

    @abc.abstractmethod
    async def query_plans(self, query: PlanQuery) -> list[Plan]:
        """Matching plans in the query's order, filtered, ordered and limited in the
        database (an index on state and last update)."""

    @abc.abstractmethod
    async def count_plans(self) -> dict[PlanStatus, int]:
        """How many plans are in each state (states with none left out), counted in the
        database."""

    @abc.abstractmethod
    async def count_plan_jobs(self) -> dict[tuple[str, str], int]:
        """Rightsize's jobs by (state, partition) over every plan's ledger, as
        ``plan_jobs`` tells them, counted in the database."""

    # -- processed events and outbox --------------------------------------------------

    @abc.abstractmethod
    async def is_processed(self, consumer: str, event_id: str) -> bool: ...

    @abc.abstractmethod
    async def complete_event(
        self, consumer: str, event_id: str, outbox: Sequence[OutboxMessage] = ()
    ) -> bool:
        """Mark an event handled by ``consumer`` and store its outbox, atomically.

        Returns False, writing nothing, when the event was already completed.
        """

    async def processed_ids(self, consumer: str, event_ids: Sequence[str]) -> set[str]:
        """Which of ``event_ids`` ``consumer`` has completed; backends answer in one query."""
        return {e for e in event_ids if await self.is_processed(consumer, e)}

    async def complete_events(
        self, consumer: str, completions: Sequence[tuple[str, Sequence[OutboxMessage]]]
    ) -> list[bool]:
        """``complete_event`` for many (event id, outbox) pairs, in order, in one write.

        Returns, per pair, whether it was newly completed (False: already was; its outbox
        is dropped). Backends store all pairs in one transaction.
        """
        return [await self.complete_event(consumer, e, outbox) for e, outbox in completions]

    @abc.abstractmethod
    async def pending_outbox(self, consumer: str, limit: int = 1000) -> list[OutboxMessage]:
        """Outbox messages of completed events not yet marked sent, oldest first."""

    @abc.abstractmethod
    async def mark_outbox_sent(self, consumer: str, message_ids: Sequence[str]) -> None: ...

    @abc.abstractmethod
    async def count_processed(self, consumer: str) -> int: ...

    @abc.abstractmethod
    async def prune_processed(self, before: datetime) -> int:
        """Forget events completed before ``before`` whose outbox was sent; returns how many.

        Processed ids grow with every event every agent handles. Keep them longer than the
        bus retains messages (Kafka's retention.ms), so no redelivery can outlive its id.
        """


def not_found(what: str, key: str) -> NotFoundError:
    return NotFoundError(f"no {what} {key!r} in the knowledge base")
