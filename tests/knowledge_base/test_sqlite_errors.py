"""Which SQLite failures a retry can fix: a busy database, and nothing else.

Real SQLite files; the lock is held by a second real connection.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.errors import StorageError, is_transient
from knowledge_base.sqlite import SQLiteKnowledgeBase


async def test_a_write_while_another_connection_holds_the_lock_is_transient(
    tmp_path: Path,
) -> None:
    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    kb._conn.execute("PRAGMA busy_timeout = 0")  # fail at once instead of waiting 30 s
    other = sqlite3.connect(tmp_path / "kb.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock
    try:
        with pytest.raises(StorageError, match="database is locked") as raised:
            await kb.put_catalog(Catalog())
        assert is_transient(raised.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    await kb.put_catalog(Catalog())  # the lock is gone: the same call succeeds
    await kb.close()


async def test_a_broken_constraint_is_not_transient(tmp_path: Path) -> None:
    """The old backend called every SQLite error transient: the runtime retried an
    integrity error max_attempts times before dead-lettering it."""
    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    with pytest.raises(StorageError, match="IntegrityError") as raised:
        # The catalog table holds one row, id 1 (CHECK): no write can ever add a second.
        await kb._run(lambda: kb._conn.execute("INSERT INTO catalog (id, doc) VALUES (2, '{}')"))
    assert not is_transient(raised.value)
    await kb.close()


async def test_a_file_that_is_not_a_database_is_not_transient(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    path.write_bytes(b"this is not an SQLite file" * 100)
    with pytest.raises(StorageError) as raised:
        SQLiteKnowledgeBase(path)
    assert not is_transient(raised.value)
    assert str(path) in str(raised.value)
