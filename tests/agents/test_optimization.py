"""Optimization: the planner over given estimates, cascades, queue-aware choice, re-plans."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.events import Envelope, PlanBuildRequested, PlanOptionsReady, PlanReplanRequested
from agents.optimization import FixedEstimates, Optimization, OptimizationConfig, remaining_work
from knowledge_base.records import Interval
from tests.agents.harness import MiniCenter, dnn_spec, make_plan
from tools.planning.builder import PlanningConfig


def estimates_for(spec, runtime_s: float, partitions=("debug", "batch")):  # type: ignore[no-untyped-def]
    out = []
    for partition in partitions:
        plan = make_plan("x", spec, partition=partition, runtime_s=runtime_s)
        assert plan.estimate is not None
        option = plan.estimate.option.model_copy(update={"cores_per_node": 2})
        out.append(plan.estimate.model_copy(update={"option": option}))
    return out


def test_fixed_estimates_answer_only_for_the_shape_they_hold() -> None:
    spec = dnn_spec()
    [debug] = estimates_for(spec, 100, partitions=("debug",))
    fixed = FixedEstimates((debug,))
    assert fixed.estimator_id == "test"
    moved = FixedEstimates((debug,), any_partition=True)
    from knowledge_base.catalog import Catalog
    from tests.cluster import TEST_SYSTEM
    from tools.planning.estimation import Candidate, NoEstimate
    from tools.planning.whatif import enumerate_candidates

    found = [
        c
        for c in enumerate_candidates(spec, Catalog(systems=[TEST_SYSTEM]))
        if isinstance(c, Candidate)
    ]
    batch = next(c for c in found if c.partition.name == "batch")
    assert isinstance(fixed.estimate(spec.workload, batch), NoEstimate)
    answer = moved.estimate(spec.workload, batch)
    assert not isinstance(answer, NoEstimate) and answer.option.partition == "batch"


def test_a_replan_plans_the_work_left_at_the_pace_seen() -> None:
    spec = dnn_spec()
    [estimate] = estimates_for(spec, 200, partitions=("debug",))
    left, scaled = remaining_work(spec, [estimate], 0.25, pace_run_s=800)
    assert left.workload.epochs == 10  # type: ignore[union-attr]
    assert scaled[0].runtime_s.point == pytest.approx(200)  # a quarter of 800 s
    assert "observed pace" in scaled[0].label


@pytest.fixture
async def center(tmp_path: Path):
    async with MiniCenter(tmp_path) as c:
        yield c


async def start(center: MiniCenter) -> None:
    config = OptimizationConfig(planning=PlanningConfig(checkpoint_overhead_s=10))
    await center.start(Optimization(center.kb, {"testcluster": center.cluster}, config))


async def test_a_long_checkpointing_run_in_the_debug_queue_becomes_a_cascade(
    center: MiniCenter,
) -> None:
    await start(center)
    spec = dnn_spec(partitions=["debug"])
    await center.publish(
        PlanBuildRequested(plan_id="p1", spec=spec, estimates=estimates_for(spec, 240)), "p1"
    )
    await center.settle()
    [answer] = await center.recorder.of(PlanOptionsReady)
    plan = answer.recommended
    assert plan is not None and plan.option is not None
    assert plan.option.partition == "debug" and plan.option.walltime_s == 60
    # upper 288 s x 1.1 in segments of 50 s of work (60 s minus 10 s of overhead)
    assert len(plan.segments) == 7
    assert "7 cascaded jobs" in plan.reason


async def test_without_a_partition_goal_one_job_on_batch_beats_a_cascade(
    center: MiniCenter,
) -> None:
    await start(center)
    spec = dnn_spec(objective="fastest")
    await center.publish(
        PlanBuildRequested(plan_id="p2", spec=spec, estimates=estimates_for(spec, 240)), "p2"
    )
    await center.settle()
    [answer] = await center.recorder.of(PlanOptionsReady)
    assert answer.recommended is not None and answer.recommended.option is not None
    assert answer.recommended.option.partition == "batch"
    assert len(answer.recommended.segments) == 1
    assert [a.option.partition for a in answer.alternatives if a.option] == ["debug"]


async def test_nothing_that_fits_answers_no_plan_and_every_reason(center: MiniCenter) -> None:
    await start(center)
    spec = dnn_spec(partitions=["debug"], checkpointable=False)
    await center.publish(
        PlanBuildRequested(plan_id="p3", spec=spec, estimates=estimates_for(spec, 240)), "p3"
    )
    await center.settle()
    [answer] = await center.recorder.of(PlanOptionsReady)
    assert answer.recommended is None
    assert any("cannot checkpoint" in reason for reason in answer.infeasible)


async def test_a_replan_considers_every_partition_on_the_same_hardware(center: MiniCenter) -> None:
    await start(center)
    spec = dnn_spec(objective="fastest")
    [debug] = estimates_for(spec, 240, partitions=("debug",))
    await center.publish(
        PlanReplanRequested(
            plan_id="p4",
            spec=spec,
            estimates=[
                debug.model_copy(update={"runtime_s": Interval(point=240, low=200, high=300)})
            ],
            reason="slow",
            remaining_fraction=0.5,
            projected_run_s=900,
        ),
        "p4",
    )
    await center.settle()
    [answer] = await center.recorder.of(PlanOptionsReady)
    assert answer.replan
    assert answer.recommended is not None and answer.recommended.option is not None
    # 450 s left at the pace seen: one job on batch beats a chain through debug
    assert answer.recommended.option.partition == "batch"
    assert answer.recommended.spec.workload.epochs == 20  # type: ignore[union-attr]


async def test_plans_are_made_at_the_requests_time_on_the_queue_as_the_cluster_sees_it(
    center: MiniCenter,
) -> None:
    # The simulated cluster's clock is not the wall clock: its queue is read at its own
    # time (or every running job would look months old) and the plan is made at the
    # request's time, so a replay or a simulation decides what the run decided.
    center.clock.advance(3600)
    agent = Optimization(center.kb, {"testcluster": center.cluster})
    spec = dnn_spec()
    asked_at = datetime(2024, 5, 1, 9, tzinfo=UTC)
    event = Envelope.of(
        PlanBuildRequested(plan_id="p9", spec=spec, estimates=estimates_for(spec, 240)),
        source="test",
        correlation_id="p9",
        time=asked_at,
    )
    observation = await agent.sense(event)
    assert observation is not None
    assert observation.now == asked_at
    [snapshot] = observation.snapshots
    assert snapshot.taken_at == center.clock.now()
