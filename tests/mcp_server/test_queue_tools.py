"""The predict_job_start MCP tool through the SDK's in-memory client."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mcp import Client

from knowledge_base.open import open_knowledge_base
from knowledge_base.records import JobRecord, JobState
from mcp_server.server import build_server
from tests.mcp_server.conftest import make_deps
from tools.waits.job_start import NewJob, predict_job_start
from tools.waits.jobs import JobTable
from tools.waits.snapshot import WaitSnapshot

pytestmark = pytest.mark.timeout(120)

SNAPSHOT: dict[str, Any] = {
    "taken_at": 1_700_000_000,
    "total_procs": 10,
    "running": [
        {
            "job_id": "r1",
            "user": "a",
            "procs": 8,
            "submit_s": 1_699_999_000,
            "start_s": 1_699_999_100,
            "requested_s": 3600,
        }
    ],
    "pending": [
        {"job_id": "p1", "user": "b", "procs": 5, "submit_s": 1_699_999_500, "requested_s": 1800}
    ],
}


async def test_a_new_job_gets_the_same_start_as_the_function(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "predict_job_start" in names
        result = await client.call_tool(
            "predict_job_start",
            {"snapshot": SNAPSHOT, "new_job": {"procs": 10, "requested_s": 600}},
        )
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer is not None
    direct = predict_job_start(
        WaitSnapshot.model_validate(SNAPSHOT),
        JobTable.build([], 10),
        new_job=NewJob(procs=10, requested_s=600),
    )
    assert answer == direct.model_dump(mode="json")
    assert answer["p10_s"] <= answer["start_s"] <= answer["p90_s"]
    assert answer["start_s"] > SNAPSHOT["taken_at"]  # it waits for the running job


async def test_history_comes_from_the_knowledge_base(kb_url: str) -> None:
    kb = open_knowledge_base(kb_url)
    start = datetime.fromtimestamp(SNAPSHOT["taken_at"], UTC) - timedelta(days=1)
    await kb.add_new_jobs(
        [
            JobRecord(
                job_id=str(i),
                system="pitzer",
                user="b",
                state=JobState.COMPLETED,
                submit_time=start,
                start_time=start + timedelta(minutes=5),
                end_time=start + timedelta(minutes=25),
                requested_nodes=1,
                requested_walltime_s=3600,
                source="test",
            )
            for i in range(3)
        ]
    )
    await kb.close()
    async with Client(build_server(make_deps(kb_url))) as client:
        result = await client.call_tool(
            "predict_job_start", {"snapshot": SNAPSHOT, "job_id": "p1", "system": "pitzer"}
        )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["job_id"] == "p1"


async def test_an_unknown_job_is_a_tool_error_naming_it(kb_url: str) -> None:
    async with Client(build_server(make_deps(kb_url))) as client:
        result = await client.call_tool("predict_job_start", {"snapshot": SNAPSHOT, "job_id": "zz"})
    assert result.is_error
    assert "zz" in result.content[0].text
