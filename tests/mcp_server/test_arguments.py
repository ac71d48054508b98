"""Tool arguments are flat, as the reference servers take them (issue #19 item 10): a
tool with nothing required accepts ``{}``, and every argument an assistant sees carries
a description (the main ones an example)."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client

from mcp_server.queue_tools import QUEUE_TOOLS
from mcp_server.server import build_server
from mcp_server.tools import TOOLS
from tests.mcp_server.conftest import make_deps

EXAMPLED = {"workload", "plan_id", "system", "partition", "model_class", "batch_sizes"}


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    loaded: dict[str, Any] = json.loads(result.content[0].text)
    return loaded


async def test_schemas_are_flat_described_and_exemplified(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS) | set(QUEUE_TOOLS)
    for name, tool in tools.items():
        properties = tool.input_schema["properties"]
        assert "request" not in properties, name
        for argument, schema in properties.items():
            assert schema.get("description"), f"{name}.{argument} has no description"
            if argument in EXAMPLED:
                assert schema.get("examples"), f"{name}.{argument} has no example"
    assert "required" not in tools["list_systems"].input_schema
    assert tools["describe_partition"].input_schema["required"] == ["system", "partition"]


async def test_tools_with_nothing_required_accept_empty_arguments(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        systems = _data(await client.call_tool("list_systems", {}))["systems"]
        history = _data(await client.call_tool("get_job_history", {}))
        pitzer = _data(await client.call_tool("list_systems", {"center": "osc"}))["systems"]
    assert len(systems) == 6 and history["jobs"] == []
    assert {s["name"] for s in pitzer} >= {"pitzer"}


async def test_cross_field_rules_still_hold_on_flat_arguments(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        both = await client.call_tool("explain_infeasibility", {})
    assert both.is_error
    assert both.content[0].text.endswith(": give exactly one of workload or plan_id")
    assert "Value error" not in both.content[0].text
