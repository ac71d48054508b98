"""Model Promotion learns DNN time on GPUs from the center's own measurements.

No GPU here: the measurements are simulated, as a center would record them, from the
shipped per-operator model's own prediction times a factor (the center's V100s run
1.6x slower than the model thinks, its A100s as predicted) with 5% noise; they reach
Model Promotion as stored profiles and as ``job.finished`` events of planned GPU jobs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from agents.events import (
    EstimatorDecision,
    EstimatorPromoted,
    EstimatorRetrainRequested,
    JobFinished,
)
from agents.profiling import PROFILE_TARGET
from agents.promotion import ModelPromotion
from agents.promotion_gpu import DNN_RUNTIME_TARGET
from knowledge_base.records import (
    EstimatorStatus,
    JobRecord,
    JobState,
    Plan,
    PlanOption,
    PlanStatus,
    ProfileStatus,
)
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
from tests.agents.harness import MiniCenter
from tests.tools.conftest import opcost_of
from tests.tools.estimators.gpu.measured import (
    A100,
    START,
    V100,
    small_cnn,
    store_measurements,
)
from tools.estimators.gpu.correction import (
    GPU_CORRECTION_TARGET,
    GPU_STEP_FAMILY,
    load_correction,
)
from tools.planning.chain import EstimatorChain
from tools.planning.service import plan_workload


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        await c.kb.put_catalog(load_seed_catalog())
        yield c


async def _retrain(center: MiniCenter) -> EstimatorDecision:
    before = len(await center.recorder.of(EstimatorDecision))
    await center.publish(
        EstimatorRetrainRequested(target=PROFILE_TARGET, reason="new profile"), "estimators"
    )
    await center.settle(timeout_s=120)
    decisions = await center.recorder.of(EstimatorDecision)
    assert len(decisions) == before + 1
    decision = decisions[-1]
    assert isinstance(decision, EstimatorDecision)
    return decision


def test_the_profiling_target_is_the_one_promotion_answers() -> None:
    assert PROFILE_TARGET == DNN_RUNTIME_TARGET


async def test_without_gpu_measurements_the_request_is_skipped_saying_so(
    center: MiniCenter, tmp_path: Path
) -> None:
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    decision = await _retrain(center)
    assert decision.decision == "skipped" and "no GPU step measurements" in decision.reason


async def test_a_correction_that_lowers_the_held_out_error_is_promoted(
    center: MiniCenter, tmp_path: Path
) -> None:
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    await store_measurements(center.kb, [(V100, 1.6), (A100, 1.0)] * 6)
    decision = await _retrain(center)
    assert decision.decision == "promoted", decision.reason
    assert decision.candidate_error is not None and decision.incumbent_error is not None
    assert decision.candidate_error < 0.1 < decision.incumbent_error
    assert "as shipped" in decision.reason
    [promoted] = await center.recorder.of(EstimatorPromoted)
    assert promoted.target == GPU_CORRECTION_TARGET
    record = await center.kb.promoted_estimator(GPU_CORRECTION_TARGET)
    assert record is not None and record.id == decision.candidate_id
    assert record.validation["mape"] < record.validation["uncorrected_mape"]
    correction = load_correction(Path(record.artifact_path or ""))
    assert 1.4 < correction.factor(V100) < 1.7 and 0.9 < correction.factor(A100) < 1.15
    # The planner's chain serves the corrected per-operator model from the next request.
    chain = EstimatorChain(center.kb)
    spec = WorkloadSpec(
        name="cnn", user="alice", workload=small_cnn(64), goals=Goals(systems=["pitzer"])
    )
    catalog = await center.kb.get_catalog()
    estimators = await chain.estimators(spec, catalog)
    choice = chain.gpu_time_choice()
    assert choice.use and record.id in choice.reason
    opcost = opcost_of(estimators)
    assert opcost.correction is not None and opcost.correction.correction == correction
    selection = plan_workload(spec, catalog, estimators)
    on_v100 = [
        o for o in selection.ranked
        if o.option.gpus_per_node and o.estimate.estimator_id.startswith("gpu-opcost")
    ]  # fmt: skip
    assert on_v100 and all("center's own runs" in o.estimate.label for o in on_v100)


async def test_a_correction_that_errs_more_on_held_out_runs_is_kept_out_saying_why(
    center: MiniCenter, tmp_path: Path
) -> None:
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    # old runs 2x slow (a driver since fixed), the newest as the model predicts
    await store_measurements(center.kb, [(V100, 2.0)] * 7 + [(V100, 1.0)] * 3)
    decision = await _retrain(center)
    assert decision.decision == "rejected", decision.reason
    assert "kept the per-operator model as shipped" in decision.reason
    assert decision.candidate_error is not None and decision.incumbent_error is not None
    assert decision.candidate_error > decision.incumbent_error
    assert await center.kb.promoted_estimator(GPU_CORRECTION_TARGET) is None
    record = await center.kb.get_estimator(decision.candidate_id or "")
    assert record.status is EstimatorStatus.RETIRED


async def test_a_finished_gpu_job_of_a_plan_becomes_a_measurement(
    center: MiniCenter, tmp_path: Path
) -> None:
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    catalog = await center.kb.get_catalog()
    node = next(n for n in catalog.system("pitzer").node_types if n.gpu and n.gpu.model == V100)
    workload = small_cnn(64)
    plan = Plan(
        id="plan-gpu-1",
        user="alice",
        spec=WorkloadSpec(name="cnn", user="alice", workload=workload),
        status=PlanStatus.RUNNING,
        option=PlanOption(
            system="pitzer", partition="gpuserial", node_type=node.name, nodes=1,
            cores_per_node=24, gpus_per_node=1, memory_mb=8000, walltime_s=3600, batch_size=64,
        ),
    )  # fmt: skip
    await center.kb.put_plan(plan)
    steps = 4 * -(-50_000 // 64)
    job = JobRecord(
        job_id="77", system="pitzer", partition="gpuserial", state=JobState.COMPLETED,
        submit_time=START, start_time=START, end_time=START + timedelta(seconds=30 + steps * 0.02),
        run_s=30 + steps * 0.02, requested_gpus=1, plan_id=plan.id,
    )  # fmt: skip
    await center.publish(JobFinished(job=job), "pitzer/77")
    await center.settle(timeout_s=60)
    [measured] = await center.kb.query_profiles(family=GPU_STEP_FAMILY, status=ProfileStatus.OK)
    assert measured.hardware["gpu_model"] == V100
    assert measured.iteration_s == pytest.approx(0.02, rel=0.01)  # run_s is whole seconds
    assert measured.config["batch_size"] == 64 and measured.config["source"] == "finished job"


def test_a_profiling_run_on_a_gpu_is_stored_as_a_gpu_step_measurement() -> None:
    """Profiling's decide is pure: a completed GPU run's profile line becomes two records,
    the workload's profile and the GPU step measurement Model Promotion learns from."""
    from agents.events import Envelope, PlanFinished
    from agents.profiling import Profiling, ProfilingObservation, StoreProfile

    plan = Plan(
        id="profile-abc",
        user="alice",
        spec=WorkloadSpec(name="cnn", user="alice", workload=small_cnn(64)),
        status=PlanStatus.COMPLETED,
        option=PlanOption(
            system="pitzer", partition="gpudebug", node_type="skylake-40core-dual-gpu",
            nodes=1, cores_per_node=20, gpus_per_node=1, memory_mb=4096, walltime_s=300,
            batch_size=64,
        ),
    )  # fmt: skip
    finished = PlanFinished(plan_id=plan.id, status=PlanStatus.COMPLETED, purpose="profiling")
    event = Envelope(
        type="plan.finished", source="scheduler", correlation_id=plan.id, payload=finished
    )
    observation = ProfilingObservation(
        event=event,
        kind="finished",
        plan=plan,
        finished=finished,
        output="RIGHTSIZE_PROFILE iteration_s=0.031 peak_memory_mb=900 batch_size=64",
        gpu_model=V100,
    )
    agent = Profiling.__new__(Profiling)  # decide needs no knowledge base or executors
    stored = [a.profile for a in agent.decide(observation) if isinstance(a, StoreProfile)]
    [measured] = [p for p in stored if p.family == GPU_STEP_FAMILY]
    assert measured.iteration_s == 0.031 and measured.hardware["gpu_model"] == V100
    assert measured.config["source"] == "profiling" and measured.config["batch_size"] == 64
    assert DNNTraining.model_validate_json(str(measured.config["workload"])) == small_cnn(64)
    # a CPU run stores no GPU measurement
    cpu = observation.model_copy(update={"gpu_model": None})
    assert all(a.profile.family != GPU_STEP_FAMILY for a in agent.decide(cpu)
               if isinstance(a, StoreProfile))  # fmt: skip


async def test_the_promotion_event_makes_resource_estimation_serve_the_new_correction(
    center: MiniCenter, tmp_path: Path
) -> None:
    """The chain reads the registry's GPU correction once, not per request; the
    ``estimator.promoted`` event the agent hears makes the next request read it again."""
    from agents.estimation import ResourceEstimation
    from agents.events import Envelope
    from tests.tools.conftest import promote_gpu_correction as promote

    agent = ResourceEstimation(center.kb, estimators=EstimatorChain(center.kb))
    spec = WorkloadSpec(
        name="cnn", user="alice", workload=small_cnn(64), goals=Goals(systems=["pitzer"])
    )
    catalog = await center.kb.get_catalog()

    async def serving() -> str | None:
        estimators = await agent.chain(spec, catalog, START)
        opcost = opcost_of(estimators)
        return opcost.correction.record_id if opcost.correction else None

    await promote(center.kb, tmp_path, "corr-1", {V100: 1.6})
    assert await serving() == "corr-1"
    await promote(center.kb, tmp_path, "corr-2", {V100: 1.2})
    assert await serving() == "corr-1"  # no registry read per request
    event = Envelope(
        type="estimator.promoted",
        source="model-promotion",
        correlation_id="corr-2",
        payload=EstimatorPromoted(
            estimator_id="corr-2", target=GPU_CORRECTION_TARGET, replaced="corr-1"
        ),
    )
    assert await agent.sense(event) is None
    assert await serving() == "corr-2"
