"""Tapis v3 Jobs API through httpx (async): submit, status, get, cancel, list, tokens.

tapipy cannot be installed beside mcp and is synchronous, so Rightsize speaks the REST
API itself. Tapis runs registered *apps*; the executor submits to one app (a generic
"run this script" app the center registers) and passes the command as its argument and
the resources as job fields. Every call sends ``X-Tapis-Token``; a 401 refreshes the
token once (``PUT /v3/oauth2/tokens`` with the refresh token, else ``POST`` with the
password) and retries.

Responses are Tapis's envelope ``{"status", "message", "result", "version"}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from knowledge_base.catalog import System
from knowledge_base.records import JobRecord, JobState
from tools.actuators.base import Executor
from tools.actuators.model import (
    JobNotFound,
    JobRequest,
    JobStatus,
    QueueEntry,
    RequestRejected,
    SubmissionFailed,
    WalltimeNotExtended,
)
from tools.actuators.state import NodePool

if TYPE_CHECKING:
    import httpx

__all__ = [
    "TAPIS_CONDITIONS",
    "TAPIS_STATES",
    "TapisCredentials",
    "TapisExecutor",
    "tapis_job_definition",
]

TAPIS_STATES: Mapping[str, JobState] = {
    "PENDING": JobState.PENDING,
    "PROCESSING_INPUTS": JobState.PENDING,
    "STAGING_INPUTS": JobState.PENDING,
    "STAGING_JOB": JobState.PENDING,
    "SUBMITTING_JOB": JobState.PENDING,
    "QUEUED": JobState.PENDING,
    "BLOCKED": JobState.PENDING,
    "PAUSED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "ARCHIVING": JobState.RUNNING,
    "FINISHED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,
    "FAILED": JobState.FAILED,
}
"""Tapis job status -> JobState; a terminal status is refined by its condition code."""

TAPIS_CONDITIONS: Mapping[str, JobState] = {
    "NORMAL_COMPLETION": JobState.COMPLETED,
    "SCHEDULER_TIMEOUT": JobState.TIMEOUT,
    "SCHEDULER_DEADLINE": JobState.TIMEOUT,
    "SCHEDULER_OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "SCHEDULER_CANCELLED": JobState.CANCELLED,
    "CANCELLED_BY_USER": JobState.CANCELLED,
    "SCHEDULER_STOPPED": JobState.CANCELLED,
    "SCHEDULER_TERMINATED": JobState.FAILED,
    "JOB_REMOTE_OUTCOME_ERROR": JobState.FAILED,
}
"""Tapis condition codes (set on termination) that say more than the status does."""


class TapisCredentials:
    """A token, and what it takes to get a new one."""

    def __init__(
        self,
        access_token: str | None = None,
        *,
        refresh_token: str | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.access_token = access_token
        self.refresh_token = refresh_token
        self.username = username
        self.password = password


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def tapis_job_definition(
    request: JobRequest, *, exec_system_id: str, app_id: str, app_version: str
) -> dict[str, Any]:
    """The Tapis v3 ``POST /v3/jobs/submit`` body for ``request`` (pure; planning renders it)."""
    options = []
    if request.gpus_per_node:
        options.append({"arg": f"--gpus-per-node={request.gpus_per_node}"})
    if request.account:
        options.append({"arg": f"--account={request.account}"})
    if request.qos:
        options.append({"arg": f"--qos={request.qos}"})
    env = [{"key": k, "value": v} for k, v in sorted(request.environment.items())]
    if request.plan_id:
        env.append({"key": "RIGHTSIZE_PLAN_ID", "value": request.plan_id})
    return {
        "name": request.name,
        "appId": app_id,
        "appVersion": app_version,
        "execSystemId": exec_system_id,
        "execSystemLogicalQueue": request.partition,
        "nodeCount": request.nodes,
        "coresPerNode": request.cores_per_node,
        "memoryMB": request.memory_mb,
        "maxMinutes": request.walltime_minutes,
        "parameterSet": {
            "appArgs": [{"arg": request.command}],
            "schedulerOptions": options,
            "envVariables": env,
        },
        "tags": [f"rightsize-plan:{request.plan_id}"] if request.plan_id else [],
    }


class TapisExecutor(Executor):
    """Jobs on one Tapis execution system, through one registered app."""

    backend = "tapis"

    def __init__(
        self,
        base_url: str,
        *,
        exec_system_id: str,
        app_id: str,
        app_version: str,
        credentials: TapisCredentials,
        system: System | None = None,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(system)
        self.exec_system_id = exec_system_id
        self.app_id = app_id
        self.app_version = app_version
        self.credentials = credentials
        # httpx costs ~0.2 s to import: only an executor that talks to Tapis loads it.
        import httpx

        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport
        )

    async def close(self) -> None:
        await self._client.aclose()

    # -- HTTP plumbing -------------------------------------------------------------------

    async def _refresh_token(self) -> None:
        creds = self.credentials
        if creds.refresh_token:
            response = await self._client.put(
                "/v3/oauth2/tokens", json={"refresh_token": creds.refresh_token}
            )
        elif creds.username and creds.password:
            response = await self._client.post(
                "/v3/oauth2/tokens",
                json={
                    "username": creds.username,
                    "password": creds.password,
                    "grant_type": "password",
                },
            )
        else:
            raise SubmissionFailed("Tapis token expired and no refresh token or password given")
        if response.status_code >= 400:
            raise SubmissionFailed(
                f"Tapis token refresh failed: HTTP {response.status_code} {response.text[:200]}",
                transient=response.status_code >= 500,
            )
        result = response.json().get("result") or {}
        creds.access_token = (result.get("access_token") or {}).get("access_token")
        refresh = (result.get("refresh_token") or {}).get("refresh_token")
        creds.refresh_token = refresh or creds.refresh_token
        if not creds.access_token:
            raise SubmissionFailed("Tapis token response carried no access_token")

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The ``result`` of one Tapis call; refreshes the token once on 401."""
        import httpx

        for attempt in (1, 2):
            if self.credentials.access_token is None:
                await self._refresh_token()
            headers = {"X-Tapis-Token": self.credentials.access_token or ""}
            try:
                response = await self._client.request(method, path, headers=headers, **kwargs)
            except httpx.HTTPError as exc:
                raise SubmissionFailed(
                    f"Tapis {method} {path}: {type(exc).__name__}: {exc}", transient=True
                ) from exc
            if response.status_code == 401 and attempt == 1:
                self.credentials.access_token = None
                continue
            return self._result(method, path, response)
        raise SubmissionFailed(f"Tapis {method} {path}: still unauthorized after a new token")

    @staticmethod
    def _result(method: str, path: str, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = {"message": response.text[:200]}
        message = body.get("message", "") if isinstance(body, dict) else ""
        if response.status_code == 404:
            raise JobNotFound(f"Tapis {method} {path}: {message or 'not found'}")
        if response.status_code >= 400:
            raise SubmissionFailed(
                f"Tapis {method} {path}: HTTP {response.status_code}: {message}",
                transient=response.status_code >= 500 or response.status_code == 429,
            )
        return body.get("result") if isinstance(body, dict) else None

    # -- the executor interface -----------------------------------------------------------

    def job_definition(self, request: JobRequest) -> dict[str, Any]:
        """The ``POST /v3/jobs/submit`` body for ``request``."""
        return tapis_job_definition(
            request,
            exec_system_id=self.exec_system_id,
            app_id=self.app_id,
            app_version=self.app_version,
        )

    async def _submit(self, request: JobRequest) -> str:
        try:
            result = await self._call("POST", "/v3/jobs/submit", json=self.job_definition(request))
        except SubmissionFailed as exc:
            if not exc.transient and "HTTP 400" in str(exc):
                raise RequestRejected(str(exc), field="request") from exc
            raise
        uuid = (result or {}).get("uuid")
        if not uuid:
            raise SubmissionFailed(f"Tapis accepted the job but returned no uuid: {result!r}")
        return str(uuid)

    async def status(self, job_id: str) -> JobStatus:
        job = await self._call("GET", f"/v3/jobs/{job_id}")
        return self._status(job)

    @staticmethod
    def _status(job: dict[str, Any]) -> JobStatus:
        native = str(job.get("status", "")).upper()
        state = TAPIS_STATES.get(native, JobState.UNKNOWN)
        condition = str(job.get("condition") or "")
        if state not in (JobState.PENDING, JobState.RUNNING) and condition in TAPIS_CONDITIONS:
            state = TAPIS_CONDITIONS[condition]
        exit_code = str(job.get("remoteResultInfo") or "")
        return JobStatus(
            job_id=str(job["uuid"]),
            state=state,
            native_state=native,
            name=job.get("name"),
            partition=job.get("execSystemLogicalQueue"),
            exit_code=int(exit_code) if exit_code.lstrip("-").isdigit() else None,
            reason=condition or str(job.get("lastMessage") or ""),
            submit_time=_time(job.get("created")),
            start_time=_time(job.get("remoteStarted")),
            end_time=_time(job.get("ended")),
        )

    async def statuses(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """One job listing for every watched job; one GET for any the listing lacks."""
        wanted = list(job_ids)
        listed = {str(j.get("uuid")): j for j in await self._list()}
        found = {}
        for job_id in wanted:
            if job_id in listed:
                found[job_id] = self._status(listed[job_id])
                continue
            try:
                found[job_id] = await self.status(job_id)
            except JobNotFound:
                continue
        return found

    async def find_by_name(self, name: str) -> str | None:
        named = [j for j in await self._list() if j.get("name") == name]
        if not named:
            return None
        newest = max(named, key=lambda j: str(j.get("created") or ""))
        return str(newest["uuid"])

    async def _node_pools(self) -> list[NodePool]:
        """The Jobs API says nothing about nodes: one pool per logical queue, node counts
        unknown (planning calls the wait unknown); queue depth comes from the job list."""
        queues = (
            [p.name for p in self.system.partitions]
            if self.system is not None
            else sorted(
                {
                    str(j["execSystemLogicalQueue"])
                    for j in await self._list()
                    if j.get("execSystemLogicalQueue")
                }
            )
        )
        return [NodePool(name=queue, partitions=[queue]) for queue in queues]

    async def cancel(self, job_id: str) -> None:
        status = await self.status(job_id)
        if status.finished:
            return
        await self._call("POST", f"/v3/jobs/{job_id}/cancel")

    async def extend_walltime(self, job_id: str, new_limit_s: int) -> None:
        """The Tapis v3 Jobs API has no call to change a submitted job's
        maxMinutes: callers fall back to resubmitting (the Re-scheduler)."""
        raise WalltimeNotExtended(
            f"Tapis cannot extend job {job_id!r} to {new_limit_s} s: the Jobs API has no "
            "call to change a submitted job's maxMinutes (it is resubmitted instead)"
        )

    async def _list(self) -> list[dict[str, Any]]:
        jobs = await self._call("GET", "/v3/jobs/list", params={"limit": -1, "listType": "ALL"})
        return [
            j
            for j in jobs or []
            if j.get("execSystemId", self.exec_system_id) == self.exec_system_id
        ]

    async def queue(self) -> list[QueueEntry]:
        entries = []
        for brief in await self._list():
            status = self._status(brief)
            if status.state not in (JobState.PENDING, JobState.RUNNING):
                continue
            entries.append(
                QueueEntry(
                    job_id=status.job_id,
                    state=status.state,
                    partition=status.partition,
                    user=brief.get("owner"),
                    nodes=int(brief.get("nodeCount") or 1),
                    cpus=int(brief.get("nodeCount") or 1) * int(brief.get("coresPerNode") or 1),
                    time_limit_s=int(brief["maxMinutes"]) * 60 if brief.get("maxMinutes") else None,
                    submit_time=status.submit_time,
                    start_time=status.start_time,
                )
            )
        return entries

    async def finished_jobs(self, since: datetime | None = None) -> list[JobRecord]:
        records = []
        system = self.system.name if self.system is not None else self.exec_system_id
        for brief in await self._list():
            status = self._status(brief)
            if not status.finished or status.end_time is None:
                continue
            if since is not None and status.end_time < since:
                continue
            records.append(
                status.to_record(
                    system,
                    "tapis",
                    user=brief.get("owner"),
                    requested_nodes=brief.get("nodeCount"),
                    requested_memory_mb=brief.get("memoryMB"),
                    requested_walltime_s=(
                        int(brief["maxMinutes"]) * 60 if brief.get("maxMinutes") else None
                    ),
                )
            )
        return records
