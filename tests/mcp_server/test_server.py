"""The MCP server through the SDK's own client: in memory, over stdio and over HTTP."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agents.bus.memory import InMemoryBus
from agents.events import decode_event
from agents.topics import PLANS
from knowledge_base.open import open_knowledge_base
from knowledge_base.records import JobRecord, JobState, PlanStatus
from mcp_server.queue_tools import QUEUE_TOOLS
from mcp_server.server import build_server
from mcp_server.tools import TOOLS
from tests.mcp_server.conftest import REPO, HttpServer, make_deps, resnet_spec

pytestmark = pytest.mark.timeout(120)

MODEL_FILE = """
import torch
from torch import nn

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(x)
"""


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    out: dict[str, Any] = result.structured_content
    return out


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    text: str = result.content[0].text
    return text


def http_client(url: str, token: str | None, read_timeout_s: float = 5.0) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(5.0, read=read_timeout_s)
    return Client(
        streamable_http_client(
            url, http_client=httpx2.AsyncClient(headers=headers, timeout=timeout)
        )
    )


async def add_jobs(url: str) -> None:
    kb = open_knowledge_base(url)
    now = datetime.now(UTC)
    await kb.add_jobs(
        [
            JobRecord(
                job_id="1",
                system="pitzer",
                user="alice",
                state=JobState.COMPLETED,
                submit_time=now,
                run_s=60,
            ),
            JobRecord(
                job_id="2",
                system="pitzer",
                user="bob",
                state=JobState.FAILED,
                submit_time=now,
                run_s=5,
            ),
        ]
    )
    await kb.close()


# -- in memory: every tool, resource and prompt -----------------------------------------


async def test_tools_are_listed_with_input_models_and_honest_annotations(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS) | set(QUEUE_TOOLS)
    for name in ("list_systems", "what_if", "get_plan_status", "get_job_history"):
        assert tools[name].annotations.read_only_hint is True
    assert tools["cancel_plan"].annotations.destructive_hint is True
    assert tools["submit_plan"].annotations.read_only_hint is False
    assert tools["submit_plan"].annotations.idempotent_hint is True
    assert tools["build_plan"].annotations.idempotent_hint is False
    assert "confirm" in json.dumps(tools["submit_plan"].input_schema)


async def test_every_tool_answers_in_memory(kb_url: str, bus: InMemoryBus) -> None:
    await add_jobs(kb_url)
    spec = resnet_spec()
    async with Client(build_server(make_deps(kb_url, bus=bus))) as client:
        systems = data(await client.call_tool("list_systems", {}))["systems"]
        assert {s["name"] for s in systems} >= {"pitzer", "frontera"}
        part = data(
            await client.call_tool(
                "describe_partition", {"system": "pitzer", "partition": "serial"}
            )
        )
        assert part["partition"]["max_minutes"] > 0
        est = data(await client.call_tool("estimate_resources", {"workload": spec}))
        assert est["estimates"] and est["options"] > len(est["estimates"])
        model = {
            "source": MODEL_FILE,
            "model_class": "Tiny",
            "batch_sizes": [8],
            "input_shape": [32],
            "num_classes": 10,
            "hardware": ["pitzer/serial"],
        }
        est = data(await client.call_tool("estimate_resources", {"model_file": model}))
        assert est["estimates"][0]["batch_size"] == 8
        assert est["estimates"][0]["system"] == "pitzer"
        assert est["estimates"][0]["partition"] == "serial"
        whatif = data(await client.call_tool("what_if", {"workload": spec, "top": 3}))
        assert whatif["recommended"]["system"] == "pitzer"
        assert len(whatif["feasible"]) == 3 and whatif["infeasible_count"] > 0
        built = data(await client.call_tool("build_plan", {"workload": spec}))
        plan_id = built["plan_id"]
        assert built["status"] == "draft"
        why = data(await client.call_tool("explain_infeasibility", {"plan_id": plan_id}))
        assert why["infeasible"] and why["by_constraint"]
        sub = data(await client.call_tool("submit_plan", {"plan_id": plan_id, "confirm": True}))
        assert sub["submitted"] and not sub["already_submitted"]
        status = data(await client.call_tool("get_plan_status", {"plan_id": plan_id}))
        assert status["plan"]["id"] == plan_id
        history = data(await client.call_tool("get_job_history", {}))
        assert [j["user"] for j in history["jobs"]] == ["alice"]
        # No Scheduler listens on this bus: the cancellation is handed over, not done
        # (tests/agents/test_ledger.py runs it through the Scheduler).
        cancel = data(await client.call_tool("cancel_plan", {"plan_id": plan_id, "wait_s": 0}))
        assert cancel["requested"] and cancel["event_id"] and not cancel["already_final"]


async def test_submit_plan_needs_confirm_and_is_idempotent(kb_url: str, bus: InMemoryBus) -> None:
    watch = bus.consumer([PLANS], group_id="test")
    await watch.start()
    async with Client(build_server(make_deps(kb_url, bus=bus))) as client:
        built = data(await client.call_tool("build_plan", {"workload": resnet_spec()}))
        plan_id = built["plan_id"]
        refused = error_text(
            await client.call_tool("submit_plan", {"plan_id": plan_id, "confirm": False})
        )
        assert "confirm" in refused
        assert await watch.poll(timeout_s=0.2) == []  # nothing half-submitted
        first = data(await client.call_tool("submit_plan", {"plan_id": plan_id, "confirm": True}))
        second = data(await client.call_tool("submit_plan", {"plan_id": plan_id, "confirm": True}))
    assert first["event_id"] == second["event_id"] and second["already_submitted"]
    events = [decode_event(r.value) for r in await watch.poll(timeout_s=1.0)]
    assert {e.type for e in events} == {"plan.requested"}
    assert {str(e.id) for e in events} == {first["event_id"]}  # one event, however often sent
    assert events[0].payload.spec.user == "alice"
    # It carries exactly the option build_plan showed, to be run as it is (not re-planned).
    recommended = built["recommended"]
    assert first["option_id"] == recommended["option_id"]
    confirmed = events[0].payload.confirmed
    assert confirmed is not None and confirmed.option is not None
    assert (confirmed.option.partition, confirmed.option.walltime_s) == (
        recommended["partition"],
        recommended["walltime_s"],
    )


async def test_submit_without_agents_refuses_and_stores_nothing_new(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        built = data(await client.call_tool("build_plan", {"workload": resnet_spec()}))
        text = error_text(
            await client.call_tool("submit_plan", {"plan_id": built["plan_id"], "confirm": True})
        )
        assert "nothing was submitted" in text
        status = data(await client.call_tool("get_plan_status", {"plan_id": built["plan_id"]}))
    assert status["plan"]["status"] == PlanStatus.DRAFT


async def test_resources_and_prompts(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"rightsize://catalog", "rightsize://plans"} <= uris
        templates = (await client.list_resource_templates()).resource_templates
        assert any("partitions" in t.uri_template for t in templates)
        catalog = json.loads((await client.read_resource("rightsize://catalog")).contents[0].text)
        assert len(catalog["systems"]) >= 6
        policies = await client.read_resource("rightsize://systems/pitzer/partitions")
        assert json.loads(policies.contents[0].text)["system"] == "pitzer"
        plans = json.loads((await client.read_resource("rightsize://plans")).contents[0].text)
        assert plans == {"user": "alice", "plans": []}
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert prompts == {"plan_training_job", "why_did_my_job_fail"}
        got = await client.get_prompt("plan_training_job", {"model": "resnet50"})
        assert "what_if" in got.messages[0].content.text
        got = await client.get_prompt("why_did_my_job_fail", {"plan_id": "p1"})
        assert "get_plan_status" in got.messages[0].content.text


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        (
            "what_if",
            {
                "workload": {
                    **resnet_spec(),
                    "workload": {**resnet_spec()["workload"], "epochs": "many"},
                }
            },
            "epochs",
        ),
        ("what_if", {}, "workload"),
        ("describe_partition", {"system": "pitzer"}, "partition"),
        ("describe_partition", {"system": "nowhere", "partition": "x"}, "nowhere"),
        (
            "what_if",
            {
                "workload": {
                    **resnet_spec(),
                    "workload": {**resnet_spec()["workload"], "epochs": 10**15},
                }
            },
            "workload.epochs",
        ),
        (
            "what_if",
            {
                "workload": {
                    **resnet_spec(),
                    "workload": {**resnet_spec()["workload"], "batch_sizes": [10**9]},
                }
            },
            "batch_sizes",
        ),
        (
            "estimate_resources",
            {
                "model_file": {
                    "source": "class Broken(:\n",
                    "model_class": "Broken",
                    "batch_sizes": [8],
                }
            },
            "model_file.source",
        ),
        (
            "estimate_resources",
            {
                "model_file": {
                    "source": "x = 1\n",
                    "model_class": "Missing",
                    "batch_sizes": [8],
                }
            },
            "model_class",
        ),
        ("build_plan", {"workload": resnet_spec("bob")}, "workload.user"),
        ("submit_plan", {"plan_id": "p"}, "confirm"),
        ("get_job_history", {"limit": 10**9}, "limit"),
    ],
)
async def test_bad_input_is_a_tool_error_naming_the_field(
    kb_url: str, tool: str, arguments: dict[str, Any], field: str
) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        text = error_text(await client.call_tool(tool, arguments))
        assert field in text
        # the server keeps serving
        assert data(await client.call_tool("list_systems", {}))["systems"]


async def test_an_absurd_dataset_is_answered_as_infeasible_not_by_running_out_of_memory(
    kb_url: str,
) -> None:
    # 10^12 samples once made the planner build a cascade of billions of segments and
    # drove the process past 23 GB (the fuzz below found it).
    spec = resnet_spec()
    spec["goals"]["systems"] = ["pitzer"]
    spec["workload"]["dataset_samples"] = 10**12
    async with Client(build_server(make_deps(kb_url))) as client:
        answer = data(await client.call_tool("what_if", {"workload": spec, "top": 100}))
    assert answer["feasible"] == []
    reasons = " ".join(option["reason"] for option in answer["infeasible"])
    assert "a cascade of" in reasons


# -- isolation --------------------------------------------------------------------------


async def test_user_a_cannot_read_submit_or_cancel_user_bs_plans(
    kb_url: str, bus: InMemoryBus
) -> None:
    await add_jobs(kb_url)
    async with Client(build_server(make_deps(kb_url, user="bob", bus=bus))) as bob:
        plan_id = data(await bob.call_tool("build_plan", {"workload": resnet_spec("bob")}))[
            "plan_id"
        ]
    async with Client(build_server(make_deps(kb_url, user="alice", bus=bus))) as alice:
        for tool, args in (
            ("get_plan_status", {"plan_id": plan_id}),
            ("submit_plan", {"plan_id": plan_id, "confirm": True}),
            ("cancel_plan", {"plan_id": plan_id}),
            ("explain_infeasibility", {"plan_id": plan_id}),
            ("get_job_history", {"plan_id": plan_id}),
        ):
            assert "you have no plan" in error_text(await alice.call_tool(tool, args))
        plans = json.loads((await alice.read_resource("rightsize://plans")).contents[0].text)
        assert plans["plans"] == []
        jobs = data(await alice.call_tool("get_job_history", {}))["jobs"]
        assert {j["user"] for j in jobs} == {"alice"}
    async with Client(build_server(make_deps(kb_url, user="bob", bus=bus))) as bob:
        status = data(await bob.call_tool("get_plan_status", {"plan_id": plan_id}))
    assert status["plan"]["status"] == "draft"  # untouched by alice


# -- stdio ------------------------------------------------------------------------------


async def test_stdio_server_lists_calls_and_reads(kb_url: str, tmp_path: Any) -> None:
    env = {
        **os.environ,
        "RIGHTSIZE_HOME": str(tmp_path),
        "RIGHTSIZE_KB_URL": kb_url,
        "RIGHTSIZE_EXECUTOR": "simulated",
        "RIGHTSIZE_MCP_USER": "alice",
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rightsize", "mcp"], env=env, cwd=str(REPO)
    )
    async with Client(params, read_timeout_seconds=60) as client:
        assert len((await client.list_tools()).tools) == len(TOOLS) + len(QUEUE_TOOLS)
        whatif = data(await client.call_tool("what_if", {"workload": resnet_spec(), "top": 1}))
        assert whatif["recommended"] is not None
        built = data(await client.call_tool("build_plan", {"workload": resnet_spec()}))
        plans = json.loads((await client.read_resource("rightsize://plans")).contents[0].text)
        assert [p["id"] for p in plans["plans"]] == [built["plan_id"]]
        prompt = await client.get_prompt("why_did_my_job_fail", {})
        assert prompt.messages


# -- HTTP -------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_http_without_or_with_a_wrong_token_is_401(
    http_server: HttpServer, token: str | None
) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(http_server.url, json=body, headers=headers, timeout=10)
    assert response.status_code == 401


async def test_http_lists_calls_reads_and_isolates_users(http_server: HttpServer) -> None:
    async with http_client(http_server.url, http_server.tokens["bob"]) as bob:
        assert len((await bob.list_tools()).tools) == len(TOOLS) + len(QUEUE_TOOLS)
        plan_id = data(await bob.call_tool("build_plan", {"workload": resnet_spec("bob")}))[
            "plan_id"
        ]
        mine = json.loads((await bob.read_resource("rightsize://plans")).contents[0].text)
        assert mine["user"] == "bob" and [p["id"] for p in mine["plans"]] == [plan_id]
    async with http_client(http_server.url, http_server.tokens["alice"]) as alice:
        assert "you have no plan" in error_text(
            await alice.call_tool("cancel_plan", {"plan_id": plan_id})
        )
        assert "workload.user" in error_text(
            await alice.call_tool("build_plan", {"workload": resnet_spec("bob")})
        )
        theirs = json.loads((await alice.read_resource("rightsize://plans")).contents[0].text)
        assert theirs == {"user": "alice", "plans": []}
        assert data(await alice.call_tool("list_systems", {"center": "TACC"}))


async def test_plan_status_asks_the_batch_system_about_the_plans_jobs(kb_url: str) -> None:
    # A plan with a job id: get_plan_status opens the system's executor and asks it.
    # The deps' executor factory was once called with arguments SimulatedCluster no
    # longer takes, which only a plan with a job id reaches.
    from knowledge_base.records import CascadeSegment, SegmentState

    async with Client(build_server(make_deps(kb_url))) as client:
        built = data(await client.call_tool("build_plan", {"workload": resnet_spec()}))
        kb = open_knowledge_base(kb_url)
        try:
            plan = await kb.get_plan(built["plan_id"])
            segment = CascadeSegment(
                index=0, walltime_s=600, job_id="4242", state=SegmentState.PENDING
            )
            await kb.put_plan(plan.model_copy(update={"segments": [segment]}))
        finally:
            await kb.close()
        status = data(await client.call_tool("get_plan_status", {"plan_id": built["plan_id"]}))
    # The simulated cluster never saw job 4242: a per-job error, not a failed tool call.
    assert status["jobs"] == [] and len(status["job_errors"]) == 1
    assert status["job_errors"][0].startswith("4242: ")
