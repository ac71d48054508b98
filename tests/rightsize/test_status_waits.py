"""Pending jobs' predicted starts on the status page and in ``rightsize status`` (issue 42).

The learned path runs the real wait predictor (tools/waits) on the simulated cluster's
queue (tests/agents/harness.py: one node, a manual clock): a blocker runs, the plan's job
waits behind it. The rule path is the plan's own wait with the band the rule's error on
recorded waits gives.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowledge_base.records import (
    CascadeSegment,
    JobRecord,
    JobState,
    Plan,
    PlanStatus,
    SegmentState,
)
from rightsize.cli import app
from rightsize.observability.status import collect_status
from rightsize.observability.waits import RULE_BASIS, WaitBoard, rule_start
from tests.agents.harness import MiniCenter, generic_spec, make_plan
from tools.actuators.model import JobRequest, SimulatedWork
from tools.waits.rule import rule_interval


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        yield c


def request(name: str, walltime_s: int, run_s: int) -> JobRequest:
    return JobRequest(
        name=name,
        partition="batch",
        command="true",
        memory_mb=100,
        walltime_s=walltime_s,
        simulated=SimulatedWork(run_s=run_s, peak_memory_mb=50),
    )


def pending_plan(plan_id: str, job_id: str, *, wait_s: int | None = 3600) -> Plan:
    plan = make_plan(plan_id, generic_spec(), partition="batch", walltime_s=300)
    return plan.model_copy(
        update={
            "status": PlanStatus.SUBMITTED,
            "expected_wait_s": wait_s,
            "segments": [
                CascadeSegment(index=0, walltime_s=300, job_id=job_id, state="pending"),
            ],
        }
    )


async def test_the_status_page_shows_a_pending_jobs_learned_start_and_reads_the_queue_once(
    center: MiniCenter,
) -> None:
    await center.cluster.submit(request("blocker", 600, 500))
    waiting = await center.cluster.submit(request("waiting", 300, 100))
    await center.kb.put_plan(pending_plan("plan-waits", waiting))
    board = WaitBoard(center.kb, {"testcluster": center.cluster})

    snapshot = await collect_status(center.kb, waits=board)

    [plan] = snapshot.plans
    [segment] = plan.segments
    start = segment.start
    assert start is not None and start.basis != RULE_BASIS  # the predictor's, not the rule's
    assert "simulation" in start.basis  # no recorded waits yet: the simulation's band
    now = center.cluster.now()
    assert start.p10 <= start.start <= start.p90
    assert start.p90 > now  # behind a blocker with 500 s to go: not "now" at every quantile
    # A refresh within refresh_s reuses the answer: the queue is read once.
    again = await collect_status(center.kb, waits=board)
    assert again.plans[0].segments[0].start == start
    assert board.predictions_made == 1


async def test_the_predictor_is_kept_until_the_history_grows(center: MiniCenter) -> None:
    await center.cluster.submit(request("blocker", 600, 500))
    await center.cluster.submit(request("waiting", 300, 100))
    board = WaitBoard(center.kb, {"testcluster": center.cluster}, refresh_s=0)
    await board.starts("testcluster")
    first = board.predictors.kept["testcluster"][1]
    await board.starts("testcluster")
    assert board.predictors.kept["testcluster"][1] is first  # no new predictor per refresh
    at = datetime(2026, 1, 1, tzinfo=UTC)
    await center.kb.add_jobs(
        [
            JobRecord(
                job_id=f"h{n}",
                system="testcluster",
                state=JobState.COMPLETED,
                submit_time=at,
                start_time=at + timedelta(seconds=60),
                end_time=at + timedelta(seconds=600),
                run_s=540,
            )
            for n in range(3)
        ]
    )
    await board.starts("testcluster")
    assert board.predictors.kept["testcluster"][1] is not first  # the history grew
    assert await board.starts("elsewhere") == {}  # no executor for it here


async def test_without_the_executors_the_plans_own_wait_has_the_rules_band(
    center: MiniCenter,
) -> None:
    plan = pending_plan("plan-rule", "7", wait_s=3600)
    await center.kb.put_plan(plan)

    snapshot = await collect_status(center.kb)

    start = snapshot.plans[0].segments[0].start
    assert start is not None and start.basis == RULE_BASIS
    low, high = rule_interval(3600.0)
    assert start.start == plan.created_at + timedelta(seconds=3600)
    assert math.isclose((start.p10 - plan.created_at).total_seconds(), low, abs_tol=1e-3)
    assert math.isclose((start.p90 - plan.created_at).total_seconds(), high, abs_tol=1e-3)
    assert low < 3600 < high
    assert rule_start(pending_plan("p", "8", wait_s=None)) is None


def test_rightsize_status_shows_a_pending_plans_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from rightsize.settings import Settings
    from rightsize.wiring import knowledge_base

    home = tmp_path / "home"
    monkeypatch.setenv("RIGHTSIZE_HOME", str(home))
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "simulated")
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP", "LLM_MODEL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)

    async def store() -> None:
        async with knowledge_base(Settings()) as kb:
            await kb.put_plan(pending_plan("plan-cli", "41", wait_s=7200))
            done = pending_plan("plan-done", "42").model_copy(
                update={"status": PlanStatus.COMPLETED}
            )
            done.segments[0] = done.segments[0].model_copy(update={"state": SegmentState.COMPLETED})
            await kb.put_plan(done)

    asyncio.run(store())
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    plans = {p["plan_id"]: p for p in json.loads(result.stdout)["plans"]}
    start = plans["plan-cli"]["pending_start"]
    assert start is not None and start["basis"] == RULE_BASIS
    assert plans["plan-done"]["pending_start"] is None
    table = CliRunner().invoke(app, ["status", "--wide"])
    assert table.exit_code == 0, table.output
    assert "starts" in table.stdout and " h (" in table.stdout
