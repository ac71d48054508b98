"""``rightsize mcp``: the MCP server for chat assistants and MCP clients.

    rightsize mcp                                  stdio, acting for RIGHTSIZE_MCP_USER (or you)
    rightsize mcp --http [--port 8765] [--host 127.0.0.1]   streamable HTTP, bearer tokens
    rightsize mcp --center                         also run the six agents in this process
    rightsize mcp add-user NAME [--expires-days D] a new token for NAME, printed once
    rightsize mcp remove-user NAME                 revoke NAME's token
    rightsize mcp list-users                       who holds a token, and until when

A running HTTP server follows the token file: added, replaced and removed users take
effect at the next request, no restart.

Without --center, submit_plan hands plans to the center's agents over Kafka
(RIGHTSIZE_KAFKA_BOOTSTRAP); with neither, it refuses and submits nothing.
Exit status 2 on bad settings or arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import typer

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.settings import Settings

if TYPE_CHECKING:  # the MCP SDK, uvicorn and the agents load when the server starts
    from agents.bus.base import Bus
    from knowledge_base.catalog import System
    from knowledge_base.store import KnowledgeBase
    from mcp_server.context import ServerDeps
    from tools.actuators.base import Executor

__all__ = ["app", "deps_for", "serve"]

app = typer.Typer(help="The MCP server (stdio or streamable HTTP).")

DEFAULT_HOST = "127.0.0.1"  # mcp_server.server.DEFAULT_HOST (a test checks they agree)


def deps_for(settings: Settings, *, bus: Bus | None, allow_model_code: bool) -> ServerDeps:
    """The server's view of the settings: the knowledge base, executors, the bus."""
    from mcp_server.context import ServerDeps
    from rightsize.wiring import chain_config, knowledge_base, open_executor, promoted_loader
    from tools.planning.cost import DollarRates

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
        promoted=promoted_loader,
        chain=chain_config(settings),
    )


async def _serve(
    settings: Settings, *, http: bool, host: str, port: int, center: bool, allow_model_code: bool
) -> None:
    import uvicorn

    from agents.center import AGENT_NAMES, open_bus
    from mcp_server.auth import HashedTokenVerifier
    from mcp_server.server import build_server, freeze_startup_heap, http_app
    from rightsize.commands.center import running_center

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
    as_json: bool = typer.Option(
        False, "--json", help="Errors as JSON on stdout (before the server starts)."
    ),
) -> None:
    """Serve Rightsize's tools over MCP; logs go to stderr."""
    if ctx.invoked_subcommand is not None:
        return
    from mcp_server.server import log_to_stderr

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
        fail(error, as_json)
    except KeyboardInterrupt:
        pass


@app.command("add-user")
def add_user_command(
    name: str = typer.Argument(..., help="The user the token acts for"),
    expires_days: float | None = typer.Option(
        None, "--expires-days", help="The token stops working after this many days"
    ),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"user", "token", "expires_at", "tokens_file"}.'
    ),
) -> None:
    """Create (or replace) NAME's bearer token; prints it once, stores only its hash.

    A running HTTP server takes the new token, and refuses the one it replaces, at once.
    """
    from datetime import timedelta

    from mcp_server.auth import add_user, load_tokens

    settings = Settings()
    path = settings.mcp_tokens_path()
    try:
        if expires_days is not None and not 0 < expires_days <= 36_500:
            raise InvalidInputError(
                "must be more than 0 and at most 36500", field="--expires-days", value=expires_days
            )
        expires = None if expires_days is None else timedelta(days=expires_days)
        token = add_user(path, name, expires_in=expires)
        entry = next(e for e in load_tokens(path).users if e.user == name)
    except RightsizeError as error:
        fail(error, as_json)
    expires_at = None if entry.expires_at is None else entry.expires_at.isoformat()
    if as_json:
        body = {"user": name, "token": token, "expires_at": expires_at, "tokens_file": str(path)}
        emit(body, True, lambda: None)
        return
    typer.echo(token)
    until = f"; it expires {expires_at}" if expires_at else ""
    typer.echo(f"stored its SHA-256 in {path}{until}", err=True)


@app.command("remove-user")
def remove_user_command(
    name: str = typer.Argument(..., help="The user whose token to revoke"),
    as_json: bool = typer.Option(False, "--json", help='Print {"user", "removed"}.'),
) -> None:
    """Revoke NAME's token; a running HTTP server refuses it from the next request on."""
    from mcp_server.auth import remove_user

    settings = Settings()
    try:
        removed = remove_user(settings.mcp_tokens_path(), name)
        if not removed:
            raise InvalidInputError(
                f"no such user in {settings.mcp_tokens_path()}", field="NAME", value=name
            )
    except RightsizeError as error:
        fail(error, as_json)
    emit({"user": name, "removed": True}, as_json, lambda: typer.echo(f"removed {name}"))


@app.command("list-users")
def list_users_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The users who hold a token: when it was made, when it expires (never the token)."""
    from datetime import UTC, datetime

    from rich.table import Table

    from mcp_server.auth import load_tokens

    settings = Settings()
    try:
        tokens = load_tokens(settings.mcp_tokens_path())
    except RightsizeError as error:
        fail(error, as_json)
    now = datetime.now(UTC)
    users = [
        {
            "user": e.user,
            "created_at": None if e.created_at is None else e.created_at.isoformat(),
            "expires_at": None if e.expires_at is None else e.expires_at.isoformat(),
            "expired": e.expired(now),
        }
        for e in tokens.users
    ]

    def render() -> None:
        table = Table(title=f"{len(users)} users in {settings.mcp_tokens_path()}")
        for column in ("user", "created", "expires", "state"):
            table.add_column(column)
        for u in users:
            table.add_row(
                str(u["user"]),
                str(u["created_at"] or "?"),
                str(u["expires_at"] or "never"),
                "expired" if u["expired"] else "active",
            )
        console.print(table)

    emit({"tokens_file": str(settings.mcp_tokens_path()), "users": users}, as_json, render)
