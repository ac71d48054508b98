"""The Bus contract: one suite, run over the in-process bus and over Kafka (Tansu)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from agents.bus.base import (
    Bus,
    BusClosedError,
    CommitFailedError,
    Message,
    TopicPartition,
)
from agents.bus.kafka import KafkaBus, KafkaSettings
from agents.bus.memory import InMemoryBus
from agents.events import Envelope, PingRequested, decode_event
from tests.agents.conftest import drain, unique, wait_for


def ping(seq: int, key: str = "job-1") -> Envelope:
    return Envelope.of(PingRequested(seq=seq), source="test", correlation_id=key)


async def test_published_envelope_and_raw_bytes_arrive_unchanged_with_their_keys(bus: Bus) -> None:
    topic = unique("roundtrip")
    await bus.create_topics([topic], partitions=1)
    event = ping(1, key="plan-7")
    await bus.publish(topic, event)
    await bus.publish(topic, b"\x00not an event", key="raw-key")

    async with bus.consumer([topic], group_id=unique("g")) as consumer:
        first, second = await drain(consumer, 2)

    assert decode_event(first.value) == event
    assert first.key == "plan-7"
    assert (first.topic, first.partition, first.offset) == (topic, 0, 0)
    assert second.value == b"\x00not an event"
    assert second.key == "raw-key"
    assert second.offset == 1


async def test_messages_with_one_key_are_consumed_in_publish_order(bus: Bus) -> None:
    topic = unique("order")
    await bus.create_topics([topic], partitions=4)
    keys = [f"job-{k}" for k in range(6)]
    await bus.publish_many(
        [Message.of(topic, ping(seq, key=keys[seq % len(keys)])) for seq in range(120)]
    )

    async with bus.consumer([topic], group_id=unique("g")) as consumer:
        records = await drain(consumer, 120)

    seqs_by_key: dict[str, list[int]] = defaultdict(list)
    partitions_by_key: dict[str, set[int]] = defaultdict(set)
    for record in records:
        assert record.key is not None
        seqs_by_key[record.key].append(decode_event(record.value).payload_as(PingRequested).seq)
        partitions_by_key[record.key].add(record.partition)
    assert set(seqs_by_key) == set(keys)
    for key, seqs in seqs_by_key.items():
        assert seqs == sorted(seqs), key
        assert len(partitions_by_key[key]) == 1, key


async def test_members_of_one_group_share_partitions_and_each_message_reaches_one(
    bus: Bus,
) -> None:
    topic, group = unique("shared"), unique("g")
    await bus.create_topics([topic], partitions=4)
    async with (
        bus.consumer([topic], group_id=group) as a,
        bus.consumer([topic], group_id=group) as b,
    ):
        # Kafka consumers join while polling; keep both polling until both own partitions.
        # Mid-rebalance one member may still hold what the group has just given the other
        # (seen at load 12): wait for the settled generation, where they split the four.
        async def both_assigned() -> bool:
            await asyncio.gather(a.poll(timeout_s=0.1), b.poll(timeout_s=0.1))
            mine, theirs = a.assignment(), b.assignment()
            return bool(mine) and bool(theirs) and not mine & theirs

        await wait_for(both_assigned, timeout_s=30, what="both members to get partitions")
        assert not a.assignment() & b.assignment()
        assert len(a.assignment() | b.assignment()) == 4

        await bus.publish_many([Message.of(topic, ping(i, key=f"job-{i}")) for i in range(200)])
        got_a: list[int] = []
        got_b: list[int] = []

        async def all_arrived() -> bool:
            ra, rb = await asyncio.gather(a.poll(timeout_s=0.2), b.poll(timeout_s=0.2))
            got_a.extend(r.offset * 10 + r.partition for r in ra)
            got_b.extend(r.offset * 10 + r.partition for r in rb)
            return len(got_a) + len(got_b) >= 200

        await wait_for(all_arrived, timeout_s=30, what="200 messages across the group")

    assert got_a and got_b
    assert len(set(got_a) | set(got_b)) == 200
    assert len(got_a) + len(got_b) == 200


async def test_every_group_receives_every_message(bus: Bus) -> None:
    topic = unique("fanout")
    await bus.create_topics([topic], partitions=2)
    await bus.publish_many([Message.of(topic, ping(i, key=f"k{i}")) for i in range(30)])
    async with (
        bus.consumer([topic], group_id=unique("g1")) as one,
        bus.consumer([topic], group_id=unique("g2")) as two,
    ):
        first, second = await asyncio.gather(drain(one, 30), drain(two, 30))
    assert sorted(r.value for r in first) == sorted(r.value for r in second)


async def test_uncommitted_messages_go_to_the_next_member_and_committed_ones_do_not(
    bus: Bus,
) -> None:
    topic, group = unique("redeliver"), unique("g")
    await bus.create_topics([topic], partitions=1)
    await bus.publish_many([Message.of(topic, ping(i)) for i in range(10)])

    async with bus.consumer([topic], group_id=group) as first:
        records = await drain(first, 10)
        await first.commit_records(records[:4])  # handled 4, then "crashed"

    async with bus.consumer([topic], group_id=group) as second:
        again = await drain(second, 6)
        assert await second.poll(timeout_s=0.3) == []
    assert [r.offset for r in again] == [4, 5, 6, 7, 8, 9]


async def test_lag_counts_messages_the_group_has_not_committed(bus: Bus) -> None:
    topic, group = unique("lag"), unique("g")
    await bus.create_topics([topic], partitions=1)
    await bus.publish_many([Message.of(topic, ping(i)) for i in range(10)])
    tp = TopicPartition(topic, 0)

    async with bus.consumer([topic], group_id=group) as consumer:
        records = await drain(consumer, 10)
        assert await consumer.lag() == {tp: 10}
        await consumer.commit_records(records[:4])
        assert await consumer.lag() == {tp: 6}
        await consumer.commit_records(records)
        assert await consumer.lag() == {tp: 0}


async def test_commit_for_a_partition_the_member_does_not_own_fails(bus: Bus) -> None:
    topic = unique("foreign")
    await bus.create_topics([topic], partitions=1)
    await bus.publish(topic, ping(0))
    async with bus.consumer([topic], group_id=unique("g")) as consumer:
        await drain(consumer, 1)
        with pytest.raises(CommitFailedError):
            await consumer.commit({TopicPartition(unique("other-topic"), 0): 1})


@pytest.mark.parametrize(
    "unstarted",
    [InMemoryBus(), KafkaBus(KafkaSettings(bootstrap_servers="127.0.0.1:1"))],
    ids=["memory", "kafka"],
)
async def test_publishing_before_start_raises_bus_closed(unstarted: Bus) -> None:
    """Needs no broker: an unstarted KafkaBus has not tried to connect."""
    with pytest.raises(BusClosedError):
        await unstarted.publish("t", ping(0))
