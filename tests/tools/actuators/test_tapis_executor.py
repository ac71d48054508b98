"""Tapis specifics against the local Tapis server: tokens, refusals, outages, the wire."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from knowledge_base.records import JobState
from tests.tools.actuators.conftest import Harness, quick_job
from tests.tools.actuators.tapis_server import FakeTapis
from tools.actuators.model import JobNotFound, RequestRejected, SubmissionFailed
from tools.actuators.tapis import TapisCredentials, TapisExecutor


def _executor(url: str, credentials: TapisCredentials) -> TapisExecutor:
    return TapisExecutor(
        url,
        exec_system_id="testcluster",
        app_id="rightsize-run",
        app_version="1.0",
        credentials=credentials,
        timeout_s=5,
    )


async def test_submission_carries_the_request_as_tapis_job_fields(
    tapis: Harness, tapis_server: FakeTapis, workdir: Path
) -> None:
    request = quick_job(workdir, gpus_per_node=0, plan_id="plan-7", tasks_per_node=2)
    job_id = await tapis.executor.submit(request)
    definition = tapis_server.jobs[job_id].definition
    assert definition["execSystemLogicalQueue"] == "debug"
    assert (definition["nodeCount"], definition["coresPerNode"]) == (1, 2)
    assert (definition["memoryMB"], definition["maxMinutes"]) == (100, 1)
    assert definition["parameterSet"]["appArgs"] == [{"arg": "echo hello from rightsize"}]
    assert {"key": "RIGHTSIZE_PLAN_ID", "value": "plan-7"} in (
        definition["parameterSet"]["envVariables"]
    )


async def test_an_expired_token_is_refreshed_once_and_the_call_retried(
    tapis_server: FakeTapis, workdir: Path
) -> None:
    executor = _executor(tapis_server.url, TapisCredentials(username="testuser", password="secret"))
    try:
        job_id = await executor.submit(quick_job(workdir))
        first_token = executor.credentials.access_token
        tapis_server.expire_all_tokens()
        status = await executor.status(job_id)
        assert status.state in (JobState.PENDING, JobState.RUNNING)
        assert executor.credentials.access_token != first_token
        assert ("PUT", "/v3/oauth2/tokens") in tapis_server.requests  # refresh-token grant
    finally:
        await executor.close()


async def test_bad_credentials_fail_without_retrying_forever(tapis_server: FakeTapis) -> None:
    executor = _executor(tapis_server.url, TapisCredentials(username="testuser", password="wrong"))
    try:
        with pytest.raises(SubmissionFailed, match="token refresh failed: HTTP 401") as caught:
            await executor.queue()
        assert not caught.value.transient
    finally:
        await executor.close()


async def test_tenant_side_refusal_is_a_rejected_request(
    tapis_server: FakeTapis, workdir: Path
) -> None:
    """No catalog given, so only Tapis itself can refuse the 5-minute debug job."""
    executor = _executor(tapis_server.url, TapisCredentials(tapis_server.issue_token()))
    try:
        with pytest.raises(RequestRejected, match="JOBS_QUEUE_MAX_MINUTES_EXCEEDED"):
            await executor.submit(quick_job(workdir, walltime_s=300))
        with pytest.raises(JobNotFound):
            await executor.cancel("no-such-uuid")
    finally:
        await executor.close()


async def test_unreachable_tenant_is_a_transient_failure(workdir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    executor = _executor(f"http://127.0.0.1:{port}", TapisCredentials("any-token"))
    try:
        with pytest.raises(SubmissionFailed) as caught:
            await executor.submit(quick_job(workdir))
        assert caught.value.transient
    finally:
        await executor.close()
