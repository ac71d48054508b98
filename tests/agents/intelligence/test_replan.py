"""Re-planning a running plan whose progress diverges from its estimate.

End to end, every agent is real (in-process bus, SQLite, the plane's LangGraph thread
checkpointed in SQLite, the planner, the Scheduler); the batch system is the simulated
cluster on a manual clock, with ``TrainingCluster`` (``tests/agents/harness.py``)
standing in for the training script: it runs the epochs at a pace the test sets, slower
than the profiling run said. ``decide_replan`` is also called directly: it is pure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.events import (
    JobSubmitted,
    PlanFinished,
    PlanOptionsReady,
    PlanReplanDecided,
    PlanReplanRequested,
    PlanRequested,
    ScheduleDecision,
)
from agents.intelligence import PlaneContext, RuleGoalPlanner, open_checkpointer
from agents.intelligence.replan import ReplanBounds, decide_replan, reestimate
from knowledge_base.errors import NotFoundError
from knowledge_base.records import CascadeSegment, Plan, PlanStatus
from tests.agents.harness import (
    TEST_SYSTEM,
    MiniCenter,
    dnn_spec,
    make_plan,
    start_center_agents,
    tick,
    until,
)
from tools.actuators.model import JobStatus

OVER = (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)


async def run(
    tmp_path: Path, plan_id: str, *, slowdown: float, max_replans: int = 2, **spec: Any
) -> dict[str, Any]:
    """Ask for ``dnn_spec(**spec)`` and run it to its end on a cluster ``slowdown`` x slower."""
    async with (
        MiniCenter(tmp_path, slowdown=slowdown) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver)
        # The plane as start_center_agents makes it, with the re-plan bound of this test.
        agents["plane"].context = PlaneContext(
            goal_planner=RuleGoalPlanner(),
            systems=(TEST_SYSTEM.name,),
            replan=ReplanBounds(max_replans=max_replans),
        )
        await center.publish(
            PlanRequested(plan_id=plan_id, spec=dnn_spec(**spec), text="as soon as possible"),
            plan_id,
        )

        async def over() -> bool:
            try:
                return (await center.kb.get_plan(plan_id)).status in OVER
            except NotFoundError:
                return False

        async def step() -> None:
            await tick(center, agents["scheduler"], 10)

        await until(over, step, steps=400, what=f"plan {plan_id} over")
        await center.settle()
        plan = await center.kb.get_plan(plan_id)
        jobs: list[JobStatus] = [
            await center.cluster.status(s.job_id) for s in plan.segments if s.job_id
        ]
        return {
            "plan": plan,
            "thread": (await agents["plane"].snapshot(plan_id)).values,
            "asked": [r for r in await center.recorder.of(PlanReplanRequested)],
            "decided": await center.recorder.of(PlanReplanDecided),
            "decisions": [
                d for d in await center.recorder.of(ScheduleDecision) if d.plan_id == plan_id
            ],
            "submitted": [
                s for s in await center.recorder.of(JobSubmitted) if s.plan_id == plan_id
            ],
            "finished": [f for f in await center.recorder.of(PlanFinished) if f.plan_id == plan_id],
            "jobs": jobs,
            "walltimes": [s.walltime_s for s in plan.segments if s.job_id],
            "output": [await center.cluster.output_tail(j.job_id) for j in jobs],
        }


def _ended_s(run: dict[str, Any]) -> float:
    """Simulated seconds from the first workload job's start to the last one's end."""
    jobs: list[JobStatus] = run["jobs"]
    assert jobs[-1].end_time is not None and jobs[0].start_time is not None
    return (jobs[-1].end_time - jobs[0].start_time).total_seconds()


def _used_s(run: dict[str, Any]) -> float:
    """Node-seconds the workload's jobs held (what the allocation is charged)."""
    jobs: list[JobStatus] = run["jobs"]
    return sum(
        (j.end_time - j.start_time).total_seconds() for j in jobs if j.start_time and j.end_time
    )


async def test_a_job_2x_slower_than_estimated_is_replanned_and_finishes(tmp_path: Path) -> None:
    """20 epochs that cannot checkpoint, profiled at 6.4 s each, run at 12.8 s: the planned
    4-minute job would time out at 86% and lose the run; re-planned at 15%, it moves to a
    7-minute job and completes."""
    out = await run(tmp_path / "replan", "slow", slowdown=2.0, checkpointable=False, epochs=20)
    plan = out["plan"]
    assert plan.status is PlanStatus.COMPLETED
    assert out["output"][-1].strip() == "RIGHTSIZE_PROGRESS epoch=20/20"
    # Asked once, decided once: cancel the doomed job and resubmit it with room.
    [asked] = out["asked"]
    assert asked.checkpointable is False and asked.remaining_fraction == 1.0
    assert "past its walltime" in asked.reason
    [decided] = out["decided"]
    assert (decided.action, decided.revision) == ("resubmit", 1)
    assert decided.option is not None and decided.option.walltime_s > 2 * 128 * 1.1
    assert decided.estimate is not None  # the whole run, re-estimated at the pace seen
    assert decided.estimate.runtime_s.point == pytest.approx(2 * 20 * 6.4, rel=0.1)
    first, second = out["jobs"]
    assert first.state.value == "cancelled" and second.state.value == "completed"
    assert out["walltimes"] == [240, decided.option.walltime_s]
    assert [s.state for s in plan.segments if s.job_id] == ["replanned", "completed"]
    actions = [d.action for d in out["decisions"]]
    assert actions == ["submit", "replan", "resubmit", "complete"]
    assert len(out["submitted"]) == 2  # one replacement, nothing submitted twice
    # Every re-plan decision is in the plan's history and in the plane's thread.
    [revision] = plan.replans
    assert (revision.revision, revision.action) == (1, "resubmit")
    assert any(entry.startswith("re-plan 1: resubmit") for entry in out["thread"]["log"])
    assert out["thread"]["status"] == "completed" and out["thread"]["replans"] == 1

    # Without re-plans the same job runs to its walltime, times out, and the
    # Re-scheduler's timeout rule resubmits it: later, and more node time spent.
    alone = await run(
        tmp_path / "alone", "alone", slowdown=2.0, max_replans=0, checkpointable=False, epochs=20
    )
    assert alone["plan"].status is PlanStatus.COMPLETED
    assert [d.action for d in alone["decided"]] == ["keep"]
    assert "max_replans" in alone["decided"][0].reason
    assert [j.state.value for j in alone["jobs"]] == ["timeout", "completed"]
    assert _ended_s(out) < _ended_s(alone) - 120
    assert _used_s(out) < _used_s(alone) - 120


async def test_a_job_within_tolerance_is_left_alone(tmp_path: Path) -> None:
    """20% slower than profiled: within the estimate's interval and its walltime."""
    out = await run(tmp_path, "steady", slowdown=1.2, checkpointable=False, epochs=20)
    assert out["plan"].status is PlanStatus.COMPLETED
    assert out["asked"] == [] and out["decided"] == []
    assert [j.state.value for j in out["jobs"]] == ["completed"]
    assert out["plan"].replans == []
    assert [d.action for d in out["decisions"]] == ["submit", "complete"]


async def test_a_job_that_cannot_be_helped_stops_with_an_explanation(tmp_path: Path) -> None:
    """6x slower: 20 epochs take ~13 min; no partition of the cluster allows more than 10,
    and the job cannot checkpoint. Stopped at once, not at its walltime and again later."""
    out = await run(tmp_path, "hopeless", slowdown=6.0, checkpointable=False, epochs=20)
    plan = out["plan"]
    assert plan.status is PlanStatus.FAILED
    [decided] = out["decided"]
    assert decided.action == "stop"
    assert "no partition in scope holds the whole run" in decided.reason
    assert "longer limit" in decided.reason
    assert plan.reason.startswith(decided.reason)  # the explanation is the plan's end
    [job] = out["jobs"]
    assert job.state.value == "cancelled"
    assert _used_s(out) < 240 / 2  # stopped well before its walltime
    assert len(out["submitted"]) == 1
    [finished] = out["finished"]
    assert finished.status is PlanStatus.FAILED and "no partition" in finished.reason
    assert out["thread"]["status"] == "failed"
    assert [d.action for d in out["decisions"]] == ["submit", "replan", "stop"]


# -- the decision, called directly ----------------------------------------------------------


def _request(plan: Plan, **fields: Any) -> PlanReplanRequested:
    values: dict[str, Any] = {
        "plan_id": plan.id,
        "spec": plan.spec,
        "reason": "pace",
        "remaining_fraction": 0.8,
        "projected_run_s": 600.0,
        "job_id": "7",
        "segment_index": 2,
        "done_fraction": 0.2,
        "job_elapsed_s": 130.0,
        "job_walltime_s": 300,
        "checkpointable": True,
        **fields,
    }
    return PlanReplanRequested.model_validate(values)


def _offer(plan: Plan) -> PlanOptionsReady:
    return PlanOptionsReady(plan_id=plan.id, recommended=plan, replan=True)


def test_reestimate_scales_the_whole_interval_to_the_pace_seen() -> None:
    plan = make_plan("p", dnn_spec(), runtime_s=100)
    assert plan.estimate is not None
    again = reestimate(plan.estimate, 250).runtime_s
    assert (again.point, again.low, again.high) == pytest.approx((250, 200, 300))


def test_a_cascade_follows_a_better_plan_from_the_next_segment_boundary() -> None:
    running = make_plan("p", dnn_spec(), segments=6, walltime_s=60, runtime_s=240)
    better = make_plan("p", dnn_spec(), partition="batch", walltime_s=420, runtime_s=380)
    decision = decide_replan(
        revision=1, plan=running, request=_request(running), proposal=_offer(better)
    )
    assert decision.action == "extend" and decision.start_index == 3
    assert decision.option is not None and decision.option.partition == "batch"
    assert decision.segments == [CascadeSegment(index=0, walltime_s=420)]
    assert "at the next segment boundary" in decision.reason


def test_a_cascade_already_on_the_best_plan_is_kept() -> None:
    running = make_plan("p", dnn_spec(), segments=6, walltime_s=60)
    same = make_plan("p", dnn_spec(), segments=3, walltime_s=60)  # segments 3, 4, 5 to come
    decision = decide_replan(
        revision=1, plan=running, request=_request(running), proposal=_offer(same)
    )
    assert decision.action == "keep" and "still the best" in decision.reason


def test_a_job_that_still_fits_its_walltime_is_kept_however_far_past_its_estimate() -> None:
    running = make_plan("p", dnn_spec(checkpointable=False), walltime_s=600, runtime_s=200)
    request = _request(running, checkpointable=False, remaining_fraction=1.0, job_walltime_s=600)
    decision = decide_replan(revision=1, plan=running, request=request, proposal=None)
    # 130 s run + 80% of 600 s = 610 s > 600: it does not fit ...
    assert decision.action == "stop"
    # ... with 100 s less to go, it does.
    shorter = request.model_copy(update={"projected_run_s": 500.0})
    assert decide_replan(revision=1, plan=running, request=shorter, proposal=None).action == "keep"


def test_past_the_bound_a_replan_is_answered_keep_with_the_reason() -> None:
    running = make_plan("p", dnn_spec(checkpointable=False), walltime_s=300)
    request = _request(running, checkpointable=False)
    better = make_plan("p", dnn_spec(checkpointable=False), partition="batch", walltime_s=600)
    decision = decide_replan(
        revision=3,
        plan=running,
        request=request,
        proposal=_offer(better),
        bounds=ReplanBounds(max_replans=2),
    )
    assert decision.action == "keep" and "max_replans" in decision.reason
    assert decision.revision == 3


def test_a_job_already_at_the_longest_walltime_in_scope_is_stopped_not_resubmitted() -> None:
    running = make_plan("p", dnn_spec(checkpointable=False), partition="batch", walltime_s=600)
    request = _request(running, checkpointable=False, job_walltime_s=600, projected_run_s=620.0)
    same = make_plan("p", dnn_spec(checkpointable=False), partition="batch", walltime_s=600)
    decision = decide_replan(revision=2, plan=running, request=request, proposal=_offer(same))
    assert decision.action == "stop" and "what it has" in decision.reason


async def test_a_plane_restarted_while_waiting_for_the_replan_asks_optimization_again(
    tmp_path: Path,
) -> None:
    """Embedded: the in-process bus, and Optimization's answer on it, die with the process."""
    from agents.bus.memory import InMemoryBus
    from agents.events import decode_event
    from agents.intelligence import IntelligencePlane
    from agents.optimization import Optimization
    from agents.topics import ALL_TOPICS

    class DeafToReplans(Optimization):
        async def sense(self, event):  # type: ignore[no-untyped-def]
            if isinstance(event.payload, PlanReplanRequested):
                return None  # its answer is lost (here: never given)
            return await super().sense(event)

    async with (
        MiniCenter(tmp_path, slowdown=2.0) as center,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        agents = await start_center_agents(center, saver, optimization_class=DeafToReplans)
        spec = dnn_spec(checkpointable=False, epochs=20)
        await center.publish(PlanRequested(plan_id="wait", spec=spec), "wait")

        async def waiting() -> bool:
            return "await_replan" in (await agents["plane"].snapshot("wait")).next

        await until(
            waiting, lambda: tick(center, agents["scheduler"]), steps=60, what="await_replan"
        )
        fresh = InMemoryBus()
        async with fresh:
            reader = fresh.consumer(list(ALL_TOPICS), group_id="reader")
            await reader.start()
            plane = IntelligencePlane(center.kb, saver, agents["plane"].context)
            assert await plane.resume_open(fresh) == ["wait"]
            [record] = await reader.poll(max_records=10, timeout_s=1)
            again = decode_event(record.value)
            assert isinstance(again.payload, PlanReplanRequested)
            assert again.payload.plan_id == "wait" and again.payload.checkpointable is False
            await reader.stop()
