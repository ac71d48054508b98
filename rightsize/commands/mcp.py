"""``rightsize mcp``: the MCP server for chat assistants and MCP clients.

    rightsize mcp                                  stdio, acting for RIGHTSIZE_MCP_USER (or you)
    rightsize mcp --http [--port 8765] [--host 127.0.0.1]   streamable HTTP, bearer tokens
    rightsize mcp --center                         also run the six agents in this process
    rightsize mcp add-user NAME                    a new token for NAME, printed once

Without --center, submit_plan hands plans to the center's agents over Kafka
(RIGHTSIZE_KAFKA_BOOTSTRAP); with neither, it refuses and submits nothing.
Exit status 2 on bad settings or arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import AsyncIterator

import typer
import uvicorn

from agents.bus.base import Bus
from agents.center import AGENT_NAMES, open_bus
from knowledge_base.catalog import System
from knowledge_base.errors import RightsizeError
from knowledge_base.store import KnowledgeBase
from mcp_server.auth import HashedTokenVerifier, add_user
from mcp_server.context import ServerDeps
from mcp_server.server import (
    DEFAULT_HOST,
    build_server,
    freeze_startup_heap,
    http_app,
    log_to_stderr,
)
from rightsize.commands.center import running_center
from rightsize.output import fail
from rightsize.settings import Settings
from rightsize.wiring import knowledge_base, open_executor
from tools.actuators.base import Executor
from tools.planning.cost import DollarRates

__all__ = ["app", "deps_for", "serve"]

app = typer.Typer(help="The MCP server (stdio or streamable HTTP).")


def deps_for(settings: Settings, *, bus: Bus | None, allow_model_code: bool) -> ServerDeps:
    """The server's view of the settings: the knowledge base, executors, the bus."""

    @contextlib.asynccontextmanager
    async def open_kb() -> AsyncIterator[KnowledgeBase]:
        async with knowledge_base(settings) as kb:
            yield kb

    @contextlib.asynccontextmanager
    async def shared_bus() -> AsyncIterator[Bus]:
        assert bus is not None
        yield bus

    def executor(system: System) -> Executor:
        return open_executor(settings, system)

    return ServerDeps(
        open_kb=open_kb,
        open_executor=executor,
        stdio_user=settings.mcp_user or getpass.getuser(),
        open_bus=shared_bus if bus is not None else None,
        rates=DollarRates(
            usd_per_su=settings.usd_per_su,
            usd_per_core_hour=settings.usd_per_core_hour,
            usd_per_gpu_hour=settings.usd_per_gpu_hour,
        ),
        home=settings.home.expanduser(),
        allow_model_code=allow_model_code,
    )


async def _serve(
    settings: Settings, *, http: bool, host: str, port: int, center: bool, allow_model_code: bool
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        bus: Bus | None = None
        if center:
            running = await stack.enter_async_context(running_center(settings, AGENT_NAMES))
            bus = running.bus
        elif settings.kafka_bootstrap:
            bus = await stack.enter_async_context(
                open_bus(settings.kafka_bootstrap, client_id="rightsize-mcp")
            )
        deps = deps_for(settings, bus=bus, allow_model_code=allow_model_code)
        if not http:
            server = build_server(deps)
            freeze_startup_heap()
            await server.run_stdio_async()
            return
        verifier = HashedTokenVerifier.from_file(settings.mcp_tokens_path())
        server = build_server(deps, verifier=verifier, host=host, port=port)
        config = uvicorn.Config(http_app(server, host), host=host, port=port, log_level="warning")
        await uvicorn.Server(config).serve()


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    http: bool = typer.Option(False, "--http", help="Streamable HTTP instead of stdio"),
    host: str = typer.Option(DEFAULT_HOST, "--host", help="Address to bind (HTTP)"),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port (HTTP)"),
    center: bool = typer.Option(False, "--center", help="Run the agents in this process"),
    allow_model_code: bool | None = typer.Option(
        None,
        "--allow-model-code/--no-model-code",
        help="Let estimate_resources run a model file's code (default: on for stdio only)",
    ),
) -> None:
    """Serve Rightsize's tools over MCP; logs go to stderr."""
    if ctx.invoked_subcommand is not None:
        return
    log_to_stderr()
    settings = Settings()
    try:
        asyncio.run(
            _serve(
                settings,
                http=http,
                host=host,
                port=port,
                center=center,
                allow_model_code=(not http) if allow_model_code is None else allow_model_code,
            )
        )
    except RightsizeError as error:
        fail(error, False)
    except KeyboardInterrupt:
        pass


@app.command("add-user")
def add_user_command(name: str = typer.Argument(..., help="The user the token acts for")) -> None:
    """Create (or replace) NAME's bearer token; prints it once, stores only its hash."""
    settings = Settings()
    try:
        token = add_user(settings.mcp_tokens_path(), name)
    except RightsizeError as error:
        fail(error, False)
    typer.echo(token)
    typer.echo(f"stored its SHA-256 in {settings.mcp_tokens_path()}", err=True)
