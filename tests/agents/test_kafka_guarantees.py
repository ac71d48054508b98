"""The runtime's delivery guarantees against a real Kafka-protocol broker (Tansu).

Agents here are ``agents.worker`` processes (so they can be SIGKILLed) or in-process
runners on their own KafkaBus and knowledge-base connection (replicas sharing a SQLite
file, as separate processes would).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.bus.base import Bus, Message
from agents.bus.kafka import KafkaBus
from agents.events import DeadLettered, Envelope, PingRequested, Ponged, decode_event, event_id_for
from agents.runtime import AgentRunner, RunnerSettings
from agents.worker import RelayAgent
from knowledge_base.sqlite import SQLiteKnowledgeBase
from tests.agents.conftest import (
    FAST_GROUP,
    REPO,
    TansuBroker,
    kafka_settings,
    unique,
    wait_for,
    worker_command,
)

pytestmark = pytest.mark.kafka


def ping(seq: int) -> Envelope:
    return Envelope.of(PingRequested(seq=seq), source="test", correlation_id=f"job-{seq % 97}")


class Worker:
    """An ``agents.worker`` process with its log in a file."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        group = [f"--{k.replace('_', '-')}={v}" for k, v in FAST_GROUP.items()]
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                worker_command(*args, *group), cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"worker ignored SIGTERM for 15 s:\n{self.log()[-3000:]}")


async def read_topic(bus: Bus, topic: str, distinct: int, timeout_s: float = 30) -> list[Envelope]:
    """Every event on ``topic`` once ``distinct`` different ids arrived, duplicates included."""
    got: list[Envelope] = []
    deadline = time.monotonic() + timeout_s
    async with bus.consumer([topic], group_id=unique("reader")) as reader:
        while len({e.id for e in got}) < distinct:
            if time.monotonic() > deadline:
                pytest.fail(f"{topic}: {len({e.id for e in got})} of {distinct} ids arrived")
            got += [decode_event(r.value) for r in await reader.poll(timeout_s=0.5)]
        # Anything published twice is in by now; one more poll would show a late copy.
        got += [decode_event(r.value) for r in await reader.poll(timeout_s=0.5)]
    return got


async def test_sigkilled_agent_restarted_handles_each_of_1000_events_exactly_once(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    source, sink, dead = unique("in"), unique("out"), unique("dead")
    kb_path = tmp_path / "kb.db"
    args = [
        f"--bootstrap={kafka_broker.bootstrap}",
        f"--kb={kb_path}",
        "--agent=relay",
        f"--in={source}",
        f"--out={sink}",
        f"--dead-letter={dead}",
        "--partitions=2",
    ]
    events = [ping(i) for i in range(1000)]
    async with KafkaBus(kafka_settings(kafka_broker.bootstrap)) as bus:
        await bus.create_topics([source, sink, dead], partitions=2)
        await bus.publish_many([Message.of(source, e) for e in events])

        async with SQLiteKnowledgeBase(kb_path) as kb:
            first = Worker(tmp_path / "first.log", *args, "--delay-ms=3")  # slow: killed mid-way
            await wait_for(
                lambda: _at_least(kb, 300), timeout_s=60, what="the first worker to handle 300"
            )
            first.kill()
            handled_before_kill = await kb.count_processed("relay")
            assert 300 <= handled_before_kill < 1000

            second = Worker(tmp_path / "second.log", *args)
            await wait_for(
                lambda: _at_least(kb, 1000), timeout_s=90, what="all 1000 handled after restart"
            )
            assert second.terminate() == 0, second.log()[-3000:]
            assert await kb.count_processed("relay") == 1000
            assert await kb.pending_outbox("relay") == []

        pongs = await read_topic(bus, sink, distinct=1000)

    by_id = {p.id: p for p in pongs}
    assert len(by_id) == 1000
    assert sorted(str(p.causation_id) for p in by_id.values()) == sorted(str(e.id) for e in events)
    assert all(p.id == event_id_for("relay", p.causation_id, 0) for p in by_id.values())
    # Copies of one id are the outbox re-published after the kill; consumers dedupe them.
    assert len(pongs) - len(by_id) <= 500
    assert '"events_handled"' in second.log()  # it logged its health on SIGTERM


async def _at_least(kb: SQLiteKnowledgeBase, n: int) -> bool:
    return await kb.count_processed("relay") >= n


async def test_two_replicas_in_one_group_share_the_partitions_and_handle_each_event_once(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    source, sink = unique("in"), unique("out")
    settings = kafka_settings(kafka_broker.bootstrap)
    runner_settings = RunnerSettings(group_id=unique("replicas"), poll_timeout_s=0.2)
    async with (
        KafkaBus(settings) as bus_a,
        KafkaBus(settings) as bus_b,
        SQLiteKnowledgeBase(tmp_path / "kb.db") as kb_a,
        SQLiteKnowledgeBase(tmp_path / "kb.db") as kb_b,
    ):
        await bus_a.create_topics([source, sink], partitions=4)
        a = AgentRunner(RelayAgent("relay", [source], sink), bus_a, kb_a, runner_settings)
        b = AgentRunner(RelayAgent("relay", [source], sink), bus_b, kb_b, runner_settings)
        async with a, b:
            await wait_for(
                lambda: (
                    a.health().partitions
                    and b.health().partitions
                    and len(a.health().partitions) + len(b.health().partitions) == 4
                ),
                timeout_s=30,
                what="both replicas to own partitions",
            )
            assert not set(a.health().partitions) & set(b.health().partitions)
            events = [ping(i) for i in range(400)]
            await bus_a.publish_many([Message.of(source, e) for e in events])
            await wait_for(
                lambda: a.health().events_handled + b.health().events_handled >= 400,
                timeout_s=60,
                what="400 events handled between the replicas",
            )
        pongs = await read_topic(bus_a, sink, distinct=400)
        assert await kb_a.count_processed("relay") == 400

    handled = (a.health().events_handled, b.health().events_handled)
    assert sum(handled) == 400
    assert min(handled) > 0, handled
    assert {p.causation_id for p in pongs} == {e.id for e in events}


async def test_malformed_messages_are_dead_lettered_with_the_reason_and_the_agent_keeps_going(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    source, sink, dead = unique("in"), unique("out"), unique("dead")
    schema_violation = json.loads(ping(1).to_bytes())
    schema_violation["payload"]["seq"] = -5
    poison = {
        b"{not json": "not JSON",
        json.dumps({**schema_violation, "type": "job.exploded"}).encode(): "unknown event type",
        json.dumps(schema_violation).encode(): "payload.seq",
    }
    async with (
        KafkaBus(kafka_settings(kafka_broker.bootstrap)) as bus,
        SQLiteKnowledgeBase(tmp_path / "kb.db") as kb,
    ):
        await bus.create_topics([source, sink, dead], partitions=1)
        for seq, raw in enumerate(poison):
            await bus.publish(source, raw, key="same-key")
            await bus.publish(source, ping(seq).model_copy(update={"correlation_id": "same-key"}))
        settings = RunnerSettings(dead_letter_topic=dead, poll_timeout_s=0.2)
        async with AgentRunner(RelayAgent("relay", [source], sink), bus, kb, settings) as runner:
            await wait_for(
                lambda: runner.health().events_handled == 3, timeout_s=30, what="3 good events"
            )
        letters = [e.payload_as(DeadLettered) for e in await read_topic(bus, dead, distinct=3)]
        pongs = await read_topic(bus, sink, distinct=3)

    assert runner.health().events_dead_lettered == 3
    assert sorted(p.payload_as(Ponged).seq for p in pongs) == [0, 1, 2]
    for letter in letters:
        assert letter.topic == source
        assert poison[letter.original] in letter.error
    assert {letter.original for letter in letters} == set(poison)


async def test_agent_started_before_the_broker_retries_logs_it_and_loses_nothing_across_an_outage(
    tansu_factory: Callable[[], TansuBroker], tmp_path: Path
) -> None:
    """The worker starts first and waits for the broker; later the broker goes away a while.

    Tansu keeps nothing across a restart (memory storage), so the outage is arranged so
    that nothing has to survive it: batch 1 is handled before the broker stops, and batch
    2 is published only after it is back and the topics are re-created (what a deploy
    does for a fresh broker). What is tested is the agent: it notices, keeps retrying,
    says so in its log, rejoins, and handles every event published once the broker is back.
    """
    broker = tansu_factory()
    source, sink, dead = unique("in"), unique("out"), unique("dead")
    kb_path = tmp_path / "kb.db"
    worker = Worker(
        tmp_path / "worker.log",
        f"--bootstrap={broker.bootstrap}",
        f"--kb={kb_path}",
        "--agent=relay",
        f"--in={source}",
        f"--out={sink}",
        f"--dead-letter={dead}",
        "--partitions=2",
        "--start-timeout-s=60",
    )
    try:
        await wait_for(
            lambda: "unreachable" in worker.log() and "retrying in" in worker.log(),
            timeout_s=30,
            what="the worker to log that the broker is unreachable",
        )
        broker.start()
        async with SQLiteKnowledgeBase(kb_path) as kb:
            async with KafkaBus(kafka_settings(broker.bootstrap)) as bus:
                await bus.create_topics([source, sink, dead], partitions=2)
                first = [ping(i) for i in range(100)]
                await bus.publish_many([Message.of(source, e) for e in first])
                await wait_for(lambda: _at_least(kb, 100), timeout_s=60, what="batch 1")
                assert len({p.id for p in await read_topic(bus, sink, distinct=100)}) == 100

            broker.stop()
            log_size = len(worker.log())
            await wait_for(
                lambda: len(worker.log()) > log_size,
                timeout_s=30,
                what="the worker to log the lost connection",
            )
            assert worker.process.poll() is None, "the worker must survive the outage"
            broker.start()

            async with KafkaBus(kafka_settings(broker.bootstrap)) as bus:
                await bus.create_topics([source, sink, dead], partitions=2)
                second = [ping(i) for i in range(100, 200)]
                await bus.publish_many([Message.of(source, e) for e in second])
                await wait_for(lambda: _at_least(kb, 200), timeout_s=90, what="batch 2")
                pongs = await read_topic(bus, sink, distinct=100)
            assert {p.causation_id for p in pongs} == {e.id for e in second}
            assert await kb.count_processed("relay") == 200
            assert await kb.pending_outbox("relay") == []
        assert worker.terminate() == 0
    finally:
        if worker.process.poll() is None:
            worker.kill()
