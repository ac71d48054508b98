"""The bus over a Kafka-protocol broker, through aiokafka.

Delivery choices, and why:

- The producer waits for ``acks="all"``: a message counts as published only once the
  broker has it. It is neither idempotent nor transactional (Tansu, the broker the tests
  run, supports neither); duplicates from producer retries are harmless because every
  consumer dedupes on the event id.
- Consumers never auto-commit; the runner commits after the handler's work is stored.
- Consumers of one ``group_id`` share partitions. Session, heartbeat and rebalance
  timeouts are lowered from Kafka's defaults so a replica that died is replaced in
  seconds rather than tens of seconds (``KafkaSettings``).
- ``start()`` keeps trying an unreachable broker with exponential backoff, logging each
  attempt, for up to ``start_timeout_s``; after that it raises ``BusError``.

Consumer lag is the broker's high-water mark (from the last fetch) minus the group's
committed offset. Tansu answers ListOffsets(latest) with the last batch's base offset
rather than the high-water mark, so the fetch's figure is used whenever there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalStateError,
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from aiokafka.errors import CommitFailedError as KafkaCommitFailedError
from pydantic import BaseModel, ConfigDict, Field

from agents.bus.base import (
    Bus,
    BusClosedError,
    BusError,
    BusRejectedError,
    CommitFailedError,
    Consumer,
    Message,
    Record,
    TopicPartition,
)
from agents.topics import DEFAULT_PARTITIONS

__all__ = ["KafkaBus", "KafkaConsumer", "KafkaSettings"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_TOPIC_ALREADY_EXISTS = 36


class KafkaSettings(BaseModel):
    """How to reach the broker and how patient to be with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    client_id: str = "rightsize"
    # Producer: batch for throughput; 5 ms of linger costs little latency.
    linger_ms: int = Field(default=5, ge=0)
    max_batch_size: int = Field(default=262_144, ge=1024, description="Bytes per partition batch")
    request_timeout_ms: int = Field(default=30_000, ge=1000)
    # Consumer group timing: lower than Kafka's defaults so a dead member is replaced fast.
    session_timeout_ms: int = Field(default=6000, ge=500)
    heartbeat_interval_ms: int = Field(default=500, ge=50)
    rebalance_timeout_ms: int = Field(default=3000, ge=500)
    max_poll_interval_ms: int = Field(default=300_000, ge=1000)
    # Tansu holds every fetch for the full wait even when data arrives, so this is
    # latency per hop; Kafka answers as soon as data is there.
    fetch_max_wait_ms: int = Field(default=10, ge=0)
    metadata_max_age_ms: int = Field(default=30_000, ge=1000)
    # Start-up against a broker that is not there (yet).
    start_timeout_s: float = Field(default=120.0, gt=0)
    retry_backoff_initial_s: float = Field(default=0.2, gt=0)
    retry_backoff_max_s: float = Field(default=5.0, gt=0)


async def _start_with_retries(
    what: str, settings: KafkaSettings, make_and_start: Callable[[], Awaitable[T]]
) -> T:
    """Call ``make_and_start`` until it works, backing off exponentially, within the timeout."""
    deadline = time.monotonic() + settings.start_timeout_s
    delay = settings.retry_backoff_initial_s
    attempt = 1
    while True:
        try:
            return await make_and_start()
        except KafkaError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BusError(
                    f"{what}: broker {settings.bootstrap_servers} unreachable after "
                    f"{attempt} attempts over {settings.start_timeout_s:g} s: {exc}"
                ) from exc
            wait = min(delay, left)
            log.warning(
                "%s: broker %s unreachable (attempt %d: %s); retrying in %.1f s",
                what,
                settings.bootstrap_servers,
                attempt,
                exc,
                wait,
            )
            await asyncio.sleep(wait)
            delay = min(delay * 2, settings.retry_backoff_max_s)
            attempt += 1


class KafkaBus(Bus):
    """Publishes through one shared producer; consumers are made per agent."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        if self._producer is not None:
            return
        s = self.settings

        async def make() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(
                bootstrap_servers=s.bootstrap_servers,
                client_id=f"{s.client_id}-producer",
                acks="all",
                enable_idempotence=False,
                linger_ms=s.linger_ms,
                max_batch_size=s.max_batch_size,
                request_timeout_ms=s.request_timeout_ms,
                metadata_max_age_ms=s.metadata_max_age_ms,
            )
            try:
                await producer.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await producer.stop()
                raise
            return producer

        self._producer = await _start_with_retries("producer", s, make)
        log.info("producer connected to %s", s.bootstrap_servers)

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def create_topics(
        self, topics: Sequence[str], *, partitions: int = DEFAULT_PARTITIONS
    ) -> None:
        s = self.settings

        async def make() -> AIOKafkaAdminClient:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=s.bootstrap_servers,
                client_id=f"{s.client_id}-admin",
                request_timeout_ms=s.request_timeout_ms,
            )
            try:
                await admin.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await admin.close()
                raise
            return admin

        admin = await _start_with_retries("admin", s, make)
        try:
            existing = set(await admin.list_topics())
            wanted = [t for t in dict.fromkeys(topics) if t not in existing]
            if not wanted:
                return
            response = await admin.create_topics(
                [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in wanted]
            )
            for topic, code, message in _topic_errors(response):
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise BusError(f"cannot create topic {topic!r}: error {code} {message}")
        except KafkaError as exc:
            raise BusError(f"cannot create topics {list(topics)}: {exc}") from exc
        finally:
            await admin.close()

    async def publish_many(self, messages: Sequence[Message]) -> None:
        producer = self._producer
        if producer is None:
            raise BusClosedError("the Kafka bus is not started (use `async with bus:`)")
        try:
            # send() only queues (it waits when the buffer is full); the broker's
            # acknowledgements are awaited together so one batch is one round trip.
            futures = [
                await producer.send(m.topic, m.value, key=None if m.key is None else m.key.encode())
                for m in messages
            ]
            await asyncio.gather(*futures)
        except KafkaError as exc:
            raise _bus_error(exc, f"publish of {len(messages)} messages failed") from exc

    async def probe(self) -> None:
        """Ask a broker for the cluster's metadata (not the client's cached copy)."""
        producer = self._producer
        if producer is None:
            raise BusClosedError("the Kafka bus is not started (use `async with bus:`)")
        try:
            await producer.client.fetch_all_metadata()
        except KafkaError as exc:
            raise _bus_error(exc, "metadata request failed") from exc

    def consumer(self, topics: Sequence[str], *, group_id: str) -> KafkaConsumer:
        return KafkaConsumer(self.settings, topics, group_id)


# Requests the broker will refuse however often they are retried. Everything else counts
# as transient: aiokafka marks even its own timeouts "not retriable", yet an outage is
# exactly what the runner should wait out.
_PERMANENT = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    InvalidTopicError,
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    UnsupportedVersionError,
)


def _bus_error(exc: KafkaError, what: str) -> BusError:
    """Our error for an aiokafka one: ``BusRejectedError`` when no retry can help."""
    if isinstance(exc, _PERMANENT):
        return BusRejectedError(f"{what}: {exc!r}")
    return BusError(f"{what}: {exc!r}")


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    errors = getattr(response, "topic_errors", [])
    return [(e[0], e[1], e[2] if len(e) > 2 else None) for e in errors]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, committed: dict[TopicPartition, int]) -> None:
        self._committed = committed

    def on_partitions_revoked(self, revoked: Any) -> None:
        # Another member may commit these while we do not own them: forget what we knew.
        for tp in revoked:
            self._committed.pop(TopicPartition(tp.topic, tp.partition), None)

    def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))


class KafkaConsumer(Consumer):
    """An AIOKafkaConsumer in a group, committing only when told to."""

    def __init__(self, settings: KafkaSettings, topics: Sequence[str], group_id: str) -> None:
        if not topics:
            raise ValueError("a consumer needs at least one topic")
        if not group_id:
            raise ValueError("group_id must not be empty")
        self.settings = settings
        self.topics = tuple(topics)
        self.group_id = group_id
        self._consumer: AIOKafkaConsumer | None = None
        self._committed: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        if self._consumer is not None:
            return
        s = self.settings

        async def make() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=s.bootstrap_servers,
                client_id=f"{s.client_id}-{self.group_id}",
                group_id=self.group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=s.session_timeout_ms,
                heartbeat_interval_ms=s.heartbeat_interval_ms,
                rebalance_timeout_ms=s.rebalance_timeout_ms,
                max_poll_interval_ms=s.max_poll_interval_ms,
                fetch_max_wait_ms=s.fetch_max_wait_ms,
                request_timeout_ms=s.request_timeout_ms,
                metadata_max_age_ms=s.metadata_max_age_ms,
            )
            try:
                await consumer.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await consumer.stop()
                raise
            return consumer

        consumer = await _start_with_retries(f"consumer {self.group_id}", s, make)
        consumer.subscribe(list(self.topics), listener=_Listener(self._committed))
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    def _require(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise BusClosedError(f"consumer of group {self.group_id!r} is not started")
        return self._consumer

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        consumer = self._require()
        try:
            batches = await consumer.getmany(
                timeout_ms=int(timeout_s * 1000), max_records=max_records
            )
        except KafkaError as exc:
            raise _bus_error(exc, f"poll of group {self.group_id!r} failed") from exc
        return [
            Record(
                topic=m.topic,
                partition=m.partition,
                offset=m.offset,
                key=None if m.key is None else m.key.decode("utf-8", "replace"),
                value=m.value if m.value is not None else b"",
                timestamp_ms=m.timestamp,
            )
            for messages in batches.values()
            for m in messages
        ]

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        consumer = self._require()
        try:
            await consumer.commit(
                {KafkaTopicPartition(tp.topic, tp.partition): o for tp, o in offsets.items()}
            )
        except (KafkaCommitFailedError, IllegalStateError) as exc:
            raise CommitFailedError(
                f"group {self.group_id!r} could not commit {_fmt(offsets)}: {exc}"
            ) from exc
        except KafkaError as exc:
            raise _bus_error(exc, f"commit of group {self.group_id!r} failed") from exc
        self._committed.update(offsets)

    def assignment(self) -> frozenset[TopicPartition]:
        if self._consumer is None:
            return frozenset()
        return frozenset(
            TopicPartition(tp.topic, tp.partition) for tp in self._consumer.assignment()
        )

    async def lag(self) -> dict[TopicPartition, int]:
        consumer = self._require()
        result: dict[TopicPartition, int] = {}
        try:
            for ktp in consumer.assignment():
                tp = TopicPartition(ktp.topic, ktp.partition)
                end = consumer.highwater(ktp)
                if end is None:
                    end = (await consumer.end_offsets([ktp]))[ktp]
                if tp not in self._committed:
                    committed = await consumer.committed(ktp)
                    if committed is None:
                        committed = (await consumer.beginning_offsets([ktp]))[ktp]
                    self._committed[tp] = committed
                result[tp] = max(end - self._committed[tp], 0)
        except KafkaError as exc:
            raise BusError(f"lag of group {self.group_id!r} unavailable: {exc!r}") from exc
        return result


def _fmt(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{tp}@{o}" for tp, o in sorted(offsets.items()))
