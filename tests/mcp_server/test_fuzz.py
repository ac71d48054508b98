"""A hypothesis fuzz of tool arguments (1,200 cases): every answer is a result or a tool
error with a message, never a server error, and the server keeps answering."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from agents.bus.memory import InMemoryBus
from mcp_server.server import build_server
from mcp_server.tools import TOOLS
from tests.mcp_server.conftest import make_deps, resnet_spec

pytestmark = pytest.mark.timeout(180)

SETTINGS = settings(
    max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "workload",
    "plan_id",
    "confirm",
    "system",
    "partition",
    "center",
    "top",
    "objective",
    "model_file",
    "limit",
    "reason",
    "request_text",
    "submitted_after",
    "application",
]


class Server:
    def __init__(self, portal: Any, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, name: str, arguments: dict[str, Any]) -> None:
        result = self.portal.call(self.client.call_tool, name, arguments)
        if result.is_error:
            text = result.content[0].text
            # An unexpected exception is reported as the bare prefix, with no message.
            assert text.strip() != f"Error executing tool {name}", (name, arguments)
            assert ":" in text.removeprefix(f"Error executing tool {name}")


@pytest.fixture
def server(kb_url: str) -> Iterator[Server]:
    with anyio.from_thread.start_blocking_portal() as portal:
        bus = portal.call(_started_bus)
        client = Client(build_server(make_deps(kb_url, bus=bus)))
        with portal.wrap_async_context_manager(client):
            yield Server(portal, client)
        portal.call(bus.stop)


async def _started_bus() -> InMemoryBus:
    bus = InMemoryBus()
    await bus.start()
    return bus


def test_random_arguments_never_crash_the_server(server: Server) -> None:
    @SETTINGS
    @given(
        name=st.sampled_from(sorted(TOOLS)),
        request=st.one_of(
            json_value, st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=4)
        ),
        wrap=st.booleans(),
    )
    def run(name: str, request: Any, wrap: bool) -> None:
        # The client itself refuses arguments that are not an object.
        unwrapped = request if isinstance(request, dict) else {"value": request}
        server.call(name, {"request": request} if wrap else unwrapped)

    run()


PATHS = [
    ("workload", "epochs"),
    ("workload", "dataset_samples"),
    ("workload", "batch_sizes"),
    ("workload", "input_shape"),
    ("workload", "max_nodes"),
    ("workload", "model"),
    ("workload", "kind"),
    ("workload", "precision"),
    ("goals", "systems"),
    ("goals", "objective"),
    ("goals", "budget"),
    ("goals", "deadline"),
    ("name",),
    ("user",),
]
values = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**20),
    st.lists(st.integers(min_value=-5, max_value=10**7), max_size=5),
    st.text(max_size=20),
    st.none(),
    st.sampled_from(["pitzer", ["frontera", "nowhere"], "cheapest", "2020-01-01T00:00:00Z"]),
)


def test_mutated_workload_specs_never_crash_the_server(server: Server) -> None:
    base = resnet_spec()
    base["goals"]["systems"] = ["pitzer"]

    @settings(
        max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(
        name=st.sampled_from(["what_if", "estimate_resources", "explain_infeasibility"]),
        path=st.sampled_from(PATHS),
        value=values,
    )
    def run(name: str, path: tuple[str, ...], value: Any) -> None:
        spec = copy.deepcopy(base)
        target = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        server.call(name, {"workload": spec})

    run()


def test_plan_arguments_never_crash_the_server(server: Server) -> None:
    @SETTINGS
    @given(
        name=st.sampled_from(["submit_plan", "cancel_plan", "get_plan_status", "get_job_history"]),
        plan_id=st.one_of(st.text(max_size=300), st.integers(), st.none()),
        confirm=st.one_of(st.booleans(), st.text(max_size=5), st.integers()),
        limit=st.integers(min_value=-5, max_value=10**7),
    )
    def run(name: str, plan_id: Any, confirm: Any, limit: Any) -> None:
        request: dict[str, Any] = {"plan_id": plan_id}
        if name == "submit_plan":
            request["confirm"] = confirm
        if name == "get_job_history":
            request = {"plan_id": plan_id, "limit": limit} if plan_id else {"limit": limit}
        server.call(name, request)

    run()
