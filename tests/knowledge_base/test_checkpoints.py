"""The checkpoint store in each knowledge-base backend (SQLite always, MongoDB when set)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge_base.checkpoints import CheckpointRecord, CheckpointWrite, checkpoint_store
from knowledge_base.store import KnowledgeBase

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(thread: str, n: int, *, at: datetime, namespace: str = "") -> CheckpointRecord:
    return CheckpointRecord(
        thread_id=thread,
        namespace=namespace,
        checkpoint_id=f"{n:04d}",
        parent_id=f"{n - 1:04d}" if n else None,
        type="msgpack",
        checkpoint=bytes([n]) * 3,
        metadata=b'{"step": %d}' % n,
        saved_at=at,
    )


def write(task: str, idx: int, value: bytes) -> CheckpointWrite:
    return CheckpointWrite(task_id=task, idx=idx, channel="c", type="bytes", value=value)


async def test_checkpoints_round_trip_newest_first(kb: KnowledgeBase) -> None:
    store = checkpoint_store(kb)
    for n in range(3):
        await store.put(record("plan-a", n, at=T0 + timedelta(minutes=n)))
    await store.put(record("plan-b", 0, at=T0))
    latest = await store.get("plan-a", "")
    assert latest is not None and latest.checkpoint_id == "0002"
    assert latest.checkpoint == bytes([2]) * 3 and latest.saved_at == T0 + timedelta(minutes=2)
    first = await store.get("plan-a", "", "0000")
    assert first is not None and first.parent_id is None
    assert await store.get("plan-c", "") is None
    listed = await store.list("plan-a", "")
    assert [r.checkpoint_id for r in listed] == ["0002", "0001", "0000"]
    before = await store.list("plan-a", "", before_id="0002", limit=1)
    assert [r.checkpoint_id for r in before] == ["0001"]
    assert sorted(await store.threads()) == ["plan-a", "plan-b"]


async def test_writes_keep_the_first_unless_replaced(kb: KnowledgeBase) -> None:
    store = checkpoint_store(kb)
    await store.put(record("plan-a", 0, at=T0))
    await store.put_writes("plan-a", "", "0000", [write("t1", 0, b"first")], replace=False)
    await store.put_writes("plan-a", "", "0000", [write("t1", 0, b"again")], replace=False)
    assert [w.value for w in await store.writes("plan-a", "", "0000")] == [b"first"]
    await store.put_writes("plan-a", "", "0000", [write("t1", 0, b"error")], replace=True)
    assert [w.value for w in await store.writes("plan-a", "", "0000")] == [b"error"]


async def test_prune_keeps_each_threads_latest_checkpoint(kb: KnowledgeBase) -> None:
    store = checkpoint_store(kb)
    for n in range(4):  # plan-a: four steps, a day apart; its writes on step 1
        await store.put(record("plan-a", n, at=T0 + timedelta(days=n)))
    await store.put_writes("plan-a", "", "0001", [write("t", 0, b"x")], replace=False)
    await store.put(record("plan-b", 0, at=T0))  # one old step: it is the latest
    pruned = await store.prune(T0 + timedelta(days=1, hours=1))
    assert pruned == 2  # plan-a's steps 0 and 1; plan-b's only step is its latest
    assert [r.checkpoint_id for r in await store.list("plan-a", "")] == ["0003", "0002"]
    assert await store.writes("plan-a", "", "0001") == []
    assert [r.checkpoint_id for r in await store.list("plan-b", "")] == ["0000"]
    await store.delete_thread("plan-a")
    assert await store.threads() == ["plan-b"]
