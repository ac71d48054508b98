"""The event bus: one interface (``Bus``), in-process and Kafka implementations."""

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
    next_offsets,
)
from agents.bus.kafka import KafkaBus, KafkaConsumer, KafkaSettings
from agents.bus.memory import InMemoryBus, InMemoryConsumer

__all__ = [
    "Bus",
    "BusClosedError",
    "BusError",
    "BusRejectedError",
    "CommitFailedError",
    "Consumer",
    "InMemoryBus",
    "InMemoryConsumer",
    "KafkaBus",
    "KafkaConsumer",
    "KafkaSettings",
    "Message",
    "Record",
    "TopicPartition",
    "next_offsets",
]
