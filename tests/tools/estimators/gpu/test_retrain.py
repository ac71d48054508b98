"""The per-GPU correction is fitted, scored and recorded here
(tools.estimators.gpu.retrain); Model Promotion only decides whether it serves
(tests/agents/test_promotion_gpu.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from knowledge_base.records import (
    EstimatorStatus,
    JobRecord,
    JobState,
    Plan,
    PlanOption,
    PlanStatus,
)
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import WorkloadSpec
from tests.tools.estimators.gpu.measured import (
    A100,
    START,
    V100,
    small_cnn,
    store_measurements,
)
from tools.estimators.gpu.correction import (
    GPU_STEP_FAMILY,
    load_correction,
)
from tools.estimators.gpu.retrain import (
    CorrectionTrial,
    NoTrial,
    record_correction,
    record_finished_gpu_job,
    trial_correction,
)
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.estimators.gpu.workload_trace import clear_caches


async def test_no_trial_without_two_usable_measurements(sqlite_kb: SQLiteKnowledgeBase) -> None:
    await sqlite_kb.put_catalog(load_seed_catalog())
    none = await trial_correction(sqlite_kb, holdout_fraction=0.3)
    assert isinstance(none, NoTrial) and "no GPU step measurements" in none.reason
    await store_measurements(sqlite_kb, [(V100, 1.6)])
    one = await trial_correction(sqlite_kb, holdout_fraction=0.3)
    assert isinstance(one, NoTrial) and one.rows == 1 and "fewer than 2" in one.reason


async def test_a_trial_scores_the_correction_on_the_newest_measurements_and_records_it(
    sqlite_kb: SQLiteKnowledgeBase, tmp_path: Path
) -> None:
    await sqlite_kb.put_catalog(load_seed_catalog())
    await store_measurements(sqlite_kb, [(V100, 1.6), (A100, 1.0)] * 6)
    traces = TraceFolders(tmp_path / "traces")
    clear_caches()  # the measurements' predictions traced the model already
    trial = await trial_correction(sqlite_kb, holdout_fraction=0.3, traces=traces)
    assert isinstance(trial, CorrectionTrial)
    assert (trial.rows, trial.train, trial.holdout) == (12, 8, 4)
    assert trial.incumbent is None and "as shipped" in trial.serving
    assert trial.candidate_error < 0.1 < trial.shipped_error == trial.incumbent_error
    assert list((tmp_path / "traces").glob("kernels-*.json"))  # kept where the caller said
    record = await record_correction(
        sqlite_kb,
        tmp_path / "estimators",
        trial,
        "gpu-correction-x",
        shadow=False,
        notes="kept",
        created_at=START,
    )
    assert record.status is EstimatorStatus.RETIRED and record.training_rows == 8
    assert record.validation["uncorrected_mape"] == trial.shipped_error
    stored = await sqlite_kb.get_estimator("gpu-correction-x")
    assert stored.validation == record.validation
    assert load_correction(Path(record.artifact_path or "")) == trial.candidate


async def test_a_finished_gpu_job_of_a_plan_becomes_a_measurement(
    sqlite_kb: SQLiteKnowledgeBase,
) -> None:
    catalog = load_seed_catalog()
    await sqlite_kb.put_catalog(catalog)
    node = next(n for n in catalog.system("pitzer").node_types if n.gpu and n.gpu.model == V100)
    plan = Plan(
        id="plan-gpu-1",
        user="alice",
        spec=WorkloadSpec(name="cnn", user="alice", workload=small_cnn(64)),
        status=PlanStatus.RUNNING,
        option=PlanOption(
            system="pitzer", partition="gpuserial", node_type=node.name, nodes=1,
            cores_per_node=24, gpus_per_node=1, memory_mb=8000, walltime_s=3600, batch_size=64,
        ),
    )  # fmt: skip
    await sqlite_kb.put_plan(plan)
    steps = 4 * -(-50_000 // 64)
    job = JobRecord(
        job_id="77", system="pitzer", partition="gpuserial", state=JobState.COMPLETED,
        submit_time=START, start_time=START, end_time=START + timedelta(seconds=30 + steps * 0.02),
        run_s=30 + steps * 0.02, requested_gpus=1, plan_id=plan.id,
    )  # fmt: skip
    measured = await record_finished_gpu_job(sqlite_kb, job)
    assert measured is not None and measured.hardware["gpu_model"] == V100
    assert measured.iteration_s == pytest.approx(0.02, rel=0.01)  # less the start-up point
    assert [p.id for p in await sqlite_kb.query_profiles(family=GPU_STEP_FAMILY)] == [measured.id]
    # not a GPU plan's job: nothing measured
    failed = job.model_copy(update={"state": JobState.FAILED})
    assert await record_finished_gpu_job(sqlite_kb, failed) is None
    unplanned = job.model_copy(update={"plan_id": None})
    assert await record_finished_gpu_job(sqlite_kb, unplanned) is None
