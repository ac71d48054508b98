"""Resource Estimation: the chain of estimators, confidence, annotations, promoted estimators.

Real SQLite knowledge base, in-process bus and planner enumeration; profiles and
finished jobs are written into the knowledge base by the tests.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.estimation import (
    PROFILE_FAMILY,
    ProfiledWorkloadEstimator,
    ResourceEstimation,
    needs_profiling,
)
from agents.events import (
    Envelope,
    EstimateReady,
    EstimateRequested,
    EstimatorPromoted,
    JobAnnotated,
    JobSubmitted,
    ProfileRequested,
)
from agents.promotion import RUNTIME_TARGET, fit_loglinear
from knowledge_base.catalog import Catalog
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    JobState,
    ProfileRecord,
)
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, dnn_spec, make_plan
from tests.cluster import TEST_SYSTEM
from tools.planning.analytic import ANALYTIC_ID
from tools.planning.estimation import Candidate, NoEstimate
from tools.planning.whatif import enumerate_candidates

PROFILE = ProfileRecord(
    id="profile-1",
    family=PROFILE_FAMILY,
    model="examples/cascade/train.py",
    config={"batch_size": 64, "startup_s": 3.0},
    hardware={"system": "testcluster", "node_type": "n", "cores": 2, "gpus": 0},
    iteration_s=0.05,
    peak_memory_mb=400,
)


def candidate(batch: int = 64, partition: str = "debug") -> Candidate:
    spec = dnn_spec().model_copy(
        update={"workload": dnn_spec().workload.model_copy(update={"batch_sizes": [batch]})}
    )
    for found in enumerate_candidates(spec, Catalog(systems=[TEST_SYSTEM])):
        if isinstance(found, Candidate) and found.partition.name == partition:
            return found
    raise AssertionError("no candidate")


def test_a_profiled_workload_is_estimated_from_its_measured_step_time() -> None:
    estimator = ProfiledWorkloadEstimator(PROFILE.model, (PROFILE,))
    estimate = estimator.estimate(dnn_spec().workload, candidate())
    assert not isinstance(estimate, NoEstimate)
    steps = 40 * math.ceil(8192 / 64)
    assert estimate.runtime_s.point == pytest.approx(3.0 + steps * 0.05)
    assert estimate.runtime_s.low < estimate.runtime_s.point < estimate.runtime_s.high
    assert estimate.memory_mb.point == pytest.approx(400)
    assert estimate.estimator_id == "profiled-train.py"


def test_a_bigger_batch_takes_longer_per_step_and_a_little_more_memory() -> None:
    estimator = ProfiledWorkloadEstimator(PROFILE.model, (PROFILE,))
    small = estimator.estimate(dnn_spec().workload, candidate(64))
    spec = dnn_spec().workload.model_copy(update={"batch_sizes": [128]})
    big = estimator.estimate(spec, candidate(128))
    assert not isinstance(small, NoEstimate) and not isinstance(big, NoEstimate)
    assert big.memory_mb.point > small.memory_mb.point
    # Half the steps, each twice as long: the same work (start-up aside).
    assert big.runtime_s.point == pytest.approx(small.runtime_s.point, rel=0.01)


def test_hardware_that_was_not_profiled_is_not_estimated() -> None:
    other = PROFILE.model_copy(update={"hardware": {**PROFILE.hardware, "node_type": "gpu"}})
    answer = ProfiledWorkloadEstimator(PROFILE.model, (other,)).estimate(
        dnn_spec().workload, candidate()
    )
    assert isinstance(answer, NoEstimate) and "was not profiled" in answer.reason


def test_confidence_rules() -> None:
    spec = dnn_spec()
    assert (
        needs_profiling(spec, [], 4.0)
        == "no estimator knows workload.model='examples/cascade/train.py'"
    )
    estimate = make_plan("p", spec).estimate
    assert estimate is not None
    assert needs_profiling(spec, [estimate], 4.0) is None
    wide = estimate.model_copy(
        update={"runtime_s": estimate.runtime_s.model_copy(update={"low": 10, "high": 1000})}
    )
    assert "too wide" in (needs_profiling(spec, [wide], 4.0) or "")
    generic = WorkloadSpec(name="g", user="u", workload=GenericJob(application="a"))
    assert needs_profiling(generic, [], 4.0) is None  # generic jobs are not profiled


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        yield c


async def test_an_unseen_model_gets_no_estimate_and_a_profiling_request(center: MiniCenter) -> None:
    await center.start(ResourceEstimation(center.kb))
    await center.publish(EstimateRequested(plan_id="p1", spec=dnn_spec()), "p1")
    await center.settle()
    [ready] = await center.recorder.of(EstimateReady)
    assert ready.estimates == [] and ready.needs_profiling
    [asked] = await center.recorder.of(ProfileRequested)
    assert asked.plan_id == "p1" and "no estimator knows" in asked.reason


async def test_a_profiled_model_is_estimated_on_every_option(center: MiniCenter) -> None:
    await center.kb.add_profiles([PROFILE])
    await center.start(ResourceEstimation(center.kb))
    await center.publish(EstimateRequested(plan_id="p2", spec=dnn_spec()), "p2")
    await center.settle()
    [ready] = await center.recorder.of(EstimateReady)
    assert not ready.needs_profiling
    assert sorted(e.option.partition for e in ready.estimates) == ["batch", "debug"]
    assert await center.recorder.of(ProfileRequested) == []


async def test_a_zoo_model_on_the_seeded_catalog_falls_back_to_the_analytic_estimator(
    center: MiniCenter,
) -> None:
    await center.kb.put_catalog(load_seed_catalog())
    await center.start(ResourceEstimation(center.kb))
    spec = dnn_spec().model_copy(
        update={
            "workload": dnn_spec().workload.model_copy(update={"model": "resnet50"}),
            "goals": dnn_spec(systems=["pitzer"]).goals,
        }
    )
    await center.publish(EstimateRequested(plan_id="p3", spec=spec), "p3")
    # Tracing ResNet-50's step takes seconds of CPU, minutes on a loaded machine: wait for
    # the answer itself, not for a fixed time.
    answer = await center.recorder.first(EstimateReady)
    await center.settle()
    [ready] = await center.recorder.of(EstimateReady)
    assert ready == answer
    assert len(ready.estimates) > 50
    assert {e.option.system for e in ready.estimates} == {"pitzer"}


def _jobs(shift: float, start: datetime, n: int) -> list[JobRecord]:
    rng = random.Random(5)
    jobs = []
    for i in range(n):
        run = 1000 * shift * math.exp(rng.gauss(0, 0.05))
        at = start + timedelta(minutes=10 * i)
        jobs.append(
            JobRecord(
                job_id=f"{shift}-{i}",
                system="testcluster",
                application="lmp",
                state=JobState.COMPLETED,
                submit_time=at,
                start_time=at,
                end_time=at + timedelta(seconds=run),
                run_s=round(run),
                requested_cores=2,
                requested_walltime_s=3600,
            )
        )
    return jobs


async def _register(center: MiniCenter, tmp_path: Path, name: str, shift: float) -> str:
    model = fit_loglinear(_jobs(shift, datetime.now(UTC) - timedelta(days=3), 40))
    path = tmp_path / f"{name}.json"
    path.write_text(model.model_dump_json())
    await center.kb.put_estimator(
        EstimatorRecord(
            id=name,
            kind=model.kind,
            target=RUNTIME_TARGET,
            status=EstimatorStatus.SHADOW,
            validation={"mape": 0.05},
            artifact_path=str(path),
        )
    )
    await center.kb.promote_estimator(name)
    return name


async def test_a_promoted_estimator_is_served_from_the_next_request_without_a_restart(
    center: MiniCenter, tmp_path: Path
) -> None:
    await _register(center, tmp_path, "runtime-a", 1.0)
    await center.start(ResourceEstimation(center.kb))
    spec = WorkloadSpec(
        name="md", user="u", workload=GenericJob(application="lmp", cores=2, walltime_s=3600)
    )
    await center.publish(EstimateRequested(plan_id="g1", spec=spec), "g1")
    await center.settle()
    await _register(center, tmp_path, "runtime-b", 2.0)
    await center.publish(
        EstimatorPromoted(estimator_id="runtime-b", target=RUNTIME_TARGET, replaced="runtime-a"),
        "estimators",
    )
    await center.publish(EstimateRequested(plan_id="g2", spec=spec), "g2")
    await center.settle()
    answers = {r.plan_id: r for r in await center.recorder.of(EstimateReady)}
    first, second = answers["g1"].estimates[0], answers["g2"].estimates[0]
    assert first.estimator_id == "runtime-a" and second.estimator_id == "runtime-b"
    assert second.runtime_s.point == pytest.approx(2 * first.runtime_s.point, rel=0.05)


async def test_submitted_jobs_are_annotated_with_their_prediction(center: MiniCenter) -> None:
    plan = await center.kb.put_plan(make_plan("p4", dnn_spec(), segments=4, runtime_s=200))
    await center.start(ResourceEstimation(center.kb))
    assert plan.option is not None
    await center.publish(
        JobSubmitted(plan_id="p4", system="testcluster", job_id="77", option=plan.option), "p4"
    )
    await center.settle()
    [note] = await center.recorder.of(JobAnnotated)
    assert note.runtime_s.point == pytest.approx(50)  # a quarter of the run per segment
    record = await center.kb.get_job("testcluster", "77")
    assert record.predicted_runtime_s == 50 and record.plan_id == "p4"


async def test_the_history_estimator_predicts_a_request_as_submitted_at_its_time(
    center: MiniCenter,
) -> None:
    # The request's time, not the wall clock: a replay, or a simulation on its own clock,
    # asks the history estimator the same question the run did.
    from tools.planning.generic import HistoryRuntimeEstimator

    await center.kb.add_jobs(_jobs(1.0, datetime(2024, 3, 1, tzinfo=UTC), 1000))  # trains on 1,000
    agent = ResourceEstimation(center.kb)
    asked_at = datetime(2024, 3, 8, 14, 30, tzinfo=UTC)
    spec = WorkloadSpec(
        name="md", user="bob", workload=GenericJob(application="lmp", cores=2, walltime_s=3600)
    )
    event = Envelope.of(
        EstimateRequested(plan_id="p9", spec=spec),
        source="test",
        correlation_id="p9",
        time=asked_at,
    )
    observation = await agent.sense(event)
    assert observation is not None
    [history] = [e for e in observation.chain if isinstance(e, HistoryRuntimeEstimator)]
    assert history.now_s == asked_at.timestamp()


async def test_each_interval_says_what_its_coverage_rests_on(
    center: MiniCenter, tmp_path: Path
) -> None:
    """Fixed multipliers are 'assumed', training residuals 'in_sample': neither may pass for a
    measured 80%. (Before, every interval just said coverage=0.8.)"""
    profiled = ProfiledWorkloadEstimator(PROFILE.model, (PROFILE,))
    estimate = profiled.estimate(dnn_spec().workload, candidate())
    assert not isinstance(estimate, NoEstimate)
    assert estimate.runtime_s.coverage_basis == "assumed"
    assert estimate.memory_mb.coverage_basis == "assumed"

    await _register(center, tmp_path, "runtime-a", 1.0)  # a log-linear model
    await center.start(ResourceEstimation(center.kb))
    generic = WorkloadSpec(
        name="md", user="u", workload=GenericJob(application="lmp", cores=2, walltime_s=3600)
    )
    zoo = dnn_spec().model_copy(
        update={"workload": dnn_spec().workload.model_copy(update={"model": "resnet50"})}
    )
    await center.publish(EstimateRequested(plan_id="g", spec=generic), "g")
    await center.publish(EstimateRequested(plan_id="z", spec=zoo), "z")
    await center.settle()
    answers = {r.plan_id: r for r in await center.recorder.of(EstimateReady)}
    promoted = [e for e in answers["g"].estimates if e.estimator_id == "runtime-a"]
    assert promoted and {e.runtime_s.coverage_basis for e in promoted} == {"in_sample"}
    assert {e.memory_mb.coverage_basis for e in promoted} == {"assumed"}
    analytic = [e for e in answers["z"].estimates if e.estimator_id == ANALYTIC_ID]
    assert analytic and {e.runtime_s.coverage_basis for e in analytic} == {"assumed"}


def test_the_history_estimators_interval_is_calibrated_held_out() -> None:
    from tools.estimators.history.estimator import HistoryPrediction

    prediction = HistoryPrediction(
        runtime_estimate_s=100.0,
        runtime_p50_s=100.0,
        runtime_safe_s=300.0,
        safe_coverage=0.96,
        source="model",
        model_version=1,
        trained_on_jobs=1000,
    )
    interval = prediction.runtime_interval()
    assert (interval.coverage, interval.coverage_basis) == (0.96, "held_out")


def test_an_interval_stored_before_the_basis_existed_reads_as_assumed() -> None:
    from knowledge_base.records import Interval

    old = Interval.model_validate_json('{"point": 10, "low": 5, "high": 20, "coverage": 0.8}')
    assert old.coverage_basis == "assumed"


async def test_the_agent_plans_with_the_processs_one_estimator_chain(tmp_path: Path) -> None:
    from knowledge_base.sqlite import SQLiteKnowledgeBase
    from tools.planning.service import shared_chain

    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    try:
        agent = ResourceEstimation(kb)
        assert agent.estimators is shared_chain(kb)  # the CLI and MCP's chain: trained once
        assert agent.estimators.promoted_loader is not None  # promoted models serve here too
    finally:
        await kb.close()


async def test_a_promoted_estimator_that_cannot_load_is_named_in_the_answer_and_logged(
    center: MiniCenter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the estimates silently came from the fallbacks: nothing in the answer said
    the promoted model was missing."""
    await center.kb.put_estimator(
        EstimatorRecord(
            id="runtime-gone",
            kind="loglinear-runtime",
            target=RUNTIME_TARGET,
            status=EstimatorStatus.SHADOW,
            validation={"mape": 0.05},
            artifact_path=str(tmp_path / "deleted.json"),
        )
    )
    await center.kb.promote_estimator("runtime-gone")
    await center.start(ResourceEstimation(center.kb))
    spec = WorkloadSpec(
        name="md", user="u", workload=GenericJob(application="lmp", cores=2, walltime_s=3600)
    )
    with caplog.at_level("WARNING"):
        await center.publish(EstimateRequested(plan_id="g", spec=spec), "g")
        await center.settle()
    [ready] = await center.recorder.of(EstimateReady)
    assert ready.estimates and all(e.estimator_id != "runtime-gone" for e in ready.estimates)
    [why] = ready.unavailable
    assert "runtime-gone cannot be loaded" in why and "deleted.json" in why
    assert any(
        r.levelname == "WARNING" and "runtime-gone" in r.getMessage() for r in caplog.records
    )
