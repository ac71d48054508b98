"""Profiling: which downsized runs, through the Scheduler, and what they leave behind.

The batch system is the simulated cluster (``ProfilingCluster`` answers a profiling job's
output with the line the cascade script prints; see ``tests/agents/harness.py``); the
real line from a real SLURM job is read in ``tests/e2e/test_cascade.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.estimation import PROFILE_FAMILY
from agents.events import (
    EstimatorRetrainRequested,
    PlanApproved,
    ProfileCompleted,
    ProfileRequested,
)
from agents.profiling import (
    Profiling,
    ProfilingConfig,
    parse_profile_line,
    profile_plan_id,
    profiling_runs,
)
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.catalog import Catalog
from knowledge_base.seed import load_seed_catalog
from tests.agents.harness import MiniCenter, dnn_spec, tick, until
from tests.cluster import TEST_SYSTEM


def test_one_run_per_node_type_on_the_shortest_partition() -> None:
    [run] = profiling_runs(
        dnn_spec(), "p", "why", Catalog(systems=[TEST_SYSTEM]), ["testcluster"], ProfilingConfig()
    )
    assert run.option is not None and run.option.partition == "debug"
    assert run.option.walltime_s == 60 and run.option.memory_mb == 4096
    assert run.spec.workload.epochs == 1 and not run.spec.workload.checkpointable  # type: ignore[union-attr]
    assert run.id == profile_plan_id("examples/cascade/train.py", "testcluster", "n", 64)


def test_runs_are_bounded_and_follow_the_goals() -> None:
    catalog = load_seed_catalog()
    runs = profiling_runs(
        dnn_spec(systems=["pitzer"], gpu_only=True),
        "p",
        "why",
        catalog,
        ["pitzer"],
        ProfilingConfig(),
    )
    assert 1 <= len(runs) <= 2
    assert all(r.option is not None and r.option.gpus_per_node == 1 for r in runs)
    assert profiling_runs(dnn_spec(), "p", "why", catalog, [], ProfilingConfig()) == []


def test_the_profile_line_is_read_and_anything_else_is_not() -> None:
    line = (
        "noise\nRIGHTSIZE_PROFILE iteration_s=0.05 spread_s=0.01 peak_memory_mb=400 startup_s=2\n"
    )
    assert parse_profile_line(line) == {
        "iteration_s": 0.05,
        "spread_s": 0.01,
        "peak_memory_mb": 400.0,
        "startup_s": 2.0,
    }
    assert parse_profile_line("RIGHTSIZE_PROGRESS epoch=1/2") is None


async def start_agents(center: MiniCenter) -> Scheduler:
    executors = {"testcluster": center.cluster}
    scheduler = Scheduler(center.kb, executors, center.bus, SchedulerConfig())
    await center.start(scheduler)
    await center.start(Profiling(center.kb, executors))
    return scheduler


async def test_a_profiling_run_goes_through_the_scheduler_and_leaves_a_profile(
    tmp_path: Path,
) -> None:
    async with MiniCenter(tmp_path, profiling=True) as center:
        scheduler = await start_agents(center)
        await center.publish(ProfileRequested(plan_id="p1", spec=dnn_spec(), reason="unseen"), "p1")

        async def done() -> list[ProfileCompleted]:
            return await center.recorder.of(ProfileCompleted)

        [completed] = await until(done, lambda: tick(center, scheduler), steps=30, what="profile")
        assert completed.ok and completed.family == PROFILE_FAMILY
        [profile] = await center.kb.query_profiles(family=PROFILE_FAMILY)
        assert profile.iteration_s == pytest.approx(0.05) and profile.peak_memory_mb == 400
        assert profile.hardware["node_type"] == "n" and profile.config["batch_size"] == 64
        [approved] = await center.recorder.of(PlanApproved)
        assert approved.purpose == "profiling"
        request = next(iter(center.cluster._jobs.values())).request
        assert request.environment["RIGHTSIZE_PROFILE_STEPS"] == "20"
        [retrain] = await center.recorder.of(EstimatorRetrainRequested)
        assert "a workload no trained estimator had seen" in retrain.reason

        # Asked again: answered from what is stored, no second run.
        await center.publish(ProfileRequested(plan_id="p2", spec=dnn_spec(), reason="again"), "p2")
        await center.settle()
        again = [c for c in await center.recorder.of(ProfileCompleted) if c.plan_id == "p2"]
        assert again and again[0].reason == "already profiled"
        assert len(center.cluster._jobs) == 1


async def test_a_run_that_prints_no_profile_is_reported_as_a_failed_profile(tmp_path: Path) -> None:
    async with MiniCenter(tmp_path) as center:  # a plain simulated cluster: no profile line
        scheduler = await start_agents(center)
        await center.publish(ProfileRequested(plan_id="p1", spec=dnn_spec(), reason="unseen"), "p1")

        async def done() -> list[ProfileCompleted]:
            return await center.recorder.of(ProfileCompleted)

        [completed] = await until(done, lambda: tick(center, scheduler), steps=30, what="profile")
        assert not completed.ok and "printed no RIGHTSIZE_PROFILE line" in completed.reason
        assert await center.kb.query_profiles(family=PROFILE_FAMILY) == []
