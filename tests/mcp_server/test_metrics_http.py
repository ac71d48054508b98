"""/metrics on the MCP HTTP server: what-if latency from real calls, 401 beyond loopback."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcp_server.auth import HashedTokenVerifier, add_user
from mcp_server.server import build_server, http_app
from tests.mcp_server.conftest import HttpServer, make_deps, resnet_spec
from tests.mcp_server.test_server import data, http_client


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_what_if_calls_are_timed_and_scraped_from_loopback(
    http_server: HttpServer,
) -> None:
    # The first what-if of ResNet-50 traces its GPU step for the per-operator time model
    # (about 7 s of CPU here, more on a loaded machine): longer than httpx's 5 s default.
    async with http_client(http_server.url, http_server.tokens["bob"], 120.0) as bob:
        data(await bob.call_tool("what_if", {"workload": resnet_spec("bob"), "top": 2}))
        data(await bob.call_tool("list_systems", {}))
    url = http_server.url.removesuffix("/mcp") + "/metrics"
    response = httpx.get(url, timeout=10)  # loopback: no token needed
    assert response.status_code == 200
    found = samples(response.text)
    assert found[("rightsize_what_if_seconds_count", frozenset({("caller", "mcp")}))] == 1
    key = frozenset({("tool", "what_if"), ("outcome", "ok")})
    assert found[("rightsize_mcp_tool_seconds_count", key)] == 1
    assert found[("rightsize_up", frozenset({("part", "knowledge_base")}))] == 1
    assert ("rightsize_plans", frozenset({("state", "draft")})) in found


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("bad", 401), ("alice", 200)])
async def test_beyond_loopback_metrics_need_a_users_token(
    kb_url: str, tmp_path: Path, token: str | None, status: int
) -> None:
    token_file = tmp_path / "tokens.json"
    tokens = {"alice": add_user(token_file, "alice"), "bad": "not-a-token"}
    server = build_server(make_deps(kb_url), verifier=HashedTokenVerifier.from_file(token_file))
    transport = httpx.ASGITransport(app=http_app(server), client=("10.9.8.7", 4000))
    headers = {"Authorization": f"Bearer {tokens[token]}"} if token else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://mcp") as client:
        response = await client.get("/metrics", headers=headers)
    assert response.status_code == status
    assert ("rightsize_up" in response.text) == (status == 200)
