"""Graph checkpoints in the SQLite knowledge base's file (``knowledge_base.checkpoints``).

Two tables beside the knowledge base's own, created on first use, written through the
knowledge base's connection and lock (so its transactions and error rules apply: a
busy database is transient, anything else is not).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from knowledge_base.checkpoints import CheckpointRecord, CheckpointStore, CheckpointWrite
from knowledge_base.sqlite import SQLiteKnowledgeBase

__all__ = ["SQLiteCheckpointStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL, namespace TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
    parent_id TEXT, type TEXT NOT NULL, checkpoint BLOB NOT NULL, metadata BLOB NOT NULL,
    saved_ts REAL NOT NULL, PRIMARY KEY (thread_id, namespace, checkpoint_id));
CREATE INDEX IF NOT EXISTS checkpoints_saved ON checkpoints (saved_ts);
CREATE TABLE IF NOT EXISTS checkpoint_writes (
    thread_id TEXT NOT NULL, namespace TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL, task_path TEXT NOT NULL, idx INTEGER NOT NULL,
    channel TEXT NOT NULL, type TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (thread_id, namespace, checkpoint_id, task_id, idx));
"""

_COLUMNS = "thread_id, namespace, checkpoint_id, parent_id, type, checkpoint, metadata, saved_ts"


def _record(row: Sequence[Any]) -> CheckpointRecord:
    return CheckpointRecord(
        thread_id=row[0],
        namespace=row[1],
        checkpoint_id=row[2],
        parent_id=row[3],
        type=row[4],
        checkpoint=bytes(row[5]),
        metadata=bytes(row[6]),
        saved_at=datetime.fromtimestamp(row[7], UTC),
    )


class SQLiteCheckpointStore(CheckpointStore):
    """Checkpoints in the tables ``checkpoints`` and ``checkpoint_writes`` of ``kb``."""

    def __init__(self, kb: SQLiteKnowledgeBase) -> None:
        self.kb = kb
        self._ready = False

    async def _setup(self) -> None:
        if not self._ready:
            await self.kb._run(lambda: self.kb._conn.executescript(_SCHEMA))
            self._ready = True

    async def put(self, record: CheckpointRecord) -> None:
        await self._setup()
        row = (
            record.thread_id,
            record.namespace,
            record.checkpoint_id,
            record.parent_id,
            record.type,
            record.checkpoint,
            record.metadata,
            record.saved_at.timestamp(),
        )
        await self.kb._run(
            lambda: self.kb._conn.execute(
                f"INSERT OR REPLACE INTO checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    async def get(
        self, thread_id: str, namespace: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        await self._setup()
        if checkpoint_id is not None:
            sql = (
                f"SELECT {_COLUMNS} FROM checkpoints "
                "WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?"
            )
            params: tuple[Any, ...] = (thread_id, namespace, checkpoint_id)
        else:
            sql = (
                f"SELECT {_COLUMNS} FROM checkpoints WHERE thread_id = ? AND namespace = ? "
                "ORDER BY checkpoint_id DESC LIMIT 1"
            )
            params = (thread_id, namespace)
        rows = await self.kb._run(lambda: self.kb._select(sql, params))
        return _record(rows[0]) if rows else None

    async def list(
        self,
        thread_id: str | None,
        namespace: str | None = None,
        *,
        before_id: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[CheckpointRecord]:
        await self._setup()
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        for column, value in (("thread_id", thread_id), ("namespace", namespace)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if before_id is not None:
            clauses.append("checkpoint_id < ?")
            params.append(before_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT {_COLUMNS} FROM checkpoints {where} ORDER BY checkpoint_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = await self.kb._run(lambda: self.kb._select(sql, params))
        return [_record(row) for row in rows]

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
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        rows = [
            (thread_id, namespace, checkpoint_id, w.task_id, w.task_path, w.idx, *w.fields())
            for w in writes
        ]

        def write() -> None:
            with self.kb._transaction() as conn:
                conn.executemany(
                    f"{verb} INTO checkpoint_writes (thread_id, namespace, checkpoint_id, "
                    "task_id, task_path, idx, channel, type, value) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

        if rows:
            await self.kb._run(write)

    async def writes(
        self, thread_id: str, namespace: str, checkpoint_id: str
    ) -> builtins.list[CheckpointWrite]:
        await self._setup()
        rows = await self.kb._run(
            lambda: self.kb._select(
                "SELECT task_id, task_path, idx, channel, type, value FROM checkpoint_writes "
                "WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?",
                (thread_id, namespace, checkpoint_id),
            )
        )
        return [
            CheckpointWrite(
                task_id=r[0], task_path=r[1], idx=r[2], channel=r[3], type=r[4], value=bytes(r[5])
            )
            for r in rows
        ]

    async def threads(self) -> builtins.list[str]:
        await self._setup()
        # The primary key's index answers this: no checkpoint row is read.
        rows = await self.kb._run(
            lambda: self.kb._select("SELECT DISTINCT thread_id FROM checkpoints")
        )
        return [str(row[0]) for row in rows]

    async def delete_thread(self, thread_id: str) -> None:
        await self._setup()

        def write() -> None:
            with self.kb._transaction() as conn:
                conn.execute("DELETE FROM checkpoints WHERE thread_id = ?", (thread_id,))
                conn.execute("DELETE FROM checkpoint_writes WHERE thread_id = ?", (thread_id,))

        await self.kb._run(write)

    async def prune(self, before: datetime) -> int:
        await self._setup()
        cutoff = before.timestamp()

        def write() -> int:
            with self.kb._transaction() as conn:
                old = conn.execute(
                    "SELECT thread_id, namespace, checkpoint_id FROM checkpoints c "
                    "WHERE saved_ts < ? AND checkpoint_id < (SELECT MAX(l.checkpoint_id) "
                    "FROM checkpoints l WHERE l.thread_id = c.thread_id "
                    "AND l.namespace = c.namespace)",
                    (cutoff,),
                ).fetchall()
                conn.executemany(
                    "DELETE FROM checkpoints "
                    "WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?",
                    old,
                )
                conn.executemany(
                    "DELETE FROM checkpoint_writes "
                    "WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?",
                    old,
                )
            return len(old)

        return await self.kb._run(write)
