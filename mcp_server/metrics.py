"""/metrics on the MCP HTTP server: tool latency (what-if among them) and the center's state.

Every tool call is timed into the server's own ``CenterMetrics`` (``ServerDeps.metrics``):
``rightsize_mcp_tool_seconds{tool, outcome}``, and ``rightsize_what_if_seconds{caller="mcp"}``
for ``what_if``. A scrape also reads plans, jobs and estimators from the knowledge base,
bounded by the metrics' timeout, and probes the bus when the server has one. Loopback
scrapes need no token; beyond loopback a bearer token from the MCP token file (else 401).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import Response

from agents.metrics import CONTENT_TYPE
from mcp_server.auth import HashedTokenVerifier
from mcp_server.context import AppContext, ServerDeps
from mcp_server.http_access import Access, unauthorized

__all__ = ["register_metrics"]

log = logging.getLogger(__name__)


def register_metrics(
    server: MCPServer[AppContext], deps: ServerDeps, verifier: HashedTokenVerifier | None
) -> None:
    access = Access(verifier=verifier)
    metrics = deps.metrics

    async def scrape(request: Request) -> Response:
        if access.caller(request) is None:
            return unauthorized()
        async with contextlib.AsyncExitStack() as stack:
            kb = None
            try:
                kb = await asyncio.wait_for(
                    stack.enter_async_context(deps.open_kb()), metrics.timeout_s
                )
            except Exception as exc:  # the scrape still answers, with the outage visible
                log.warning("metrics: knowledge base unavailable: %s", exc or "timeout")
                metrics.up.labels("knowledge_base").set(0)
            bus = None
            if deps.open_bus is not None:
                bus = await stack.enter_async_context(deps.open_bus())
            await metrics.refresh(kb, (), bus)
            return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    server.custom_route("/metrics", methods=["GET"], include_in_schema=False)(scrape)
