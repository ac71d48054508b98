"""The Intelligence Plane as an agent on the shared runtime: events in, graph steps, events out.

Senses the events that start or answer a request (``plan.requested``, ``estimate.ready``,
``profile.completed``, ``plan.options_ready``, ``plan.decision``, ``plan.finished``, and
``plan.replan_requested`` while a plan runs) and
looks at the request's thread in the checkpointer: a new plan id starts a thread, an
answer the thread is paused for resumes it, a thread killed mid-step is continued, and
an event the thread already applied (a redelivery) is only replayed. Decide is the pure
mapping from that to one action; act runs the graph (``agents.intelligence.graph``),
then publishes the outbox entries the step produced for this event, in order, and keeps
the plan's record in the knowledge base in step (draft, awaiting approval, approved;
failed before it ever ran).

Why nothing is lost or done twice when the plane is killed: the checkpointer saves the
thread after every node, outbox included; the runtime completes an event (and commits
its offset) only after act returned. Killed before that, the event is redelivered: the
thread either carries on from its last saved node or, if the step had finished, the
same outbox entries are returned again, and the runtime gives them the same ids
(derived from this agent, the cause and the position), which consumers drop. The
Scheduler's own ledger makes a second ``plan.approved`` harmless in any case.

``resume_open`` is for a restart that lost the bus too (the in-process bus of the
embedded deployment): it continues threads killed mid-step and asks again for the
answers paused threads were waiting for.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from agents.bus.base import Bus, Message
from agents.events import (
    EVENT_TYPES,
    Envelope,
    EstimateReady,
    Payload,
    PlanDecision,
    PlanFinished,
    PlanOptionsReady,
    PlanReplanRequested,
    PlanRequested,
    ProfileCompleted,
    event_id_for,
)
from agents.intelligence.checkpointer import KnowledgeBaseSaver
from agents.intelligence.context import PlaneContext
from agents.intelligence.graph import compile_plane
from agents.intelligence.state import WAIT_KEY, Outgoing, PlaneState
from agents.runtime import Action, Agent, Emit, Observation
from agents.scheduler import update_plan
from agents.topics import ESTIMATES, PLANS, PROFILES, topic_for
from knowledge_base.errors import NotFoundError
from knowledge_base.records import Plan, PlanStatus
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import WorkloadSpec

__all__ = [
    "IntelligencePlane",
    "PlaneAction",
    "PlaneObservation",
    "open_checkpointer",
    "thread_ids",
]

log = logging.getLogger(__name__)

PlaneGraph = CompiledStateGraph[PlaneState, PlaneContext, PlaneState, PlaneState]
_OPEN = ("planning", "awaiting_approval", "executing")
# What a paused thread waits for -> the request that asks for it (re-sent by resume_open).
_ASKED_BY = {
    "estimate.ready": "estimate.requested",
    "profile.completed": "estimate.requested",
    "plan.options_ready": "plan.build_requested",
    "plan.finished": "plan.approved",
}


def _prepared(path: Path | str) -> str:
    where = Path(path).expanduser()
    where.parent.mkdir(parents=True, exist_ok=True)
    return str(where)


@contextlib.asynccontextmanager
async def open_checkpointer(path: Path | str) -> AsyncIterator[AsyncSqliteSaver]:
    """The SQLite checkpointer the plane saves every thread's steps in."""
    async with AsyncSqliteSaver.from_conn_string(_prepared(path)) as saver:
        yield saver


async def thread_ids(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Every thread (plan id) the checkpointer holds: from the knowledge base's index, or
    (a checkpointer of another kind) by reading every checkpoint."""
    if isinstance(saver, KnowledgeBaseSaver):
        return await saver.athreads()
    seen: dict[str, None] = {}
    async for checkpoint in saver.alist(None):
        seen[str(checkpoint.config["configurable"]["thread_id"])] = None
    return list(seen)


def _plan_id(payload: Payload) -> str | None:
    if isinstance(
        payload,
        PlanRequested
        | EstimateReady
        | PlanOptionsReady
        | PlanDecision
        | ProfileCompleted
        | PlanReplanRequested,
    ):
        return payload.plan_id  # None on a profile: every thread waiting for it
    if isinstance(payload, PlanFinished):
        return payload.plan_id if payload.purpose == "workload" else None
    return None


def _answers(snapshot: StateSnapshot, payload: Payload) -> bool:
    """Whether ``payload`` is the answer the paused node waits for (not a late one).

    Optimization answers both a plan request and a re-plan with ``plan.options_ready``;
    the flag says which, and each waiting node takes only its own.
    """
    if not isinstance(payload, PlanOptionsReady):
        return True
    if "await_replan" in snapshot.next:
        return payload.replan
    if "await_plans" in snapshot.next:
        return not payload.replan
    return True


def _waits(snapshot: StateSnapshot) -> set[str]:
    found: set[str] = set()
    for interrupt in snapshot.interrupts:
        value = interrupt.value
        if isinstance(value, dict):
            found.update(value.get(WAIT_KEY, []))
    return found


class PlaneAction(Action):
    """Start, resume, continue or replay one thread (one plan)."""

    kind: Literal["start", "resume", "continue", "replay"]
    plan_id: str
    value: dict[str, Any] | None = None


class PlaneObservation(Observation):
    """The threads this event starts or answers, and how."""

    steps: list[PlaneAction]


class IntelligencePlane(Agent[PlaneObservation]):
    """Coordinates each request through its LangGraph thread."""

    name = "intelligence-plane"
    topics = (PLANS, ESTIMATES, PROFILES)

    def __init__(
        self,
        kb: KnowledgeBase,
        checkpointer: BaseCheckpointSaver[Any],
        context: PlaneContext | None = None,
    ) -> None:
        self.kb = kb
        self.checkpointer = checkpointer
        self.graph: PlaneGraph = compile_plane(checkpointer)
        self.context = context or PlaneContext()

    @staticmethod
    def config(plan_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": plan_id}}

    async def snapshot(self, plan_id: str) -> StateSnapshot:
        return await self.graph.aget_state(self.config(plan_id))

    # -- sense / decide -------------------------------------------------------------------

    async def sense(self, event: Envelope) -> PlaneObservation | None:
        payload = event.payload
        plan_id = _plan_id(payload)
        if plan_id is not None:
            plan_ids = [plan_id]
        elif isinstance(payload, ProfileCompleted):
            plan_ids = await self._waiting_for_profile(payload.model)
        else:
            return None
        steps = [s for pid in plan_ids if (s := await self._step_for(event, pid)) is not None]
        return PlaneObservation(event=event, steps=steps) if steps else None

    async def _waiting_for_profile(self, model: str) -> list[str]:
        """Open threads paused for a profile of ``model`` (a profile answers them all).

        Only threads of plans still being planned (DRAFT) can wait for one: their
        snapshots are read, not every thread's."""
        drafts = {p.id for p in await self.kb.list_plans(status=PlanStatus.DRAFT)}
        waiting = []
        for plan_id in await thread_ids(self.checkpointer):
            if plan_id not in drafts:
                continue
            snapshot = await self.snapshot(plan_id)
            values: PlaneState = snapshot.values  # type: ignore[assignment]
            spec = values.get("spec") or {}
            if (
                "profile.completed" in _waits(snapshot)
                and spec.get("workload", {}).get("model") == model
            ):
                waiting.append(plan_id)
        return waiting

    async def _step_for(self, event: Envelope, plan_id: str) -> PlaneAction | None:
        snapshot = await self.snapshot(plan_id)
        values: PlaneState = snapshot.values  # type: ignore[assignment]
        value = {
            "type": event.type,
            "id": str(event.id),
            "payload": event.payload.model_dump(mode="json"),
        }
        if not values:
            if isinstance(event.payload, PlanRequested):
                return PlaneAction(kind="start", plan_id=plan_id, value=value)
            return None
        mid_step = bool(snapshot.next) and not snapshot.interrupts
        if str(event.id) in values.get("handled", []):
            return PlaneAction(kind="continue" if mid_step else "replay", plan_id=plan_id)
        if mid_step:
            return PlaneAction(kind="continue", plan_id=plan_id, value=value)
        if event.type in _waits(snapshot) and _answers(snapshot, event.payload):
            return PlaneAction(kind="resume", plan_id=plan_id, value=value)
        return None  # not what the thread waits for (a late or duplicate answer)

    def decide(self, observation: PlaneObservation) -> list[Action]:
        return list(observation.steps)

    # -- act --------------------------------------------------------------------------------

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if not isinstance(action, PlaneAction):
                raise NotImplementedError(type(action).__name__)
            await self._step(action, cause)
            emits.extend(await self._outbox(action.plan_id, str(cause.id)))
            await self._record(action.plan_id)
        return emits

    async def _step(self, action: PlaneAction, cause: Envelope) -> None:
        config = self.config(action.plan_id)
        cause_id = str(cause.id)
        if action.kind == "start":
            assert action.value is not None
            initial: PlaneState = {
                "plan_id": action.plan_id,
                "cause": cause_id,
                "request": action.value["payload"],
                "handled": [cause_id],
            }
            await self.graph.ainvoke(initial, config, context=self.context)
        elif action.kind == "resume":
            assert action.value is not None
            await self.graph.ainvoke(
                Command(resume=action.value, update={"cause": cause_id, "handled": [cause_id]}),
                config,
                context=self.context,
            )
        elif action.kind == "continue":
            await self.graph.ainvoke(None, config, context=self.context)
            if action.value is not None:  # the event itself is still to be applied
                snapshot = await self.snapshot(action.plan_id)
                if action.value["type"] in _waits(snapshot) and _answers(snapshot, cause.payload):
                    await self._step(action.model_copy(update={"kind": "resume"}), cause)
        # "replay": the step is done; only its outbox is returned again

    async def _outbox(self, plan_id: str, cause_id: str) -> list[Emit]:
        values: PlaneState = (await self.snapshot(plan_id)).values  # type: ignore[assignment]
        emits = []
        for entry in values.get("outbox", []):
            out = Outgoing.model_validate(entry)
            if out.cause != cause_id:
                continue
            payload = EVENT_TYPES[out.type].model_validate(out.payload)
            emits.append(Emit(payload=payload, correlation_id=plan_id))
        return emits

    async def _record(self, plan_id: str) -> None:
        """Keep the plan's record in step with the thread until the Scheduler owns it."""
        values: PlaneState = (await self.snapshot(plan_id)).values  # type: ignore[assignment]
        status = values.get("status", "planning")
        spec = WorkloadSpec.model_validate(values.get("spec") or values["request"]["spec"])
        chosen = Plan.model_validate(values["chosen"]) if values.get("chosen") else None
        if chosen is None and status == "awaiting_approval" and values.get("options"):
            # What the person is asked to approve: the recommended plan.
            offered = PlanOptionsReady.model_validate(values["options"]).recommended
            chosen = offered
        target = {
            "planning": PlanStatus.DRAFT,
            "awaiting_approval": PlanStatus.AWAITING_APPROVAL,
            "executing": PlanStatus.APPROVED,
            "failed": PlanStatus.FAILED,
            "rejected": PlanStatus.CANCELLED,
            "cancelled": PlanStatus.CANCELLED,
        }.get(status)
        if target is None:
            return  # completed: the Scheduler recorded it
        reason = values.get("reason") or (chosen.reason if chosen else "")

        def change(plan: Plan) -> Plan | None:
            if plan.status not in (PlanStatus.DRAFT, PlanStatus.AWAITING_APPROVAL):
                return None  # approved or further: the Scheduler's ledger
            update: dict[str, Any] = {"status": target, "spec": spec, "reason": reason}
            if chosen is not None:
                update.update(
                    option=chosen.option,
                    estimate=chosen.estimate,
                    expected_cost=chosen.expected_cost,
                    expected_wait_s=chosen.expected_wait_s,
                    segments=chosen.segments,
                )
            changed = plan.model_copy(update=update)
            return None if changed == plan else changed

        try:
            await update_plan(self.kb, plan_id, change)
        except NotFoundError:
            with contextlib.suppress(Exception):  # a race with the Scheduler creating it
                await self.kb.put_plan(
                    Plan(id=plan_id, user=spec.user, spec=spec, status=PlanStatus.DRAFT)
                )
            await update_plan(self.kb, plan_id, change)

    # -- retention -----------------------------------------------------------------------------

    async def prune(self, before: datetime) -> tuple[int, int]:
        """Retention: (checkpoints, threads) deleted.

        Every thread loses its checkpoints saved before ``before`` but its latest (a
        paused or running request resumes from that one); a thread whose plan is over
        (completed, failed, cancelled; or gone from the knowledge base) and whose latest
        checkpoint is older than ``before`` goes whole. Only the knowledge base's
        checkpointer prunes; another kind is left as it is (0, 0).
        """
        saver = self.checkpointer
        if not isinstance(saver, KnowledgeBaseSaver):
            return 0, 0
        pruned = await saver.aprune_older_than(before)
        ended = (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)
        threads = 0
        for plan_id in await saver.athreads():
            try:
                over = (await self.kb.get_plan(plan_id)).status in ended
            except NotFoundError:
                over = True
            if not over:
                continue
            latest = await saver.store.get(plan_id, "")
            if latest is None or latest.saved_at < before:
                await saver.adelete_thread(plan_id)
                threads += 1
        return pruned, threads

    # -- after a restart that lost the bus ----------------------------------------------------

    async def resume_open(self, bus: Bus) -> list[str]:
        """Carry on every open thread; returns the plan ids it touched."""
        touched = []
        for plan_id in await thread_ids(self.checkpointer):
            snapshot = await self.snapshot(plan_id)
            values: PlaneState = snapshot.values  # type: ignore[assignment]
            if values.get("status") not in _OPEN:
                continue
            touched.append(plan_id)
            if snapshot.next and not snapshot.interrupts:
                await self.graph.ainvoke(None, self.config(plan_id), context=self.context)
                cause = values.get("cause", "start")
                emits = await self._outbox(plan_id, cause)
                await self._publish(
                    bus,
                    plan_id,
                    emits,
                    ids=[event_id_for(self.name, cause, i) for i in range(len(emits))],
                )
                await self._record(plan_id)
                continue
            await self._ask_again(bus, plan_id, snapshot)
        return touched

    async def _ask_again(self, bus: Bus, plan_id: str, snapshot: StateSnapshot) -> None:
        waits = _waits(snapshot)
        values: PlaneState = snapshot.values  # type: ignore[assignment]
        if "plan.finished" in waits:
            with contextlib.suppress(NotFoundError):
                plan = await self.kb.get_plan(plan_id)
                if plan.status in (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED):
                    # It ended while the plane was down and the news was lost with the bus.
                    finished = PlanFinished(
                        plan_id=plan_id,
                        status=plan.status,
                        reason=plan.reason,
                        job_ids=[s.job_id for s in plan.segments if s.job_id],
                    )
                    event = Envelope.of(
                        finished,
                        source=self.name,
                        correlation_id=plan_id,
                        id=event_id_for(self.name, plan_id, "finished-from-kb"),
                    )
                    await bus.publish_many([Message.of(topic_for(event.type), event)])
                    return
        pending = values.get("replan") or {}
        if "await_replan" in snapshot.next and pending.get("request"):
            # Optimization's answer to the re-plan was lost: ask it again.
            request = PlanReplanRequested.model_validate(pending["request"])
            await self._publish(bus, plan_id, [Emit(payload=request)], ids=[uuid.uuid4()])
            log.info("plan %s: re-plan asked again (waits for %s)", plan_id, waits)
            return
        asked = {_ASKED_BY[w] for w in waits if w in _ASKED_BY}
        outbox = [Outgoing.model_validate(e) for e in values.get("outbox", [])]
        for out in reversed(outbox):
            if out.type in asked:
                payload = EVENT_TYPES[out.type].model_validate(out.payload)
                # A fresh id: the first copy may have been handled and its answer lost.
                await self._publish(bus, plan_id, [Emit(payload=payload)], ids=[uuid.uuid4()])
                log.info("plan %s: asked again with %s (waits for %s)", plan_id, out.type, waits)
                return

    async def _publish(
        self, bus: Bus, plan_id: str, emits: Sequence[Emit], *, ids: Sequence[uuid.UUID]
    ) -> None:
        messages = []
        for emit, event_id in zip(emits, ids, strict=True):
            event = Envelope.of(emit.payload, source=self.name, correlation_id=plan_id, id=event_id)
            messages.append(Message.of(emit.topic or topic_for(event.type), event))
        if messages:
            await bus.publish_many(messages)
