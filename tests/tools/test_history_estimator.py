"""The history estimator, its features and baselines: online, no future, quantiles."""

from __future__ import annotations

import dataclasses
import math
import random
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from knowledge_base.records import JobRecord, JobState
from tools.estimators.history.baselines import LastTwo
from tools.estimators.history.estimator import (
    SAFE_WEIGHTS,
    HistoryConfig,
    HistoryEstimator,
    distribution_quantile,
    fit_snapshot,
    predict_rows,
    runtime_distribution,
)
from tools.estimators.history.features import FEATURE_NAMES, FeatureState, HistoryJob
from tools.estimators.history.metrics import score
from tools.estimators.history.replay import ReplayResult, history_job_from_swf, replay
from tools.traces import read_swf

KTH = "KTH-SP2-1996-2.1-cln.swf.gz"
# Small, quick models for behaviour tests; the defaults are exercised on the KTH slice.
QUICK = HistoryConfig(
    first_train_jobs=200,
    retrain_min_jobs=200,
    retrain_fraction=0.0,
    estimate_trees=8,
    quantile_trees=8,
    max_depth=3,
    threads=1,
)
NEVER_TRAINS = HistoryConfig(first_train_jobs=10**9)
# QUICK, with the safe weight re-chosen every 50 finished jobs between retrains.
RECALIBRATING = QUICK.model_copy(update={"recalibrate_jobs": 50})


def _kth_jobs(shared_data: Path, limit: int | None = None) -> list[HistoryJob]:
    header, jobs, _ = read_swf(shared_data / "traces" / KTH)
    return [history_job_from_swf(job, header) for job in jobs[:limit]]


@pytest.fixture(scope="module")
def kth_slice(shared_data: Path) -> ReplayResult:
    """The first 3,000 KTH jobs through the default estimator."""
    return replay(_kth_jobs(shared_data, 3000))


@pytest.fixture(scope="module")
def kth_2000(shared_data: Path) -> dict[str, ReplayResult]:
    """The first 2,000 KTH jobs through QUICK and RECALIBRATING, by their test ids: two
    tests read the same replays (each one costs seconds)."""
    jobs = _kth_jobs(shared_data, 2000)
    return {"retrains": replay(jobs, QUICK), "recalibrates": replay(jobs, RECALIBRATING)}


def _scored(result: ReplayResult) -> np.ndarray:
    run = np.array([job.run_s or 0.0 for job in result.jobs])
    return (run > 0) & (result.user_request_s > 0)


def _job(index: int, user: str, run_s: float, requested_s: float = 20_000.0) -> HistoryJob:
    submit = 600.0 * index
    return HistoryJob(
        job_id=str(index),
        submit_time_s=submit,
        user=user,
        procs=8,
        requested_time_s=requested_s,
        run_s=run_s,
        end_time_s=submit + run_s,
        state=JobState.COMPLETED,
    )


def test_score_is_tsafrirs_accuracy_with_median_ape_in_percent_and_under_rate() -> None:
    figures = score([50.0, 200.0, 100.0], [100.0, 100.0, 100.0])
    assert figures.accuracy == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert figures.median_ape == pytest.approx(50.0)
    assert figures.under_rate == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="positive"):
        score([0.0], [1.0])


def test_last_two_falls_back_to_the_request_then_averages_finished_runs_capped() -> None:
    easy = LastTwo()
    job = _job(10, "u", run_s=0.0, requested_s=500.0)
    assert easy.predict(job) == 500.0
    easy.observe(_job(1, "u", 100.0))
    assert easy.predict(job) == 500.0  # one finished job is not enough
    easy.observe(_job(2, "u", 300.0))
    assert easy.predict(job) == 200.0
    easy.observe(_job(3, "u", 1300.0))
    assert easy.predict(job) == 500.0  # mean 800, capped at the request
    assert easy.predict(dataclasses.replace(job, user="other")) == 500.0


def test_baselines_reproduce_the_published_kth_figures(shared_data: Path) -> None:
    """User request 0.47 / 0.02; last-2 0.59 / 0.48 when taken in submit order (which uses
    run times not yet known at submit time); the online last-2 is lower."""
    result = replay(_kth_jobs(shared_data), NEVER_TRAINS)
    scored = _scored(result)
    run = np.array([job.run_s or 0.0 for job in result.jobs])[scored]
    request = score(result.user_request_s[scored], run)
    submit_order = score(np.maximum(result.last2_submit_order_s[scored], 1.0), run)
    online = score(np.maximum(result.last2_s[scored], 1.0), run)
    assert (round(request.accuracy, 2), round(request.under_rate, 2)) == (0.47, 0.02)
    assert (round(submit_order.accuracy, 2), round(submit_order.under_rate, 2)) == (0.59, 0.48)
    assert online.accuracy < submit_order.accuracy


def test_a_feature_row_never_reads_the_jobs_own_outcome() -> None:
    state = FeatureState()
    for index in range(5):
        job = _job(index, "u", 100.0 * (index + 1))
        state.submitted(job)
        state.finished(job)
    asked = _job(9, "u", 0.0)
    blind = HistoryJob(
        job_id="9",
        submit_time_s=asked.submit_time_s,
        user="u",
        procs=8,
        requested_time_s=asked.requested_time_s,
    )
    assert len(state.row(asked)) == len(FEATURE_NAMES)
    assert np.array_equal(
        np.array(state.row(asked)),
        np.array(state.row(dataclasses.replace(blind, run_s=1e6, end_time_s=1e9))),
        equal_nan=True,
    )


@pytest.mark.parametrize("config", [QUICK, RECALIBRATING], ids=["retrains", "recalibrates"])
def test_replayed_predictions_do_not_change_when_the_future_changes(
    shared_data: Path, config: HistoryConfig, kth_2000: dict[str, ReplayResult]
) -> None:
    jobs = _kth_jobs(shared_data, 2000)
    ordered = sorted(jobs, key=lambda job: job.submit_time_s)
    cut_s = ordered[1400].submit_time_s
    # Every job submitted from the cut on runs ten times longer and ends later.
    changed = [
        dataclasses.replace(job, run_s=job.run_s * 10, end_time_s=job.end_time_s + job.run_s * 9)
        if job.submit_time_s >= cut_s and job.run_s is not None and job.end_time_s is not None
        else job
        for job in jobs
    ]
    before = kth_2000["retrains" if config is QUICK else "recalibrates"]  # replay(jobs, config)
    after = replay(changed, config)
    assert before.retrains >= 3
    earlier = np.array([job.submit_time_s < cut_s for job in before.jobs])
    for name in ("runtime_estimate_s", "runtime_p50_s", "runtime_safe_s"):
        assert np.array_equal(
            getattr(before.model, name)[earlier], getattr(after.model, name)[earlier]
        ), name
    assert np.array_equal(before.last2_s[earlier], after.last2_s[earlier], equal_nan=True)
    assert not np.array_equal(before.model.runtime_p50_s, after.model.runtime_p50_s)


def test_the_replay_counts_retrains_and_recalibrations_apart(
    kth_2000: dict[str, ReplayResult],
) -> None:
    only_retrains, both = kth_2000["retrains"], kth_2000["recalibrates"]
    # Trained after 200 finished jobs, then every 200: the same trees in both runs.
    assert only_retrains.retrains == both.retrains >= 3
    assert only_retrains.recalibrations == 0
    # Re-chosen every 50 jobs between retrains 200 apart: about three per retrain.
    assert both.recalibrations >= 2 * both.retrains


def test_a_snapshot_fitted_from_the_finished_table_is_the_estimators_own(
    shared_data: Path,
) -> None:
    estimator = HistoryEstimator(QUICK)
    estimator.learn_history(_kth_jobs(shared_data, 900))
    model = estimator.retrain()
    rows, labels = estimator.finished_table()
    window = slice(max(0, len(rows) - QUICK.window_jobs), len(rows))
    refitted = fit_snapshot(
        rows[window],
        labels[window],
        QUICK,
        grace_s=model.grace_s,
        safe_grace_s=model.safe_grace_s,
        version=model.version,
        safe_weight=model.safe_weight,
    )
    ours, theirs = predict_rows(model, rows), predict_rows(refitted, rows)
    assert np.array_equal(ours.runtime_p50_s, theirs.runtime_p50_s)
    assert np.array_equal(ours.runtime_safe_s, theirs.runtime_safe_s)
    rows[:] = 0.0  # a copy: the estimator's own table is untouched
    assert estimator.finished_table()[0].any()


def test_the_estimator_learns_only_from_jobs_that_have_ended() -> None:
    estimator = HistoryEstimator(QUICK)
    jobs = [_job(i, f"u{i % 3}", 100.0 + i) for i in range(300)]
    for job in jobs:
        estimator.submit(job)
    assert estimator.model is None  # submitted, none ended: nothing to learn from
    for job in jobs[:199]:
        estimator.observe(job)
    assert estimator.model is None
    estimator.observe(jobs[199])
    assert estimator.model is not None and estimator.model.version == 1
    assert estimator.model.trained_on_jobs == 200
    for job in jobs[200:]:
        estimator.observe(job)
    assert estimator.model.version == 1  # next retrain after another 200


def test_predict_is_a_what_if_that_changes_nothing() -> None:
    estimator = HistoryEstimator(QUICK)
    estimator.learn_history(_job(i, "u", 100.0) for i in range(250))
    job = _job(1000, "u", 0.0)
    row = estimator.state.row(job)
    first = estimator.predict(job)
    assert estimator.predict(job) == first
    assert np.array_equal(np.array(estimator.state.row(job)), np.array(row), equal_nan=True)


def test_a_user_with_short_jobs_and_one_with_long_jobs_get_their_own_estimates() -> None:
    rng = random.Random(5)
    history = [
        _job(i, user, run * rng.uniform(0.9, 1.1))
        for i, (user, run) in enumerate(
            ("short", 100.0) if i % 2 else ("long", 10_000.0) for i in range(600)
        )
    ]
    estimator = HistoryEstimator(QUICK)
    assert estimator.learn_history(history) == 600
    short = estimator.predict(_job(700, "short", 0.0))
    long = estimator.predict(_job(701, "long", 0.0))
    assert short.source == long.source == "model"
    assert 50 < short.runtime_estimate_s < 200 < 5000 < long.runtime_estimate_s < 20_000
    for prediction in (short, long):
        assert prediction.runtime_p50_s <= prediction.runtime_safe_s <= 20_000.0
        interval = prediction.runtime_interval()
        assert interval.high == prediction.runtime_safe_s
        assert interval.coverage == pytest.approx(0.96)


def test_the_scheduling_estimate_is_a_low_quantile_of_the_jobs_distribution() -> None:
    """A user whose jobs fail fast half the time and run to 5,000 s otherwise: the best-
    accuracy point may sit on either mode; the scheduling estimate (quantile 0.1) stays
    far below the long mode (a candidate from the short runs' side), a high quantile
    reaches it."""
    rng = random.Random(7)
    history = [
        _job(i, "bimodal", (60.0 if rng.random() < 0.5 else 5000.0) * rng.uniform(0.95, 1.05))
        for i in range(600)
    ]
    low = HistoryEstimator(QUICK.model_copy(update={"schedule_quantile": 0.1}))
    low.learn_history(history)
    high = HistoryEstimator(QUICK.model_copy(update={"schedule_quantile": 0.9}))
    high.learn_history(history)
    job = _job(700, "bimodal", 0.0)
    short, long = low.predict(job), high.predict(job)
    assert short.runtime_schedule_s is not None and long.runtime_schedule_s is not None
    assert short.runtime_schedule_s < 2000 < 4000 < long.runtime_schedule_s <= 20_000


def test_distribution_quantile_takes_the_first_value_that_covers_enough() -> None:
    values = np.array([[10.0, 100.0, 1000.0], [5.0, 50.0, 500.0]])
    coverage = np.array([[0.2, 0.6, 1.0], [0.05, 0.08, 0.9]])
    assert distribution_quantile(values, coverage, 0.1).tolist() == [10.0, 500.0]
    assert distribution_quantile(values, coverage, 0.5).tolist() == [100.0, 500.0]
    # Nothing reaches it: the largest value (the request closes every real row).
    assert distribution_quantile(values, coverage, 0.95).tolist() == [1000.0, 500.0]
    fresh, cover = runtime_distribution(None, np.asarray([_row_for(_job(1, "new", 0.0))]))
    assert cover.tolist() == [[0.5, 1.0]] and fresh[0, 1] == pytest.approx(20_000.0)


def _row_for(job: HistoryJob) -> list[float]:
    return HistoryEstimator(QUICK).state.row(job)


def test_the_safe_request_is_tight_for_steady_jobs_and_the_limit_for_erratic_ones() -> None:
    rng = random.Random(7)
    history = [
        _job(i, "steady", 1000.0 * rng.uniform(0.95, 1.05))
        if i % 2
        # Half of these fail within a minute, half run into their 20,000 s limit.
        else _job(i, "erratic", rng.choice([30.0, 20_000.0]))
        for i in range(800)
    ]
    estimator = HistoryEstimator(QUICK)
    estimator.learn_history(history)
    assert estimator.model is not None
    steady = estimator.predict(_job(900, "steady", 0.0))
    erratic = estimator.predict(_job(901, "erratic", 0.0))
    # Runs of 950-1,050 s: a safe request covers most of them and stays near them.
    assert 1000 < steady.runtime_safe_s < 1500
    assert erratic.runtime_safe_s >= 20_000


def test_recalibration_keeps_the_trees_and_rechooses_only_the_safe_weight() -> None:
    estimator = HistoryEstimator(RECALIBRATING)
    estimator.learn_history(_job(i, f"u{i % 3}", 100.0 * (1 + i % 7)) for i in range(200))
    trained = estimator.model
    assert trained is not None and trained.version == 1
    estimator.learn_history(_job(i, f"u{i % 3}", 100.0 * (1 + i % 7)) for i in range(200, 250))
    recalibrated = estimator.model
    assert recalibrated is not None
    assert recalibrated is not trained  # a new snapshot: predictions before it keep theirs
    assert recalibrated.accuracy is trained.accuracy
    assert recalibrated.coverage is trained.coverage
    assert recalibrated.version == trained.version
    assert recalibrated.safe_weight in SAFE_WEIGHTS


def test_before_any_training_it_falls_back_to_easy_plus_plus_and_the_request() -> None:
    estimator = HistoryEstimator(QUICK)
    fresh = estimator.predict(_job(5, "u", 0.0, requested_s=900.0))
    assert fresh.source == "fallback"
    assert fresh.runtime_estimate_s == fresh.runtime_safe_s == pytest.approx(900.0)
    estimator.observe(_job(1, "u", 100.0))
    estimator.observe(_job(2, "u", 300.0))
    easy = estimator.predict(_job(5, "u", 0.0, requested_s=900.0))
    assert easy.runtime_estimate_s == pytest.approx(200.0)


def test_memory_model_trains_on_real_use_and_stays_off_when_use_echoes_the_request() -> None:
    def with_memory(job: HistoryJob, used_kb: float) -> HistoryJob:
        return dataclasses.replace(
            job, requested_memory_kb_per_proc=65_536.0, used_memory_kb_per_proc=used_kb
        )

    real = HistoryEstimator(QUICK)
    real.learn_history(
        with_memory(_job(i, f"u{i % 2}", 100.0), 1000.0 if i % 2 else 30_000.0) for i in range(400)
    )
    assert real.memory_enabled and real.model is not None and real.model.memory is not None
    small = real.predict(with_memory(_job(900, "u1", 0.0), 0.0))
    assert small.memory_p50_kb_per_proc is not None
    assert 500 < small.memory_p50_kb_per_proc < 2000
    # u1 always used 1000 KB: its request is tight, not the other user's 30,000.
    safe = small.memory_safe_kb_per_proc or 0
    assert small.memory_p50_kb_per_proc <= safe < 5000

    echoed = HistoryEstimator(QUICK)
    echoed.learn_history(with_memory(_job(i, "u", 100.0), 65_536.0) for i in range(400))
    assert not echoed.memory_enabled
    assert echoed.model is not None and echoed.model.memory is None


def test_job_records_convert_memory_to_kb_per_processor() -> None:
    record = JobRecord(
        job_id="42",
        system="pitzer",
        user="alice",
        submit_time=datetime(2024, 1, 1, tzinfo=UTC),
        end_time=datetime(2024, 1, 1, 1, tzinfo=UTC),
        run_s=3000,
        requested_cores=4,
        requested_memory_mb=8,
        requested_walltime_s=3600,
        used_memory_mb=2,
    )
    job = HistoryJob.from_job_record(record)
    assert (job.procs, job.requested_memory_kb_per_proc, job.used_memory_kb_per_proc) == (
        4,
        2048.0,
        512.0,
    )
    assert job.end_time_s == job.submit_time_s + 3600


def test_default_model_on_a_kth_slice_beats_last_two_and_keeps_safe_under_rate_low(
    kth_slice: ReplayResult,
) -> None:
    scored = _scored(kth_slice)
    run = np.array([job.run_s or 0.0 for job in kth_slice.jobs])[scored]
    model = kth_slice.model
    estimate = score(model.runtime_estimate_s[scored], run)
    last2 = score(np.maximum(kth_slice.last2_s[scored], 1.0), run)
    safe = score(model.runtime_safe_s[scored], run)
    assert kth_slice.retrains >= 1
    assert estimate.accuracy > last2.accuracy
    assert np.array_equal(model.runtime_p50_s, model.runtime_estimate_s)
    assert safe.under_rate < 0.1
    assert safe.accuracy > score(kth_slice.user_request_s[scored], run).accuracy
    assert np.all(model.runtime_p50_s <= model.runtime_safe_s)
    assert not kth_slice.memory_enabled  # KTH records no memory
    assert all(math.isfinite(v) for v in model.runtime_estimate_s)
