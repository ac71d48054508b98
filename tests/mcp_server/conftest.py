"""A seeded SQLite knowledge base, the simulated cluster and an in-process bus per test.

The server runs for real (in memory, over stdio, over HTTP on loopback); the simulated
cluster stands in for SLURM because these tests are about the MCP layer, not the executor.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml

from agents.bus.base import Bus
from agents.bus.memory import InMemoryBus
from knowledge_base.open import open_knowledge_base
from knowledge_base.seed import load_seed_catalog
from knowledge_base.store import KnowledgeBase
from mcp_server.auth import HashedTokenVerifier, add_user
from mcp_server.context import ServerDeps
from mcp_server.server import build_server, http_app
from tools.actuators.simulated import SimulatedCluster

REPO = Path(__file__).resolve().parents[2]


def resnet_spec(user: str = "alice") -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples/resnet50.yaml").read_text())
    spec["user"] = user
    return spec


@pytest.fixture
def kb_url(tmp_path: Path) -> str:
    url = str(tmp_path / "kb.db")

    async def seed() -> None:
        kb = open_knowledge_base(url)
        await kb.put_catalog(load_seed_catalog())
        await kb.close()

    import asyncio

    asyncio.run(seed())
    return url


def make_deps(url: str, user: str = "alice", bus: Bus | None = None) -> ServerDeps:
    @contextlib.asynccontextmanager
    async def open_kb() -> AsyncIterator[KnowledgeBase]:
        kb = open_knowledge_base(url)
        try:
            yield kb
        finally:
            await kb.close()

    @contextlib.asynccontextmanager
    async def open_bus() -> AsyncIterator[Bus]:
        assert bus is not None
        yield bus

    return ServerDeps(
        open_kb=open_kb,
        open_executor=lambda system: SimulatedCluster(
            nodes=4, cores_per_node=48, memory_mb_per_node=192_000, system=system
        ),
        stdio_user=user,
        open_bus=open_bus if bus is not None else None,
        allow_model_code=True,
    )


@pytest.fixture
async def bus() -> AsyncIterator[InMemoryBus]:
    async with InMemoryBus() as started:
        yield started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpServer:
    def __init__(self, url: str, tokens: dict[str, str]) -> None:
        self.url = url
        self.tokens = tokens


@pytest.fixture
def http_server(kb_url: str, tmp_path: Path) -> Iterator[HttpServer]:
    """The real HTTP app under uvicorn on a free loopback port, with alice and bob."""
    token_file = tmp_path / "tokens.json"
    tokens = {name: add_user(token_file, name) for name in ("alice", "bob")}
    port = free_port()
    server = build_server(
        make_deps(kb_url),
        verifier=HashedTokenVerifier.from_file(token_file),
        port=port,
    )
    config = uvicorn.Config(http_app(server), host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    import time

    deadline = time.monotonic() + 20
    while not runner.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the HTTP server did not start within 20 s")
        time.sleep(0.02)
    yield HttpServer(f"http://127.0.0.1:{port}/mcp", tokens)
    runner.should_exit = True
    thread.join(timeout=10)
