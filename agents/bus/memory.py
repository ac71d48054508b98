"""The in-process bus: Kafka's semantics in one asyncio event loop, nothing to run.

It is the embedded default and the bus simulations use. Messages are stored as bytes,
exactly as on Kafka, so encoding and decoding are exercised the same way. Each topic
keeps its last ``retention_records`` messages per partition (like Kafka's retention);
a consumer whose position fell behind that restarts at the oldest one kept.

Group membership changes rebalance at once (there is no network to wait for): every
member's positions go back to the group's committed offsets, as in Kafka's eager
protocol, so records handed out but not committed are handed out again.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agents.bus.base import (
    Bus,
    BusClosedError,
    CommitFailedError,
    Consumer,
    Message,
    Record,
    TopicPartition,
)
from agents.topics import DEFAULT_PARTITIONS

__all__ = ["InMemoryBus", "InMemoryConsumer", "partition_for"]


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key``: stable across processes and runs (unlike ``hash``)."""
    return zlib.crc32(key.encode()) % partitions


@dataclass
class _Log:
    records: list[Record] = field(default_factory=list)
    start_offset: int = 0  # offset of records[0]

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.records)


@dataclass
class _Group:
    members: list[InMemoryConsumer] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


class InMemoryBus(Bus):
    """Topics, partitions and consumer groups in memory."""

    def __init__(
        self,
        *,
        default_partitions: int = DEFAULT_PARTITIONS,
        retention_records: int | None = 1_000_000,
    ) -> None:
        if default_partitions < 1:
            raise ValueError(f"default_partitions must be >= 1, got {default_partitions}")
        self.default_partitions = default_partitions
        self.retention_records = retention_records
        self._topics: dict[str, list[_Log]] = {}
        self._groups: dict[str, _Group] = {}
        self._round_robin = itertools.count()
        self._started = False

    async def start(self) -> None:
        self._started = True

    async def stop(self) -> None:
        for group in self._groups.values():
            for member in list(group.members):
                await member.stop()
        self._started = False

    async def create_topics(
        self, topics: Sequence[str], *, partitions: int = DEFAULT_PARTITIONS
    ) -> None:
        self._check_started()
        for topic in topics:
            self._topic(topic, partitions)

    async def publish_many(self, messages: Sequence[Message]) -> None:
        self._check_started()
        now_ms = int(time.time() * 1000)
        touched: set[str] = set()
        for message in messages:
            logs = self._topic(message.topic, self.default_partitions)
            if message.key is None:
                partition = next(self._round_robin) % len(logs)
            else:
                partition = partition_for(message.key, len(logs))
            log = logs[partition]
            log.records.append(
                Record(
                    topic=message.topic,
                    partition=partition,
                    offset=log.end_offset,
                    key=message.key,
                    value=message.value,
                    timestamp_ms=now_ms,
                )
            )
            # Trim in chunks: deleting the head of a list is O(n), so do it rarely.
            limit = self.retention_records
            if limit is not None and len(log.records) > limit + max(limit // 10, 1):
                excess = len(log.records) - limit
                del log.records[:excess]
                log.start_offset += excess
            touched.add(message.topic)
        for group in self._groups.values():
            for member in group.members:
                if touched.intersection(member.topics):
                    member.wake()

    def consumer(self, topics: Sequence[str], *, group_id: str) -> InMemoryConsumer:
        return InMemoryConsumer(self, topics, group_id)

    # -- used by InMemoryConsumer -------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise BusClosedError("the in-memory bus is not started (use `async with bus:`)")

    def _topic(self, topic: str, partitions: int) -> list[_Log]:
        logs = self._topics.get(topic)
        if logs is None:
            if not topic:
                raise ValueError("topic name must not be empty")
            logs = self._topics[topic] = [_Log() for _ in range(partitions)]
            # A new topic may be one some group already subscribes to.
            for group in self._groups.values():
                if any(topic in m.topics for m in group.members):
                    self._rebalance(group)
        return logs

    def _log(self, tp: TopicPartition) -> _Log:
        return self._topics[tp.topic][tp.partition]

    def _join(self, member: InMemoryConsumer) -> None:
        self._check_started()
        group = self._groups.setdefault(member.group_id, _Group())
        for topic in member.topics:
            self._topic(topic, self.default_partitions)
        group.members.append(member)
        self._rebalance(group)

    def _leave(self, member: InMemoryConsumer) -> None:
        group = self._groups.get(member.group_id)
        if group is not None and member in group.members:
            group.members.remove(member)
            self._rebalance(group)

    def _rebalance(self, group: _Group) -> None:
        """Deal each topic's partitions round-robin to the members subscribed to it."""
        assigned: dict[int, set[TopicPartition]] = {id(m): set() for m in group.members}
        topics = sorted({t for m in group.members for t in m.topics})
        for topic in topics:
            readers = [m for m in group.members if topic in m.topics]
            for partition in range(len(self._topics[topic])):
                owner = readers[partition % len(readers)]
                assigned[id(owner)].add(TopicPartition(topic, partition))
        for member in group.members:
            member.assign(frozenset(assigned[id(member)]), group.committed)

    def _committed(self, group_id: str) -> dict[TopicPartition, int]:
        return self._groups[group_id].committed


class InMemoryConsumer(Consumer):
    """A member of an in-memory consumer group."""

    def __init__(self, bus: InMemoryBus, topics: Sequence[str], group_id: str) -> None:
        if not topics:
            raise ValueError("a consumer needs at least one topic")
        if not group_id:
            raise ValueError("group_id must not be empty")
        self._bus = bus
        self.topics = tuple(topics)
        self.group_id = group_id
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._order: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._wakeup = asyncio.Event()
        self._joined = False
        self._turn = 0

    async def start(self) -> None:
        if not self._joined:
            self._bus._join(self)
            self._joined = True

    async def stop(self) -> None:
        if self._joined:
            self._joined = False
            self._bus._leave(self)
            self._assignment = frozenset()
            self.wake()

    def wake(self) -> None:
        self._wakeup.set()

    def assign(
        self, partitions: frozenset[TopicPartition], committed: Mapping[TopicPartition, int]
    ) -> None:
        self._assignment = partitions
        self._order = sorted(partitions)
        self._positions = {
            tp: max(committed.get(tp, 0), self._bus._log(tp).start_offset) for tp in partitions
        }
        self.wake()

    def assignment(self) -> frozenset[TopicPartition]:
        return self._assignment

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if not self._joined:
                raise BusClosedError(f"consumer of group {self.group_id!r} is not started")
            self._wakeup.clear()
            records = self._take(max_records)
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return []

    def _take(self, max_records: int) -> list[Record]:
        """Records from each assigned partition in turn, so no partition starves."""
        taken: list[Record] = []
        if not self._order:
            return taken
        self._turn = (self._turn + 1) % len(self._order)
        for tp in self._order[self._turn :] + self._order[: self._turn]:
            if len(taken) >= max_records:
                break
            log = self._bus._log(tp)
            position = max(self._positions[tp], log.start_offset)
            first = position - log.start_offset
            count = min(max_records - len(taken), len(log.records) - first)
            if count > 0:
                taken.extend(log.records[first : first + count])
                self._positions[tp] = position + count
        return taken

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not self._joined:
            raise BusClosedError(f"consumer of group {self.group_id!r} is not started")
        foreign = [str(tp) for tp in offsets if tp not in self._assignment]
        if foreign:
            raise CommitFailedError(
                f"group {self.group_id!r} reassigned {', '.join(sorted(foreign))} before the "
                "commit; the new owner will read those messages again"
            )
        committed = self._bus._committed(self.group_id)
        committed.update(offsets)

    async def lag(self) -> dict[TopicPartition, int]:
        committed = self._bus._committed(self.group_id) if self._joined else {}
        result = {}
        for tp in self._order:
            log = self._bus._log(tp)
            result[tp] = log.end_offset - max(committed.get(tp, 0), log.start_offset)
        return result
