"""The Optimization agent's plans take the learned wait where recorded waits allow (issue 42).

The knowledge base holds four weeks of the one-node test cluster's recorded waits
(``tests.tools.waits.test_learned_plan.past_jobs``: bursts served first come, first
served); the cluster's queue now has a blocker running and a job waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.events import Envelope, PlanBuildRequested, PlanOptionsReady
from agents.optimization import FixedEstimates, Optimization
from agents.runtime import Emit
from tests.agents.harness import MiniCenter, dnn_spec
from tests.agents.test_optimization import estimates_for
from tests.tools.waits.test_learned_plan import past_jobs
from tools.actuators.model import JobRequest, SimulatedWork
from tools.planning.queue import QueueModel
from tools.planning.selector import plan


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        for name, run_s in (("blocker", 500), ("waiting", 100)):
            await c.cluster.submit(
                JobRequest(
                    name=name,
                    partition="batch",
                    command="true",
                    memory_mb=100,
                    walltime_s=600,
                    simulated=SimulatedWork(run_s=run_s, peak_memory_mb=50),
                )
            )
        yield c


def request(spec_time: datetime) -> Envelope:
    spec = dnn_spec()
    return Envelope.of(
        PlanBuildRequested(plan_id="p1", spec=spec, estimates=estimates_for(spec, 240)),
        source="test",
        correlation_id="p1",
        time=spec_time,
    )


async def test_with_recorded_waits_the_agents_plan_waits_the_learned_p50(
    center: MiniCenter,
) -> None:
    await center.kb.add_jobs(past_jobs(days=28))
    agent = Optimization(center.kb, {"testcluster": center.cluster})
    observation = await agent.sense(request(datetime(2026, 1, 1, tzinfo=UTC)))
    assert observation is not None
    learned = observation.learned["testcluster"]
    selection = plan(
        observation.spec,
        observation.catalog,
        now=observation.now,
        queue=QueueModel(observation.snapshots, observation.catalog, learned=observation.learned),
        estimators=[FixedEstimates(tuple(observation.estimates))],
    )
    queued = [p for p in selection.ranked if p.expected_wait_s is not None]
    assert queued
    for option in queued:
        answer = learned.wait(
            option.option.nodes, option.segment_walltimes_s[0], option.option.partition
        )
        assert option.expected_wait_s == pytest.approx(answer.wait_s * option.expected_segments)
        assert option.wait_basis.startswith(f"learned from {learned.recorded} recorded waits")
    [emitted] = agent.decide(observation)
    assert isinstance(emitted, Emit) and isinstance(emitted.payload, PlanOptionsReady)
    chosen = emitted.payload.recommended
    assert chosen is not None and chosen.expected_wait_s is not None
    # A second plan in the same agent trains nothing new
    again = await agent.sense(request(datetime(2026, 1, 1, 0, 5, tzinfo=UTC)))
    assert again is not None and again.learned["testcluster"].model is learned.model
    assert agent.predictors.built == 1


async def test_without_recorded_waits_the_agents_plan_keeps_the_rule(center: MiniCenter) -> None:
    agent = Optimization(center.kb, {"testcluster": center.cluster})
    observation = await agent.sense(request(datetime(2026, 1, 1, tzinfo=UTC)))
    assert observation is not None and observation.learned == {}
