"""The Intelligence Plane's graph checkpoints, stored in the knowledge base's own backend.

LangGraph saves a request's thread after every node; the plane resumes it from the
latest checkpoint. Kept in the knowledge base (SQLite tables in the same file, MongoDB
collections in the same database) rather than in a file of the plane's own, every
replica of the plane reads and writes the same threads, so the plane can run as
several consumer-group members, and a restarted one on another host finds them.

The store is opaque: checkpoints and writes are bytes plus the serializer's type tag
(``agents.intelligence.checkpointer`` turns them into LangGraph's types). What it adds
to a plain key-value store is what a running center needs: the threads listed from an
index (never by reading every checkpoint), and retention (``prune``: a thread's older
checkpoints go, its latest always stays; whole threads go only when asked by id).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.store import KnowledgeBase

__all__ = [
    "CheckpointRecord",
    "CheckpointStore",
    "CheckpointWrite",
    "checkpoint_store",
]


class CheckpointRecord(BaseModel):
    """One saved step of one thread."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    thread_id: str = Field(min_length=1)
    namespace: str = ""
    checkpoint_id: str = Field(min_length=1, description="Sorts in the order they were saved")
    parent_id: str | None = None
    type: str = Field(description="The serializer's type tag")
    checkpoint: bytes
    metadata: bytes = Field(description="JSON")
    saved_at: datetime


class CheckpointWrite(BaseModel):
    """A pending write of one task, linked to a checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    task_path: str = ""
    idx: int
    channel: str
    type: str
    value: bytes

    def fields(self) -> tuple[str, str, bytes]:
        """(channel, type, value): the stored part after the key."""
        return self.channel, self.type, self.value


class CheckpointStore(abc.ABC):
    """Checkpoints and their pending writes, per thread and namespace."""

    @abc.abstractmethod
    async def put(self, record: CheckpointRecord) -> None:
        """Store ``record`` (replacing one with the same thread, namespace and id)."""

    @abc.abstractmethod
    async def get(
        self, thread_id: str, namespace: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        """That checkpoint, or the thread's latest when ``checkpoint_id`` is None."""

    @abc.abstractmethod
    async def list(
        self,
        thread_id: str | None,
        namespace: str | None = None,
        *,
        before_id: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[CheckpointRecord]:
        """Newest first; ``thread_id`` None lists every thread's (for tools, not requests)."""

    @abc.abstractmethod
    async def put_writes(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        writes: Sequence[CheckpointWrite],
        *,
        replace: bool,
    ) -> None:
        """Store ``writes``; an existing (task, idx) is replaced only when ``replace``."""

    @abc.abstractmethod
    async def writes(
        self, thread_id: str, namespace: str, checkpoint_id: str
    ) -> builtins.list[CheckpointWrite]: ...

    @abc.abstractmethod
    async def threads(self) -> builtins.list[str]:
        """Every thread id, from an index: no checkpoint is read."""

    @abc.abstractmethod
    async def delete_thread(self, thread_id: str) -> None: ...

    @abc.abstractmethod
    async def prune(self, before: datetime) -> int:
        """Delete checkpoints saved before ``before`` that are not their thread's (and
        namespace's) latest, with their writes; how many checkpoints went."""


def checkpoint_store(kb: KnowledgeBase) -> CheckpointStore:
    """The checkpoint store living in ``kb``'s backend."""
    from knowledge_base.sqlite import SQLiteKnowledgeBase

    if isinstance(kb, SQLiteKnowledgeBase):
        from knowledge_base.sqlite_checkpoints import SQLiteCheckpointStore

        return SQLiteCheckpointStore(kb)
    from knowledge_base.mongo import MongoKnowledgeBase

    if isinstance(kb, MongoKnowledgeBase):
        from knowledge_base.mongo_checkpoints import MongoCheckpointStore

        return MongoCheckpointStore(kb)
    raise TypeError(f"no checkpoint store for {type(kb).__name__}")
