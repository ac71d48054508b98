"""The embedded knowledge base: one SQLite file in WAL mode, nothing to set up.

Documents are stored as JSON next to the columns queries filter on. SQLite calls are
blocking, so each runs in a worker thread under one lock; the connection is shared by
those threads (``check_same_thread=False``) and never used concurrently. A write that
spans rows runs in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

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
from knowledge_base.store import (
    JobQuery,
    KnowledgeBase,
    OutboxMessage,
    PlanQuery,
    not_found,
    plan_jobs,
)

__all__ = ["SQLiteKnowledgeBase", "storage_error"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS catalog (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    system TEXT NOT NULL, job_id TEXT NOT NULL, user TEXT, application TEXT, plan_id TEXT,
    submit_ts REAL NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (system, job_id));
CREATE INDEX IF NOT EXISTS jobs_user ON jobs (user, submit_ts);
CREATE INDEX IF NOT EXISTS jobs_app ON jobs (application, submit_ts);
CREATE INDEX IF NOT EXISTS jobs_submit ON jobs (submit_ts);
CREATE TABLE IF NOT EXISTS profiles (
    id TEXT PRIMARY KEY, family TEXT NOT NULL, status TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS profiles_family ON profiles (family);
CREATE TABLE IF NOT EXISTS estimators (
    id TEXT PRIMARY KEY, target TEXT NOT NULL, status TEXT NOT NULL, created_ts REAL NOT NULL,
    doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL,
    created_ts REAL NOT NULL, doc TEXT NOT NULL, updated_ts REAL);
CREATE INDEX IF NOT EXISTS plans_user ON plans (user, created_ts);
CREATE TABLE IF NOT EXISTS plan_jobs (
    plan_id TEXT NOT NULL, position INTEGER NOT NULL, state TEXT NOT NULL,
    partition TEXT NOT NULL, PRIMARY KEY (plan_id, position));
CREATE INDEX IF NOT EXISTS plan_jobs_tally ON plan_jobs (state, partition);
CREATE TABLE IF NOT EXISTS processed_events (
    consumer TEXT NOT NULL, event_id TEXT NOT NULL, processed_ts REAL NOT NULL,
    PRIMARY KEY (consumer, event_id));
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, consumer TEXT NOT NULL, message_id TEXT NOT NULL,
    event_id TEXT NOT NULL, topic TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    UNIQUE (consumer, message_id));
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (consumer, sent, seq);
CREATE INDEX IF NOT EXISTS outbox_event ON outbox (consumer, event_id);
CREATE INDEX IF NOT EXISTS processed_age ON processed_events (processed_ts);
"""

# After ``_add_plan_columns``: a file written before ``updated_ts`` existed has it then.
_PLAN_INDEXES = """
CREATE INDEX IF NOT EXISTS plans_status_updated ON plans (status, updated_ts);
"""


# SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock; the same call may
# succeed once it lets go. Every other failure (a broken constraint, a corrupt or
# read-only file, a full disk, a bad statement) fails the same way the next time.
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def storage_error(exc: sqlite3.Error, where: str) -> StorageError:
    """``exc`` as a StorageError that is transient only when the database was busy."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        busy = code & 0xFF in _BUSY_CODES  # extended codes keep the primary in the low byte
    else:
        text = str(exc).lower()
        busy = "database is locked" in text or "database is busy" in text or "is locked" in text
    busy = busy and isinstance(exc, sqlite3.OperationalError)
    return StorageError(f"{where}: {type(exc).__name__}: {exc}", transient=busy)


class SQLiteKnowledgeBase(KnowledgeBase):
    """KnowledgeBase over one SQLite file (``:memory:`` works for throwaway use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            self._add_plan_columns()
            self._conn.executescript(_PLAN_INDEXES)
        except sqlite3.Error as exc:
            raise storage_error(exc, f"cannot open knowledge base {self.path!r}") from exc
        self._lock = threading.Lock()

    async def close(self) -> None:
        await self._run(self._conn.close)

    def _add_plan_columns(self) -> None:
        """Bring a file written before plans had ``updated_ts`` and ``plan_jobs`` up to
        date, once, in one transaction: both are filled from the stored plans."""
        if self._has_updated_ts():
            return  # the usual case: nothing to write (a read-only file opens too)
        with self._transaction() as conn:
            if self._has_updated_ts():
                return  # another process brought it up to date meanwhile
            conn.execute("ALTER TABLE plans ADD COLUMN updated_ts REAL")
            for plan_id, doc in conn.execute("SELECT id, doc FROM plans").fetchall():
                plan = Plan.model_validate_json(doc)
                conn.execute(
                    "UPDATE plans SET updated_ts = ? WHERE id = ?",
                    (plan.updated_at.timestamp(), plan_id),
                )
                self._write_plan_jobs(conn, plan)

    def _has_updated_ts(self) -> bool:
        return any(row[1] == "updated_ts" for row in self._conn.execute("PRAGMA table_info(plans)"))

    @staticmethod
    def _write_plan_jobs(conn: sqlite3.Connection, plan: Plan) -> None:
        conn.execute("DELETE FROM plan_jobs WHERE plan_id = ?", (plan.id,))
        conn.executemany(
            "INSERT INTO plan_jobs (plan_id, position, state, partition) VALUES (?, ?, ?, ?)",
            [(plan.id, i, state, part) for i, (state, part) in enumerate(plan_jobs(plan))],
        )

    # -- plumbing ---------------------------------------------------------------------

    async def _run(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                try:
                    return fn()
                except sqlite3.Error as exc:
                    raise storage_error(exc, f"knowledge base {self.path!r}") from exc

        return await asyncio.to_thread(locked)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    @staticmethod
    def _docs(model: type[M], rows: list[tuple[Any, ...]]) -> list[M]:
        return [model.model_validate_json(row[0]) for row in rows]

    # -- catalog ----------------------------------------------------------------------

    async def get_catalog(self) -> Catalog:
        rows = await self._run(lambda: self._select("SELECT doc FROM catalog WHERE id = 1"))
        return Catalog.model_validate_json(rows[0][0]) if rows else Catalog()

    async def put_catalog(self, catalog: Catalog) -> None:
        doc = catalog.model_dump_json()
        await self._run(
            lambda: self._conn.execute(
                "INSERT INTO catalog (id, doc) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET doc = excluded.doc",
                (doc,),
            )
        )

    # -- jobs -------------------------------------------------------------------------

    async def add_jobs(self, jobs: Sequence[JobRecord]) -> int:
        rows = [
            (
                j.system,
                j.job_id,
                j.user,
                j.application,
                j.plan_id,
                j.submit_time.timestamp(),
                j.model_dump_json(),
            )
            for j in jobs
        ]

        def write() -> int:
            with self._transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO jobs "
                    "(system, job_id, user, application, plan_id, submit_ts, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            return len(rows)

        return await self._run(write)

    async def get_job(self, system: str, job_id: str) -> JobRecord:
        rows = await self._run(
            lambda: self._select(
                "SELECT doc FROM jobs WHERE system = ? AND job_id = ?", (system, job_id)
            )
        )
        if not rows:
            raise not_found("job", f"{system}/{job_id}")
        return JobRecord.model_validate_json(rows[0][0])

    async def replace_job(self, expected: JobRecord | None, new: JobRecord) -> bool:
        row = (
            new.system,
            new.job_id,
            new.user,
            new.application,
            new.plan_id,
            new.submit_time.timestamp(),
            new.model_dump_json(),
        )

        def write() -> bool:
            with self._transaction() as conn:  # BEGIN IMMEDIATE: no writer in between
                found = conn.execute(
                    "SELECT doc FROM jobs WHERE system = ? AND job_id = ?",
                    (new.system, new.job_id),
                ).fetchall()
                stored = JobRecord.model_validate_json(found[0][0]) if found else None
                if stored != expected:
                    return False
                conn.execute(
                    "INSERT OR REPLACE INTO jobs "
                    "(system, job_id, user, application, plan_id, submit_ts, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
            return True

        return await self._run(write)

    async def add_new_jobs(self, jobs: Sequence[JobRecord]) -> int:
        rows = [
            (
                j.system,
                j.job_id,
                j.user,
                j.application,
                j.plan_id,
                j.submit_time.timestamp(),
                j.model_dump_json(),
            )
            for j in jobs
        ]

        def write() -> int:
            with self._transaction() as conn:  # all of the batch or none of it
                cursor = conn.executemany(
                    "INSERT OR IGNORE INTO jobs "
                    "(system, job_id, user, application, plan_id, submit_ts, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                return max(cursor.rowcount, 0)

        return await self._run(write) if rows else 0

    async def count_jobs(self, query: JobQuery) -> int:
        where, params = self._job_filter(query)
        rows = await self._run(lambda: self._select(f"SELECT COUNT(*) FROM jobs {where}", params))
        return int(rows[0][0])

    @staticmethod
    def _job_filter(query: JobQuery) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("system", query.system),
            ("user", query.user),
            ("application", query.application),
            ("plan_id", query.plan_id),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if query.submitted_after is not None:
            clauses.append("submit_ts >= ?")
            params.append(query.submitted_after.timestamp())
        if query.submitted_before is not None:
            clauses.append("submit_ts < ?")
            params.append(query.submitted_before.timestamp())
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params

    async def query_jobs(self, query: JobQuery) -> list[JobRecord]:
        where, params = self._job_filter(query)
        order = "submit_ts DESC, job_id DESC" if query.newest_first else "submit_ts, job_id"
        sql = f"SELECT doc FROM jobs {where} ORDER BY {order} LIMIT ?"
        params.append(query.limit)
        rows = await self._run(lambda: self._select(sql, params))
        return self._docs(JobRecord, rows)

    # -- profiles ---------------------------------------------------------------------

    async def add_profiles(self, profiles: Sequence[ProfileRecord]) -> int:
        rows = [(p.id, p.family, p.status.value, p.model_dump_json()) for p in profiles]

        def write() -> int:
            with self._transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO profiles (id, family, status, doc) VALUES (?, ?, ?, ?)",
                    rows,
                )
            return len(rows)

        return await self._run(write)

    async def query_profiles(
        self, *, family: str | None = None, status: ProfileStatus | None = None
    ) -> list[ProfileRecord]:
        sql = (
            "SELECT doc FROM profiles WHERE (? IS NULL OR family = ?) AND (? IS NULL OR status = ?)"
        )
        s = status.value if status is not None else None
        rows = await self._run(lambda: self._select(sql + " ORDER BY id", (family, family, s, s)))
        return self._docs(ProfileRecord, rows)

    # -- estimators -------------------------------------------------------------------

    async def put_estimator(self, record: EstimatorRecord) -> None:
        doc = record.model_dump_json()
        await self._run(
            lambda: self._conn.execute(
                "INSERT OR REPLACE INTO estimators (id, target, status, created_ts, doc) "
                "VALUES (?, ?, ?, ?, ?)",
                (record.id, record.target, record.status.value, record.created_at.timestamp(), doc),
            )
        )

    async def get_estimator(self, estimator_id: str) -> EstimatorRecord:
        rows = await self._run(
            lambda: self._select("SELECT doc FROM estimators WHERE id = ?", (estimator_id,))
        )
        if not rows:
            raise not_found("estimator", estimator_id)
        return EstimatorRecord.model_validate_json(rows[0][0])

    async def list_estimators(
        self, *, target: str | None = None, status: EstimatorStatus | None = None
    ) -> list[EstimatorRecord]:
        s = status.value if status is not None else None
        rows = await self._run(
            lambda: self._select(
                "SELECT doc FROM estimators WHERE (? IS NULL OR target = ?) "
                "AND (? IS NULL OR status = ?) ORDER BY created_ts DESC, id",
                (target, target, s, s),
            )
        )
        return self._docs(EstimatorRecord, rows)

    async def promote_estimator(self, estimator_id: str) -> EstimatorRecord:
        def write() -> EstimatorRecord:
            with self._transaction() as conn:
                rows = conn.execute(
                    "SELECT doc FROM estimators WHERE id = ?", (estimator_id,)
                ).fetchall()
                if not rows:
                    raise not_found("estimator", estimator_id)
                chosen = EstimatorRecord.model_validate_json(rows[0][0])
                current = conn.execute(
                    "SELECT doc FROM estimators WHERE target = ? AND status = ? AND id != ?",
                    (chosen.target, EstimatorStatus.PROMOTED.value, estimator_id),
                ).fetchall()
                for (doc,) in current:
                    old = EstimatorRecord.model_validate_json(doc).model_copy(
                        update={"status": EstimatorStatus.RETIRED}
                    )
                    conn.execute(
                        "UPDATE estimators SET status = ?, doc = ? WHERE id = ?",
                        (old.status.value, old.model_dump_json(), old.id),
                    )
                promoted = chosen.model_copy(update={"status": EstimatorStatus.PROMOTED})
                conn.execute(
                    "UPDATE estimators SET status = ?, doc = ? WHERE id = ?",
                    (promoted.status.value, promoted.model_dump_json(), promoted.id),
                )
            return promoted

        return await self._run(write)

    # -- plans ------------------------------------------------------------------------

    async def put_plan(self, plan: Plan) -> Plan:
        stored = plan.model_copy(update={"version": plan.version + 1, "updated_at": utc_now()})

        def write() -> Plan:
            with self._transaction() as conn:
                rows = conn.execute("SELECT version FROM plans WHERE id = ?", (plan.id,)).fetchall()
                current = rows[0][0] if rows else 0
                if current != plan.version:
                    raise ConflictError(
                        f"plan {plan.id!r} was updated elsewhere: stored version {current}, "
                        f"this update was based on version {plan.version}"
                    )
                conn.execute(
                    "INSERT OR REPLACE INTO plans "
                    "(id, user, status, version, created_ts, updated_ts, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        stored.id,
                        stored.user,
                        stored.status.value,
                        stored.version,
                        stored.created_at.timestamp(),
                        stored.updated_at.timestamp(),
                        stored.model_dump_json(),
                    ),
                )
                self._write_plan_jobs(conn, stored)
            return stored

        return await self._run(write)

    async def get_plan(self, plan_id: str) -> Plan:
        rows = await self._run(
            lambda: self._select("SELECT doc FROM plans WHERE id = ?", (plan_id,))
        )
        if not rows:
            raise not_found("plan", plan_id)
        return Plan.model_validate_json(rows[0][0])

    async def list_plans(
        self, *, user: str | None = None, status: PlanStatus | None = None
    ) -> list[Plan]:
        s = status.value if status is not None else None
        rows = await self._run(
            lambda: self._select(
                "SELECT doc FROM plans WHERE (? IS NULL OR user = ?) AND (? IS NULL OR status = ?) "
                "ORDER BY created_ts, id",
                (user, user, s, s),
            )
        )
        return self._docs(Plan, rows)

    async def query_plans(self, query: PlanQuery) -> list[Plan]:
        clauses: list[str] = []
        params: list[Any] = []
        if query.user is not None:
            clauses.append("user = ?")
            params.append(query.user)
        for column, values in (
            ("status", None if query.statuses is None else sorted(s.value for s in query.statuses)),
            ("id", None if query.ids is None else sorted(query.ids)),
        ):
            if values is not None:
                clauses.append(f"{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "updated_ts DESC, id DESC" if query.newest_first else "created_ts, id"
        sql = f"SELECT doc FROM plans {where} ORDER BY {order} LIMIT ?"
        params.append(query.limit if query.limit is not None else -1)
        rows = await self._run(lambda: self._select(sql, params))
        return self._docs(Plan, rows)

    async def count_plans(self) -> dict[PlanStatus, int]:
        rows = await self._run(
            lambda: self._select("SELECT status, COUNT(*) FROM plans GROUP BY status")
        )
        return {PlanStatus(status): int(n) for status, n in rows}

    async def count_plan_jobs(self) -> dict[tuple[str, str], int]:
        rows = await self._run(
            lambda: self._select(
                "SELECT state, partition, COUNT(*) FROM plan_jobs GROUP BY state, partition"
            )
        )
        return {(state, partition): int(n) for state, partition, n in rows}

    # -- processed events and outbox --------------------------------------------------

    async def is_processed(self, consumer: str, event_id: str) -> bool:
        rows = await self._run(
            lambda: self._select(
                "SELECT 1 FROM processed_events WHERE consumer = ? AND event_id = ?",
                (consumer, event_id),
            )
        )
        return bool(rows)

    async def complete_event(
        self, consumer: str, event_id: str, outbox: Sequence[OutboxMessage] = ()
    ) -> bool:
        now = utc_now().timestamp()

        def write() -> bool:
            with self._transaction() as conn:
                inserted = conn.execute(
                    "INSERT OR IGNORE INTO processed_events (consumer, event_id, processed_ts) "
                    "VALUES (?, ?, ?)",
                    (consumer, event_id, now),
                ).rowcount
                if not inserted:
                    return False
                conn.executemany(
                    "INSERT INTO outbox (consumer, message_id, event_id, topic, key, value) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(consumer, m.message_id, event_id, m.topic, m.key, m.value) for m in outbox],
                )
            return True

        return await self._run(write)

    async def processed_ids(self, consumer: str, event_ids: Sequence[str]) -> set[str]:
        ids = list(dict.fromkeys(event_ids))

        def read() -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):  # stay under SQLite's parameter limit
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._select(
                    "SELECT event_id FROM processed_events "
                    f"WHERE consumer = ? AND event_id IN ({marks})",
                    (consumer, *chunk),
                )
                found.update(row[0] for row in rows)
            return found

        return await self._run(read)

    async def complete_events(
        self, consumer: str, completions: Sequence[tuple[str, Sequence[OutboxMessage]]]
    ) -> list[bool]:
        now = utc_now().timestamp()

        def write() -> list[bool]:
            results: list[bool] = []
            rows: list[tuple[str, str, str, str, str, str]] = []
            with self._transaction() as conn:
                for event_id, outbox in completions:
                    inserted = conn.execute(
                        "INSERT OR IGNORE INTO processed_events (consumer, event_id, processed_ts) "
                        "VALUES (?, ?, ?)",
                        (consumer, event_id, now),
                    ).rowcount
                    if inserted:
                        rows.extend(
                            (consumer, m.message_id, event_id, m.topic, m.key, m.value)
                            for m in outbox
                        )
                    results.append(bool(inserted))
                conn.executemany(
                    "INSERT INTO outbox (consumer, message_id, event_id, topic, key, value) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
            return results

        return await self._run(write)

    async def pending_outbox(self, consumer: str, limit: int = 1000) -> list[OutboxMessage]:
        rows = await self._run(
            lambda: self._select(
                "SELECT message_id, topic, key, value FROM outbox "
                "WHERE consumer = ? AND sent = 0 ORDER BY seq LIMIT ?",
                (consumer, limit),
            )
        )
        return [OutboxMessage(message_id=r[0], topic=r[1], key=r[2], value=r[3]) for r in rows]

    async def mark_outbox_sent(self, consumer: str, message_ids: Sequence[str]) -> None:
        ids = list(message_ids)

        def write() -> None:
            with self._transaction() as conn:
                conn.executemany(
                    "UPDATE outbox SET sent = 1 WHERE consumer = ? AND message_id = ?",
                    [(consumer, m) for m in ids],
                )

        await self._run(write)

    async def count_processed(self, consumer: str) -> int:
        rows = await self._run(
            lambda: self._select(
                "SELECT COUNT(*) FROM processed_events WHERE consumer = ?", (consumer,)
            )
        )
        return int(rows[0][0])

    async def prune_processed(self, before: datetime) -> int:
        cutoff = before.timestamp()

        def write() -> int:
            with self._transaction() as conn:
                pruned = conn.execute(
                    "DELETE FROM processed_events WHERE processed_ts < ? AND NOT EXISTS ("
                    " SELECT 1 FROM outbox o WHERE o.consumer = processed_events.consumer"
                    " AND o.event_id = processed_events.event_id AND o.sent = 0)",
                    (cutoff,),
                ).rowcount
                conn.execute(
                    "DELETE FROM outbox WHERE sent = 1 AND NOT EXISTS ("
                    " SELECT 1 FROM processed_events p WHERE p.consumer = outbox.consumer"
                    " AND p.event_id = outbox.event_id)"
                )
            return int(pruned)

        return await self._run(write)
