"""After an out-of-memory kill the Scheduler raises memory from the history estimator's
distribution, conditioned on the job having needed more (issue 43), not by x1.5.

The Scheduler asks its history source (by default the process's shared history
estimator of the system) about the job; here the source is a model whose distribution
the test sets, so the quantile it must pick is known. The simulated cluster (tests/agents/
harness.py) kills a job whose peak passes its memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.events import PlanApproved, ScheduleDecision
from agents.scheduler import Scheduler, SchedulerConfig
from agents.scheduling.memory import MemoryModel, distribution_mb
from knowledge_base.records import Plan, PlanStatus
from tests.agents.harness import MiniCenter, dnn_spec, generic_spec, make_plan, until
from tools.actuators.model import JobRequest, SimulatedWork
from tools.estimators.history.estimator import HistoryPrediction
from tools.estimators.history.features import HistoryJob

# P(peak per processor <= KB): of the jobs needing more than 1 GB a processor (F = 0.9),
# 98 % fit in 4 GB a processor: (0.998 - 0.9) / 0.1 = 0.98, the Re-scheduler's target.
GB_KB = 1024 * 1024
PER_PROC = ((0.5, 0.5 * GB_KB), (0.9, 1.0 * GB_KB), (0.95, 1.5 * GB_KB), (0.998, 4.0 * GB_KB))


class Model:
    """A history estimator whose memory distribution is ``PER_PROC``; keeps what it was asked."""

    def __init__(self, distribution: tuple[tuple[float, float], ...] | None = PER_PROC) -> None:
        self.distribution = distribution
        self.asked: list[HistoryJob] = []

    def predict(self, job: HistoryJob) -> HistoryPrediction:
        self.asked.append(job)
        return HistoryPrediction(
            runtime_estimate_s=100,
            runtime_p50_s=100,
            runtime_safe_s=200,
            safe_coverage=0.9,
            memory_p50_kb_per_proc=0.5 * GB_KB,
            memory_safe_kb_per_proc=4.0 * GB_KB,
            memory_source="model",
            memory_distribution_kb_per_proc=self.distribution,
            source="model",
            model_version=1,
            trained_on_jobs=1000,
        )


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        yield c


def two_cores(plan: Plan) -> Plan:
    assert plan.option is not None
    return plan.model_copy(update={"option": plan.option.model_copy(update={"cores_per_node": 2})})


async def run(center: MiniCenter, model: MemoryModel | None, plan: Plan, peak_mb: int) -> Plan:
    def behaviour(request: JobRequest) -> SimulatedWork:
        return SimulatedWork(run_s=100, peak_memory_mb=peak_mb)

    center.cluster.model = behaviour

    async def source(system: str) -> MemoryModel | None:
        assert system == "testcluster"
        return model

    scheduler = Scheduler(
        center.kb,
        {"testcluster": center.cluster},
        center.bus,
        SchedulerConfig(checkpoint_overhead_s=10),
        history=source,
    )
    await center.start(scheduler)
    await center.publish(PlanApproved(plan=plan), plan.id)
    await center.settle()

    async def over() -> Plan | None:
        stored = await center.kb.get_plan(plan.id)
        return stored if stored.status.ended else None

    async def step() -> None:
        center.clock.advance(10)
        await scheduler.monitors["testcluster"].poll_once()
        await center.settle()

    result: Plan = await until(over, step, steps=200, what=f"plan {plan.id} over")
    return result


def test_the_distribution_per_processor_in_kb_becomes_per_node_in_mb() -> None:
    prediction = Model().predict(HistoryJob(job_id="x", submit_time_s=0))
    assert distribution_mb(prediction, 2) == ((0.5, 1024), (0.9, 2048), (0.95, 3072), (0.998, 8192))
    assert distribution_mb(Model(None).predict(HistoryJob(job_id="x", submit_time_s=0)), 2) is None


async def test_an_oom_job_is_resubmitted_at_the_conditional_quantile_not_x1_5(
    center: MiniCenter,
) -> None:
    model = Model()
    plan = two_cores(
        make_plan("plan-oom", generic_spec(), partition="batch", memory_mb=2048, walltime_s=300)
    )

    final = await run(center, model, plan, peak_mb=5000)

    assert final.status is PlanStatus.COMPLETED
    jobs = [s for s in final.segments if s.job_id]
    assert [s.state for s in jobs] == ["out_of_memory", "completed"]
    # 4 GB a processor x 2 cores: 8 GB, where x1.5 gave 3 GB (and a second kill at 5 GB)
    assert final.option is not None and final.option.memory_mb == 8192
    decisions = await center.recorder.of(ScheduleDecision)
    assert [d.action for d in decisions] == ["submit", "more_memory", "complete"]
    assert "predicted distribution given it needed more than 2.0 GB" in decisions[1].reason
    [asked] = model.asked  # asked once, at the kill, about the job the planner saw
    assert (asked.user, asked.application, asked.partition, asked.procs) == (
        "bob",
        "lmp",
        "batch",
        2,
    )


async def test_without_a_trained_model_the_raise_is_the_factor(center: MiniCenter) -> None:
    plan = make_plan(
        "plan-untrained", generic_spec(), partition="batch", memory_mb=2048, walltime_s=300
    )

    final = await run(center, None, plan, peak_mb=2900)

    assert final.option is not None and final.option.memory_mb == 3072  # x1.5
    decisions = await center.recorder.of(ScheduleDecision)
    assert "(x1.5)" in decisions[1].reason


async def test_dnn_training_keeps_its_own_estimate(center: MiniCenter) -> None:
    model = Model()
    plan = make_plan(
        "plan-dnn", dnn_spec(epochs=1), partition="batch", memory_mb=2048, walltime_s=300
    )

    await run(center, model, plan, peak_mb=2900)

    assert model.asked == []
