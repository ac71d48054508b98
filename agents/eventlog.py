"""Record what the bus carries to a JSONL file, and read it back.

One line per message, in the order the recorder consumed them::

    {"topic": "rightsize.plans", "partition": 0, "offset": 7, "key": "plan-42",
     "timestamp_ms": 1767225600000, "event": {...the envelope...}}

A message that was not a valid event is kept too, as ``"raw_b64"`` with the decode
error in ``"error"``, so a log is a faithful copy of the traffic. Simulations and
agent-by-agent replay read logs with ``read_events`` (envelopes only) or
``EventLogReader`` (with the topic and position of each).

The reader is tolerant by default: a line that is not valid (a torn last line after a
crash, a hand edit) is skipped and reported with its line number in ``reader.errors``
and the log; ``strict=True`` raises ``EventLogError`` naming the line instead.

``EventRecorder`` is the tap: a consumer in its own group that writes every message
of the given topics to a log, committing only what it has flushed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from agents.bus.base import Bus, Record
from agents.events import Envelope, MalformedEventError, decode_event
from knowledge_base.errors import InvalidInputError

__all__ = [
    "EventLogError",
    "EventLogReader",
    "EventLogWriter",
    "EventRecorder",
    "LoggedEvent",
    "read_events",
]

log = logging.getLogger(__name__)


class EventLogError(InvalidInputError):
    """A line of an event log that is not a valid entry."""


class LoggedEvent(BaseModel):
    """One recorded event and where the bus had it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    timestamp_ms: int | None = None
    event: Envelope


class EventLogWriter:
    """Appends entries to a JSONL file; use as a context manager or call ``close()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def write_event(self, topic: str, event: Envelope) -> None:
        """Record an event that did not come from a consumer (e.g. a simulation's input)."""
        entry = {"topic": topic, "key": event.key, "event": event.model_dump(mode="json")}
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def write_record(self, record: Record) -> None:
        """Record a consumed message as it was: an event, or raw bytes with the error."""
        entry: dict[str, object] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key,
            "timestamp_ms": record.timestamp_ms,
        }
        try:
            entry["event"] = decode_event(record.value).model_dump(mode="json")
        except MalformedEventError as exc:
            entry["raw_b64"] = base64.b64encode(record.value).decode()
            entry["error"] = str(exc)
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class EventLogReader:
    """Iterates a log's events in order; bad lines land in ``errors`` (or raise if strict)."""

    def __init__(self, path: str | Path, *, strict: bool = False) -> None:
        self.path = Path(path)
        self.strict = strict
        self.errors: list[EventLogError] = []

    def __iter__(self) -> Iterator[LoggedEvent]:
        self.errors = []
        with self.path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    yield self._parse(line, number)
                except EventLogError as exc:
                    if self.strict:
                        raise
                    self.errors.append(exc)
                    log.warning("%s", exc)

    def _parse(self, line: str, number: int) -> LoggedEvent:
        where = f"line {number}"
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise EventLogError(
                f"not JSON ({exc}): {line[:80]!r}", source=str(self.path), field=where
            ) from None
        if not isinstance(entry, dict):
            raise EventLogError(
                f"an entry must be a JSON object, got {line[:80]!r}",
                source=str(self.path),
                field=where,
            )
        if "event" not in entry:
            reason = entry.get("error") or "no 'event' in the entry"
            raise EventLogError(
                f"recorded message is not an event: {reason}",
                source=str(self.path),
                field=where,
                value=entry.get("raw_b64"),
            )
        try:
            event = decode_event(json.dumps(entry["event"]))
            return LoggedEvent.model_validate({**entry, "event": event})
        except (MalformedEventError, ValidationError) as exc:
            raise EventLogError(f"{exc}", source=str(self.path), field=where) from None


def read_events(path: str | Path, *, strict: bool = False) -> Iterator[Envelope]:
    """The envelopes of a log, in order (bad lines skipped and logged unless ``strict``)."""
    for logged in EventLogReader(path, strict=strict):
        yield logged.event


class EventRecorder:
    """Copies every message of ``topics`` into a log, in its own consumer group."""

    def __init__(
        self,
        bus: Bus,
        path: str | Path,
        topics: Sequence[str],
        *,
        group_id: str = "rightsize-event-recorder",
        poll_timeout_s: float = 0.5,
    ) -> None:
        self.bus = bus
        self.path = Path(path)
        self.topics = tuple(topics)
        self.group_id = group_id
        self.poll_timeout_s = poll_timeout_s
        self.recorded = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.run(), name="event-recorder")
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
        self._stop.set()

    async def run(self) -> None:
        with EventLogWriter(self.path) as writer:
            async with self.bus.consumer(self.topics, group_id=self.group_id) as consumer:
                while not self._stop.is_set():
                    records = await consumer.poll(timeout_s=self.poll_timeout_s)
                    if not records:
                        continue
                    for record in records:
                        writer.write_record(record)
                    # Commit only what is on disk: a crash re-records, never skips.
                    writer.flush()
                    await consumer.commit_records(records)
                    self.recorded += len(records)
