"""The Intelligence Plane with the other agents: a request from intake to a finished plan.

Everything is real (in-process bus, SQLite knowledge base, the LangGraph checkpointer on
a SQLite file, the planner, the Scheduler) except the batch system: a simulated cluster
on a manual clock, so that a nine-segment cascade takes milliseconds (see
``tests/agents/harness.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agents.events import (
    EstimateReady,
    JobSubmitted,
    PlanApproved,
    PlanDecision,
    PlanFinished,
    PlanRequested,
    ProfileCompleted,
    ScheduleDecision,
)
from agents.intelligence import IntelligencePlane, open_checkpointer
from agents.runtime import AgentRunner
from knowledge_base.records import PlanStatus
from tests.agents.harness import FAST, MiniCenter, dnn_spec, start_center_agents, tick, until


async def thread_status(plane: IntelligencePlane, plan_id: str) -> str | None:
    values: dict[str, Any] = (await plane.snapshot(plan_id)).values  # type: ignore[assignment]
    return values.get("status")


async def run_to_end(center: MiniCenter, agents: dict[str, Any], plan_id: str) -> str:
    async def over() -> str | None:
        status = await thread_status(agents["plane"], plan_id)
        return (
            status if status not in (None, "planning", "executing", "awaiting_approval") else None
        )

    async def step() -> None:
        await tick(center, agents["scheduler"], 10)

    result: str = await until(over, step, steps=400, what=f"request {plan_id} over")
    return result


async def test_a_request_goes_from_intake_through_profiling_to_a_completed_cascade(
    tmp_path: Path,
) -> None:
    async with (
        MiniCenter(tmp_path, profiling=True) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver)
        spec = dnn_spec(partitions=["debug"])
        await center.publish(
            PlanRequested(plan_id="plan-1", spec=spec, text="cheapest, in the debug queue"),
            "plan-1",
        )
        status = await run_to_end(center, agents, "plan-1")

        assert status == "completed"
        # The unseen model was profiled first, through the Scheduler, then estimated.
        ready = await center.recorder.of(EstimateReady)
        assert [r.needs_profiling for r in ready] == [True, False]
        assert ready[1].estimates[0].estimator_id == "profiled-train.py"
        profiled = await center.recorder.of(ProfileCompleted)
        assert profiled[0].ok and profiled[0].model == spec.workload.model  # type: ignore[union-attr]
        approvals = await center.recorder.of(PlanApproved)
        assert [a.purpose for a in approvals] == ["profiling", "workload"]
        # 40 epochs x 128 steps x 50 ms ~ 4.3 min; upper x1.1 through a 1-min partition
        # with 10 s of restart overhead: a cascade of 9 jobs.
        plan = await center.kb.get_plan("plan-1")
        assert plan.status is PlanStatus.COMPLETED
        assert plan.option is not None and plan.option.partition == "debug"
        jobs = [s for s in plan.segments if s.job_id]
        assert len(jobs) >= 3 and [s.index for s in jobs] == list(range(len(jobs)))
        # Goals were read from the words and kept in the plan.
        assert plan.spec.goals.objective.value == "cheapest"
        values = (await agents["plane"].snapshot("plan-1")).values
        assert any("goals by rules" in line for line in values["log"])
        finished = [f for f in await center.recorder.of(PlanFinished) if f.plan_id == "plan-1"]
        assert len(finished) == 1 and finished[0].segments == len(jobs)


async def test_with_approval_the_plan_waits_for_the_user_and_runs_the_choice(
    tmp_path: Path,
) -> None:
    async with (
        MiniCenter(tmp_path, profiling=True) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver, approval="user")
        await center.publish(PlanRequested(plan_id="plan-2", spec=dnn_spec()), "plan-2")

        async def waiting() -> bool:
            return await thread_status(agents["plane"], "plan-2") == "awaiting_approval"

        await until(waiting, lambda: tick(center, agents["scheduler"]), steps=50, what="approval")
        stored = await center.kb.get_plan("plan-2")
        assert stored.status is PlanStatus.AWAITING_APPROVAL
        assert stored.option is not None  # what the person is asked to approve
        assert not await center.recorder.of(JobSubmitted) or all(
            s.plan_id != "plan-2" for s in await center.recorder.of(JobSubmitted)
        )
        await center.publish(
            PlanDecision(plan_id="plan-2", approved=True, choice=0, by="alice"), "plan-2"
        )
        assert await run_to_end(center, agents, "plan-2") == "completed"


async def test_a_rejected_plan_is_never_submitted(tmp_path: Path) -> None:
    async with (
        MiniCenter(tmp_path, profiling=True) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver, approval="user")
        await center.publish(PlanRequested(plan_id="plan-3", spec=dnn_spec()), "plan-3")

        async def waiting() -> bool:
            return await thread_status(agents["plane"], "plan-3") == "awaiting_approval"

        await until(waiting, lambda: tick(center, agents["scheduler"]), steps=50, what="approval")
        await center.publish(
            PlanDecision(plan_id="plan-3", approved=False, by="alice", reason="too slow"),
            "plan-3",
        )
        await center.settle()
        assert await thread_status(agents["plane"], "plan-3") == "rejected"
        assert (await center.kb.get_plan("plan-3")).status is PlanStatus.CANCELLED
        workload_jobs = [s for s in await center.recorder.of(JobSubmitted) if s.plan_id == "plan-3"]
        assert workload_jobs == []


async def test_a_request_nothing_can_run_fails_with_the_reasons(tmp_path: Path) -> None:
    async with (
        MiniCenter(tmp_path, profiling=True) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver)
        spec = dnn_spec(partitions=["debug"], checkpointable=False)  # 4 min into 1-min jobs
        await center.publish(PlanRequested(plan_id="plan-4", spec=spec), "plan-4")
        status = await run_to_end(center, agents, "plan-4")
        assert status == "failed"
        plan = await center.kb.get_plan("plan-4")
        assert plan.status is PlanStatus.FAILED
        assert "cannot checkpoint" in plan.reason


class KilledAfterApproving(IntelligencePlane):
    """Dies (hangs until cancelled) right after the step that approved a plan: the graph
    has saved the approval, but the runtime never completed the event or published it."""

    async def act(self, actions, cause):  # type: ignore[no-untyped-def]
        emits = await super().act(actions, cause)
        if any(isinstance(e.payload, PlanApproved) for e in emits):
            await asyncio.Event().wait()  # killed here
        return emits


async def test_a_plane_killed_mid_request_resumes_it_after_restart_and_submits_nothing_twice(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path, profiling=True) as center:
        async with open_checkpointer(tmp_path / "plane.db") as saver:
            agents = await start_center_agents(
                center, saver, plane_class=KilledAfterApproving, start_plane=False
            )
            runner = AgentRunner(agents["plane"], center.bus, center.kb, FAST)
            task = asyncio.create_task(runner.run())
            await center.publish(
                PlanRequested(plan_id="plan-5", spec=dnn_spec(partitions=["debug"])), "plan-5"
            )

            async def approved_in_checkpoint() -> bool:
                return await thread_status(agents["plane"], "plan-5") == "executing"

            async def step() -> None:
                await tick(center, agents["scheduler"], 10)

            await until(approved_in_checkpoint, step, steps=200, what="the approval step")
            # Kill: cancel the plane's task mid-act (no graceful stop, nothing committed).
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            submitted = [s for s in await center.recorder.of(JobSubmitted) if s.plan_id == "plan-5"]
            assert submitted == []  # the approval never left the dead plane
        # Restart: a new plane on the same checkpoint file, same consumer group.
        async with open_checkpointer(tmp_path / "plane.db") as saver2:
            plane2 = IntelligencePlane(center.kb, saver2, agents["plane"].context)
            await center.start(plane2)
            agents["plane"] = plane2
            status = await run_to_end(center, agents, "plan-5")

        assert status == "completed"
        plan = await center.kb.get_plan("plan-5")
        jobs = [s.job_id for s in plan.segments if s.job_id]
        submitted = [s for s in await center.recorder.of(JobSubmitted) if s.plan_id == "plan-5"]
        # Each segment submitted once: one batch job per ledger entry, nothing extra.
        workload_jobs = [j for j in center.cluster._jobs.values() if j.request.plan_id == "plan-5"]
        assert len(workload_jobs) == len(jobs) >= 3
        assert len({s.job_id for s in submitted}) == len(jobs)
        decisions = [d for d in await center.recorder.of(ScheduleDecision) if d.plan_id == "plan-5"]
        assert [d.action for d in decisions].count("submit") == 1


class HangsOnce:
    """A goal planner that never answers the first time: the plane is killed mid-step,
    between two of its graph's nodes (intake saved, goals not)."""

    calls = 0

    async def infer(self, text, explicit, *, now, systems):  # type: ignore[no-untyped-def]
        from agents.intelligence import RuleGoalPlanner

        HangsOnce.calls += 1
        if HangsOnce.calls == 1:
            await asyncio.Event().wait()
        return await RuleGoalPlanner().infer(text, explicit, now=now, systems=systems)


async def test_a_plane_killed_inside_a_step_carries_on_from_its_last_saved_node(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path, profiling=True) as center:
        async with open_checkpointer(tmp_path / "plane.db") as saver:
            agents = await start_center_agents(
                center, saver, goal_planner=HangsOnce(), start_plane=False
            )
            runner = AgentRunner(agents["plane"], center.bus, center.kb, FAST)
            task = asyncio.create_task(runner.run())
            await center.publish(
                PlanRequested(plan_id="plan-6", spec=dnn_spec(partitions=["debug"])), "plan-6"
            )

            async def hanging() -> bool:
                snapshot = await agents["plane"].snapshot("plan-6")
                return snapshot.next == ("infer_goals",)

            await until(hanging, lambda: asyncio.sleep(0.02), steps=200, what="intake saved")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with open_checkpointer(tmp_path / "plane.db") as saver2:
            plane2 = IntelligencePlane(center.kb, saver2, agents["plane"].context)
            await center.start(plane2)
            agents["plane"] = plane2
            status = await run_to_end(center, agents, "plan-6")
            log = (await plane2.snapshot("plan-6")).values["log"]
    assert status == "completed"
    assert HangsOnce.calls == 2  # intake was not redone; the goals step was
    assert sum(1 for line in log if line.startswith("intake")) == 1


async def test_after_a_restart_that_lost_the_bus_open_requests_ask_again(tmp_path: Path) -> None:
    """Embedded: the in-process bus dies with the process; the checkpoints do not."""
    from agents.bus.memory import InMemoryBus
    from agents.events import EstimateRequested, decode_event
    from agents.topics import ALL_TOPICS

    async with (
        open_checkpointer(tmp_path / "plane.db") as saver,
        MiniCenter(tmp_path) as center,
    ):
        plane = IntelligencePlane(center.kb, saver)
        await center.start(plane)  # alone: nobody answers its estimate request
        await center.publish(PlanRequested(plan_id="plan-7", spec=dnn_spec()), "plan-7")
        await center.settle()
        assert (await plane.snapshot("plan-7")).interrupts

        fresh = InMemoryBus()
        async with fresh:
            reader = fresh.consumer(list(ALL_TOPICS), group_id="reader")
            await reader.start()
            assert await IntelligencePlane(center.kb, saver).resume_open(fresh) == ["plan-7"]
            [record] = await reader.poll(max_records=10, timeout_s=1)
            again = decode_event(record.value)
            assert isinstance(again.payload, EstimateRequested)
            assert again.payload.plan_id == "plan-7"
            await reader.stop()
