"""The Intelligence Plane's graph on its own: nodes, routes, interrupts, the SQLite checkpoints.

The answers other agents would send are scripted here as the resume values; the graph
itself, its checkpointer (a SQLite file) and its routing are the real ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest
from langgraph.types import Command

from agents.events import (
    EstimateReady,
    PlanFinished,
    PlanOptionsReady,
    PlanRequested,
    ProfileCompleted,
)
from agents.intelligence import PlaneContext, compile_plane, graph, open_checkpointer
from agents.intelligence.state import PlaneState
from knowledge_base.records import PlanStatus
from tests.agents.harness import dnn_spec, make_plan

graph_module = importlib.import_module("agents.intelligence.graph")
CONFIG = {"configurable": {"thread_id": "plan-g"}}


def answer(payload: Any, event_id: str = "e") -> dict[str, Any]:
    return {"type": payload.event_type, "id": event_id, "payload": payload.model_dump(mode="json")}


def start_state(text: str = "", approval: str | None = None) -> PlaneState:
    request = PlanRequested(plan_id="plan-g", spec=dnn_spec(), text=text, approval=approval)  # type: ignore[arg-type]
    return {
        "plan_id": "plan-g",
        "cause": "c0",
        "request": request.model_dump(mode="json"),
        "handled": ["c0"],
    }


def test_the_graph_has_every_step_of_a_request() -> None:
    nodes = set(graph.get_graph().nodes)
    assert {
        "intake",
        "infer_goals",
        "request_estimates",
        "await_estimates",
        "await_profiles",
        "request_plans",
        "await_plans",
        "choose",
        "await_approval",
        "execute",
        "follow_up",
        "fail",
    } <= nodes


@pytest.mark.parametrize(
    "route",
    [
        "after_estimates",
        "after_profiles",
        "after_plans",
        "after_choose",
        "after_approval",
        "after_follow_up",
    ],
)
def test_routing_functions_return_literals(route: str) -> None:
    hints = get_type_hints(getattr(graph_module, route))
    assert get_args(hints["return"]), f"{route} should return a Literal[...]"


async def test_a_thread_pauses_for_each_answer_and_resumes_from_a_reopened_checkpoint(
    tmp_path: Path,
) -> None:
    db = tmp_path / "plane.db"
    async with open_checkpointer(db) as saver:
        plane = compile_plane(saver)
        await plane.ainvoke(start_state("cheapest"), CONFIG, context=PlaneContext())
        snapshot = await plane.aget_state(CONFIG)
        assert snapshot.next == ("await_estimates",)
        assert snapshot.interrupts[0].value == {"wait_for": ["estimate.ready"]}
        outbox = snapshot.values["outbox"]
        assert [o["type"] for o in outbox] == ["estimate.requested"]
        assert outbox[0]["cause"] == "c0"

    # A new process: a new checkpointer on the same file finds the thread where it was.
    plan = make_plan("plan-g", dnn_spec(), segments=3)
    async with open_checkpointer(db) as saver:
        plane = compile_plane(saver)
        ready = EstimateReady(plan_id="plan-g", estimates=[plan.estimate])  # type: ignore[list-item]
        await plane.ainvoke(
            Command(resume=answer(ready, "e1"), update={"cause": "e1", "handled": ["e1"]}),
            CONFIG,
            context=PlaneContext(),
        )
        snapshot = await plane.aget_state(CONFIG)
        assert snapshot.interrupts[0].value == {"wait_for": ["plan.options_ready"]}
        assert snapshot.values["outbox"][-1]["type"] == "plan.build_requested"
        options = PlanOptionsReady(
            plan_id="plan-g", recommended=plan.model_copy(update={"reason": "r"})
        )
        await plane.ainvoke(
            Command(resume=answer(options, "e2"), update={"cause": "e2", "handled": ["e2"]}),
            CONFIG,
            context=PlaneContext(),
        )
        snapshot = await plane.aget_state(CONFIG)
        assert snapshot.values["status"] == "executing"
        approved = snapshot.values["outbox"][-1]
        assert approved["type"] == "plan.approved" and approved["cause"] == "e2"
        assert approved["payload"]["plan"]["status"] == "approved"
        finished = PlanFinished(plan_id="plan-g", status=PlanStatus.COMPLETED, reason="all done")
        await plane.ainvoke(
            Command(resume=answer(finished, "e3"), update={"cause": "e3", "handled": ["e3"]}),
            CONFIG,
            context=PlaneContext(),
        )
        snapshot = await plane.aget_state(CONFIG)
    assert snapshot.next == ()
    assert snapshot.values["status"] == "completed"
    assert snapshot.values["handled"] == ["c0", "e1", "e2", "e3"]


async def test_no_estimator_waits_for_profiling_and_a_failed_profile_fails_with_its_reason(
    tmp_path: Path,
) -> None:
    async with open_checkpointer(tmp_path / "plane.db") as saver:
        plane = compile_plane(saver)
        await plane.ainvoke(start_state(), CONFIG, context=PlaneContext())
        none = EstimateReady(plan_id="plan-g", estimates=[], needs_profiling=True)
        await plane.ainvoke(Command(resume=answer(none)), CONFIG, context=PlaneContext())
        snapshot = await plane.aget_state(CONFIG)
        assert snapshot.interrupts[0].value == {"wait_for": ["profile.completed"]}
        failed = ProfileCompleted(model="m", family="workload", ok=False, reason="job OOM")
        await plane.ainvoke(Command(resume=answer(failed)), CONFIG, context=PlaneContext())
        snapshot = await plane.aget_state(CONFIG)
    assert snapshot.values["status"] == "failed"
    assert snapshot.values["reason"] == "profiling m failed: job OOM"


async def test_estimation_rounds_are_bounded(tmp_path: Path) -> None:
    async with open_checkpointer(tmp_path / "plane.db") as saver:
        plane = compile_plane(saver)
        context = PlaneContext(max_estimate_rounds=2)
        await plane.ainvoke(start_state(), CONFIG, context=context)
        none = answer(EstimateReady(plan_id="plan-g", estimates=[], needs_profiling=True))
        done = answer(ProfileCompleted(model="m", family="workload"))
        for value in (none, done, none):
            await plane.ainvoke(Command(resume=value), CONFIG, context=context)
        snapshot = await plane.aget_state(CONFIG)
    assert snapshot.values["status"] == "failed"
    assert "after 2 rounds" in snapshot.values["reason"]


async def test_no_feasible_plan_fails_with_the_planners_reasons(tmp_path: Path) -> None:
    plan = make_plan("plan-g", dnn_spec())
    async with open_checkpointer(tmp_path / "plane.db") as saver:
        plane = compile_plane(saver)
        await plane.ainvoke(start_state(), CONFIG, context=PlaneContext())
        ready = EstimateReady(plan_id="plan-g", estimates=[plan.estimate])  # type: ignore[list-item]
        await plane.ainvoke(Command(resume=answer(ready)), CONFIG, context=PlaneContext())
        nothing = PlanOptionsReady(
            plan_id="plan-g", recommended=None, infeasible=["c/debug: needs 79 h"]
        )
        await plane.ainvoke(Command(resume=answer(nothing)), CONFIG, context=PlaneContext())
        snapshot = await plane.aget_state(CONFIG)
    assert snapshot.values["status"] == "failed"
    assert "c/debug: needs 79 h" in snapshot.values["reason"]
