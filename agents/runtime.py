"""The loop every agent runs in: sense -> decide -> act, with delivery guarantees.

An ``Agent`` supplies three steps:

- ``sense(event)`` filters and enriches an event (it may read the knowledge base) into an
  ``Observation``, or returns None for events it does not care about;
- ``decide(observation)`` is a pure function from the observation to ``Action``s, so it
  can be tested and replayed without a bus or a database;
- ``act(actions, cause)`` calls tools for the actions that need them and returns the
  events to publish (``Emit``).

``AgentRunner`` gives every agent the rest. For each batch of records it polls:

1. decode each; a message that is not an event is bound for the dead-letter topic;
2. skip those the knowledge base says this agent already processed (by event id);
3. sense, decide, act, in order, retrying with exponential backoff while the error is
   transient (``knowledge_base.errors.is_transient``: the error's own ``transient``, which
   its class defaults and a single failure may set); a non-transient error, or one that
   outlasts ``max_attempts``, sends the event to the dead-letter topic with the error;
4. ``kb.complete_event`` stores "processed" together with the events to publish (the
   outbox) in one transaction, so a crash cannot lose them and a redelivery cannot act
   twice;
5. commit the consumed offsets: their effects are stored, so nothing is lost if the
   process dies before publishing them;
6. a publisher task beside the loop publishes the pending outbox in order and marks it
   sent, so waiting for the broker's acknowledgements overlaps with the next batch.

Steps 4-5 run at the end of each batch and at least every ``flush_interval_s``.
Consuming pauses while more than ``max_unpublished`` messages wait in the outbox. A
knowledge base does steps 2 and 4 in one round trip per batch (``processed_ids``,
``complete_events``) instead of one per event.

Outgoing event ids are derived from the agent, the incoming id and the position
(uuid5), so an outbox re-published after a crash carries the same ids and is dropped by
the consumers' own dedupe. On start the runner publishes whatever a previous run left
in the outbox before consuming. ``stop()`` (or SIGTERM in ``agents.worker``) lets the
event in hand finish, commits, publishes the outbox, and leaves the rest of the batch
to be redelivered. The runner's own knowledge-base and broker calls are retried, with
backoff and a log line, for as long as they fail transiently.

Tool calls in ``act`` happen before step 4, so they may run again if the process dies
in between: give them the action's deterministic id as an idempotency key.

An observer (``AgentRunner(observe=...)``, e.g. ``agents.metrics.CenterMetrics.observe``)
is told how each consumed record ended (``Handled``); it runs inline and must be cheap,
and an error in it is logged, never allowed to stop the agent.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator

from agents.bus.base import Bus, CommitFailedError, Consumer, Message, Record
from agents.events import DeadLettered, Envelope, MalformedEventError, Payload, decode_event
from agents.events import event_id_for as _event_id_for
from agents.topics import DEAD_LETTER, topic_for
from knowledge_base.errors import is_transient
from knowledge_base.store import KnowledgeBase, OutboxMessage

__all__ = [
    "Action",
    "Agent",
    "AgentHealth",
    "AgentRunner",
    "Emit",
    "Handled",
    "Observation",
    "RunnerSettings",
    "is_transient",
    "settle",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Observation(BaseModel):
    """What an agent sensed: the event, plus whatever it looked up (subclass to add)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    event: Envelope


class Action(BaseModel):
    """Something an agent decided to do; subclass for tool calls, use ``Emit`` for events."""

    model_config = ConfigDict(frozen=True)


class Emit(Action):
    """Publish an event caused by the one being handled."""

    payload: SerializeAsAny[Payload]
    topic: str | None = Field(
        default=None, min_length=1, description="Default: the event type's topic"
    )
    correlation_id: str | None = Field(
        default=None, min_length=1, description="Default: the cause's"
    )

    @field_validator("payload")
    @classmethod
    def _registered(cls, value: Payload) -> Payload:
        if not value.event_type:
            raise ValueError(
                f"{type(value).__name__} is not a registered event payload (@register_event)"
            )
        return value


ObsT = TypeVar("ObsT", bound=Observation)


class Agent(abc.ABC, Generic[ObsT]):
    """One of Rightsize's agents: what it reads, how it senses, decides and acts."""

    #: Consumer group and dedupe namespace: replicas of one agent share it.
    name: str
    #: Topics whose events this agent senses.
    topics: Sequence[str]

    @abc.abstractmethod
    async def sense(self, event: Envelope) -> ObsT | None:
        """Filter and enrich ``event``; None means "not for me" (it is still marked done)."""

    @abc.abstractmethod
    def decide(self, observation: ObsT) -> list[Action]:
        """Pure: the actions this observation calls for."""

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        """Carry out ``actions``; return the events to publish.

        The default publishes ``Emit`` actions and refuses anything else; agents with
        tool calls override it.
        """
        emits: list[Emit] = []
        for action in actions:
            if not isinstance(action, Emit):
                raise NotImplementedError(
                    f"{type(self).__name__}.act does not handle {type(action).__name__}"
                )
            emits.append(action)
        return emits


class RunnerSettings(BaseModel):
    """Batching, retry and dead-letter settings of an ``AgentRunner``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str | None = Field(default=None, description="Default: the agent's name")
    batch_size: int = Field(default=500, ge=1, description="Most records handled per poll")
    poll_timeout_s: float = Field(default=0.5, gt=0)
    flush_interval_s: float = Field(
        default=0.1, ge=0, description="Publish and commit at least this often within a batch"
    )
    max_attempts: int = Field(default=5, ge=1, description="Tries of a transient handler error")
    backoff_initial_s: float = Field(default=0.05, gt=0)
    backoff_max_s: float = Field(default=5.0, gt=0)
    max_unpublished: int = Field(
        default=5000, ge=1, description="Stored but unpublished outbox messages before pausing"
    )
    dead_letter_topic: str = DEAD_LETTER
    lag_interval_s: float = Field(default=1.0, ge=0, description="How often health lag refreshes")


class AgentHealth(BaseModel):
    """A snapshot of a runner, for health endpoints and logs."""

    agent: str
    running: bool
    started_at: datetime | None
    last_event_at: datetime | None
    events_handled: int = Field(description="Completed (including those sense ignored)")
    events_duplicate: int = Field(description="Skipped: already processed by this agent")
    events_failed: int = Field(description="Dead-lettered because the handler raised")
    events_dead_lettered: int = Field(description="Sent to the dead-letter topic, any reason")
    retries: int = Field(description="Transient handler errors retried")
    consumer_lag: int | None = Field(description="Messages not yet committed, all partitions")
    lag_by_partition: dict[str, int] = Field(default_factory=dict)
    partitions: list[str] = Field(default_factory=list, description="Assigned to this replica")


def _wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Handled:
    """How one consumed record ended, for an observer (metrics): not stored anywhere."""

    agent: str
    event_type: str  # 'malformed' when the record was not an event
    outcome: Literal["handled", "failed", "malformed"]
    seconds: float  # sense, decide and act, retries included
    emitted: tuple[Payload, ...] = ()
    error_type: str | None = None


class _Stopped(Exception):
    """Stop was requested while waiting out an outage; leave without committing."""


class AgentRunner:
    """Runs one agent against a bus and a knowledge base until stopped."""

    def __init__(
        self,
        agent: Agent[Any],
        bus: Bus,
        kb: KnowledgeBase,
        settings: RunnerSettings | None = None,
        *,
        clock: Callable[[], datetime] = _wall_clock,
        observe: Callable[[Handled], None] | None = None,
    ) -> None:
        """``clock`` stamps the events the agent emits: a simulation passes its own;
        ``observe`` hears how each consumed record ended (metrics)."""
        self.agent = agent
        self.bus = bus
        self.kb = kb
        self.settings = settings or RunnerSettings()
        self.clock = clock
        self.observe = observe
        self.name = agent.name
        self.group_id = self.settings.group_id or agent.name
        self._stop = asyncio.Event()
        self._outbox_dirty = asyncio.Event()  # completions stored: the publisher has work
        self._drained = asyncio.Event()  # the publisher found the outbox empty
        self._closing = False
        self._unpublished = 0
        self._task: asyncio.Task[None] | None = None
        self._consumer: Consumer | None = None
        self._running = False
        self._started_at: datetime | None = None
        self._last_event_at: datetime | None = None
        self._handled = 0
        self._duplicates = 0
        self._failed = 0
        self._dead_lettered = 0
        self._retries = 0
        self._lag: dict[str, int] | None = None
        self._lag_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.run(), name=f"agent-{self.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self._task is not None:
            await self._task

    def stop(self) -> None:
        """Finish the event in hand, commit, and return from ``run``."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def run(self) -> None:
        """Consume until ``stop()``; raises only on errors no retry or dead letter can fix."""
        self._running = True
        self._started_at = datetime.now(UTC)
        log.info("agent %s starting (group %s)", self.name, self.group_id)
        try:
            await self._flush_outbox()
            consumer = self.bus.consumer(self.agent.topics, group_id=self.group_id)
            await self._until_stopped(consumer.start())
            self._consumer = consumer
            publisher = asyncio.create_task(self._publish_loop(), name=f"{self.name}-outbox")
            try:
                while not self.stopping:
                    await self._wait_for_publisher(publisher)
                    records = await self._poll(consumer)
                    if records:
                        await self._handle_batch(consumer, records)
                    await self._refresh_lag(consumer)
                self._closing = True  # the publisher drains the outbox, then returns
                self._outbox_dirty.set()
                await publisher
            finally:
                if not publisher.done():  # leaving on an error: do not leave it running
                    publisher.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await publisher
                self._consumer = None
                await consumer.stop()
        except _Stopped:
            log.info("agent %s stopped while waiting out an outage", self.name)
        finally:
            self._running = False
            log.info("agent %s stopped: %s", self.name, self.health().model_dump_json())

    # -- health -------------------------------------------------------------------------

    def health(self) -> AgentHealth:
        lag = self._lag
        consumer = self._consumer
        return AgentHealth(
            agent=self.name,
            running=self._running,
            started_at=self._started_at,
            last_event_at=self._last_event_at,
            events_handled=self._handled,
            events_duplicate=self._duplicates,
            events_failed=self._failed,
            events_dead_lettered=self._dead_lettered,
            retries=self._retries,
            consumer_lag=None if lag is None else sum(lag.values()),
            lag_by_partition=dict(lag or {}),
            partitions=sorted(str(tp) for tp in consumer.assignment()) if consumer else [],
        )

    async def lag(self) -> dict[str, int]:
        """Current consumer lag per partition (empty when not consuming)."""
        consumer = self._consumer
        if consumer is None:
            return {}
        return {str(tp): n for tp, n in (await consumer.lag()).items()}

    async def idle(self) -> bool:
        """Nothing left to consume (no lag) and nothing left to publish (empty outbox).

        A runner that is starting is not idle: until its consumer joins, its lag is unknown.
        """
        if self._consumer is None and self._task is not None and not self._task.done():
            return False
        if sum((await self.lag()).values()):
            return False
        return not await self.kb.pending_outbox(self.name, limit=1)

    async def _refresh_lag(self, consumer: Consumer) -> None:
        now = time.monotonic()
        if now - self._lag_at < self.settings.lag_interval_s:
            return
        self._lag_at = now
        try:
            self._lag = {str(tp): n for tp, n in (await consumer.lag()).items()}
        except Exception as exc:  # lag is advisory: never let it stop the agent
            log.debug("agent %s: lag unavailable: %s", self.name, exc)

    # -- the loop -----------------------------------------------------------------------

    async def _poll(self, consumer: Consumer) -> list[Record]:
        poll = asyncio.ensure_future(
            consumer.poll(
                max_records=self.settings.batch_size, timeout_s=self.settings.poll_timeout_s
            )
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not poll.done():
            poll.cancel()
            return []
        try:
            return poll.result()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("agent %s: poll failed (%s); retrying", self.name, exc)
            await self._sleep(self.settings.backoff_initial_s)
            return []

    async def _handle_batch(self, consumer: Consumer, records: Sequence[Record]) -> None:
        """Handle records in order; store, publish and commit as it goes.

        Completions are stored, the outbox published and offsets committed at the end
        of the batch, and also every ``flush_interval_s`` within it, so a slow handler
        does not hold finished work back. After ``stop()`` only the record in hand is
        finished; the rest of the batch is left uncommitted for redelivery.
        """
        decoded = [(record, _decode(record)) for record in records]
        seen = await self._infra(
            partial(self.kb.processed_ids, self.name, [inbox_id for _, (inbox_id, _) in decoded])
        )
        pending: list[_Completion] = []
        done: list[Record] = []
        last_flush = time.monotonic()
        for record, (inbox_id, event) in decoded:
            if self.stopping:
                break
            self._last_event_at = datetime.now(UTC)
            if inbox_id in seen:
                self._duplicates += 1
            else:
                if isinstance(event, MalformedEventError):
                    completion = self._dead_letter(record, inbox_id, None, event, attempts=1)
                    self._observed("malformed", "malformed", 0.0, error=event)
                else:
                    handled = await self._handle(record, inbox_id, event)
                    if handled is None:  # stop() came during its retries
                        break
                    completion = handled
                pending.append(completion)
                seen.add(inbox_id)
            done.append(record)
            if time.monotonic() - last_flush >= self.settings.flush_interval_s:
                await self._store(pending)
                await self._commit(consumer, done)
                pending, done = [], []
                last_flush = time.monotonic()
        await self._store(pending)
        await self._commit(consumer, done)

    async def _handle(self, record: Record, inbox_id: str, event: Envelope) -> _Completion | None:
        """Sense, decide, act with retries; the completion to store (None: stopped)."""
        attempt = 1
        started = time.perf_counter()
        while True:
            try:
                emits = await self._sense_decide_act(event)
            except Exception as exc:
                if not is_transient(exc) or attempt >= self.settings.max_attempts:
                    seconds = time.perf_counter() - started
                    self._observed(event.type, "failed", seconds, error=exc)
                    return self._dead_letter(record, inbox_id, event, exc, attempts=attempt)
                self._retries += 1
                delay = self._backoff(attempt)
                log.warning(
                    "agent %s: transient error on %s %s (attempt %d/%d), retrying in %.2f s: %s",
                    self.name,
                    event.type,
                    event.id,
                    attempt,
                    self.settings.max_attempts,
                    delay,
                    exc,
                )
                if not await self._sleep(delay):
                    return None
                attempt += 1
                continue
            outbox = [self._to_outbox(emit, event, index) for index, emit in enumerate(emits)]
            seconds = time.perf_counter() - started
            self._observed(event.type, "handled", seconds, tuple(e.payload for e in emits))
            return _Completion(inbox_id, outbox, "handled")

    def _observed(
        self,
        event_type: str,
        outcome: Literal["handled", "failed", "malformed"],
        seconds: float,
        emitted: tuple[Payload, ...] = (),
        *,
        error: BaseException | None = None,
    ) -> None:
        if self.observe is None:
            return
        try:
            self.observe(
                Handled(
                    agent=self.name,
                    event_type=event_type,
                    outcome=outcome,
                    seconds=seconds,
                    emitted=emitted,
                    error_type=None if error is None else type(error).__name__,
                )
            )
        except Exception:  # an observer's bug must not stop the agent
            log.exception("agent %s: observer failed", self.name)

    async def _sense_decide_act(self, event: Envelope) -> list[Emit]:
        observation = await self.agent.sense(event)
        if observation is None:
            return []
        actions = self.agent.decide(observation)
        if not actions:
            return []
        return await self.agent.act(actions, event)

    def _to_outbox(self, emit: Emit, cause: Envelope, index: int) -> OutboxMessage:
        payload = emit.payload
        # Every part is already valid (a validated payload of a registered type, the
        # cause's ids), so skip re-validating the envelope on this hot path.
        envelope = Envelope.model_construct(
            id=_event_id_for(self.name, cause.id, index),
            type=payload.event_type,
            time=self.clock(),
            source=self.name,
            correlation_id=emit.correlation_id or cause.correlation_id,
            causation_id=cause.id,
            schema_version=payload.schema_version,
            payload=payload,
        )
        return OutboxMessage(
            message_id=str(envelope.id),
            topic=emit.topic or topic_for(envelope.type),
            key=envelope.correlation_id,
            value=envelope.model_dump_json(),
        )

    def _dead_letter(
        self,
        record: Record,
        inbox_id: str,
        event: Envelope | None,
        exc: BaseException,
        *,
        attempts: int,
    ) -> _Completion:
        """The completion that sends ``record`` to the dead-letter topic with ``exc``."""
        payload = DeadLettered(
            agent=self.name,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            original_b64=base64.b64encode(record.value).decode(),
            original_event_id=event.id if event is not None else None,
            error_type=type(exc).__name__,
            error=str(exc),
            attempts=attempts,
        )
        envelope = Envelope.of(
            payload,
            source=self.name,
            correlation_id=(event.correlation_id if event is not None else record.key)
            or "dead-letter",
            causation_id=event.id if event is not None else None,
            id=_event_id_for(self.name, inbox_id, "dead-letter"),
            time=self.clock(),
        )
        log.warning(
            "agent %s: dead-lettering %s@%d after %d attempt(s) (%s): %s",
            self.name,
            record.tp,
            record.offset,
            attempts,
            type(exc).__name__,
            exc,
        )
        message = OutboxMessage(
            message_id=str(envelope.id),
            topic=self.settings.dead_letter_topic,
            key=envelope.key,
            value=envelope.model_dump_json(),
        )
        kind: _Kind = "dead_lettered" if isinstance(exc, MalformedEventError) else "failed"
        return _Completion(inbox_id, [message], kind)

    async def _store(self, completions: Sequence[_Completion]) -> None:
        """Store completions with their outboxes (atomically) and wake the publisher."""
        if not completions:
            return
        stored = await self._infra(
            partial(
                self.kb.complete_events, self.name, [(c.inbox_id, c.outbox) for c in completions]
            )
        )
        for completion, new in zip(completions, stored, strict=True):
            if not new:  # another replica completed it since we checked
                self._duplicates += 1
                continue
            self._unpublished += len(completion.outbox)
            if completion.kind == "handled":
                self._handled += 1
            else:
                self._dead_lettered += 1
                if completion.kind == "failed":
                    self._failed += 1
        self._outbox_dirty.set()

    async def _publish_loop(self) -> None:
        """Publish the outbox whenever completions were stored, until told to close.

        Runs beside the consuming loop so that handling the next batch overlaps with
        waiting for the broker to acknowledge the last one's events.
        """
        while True:
            await self._outbox_dirty.wait()
            self._outbox_dirty.clear()
            await self._flush_outbox()
            if self._closing and not self._outbox_dirty.is_set():
                return

    async def _wait_for_publisher(self, publisher: asyncio.Task[None]) -> None:
        """Re-raise what stopped the publisher; pause consuming while it is far behind."""
        while True:
            if publisher.done():
                publisher.result()
            if self._unpublished <= self.settings.max_unpublished or self.stopping:
                return
            self._drained.clear()
            drained = asyncio.ensure_future(self._drained.wait())
            stopped = asyncio.ensure_future(self._stop.wait())
            try:
                await asyncio.wait(
                    {drained, stopped, publisher}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                drained.cancel()
                stopped.cancel()

    async def _flush_outbox(self) -> None:
        """Publish what completed events left in the outbox, oldest first, then mark it sent."""
        limit = max(self.settings.batch_size, 100)
        while True:
            pending = await self._infra(lambda: self.kb.pending_outbox(self.name, limit=limit))
            if not pending:
                break
            messages = [Message(m.topic, m.value.encode(), m.key) for m in pending]
            await self._infra(partial(self.bus.publish_many, messages))
            ids = [m.message_id for m in pending]
            await self._infra(partial(self.kb.mark_outbox_sent, self.name, ids))
            if len(pending) < limit:
                break
        # Stores that land while the last query ran also set _outbox_dirty, so the
        # publisher comes back for them; the count is only for back-pressure.
        self._unpublished = 0
        self._drained.set()

    async def _commit(self, consumer: Consumer, records: Sequence[Record]) -> None:
        if not records:
            return
        try:
            await self._infra(lambda: consumer.commit_records(records))
        except CommitFailedError as exc:
            # The partitions moved to another member, which will read these records
            # again and skip them as already processed.
            log.info("agent %s: %s", self.name, exc)

    # -- retries ------------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        delay: float = self.settings.backoff_initial_s * 2 ** (attempt - 1)
        return min(delay, self.settings.backoff_max_s)

    async def _sleep(self, delay_s: float) -> bool:
        """Sleep unless stop() comes first; True if the full delay passed."""
        try:
            await asyncio.wait_for(self._stop.wait(), delay_s)
        except TimeoutError:
            return True
        return False

    async def _until_stopped(self, work: Awaitable[T]) -> T:
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
            raise _Stopped
        return task.result()

    async def _infra(self, call: Callable[[], Awaitable[T]]) -> T:
        """The runner's own KB and broker calls: retried while transient, until stop()."""
        attempt = 1
        while True:
            try:
                return await call()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                delay = self._backoff(attempt)
                log.warning(
                    "agent %s: %s (attempt %d); retrying in %.2f s", self.name, exc, attempt, delay
                )
                if not await self._sleep(delay):
                    raise _Stopped from exc
                attempt += 1


_Kind = Literal["handled", "failed", "dead_lettered"]


@dataclass(frozen=True, slots=True)
class _Completion:
    """What to store for one consumed record: its id, the outbox, and how it ended."""

    inbox_id: str
    outbox: list[OutboxMessage]
    kind: _Kind


def _decode(record: Record) -> tuple[str, Envelope | MalformedEventError]:
    """The record's dedupe id and its event (or why it is not one)."""
    try:
        event = decode_event(record.value)
    except MalformedEventError as exc:
        # Not an event, so no id: its position and content stand in for one.
        digest = hashlib.sha256(record.value).hexdigest()
        raw_id = uuid.uuid5(uuid.NAMESPACE_OID, f"{record.tp}@{record.offset}:{digest}")
        return f"raw:{raw_id}", exc
    return str(event.id), event


async def settle(
    runners: Sequence[AgentRunner], *, timeout_s: float, pause_s: float = 0.002
) -> None:
    """Until every runner has consumed what it was sent and published its outbox.

    For in-process runs (simulations, tests) that move a clock between quiet spells.
    Settled takes two idle looks in a row: between one runner's look and the next's, the
    first may publish to the second, so a single idle look proves nothing. Raises
    TimeoutError after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < 2:
        await asyncio.sleep(0)
        idle = [await runner.idle() for runner in runners]  # every look reads every runner
        quiet = quiet + 1 if all(idle) else 0
        if quiet:
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"the agents did not settle in {timeout_s} s")
        await asyncio.sleep(pause_s)
