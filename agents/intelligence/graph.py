"""The Intelligence Plane's graph: one request from intake to follow-up, one thread per plan.

    intake -> execute                               a confirmed plan: run exactly it
    intake -> infer_goals -> request_estimates -> await_estimates
        -> [await_profiles -> request_estimates]   no estimator knows it: profile first
        -> request_plans -> await_plans -> choose
        -> [await_approval]                        when a person approves plans
        -> execute -> follow_up (until the plan is over) -> END
        follow_up -> [replan -> await_replan -> revise] -> follow_up
                                                   a running job diverged from the estimate
    any step that cannot go on -> fail -> END

A re-plan: the Scheduler asks (``plan.replan_requested``), Optimization answers with a plan
for the remaining work at the observed pace (``plan.options_ready``, ``replan``), and
``revise`` decides with ``agents.intelligence.replan.decide_replan`` (keep, extend the
cascade differently, resubmit, or stop, each with its reason) and hands the decision to
the Scheduler (``plan.replan_decided``, numbered: revision 1, 2...). At most
``context.replan.max_replans`` revisions change a plan; later requests are answered
``keep`` with that reason.

Nodes never publish or store anything themselves. A node that asks another agent for
something appends an ``Outgoing`` event to the state's outbox; a node that needs the
answer pauses the thread with ``interrupt({"wait_for": [event types]})``. The agent
(``agents.intelligence.agent``) publishes the outbox and resumes the thread with the
answer when it arrives. With a checkpointer (``langgraph.checkpoint.sqlite``, thread id =
plan id), every step is saved, so a plane that is killed and restarted carries on each
open request where it was.

Routing functions return ``Literal`` names, so the graph's shape is checked by type.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agents.events import (
    EstimateReady,
    EstimateRequested,
    Payload,
    PlanApproved,
    PlanBuildRequested,
    PlanDecision,
    PlanFinished,
    PlanOptionsReady,
    PlanReplanRequested,
    PlanRequested,
    ProfileCompleted,
)
from agents.intelligence.context import PlaneContext
from agents.intelligence.replan import decide_replan, reestimate
from agents.intelligence.state import WAIT_KEY, Outgoing, PlaneState
from agents.rescheduler import revise as revise_ledger
from knowledge_base.records import Plan, PlanRevision, PlanStatus, ResourceEstimate
from knowledge_base.workload import DNNTraining, WorkloadSpec

__all__ = ["build_graph", "builder", "compile_plane", "graph"]


def _emit(state: PlaneState, payload: Payload) -> dict[str, Any]:
    out = Outgoing(
        cause=state.get("cause") or "start",
        type=payload.event_type,
        payload=payload.model_dump(mode="json"),
    )
    return out.model_dump()


def _wait(*types: str) -> dict[str, Any]:
    """Pause the thread until one of ``types`` arrives; returns that event (type, payload)."""
    answer: dict[str, Any] = interrupt({WAIT_KEY: list(types)})
    return answer


def _spec(state: PlaneState) -> WorkloadSpec:
    return WorkloadSpec.model_validate(state["spec"])


# -- nodes --------------------------------------------------------------------------------


def intake(state: PlaneState) -> dict[str, Any]:
    request = PlanRequested.model_validate(state["request"])
    spec = request.spec
    workload = spec.workload
    what = workload.model if isinstance(workload, DNNTraining) else workload.application
    update: dict[str, Any] = {
        "status": "planning",
        "estimate_rounds": 0,
        "log": [f"intake: {spec.name!r} ({what}) for {spec.user}"],
    }
    if request.confirmed is not None:
        option = request.confirmed.option
        where = f"{option.system}/{option.partition}" if option else "?"
        update["spec"] = request.confirmed.spec.model_dump(mode="json")
        update["chosen"] = request.confirmed.model_dump(mode="json")
        update["log"] = [*update["log"], f"confirmed by {spec.user}: {where}, run as confirmed"]
    return update


def after_intake(state: PlaneState) -> Literal["infer_goals", "execute"]:
    return "execute" if state.get("chosen") else "infer_goals"


async def infer_goals(state: PlaneState, runtime: Runtime[PlaneContext]) -> dict[str, Any]:
    context = runtime.context
    request = PlanRequested.model_validate(state["request"])
    inferred = await context.goal_planner.infer(
        request.text, request.spec.goals, now=context.now(), systems=context.systems
    )
    spec = WorkloadSpec.model_validate(
        {**request.spec.model_dump(mode="json"), "goals": inferred.goals.model_dump(mode="json")}
    )
    read = "; ".join(inferred.notes) or "nothing beyond the stated goals"
    return {
        "spec": spec.model_dump(mode="json"),
        "goals_source": inferred.source,
        "log": [
            f"goals by {inferred.source}: objective {spec.goals.objective.value}; read: {read}"
        ],
    }


def request_estimates(state: PlaneState) -> dict[str, Any]:
    rounds = state.get("estimate_rounds", 0) + 1
    payload = EstimateRequested(plan_id=state["plan_id"], spec=_spec(state))
    return {
        "outbox": [_emit(state, payload)],
        "estimate_rounds": rounds,
        "log": [f"asked Resource Estimation for estimates (round {rounds})"],
    }


def await_estimates(state: PlaneState) -> dict[str, Any]:
    answer = EstimateReady.model_validate(_wait("estimate.ready")["payload"])
    ids = sorted({e.estimator_id for e in answer.estimates})
    return {
        "estimates": [e.model_dump(mode="json") for e in answer.estimates],
        "needs_profiling": answer.needs_profiling,
        "log": [
            f"{len(answer.estimates)} estimates ({', '.join(ids) or 'none'})"
            + ("; not confident: profiling asked for" if answer.needs_profiling else "")
        ],
    }


def after_estimates(
    state: PlaneState, runtime: Runtime[PlaneContext]
) -> Literal["request_plans", "await_profiles", "fail"]:
    if state.get("estimates"):
        return "request_plans"
    if state.get("needs_profiling") and (
        state.get("estimate_rounds", 0) < runtime.context.max_estimate_rounds
    ):
        return "await_profiles"
    return "fail"


def await_profiles(state: PlaneState) -> dict[str, Any]:
    answer = _wait("profile.completed")
    done = ProfileCompleted.model_validate(answer["payload"])
    if not done.ok:
        return {
            "reason": f"profiling {done.model} failed: {done.reason}",
            "log": ["profiling failed"],
        }
    return {"log": [f"profiled {done.model}: {len(done.profile_ids)} profile(s); estimating again"]}


def after_profiles(state: PlaneState) -> Literal["request_estimates", "fail"]:
    return "fail" if state.get("reason") else "request_estimates"


def request_plans(state: PlaneState) -> dict[str, Any]:
    estimates = [ResourceEstimate.model_validate(e) for e in state.get("estimates", [])]
    payload = PlanBuildRequested(plan_id=state["plan_id"], spec=_spec(state), estimates=estimates)
    return {
        "outbox": [_emit(state, payload)],
        "log": [f"asked Optimization for plans over {len(estimates)} estimates"],
    }


def await_plans(state: PlaneState) -> dict[str, Any]:
    answer = PlanOptionsReady.model_validate(_wait("plan.options_ready")["payload"])
    return {"options": answer.model_dump(mode="json")}


def after_plans(state: PlaneState) -> Literal["choose", "fail"]:
    options = state.get("options") or {}
    return "choose" if options.get("recommended") else "fail"


def choose(state: PlaneState, runtime: Runtime[PlaneContext]) -> dict[str, Any]:
    options = PlanOptionsReady.model_validate(state["options"])
    assert options.recommended is not None
    request = PlanRequested.model_validate(state["request"])
    approval = request.approval or runtime.context.approval
    if approval == "user":
        return {
            "status": "awaiting_approval",
            "log": [
                f"awaiting approval: recommended {options.recommended.reason}; "
                f"{len(options.alternatives)} alternatives"
            ],
        }
    return {
        "chosen": options.recommended.model_dump(mode="json"),
        "log": [f"chose automatically: {options.recommended.reason}"],
    }


def after_choose(state: PlaneState) -> Literal["execute", "await_approval"]:
    return "await_approval" if state.get("status") == "awaiting_approval" else "execute"


def await_approval(state: PlaneState) -> dict[str, Any]:
    decision = PlanDecision.model_validate(_wait("plan.decision")["payload"])
    options = PlanOptionsReady.model_validate(state["options"])
    if not decision.approved:
        return {
            "status": "rejected",
            "reason": f"not approved by {decision.by}: {decision.reason or 'no reason given'}",
            "log": [f"{decision.by} rejected the plan"],
        }
    choices = [p for p in [options.recommended, *options.alternatives] if p is not None]
    if decision.choice >= len(choices):
        return {
            "status": "failed",
            "reason": f"plan.decision choice {decision.choice} is not among the "
            f"{len(choices)} plans offered",
            "log": ["approval named a plan that was not offered"],
        }
    chosen = choices[decision.choice]
    return {
        "status": "planning",
        "chosen": chosen.model_dump(mode="json"),
        "log": [f"{decision.by} approved plan {decision.choice}: {chosen.reason}"],
    }


def after_approval(state: PlaneState) -> Literal["execute", "__end__"]:
    return "execute" if state.get("status") == "planning" and state.get("chosen") else "__end__"


def execute(state: PlaneState) -> dict[str, Any]:
    chosen = Plan.model_validate(state["chosen"]).model_copy(update={"status": PlanStatus.APPROVED})
    return {
        "status": "executing",
        "outbox": [_emit(state, PlanApproved(plan=chosen))],
        "log": [
            f"handed plan to the Scheduler: {chosen.option.partition if chosen.option else '?'}"
        ],
    }


def _finished(answer: dict[str, Any]) -> dict[str, Any]:
    finished = PlanFinished.model_validate(answer["payload"])
    status = {
        PlanStatus.COMPLETED: "completed",
        PlanStatus.CANCELLED: "cancelled",
    }.get(finished.status, "failed")
    return {
        "status": status,
        "reason": finished.reason,
        "replan": None,
        "log": [f"plan {status} after {len(finished.job_ids)} job(s): {finished.reason}"],
    }


def follow_up(state: PlaneState) -> dict[str, Any]:
    answer = _wait("plan.finished", "plan.replan_requested", "plan.options_ready")
    if answer["type"] == "plan.replan_requested":
        request = PlanReplanRequested.model_validate(answer["payload"])
        return {
            "replan": {"request": answer["payload"]},
            "log": [f"re-plan asked by the Scheduler: {request.reason}"],
        }
    if answer["type"] == "plan.options_ready":
        # A proposal nobody waits for (its request was past the re-plan bound): noted.
        proposal = PlanOptionsReady.model_validate(answer["payload"])
        what = proposal.recommended.reason if proposal.recommended else "nothing better fits"
        return {"log": [f"re-plan proposed while running, not acted on: {what}"]}
    return _finished(answer)


def after_follow_up(state: PlaneState) -> Literal["follow_up", "replan", "__end__"]:
    if state.get("status") != "executing":
        return "__end__"
    return "replan" if state.get("replan") else "follow_up"


def replan(state: PlaneState, runtime: Runtime[PlaneContext]) -> dict[str, Any]:
    """Number the re-plan, re-estimate at the observed pace, or answer at once past the bound."""
    pending = dict(state.get("replan") or {})
    request = PlanReplanRequested.model_validate(pending["request"])
    revision = state.get("replans", 0) + 1
    current = Plan.model_validate(state["chosen"])
    bounds = runtime.context.replan
    if revision > bounds.max_replans:
        decision = decide_replan(
            revision=revision, plan=current, request=request, proposal=None, bounds=bounds
        )
        return {
            "replan": None,
            "replans": revision,
            "outbox": [_emit(state, decision)],
            "log": [f"re-plan {revision}: {decision.action}: {decision.reason}"],
        }
    seen = "no pace to go on"
    if current.estimate is not None and request.projected_run_s:
        again = reestimate(current.estimate, request.projected_run_s).runtime_s
        was = current.estimate.runtime_s
        seen = (
            f"the whole run re-estimated at {again.point:.0f} s ({again.low:.0f}-"
            f"{again.high:.0f}) from {was.point:.0f} s ({was.low:.0f}-{was.high:.0f})"
        )
    return {
        "replan": {**pending, "revision": revision},
        "log": [
            f"re-plan {revision}: {seen}; Optimization plans the remaining "
            f"{request.remaining_fraction:.0%} at that pace"
        ],
    }


def after_replan(state: PlaneState) -> Literal["await_replan", "follow_up"]:
    return "await_replan" if state.get("replan") else "follow_up"


def await_replan(state: PlaneState) -> dict[str, Any]:
    answer = _wait("plan.options_ready", "plan.finished")
    if answer["type"] == "plan.finished":
        return _finished(answer)
    return {"replan": {**(state.get("replan") or {}), "proposal": answer["payload"]}}


def after_await_replan(state: PlaneState) -> Literal["revise", "__end__"]:
    return "revise" if state.get("status") == "executing" and state.get("replan") else "__end__"


def revise(state: PlaneState, runtime: Runtime[PlaneContext]) -> dict[str, Any]:
    """Decide what the re-plan changes, hand it to the Scheduler, and follow the new plan."""
    pending = state.get("replan") or {}
    request = PlanReplanRequested.model_validate(pending["request"])
    proposal = PlanOptionsReady.model_validate(pending["proposal"])
    revision = int(pending["revision"])
    current = Plan.model_validate(state["chosen"])
    decision = decide_replan(
        revision=revision,
        plan=current,
        request=request,
        proposal=proposal,
        bounds=runtime.context.replan,
    )
    changes = decision.action in ("extend", "resubmit")
    followed = revise_ledger(
        current,
        PlanRevision(revision=revision, action=decision.action, reason=decision.reason),
        option=decision.option if changes else None,
        estimate=decision.estimate,
        start_index=decision.start_index if changes else None,
        segments=decision.segments if changes else None,
    )
    return {
        "replan": None,
        "replans": revision,
        "chosen": (followed or current).model_dump(mode="json"),
        "outbox": [_emit(state, decision)],
        "log": [f"re-plan {revision}: {decision.action}: {decision.reason}"],
    }


def fail(state: PlaneState) -> dict[str, Any]:
    reason = state.get("reason") or _failure(state)
    return {"status": "failed", "reason": reason, "log": [f"failed: {reason}"]}


def _failure(state: PlaneState) -> str:
    options = state.get("options")
    if options is not None:
        answer = PlanOptionsReady.model_validate(options)
        why = "; ".join(answer.infeasible[:3]) or "no option in scope"
        return f"no plan meets every limit and goal: {why}"
    if state.get("needs_profiling"):
        return (
            f"no estimator knows the workload after {state.get('estimate_rounds', 0)} "
            "rounds of estimates and profiling"
        )
    return "no estimator could estimate the workload on any option in scope"


# -- the graph -------------------------------------------------------------------------------


def build_graph() -> StateGraph[PlaneState, PlaneContext, PlaneState, PlaneState]:
    g: StateGraph[PlaneState, PlaneContext, PlaneState, PlaneState] = StateGraph(
        PlaneState, context_schema=PlaneContext
    )
    g.add_node("intake", intake)
    g.add_node("infer_goals", infer_goals)
    g.add_node("request_estimates", request_estimates)
    g.add_node("await_estimates", await_estimates)
    g.add_node("await_profiles", await_profiles)
    g.add_node("request_plans", request_plans)
    g.add_node("await_plans", await_plans)
    g.add_node("choose", choose)
    g.add_node("await_approval", await_approval)
    g.add_node("execute", execute)
    g.add_node("follow_up", follow_up)
    g.add_node("replan", replan)
    g.add_node("await_replan", await_replan)
    g.add_node("revise", revise)
    g.add_node("fail", fail)
    g.add_edge(START, "intake")
    g.add_conditional_edges("intake", after_intake)
    g.add_edge("infer_goals", "request_estimates")
    g.add_edge("request_estimates", "await_estimates")
    g.add_conditional_edges("await_estimates", after_estimates)
    g.add_conditional_edges("await_profiles", after_profiles)
    g.add_edge("request_plans", "await_plans")
    g.add_conditional_edges("await_plans", after_plans)
    g.add_conditional_edges("choose", after_choose)
    g.add_conditional_edges("await_approval", after_approval)
    g.add_edge("execute", "follow_up")
    g.add_conditional_edges("follow_up", after_follow_up)
    g.add_conditional_edges("replan", after_replan)
    g.add_conditional_edges("await_replan", after_await_replan)
    g.add_edge("revise", "follow_up")
    g.add_edge("fail", END)
    return g


builder = build_graph()
graph: CompiledStateGraph[PlaneState, PlaneContext, PlaneState, PlaneState] = builder.compile()
"""The graph without a checkpointer (for drawing, and for one-shot runs)."""


def compile_plane(
    checkpointer: BaseCheckpointSaver[Any],
) -> CompiledStateGraph[PlaneState, PlaneContext, PlaneState, PlaneState]:
    """The graph with a checkpointer: what the plane runs, one thread per plan id."""
    return builder.compile(checkpointer=checkpointer)
