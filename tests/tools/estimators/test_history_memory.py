"""The memory side of the history estimator: online, calibrated for an OOM rate, honest.

The traces here are synthetic SWF files written by the test (each user's jobs use memory
around a level of its own, some users steady, some spread out), because the one shared
trace with real memory use (LANL-CM5) takes minutes to replay; ``benchmarks/memory.py``
runs that one.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tools.estimators.history.estimator import HistoryConfig, HistoryEstimator
from tools.estimators.history.features import FeatureState, HistoryJob
from tools.estimators.history.memory import (
    MemoryLearner,
    memory_outlier,
    predict_memory,
    raise_after_oom,
)
from tools.estimators.history.replay_memory import memory_bench, replay_memory, tuned_factor

runner = CliRunner()
QUICK = HistoryConfig(
    first_train_jobs=300,
    retrain_min_jobs=300,
    retrain_fraction=0.0,
    recalibrate_jobs=100,
    calibration_jobs=1000,
    quantile_trees=10,
    max_depth=3,
    estimate_trees=5,
)


def _jobs(n: int, seed: int = 1, *, echo: bool = False) -> list[HistoryJob]:
    """Users with a memory level each: steady ones (5 %) and spread ones (x up to 3)."""
    rng = random.Random(seed)
    levels = {f"u{i}": rng.choice([2_000.0, 8_000.0, 30_000.0]) for i in range(12)}
    jobs = []
    for i in range(n):
        user = f"u{rng.randrange(12)}"
        spread = 0.05 if int(user[1:]) % 2 else 0.6
        used = levels[user] * math.exp(rng.gauss(0.0, spread))
        asked = used if echo else levels[user] * 2
        submit = i * 60.0
        jobs.append(
            HistoryJob(
                job_id=str(i),
                submit_time_s=submit,
                user=user,
                procs=4,
                requested_time_s=3600.0,
                requested_memory_kb_per_proc=asked,
                run_s=120.0,
                end_time_s=submit + 120.0,
                used_memory_kb_per_proc=used,
            )
        )
    return jobs


def _swf(path: Path, jobs: list[HistoryJob], *, memory: bool = True) -> Path:
    lines = ["; MaxProcs: 64"]
    for job in jobs:
        used = round(job.used_memory_kb_per_proc or 0) if memory else -1
        asked = round(job.requested_memory_kb_per_proc or 0) if memory else -1
        lines.append(
            f"{int(job.job_id) + 1} {job.submit_time_s:.0f} 0 {job.run_s:.0f} 4 -1 {used} 4 "
            f"3600 {asked} 1 {job.user[1:] if job.user else -1} 1 -1 -1 -1 -1 -1"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_model_request_meets_the_oom_target_with_less_waste_than_a_fixed_factor() -> None:
    result = replay_memory(_jobs(3000), QUICK)
    later = slice(1500, None)
    used = result.used_kb[later]
    model = result.model_request_kb[later]
    base = result.last_three_base_kb[later]
    oom = float(np.mean(model < used))
    waste = float(np.maximum(model - used, 0).sum() / used.sum())
    k = tuned_factor(base, used, oom)
    tuned_waste = float(np.maximum(k * base - used, 0).sum() / used.sum())
    assert result.retrains >= 2
    assert oom <= 0.05
    assert waste < 0.8 * tuned_waste


def test_steady_users_get_tighter_requests_than_spread_ones() -> None:
    result = replay_memory(_jobs(3000), QUICK)
    ratio = result.model_request_kb / result.model_p50_kb
    odd = np.array([int(job.user[1:]) % 2 == 1 for job in result.jobs if job.user])
    later = np.arange(len(ratio)) >= 1500
    assert np.median(ratio[later & odd]) < np.median(ratio[later & ~odd])


def test_a_row_never_sees_a_job_that_had_not_ended_at_submit_time() -> None:
    jobs = _jobs(400)
    changed = [
        dataclasses.replace(job, used_memory_kb_per_proc=1e6) if index >= 200 else job
        for index, job in enumerate(jobs)
    ]
    rows = []
    for stream in (jobs, changed):
        learner = MemoryLearner(QUICK)
        state = FeatureState()
        for job in stream[:200]:
            learner.submitted(state.row(job), job)
            state.submitted(job)
        for job in stream[:150]:
            learner.observe([], job)
            state.finished(job)
        probe = stream[200]
        rows.append(learner.row(state.row(probe), probe))
    assert rows[0] == rows[1] or np.allclose(rows[0], rows[1], equal_nan=True)


@pytest.mark.parametrize(
    ("value", "why"),
    [(None, "missing"), (-5.0, "negative"), (0.0, "zero"), (2.0**31, "absurd"), (512.0, None)],
)
def test_uses_that_cannot_be_memory_are_named(value: float | None, why: str | None) -> None:
    assert memory_outlier(value) == why


def test_absurd_and_zero_uses_are_kept_out_and_counted() -> None:
    jobs = _jobs(50)
    jobs[3] = dataclasses.replace(jobs[3], used_memory_kb_per_proc=0.0)
    jobs[7] = dataclasses.replace(jobs[7], used_memory_kb_per_proc=2.0**40)
    result = replay_memory(jobs, QUICK)
    assert result.kept_out == {"zero": 1, "absurd": 1}
    assert np.isnan(result.used_kb[3]) and np.isnan(result.used_kb[7])


def test_after_an_oom_the_raise_comes_from_the_conditional_distribution() -> None:
    state, learner = FeatureState(), MemoryLearner(QUICK)
    job = _jobs(1)[0]
    row = learner.row(state.row(job), job)
    batch = predict_memory(None, np.asarray([row]))
    p50 = float(batch.p50_kb[0])
    raised = raise_after_oom(batch, 0, needed_more_than_kb=p50 * 1.2, target=0.02)
    assert raised >= p50 * 1.2 * 1.25
    assert raised <= float(batch.quantiles_kb[0, -1]) * 1.25 * 1.2 + 1


def test_the_estimator_serves_the_memory_request_once_trained() -> None:
    estimator = HistoryEstimator(QUICK)
    estimator.learn_history(_jobs(900))
    probe = dataclasses.replace(_jobs(1)[0], job_id="probe", submit_time_s=1e9)
    prediction = estimator.predict(probe)
    assert estimator.memory_enabled and prediction.memory_source == "model"
    assert prediction.memory_safe_kb_per_proc is not None
    assert prediction.memory_p50_kb_per_proc is not None
    assert prediction.memory_safe_kb_per_proc >= prediction.memory_p50_kb_per_proc
    distribution = prediction.memory_distribution_kb_per_proc
    assert distribution is not None
    levels = [level for level, _ in distribution]
    values = [kb for _, kb in distribution]
    assert levels == sorted(levels) and values == sorted(values)
    assert values[0] <= prediction.memory_safe_kb_per_proc <= values[-1]


def test_cli_memory_target_prints_every_rule_and_writes_the_csv(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "mem.swf", _jobs(800))
    out = tmp_path / "pred.csv"
    result = runner.invoke(
        app,
        [
            *("history-bench", "--trace", str(trace), "--target", "memory", "--json"),
            "--predictions-out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    names = set(data["all_jobs"]["predictors"])
    assert {"user_request", "last3_max_x1", "last3_max_x1.5", "last3_max_x2"} <= names
    assert {"model", "last3_max_tuned"} <= names
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["job_id", "submit_s", "used_kb", "request_kb"]
    assert len(rows) == data["jobs_scored"] == 800
    assert all(float(row["request_kb"]) > 0 for row in rows)


def test_cli_memory_target_on_a_trace_without_memory_exits_2(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "nomem.swf", _jobs(50), memory=False)
    out = tmp_path / "pred.csv"
    result = runner.invoke(
        app,
        [
            *("history-bench", "--trace", str(trace), "--target", "memory", "--json"),
            "--predictions-out",
            str(out),
        ],
    )
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert body["field"] == "used_memory_kb_per_proc"
    assert "records no used memory" in body["error"]
    assert not out.exists()


def test_cli_rejects_an_unknown_target(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "mem.swf", _jobs(20))
    result = runner.invoke(app, ["history-bench", "--trace", str(trace), "--target", "disk"])
    assert result.exit_code == 2
    assert "--target" in result.output and "disk" in result.output


def test_a_trace_that_copies_the_request_into_the_use_says_so(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "echo.swf", _jobs(400, echo=True))
    result = memory_bench(trace, config=QUICK)
    assert any("not evidence of use" in note for note in result.notes)


def test_people_get_tables_for_all_jobs_and_the_held_out_half(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "mem.swf", _jobs(300))
    result = runner.invoke(app, ["history-bench", "--trace", str(trace), "--target", "memory"])
    assert result.exit_code == 0, result.output
    for label in ("user request", "last-three-max x1.5", "model request", "held out"):
        assert label in result.stdout


def test_a_user_who_always_uses_the_same_amount_is_never_asked_for_less() -> None:
    """exp(log(x)) can land a hair below x: the request must still cover x exactly."""
    steady = [
        dataclasses.replace(job, used_memory_kb_per_proc=1000.0 + 7.0 * int(job.user[1:]))
        for job in _jobs(1500)
        if job.user is not None
    ]
    result = replay_memory(steady, QUICK)
    used, request = result.used_kb[700:], result.model_request_kb[700:]
    assert result.retrains >= 1
    assert not np.any(request < used)
