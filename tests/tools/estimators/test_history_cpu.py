"""CPU efficiency from the history: online, per job, with an interval, and scored honestly.

Synthetic traces written by the test: each user runs serial jobs that keep their one
core busy and wide jobs that leave most cores idle, so the user's last efficiency (the
baseline) is often wrong and the processor count tells the answer. The shared traces
(minutes each) are for ``benchmarks/cpu_efficiency.py``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tools.estimators.history.cpu import CpuLearner, efficiency_outlier
from tools.estimators.history.estimator import HistoryConfig, HistoryEstimator
from tools.estimators.history.features import FeatureState, HistoryJob
from tools.estimators.history.replay_cpu import cpu_bench, replay_cpu

runner = CliRunner()
QUICK = HistoryConfig(
    first_train_jobs=200,
    retrain_min_jobs=200,
    retrain_fraction=0.0,
    cpu_trees=15,
    cpu_depth=3,
    estimate_trees=5,
)


def _efficiency(procs: int, rng: random.Random) -> float:
    return min(max((0.95 if procs == 1 else 0.2) + rng.gauss(0.0, 0.03), 0.01), 1.0)


def _jobs(n: int, seed: int = 1) -> list[HistoryJob]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        procs = rng.choice([1, 32])
        run_s = 600.0
        jobs.append(
            HistoryJob(
                job_id=str(i),
                submit_time_s=i * 60.0,
                user=f"u{rng.randrange(8)}",
                procs=procs,
                requested_time_s=3600.0,
                run_s=run_s,
                end_time_s=i * 60.0 + run_s,
                used_cpu_s_per_proc=run_s * _efficiency(procs, rng),
            )
        )
    return jobs


def _swf(path: Path, jobs: list[HistoryJob], *, cpu: bool = True) -> Path:
    lines = ["; MaxProcs: 64"]
    for job in jobs:
        used = f"{job.used_cpu_s_per_proc:.1f}" if cpu and job.used_cpu_s_per_proc else "-1"
        lines.append(
            f"{int(job.job_id) + 1} {job.submit_time_s:.0f} 0 {job.run_s:.0f} {job.procs} "
            f"{used} -1 {job.procs} 3600 -1 1 {(job.user or 'u0')[1:]} 1 -1 -1 -1 -1 -1"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_model_beats_the_users_last_efficiency_and_its_interval_holds() -> None:
    result = replay_cpu(_jobs(1200), QUICK)
    later = slice(600, None)
    actual = result.efficiency[later]
    mae = {
        name: float(np.nanmean(np.abs(values[later] - actual)))
        for name, values in (("last", result.user_last), ("model", result.model_p50))
    }
    assert mae["model"] < 0.5 * mae["last"]  # it knows wide jobs idle, the last job does not
    inside = (result.model_low[later] <= actual) & (actual <= result.model_high[later])
    assert 0.6 <= float(inside.mean()) <= 0.98
    assert result.retrains >= 2


def test_a_row_never_sees_a_job_that_had_not_ended_at_submit_time() -> None:
    jobs = _jobs(300)
    changed = [
        dataclasses.replace(job, used_cpu_s_per_proc=1.0) if index >= 200 else job
        for index, job in enumerate(jobs)
    ]
    rows = []
    for stream in (jobs, changed):
        learner = CpuLearner(QUICK)
        state = FeatureState()
        for job in stream[:201]:
            learner.submitted(state.row(job), job)
            state.submitted(job)
        for job in stream[:190]:
            learner.observe([], job)
            state.finished(job)
        rows.append(learner.row(state.row(stream[200]), stream[200]))
    assert np.allclose(rows[0], rows[1], equal_nan=True)


@pytest.mark.parametrize(
    ("cpu_s", "run_s", "why"),
    [
        (None, 100.0, "missing"),
        (-3.0, 100.0, "negative"),
        (50.0, 0.0, "no_run_time"),
        (500.0, 100.0, "absurd"),
        (105.0, 100.0, None),
        (50.0, 100.0, None),
    ],
)
def test_cpu_times_that_cannot_be_learned_from_are_named(
    cpu_s: float | None, run_s: float, why: str | None
) -> None:
    job = HistoryJob(job_id="1", submit_time_s=0.0, run_s=run_s, used_cpu_s_per_proc=cpu_s)
    assert efficiency_outlier(job) == why


def test_absurd_values_are_kept_out_and_values_over_one_capped(tmp_path: Path) -> None:
    jobs = _jobs(300)
    jobs[10] = dataclasses.replace(jobs[10], used_cpu_s_per_proc=5000.0)  # 8 x its run
    jobs[11] = dataclasses.replace(jobs[11], used_cpu_s_per_proc=630.0)  # 1.05 x
    result = cpu_bench(_swf(tmp_path / "cpu.swf", jobs), config=QUICK)
    assert result.kept_out == {"absurd": 1}
    assert result.capped_at_one == 1
    assert result.jobs_with_efficiency == 299


def test_the_estimator_serves_the_efficiency_with_its_interval() -> None:
    estimator = HistoryEstimator(QUICK)
    estimator.learn_history(_jobs(600))
    assert estimator.cpu.model is not None
    for procs, lower, upper in ((32, 0.05, 0.4), (1, 0.8, 1.0)):
        prediction = estimator.predict(
            HistoryJob(
                job_id="what-if",
                submit_time_s=600 * 60.0 + 3600,
                user="u1",
                procs=procs,
                requested_time_s=3600.0,
            )
        )
        assert prediction.cpu_source == "model"
        p50 = prediction.cpu_efficiency_p50
        assert p50 is not None and lower <= p50 <= upper
        assert (prediction.cpu_efficiency_low or 0) <= p50 <= (prediction.cpu_efficiency_high or 1)
        assert prediction.cpu_user_shape_jobs > 0


def test_cli_cpu_target_prints_the_errors_of_every_predictor(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "cpu.swf", _jobs(400))
    result = runner.invoke(
        app, ["history-bench", "--trace", str(trace), "--target", "cpu-efficiency", "--json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body["held_out"]["mae"]) == {"user_last", "user_median", "model"}
    assert body["jobs_with_efficiency"] == 400
    table = runner.invoke(
        app, ["history-bench", "--trace", str(trace), "--target", "cpu-efficiency"]
    )
    assert table.exit_code == 0 and "model median" in table.output


def test_cli_cpu_target_on_a_trace_without_cpu_time_exits_2(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "nocpu.swf", _jobs(50), cpu=False)
    result = runner.invoke(
        app, ["history-bench", "--trace", str(trace), "--target", "cpu-efficiency", "--json"]
    )
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert body["field"] == "avg_cpu_time_s" and "field 6" in body["error"]


def test_the_cpu_model_can_be_switched_off() -> None:
    estimator = HistoryEstimator(QUICK.model_copy(update={"cpu_efficiency": False}))
    estimator.learn_history(_jobs(300))
    assert estimator.cpu.model is None and estimator.cpu.known == 0
    prediction = estimator.predict(HistoryJob(job_id="w", submit_time_s=1e6, user="u1", procs=32))
    assert prediction.cpu_efficiency_p50 is None and prediction.cpu_source is None
