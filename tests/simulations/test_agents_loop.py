"""Agents in the loop: the simulated cluster plays a trace exactly as the trace simulator
does, and the production agents right-size a window of it end to end."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from agents.eventlog import EventLogReader
from agents.ordering import OrderingConfig
from knowledge_base.errors import InvalidInputError
from rightsize import output
from rightsize.cli import app
from simulations.agents_loop import compare_with_agents, replay_plain, window
from simulations.replay import replay
from simulations.rightsize_policy import RightsizePolicy
from simulations.workload import load_swf
from tools.actuators.simulated import EPOCH

runner = CliRunner()


@pytest.fixture(scope="module")
def sdsc(shared_data: Path) -> object:
    return load_swf(shared_data / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz")


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
@pytest.mark.parametrize("start", [0, 20_000])
def test_the_simulated_cluster_schedules_a_trace_as_the_trace_simulator_does(
    sdsc: object, policy: str, start: int
) -> None:
    # Two independent implementations of the same policy (the executor the agents act on,
    # the compiled trace simulator) agree job for job, ties at the same second included.
    jobs = window(sdsc, start, start + 1500)  # type: ignore[arg-type]
    plain = asyncio.run(replay_plain(jobs, policy=policy))  # type: ignore[arg-type]
    fast = replay(jobs, policy=policy, estimate="user")  # type: ignore[arg-type]
    assert plain.mean_wait_s == pytest.approx(fast.result.mean_wait_s, abs=1e-9)
    assert plain.mean_bsld == pytest.approx(fast.result.mean_bsld, abs=1e-9)
    assert plain.killed == fast.result.killed


def test_easy_backfills_on_the_simulated_cluster_only_what_does_not_delay_the_head() -> None:
    # 4 processors: A (3 procs, 100 s) runs; B (4 procs) must wait for A; C (1 proc, 50 s)
    # ends before A's walltime and backfills; D (1 proc, 500 s) would delay B and waits.
    from simulations.workload import Workload

    jobs = Workload(
        name="hand",
        machine_procs=4,
        submit_s=np.array([0, 1, 2, 3]),
        run_s=np.array([100, 10, 50, 500]),
        req_s=np.array([100, 10, 50, 500]),
        procs=np.array([3, 4, 1, 1]),
        user=np.array([0, 1, 2, 3]),
        job_ids=np.array([1, 2, 3, 4]),
    )
    plain = asyncio.run(replay_plain(jobs, policy="easy"))
    fast = replay(jobs, policy="easy", estimate="user")
    assert list(fast.start_s) == [0, 100, 2, 110]
    assert plain.mean_wait_s == pytest.approx(float(np.mean(fast.start_s - jobs.submit_s)))
    assert plain.mean_wait_s == pytest.approx((0 + 99 + 0 + 107) / 4)


def test_agents_right_size_a_window_and_every_job_runs(sdsc: object, tmp_path: Path) -> None:
    comparison = asyncio.run(
        compare_with_agents(
            sdsc,  # type: ignore[arg-type]
            policy="easy",
            jobs=40,
            history_jobs=1500,
            home=tmp_path,
        )
    )
    assert comparison.window_jobs == comparison.plain.jobs == comparison.agents.jobs == 40
    # the history estimator (trained on the 1,500 earlier jobs) sized every plan
    assert sum(comparison.estimators.values()) == 40 - comparison.unplanned
    assert all(name.startswith("history-trace") for name in comparison.estimators)
    assert sum(comparison.plans.values()) == 40
    # a job the agents let die is one whose plan they concluded as failed (or ran unplanned)
    failed = comparison.plans.get("failed", 0)
    assert comparison.agents.killed <= failed + comparison.unplanned
    # every failed plan is counted once by why: no plan fit, or the plan ran and failed
    assert sum(comparison.unplanned_reasons.values()) == comparison.unplanned
    assert sum(comparison.failed_reasons.values()) == failed - comparison.unplanned
    reasons = [*comparison.unplanned_reasons, *comparison.failed_reasons]
    assert not any(reason.startswith("job ") for reason in reasons)  # grouped, not per job
    assert set(comparison.plans) <= {"completed", "failed"}
    assert comparison.request_over_run["agents"] > 0
    assert comparison.agents.mean_bsld >= 1 and comparison.plain.mean_bsld >= 1


def test_bad_windows_and_policies_are_refused(sdsc: object, tmp_path: Path) -> None:
    for kwargs, field in (
        ({"policy": "conservative", "jobs": 10, "history_jobs": 0}, "policy"),
        ({"policy": "easy", "jobs": 0, "history_jobs": 0}, "agents_jobs"),
        ({"policy": "easy", "jobs": 10, "history_jobs": -1}, "agents_history"),
        ({"policy": "easy", "jobs": 10, "history_jobs": 10**7}, "window"),
    ):
        with pytest.raises(InvalidInputError) as caught:
            asyncio.run(compare_with_agents(sdsc, home=tmp_path, **kwargs))  # type: ignore[arg-type]
        assert caught.value.field == field


def test_cli_reports_both_columns(shared_data: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--agents",
            "--agents-jobs",
            "15",
            "--agents-history",
            "1200",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for column in ("plain", "easy_pp", "agents"):
        assert data[column]["jobs"] == 15
        for key in ("mean_wait_s", "mean_bsld", "p99_bsld", "killed", "utilization"):
            assert key in data[column]
    assert (data["easy_pp"]["estimate"], data["easy_pp"]["order"]) == ("last2", "sjbf")
    assert data["extend_in_place"] is False
    # the same window: the same jobs, so the same processor-seconds whatever the schedule
    work = [data[c]["utilization"] * data[c]["makespan_s"] for c in ("plain", "easy_pp")]
    assert work[0] == pytest.approx(work[1])
    assert data["history_jobs"] == 1200


def test_cli_extension_in_place_reports_easy_user_easy_pp_and_agents_on_one_window(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    args = ["simulate", "--trace", str(trace), "--agents", "--agents-jobs", "15"]
    args += ["--agents-history", "1200", "--extend-in-place"]
    # The console reads COLUMNS once, when rightsize.output is first imported (often by
    # an earlier test): widen it for this test, or row labels are cut ("exten…").
    monkeypatch.setattr(output.console, "_width", 200)
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    rows = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if "│" in line}
    assert {"EASY-user", "EASY++", "agents + extension"} <= set(rows)
    for column in ("mean bsld", "p99 bsld", "util", "killed", "resubmitted"):
        assert column in table.stdout


def test_cli_extension_in_place_needs_agents(shared_data: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--extend-in-place"])
    assert result.exit_code == 2
    assert "--extend-in-place: only with --agents" in result.stderr


def test_cli_refuses_a_policy_the_cluster_does_not_run(shared_data: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--agents", "--policy", "conservative"]
    )
    assert result.exit_code == 2
    assert "--policy" in result.output


def test_a_run_with_agents_repeats_itself_on_the_simulated_clock(
    shared_data: Path, tmp_path: Path
) -> None:
    # The agents see only the simulated clock: every event of the run carries its time
    # (the history estimator predicts each job as submitted at its request's time), so a
    # second run gives the same figures whatever the wall clock says by then.
    kth = load_swf(shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")
    runs = []
    for name in ("first", "second"):
        home = tmp_path / name
        home.mkdir()
        comparison = compare_with_agents(
            kth, policy="easy", jobs=6, history_jobs=1000, home=home, event_log=home / "log"
        )
        runs.append(asyncio.run(comparison))
    timing = {"seconds", "jobs_per_s", "cpu_seconds"}
    first, second = (
        run.model_dump(exclude={"plain": timing, "agents": timing, "easy_pp": timing})
        for run in runs
    )
    assert first == second
    assert all(name.startswith("history-trace") for name in runs[0].estimators)
    replayed = window(kth, 1000, 1006)
    # no job ends later than if each ran alone after the last submission, killed at twice
    # its request (the Re-scheduler's longest retry)
    latest = EPOCH + timedelta(seconds=int(replayed.submit_s[-1] + 3 * replayed.req_s.sum()))
    times = [entry.event.time for entry in EventLogReader(tmp_path / "first" / "log")]
    assert times
    assert all(EPOCH <= time <= latest for time in times), (min(times), max(times), latest)


def test_with_extension_in_place_no_job_is_resubmitted_for_its_walltime(
    sdsc: object, tmp_path: Path
) -> None:
    """The same window as ``rightsize simulate --agents`` runs it, with the Scheduler
    raising a running job's limit toward its user's request near its end: measured on
    SDSC-SP2 jobs 1501-1600 (EASY), 5 resubmissions and 2 kills without, none and 1 with."""
    comparison = asyncio.run(
        compare_with_agents(
            sdsc,  # type: ignore[arg-type]
            policy="easy",
            jobs=100,
            history_jobs=1500,
            home=tmp_path,
            extend_in_place=True,
        )
    )
    assert comparison.agents.jobs == 100
    assert comparison.agents.resubmissions == 0
    # never killed earlier than the user's own request would have been
    assert comparison.agents.killed <= comparison.plain.killed


@pytest.mark.parametrize("bound_h", [None, 12.0])
def test_the_rightsize_order_on_the_simulated_cluster_is_the_trace_simulators(
    sdsc: object, bound_h: float | None
) -> None:
    # The order agents/ordering.py gives SLURM, applied by the simulated cluster at every
    # scheduling event, against the compiled xf queue (users' requests: the limits the
    # cluster kills at, so the starved head's protection is the same in both).
    jobs = window(sdsc, 3000, 4500)  # type: ignore[arg-type]
    ordering = OrderingConfig(starve_h=bound_h)
    plain = asyncio.run(replay_plain(jobs, policy="easy", ordering=ordering))
    fast = replay(
        jobs,
        policy="easy",
        estimate="user",
        order="xf",
        queue_order="xf",
        starve_s=None if bound_h is None else round(bound_h * 3600),
    )
    assert plain.mean_wait_s == pytest.approx(fast.result.mean_wait_s, abs=1e-9)
    assert plain.max_wait_s == fast.result.max_wait_s
    assert plain.mean_bsld == pytest.approx(fast.result.mean_bsld, abs=1e-9)
    arrival = asyncio.run(replay_plain(jobs, policy="easy"))
    assert arrival.mean_wait_s != pytest.approx(plain.mean_wait_s)  # the order mattered


def test_cli_rightsize_order_reports_the_tail_beside_easy_user_and_easy_pp(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    args = ["simulate", "--trace", str(trace), "--agents", "--agents-jobs", "15"]
    args += ["--agents-history", "1200", "--rightsize-order"]
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    bound_s = RightsizePolicy().starve_s(load_swf(trace))
    assert bound_s is not None
    assert data["ordering"]["starve_h"] == pytest.approx(bound_s / 3600)
    for column in ("plain", "easy_pp", "agents"):
        assert data[column]["max_wait_s"] >= data[column]["p99_wait_s"]
    monkeypatch.setattr(output.console, "_width", 200)
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    rows = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if "│" in line}
    assert {"EASY-user", "EASY++", "agents, rightsize order"} <= set(rows)
    for column in ("p99 wait", "max wait", "mean bsld"):
        assert column in table.stdout


def test_cli_rightsize_order_needs_agents(shared_data: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--rightsize-order"])
    assert result.exit_code == 2
    assert "--rightsize-order: only with --agents" in result.stderr
