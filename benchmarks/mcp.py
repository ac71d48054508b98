"""Latency of the MCP ``what_if`` tool on seed 001's ResNet-50 over streamable HTTP.

    python benchmarks/mcp.py                  # a line of figures
    python benchmarks/mcp.py --runs 200 --json

A real server (``mcp_server.server``, uvicorn on a free loopback port, bearer token,
SQLite knowledge base with the seeded catalog in a temporary folder) and the SDK's own
client in one process. One timed call is a ``tools/call`` of ``what_if`` on
``examples/resnet50.yaml`` (top 10), end to end: HTTP, auth, argument validation, the
planner over Pitzer's queues, the JSON answer. Warm-up calls are not timed. Target: p50
under 100 ms.
"""

# ruff: noqa: E402  (sys.path is fixed before the imports; see below)
from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would hide the
# mcp package; drop the folder (the repository root is what the imports need).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator

import httpx2
import uvicorn
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from knowledge_base.open import open_knowledge_base
from knowledge_base.seed import load_seed_catalog
from knowledge_base.store import KnowledgeBase
from mcp_server.auth import HashedTokenVerifier, add_user
from mcp_server.context import ServerDeps
from mcp_server.server import build_server, http_app
from tools.actuators.simulated import SimulatedCluster

REPO = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _measure(
    url: str, token: str, spec: dict[str, object], warmup: int, runs: int
) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))
    arguments = {"workload": spec, "top": 10}
    times: list[float] = []
    async with Client(transport) as client:
        for index in range(warmup + runs):
            start = time.perf_counter()
            result = await client.call_tool("what_if", arguments)
            elapsed = time.perf_counter() - start
            if result.is_error:
                raise SystemExit(f"what_if failed: {result.content}")
            if index >= warmup:
                times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="rightsize-bench-mcp-"))
    url = str(folder / "kb.db")

    async def seed() -> None:
        kb = open_knowledge_base(url)
        await kb.put_catalog(load_seed_catalog())
        await kb.close()

    asyncio.run(seed())

    @contextlib.asynccontextmanager
    async def open_kb() -> AsyncIterator[KnowledgeBase]:
        kb = open_knowledge_base(url)
        try:
            yield kb
        finally:
            await kb.close()

    spec = yaml.safe_load((REPO / "examples/resnet50.yaml").read_text())
    token = add_user(folder / "tokens.json", spec["user"])
    port = _port()
    deps = ServerDeps(
        open_kb=open_kb,
        open_executor=lambda system: SimulatedCluster(
            nodes=4, cores_per_node=48, memory_mb_per_node=192_000, system=system
        ),
        stdio_user=spec["user"],
    )
    server = build_server(
        deps, verifier=HashedTokenVerifier.from_file(folder / "tokens.json"), port=port
    )
    config = uvicorn.Config(http_app(server), host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        times = asyncio.run(
            _measure(f"http://127.0.0.1:{port}/mcp", token, spec, args.warmup, args.runs)
        )
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
    ms = sorted(t * 1000 for t in times)
    report = {
        "runs": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
        "max_ms": round(ms[-1], 1),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"what_if over HTTP, {report['runs']} runs after {args.warmup} warm-up: "
            f"p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms, max {report['max_ms']} ms "
            f"({report['machine']}, load {report['load_1m']})"
        )


if __name__ == "__main__":
    main()
