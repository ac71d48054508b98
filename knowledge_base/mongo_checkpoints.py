"""Graph checkpoints in the MongoDB knowledge base's database (``knowledge_base.checkpoints``).

Two collections, ``checkpoints`` and ``checkpoint_writes``, keyed by thread, namespace
and checkpoint id, written through the knowledge base's client and error rules.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReplaceOne, UpdateOne

from knowledge_base.checkpoints import CheckpointRecord, CheckpointStore, CheckpointWrite
from knowledge_base.mongo import MongoKnowledgeBase

__all__ = ["MongoCheckpointStore"]


def _key(*parts: object) -> str:
    return "\x1f".join(str(p) for p in parts)  # a separator no id contains


def _record(doc: dict[str, Any]) -> CheckpointRecord:
    return CheckpointRecord(
        thread_id=doc["thread_id"],
        namespace=doc["namespace"],
        checkpoint_id=doc["checkpoint_id"],
        parent_id=doc.get("parent_id"),
        type=doc["type"],
        checkpoint=bytes(doc["checkpoint"]),
        metadata=bytes(doc["metadata"]),
        saved_at=datetime.fromtimestamp(doc["saved_ts"], UTC),
    )


class MongoCheckpointStore(CheckpointStore):
    """Checkpoints in ``kb``'s database."""

    def __init__(self, kb: MongoKnowledgeBase) -> None:
        self.kb = kb
        self._db = kb._db
        self._ready = False

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self.kb._errors():
            await self._db.checkpoints.create_index(
                [("thread_id", ASCENDING), ("namespace", ASCENDING), ("checkpoint_id", DESCENDING)]
            )
            await self._db.checkpoints.create_index([("saved_ts", ASCENDING)])
            await self._db.checkpoint_writes.create_index(
                [("thread_id", ASCENDING), ("namespace", ASCENDING), ("checkpoint_id", ASCENDING)]
            )
        self._ready = True

    async def put(self, record: CheckpointRecord) -> None:
        await self._setup()
        doc = {
            "_id": _key(record.thread_id, record.namespace, record.checkpoint_id),
            "thread_id": record.thread_id,
            "namespace": record.namespace,
            "checkpoint_id": record.checkpoint_id,
            "parent_id": record.parent_id,
            "type": record.type,
            "checkpoint": record.checkpoint,
            "metadata": record.metadata,
            "saved_ts": record.saved_at.timestamp(),
        }
        async with self.kb._errors():
            await self._db.checkpoints.replace_one({"_id": doc["_id"]}, doc, upsert=True)

    async def get(
        self, thread_id: str, namespace: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        await self._setup()
        query: dict[str, Any] = {"thread_id": thread_id, "namespace": namespace}
        if checkpoint_id is not None:
            query["checkpoint_id"] = checkpoint_id
        async with self.kb._errors():
            doc = await self._db.checkpoints.find_one(query, sort=[("checkpoint_id", DESCENDING)])
        return _record(doc) if doc else None

    async def list(
        self,
        thread_id: str | None,
        namespace: str | None = None,
        *,
        before_id: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[CheckpointRecord]:
        await self._setup()
        query: dict[str, Any] = {}
        if thread_id is not None:
            query["thread_id"] = thread_id
        if namespace is not None:
            query["namespace"] = namespace
        if before_id is not None:
            query["checkpoint_id"] = {"$lt": before_id}
        async with self.kb._errors():
            cursor = self._db.checkpoints.find(query).sort("checkpoint_id", DESCENDING)
            if limit is not None:
                cursor = cursor.limit(limit)
            return [_record(doc) async for doc in cursor]

    async def put_writes(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        writes: Sequence[CheckpointWrite],
        *,
        replace: bool,
    ) -> None:
        await self._setup()
        ops: builtins.list[ReplaceOne[Any] | UpdateOne] = []
        for w in writes:
            doc = {
                "_id": _key(thread_id, namespace, checkpoint_id, w.task_id, w.idx),
                "thread_id": thread_id,
                "namespace": namespace,
                "checkpoint_id": checkpoint_id,
                **w.model_dump(),
            }
            if replace:
                ops.append(ReplaceOne({"_id": doc["_id"]}, doc, upsert=True))
            else:
                ops.append(UpdateOne({"_id": doc["_id"]}, {"$setOnInsert": doc}, upsert=True))
        if ops:
            async with self.kb._errors():
                await self._db.checkpoint_writes.bulk_write(ops, ordered=True)

    async def writes(
        self, thread_id: str, namespace: str, checkpoint_id: str
    ) -> builtins.list[CheckpointWrite]:
        await self._setup()
        query = {"thread_id": thread_id, "namespace": namespace, "checkpoint_id": checkpoint_id}
        async with self.kb._errors():
            docs = [doc async for doc in self._db.checkpoint_writes.find(query)]
        return [
            CheckpointWrite(
                task_id=d["task_id"],
                task_path=d.get("task_path", ""),
                idx=d["idx"],
                channel=d["channel"],
                type=d["type"],
                value=bytes(d["value"]),
            )
            for d in docs
        ]

    async def threads(self) -> builtins.list[str]:
        await self._setup()
        async with self.kb._errors():
            found = await self._db.checkpoints.distinct("thread_id")  # answered by the index
        return [str(t) for t in found]

    async def delete_thread(self, thread_id: str) -> None:
        await self._setup()
        async with self.kb._errors():
            await self._db.checkpoints.delete_many({"thread_id": thread_id})
            await self._db.checkpoint_writes.delete_many({"thread_id": thread_id})

    async def prune(self, before: datetime) -> int:
        await self._setup()
        cutoff = before.timestamp()
        pruned = 0
        async with self.kb._errors():
            latest = await self._db.checkpoints.aggregate(
                [
                    {"$match": {"saved_ts": {"$lt": cutoff}}},
                    {"$group": {"_id": {"t": "$thread_id", "n": "$namespace"}}},
                ]
            )
            async for group in latest:
                thread_id, namespace = group["_id"]["t"], group["_id"]["n"]
                newest = await self._db.checkpoints.find_one(
                    {"thread_id": thread_id, "namespace": namespace},
                    sort=[("checkpoint_id", DESCENDING)],
                )
                if newest is None:
                    continue
                old = {
                    "thread_id": thread_id,
                    "namespace": namespace,
                    "saved_ts": {"$lt": cutoff},
                    "checkpoint_id": {"$lt": newest["checkpoint_id"]},
                }
                ids = [d["checkpoint_id"] async for d in self._db.checkpoints.find(old)]
                if not ids:
                    continue
                await self._db.checkpoints.delete_many(old)
                await self._db.checkpoint_writes.delete_many(
                    {
                        "thread_id": thread_id,
                        "namespace": namespace,
                        "checkpoint_id": {"$in": ids},
                    }
                )
                pruned += len(ids)
        return pruned
