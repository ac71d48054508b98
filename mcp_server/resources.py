"""The MCP resources: the center catalog, partition policies, and the caller's plans.

    rightsize://catalog                          every system, as list_systems shows it
    rightsize://systems/{system}/partitions      one system's partition policies (JSON)
    rightsize://plans                            the caller's plans, newest first (JSON)

The SDK gives static resources no request context, so each opens the knowledge base
through the server's deps for the read; the plans resource answers only for the
authenticated caller.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from knowledge_base.errors import RightsizeError
from mcp_server.auth import current_user
from mcp_server.context import AppContext, ServerDeps
from mcp_server.tools import ListSystemsInput, list_systems

__all__ = ["register_resources"]


def register_resources(server: MCPServer[AppContext], deps: ServerDeps) -> None:
    @server.resource(
        "rightsize://catalog",
        name="catalog",
        description="The center catalog: systems, partitions, node types, longest walltime",
        mime_type="application/json",
    )
    async def catalog() -> str:
        async with deps.open_kb() as kb:
            app = AppContext(kb=kb, deps=deps, bus=None)
            result = await list_systems(ListSystemsInput(), app, current_user(deps.stdio_user))
        return result.model_dump_json(indent=1)

    @server.resource(
        "rightsize://systems/{system}/partitions",
        name="partition_policies",
        description="One system's partition policies: limits, GPUs, charges, sources",
        mime_type="application/json",
    )
    async def partitions(system: str) -> str:
        try:
            async with deps.open_kb() as kb:
                found = await kb.get_system(system)
        except RightsizeError as exc:
            raise ResourceError(str(exc)) from exc
        body = {
            "system": found.name,
            "center": found.center,
            "max_jobs_per_user": found.max_jobs_per_user,
            "partitions": [p.model_dump(mode="json") for p in found.partitions],
        }
        return json.dumps(body, indent=1)

    @server.resource(
        "rightsize://plans",
        name="my_plans",
        description="Your plans (only yours), newest first",
        mime_type="application/json",
    )
    async def plans() -> str:
        user = current_user(deps.stdio_user)
        async with deps.open_kb() as kb:
            mine = await kb.list_plans(user=user)
        mine.sort(key=lambda p: p.updated_at, reverse=True)
        return json.dumps(
            {"user": user, "plans": [p.model_dump(mode="json") for p in mine]}, indent=1
        )
