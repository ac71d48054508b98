"""The LangGraph checkpointer over the knowledge base's own backend (SQLite or MongoDB).

``KnowledgeBaseSaver`` implements LangGraph's ``BaseCheckpointSaver`` on a
``knowledge_base.checkpoints.CheckpointStore``: the plane's threads live where the rest
of the center's state lives, so replicas of the plane (one consumer group, several
processes or hosts) share them, and a center on MongoDB keeps no local file. It also
lists threads from an index (``athreads``: no checkpoint is read) and prunes
(``aprune_older_than``: a thread's checkpoints older than a cutoff, its latest always kept;
``adelete_thread`` for a whole thread the plane has finished with).

Serialization is LangGraph's own (``JsonPlusSerializer`` by default), so a checkpoint
reads the same as with ``langgraph.checkpoint.sqlite``. Only the async interface is
implemented; the plane never calls the sync one.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.base import writes_sort_key as _writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from knowledge_base.checkpoints import CheckpointRecord, CheckpointStore, CheckpointWrite
from knowledge_base.records import utc_now

__all__ = ["KnowledgeBaseSaver"]


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint_id,
        }
    }


class KnowledgeBaseSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in a ``CheckpointStore``."""

    def __init__(self, store: CheckpointStore, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.store = store

    async def _tuple(self, record: CheckpointRecord) -> CheckpointTuple:
        writes = await self.store.writes(record.thread_id, record.namespace, record.checkpoint_id)
        ordered: list[CheckpointWrite] = sorted(
            writes, key=lambda w: _writes_sort_key(w.task_path, w.task_id, w.idx)
        )
        metadata: CheckpointMetadata = json.loads(record.metadata) if record.metadata else {}
        return CheckpointTuple(
            _config(record.thread_id, record.namespace, record.checkpoint_id),
            self.serde.loads_typed((record.type, record.checkpoint)),
            metadata,
            _config(record.thread_id, record.namespace, record.parent_id)
            if record.parent_id
            else None,
            [(w.task_id, w.channel, self.serde.loads_typed((w.type, w.value))) for w in ordered],
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        record = await self.store.get(
            str(configurable["thread_id"]),
            configurable.get("checkpoint_ns", ""),
            get_checkpoint_id(config),
        )
        return await self._tuple(record) if record is not None else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        configurable = config["configurable"] if config is not None else {}
        thread_id = configurable.get("thread_id")
        records = await self.store.list(
            str(thread_id) if thread_id is not None else None,
            configurable.get("checkpoint_ns"),
            before_id=get_checkpoint_id(before) if before is not None else None,
            limit=None if filter else limit,
        )
        wanted = get_checkpoint_id(config) if config is not None else None
        given = 0
        for record in records:
            if wanted is not None and record.checkpoint_id != wanted:
                continue
            found = await self._tuple(record)
            if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield found
            given += 1
            if limit is not None and given >= limit:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        namespace = configurable.get("checkpoint_ns", "")
        kind, blob = self.serde.dumps_typed(checkpoint)
        meta = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
        await self.store.put(
            CheckpointRecord(
                thread_id=thread_id,
                namespace=namespace,
                checkpoint_id=checkpoint["id"],
                parent_id=configurable.get("checkpoint_id"),
                type=kind,
                checkpoint=blob,
                metadata=meta.encode("utf-8", "ignore"),
                saved_at=utc_now(),
            )
        )
        return _config(thread_id, namespace, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        rows = []
        for idx, (channel, value) in enumerate(writes):
            kind, blob = self.serde.dumps_typed(value)
            rows.append(
                CheckpointWrite(
                    task_id=task_id,
                    task_path=task_path,
                    idx=WRITES_IDX_MAP.get(channel, idx),
                    channel=channel,
                    type=kind,
                    value=blob,
                )
            )
        # Special channels (errors, interrupts...) replace what a retry wrote before;
        # ordinary writes keep the first (as LangGraph's own savers do).
        await self.store.put_writes(
            str(configurable["thread_id"]),
            configurable.get("checkpoint_ns", ""),
            str(configurable["checkpoint_id"]),
            rows,
            replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self.store.delete_thread(str(thread_id))

    async def athreads(self) -> list[str]:
        """Every thread id, from the store's index (no checkpoint is read)."""
        return await self.store.threads()

    async def aprune_older_than(self, before: datetime) -> int:
        """Delete checkpoints saved before ``before`` that are not their thread's latest."""
        return await self.store.prune(before)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, as LangGraph's SQLite saver makes them."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"
