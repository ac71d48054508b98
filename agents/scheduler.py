"""The Scheduler / Orchestrator agent: submits approved plans, watches every job, reschedules.

Senses ``plan.approved`` (run a plan: the Intelligence Plane's choice, or a Profiling
run), the job events its own monitors publish (``job.state_changed``, ``job.progress``,
``job.finished``), ``plan.replan_decided`` (the Intelligence Plane's answer to a
re-plan) and ``plan.cancel_requested``; decides with the pure rules of
``agents.rescheduler``; acts through the actuator (``tools.actuators``) and the
knowledge base, publishing ``job.submitted``, a ``schedule.decision`` with the reason
for every choice, ``plan.replan_requested`` when a job's progress diverges from the
estimate, and ``plan.finished`` when a plan is over.

Its parts live in ``agents.scheduling``, each readable alone:

    observations.py   what it senses, one model per kind (a tagged union)
    sensing.py        from an event to an observation
    decisions.py      pure: one handler per kind, to actions
    submission.py     submitting exactly once (intent, then job id); recovery on start
    rescheduling.py   ending plans, re-plans, in-place walltime raises, cancels
    entries.py        reading and marking a plan's ledger
    memory.py         an out-of-memory job's predicted peak, from the history estimator
    queue_order.py    the rightsize order as priorities, after each monitor poll

Nothing is submitted twice: the ledger (``Plan.segments``) holds an intent before the
executor is called and the job id right after; events carry deterministic ids, so their
consumers drop repeats. Each system has one executor and one ``JobMonitor``;
``run_monitors`` polls them beside the agent's runner, and ``recover`` re-watches, after
a restart, every job the ledgers say is still in flight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial

from agents.bus.base import Bus
from agents.events import Envelope
from agents.monitor import JobMonitor
from agents.runtime import Action, Agent, Emit
from agents.scheduling.actions import (
    CancelByName,
    CancelJob,
    Conclude,
    ExtendWalltime,
    Purpose,
    RecordJob,
    RecordState,
    RequestReplan,
    Revise,
    Submit,
    WatchJob,
)
from agents.scheduling.config import SchedulerConfig
from agents.scheduling.decisions import decide
from agents.scheduling.entries import (
    ended_record,
    job_name,
    mark_state,
    reachable_limit_s,
    revision_key,
)
from agents.scheduling.memory import HistorySource, MemoryModel
from agents.scheduling.observations import SchedulerObservation
from agents.scheduling.queue_order import QueueOrdering
from agents.scheduling.rescheduling import Rescheduling
from agents.scheduling.sensing import Sensing
from agents.scheduling.submission import Submission
from agents.topics import JOBS, PLANS
from knowledge_base.cas import PlanRaced, update_job, update_plan
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor
from tools.planning.chain import ChainConfig

__all__ = [
    "CancelByName",
    "CancelJob",
    "Conclude",
    "ExtendWalltime",
    "PlanRaced",
    "Purpose",
    "RecordJob",
    "RecordState",
    "RequestReplan",
    "Revise",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerObservation",
    "Submit",
    "WatchJob",
    "job_name",
    "shared_history",
    "update_plan",
]

_reachable_limit_s = reachable_limit_s  # the name tests knew it by


class Scheduler(Sensing, Submission, Rescheduling, QueueOrdering, Agent[SchedulerObservation]):
    """Submits plans through the actuators, tracks every job and acts on its outcome.

    ``sense`` is ``Sensing``'s, ``decide`` is ``decisions.decide`` (pure), and ``act``
    hands each action to the part that carries it out."""

    name = "scheduler"
    topics = (PLANS, JOBS)

    def __init__(
        self,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor],
        bus: Bus,
        config: SchedulerConfig | None = None,
        *,
        history: HistorySource | None = None,
    ) -> None:
        """``history``: each system's history estimator, whose memory distribution an
        out-of-memory job is raised from (default: the process's shared one)."""
        self.kb = kb
        self.executors = dict(executors)
        self.config = config or SchedulerConfig()
        self.monitors = {
            system: JobMonitor(executor, bus, system=system, source=self.name)
            for system, executor in self.executors.items()
        }
        # job -> (first progress fraction seen, when): the base of its pace
        self._first_seen: dict[str, tuple[float, datetime]] = {}
        self.history = history or partial(shared_history, kb, ChainConfig())
        self._orders = {}  # system -> its last order round (queue_order.py)

    def decide(self, observation: SchedulerObservation) -> list[Action]:
        return decide(observation, systems=self.executors, policy=self.config.policy)

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Submit):
                emits.extend(await self._submit(action))
            elif isinstance(action, Conclude):
                emits.extend(await self._conclude(action))
            elif isinstance(action, RecordState):
                await update_plan(self.kb, action.plan_id, partial(mark_state, action))
            elif isinstance(action, RecordJob):
                ended = partial(ended_record, action.record)
                await update_job(self.kb, action.record.system, action.record.job_id, ended)
            elif isinstance(action, RequestReplan):
                emits.extend(await self._replan(action))
            elif isinstance(action, Revise):
                emits.extend(await self._revise(action))
            elif isinstance(action, ExtendWalltime):
                emits.extend(await self._extend(action))
            elif isinstance(action, CancelJob):
                await self._cancel(action)
            elif isinstance(action, CancelByName):
                await self._cancel_by_name(action)
            elif isinstance(action, WatchJob):
                self._watch(await self.kb.get_plan(action.plan_id), action.job_id)
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(f"Scheduler.act does not handle {type(action).__name__}")
        revisions = [a.decision for a in actions if isinstance(a, Revise)]
        for decision in revisions:  # done: a repeat of this revision is dropped in sense
            await self.kb.complete_event(f"{self.name}.revision", revision_key(decision))
        return emits


async def shared_history(kb: KnowledgeBase, config: ChainConfig, system: str) -> MemoryModel | None:
    """The process's history estimator of ``system`` in the chain of ``config`` (trained
    once, shared with planning)."""
    from tools.planning.service import shared_chain

    return await shared_chain(kb, config=config).history(system)
