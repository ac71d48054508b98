"""Wiring the six agents together: one bus, one knowledge base, the executors, one process or many.

    Center(bus, kb, executors, config)      the agents named in config.agents, each in
                                            its AgentRunner, plus the Scheduler's monitors

Two deployments, the same agents:

- **embedded** (one process): the in-process bus, a SQLite file, and the local SLURM if
  one answers, else the simulated cluster. A restart loses what was on the bus, so on
  start the Scheduler re-watches its jobs from the ledgers and the Intelligence Plane
  continues its open threads and asks again for answers it was waiting for.
- **center** (``rightsize center run --agent NAME`` per process): Kafka, MongoDB (or a
  shared SQLite file on one host), SLURM or Tapis. Each process runs one agent; replicas
  of an agent share its topics' partitions through their consumer group.

The composition root (``rightsize.commands.center``) reads the settings and builds the
bus, the knowledge base and the executors; this module only assembles agents from them
(agents never import the settings).

The Intelligence Plane's checkpoints live in the knowledge base (its SQLite file or its
MongoDB database: ``agents.intelligence.checkpointer``), so replicas of the plane share
them. State that only grows is pruned on a schedule while the center runs
(``RetentionPolicy``): every ``interval_s``, processed-event records (and their sent
outbox rows) older than ``keep_days``, the plane's checkpoints older than that but each
thread's latest, and the whole threads of plans that ended before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from agents.bus.base import Bus, Message
from agents.bus.kafka import KafkaBus, KafkaSettings
from agents.bus.memory import InMemoryBus
from agents.estimation import EstimationConfig, ResourceEstimation
from agents.events import Envelope, Payload
from agents.intelligence import IntelligencePlane, PlaneContext
from agents.intelligence.checkpointer import KnowledgeBaseSaver
from agents.intelligence.goals import GoalPlanner, RuleGoalPlanner
from agents.optimization import Optimization, OptimizationConfig
from agents.profiling import Profiling, ProfilingConfig
from agents.promotion import ModelPromotion, PromotionPolicy
from agents.runtime import Agent, AgentHealth, AgentRunner, Handled, RunnerSettings
from agents.scheduler import Scheduler, SchedulerConfig, shared_history
from agents.topics import ALL_TOPICS, DEFAULT_PARTITIONS, topic_for
from knowledge_base.checkpoints import checkpoint_store
from knowledge_base.errors import is_transient
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor
from tools.planning.chain import ChainConfig

__all__ = [
    "AGENT_NAMES",
    "AgentName",
    "Center",
    "CenterConfig",
    "Pruned",
    "RetentionPolicy",
    "build_agent",
    "open_bus",
    "publish",
]

log = logging.getLogger(__name__)

AgentName = Literal[
    "intelligence", "estimation", "optimization", "profiling", "scheduler", "promotion"
]
AGENT_NAMES: tuple[AgentName, ...] = (
    "intelligence",
    "estimation",
    "optimization",
    "profiling",
    "scheduler",
    "promotion",
)


class RetentionPolicy(BaseModel):
    """How long a running center keeps what it no longer needs, and how often it looks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_days: float = Field(
        default=7.0,
        gt=0,
        description="Processed-event records, plane checkpoints (each thread's latest "
        "excepted) and the threads of ended plans older than this are deleted",
    )
    interval_s: float = Field(default=3600.0, gt=0, description="How often to prune")


class Pruned(BaseModel):
    """What one pass of retention deleted."""

    processed_events: int = 0
    checkpoints: int = 0
    threads: int = 0


class CenterConfig(BaseModel):
    """Which agents run here and how each is set up."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    agents: tuple[AgentName, ...] = AGENT_NAMES
    home: Path = Field(description="Checkpoints, estimator artifacts and job directories")
    embedded: bool = Field(
        default=True, description="The bus is this process's own: recover what it lost on start"
    )
    approval: Literal["auto", "user"] = "auto"
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    optimization: OptimizationConfig = Field(default_factory=OptimizationConfig)
    estimation: EstimationConfig = Field(default_factory=EstimationConfig)
    profiling: ProfilingConfig = Field(default_factory=ProfilingConfig)
    promotion: PromotionPolicy = Field(default_factory=PromotionPolicy)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    chain: ChainConfig = Field(
        default_factory=ChainConfig,
        description="The estimator chain's settings (home, models, GPU traces), the same "
        "the CLI and the MCP server answer with: every agent that estimates shares it",
    )

    @property
    def artifacts_dir(self) -> Path:
        return self.home / "estimators"


def open_bus(kafka_bootstrap: str | None, *, client_id: str = "rightsize") -> Bus:
    """Kafka when a bootstrap address is given, else the in-process bus."""
    if kafka_bootstrap:
        return KafkaBus(KafkaSettings(bootstrap_servers=kafka_bootstrap, client_id=client_id))
    return InMemoryBus()


async def publish(bus: Bus, payload: Payload, *, correlation_id: str, source: str) -> Envelope:
    """Publish one event (from outside any agent: the CLI, a test, the demo)."""
    event = Envelope.of(payload, source=source, correlation_id=correlation_id)
    await bus.publish_many([Message.of(topic_for(event.type), event)])
    return event


A = TypeVar("A", bound=Agent[Any])


def _version(agent_class: type[Agent[Any]] | None, production: type[A]) -> type[A]:
    """The production class, or the given version of it (constructed the same way)."""
    return production if agent_class is None else cast(type[A], agent_class)


async def build_agent(
    name: AgentName,
    kb: KnowledgeBase,
    executors: Mapping[str, Executor],
    bus: Bus,
    config: CenterConfig,
    stack: contextlib.AsyncExitStack,
    *,
    goal_planner: GoalPlanner | None = None,
    agent_class: type[Agent[Any]] | None = None,
) -> Agent[Any]:
    """Agent ``name`` as the center runs it, or ``agent_class`` (a new version of it, for
    ``rightsize replay --against``) constructed the same way; what the agent opens (the
    plane's checkpoints) closes with ``stack``."""
    if name == "intelligence":
        # In the knowledge base's backend: replicas of the plane share the threads.
        saver = KnowledgeBaseSaver(checkpoint_store(kb))
        catalog = await kb.get_catalog()
        context = PlaneContext(
            goal_planner=goal_planner or RuleGoalPlanner(),
            approval=config.approval,
            systems=tuple(catalog.names()),
        )
        return _version(agent_class, IntelligencePlane)(kb, saver, context)
    if name == "estimation":
        return _version(agent_class, ResourceEstimation)(kb, config.estimation, chain=config.chain)
    if name == "optimization":
        return _version(agent_class, Optimization)(kb, executors, config.optimization)
    if name == "profiling":
        return _version(agent_class, Profiling)(kb, executors, config.profiling)
    if name == "scheduler":
        scheduler_config = config.scheduler
        if scheduler_config.work_dir is None:
            scheduler_config = scheduler_config.model_copy(
                update={"work_dir": config.home / "jobs"}
            )
        history = partial(shared_history, kb, config.chain)
        return _version(agent_class, Scheduler)(
            kb, executors, bus, scheduler_config, history=history
        )
    return _version(agent_class, ModelPromotion)(
        kb, config.artifacts_dir, policy=config.promotion, gpu_traces=config.chain.gpu_traces
    )


class Center:
    """The configured agents, running until ``stop()``."""

    def __init__(
        self,
        bus: Bus,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor],
        config: CenterConfig,
        *,
        goal_planner: GoalPlanner | None = None,
        observe: Callable[[Handled], None] | None = None,
    ) -> None:
        """``observe`` hears how every event each agent consumed ended (metrics)."""
        self.bus = bus
        self.kb = kb
        self.executors = dict(executors)
        self.config = config
        self.goal_planner = goal_planner or RuleGoalPlanner()
        self.observe = observe
        self.agents: dict[str, Agent[Any]] = {}
        self.runners: dict[str, AgentRunner] = {}
        self.scheduler: Scheduler | None = None
        self.plane: IntelligencePlane | None = None
        self._stack = contextlib.AsyncExitStack()
        self._stop = asyncio.Event()
        self._monitors: asyncio.Task[None] | None = None
        self._retention: asyncio.Task[None] | None = None

    async def _build(self) -> None:
        wanted = set(self.config.agents)
        for name in AGENT_NAMES:
            if name not in wanted:
                continue
            agent = await build_agent(
                name,
                self.kb,
                self.executors,
                self.bus,
                self.config,
                self._stack,
                goal_planner=self.goal_planner,
            )
            self.agents[name] = agent
            if isinstance(agent, Scheduler):
                self.scheduler = agent
            elif isinstance(agent, IntelligencePlane):
                self.plane = agent

    async def __aenter__(self) -> Self:
        try:
            await self.bus.start()
            self._stack.push_async_callback(self.bus.stop)
            if isinstance(self.bus, KafkaBus):
                await self.bus.create_topics(list(ALL_TOPICS), partitions=DEFAULT_PARTITIONS)
            await self._build()
            if self.scheduler is not None:
                watched = await self.scheduler.recover()
                if watched:
                    log.info("scheduler: watching %d jobs again", len(watched))
            for name, agent in self.agents.items():
                runner = AgentRunner(
                    agent, self.bus, self.kb, self.config.runner, observe=self.observe
                )
                await self._stack.enter_async_context(runner)
                self.runners[name] = runner
            if self.scheduler is not None:
                self._monitors = asyncio.create_task(
                    self.scheduler.run_monitors(self._stop), name="scheduler-monitors"
                )
            if self.plane is not None and self.config.embedded:
                touched = await self.plane.resume_open(self.bus)
                if touched:
                    log.info("intelligence plane: resumed %d open requests", len(touched))
            self._retention = asyncio.create_task(self._prune_forever(), name="retention")
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._monitors is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitors
        if self._retention is not None:
            self._retention.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention
        await self._stack.aclose()

    async def prune(self, now: datetime | None = None) -> Pruned:
        """One pass of retention (``RetentionPolicy``); ``now`` defaults to the wall clock."""
        before = (now or datetime.now(UTC)) - timedelta(days=self.config.retention.keep_days)
        pruned = Pruned(processed_events=await self.kb.prune_processed(before))
        if self.plane is not None:
            checkpoints, threads = await self.plane.prune(before)
            pruned = pruned.model_copy(update={"checkpoints": checkpoints, "threads": threads})
        return pruned

    async def _prune_forever(self) -> None:
        """Retention every ``interval_s`` while the center runs (the first pass at start)."""
        while not self._stop.is_set():
            try:
                pruned = await self.prune()
                log.info("retention: %s", pruned.model_dump_json())
            except Exception as exc:  # retention must never stop the agents
                level = logging.WARNING if is_transient(exc) else logging.ERROR
                log.log(level, "retention failed (%s): %s", type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.config.retention.interval_s)

    def stop(self) -> None:
        self._stop.set()

    async def wait(self) -> None:
        """Until ``stop()``, or until a runner stops on an error it cannot handle."""
        stopped = asyncio.ensure_future(self._stop.wait())
        tasks: list[asyncio.Future[Any]] = [stopped]
        tasks += [r._task for r in self.runners.values() if r._task is not None]
        if self._monitors is not None:
            tasks.append(self._monitors)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = None if task is stopped else task.exception()
                if error is not None:
                    raise error
        finally:
            stopped.cancel()

    def health(self) -> list[AgentHealth]:
        return [runner.health() for runner in self.runners.values()]

    async def request(self, payload: Payload, correlation_id: str) -> Envelope:
        return await publish(self.bus, payload, correlation_id=correlation_id, source="cli")

    @property
    def names(self) -> Sequence[str]:
        return list(self.agents)
