"""The event bus interface: publish bytes or envelopes, consume them in consumer groups.

Two implementations honour one contract (``tests/agents/test_bus_contract.py``):
``InMemoryBus`` (one process, the embedded default) and ``KafkaBus`` (aiokafka). The
semantics are Kafka's, so what works on one works on the other:

- a topic has partitions; a message's key picks its partition, so messages with one key
  (one plan or job) are consumed in the order they were published;
- consumers in one group share the partitions of what they subscribe to; every group
  sees every message;
- a consumer commits the offset it has handled up to; a consumer that stops or dies
  without committing leaves its messages to whoever gets the partition next (at-least-once);
- a new group starts at the earliest message still stored.

Errors (all ``RightsizeError``; ``transient`` says whether a retry can help):

    BusError                    the broker could not be reached or did not acknowledge (transient)
    +-- BusRejectedError        the broker refused the request; a retry will not help
    +-- CommitFailedError       the partition was reassigned before the commit (not transient)
    +-- BusClosedError          the bus or consumer was used after stop (not transient)
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Self

from agents.events import Envelope
from agents.topics import DEFAULT_PARTITIONS
from knowledge_base.errors import RightsizeError

__all__ = [
    "Bus",
    "BusClosedError",
    "BusError",
    "BusRejectedError",
    "CommitFailedError",
    "Consumer",
    "Message",
    "Record",
    "TopicPartition",
    "next_offsets",
]


class BusError(RightsizeError):
    """The broker could not be reached or did not acknowledge in time; a retry may help."""

    transient = True


class BusRejectedError(BusError):
    """The broker refused the request for good (e.g. a message over its size limit)."""

    transient = False


class CommitFailedError(BusError):
    """The commit named a partition this consumer no longer owns (the group rebalanced)."""

    transient = False


class BusClosedError(BusError):
    """The bus or consumer was used before start or after stop."""

    transient = False


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True)
class Message:
    """Something to publish: bytes for a topic, with the key that picks its partition."""

    topic: str
    value: bytes
    key: str | None = None

    @classmethod
    def of(cls, topic: str, event: Envelope) -> Message:
        return cls(topic=topic, value=event.to_bytes(), key=event.key)


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed message and where it was stored."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    timestamp_ms: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def next_offsets(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The offsets to commit once ``records`` are handled: last offset + 1 per partition."""
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = record.tp
        offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    return offsets


class Consumer(abc.ABC):
    """One member of a consumer group, reading the partitions the group assigns it."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the group (retrying while the broker is unreachable, where that applies)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Leave the group; uncommitted messages go to the partitions' next owners."""

    @abc.abstractmethod
    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one.

        Records of one partition come in offset order. An empty list means nothing
        arrived in time.
        """

    @abc.abstractmethod
    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record, for the group, the next offset to read in each partition."""

    async def commit_records(self, records: Sequence[Record]) -> None:
        """Commit past ``records`` (which must all have been handled)."""
        if records:
            await self.commit(next_offsets(records))

    @abc.abstractmethod
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member reads now."""

    @abc.abstractmethod
    async def lag(self) -> dict[TopicPartition, int]:
        """Messages not yet committed by the group, per partition this member reads."""


class Bus(abc.ABC):
    """Publishes messages and makes consumers; start/stop with ``async with``."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def create_topics(
        self, topics: Sequence[str], *, partitions: int = DEFAULT_PARTITIONS
    ) -> None:
        """Create the topics that do not exist yet; existing ones are left as they are."""

    @abc.abstractmethod
    async def publish_many(self, messages: Sequence[Message]) -> None:
        """Publish ``messages``; returns once every one is acknowledged.

        Messages with one key keep their order. If it raises, some messages may have
        been stored anyway: publishing again duplicates them, which is why every event
        carries an id consumers dedupe on.
        """

    async def publish(
        self, topic: str, message: Envelope | bytes, *, key: str | None = None
    ) -> None:
        """Publish one envelope (keyed by its correlation id) or raw bytes (keyed by ``key``)."""
        if isinstance(message, Envelope):
            await self.publish_many([Message(topic, message.to_bytes(), key or message.key)])
        else:
            await self.publish_many([Message(topic, message, key)])

    async def probe(self) -> None:
        """One round trip to the broker (health checks, metrics); raises ``BusError`` when
        it does not answer. The in-process bus has nothing to ask."""
        return None  # overridden by buses with a broker to ask

    @abc.abstractmethod
    def consumer(self, topics: Sequence[str], *, group_id: str) -> Consumer:
        """A (not yet started) member of ``group_id`` subscribed to ``topics``."""
