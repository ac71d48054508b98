"""A plan the executor can never run ends FAILED with the executor's reason, at once.

Before, the Scheduler only logged the refusal: the plan stayed ``approved`` with an
intent of job ``None`` in ``submitting`` for ever, and ``submit --wait`` never returned.
"""

from __future__ import annotations

from pathlib import Path

from agents.events import JobSubmitted, PlanApproved, PlanFinished
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.records import PlanStatus, SegmentState
from tests.agents.harness import MiniCenter, dnn_spec, make_plan


async def test_a_request_beyond_the_cluster_ends_the_plan_failed_with_the_reason(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path) as center:
        scheduler = Scheduler(
            center.kb, {"testcluster": center.cluster}, center.bus, SchedulerConfig()
        )
        await center.start(scheduler)
        # debug's nodes have 4096 MB per job at most: 8000 MB can never run there
        plan = make_plan("plan-too-big", dnn_spec(), memory_mb=8000)

        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()

        stored = await center.kb.get_plan(plan.id)
        assert stored.status is PlanStatus.FAILED
        assert "cannot run segment 0" in stored.reason
        assert "8000" in stored.reason  # the executor's own words: the limit and the value
        assert [s.state for s in stored.segments if s.state is not None] == [SegmentState.FAILED]
        finished = await center.recorder.of(PlanFinished)
        assert [f.status for f in finished] == [PlanStatus.FAILED]
        assert await center.recorder.of(JobSubmitted) == []
        assert center.cluster._jobs == {}


async def test_a_refused_plan_is_not_retried_when_approved_again(tmp_path: Path) -> None:
    async with MiniCenter(tmp_path) as center:
        scheduler = Scheduler(
            center.kb, {"testcluster": center.cluster}, center.bus, SchedulerConfig()
        )
        await center.start(scheduler)
        plan = make_plan("plan-again", dnn_spec(), memory_mb=8000)
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()

        assert await scheduler.recover() == []
        stored = await center.kb.get_plan(plan.id)
        assert stored.status is PlanStatus.FAILED
        assert len([s for s in stored.segments if s.state is not None]) == 1
