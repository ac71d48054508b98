"""KafkaBus behaviour that needs no broker: start-up retries and error classification."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, MessageSizeTooLargeError

from agents.bus.base import BusError, BusRejectedError
from agents.bus.kafka import KafkaBus, KafkaSettings, _bus_error
from agents.runtime import is_transient
from tests.agents.conftest import free_port


async def test_start_retries_an_unreachable_broker_with_backoff_then_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = KafkaSettings(
        bootstrap_servers=f"127.0.0.1:{free_port()}",  # nothing listens there
        start_timeout_s=0.6,
        retry_backoff_initial_s=0.1,
    )
    caplog.set_level(logging.WARNING, logger="agents.bus.kafka")
    with pytest.raises(BusError, match="unreachable after [0-9]+ attempts"):
        await KafkaBus(settings).start()
    waits = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(waits) >= 2
    assert "retrying in 0.1 s" in waits[0]
    assert "retrying in 0.2 s" in waits[1]  # doubled


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (KafkaConnectionError("refused"), True),
        (KafkaTimeoutError(), True),  # aiokafka calls it not retriable; an outage is
        (MessageSizeTooLargeError(), False),
    ],
)
def test_broker_errors_are_transient_unless_no_retry_can_help(
    error: KafkaConnectionError | KafkaTimeoutError | MessageSizeTooLargeError, transient: bool
) -> None:
    ours = _bus_error(error, "publish")
    assert is_transient(ours) is transient
    assert isinstance(ours, BusRejectedError) is not transient
