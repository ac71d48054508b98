"""The agent runtime on the in-process bus and a real SQLite knowledge base.

What needs a real broker (SIGKILL, replicas, outages) is in test_kafka_guarantees.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from agents.bus.base import Bus, BusError, Message
from agents.bus.memory import InMemoryBus
from agents.events import (
    DeadLettered,
    Envelope,
    PingRequested,
    Ponged,
    decode_event,
    event_id_for,
)
from agents.runtime import (
    Action,
    Agent,
    AgentRunner,
    Emit,
    Observation,
    RunnerSettings,
    is_transient,
)
from agents.topics import DEAD_LETTER
from knowledge_base.errors import InvalidInputError, StorageError
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import KnowledgeBase, OutboxMessage
from tests.agents.conftest import drain, unique, wait_for

IN, OUT = "test.in", "test.out"
FAST = RunnerSettings(poll_timeout_s=0.05, backoff_initial_s=0.001, backoff_max_s=0.01)


class Echo(Agent[Observation]):
    """Answers pings with pongs; raises whatever the test queues for a given seq."""

    def __init__(self) -> None:
        self.name = "echo"
        self.topics = (IN,)
        self.raise_for: dict[int, list[BaseException]] = {}
        self.sensed: list[int] = []
        self.gate: asyncio.Event | None = None
        self.in_sense = asyncio.Event()

    async def sense(self, event: Envelope) -> Observation | None:
        if not isinstance(event.payload, PingRequested):
            return None
        self.sensed.append(event.payload.seq)
        self.in_sense.set()
        if self.gate is not None:
            await self.gate.wait()
        errors = self.raise_for.get(event.payload.seq)
        if errors:
            raise errors.pop(0)
        return Observation(event=event)

    def decide(self, observation: Observation) -> list[Action]:
        seq = observation.event.payload_as(PingRequested).seq
        return [Emit(payload=Ponged(seq=seq, agent=self.name), topic=OUT)]


class Flaky(StorageError):
    """A transient failure (StorageError is transient in the error tree)."""


class BatchingKB(SQLiteKnowledgeBase):
    """SQLite whose batch dedupe calls are composed of the per-event ones, and counted.

    Checks how the runner uses the batch calls and runs the runner over the interface's
    default (per-event) implementation, as a backend without its own batching would.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[tuple[str, int]] = []

    async def processed_ids(self, consumer: str, event_ids: Sequence[str]) -> set[str]:
        self.calls.append(("processed_ids", len(event_ids)))
        return {e for e in event_ids if await self.is_processed(consumer, e)}

    async def complete_events(
        self, consumer: str, completions: Sequence[tuple[str, Sequence[OutboxMessage]]]
    ) -> list[bool]:
        self.calls.append(("complete_events", len(completions)))
        return [await self.complete_event(consumer, e, o) for e, o in completions]


@pytest.fixture(params=["batched", "composed"])
async def sqlite_kb(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    """The real SQLite knowledge base: its one-transaction batch calls, and composed ones."""
    kind = SQLiteKnowledgeBase if request.param == "batched" else BatchingKB
    async with kind(tmp_path / "kb.db") as store:
        yield store


@pytest.fixture
async def memory_bus() -> AsyncIterator[InMemoryBus]:
    async with InMemoryBus() as bus:
        yield bus


def ping(seq: int, key: str | None = None) -> Envelope:
    return Envelope.of(PingRequested(seq=seq), source="test", correlation_id=key or f"job-{seq}")


async def outputs(bus: Bus, count: int, topic: str = OUT) -> list[Envelope]:
    async with bus.consumer([topic], group_id=unique("reader")) as consumer:
        return [decode_event(r.value) for r in await drain(consumer, count, timeout_s=10)]


async def test_each_ping_gets_one_pong_with_a_derived_id_and_the_cause_recorded(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    events = [ping(i) for i in range(20)]
    await memory_bus.publish_many([Message.of(IN, e) for e in events])

    async with AgentRunner(Echo(), memory_bus, kb, FAST) as runner:
        await wait_for(lambda: runner.health().events_handled == 20, timeout_s=10, what="20")

    pongs = await outputs(memory_bus, 20)
    by_cause = {p.causation_id: p for p in pongs}
    for event in events:
        pong = by_cause[event.id]
        assert pong.id == event_id_for("echo", event.id, 0)
        assert pong.correlation_id == event.correlation_id
        assert pong.source == "echo"
        assert pong.payload_as(Ponged).seq == event.payload_as(PingRequested).seq
    assert await kb.count_processed("echo") == 20
    assert await kb.pending_outbox("echo") == []


async def test_a_redelivered_event_is_skipped_and_never_acted_on_twice(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    event = ping(1)
    await memory_bus.publish_many([Message.of(IN, event), Message.of(IN, event)])
    agent = Echo()
    async with AgentRunner(agent, memory_bus, kb, FAST) as runner:
        await wait_for(
            lambda: runner.health().events_duplicate == 1, timeout_s=10, what="the duplicate"
        )
    assert agent.sensed == [1]
    assert runner.health().events_handled == 1
    await outputs(memory_bus, 1)
    async with memory_bus.consumer([OUT], group_id=unique("reader")) as consumer:
        assert len(await consumer.poll(timeout_s=0.05)) == 1


async def test_a_second_runner_after_a_crash_skips_what_the_first_completed(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    """The first runner completes events but its offsets are never committed (a crash)."""
    kb = sqlite_kb
    events = [ping(i) for i in range(5)]
    await memory_bus.publish_many([Message.of(IN, e) for e in events])
    for event in events[:3]:  # what the crashed run had stored, outbox still unpublished
        pong = Envelope.of(
            Ponged(seq=event.payload_as(PingRequested).seq, agent="echo"),
            source="echo",
            correlation_id=event.correlation_id,
            causation_id=event.id,
            id=event_id_for("echo", event.id, 0),
        )
        await kb.complete_event(
            "echo",
            str(event.id),
            [
                OutboxMessage(
                    message_id=str(pong.id), topic=OUT, key=pong.key, value=pong.model_dump_json()
                )
            ],
        )
    agent = Echo()
    async with AgentRunner(agent, memory_bus, kb, FAST) as runner:
        await wait_for(
            lambda: runner.health().events_handled + runner.health().events_duplicate == 5,
            timeout_s=10,
            what="all five events",
        )
    assert sorted(agent.sensed) == [3, 4]
    assert runner.health().events_duplicate == 3
    pongs = await outputs(memory_bus, 5)
    assert {p.causation_id for p in pongs} == {e.id for e in events}


async def test_a_transient_error_is_retried_with_backoff_until_it_succeeds(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    agent = Echo()
    agent.raise_for[7] = [Flaky("db locked"), Flaky("db locked")]
    await memory_bus.publish(IN, ping(7))
    async with AgentRunner(agent, memory_bus, kb, FAST) as runner:
        await wait_for(lambda: runner.health().events_handled == 1, timeout_s=10, what="retry")
    health = runner.health()
    assert (health.retries, health.events_failed, health.events_dead_lettered) == (2, 0, 0)
    assert agent.sensed == [7, 7, 7]
    assert (await outputs(memory_bus, 1))[0].payload_as(Ponged).seq == 7


async def test_a_transient_error_that_outlasts_the_retries_is_dead_lettered(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    agent = Echo()
    agent.raise_for[3] = [Flaky("down")] * 10
    settings = FAST.model_copy(update={"max_attempts": 3})
    await memory_bus.publish_many([Message.of(IN, ping(3)), Message.of(IN, ping(4))])
    async with AgentRunner(agent, memory_bus, kb, settings) as runner:
        await wait_for(lambda: runner.health().events_handled == 1, timeout_s=10, what="seq 4")
    assert runner.health().events_dead_lettered == 1
    (dead,) = await outputs(memory_bus, 1, topic=DEAD_LETTER)
    letter = dead.payload_as(DeadLettered)
    assert (letter.error_type, letter.attempts) == ("Flaky", 3)


async def test_a_non_transient_handler_error_is_dead_lettered_and_the_agent_keeps_going(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    agent = Echo()
    agent.raise_for[1] = [
        InvalidInputError("walltime must be positive", field="walltime_s", value=-1)
    ]
    events = [ping(i) for i in range(3)]
    await memory_bus.publish_many([Message.of(IN, e) for e in events])
    async with AgentRunner(agent, memory_bus, kb, FAST) as runner:
        await wait_for(lambda: runner.health().events_handled == 2, timeout_s=10, what="others")

    assert sorted(agent.sensed) == [0, 1, 2]  # tried once: no retry can fix invalid input
    (dead,) = await outputs(memory_bus, 1, topic=DEAD_LETTER)
    letter = dead.payload_as(DeadLettered)
    assert letter.error_type == "InvalidInputError"
    assert "walltime_s: walltime must be positive" in letter.error
    assert letter.original_event_id == events[1].id
    assert decode_event(letter.original) == events[1]
    assert dead.causation_id == events[1].id
    assert runner.health().events_failed == 1


@pytest.mark.parametrize(
    ("raw", "error_type", "reason"),
    [
        (b"\xff\xfe definitely not json", "MalformedEventError", "not JSON"),
        (
            b'{"type": "no.such.event"}',
            "UnknownEventTypeError",
            "unknown event type 'no.such.event'",
        ),
        (
            json.dumps({**json.loads(ping(1).to_bytes()), "payload": {"seq": "many"}}).encode(),
            "EventSchemaError",
            "payload.seq",
        ),
    ],
    ids=["not-json", "unknown-type", "schema-violation"],
)
async def test_a_malformed_message_is_dead_lettered_with_its_bytes_and_reason(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase, raw: bytes, error_type: str, reason: str
) -> None:
    kb = sqlite_kb
    await memory_bus.publish(IN, raw, key="k")
    await memory_bus.publish(IN, ping(2))
    async with AgentRunner(Echo(), memory_bus, kb, FAST) as runner:
        await wait_for(lambda: runner.health().events_handled == 1, timeout_s=10, what="next")
    (dead,) = await outputs(memory_bus, 1, topic=DEAD_LETTER)
    letter = dead.payload_as(DeadLettered)
    assert letter.original == raw
    assert base64.b64decode(letter.original_b64) == raw
    assert letter.error_type == error_type
    assert reason in letter.error
    assert (letter.topic, letter.offset, letter.key) == (IN, 0, "k")
    assert runner.health().events_dead_lettered == 1


async def test_stop_finishes_the_event_in_hand_commits_it_and_leaves_the_rest(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    await memory_bus.create_topics([IN], partitions=1)
    await memory_bus.publish_many([Message.of(IN, ping(i, key="one-job")) for i in range(3)])
    agent = Echo()
    agent.gate = asyncio.Event()
    runner = AgentRunner(agent, memory_bus, kb, FAST)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(agent.in_sense.wait(), 10)
    runner.stop()  # while seq 0 is in hand
    agent.gate.set()
    await asyncio.wait_for(task, 10)
    assert agent.sensed == [0]
    assert runner.health().events_handled == 1
    assert not runner.health().running

    second = Echo()
    async with AgentRunner(second, memory_bus, kb, FAST) as again:
        await wait_for(lambda: again.health().events_handled == 2, timeout_s=10, what="rest")
    assert second.sensed == [1, 2]  # seq 0 was committed: not even redelivered
    assert again.health().events_duplicate == 0


class FailingPublishes(InMemoryBus):
    """An in-process bus whose first publishes fail like an unreachable broker.

    A fake on purpose: the Kafka outage itself is tested against Tansu; here the point is
    what the runner does with the outbox while publishing fails.
    """

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def publish_many(self, messages: Sequence[Message]) -> None:
        if self.failures and any(m.topic == OUT for m in messages):
            self.failures -= 1
            raise BusError("broker unreachable")
        await super().publish_many(messages)


async def test_outbox_survives_failed_publishes_and_goes_out_once_the_bus_is_back(
    sqlite_kb: KnowledgeBase,
) -> None:
    kb = sqlite_kb
    async with FailingPublishes(failures=3) as bus:
        await bus.publish_many([Message.of(IN, ping(i)) for i in range(4)])
        async with AgentRunner(Echo(), bus, kb, FAST) as runner:
            await wait_for(lambda: runner.health().events_handled == 4, timeout_s=10, what="4")
            pongs = await outputs(bus, 4)
        assert sorted(p.payload_as(Ponged).seq for p in pongs) == [0, 1, 2, 3]
        assert bus.failures == 0
        assert await kb.pending_outbox("echo") == []


async def test_pending_outbox_is_published_before_anything_is_consumed(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    left = Envelope.of(Ponged(seq=99, agent="echo"), source="echo", correlation_id="job-99")
    await kb.complete_event(
        "echo",
        "some-earlier-event",
        [
            OutboxMessage(
                message_id=str(left.id), topic=OUT, key=left.key, value=left.model_dump_json()
            )
        ],
    )
    async with AgentRunner(Echo(), memory_bus, kb, FAST):
        (published,) = await outputs(memory_bus, 1)
    assert published == left
    assert await kb.pending_outbox("echo") == []


async def test_events_the_agent_does_not_sense_are_completed_without_output(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    pong = Envelope.of(Ponged(seq=1, agent="x"), source="x", correlation_id="c")
    await memory_bus.publish(IN, pong)
    async with AgentRunner(Echo(), memory_bus, kb, FAST) as runner:
        await wait_for(lambda: runner.health().events_handled == 1, timeout_s=10, what="pong")
    assert await kb.is_processed("echo", str(pong.id))
    async with memory_bus.consumer([OUT], group_id=unique("reader")) as consumer:
        assert await consumer.poll(timeout_s=0.05) == []


async def test_health_reports_counts_last_event_time_and_lag(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    kb = sqlite_kb
    agent = Echo()
    agent.gate = asyncio.Event()
    await memory_bus.create_topics([IN], partitions=1)
    await memory_bus.publish_many([Message.of(IN, ping(i, key="k")) for i in range(5)])
    settings = FAST.model_copy(update={"lag_interval_s": 0.0})
    runner = AgentRunner(agent, memory_bus, kb, settings)
    assert runner.health().running is False
    async with runner:
        await asyncio.wait_for(agent.in_sense.wait(), 10)
        assert runner.health().running
        assert await runner.lag() == {f"{IN}[0]": 5}
        agent.gate.set()
        await wait_for(lambda: runner.health().events_handled == 5, timeout_s=10, what="5")
        await wait_for(lambda: runner.health().consumer_lag == 0, timeout_s=10, what="lag 0")
        health = runner.health()
        assert health.last_event_at is not None
        assert health.lag_by_partition == {f"{IN}[0]": 0}
        assert health.partitions == [f"{IN}[0]"]
    assert not runner.health().running


def test_transient_is_read_from_the_error_class_flag() -> None:
    assert is_transient(StorageError("x"))
    assert is_transient(BusError("x"))
    assert not is_transient(InvalidInputError("x"))
    assert not is_transient(RuntimeError("x"))


async def test_a_batch_capable_kb_is_asked_once_per_batch_not_once_per_event(
    memory_bus: InMemoryBus, tmp_path: Path
) -> None:
    await memory_bus.create_topics([IN], partitions=1)
    await memory_bus.publish_many([Message.of(IN, ping(i, key="k")) for i in range(50)])
    settings = FAST.model_copy(update={"flush_interval_s": 60.0})
    async with BatchingKB(tmp_path / "kb.db") as kb:
        async with AgentRunner(Echo(), memory_bus, kb, settings) as runner:
            await wait_for(lambda: runner.health().events_handled == 50, timeout_s=10, what="50")
        assert kb.calls == [("processed_ids", 50), ("complete_events", 50)]
        assert await kb.count_processed("echo") == 50
