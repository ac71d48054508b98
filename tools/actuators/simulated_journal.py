"""The simulated cluster's journal: every submission, cancel and walltime change, in order.

A simulated cluster is a function of its journal and its clock: replaying the journal's
entries (each at the time it was written) gives every job's start and end. So processes
that share one journal file (the CLI, the MCP server, ``rightsize center run``) share one
cluster: the same jobs, the same ids, the same outcomes, on the real clock, and a job
keeps "running" while no process looks at it. Job ids are counted in the journal, so
they are unique across processes and survive restarts.

    MemoryJournal()          one process's cluster (tests, simulations, replays)
    SqliteJournal(path)      a file the processes of one host share (the embedded center)

Times in the journal only move forward: an entry is stamped no earlier than the entry
before it, whatever the writer's clock said, so every reader replays the same history.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

__all__ = ["Entry", "EntryKind", "Journal", "MemoryJournal", "SqliteJournal"]

EntryKind = Literal["submit", "cancel", "extend"]


@dataclass(frozen=True)
class Entry:
    """One change to the cluster: ``body`` is the request (JSON) of a submit, the new
    limit in seconds of an extend, empty for a cancel."""

    seq: int
    at: datetime
    kind: EntryKind
    system: str
    job_id: str
    body: str = ""


class Journal(Protocol):
    def append(
        self,
        kind: EntryKind,
        system: str,
        at: datetime,
        *,
        job_id: str | None = None,
        body: str = "",
    ) -> Entry:
        """Write one entry; a submit (``job_id`` None) gets the next job id."""
        ...

    def since(self, seq: int) -> list[Entry]:
        """Every entry after ``seq``, in order."""
        ...

    def origin(self, now: datetime) -> datetime:
        """When the journal began (``now`` for a new one): a sped-up clock counts from it."""
        ...


class MemoryJournal:
    """A journal that lives as long as its process."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._jobs = 0
        self._origin: datetime | None = None

    def append(
        self,
        kind: EntryKind,
        system: str,
        at: datetime,
        *,
        job_id: str | None = None,
        body: str = "",
    ) -> Entry:
        if self._entries:
            at = max(at, self._entries[-1].at)
        if job_id is None:
            self._jobs += 1
            job_id = str(self._jobs)
        entry = Entry(len(self._entries) + 1, at, kind, system, job_id, body)
        self._entries.append(entry)
        return entry

    def since(self, seq: int) -> list[Entry]:
        return self._entries[seq:]

    def origin(self, now: datetime) -> datetime:
        if self._origin is None:
            self._origin = now
        return self._origin


_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    system TEXT NOT NULL,
    job_id TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SqliteJournal:
    """A journal in a SQLite file; writers take the file's write lock for each entry, so
    two processes never hand out the same job id."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def append(
        self,
        kind: EntryKind,
        system: str,
        at: datetime,
        *,
        job_id: str | None = None,
        body: str = "",
    ) -> Entry:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                last = db.execute("SELECT at FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
                if last is not None:
                    at = max(at, datetime.fromisoformat(last[0]))
                if job_id is None:
                    row = db.execute("SELECT value FROM meta WHERE key = 'jobs'").fetchone()
                    count = int(row[0]) + 1 if row else 1
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('jobs', ?)", (str(count),))
                    job_id = str(count)
                cursor = db.execute(
                    "INSERT INTO entries (at, kind, system, job_id, body) VALUES (?, ?, ?, ?, ?)",
                    (at.isoformat(), kind, system, job_id, body),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        assert cursor.lastrowid is not None
        return Entry(cursor.lastrowid, at, kind, system, job_id, body)

    def since(self, seq: int) -> list[Entry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, at, kind, system, job_id, body FROM entries WHERE seq > ? "
                "ORDER BY seq",
                (seq,),
            ).fetchall()
        return [Entry(r[0], datetime.fromisoformat(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def origin(self, now: datetime) -> datetime:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('origin', ?)",
                (now.astimezone(UTC).isoformat(),),
            )
            row = self._db.execute("SELECT value FROM meta WHERE key = 'origin'").fetchone()
        return datetime.fromisoformat(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
