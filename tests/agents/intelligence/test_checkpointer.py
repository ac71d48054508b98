"""The plane's checkpoints in the knowledge base: replicas share threads; retention.

Real SQLite knowledge base, in-process bus, LangGraph graph and the other agents; the
batch system is the simulated cluster on a manual clock (``tests/agents/harness.py``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.bus.memory import InMemoryBus
from agents.center import Center, CenterConfig, RetentionPolicy
from agents.events import JobSubmitted, PlanRequested
from agents.intelligence import IntelligencePlane
from agents.intelligence.checkpointer import KnowledgeBaseSaver
from agents.runtime import AgentRunner
from knowledge_base.checkpoints import checkpoint_store
from knowledge_base.records import PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import OutboxMessage
from tests.agents.harness import FAST, MiniCenter, dnn_spec, start_center_agents, tick, until
from tests.agents.intelligence.test_plane import (
    KilledAfterApproving,
    run_to_end,
    thread_status,
)


async def test_a_request_through_profiling_completes_with_checkpoints_in_the_kb(
    tmp_path: Path,
) -> None:
    """The profile answer finds its thread among the plans still being planned."""
    async with MiniCenter(tmp_path, profiling=True) as center:
        saver = KnowledgeBaseSaver(checkpoint_store(center.kb))
        agents = await start_center_agents(center, saver)
        await center.publish(
            PlanRequested(plan_id="plan-1", spec=dnn_spec(partitions=["debug"])), "plan-1"
        )
        assert await run_to_end(center, agents, "plan-1") == "completed"
        assert await saver.athreads() == ["plan-1"]
        # Nothing but the knowledge base's own file was written.
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["kb.db"]


async def test_a_replica_of_the_plane_carries_on_a_request_another_one_was_killed_in(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path, profiling=True) as center:
        first = KnowledgeBaseSaver(checkpoint_store(center.kb))
        agents = await start_center_agents(
            center, first, plane_class=KilledAfterApproving, start_plane=False
        )
        task = asyncio.create_task(AgentRunner(agents["plane"], center.bus, center.kb, FAST).run())
        await center.publish(
            PlanRequested(plan_id="plan-5", spec=dnn_spec(partitions=["debug"])), "plan-5"
        )

        async def approved() -> bool:
            return await thread_status(agents["plane"], "plan-5") == "executing"

        await until(
            approved, lambda: tick(center, agents["scheduler"], 10), steps=200, what="approval"
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Another member of the group: its own saver object, the same knowledge base.
        replica = IntelligencePlane(
            center.kb, KnowledgeBaseSaver(checkpoint_store(center.kb)), agents["plane"].context
        )
        await center.start(replica)
        agents["plane"] = replica
        assert await run_to_end(center, agents, "plan-5") == "completed"
        plan = await center.kb.get_plan("plan-5")
        submitted = {
            s.job_id for s in await center.recorder.of(JobSubmitted) if s.plan_id == "plan-5"
        }
        assert len(submitted) == len([s for s in plan.segments if s.job_id]) >= 3


async def test_retention_keeps_open_threads_latest_step_and_drops_ended_threads(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path, profiling=True) as center:
        saver = KnowledgeBaseSaver(checkpoint_store(center.kb))
        agents = await start_center_agents(center, saver, approval="user")
        for plan_id in ("done", "open"):
            await center.publish(PlanRequested(plan_id=plan_id, spec=dnn_spec()), plan_id)

        async def both_waiting() -> bool:
            statuses = [await thread_status(agents["plane"], p) for p in ("done", "open")]
            return statuses == ["awaiting_approval", "awaiting_approval"]

        await until(both_waiting, lambda: tick(center, agents["scheduler"]), steps=80, what="wait")
        plan = await center.kb.get_plan("done")
        await center.kb.put_plan(plan.model_copy(update={"status": PlanStatus.CANCELLED}))
        steps_before = len(await saver.store.list("open", ""))
        assert steps_before > 1

        later = datetime.now(UTC) + timedelta(days=1)
        checkpoints, threads = await agents["plane"].prune(later)

        assert threads == 1 and await saver.athreads() == ["open"]
        kept = await saver.store.list("open", "")
        assert len(kept) == 1 and checkpoints >= steps_before - 1
        # The open request still resumes from what was kept.
        assert await thread_status(agents["plane"], "open") == "awaiting_approval"


async def test_a_running_center_prunes_on_its_schedule(tmp_path: Path) -> None:
    """Before, prune_processed was called by tests only: nothing pruned a running center."""
    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    await kb.complete_event(
        "scheduler",
        "old-event",
        [OutboxMessage(message_id="m1", topic="t", key="k", value="{}")],
    )
    await kb.mark_outbox_sent("scheduler", ["m1"])
    config = CenterConfig(
        agents=("estimation",),
        home=tmp_path,
        retention=RetentionPolicy(keep_days=0.1 / 86400, interval_s=0.05),  # 0.1 s
    )
    async with Center(InMemoryBus(), kb, {}, config):

        async def pruned() -> bool:
            return not await kb.is_processed("scheduler", "old-event")

        for _ in range(200):  # bounded: 10 s
            if await pruned():
                break
            await asyncio.sleep(0.05)
        assert await pruned()
    await kb.close()
