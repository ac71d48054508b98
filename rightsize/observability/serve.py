"""Serving the status page and the metrics beside a running center.

``observing(center, metrics, options)`` starts what ``options`` asks for (the status
page on ``status_port``, the metrics on ``metrics_port``) for as long as the block runs,
and yields the ports it bound. Both listen on loopback unless told otherwise; beyond
loopback they answer only requests with a bearer token from the MCP token file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.center import Center
from agents.metrics import CenterMetrics
from mcp_server.auth import HashedTokenVerifier
from rightsize.observability.feed import EventFeed
from rightsize.observability.server import (
    Access,
    Observed,
    metrics_app,
    serving,
    status_app,
)
from rightsize.observability.waits import WaitBoard
from rightsize.settings import Settings

__all__ = ["DEFAULT_STATUS_PORT", "ObserveOptions", "observing"]

log = logging.getLogger(__name__)

DEFAULT_STATUS_PORT = 8780
"""Where ``rightsize center status`` looks first (``--status-port 8780``)."""


class ObserveOptions(BaseModel):
    """What to serve and to whom."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status_port: int | None = Field(default=None, ge=0, le=65535)
    status_host: str = Field(default="127.0.0.1", min_length=1)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    tokens_file: Path | None = Field(
        default=None, description="MCP token file: who may look from beyond loopback"
    )
    staff: tuple[str, ...] = Field(
        default=(), description="Users whose token shows every user's plans"
    )
    simulations_dir: Path | None = None
    timeout_s: float = Field(default=2.0, gt=0, description="Per knowledge-base read")

    @classmethod
    def of(cls, settings: Settings, **options: Any) -> ObserveOptions:
        """Options for a center run with ``settings``: its token file, its simulations."""
        home = settings.home.expanduser()
        return cls(
            tokens_file=settings.mcp_tokens_path(),
            simulations_dir=home / "simulations",
            **options,
        )

    @property
    def wanted(self) -> bool:
        return self.status_port is not None or self.metrics_port is not None


def _access(options: ObserveOptions) -> Access:
    if options.tokens_file is None:
        return Access(staff=frozenset(options.staff))
    verifier = HashedTokenVerifier.from_file(options.tokens_file)  # follows the file
    return Access(verifier=verifier, staff=frozenset(options.staff))


@contextlib.asynccontextmanager
async def observing(
    center: Center, metrics: CenterMetrics, options: ObserveOptions
) -> AsyncIterator[dict[str, int]]:
    """Serve what ``options`` asks for beside ``center``; yields {"status": port, ...}."""
    ports: dict[str, int] = {}
    if not options.wanted:
        yield ports
        return
    access = _access(options)
    async with contextlib.AsyncExitStack() as stack:
        feed = None
        if options.status_port is not None:
            feed = await stack.enter_async_context(EventFeed(center.bus))
        observed = Observed(
            kb=center.kb,
            runners=lambda: list(center.runners.values()),
            feed=feed,
            bus=center.bus,
            metrics=metrics,
            simulations_dir=options.simulations_dir,
            timeout_s=options.timeout_s,
            waits=WaitBoard(center.kb, center.executors),
        )
        if options.status_port is not None:
            ports["status"] = await stack.enter_async_context(
                serving(
                    status_app(observed, access),
                    options.status_host,
                    options.status_port,
                    option="--status-port",
                )
            )
        if options.metrics_port is not None:
            ports["metrics"] = await stack.enter_async_context(
                serving(
                    metrics_app(observed, access),
                    options.metrics_host,
                    options.metrics_port,
                    option="--metrics-port",
                )
            )
        yield ports
