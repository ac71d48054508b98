"""A knowledge-base file written before plans had ``updated_ts`` and ``plan_jobs``."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from knowledge_base.records import Plan, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import PlanQuery
from tests.knowledge_base.test_kb_contract import _plan, _ran

# The plans table as every file had it before the status page's queries.
_OLD_PLANS = """
CREATE TABLE plans (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL,
    created_ts REAL NOT NULL, doc TEXT NOT NULL);
CREATE INDEX plans_user ON plans (user, created_ts);
"""


def _stored(plan_id: str, status: PlanStatus, updated: datetime, *states: str) -> Plan:
    ran = _ran(_plan(plan_id), status, "batch", *states)
    return ran.model_copy(update={"updated_at": updated, "version": 1})


async def test_an_old_file_gets_its_plans_last_update_and_jobs_filled_in_on_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old = [
        _stored("p1", PlanStatus.COMPLETED, datetime(2026, 1, 3, tzinfo=UTC), "completed"),
        _stored("p2", PlanStatus.FAILED, datetime(2026, 1, 2, tzinfo=UTC), "timeout", "failed"),
    ]
    with sqlite3.connect(path) as conn:
        conn.executescript(_OLD_PLANS)
        conn.executemany(
            "INSERT INTO plans (id, user, status, version, created_ts, doc) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    p.id,
                    p.user,
                    p.status.value,
                    p.version,
                    p.created_at.timestamp(),
                    p.model_dump_json(),
                )
                for p in old
            ],
        )
    async with SQLiteKnowledgeBase(path) as kb:
        assert await kb.count_plan_jobs() == {
            ("completed", "batch"): 1,
            ("timeout", "batch"): 1,
            ("failed", "batch"): 1,
        }
        newest = await kb.query_plans(PlanQuery(newest_first=True, limit=1))
        assert [p.id for p in newest] == ["p1"]
        assert await kb.count_plans() == {PlanStatus.COMPLETED: 1, PlanStatus.FAILED: 1}
    async with SQLiteKnowledgeBase(path) as again:  # a second open changes nothing
        assert len(await again.query_plans(PlanQuery())) == 2
        assert sum((await again.count_plan_jobs()).values()) == 3
