"""The ledger API front ends share (MCP tools, the CLI): submit what was confirmed, cancel.

The agents run on a ``MiniCenter`` (in-process bus, SQLite, the simulated cluster on a
manual clock: see ``tests/agents/harness.py``); the planner runs for real on the test
catalog, which offers a generic job two options (batch, recommended; debug).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.events import PlanCancelRequested, PlanRequested, ScheduleDecision
from agents.intelligence import open_checkpointer
from agents.ledger import (
    SubmissionRefused,
    request_cancel,
    submit_confirmed,
    view,
    wait_for,
)
from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Plan, PlanStatus, SegmentState
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, start_center_agents, tick, until
from tests.cluster import TEST_SYSTEM
from tools.planning.confirm import Confirmation
from tools.planning.results import PlannedOption
from tools.planning.service import plan_workload
from tools.planning.whatif import default_estimators

# The planner leaves out a large-memory queue for a job that fits the standard share per
# core (issue #19 item 3): here batch has debug's memory, so both stay on offer.
_BATCH = TEST_SYSTEM.partition("batch").model_copy(update={"max_memory_mb": 4096})
SYSTEM = TEST_SYSTEM.model_copy(
    update={"partitions": [_BATCH if p.name == "batch" else p for p in TEST_SYSTEM.partitions]}
)


def spec() -> WorkloadSpec:
    return WorkloadSpec(
        name="lammps",
        user="bob",
        workload=GenericJob(application="lmp", nodes=1, cores=2, walltime_s=50),
    )


def offered() -> list[PlannedOption]:
    work = spec()
    return plan_workload(work, Catalog(systems=[SYSTEM]), default_estimators(work)).ranked


async def draft(center: MiniCenter, plan_id: str) -> Plan:
    """What build_plan stores: the recommended option as the caller's draft."""
    recommended = offered()[0]
    stored: Plan = await center.kb.put_plan(recommended.to_record(spec(), plan_id, reason="built"))
    return stored


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[tuple[MiniCenter, dict[str, Any]]]:
    async with (
        MiniCenter(tmp_path) as c,
        open_checkpointer(tmp_path / "plane.db") as saver,
    ):
        await c.kb.put_catalog(Catalog(systems=[SYSTEM]))
        yield c, await start_center_agents(c, saver)


async def run_to_end(center: MiniCenter, agents: dict[str, Any], plan_id: str) -> Plan:
    async def over() -> Plan | None:
        plan = await center.kb.get_plan(plan_id)
        return plan if plan.status.ended else None

    async def step() -> None:
        await tick(center, agents["scheduler"], 10)

    result: Plan = await until(over, step, steps=100, what=f"plan {plan_id} over")
    return result


async def test_submit_runs_the_confirmed_alternative_exactly_not_a_fresh_choice(
    center: tuple[MiniCenter, dict[str, Any]],
) -> None:
    """Before: submit_plan asked the plane to plan again with approval=auto, and it ran
    whatever it recommended then (here: batch), not the option the user confirmed."""
    mini, agents = center
    plan = await draft(mini, "p-alt")
    recommended, alternative = offered()[:2]
    assert (recommended.option.partition, alternative.option.partition) == ("batch", "debug")

    outcome = await submit_confirmed(
        mini.kb,
        mini.bus,
        plan.id,
        "bob",
        Confirmation(option_id=alternative.option_id, walltime_s=alternative.option.walltime_s),
    )
    again = await submit_confirmed(mini.kb, mini.bus, plan.id, "bob", Confirmation())
    with pytest.raises(SubmissionRefused, match="already submitted with option"):
        await submit_confirmed(
            mini.kb, mini.bus, plan.id, "bob", Confirmation(option_id=recommended.option_id)
        )
    final = await run_to_end(mini, agents, plan.id)

    assert outcome.option_id == alternative.option_id and not outcome.already_submitted
    assert again.already_submitted and again.event_id == outcome.event_id
    assert again.option_id == alternative.option_id  # the draft holds what was confirmed
    assert final.status is PlanStatus.COMPLETED
    assert final.option == alternative.option
    [job] = mini.cluster._jobs.values()
    assert (job.request.partition, job.request.walltime_s) == ("debug", 60)
    sent = [e for e in await mini.recorder.drain() if isinstance(e.payload, PlanRequested)]
    assert len({e.id for e in sent}) == 1  # one event, however often sent
    requested = sent[0].payload
    assert isinstance(requested, PlanRequested)
    assert requested.confirmed is not None and requested.confirmed.option == alternative.option
    log = (await agents["plane"].snapshot(plan.id)).values["log"]
    assert any("run as confirmed" in line for line in log)
    assert not any(line.startswith("goals by") for line in log)  # nothing re-planned


async def test_submit_refuses_an_option_that_no_longer_fits_and_sends_nothing(
    center: tuple[MiniCenter, dict[str, Any]],
) -> None:
    mini, _ = center
    plan = await draft(mini, "p-shrunk")  # batch, 120 s per job
    batch = SYSTEM.partition("batch").model_copy(update={"max_minutes": 1})
    shrunk = SYSTEM.model_copy(
        update={"partitions": [batch if p.name == "batch" else p for p in SYSTEM.partitions]}
    )
    await mini.kb.put_catalog(Catalog(systems=[shrunk]))

    with pytest.raises(SubmissionRefused) as refused:
        await submit_confirmed(mini.kb, mini.bus, plan.id, "bob", Confirmation())

    assert refused.value.field == "option_id"
    assert "no longer fits" in str(refused.value) or "breaks a limit" in str(refused.value)
    assert "max_minutes" in str(refused.value) or "walltime" in str(refused.value)
    assert await mini.recorder.of(PlanRequested) == []
    assert (await mini.kb.get_plan(plan.id)).status is PlanStatus.DRAFT


async def test_submit_refuses_a_walltime_or_an_option_other_than_offered(
    center: tuple[MiniCenter, dict[str, Any]],
) -> None:
    mini, _ = center
    plan = await draft(mini, "p-other")
    assert plan.option is not None
    with pytest.raises(SubmissionRefused, match=r"walltime_s: you confirmed 60 s per job"):
        await submit_confirmed(mini.kb, mini.bus, plan.id, "bob", Confirmation(walltime_s=60))
    with pytest.raises(SubmissionRefused, match="cost: you confirmed a cost of 3"):
        await submit_confirmed(mini.kb, mini.bus, plan.id, "bob", Confirmation(cost=3.0))
    with pytest.raises(SubmissionRefused, match="option opt-000000000000 is not among"):
        await submit_confirmed(
            mini.kb, mini.bus, plan.id, "bob", Confirmation(option_id="opt-000000000000")
        )
    assert await mini.recorder.of(PlanRequested) == []


async def test_cancel_goes_through_the_scheduler_which_cancels_the_running_job(
    center: tuple[MiniCenter, dict[str, Any]],
) -> None:
    mini, agents = center
    plan = await draft(mini, "p-cancel")
    await submit_confirmed(mini.kb, mini.bus, plan.id, "bob", Confirmation())
    await mini.settle()
    await tick(mini, agents["scheduler"], 5)
    running = await wait_for(
        mini.kb, plan.id, lambda p: p.status is PlanStatus.RUNNING, timeout_s=5
    )
    [job_id] = [s.job_id for s in running.segments if s.job_id]

    outcome = await request_cancel(mini.kb, mini.bus, plan.id, "bob", "wrong input deck")
    assert outcome.requested and outcome.jobs_in_flight == [job_id]
    await mini.settle()
    final = await mini.kb.get_plan(plan.id)
    assert final.status is PlanStatus.CANCELLED
    assert final.reason == "wrong input deck (by bob)" and final.cancelled_by == "bob"
    assert (await mini.cluster.status(job_id or "")).state.value == "cancelled"
    assert [(s.job_id, s.state) for s in final.segments if s.job_id] == [
        (job_id, SegmentState.CANCELLED)
    ]
    decisions = [d.action for d in await mini.recorder.of(ScheduleDecision)]
    assert decisions == ["submit", "cancel"]
    again = await request_cancel(mini.kb, mini.bus, plan.id, "bob")
    assert again.already_final and not again.requested
    assert len(await mini.recorder.of(PlanCancelRequested)) == 1
    shown = view(final)
    assert (shown.state, shown.segment, shown.segments) == (PlanStatus.CANCELLED, 1, 1)


async def test_without_agents_only_a_draft_is_cancelled_and_nothing_else_is_touched(
    center: tuple[MiniCenter, dict[str, Any]],
) -> None:
    mini, _ = center
    plan = await draft(mini, "p-local")
    outcome = await request_cancel(mini.kb, None, plan.id, "bob")
    assert outcome.status is PlanStatus.CANCELLED and not outcome.requested
    running = await draft(mini, "p-sent")
    await submit_confirmed(mini.kb, mini.bus, running.id, "bob", Confirmation())
    await mini.settle()
    with pytest.raises(InvalidInputError, match="nothing was cancelled"):
        await request_cancel(mini.kb, None, running.id, "bob")
    assert not (await mini.kb.get_plan(running.id)).status.ended
