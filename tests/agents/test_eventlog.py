"""Recording the bus to JSONL and reading it back, on both bus implementations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.bus.base import Bus, Message
from agents.eventlog import (
    EventLogError,
    EventLogReader,
    EventLogWriter,
    EventRecorder,
    read_events,
)
from agents.events import Envelope, PingRequested, Ponged
from tests.agents.conftest import unique, wait_for


def ping(seq: int) -> Envelope:
    return Envelope.of(PingRequested(seq=seq), source="test", correlation_id=f"job-{seq}")


async def test_the_recorder_keeps_everything_the_bus_carries_in_order(
    bus: Bus, tmp_path: Path
) -> None:
    plans, jobs = unique("plans"), unique("jobs")
    await bus.create_topics([plans, jobs], partitions=1)
    events = [ping(i) for i in range(5)]
    await bus.publish_many([Message.of(plans, e) for e in events[:3]])
    await bus.publish(jobs, b"garbage", key="job-x")
    await bus.publish_many([Message.of(jobs, e) for e in events[3:]])
    path = tmp_path / "bus.jsonl"

    async with EventRecorder(bus, path, [plans, jobs], group_id=unique("recorder")) as recorder:
        await wait_for(lambda: recorder.recorded == 6, timeout_s=30, what="6 recorded messages")

    reader = EventLogReader(path)
    logged = list(reader)
    assert [e.event for e in logged if e.topic == plans] == events[:3]
    assert [e.event for e in logged if e.topic == jobs] == events[3:]
    assert all(e.partition == 0 and e.offset is not None for e in logged)
    (bad,) = reader.errors  # the garbage message is kept, and reported when read
    assert "recorded message is not an event" in str(bad)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert any(entry.get("key") == "job-x" and "raw_b64" in entry for entry in raw)


def test_a_bad_line_is_skipped_and_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with EventLogWriter(path) as writer:
        writer.write_event("t", ping(1))
    with path.open("a") as f:
        f.write('{"topic": "t", "event": {"type": "diagnostic.pi\n')  # torn by a crash
        f.write("\n")
        f.write(json.dumps({"topic": "t", "event": {"type": "diagnostic.ping"}}) + "\n")
    with EventLogWriter(path) as writer:
        writer.write_event("t", ping(2))

    reader = EventLogReader(path)
    seqs = [logged.event.payload_as(PingRequested).seq for logged in reader]
    assert seqs == [1, 2]
    assert [error.field for error in reader.errors] == ["line 2", "line 4"]
    assert "not JSON" in str(reader.errors[0])
    assert "source" in str(reader.errors[1])


def test_the_strict_reader_raises_on_the_first_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(Envelope.of(Ponged(seq=1, agent="a"), source="a", correlation_id="c")
                    .model_dump_json() + "\n")  # fmt: skip
    with pytest.raises(EventLogError, match=r"line 1: recorded message is not an event"):
        list(read_events(path, strict=True))


def test_events_written_directly_read_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "sim" / "input.jsonl"
    events = [ping(i) for i in range(3)]
    with EventLogWriter(path) as writer:
        for event in events:
            writer.write_event("rightsize.diagnostics", event)
    assert list(read_events(path)) == events
