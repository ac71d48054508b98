"""A local HTTP server speaking the Tapis v3 Jobs and token API, for tests.

A stand-in for a Tapis tenant (none is reachable here): it serves the endpoints
Rightsize calls, with Tapis's response envelope, status names and condition codes, over
real HTTP on 127.0.0.1. Jobs move one step per ``GET /v3/jobs/{uuid}``:
PENDING -> QUEUED -> RUNNING -> (after ``TAPIS_TEST_RUN_POLLS`` polls, default 1)
FINISHED. An ``exit N`` command (N > 0) ends FAILED with JOB_REMOTE_OUTCOME_ERROR; a
``maxMinutes`` above the queue's limit is rejected with 400, as Tapis does.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _envelope(result: Any, status: int = 200, message: str = "ok") -> JSONResponse:
    body = {
        "status": "success" if status < 400 else "error",
        "message": message,
        "result": result,
        "version": "1.6.0",
        "metadata": None,
    }
    return JSONResponse(body, status_code=status)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeJob:
    definition: dict[str, Any]
    uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    status: str = "PENDING"
    condition: str | None = None
    polls_running: int = 0
    created: str = field(default_factory=_now)
    started: str | None = None
    ended: str | None = None
    exit_code: str | None = None

    def env(self, key: str) -> str | None:
        for pair in self.definition.get("parameterSet", {}).get("envVariables", []):
            if pair.get("key") == key:
                return str(pair.get("value"))
        return None

    def step(self) -> None:
        """One poll's worth of progress."""
        if self.status == "PENDING":
            self.status = "QUEUED"
        elif self.status == "QUEUED":
            self.status, self.started = "RUNNING", _now()
        elif self.status == "RUNNING":
            self.polls_running += 1
            if self.polls_running >= int(self.env("TAPIS_TEST_RUN_POLLS") or 1):
                command = " ".join(a["arg"] for a in self.definition["parameterSet"]["appArgs"])
                failed = re.search(r"\bexit\s+([1-9]\d*)", command)
                self.ended = _now()
                if failed:
                    self.status, self.condition = "FAILED", "JOB_REMOTE_OUTCOME_ERROR"
                    self.exit_code = failed.group(1)
                else:
                    self.status, self.condition, self.exit_code = (
                        "FINISHED",
                        "NORMAL_COMPLETION",
                        "0",
                    )

    def view(self) -> dict[str, Any]:
        d = self.definition
        return {
            "uuid": self.uuid,
            "name": d.get("name"),
            "owner": "testuser",
            "appId": d.get("appId"),
            "appVersion": d.get("appVersion"),
            "execSystemId": d.get("execSystemId"),
            "execSystemLogicalQueue": d.get("execSystemLogicalQueue"),
            "nodeCount": d.get("nodeCount"),
            "coresPerNode": d.get("coresPerNode"),
            "memoryMB": d.get("memoryMB"),
            "maxMinutes": d.get("maxMinutes"),
            "status": self.status,
            "condition": self.condition,
            "created": self.created,
            "remoteStarted": self.started,
            "ended": self.ended,
            "remoteResultInfo": self.exit_code,
            "lastMessage": f"job is {self.status}",
        }


class FakeTapis:
    """Tenant state plus a uvicorn server on a free loopback port."""

    def __init__(
        self, queues: dict[str, int], username: str = "testuser", password: str = "secret"
    ) -> None:
        self.queues = queues  # logical queue -> maxMinutes
        self.username, self.password = username, password
        self.tokens: set[str] = set()
        self.refresh_tokens: set[str] = set()
        self.jobs: dict[str, FakeJob] = {}
        self.requests: list[tuple[str, str]] = []
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(
            routes=[
                Route("/v3/oauth2/tokens", self.tokens_endpoint, methods=["POST", "PUT"]),
                Route("/v3/jobs/submit", self.submit, methods=["POST"]),
                Route("/v3/jobs/list", self.list_jobs, methods=["GET"]),
                Route("/v3/jobs/{job_uuid}", self.get_job, methods=["GET"]),
                Route("/v3/jobs/{job_uuid}/status", self.get_status, methods=["GET"]),
                Route("/v3/jobs/{job_uuid}/cancel", self.cancel, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> FakeTapis:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake Tapis server did not start within 10 s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def issue_token(self) -> str:
        token = f"tok-{uuid.uuid4().hex}"
        self.tokens.add(token)
        return token

    def expire_all_tokens(self) -> None:
        self.tokens.clear()

    # -- endpoints ------------------------------------------------------------------------

    async def tokens_endpoint(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append((request.method, "/v3/oauth2/tokens"))
        if request.method == "PUT":
            if body.get("refresh_token") not in self.refresh_tokens:
                return _envelope(None, 401, "invalid refresh token")
        elif (body.get("username"), body.get("password")) != (self.username, self.password):
            return _envelope(None, 401, "invalid credentials")
        refresh = f"ref-{uuid.uuid4().hex}"
        self.refresh_tokens.add(refresh)
        return _envelope(
            {
                "access_token": {"access_token": self.issue_token(), "expires_in": 14400},
                "refresh_token": {"refresh_token": refresh, "expires_in": 86400},
            },
            201,
            "Token created",
        )

    def _authorized(self, request: Request) -> bool:
        self.requests.append((request.method, request.url.path))
        return request.headers.get("X-Tapis-Token") in self.tokens

    async def submit(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return _envelope(None, 401, "TAPIS_SECURITY_TOKEN_INVALID")
        definition = await request.json()
        for required in ("name", "appId", "appVersion"):
            if not definition.get(required):
                return _envelope(None, 400, f"JOBS_MISSING_REQUIRED: {required}")
        queue = definition.get("execSystemLogicalQueue")
        if queue not in self.queues:
            return _envelope(None, 400, f"JOBS_INVALID_QUEUE: {queue}")
        if int(definition.get("maxMinutes", 0)) > self.queues[queue]:
            return _envelope(
                None,
                400,
                f"JOBS_QUEUE_MAX_MINUTES_EXCEEDED: "
                f"{definition['maxMinutes']} > {self.queues[queue]}",
            )
        job = FakeJob(definition)
        self.jobs[job.uuid] = job
        return _envelope(job.view(), 200, "JOBS_CREATED")

    def _job(self, request: Request) -> FakeJob | None:
        return self.jobs.get(request.path_params["job_uuid"])

    async def get_job(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return _envelope(None, 401, "TAPIS_SECURITY_TOKEN_INVALID")
        job = self._job(request)
        if job is None:
            return _envelope(None, 404, "JOBS_JOB_NOT_FOUND")
        job.step()
        return _envelope(job.view())

    async def get_status(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return _envelope(None, 401, "TAPIS_SECURITY_TOKEN_INVALID")
        job = self._job(request)
        if job is None:
            return _envelope(None, 404, "JOBS_JOB_NOT_FOUND")
        return _envelope({"status": job.status})

    async def cancel(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return _envelope(None, 401, "TAPIS_SECURITY_TOKEN_INVALID")
        job = self._job(request)
        if job is None:
            return _envelope(None, 404, "JOBS_JOB_NOT_FOUND")
        if job.status not in ("FINISHED", "FAILED", "CANCELLED"):
            job.status, job.condition, job.ended = "CANCELLED", "CANCELLED_BY_USER", _now()
        return _envelope({"message": "cancel requested"})

    async def list_jobs(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return _envelope(None, 401, "TAPIS_SECURITY_TOKEN_INVALID")
        return _envelope([job.view() for job in self.jobs.values()])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
