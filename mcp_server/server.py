"""Building and running the MCP server: stdio, or streamable HTTP on loopback with tokens.

``build_server(deps)`` makes an ``MCPServer`` whose typed lifespan context
(``AppContext``) holds the knowledge base and the bus for the server's life; tools,
resources and prompts are registered from their own modules. ``http_app`` adds bearer
authentication (``HashedTokenVerifier``): a request without a token, or with one no user
holds, is answered 401 before it reaches MCP. Logs go to stderr only: on stdio, stdout
is the protocol.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from mcp_server.auth import HashedTokenVerifier
from mcp_server.context import AppContext, ServerDeps
from mcp_server.metrics import register_metrics
from mcp_server.prompts import register_prompts
from mcp_server.queue_tools import register_queue_tools
from mcp_server.resources import register_resources
from mcp_server.tools import register_tools
from tools.planning.service import shared_chain

__all__ = [
    "DEFAULT_HOST",
    "build_server",
    "freeze_startup_heap",
    "http_app",
    "log_to_stderr",
    "run_http",
    "run_stdio",
]

DEFAULT_HOST = "127.0.0.1"
INSTRUCTIONS = (
    "Rightsize plans HPC jobs against a center's real policies. list_systems and "
    "describe_partition show the center; what_if answers 'where should I run this and what "
    "will it cost'; build_plan stores a draft; submit_plan runs it only with confirm=true "
    "after the user agreed. Costs are in each center's own unit (SU, core-hours)."
)


def log_to_stderr(level: int = logging.WARNING) -> None:
    """Every log record to stderr; stdout stays the protocol's."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def build_server(
    deps: ServerDeps,
    *,
    verifier: HashedTokenVerifier | None = None,
    host: str = DEFAULT_HOST,
    port: int = 8765,
) -> MCPServer[AppContext]:
    """The server; with ``verifier``, its HTTP app requires a bearer token."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
        async with AsyncExitStack() as stack:
            kb = await stack.enter_async_context(deps.open_kb())
            # The server's one estimator chain: histories train once, not once a call.
            shared_chain(kb, config=deps.chain_config(), promoted=deps.promoted)
            bus = await stack.enter_async_context(deps.open_bus()) if deps.open_bus else None
            yield AppContext(kb=kb, deps=deps, bus=bus)

    auth = None
    if verifier is not None:
        base = f"http://{host}:{port}"
        auth = AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            validate_token_resource=False,  # our verifier issues no audience; it is local
        )
    server: MCPServer[AppContext] = MCPServer(
        name="rightsize",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        token_verifier=verifier,
        auth=auth,
        log_level="WARNING",
    )
    register_tools(server)
    register_queue_tools(server)
    register_resources(server, deps)
    register_prompts(server)
    register_metrics(server, deps, verifier)
    return server


def freeze_startup_heap() -> None:
    """Move everything alive after start-up out of the garbage collector's way.

    Imports and the server build leave hundreds of thousands of long-lived objects (the
    SDK's and the domain's pydantic models, the planner's tables). Every full collection
    walked them all, a pause that landed on a request now and then: ``what_if`` over
    HTTP had p50 22 ms but p99 139 ms; with the start-up heap frozen, p99 33 ms
    (``benchmarks/mcp.py``, 200 calls). Objects made later are collected as usual.
    """
    gc.collect()
    gc.freeze()


def http_app(server: MCPServer[AppContext], host: str = DEFAULT_HOST) -> Starlette:
    """The streamable HTTP app at /mcp (stateless: each request stands alone)."""
    app = server.streamable_http_app(host=host, stateless_http=True, json_response=True)
    freeze_startup_heap()
    return app


def run_http(server: MCPServer[AppContext], host: str = DEFAULT_HOST, port: int = 8765) -> None:
    """Serve streamable HTTP until interrupted; uvicorn logs to stderr."""
    uvicorn.run(http_app(server, host), host=host, port=port, log_level="warning")


def run_stdio(server: MCPServer[AppContext]) -> None:
    freeze_startup_heap()
    server.run("stdio")
