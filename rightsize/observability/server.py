"""The status page and the metrics endpoint, served by the process that runs the agents.

    status_app(observed, access)   GET /             the page (static: no data, no build step,
                                                     nothing fetched from outside)
                                   GET /api/status   the picture as JSON, for this viewer
                                   GET /metrics      Prometheus text format
    metrics_app(observed, access)  GET /metrics      the same, alone (--metrics-port)

Who may see what (``mcp_server.http_access.Access``, shared with the MCP server's
/metrics): a request from loopback without a token is the operator (the center's own
host); a request with a bearer token is the user the MCP token file says it is (staff
users see everything, other users their own plans and counts of the rest); anything
else, or an unknown token, is answered 401. Data are never in the page
itself, only behind /api/status, so the page shell may be fetched from anywhere.

``serving(app, host, port)`` runs an app inside the caller's event loop (beside the
agents), without taking over the process's signal handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from agents.bus.base import Bus
from agents.metrics import CONTENT_TYPE, CenterMetrics
from agents.runtime import AgentRunner
from knowledge_base.errors import InvalidInputError
from knowledge_base.store import KnowledgeBase
from mcp_server.http_access import Access, unauthorized
from rightsize.observability.feed import EventFeed
from rightsize.observability.status import StatusSnapshot, Viewer, collect_status, for_viewer
from rightsize.observability.waits import WaitBoard

__all__ = ["Access", "Observed", "metrics_app", "serving", "status_app"]  # Access: re-exported

log = logging.getLogger(__name__)


def _page() -> str:
    return resources.files("rightsize.observability").joinpath("status.html").read_text("utf-8")


@dataclass
class Observed:
    """What the page and the metrics read: the knowledge base, the runners, the feed."""

    kb: KnowledgeBase | None
    runners: Callable[[], Sequence[AgentRunner]] = lambda: ()
    feed: EventFeed | None = None
    bus: Bus | None = None
    metrics: CenterMetrics = field(default_factory=CenterMetrics)
    simulations_dir: Path | None = None
    timeout_s: float = 2.0
    cache_s: float = 1.0
    waits: WaitBoard | None = None  # pending jobs' learned starts (waits.py)
    _last: tuple[float, asyncio.Future[StatusSnapshot]] | None = field(
        default=None, init=False, repr=False
    )

    async def snapshot(self) -> StatusSnapshot:
        """The picture, shared by every request within ``cache_s`` of it (many open
        pages cost the knowledge base one read a second, not one each)."""
        now = time.monotonic()
        last = self._last
        if last is None or (last[1].done() and now - last[0] >= self.cache_s):
            task = asyncio.ensure_future(self._collect())
            self._last = last = (now, task)
        return await asyncio.shield(last[1])

    async def _collect(self) -> StatusSnapshot:
        return await collect_status(
            self.kb,
            [r.health() for r in self.runners()],
            self.feed,
            bus=self.bus,
            simulations_dir=self.simulations_dir,
            timeout_s=self.timeout_s,
            waits=self.waits,
        )

    async def scrape(self) -> bytes:
        await self.metrics.refresh(self.kb, self.runners(), self.bus)
        return self.metrics.exposition()


def _metrics_route(observed: Observed, access: Access) -> Route:
    async def metrics(request: Request) -> Response:
        if access.caller(request) is None:
            return unauthorized()
        return Response(await observed.scrape(), media_type=CONTENT_TYPE)

    return Route("/metrics", metrics)


def status_app(observed: Observed, access: Access) -> Starlette:
    page = _page()

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def status(request: Request) -> Response:
        caller = access.caller(request)
        if caller is None:
            return unauthorized()
        snapshot = for_viewer(await observed.snapshot(), Viewer(user=caller.user))
        return Response(
            snapshot.model_dump_json(),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/status", status),
            _metrics_route(observed, access),
        ]
    )


def metrics_app(observed: Observed, access: Access) -> Starlette:
    return Starlette(routes=[_metrics_route(observed, access)])


class _Embedded(uvicorn.Server):
    """uvicorn beside other work: the process's own signal handlers stay in charge."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


@contextlib.asynccontextmanager
async def serving(
    app: Starlette, host: str, port: int, *, option: str = "port", start_timeout_s: float = 10.0
) -> AsyncIterator[int]:
    """Serve ``app`` on ``host:port`` until the block ends; yields the bound port (for 0).

    The socket is bound here, not by uvicorn (which exits the process when it cannot
    bind): a port that cannot be bound is an ``InvalidInputError`` naming ``option``."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise InvalidInputError(
            f"cannot serve on {host}:{port}: {exc.strerror or exc}", field=option, value=port
        ) from exc
    server = _Embedded(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"http-{host}:{port}")
    try:
        deadline = asyncio.get_running_loop().time() + start_timeout_s
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError(f"the server on {host}:{port} stopped as it started")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the server on {host}:{port} did not start")
            await asyncio.sleep(0.01)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            sock.close()
