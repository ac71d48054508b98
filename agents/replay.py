"""Agent-by-agent replay: feed one agent the events it consumed and compare what it says.

``rightsize replay LOG --agent NAME [--against MODULE[:CLASS]]`` reads an event log
(``agents.eventlog``: ``rightsize simulate --agents --event-log``, or the recorder at a
center), picks the events the agent consumed (every event on its topics, in log order,
as its consumer group saw them), and runs the agent's own sense -> decide -> act on each:

- **determinism** (no ``--against``): the production agent must emit what it emitted
  then, event for event;
- **a new version** (``--against``): the other class, built the same way, is diffed
  against the recorded actions: which causes now lead to different events, and how.

A recorded action is an event whose ``source`` is the agent and whose ``causation_id`` is
the consumed event (the events one cause led to compare as a set: a log interleaves
topics); events an agent publishes outside sense -> decide -> act (the
Scheduler's job monitors) have no cause and are not compared. Events are compared by
type, correlation id and payload, less what differs by nature between two runs (times).

The agent runs against a scratch knowledge base and simulated executors, never the real
ones: a copy of the SQLite file the run started from (``--kb``; ``simulate --agents``
writes it next to its log) or, without one, an empty one holding the seeded catalog. An
agent whose decisions read state that other agents wrote while the run went on (the
Scheduler reads plans the Intelligence Plane stored) or live queues (Optimization asks
the executors) sees that state as the scratch copy has it, so some of its differences
are the world's, not its own; the report counts matches per event type so that shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from agents.bus.memory import InMemoryBus
from agents.center import AgentName, CenterConfig, build_agent
from agents.eventlog import EventLogReader
from agents.events import Envelope
from agents.runtime import Agent
from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor
from tools.actuators.simulated import SimulatedCluster

__all__ = [
    "AGENT_CLASSES",
    "Difference",
    "ReplayReport",
    "causal_order",
    "load_agent_class",
    "replay_agent",
]

AGENT_CLASSES: dict[str, str] = {
    "intelligence": "agents.intelligence:IntelligencePlane",
    "estimation": "agents.estimation:ResourceEstimation",
    "optimization": "agents.optimization:Optimization",
    "profiling": "agents.profiling:Profiling",
    "scheduler": "agents.scheduler:Scheduler",
    "promotion": "agents.promotion:ModelPromotion",
}
VOLATILE = frozenset({"time", "at", "taken_at", "created_at", "updated_at", "now"})
MAX_DIFFERENCES = 50


class Difference(BaseModel):
    """One consumed event after which the replayed agent said something else."""

    model_config = ConfigDict(frozen=True)

    line: int = Field(description="Position of the cause among the consumed events (1-based)")
    cause_type: str
    cause_id: str
    correlation_id: str
    recorded: list[str] = Field(description="What the agent emitted then (type: payload)")
    replayed: list[str] = Field(description="What it emits now")
    changes: list[str] = Field(
        default_factory=list,
        description="Where the payloads differ (path: then -> now), for events of one type",
    )


class TypeTally(BaseModel):
    consumed: int = 0
    matched: int = 0


class ReplayReport(BaseModel):
    """What ``rightsize replay`` prints; ``identical`` is the verdict."""

    log: str
    agent: str
    against: str | None
    consumed: int = Field(description="Events on the agent's topics, fed in log order")
    compared: int = Field(description="Consumed events the agent (then or now) acted on")
    matched: int
    identical: bool
    skipped_lines: int = Field(description="Log lines that were not valid entries")
    by_type: dict[str, TypeTally]
    differences: list[Difference] = Field(description=f"The first {MAX_DIFFERENCES}")


def load_agent_class(spec: str) -> type[Agent[Any]]:
    """``module:Class`` or ``path/to/file.py:Class`` (or a name in ``AGENT_CLASSES``) as
    an Agent subclass."""
    target = AGENT_CLASSES.get(spec, spec)
    module_name, _, class_name = target.partition(":")
    if not class_name:
        raise InvalidInputError(
            "give MODULE:CLASS, e.g. mypkg.estimation:ResourceEstimation",
            field="against",
            value=spec,
        )
    try:
        module = _import(module_name)
    except (ImportError, OSError, SyntaxError) as exc:
        raise InvalidInputError(
            f"cannot import {module_name}: {exc}", field="against", value=spec
        ) from None
    found = getattr(module, class_name, None)
    if not (isinstance(found, type) and issubclass(found, Agent)):
        raise InvalidInputError(
            f"{module_name} has no agent class {class_name}", field="against", value=spec
        )
    return found


def _import(module_name: str) -> ModuleType:
    """A module by dotted name (the working directory first on the path, as ``python -m``
    has it) or a ``.py`` file's path."""
    if module_name.endswith(".py"):
        path = Path(module_name)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{module_name} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


def _normalized(event: Envelope) -> str:
    payload = event.payload.model_dump(mode="json")
    return f"{event.type}: {json.dumps(_without_volatile(payload), sort_keys=True)}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        flat = {}
        for index, item in enumerate(value):
            flat.update(_flat(item, f"{prefix}[{index}]"))
        return flat
    return {prefix: value}


def _changes(then: Sequence[str], now: Sequence[str], limit: int = 12) -> list[str]:
    """Leaf paths whose values differ, when both sides are one event of the same type."""
    if len(then) != 1 or len(now) != 1:
        return []
    (then_type, _, then_body), (now_type, _, now_body) = (
        then[0].partition(": "),
        now[0].partition(": "),
    )
    if then_type != now_type:
        return []
    try:
        before, after = _flat(json.loads(then_body)), _flat(json.loads(now_body))
    except ValueError:
        return []
    found = [
        f"{path}: {json.dumps(before.get(path))} -> {json.dumps(after.get(path))}"
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    ]
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def _executors(catalog: Catalog) -> dict[str, Executor]:
    """A simulated cluster per system, big enough for any of its partitions."""
    executors: dict[str, Executor] = {}
    for system in catalog.systems:
        nodes = max((p.max_nodes for p in system.partitions), default=1)
        cores = max((p.max_cores_per_node for p in system.partitions), default=1)
        memory = max((p.max_memory_mb for p in system.partitions), default=1)
        gpus = max((p.gpus_per_node for p in system.partitions), default=0)
        executors[system.name] = SimulatedCluster(
            nodes=max(nodes, 1),
            cores_per_node=max(cores, 1),
            memory_mb_per_node=max(memory, 1),
            gpus_per_node=gpus,
            system=system,
        )
    return executors


@contextlib.asynccontextmanager
async def _built(
    name: AgentName, agent_class: type[Agent[Any]], kb: KnowledgeBase, home: Path
) -> AsyncIterator[Agent[Any]]:
    """The agent, constructed as ``agents.center`` constructs the production one."""
    executors = _executors(await kb.get_catalog())
    bus = InMemoryBus()
    async with bus, contextlib.AsyncExitStack() as stack:
        config = CenterConfig(home=home)
        yield await build_agent(name, kb, executors, bus, config, stack, agent_class=agent_class)


def causal_order(entries: Sequence[tuple[str, Envelope]]) -> list[tuple[str, Envelope]]:
    """The log with every event after the event that caused it, otherwise as recorded.

    A recorder reads each topic partition in order but interleaves topics as its polls
    return them, so an answer can be logged before its question; an agent only ever saw
    the question first. (A stable topological sort over ``causation_id``.)
    """
    present = {event.id for _, event in entries}
    placed: set[object] = set()
    waiting: dict[object, list[tuple[str, Envelope]]] = {}
    ordered: list[tuple[str, Envelope]] = []

    def place(entry: tuple[str, Envelope]) -> None:
        stack = [entry]
        while stack:
            current = stack.pop()
            ordered.append(current)
            placed.add(current[1].id)
            stack.extend(reversed(waiting.pop(current[1].id, [])))

    for entry in entries:
        cause = entry[1].causation_id
        if cause is not None and cause in present and cause not in placed:
            waiting.setdefault(cause, []).append(entry)
        else:
            place(entry)
    for held in waiting.values():  # causes that never got placed (a cycle): as recorded
        ordered.extend(held)
    return ordered


def _consumed(entries: Iterable[tuple[str, Envelope]], topics: Sequence[str]) -> list[Envelope]:
    wanted = set(topics)
    return [event for topic, event in entries if topic in wanted]


async def replay_agent(
    log_path: Path,
    name: str,
    *,
    against: str | None = None,
    kb_path: Path | None = None,
    default_catalog: Callable[[], Catalog] | None = None,
) -> ReplayReport:
    """Feed agent ``name`` (or the ``against`` class) the events it consumed in the log."""
    if name not in AGENT_CLASSES:
        raise InvalidInputError(
            f"unknown agent; use one of {', '.join(AGENT_CLASSES)}", field="agent", value=name
        )
    if not await asyncio.to_thread(log_path.is_file):
        raise InvalidInputError("no such event log", field="log", value=str(log_path))
    production = load_agent_class(name)
    agent_class = load_agent_class(against) if against else production
    reader = EventLogReader(log_path)
    entries = causal_order(await asyncio.to_thread(lambda: [(e.topic, e.event) for e in reader]))
    consumed = _consumed(entries, production.topics)
    recorded: dict[str, list[str]] = {}
    for _, event in entries:
        if event.source == production.name and event.causation_id is not None:
            recorded.setdefault(str(event.causation_id), []).append(_normalized(event))

    with tempfile.TemporaryDirectory(prefix="rightsize-replay-") as scratch:
        home = Path(scratch)
        if kb_path is not None:
            if not await asyncio.to_thread(kb_path.is_file):
                raise InvalidInputError("no such knowledge base", field="kb", value=str(kb_path))
            await asyncio.to_thread(shutil.copyfile, kb_path, home / "kb.db")
        kb = SQLiteKnowledgeBase(home / "kb.db")
        try:
            if kb_path is None:
                if default_catalog is None:
                    raise InvalidInputError(
                        "give the knowledge base the run started from", field="kb", value=None
                    )
                await kb.put_catalog(default_catalog())
            async with _built(cast(AgentName, name), agent_class, kb, home) as agent:
                report = await _feed(agent, consumed, recorded)
        finally:
            await kb.close()
    return ReplayReport(
        log=str(log_path),
        agent=name,
        against=against,
        skipped_lines=len(reader.errors),
        **report,
    )


async def _feed(
    agent: Agent[Any], consumed: Sequence[Envelope], recorded: dict[str, list[str]]
) -> dict[str, Any]:
    by_type: dict[str, TypeTally] = {}
    differences: list[Difference] = []
    compared = matched = 0
    for position, event in enumerate(consumed, start=1):
        try:
            observation = await agent.sense(event)
            emits = await agent.act(agent.decide(observation), event) if observation else []
            now = [
                _normalized(
                    Envelope.of(
                        emit.payload,
                        source=agent.name,
                        correlation_id=emit.correlation_id or event.correlation_id,
                    )
                )
                for emit in emits
            ]
        except Exception as exc:  # the runner would dead-letter the event: a difference
            now = [f"error: {type(exc).__name__}: {exc}"]
        now.sort()  # a log interleaves topics: one cause's events compare as a set
        then = sorted(recorded.get(str(event.id), []))
        tally = by_type.setdefault(event.type, TypeTally())
        tally.consumed += 1
        if not now and not then:
            tally.matched += 1
            continue
        compared += 1
        if now == then:
            matched += 1
            tally.matched += 1
        elif len(differences) < MAX_DIFFERENCES:
            differences.append(
                Difference(
                    line=position,
                    cause_type=event.type,
                    cause_id=str(event.id),
                    correlation_id=event.correlation_id,
                    recorded=then,
                    replayed=now,
                    changes=_changes(then, now),
                )
            )
    return {
        "consumed": len(consumed),
        "compared": compared,
        "matched": matched,
        "identical": compared == matched,
        "by_type": by_type,
        "differences": differences,
    }
