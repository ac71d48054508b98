"""The center knowledge base on MongoDB, through pymongo's ``AsyncMongoClient``.

(motor, the older async driver, is deprecated by the same maintainers.) The same
atomicity as SQLite without needing a replica set: every write that belongs together
is one document. The catalog is one document; an event's completion and its outbox are
one document; a plan update is a version-conditioned replace. Promoting an estimator
touches two documents, so it promotes first and then retires the others: a crash in
between leaves two promoted, which ``promoted_estimator`` resolves to the newest and
the next promotion repairs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReplaceOne, UpdateOne
from pymongo.errors import (
    ConnectionFailure,
    DuplicateKeyError,
    ExecutionTimeout,
    PyMongoError,
    WTimeoutError,
)

from knowledge_base.catalog import Catalog
from knowledge_base.errors import ConflictError, StorageError
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    Plan,
    PlanStatus,
    ProfileRecord,
    ProfileStatus,
    utc_now,
)
from knowledge_base.store import JobQuery, KnowledgeBase, OutboxMessage, PlanQuery, not_found

__all__ = ["MongoKnowledgeBase", "storage_error"]


def _doc(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json")
    return dumped


def storage_error(exc: PyMongoError, url: str) -> StorageError:
    """``exc`` as a StorageError, transient only when a retry may help: the server was
    unreachable or slow (network errors, timeouts, a primary stepping down) or the driver
    labels it retryable. A rejected write (a duplicate key, a failed validation) is not."""
    transient = (
        isinstance(exc, ConnectionFailure | ExecutionTimeout | WTimeoutError)
        or exc.has_error_label("RetryableWriteError")
        or exc.has_error_label("TransientTransactionError")
    )
    return StorageError(f"MongoDB at {url!r}: {exc}", transient=transient)


class MongoKnowledgeBase(KnowledgeBase):
    """KnowledgeBase over one MongoDB database."""

    def __init__(
        self, url: str, database: str = "rightsize", server_timeout_ms: int = 5000
    ) -> None:
        self.url = url
        self._client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            url, tz_aware=True, serverSelectionTimeoutMS=server_timeout_ms
        )
        self._db = self._client[database]
        self._indexed = False

    async def close(self) -> None:
        await self._client.close()

    @asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        """Every driver failure surfaces as one StorageError naming the server; transient
        when the server could not be reached or answered in time (``storage_error``)."""
        await self._ready()
        try:
            yield
        except PyMongoError as exc:
            raise storage_error(exc, self.url) from exc

    async def _ready(self) -> None:
        if self._indexed:
            return
        try:
            await self._db.jobs.create_index([("user", ASCENDING), ("submit_ts", ASCENDING)])
            await self._db.jobs.create_index([("application", ASCENDING), ("submit_ts", ASCENDING)])
            await self._db.jobs.create_index([("submit_ts", ASCENDING)])
            await self._db.plans.create_index([("user", ASCENDING), ("created_ts", ASCENDING)])
            await self._db.plans.create_index([("status", ASCENDING), ("updated_ts", DESCENDING)])
            await self._db.estimators.create_index([("target", ASCENDING), ("status", ASCENDING)])
            await self._db.events.create_index([("consumer", ASCENDING), ("pending", ASCENDING)])
            await self._db.events.create_index([("processed_ts", ASCENDING)])
        except PyMongoError as exc:
            raise storage_error(exc, self.url) from exc
        self._indexed = True

    # -- catalog ----------------------------------------------------------------------

    async def get_catalog(self) -> Catalog:
        async with self._errors():
            found = await self._db.catalog.find_one({"_id": "catalog"})
            return Catalog.model_validate(found["doc"]) if found else Catalog()

    async def put_catalog(self, catalog: Catalog) -> None:
        async with self._errors():
            await self._db.catalog.replace_one(
                {"_id": "catalog"}, {"_id": "catalog", "doc": _doc(catalog)}, upsert=True
            )

    # -- jobs -------------------------------------------------------------------------

    async def add_jobs(self, jobs: Sequence[JobRecord]) -> int:
        async with self._errors():
            if not jobs:
                return 0
            # Keyed upserts: a retried batch converges to the same state.
            ops = [
                ReplaceOne(
                    {"_id": f"{j.system}/{j.job_id}"},
                    {
                        "_id": f"{j.system}/{j.job_id}",
                        "system": j.system,
                        "user": j.user,
                        "application": j.application,
                        "plan_id": j.plan_id,
                        "submit_ts": j.submit_time.timestamp(),
                        "doc": _doc(j),
                    },
                    upsert=True,
                )
                for j in jobs
            ]
            await self._db.jobs.bulk_write(ops, ordered=True)
            return len(ops)

    async def get_job(self, system: str, job_id: str) -> JobRecord:
        async with self._errors():
            found = await self._db.jobs.find_one({"_id": f"{system}/{job_id}"})
            if found is None:
                raise not_found("job", f"{system}/{job_id}")
            return JobRecord.model_validate(found["doc"])

    async def replace_job(self, expected: JobRecord | None, new: JobRecord) -> bool:
        key = f"{new.system}/{new.job_id}"
        document = {
            "_id": key,
            "system": new.system,
            "user": new.user,
            "application": new.application,
            "plan_id": new.plan_id,
            "submit_ts": new.submit_time.timestamp(),
            "doc": _doc(new),
        }
        async with self._errors():
            if expected is None:
                try:
                    await self._db.jobs.insert_one(document)
                except DuplicateKeyError:
                    return False
                return True
            # the stored document must be the one read: its doc, field for field
            found = await self._db.jobs.find_one_and_replace(
                {"_id": key, "doc": _doc(expected)}, document
            )
            return found is not None

    async def add_new_jobs(self, jobs: Sequence[JobRecord]) -> int:
        async with self._errors():
            if not jobs:
                return 0
            # Insert-if-absent: a known job is left as it is; a retried batch converges.
            ops = [
                UpdateOne(
                    {"_id": f"{j.system}/{j.job_id}"},
                    {
                        "$setOnInsert": {
                            "system": j.system,
                            "user": j.user,
                            "application": j.application,
                            "plan_id": j.plan_id,
                            "submit_ts": j.submit_time.timestamp(),
                            "doc": _doc(j),
                        }
                    },
                    upsert=True,
                )
                for j in jobs
            ]
            result = await self._db.jobs.bulk_write(ops, ordered=False)
            return int(result.upserted_count)

    async def count_jobs(self, query: JobQuery) -> int:
        async with self._errors():
            return int(await self._db.jobs.count_documents(_job_filter(query)))

    async def query_jobs(self, query: JobQuery) -> list[JobRecord]:
        async with self._errors():
            flt = _job_filter(query)
            way = DESCENDING if query.newest_first else ASCENDING
            cursor = (
                self._db.jobs.find(flt).sort([("submit_ts", way), ("_id", way)]).limit(query.limit)
            )
            return [JobRecord.model_validate(d["doc"]) async for d in cursor]

    # -- profiles ---------------------------------------------------------------------

    async def add_profiles(self, profiles: Sequence[ProfileRecord]) -> int:
        async with self._errors():
            if not profiles:
                return 0
            ops = [
                ReplaceOne(
                    {"_id": p.id},
                    {"_id": p.id, "family": p.family, "status": p.status.value, "doc": _doc(p)},
                    upsert=True,
                )
                for p in profiles
            ]
            await self._db.profiles.bulk_write(ops, ordered=True)
            return len(ops)

    async def query_profiles(
        self, *, family: str | None = None, status: ProfileStatus | None = None
    ) -> list[ProfileRecord]:
        async with self._errors():
            flt: dict[str, Any] = {}
            if family is not None:
                flt["family"] = family
            if status is not None:
                flt["status"] = status.value
            cursor = self._db.profiles.find(flt).sort("_id", ASCENDING)
            return [ProfileRecord.model_validate(d["doc"]) async for d in cursor]

    # -- estimators -------------------------------------------------------------------

    async def put_estimator(self, record: EstimatorRecord) -> None:
        async with self._errors():
            await self._db.estimators.replace_one(
                {"_id": record.id},
                {
                    "_id": record.id,
                    "target": record.target,
                    "status": record.status.value,
                    "created_ts": record.created_at.timestamp(),
                    "doc": _doc(record),
                },
                upsert=True,
            )

    async def get_estimator(self, estimator_id: str) -> EstimatorRecord:
        async with self._errors():
            found = await self._db.estimators.find_one({"_id": estimator_id})
            if found is None:
                raise not_found("estimator", estimator_id)
            return EstimatorRecord.model_validate(found["doc"])

    async def list_estimators(
        self, *, target: str | None = None, status: EstimatorStatus | None = None
    ) -> list[EstimatorRecord]:
        async with self._errors():
            flt: dict[str, Any] = {}
            if target is not None:
                flt["target"] = target
            if status is not None:
                flt["status"] = status.value
            cursor = self._db.estimators.find(flt).sort(
                [("created_ts", DESCENDING), ("_id", ASCENDING)]
            )
            return [EstimatorRecord.model_validate(d["doc"]) async for d in cursor]

    async def promote_estimator(self, estimator_id: str) -> EstimatorRecord:
        async with self._errors():
            return await self._promote(estimator_id)

    async def _promote(self, estimator_id: str) -> EstimatorRecord:
        chosen = await self.get_estimator(estimator_id)
        promoted = chosen.model_copy(update={"status": EstimatorStatus.PROMOTED})
        await self.put_estimator(promoted)
        others = self._db.estimators.find(
            {
                "target": chosen.target,
                "status": EstimatorStatus.PROMOTED.value,
                "_id": {"$ne": estimator_id},
            }
        )
        async for doc in others:
            old = EstimatorRecord.model_validate(doc["doc"])
            await self.put_estimator(old.model_copy(update={"status": EstimatorStatus.RETIRED}))
        return promoted

    # -- plans ------------------------------------------------------------------------

    async def put_plan(self, plan: Plan) -> Plan:
        async with self._errors():
            stored = plan.model_copy(update={"version": plan.version + 1, "updated_at": utc_now()})
            document = {
                "_id": stored.id,
                "user": stored.user,
                "status": stored.status.value,
                "version": stored.version,
                "created_ts": stored.created_at.timestamp(),
                "updated_ts": stored.updated_at.timestamp(),
                "doc": _doc(stored),
            }
            try:
                if plan.version == 0:
                    await self._db.plans.insert_one(document)
                    return stored
                result = await self._db.plans.replace_one(
                    {"_id": plan.id, "version": plan.version}, document
                )
            except DuplicateKeyError as exc:
                raise ConflictError(
                    f"plan {plan.id!r} already exists (stored version > 0)"
                ) from exc
            if result.matched_count != 1:
                raise ConflictError(
                    f"plan {plan.id!r} was updated elsewhere: "
                    f"this update was based on version {plan.version}"
                )
            return stored

    async def get_plan(self, plan_id: str) -> Plan:
        async with self._errors():
            found = await self._db.plans.find_one({"_id": plan_id})
            if found is None:
                raise not_found("plan", plan_id)
            return Plan.model_validate(found["doc"])

    async def list_plans(
        self, *, user: str | None = None, status: PlanStatus | None = None
    ) -> list[Plan]:
        async with self._errors():
            flt: dict[str, Any] = {}
            if user is not None:
                flt["user"] = user
            if status is not None:
                flt["status"] = status.value
            cursor = self._db.plans.find(flt).sort([("created_ts", ASCENDING), ("_id", ASCENDING)])
            return [Plan.model_validate(d["doc"]) async for d in cursor]

    async def query_plans(self, query: PlanQuery) -> list[Plan]:
        async with self._errors():
            flt: dict[str, Any] = {}
            if query.user is not None:
                flt["user"] = query.user
            if query.statuses is not None:
                flt["status"] = {"$in": sorted(s.value for s in query.statuses)}
            if query.ids is not None:
                flt["_id"] = {"$in": sorted(query.ids)}
            # A plan stored before updated_ts was kept sorts as the oldest.
            order = (
                [("updated_ts", DESCENDING), ("_id", DESCENDING)]
                if query.newest_first
                else [("created_ts", ASCENDING), ("_id", ASCENDING)]
            )
            cursor = self._db.plans.find(flt).sort(order).limit(query.limit or 0)
            return [Plan.model_validate(d["doc"]) async for d in cursor]

    async def count_plans(self) -> dict[PlanStatus, int]:
        async with self._errors():
            cursor = await self._db.plans.aggregate(
                [{"$group": {"_id": "$status", "n": {"$sum": 1}}}]
            )
            return {PlanStatus(d["_id"]): int(d["n"]) async for d in cursor}

    async def count_plan_jobs(self) -> dict[tuple[str, str], int]:
        # store.plan_jobs, in the database: each segment with a job id, its state (or
        # "submitted"), the plan's partition (or "none").
        pipeline: list[dict[str, Any]] = [
            {"$unwind": "$doc.segments"},
            {"$match": {"doc.segments.job_id": {"$ne": None}}},
            {
                "$group": {
                    "_id": {
                        "state": {"$ifNull": ["$doc.segments.state", "submitted"]},
                        "partition": {"$ifNull": ["$doc.option.partition", "none"]},
                    },
                    "n": {"$sum": 1},
                }
            },
        ]
        async with self._errors():
            cursor = await self._db.plans.aggregate(pipeline)
            return {(d["_id"]["state"], d["_id"]["partition"]): int(d["n"]) async for d in cursor}

    # -- processed events and outbox --------------------------------------------------

    async def is_processed(self, consumer: str, event_id: str) -> bool:
        async with self._errors():
            return await self._db.events.find_one({"_id": f"{consumer}/{event_id}"}) is not None

    async def complete_event(
        self, consumer: str, event_id: str, outbox: Sequence[OutboxMessage] = ()
    ) -> bool:
        async with self._errors():
            messages = [{**m.model_dump(), "sent": False} for m in outbox]
            try:
                await self._db.events.insert_one(
                    {
                        "_id": f"{consumer}/{event_id}",
                        "consumer": consumer,
                        "processed_ts": utc_now().timestamp(),
                        "pending": bool(messages),
                        "outbox": messages,
                    }
                )
            except DuplicateKeyError:
                return False
            return True

    async def pending_outbox(self, consumer: str, limit: int = 1000) -> list[OutboxMessage]:
        async with self._errors():
            cursor = self._db.events.find({"consumer": consumer, "pending": True}).sort(
                "processed_ts", ASCENDING
            )
            found: list[OutboxMessage] = []
            async for doc in cursor:
                for message in doc["outbox"]:
                    if not message["sent"]:
                        found.append(
                            OutboxMessage.model_validate(
                                {k: v for k, v in message.items() if k != "sent"}
                            )
                        )
                    if len(found) >= limit:
                        return found
            return found

    async def mark_outbox_sent(self, consumer: str, message_ids: Sequence[str]) -> None:
        async with self._errors():
            ids = list(message_ids)
            if not ids:
                return
            await self._db.events.update_many(
                {"consumer": consumer, "outbox.message_id": {"$in": ids}},
                {"$set": {"outbox.$[m].sent": True}},
                array_filters=[{"m.message_id": {"$in": ids}}],
            )
            await self._db.events.update_many(
                {
                    "consumer": consumer,
                    "pending": True,
                    "outbox": {"$not": {"$elemMatch": {"sent": False}}},
                },
                {"$set": {"pending": False}},
            )

    async def count_processed(self, consumer: str) -> int:
        async with self._errors():
            return await self._db.events.count_documents({"consumer": consumer})

    async def prune_processed(self, before: datetime) -> int:
        async with self._errors():
            result = await self._db.events.delete_many(
                {"processed_ts": {"$lt": before.timestamp()}, "pending": False}
            )
            return int(result.deleted_count)


def _job_filter(query: JobQuery) -> dict[str, Any]:
    flt: dict[str, Any] = {
        key: value
        for key, value in (
            ("system", query.system),
            ("user", query.user),
            ("application", query.application),
            ("plan_id", query.plan_id),
        )
        if value is not None
    }
    window: dict[str, float] = {}
    if query.submitted_after is not None:
        window["$gte"] = query.submitted_after.timestamp()
    if query.submitted_before is not None:
        window["$lt"] = query.submitted_before.timestamp()
    if window:
        flt["submit_ts"] = window
    return flt
