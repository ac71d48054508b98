"""``rightsize center run``: the six agents, in this process or one per process.

    rightsize center run                    every agent, embedded: the in-process bus, the
                                            knowledge base from the settings, the local
                                            SLURM if it answers, else the simulated cluster
    rightsize center run --agent scheduler  one agent (repeat --agent for several) on
                                            Kafka (RIGHTSIZE_KAFKA_BOOTSTRAP): run one
                                            process per agent, replicas share the work
    rightsize center run --duration-s 60 --json   stop after a minute; print each agent's health

SIGTERM or Ctrl-C stops it gracefully: each agent finishes the event in hand, commits
and publishes what it owes. Exit status 2 on bad settings or arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.store import KnowledgeBase
from rightsize.output import fail
from rightsize.settings import Settings
from rightsize.wiring import (
    AUTO_FELL_BACK,
    chain_config,
    knowledge_base,
    open_executor,
    resolve_executor,
)
from tools.actuators.base import Executor
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands
from tools.planning.builder import PlanningConfig
from tools.planning.cost import DollarRates

if TYPE_CHECKING:  # the agents (langgraph among them) load when a center starts
    from agents.center import AgentName, Center, CenterConfig
    from agents.intelligence.goals import GoalPlanner
    from rightsize.observability.serve import ObserveOptions

# agents.center.AGENT_NAMES, spelled out so `--help` loads no agent (a test checks they agree)
AGENT_NAMES: tuple[AgentName, ...] = (
    "intelligence",
    "estimation",
    "optimization",
    "profiling",
    "scheduler",
    "promotion",
)

__all__ = ["app", "build_executors", "center_config", "goal_planner", "run_command"]

log = logging.getLogger(__name__)

app = typer.Typer(help="Run Rightsize's agents.", no_args_is_help=True)

_PROVIDERS = {
    "openai": ("langchain_openai", "ChatOpenAI"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic"),
    "ollama": ("langchain_ollama", "ChatOllama"),
}


def goal_planner(settings: Settings) -> GoalPlanner:
    """The rule-based planner, or an LLM planner over the chat model the settings name."""
    from agents.intelligence.goals import LLMGoalPlanner, RuleGoalPlanner

    spec = settings.llm_model
    if not spec:
        return RuleGoalPlanner()
    head, _, tail = spec.partition(":")
    if not tail:
        raise InvalidInputError(
            "expected 'provider:model' or 'package.module:Class'", field="llm_model", value=spec
        )
    module_name, class_name, kwargs = head, tail, {}
    if head in _PROVIDERS:
        module_name, class_name = _PROVIDERS[head]
        kwargs = {"model": tail}
    try:
        model_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(
            f"cannot load the chat model ({exc}); install its LangChain package or unset it",
            field="llm_model",
            value=spec,
        ) from exc
    return LLMGoalPlanner(model_class(**kwargs), name=f"llm {spec}")


async def build_executors(
    settings: Settings, kb: KnowledgeBase, work_dir: Any = None
) -> dict[str, Executor]:
    """Executors by catalog system: the local SLURM, a Tapis system, or the simulated cluster.

    The local SLURM is (re)imported into the catalog as ``settings.local_system`` so plans
    can target it. Simulated, each system of the catalog is a cluster of its node types
    and partitions, all in the one journal the processes of this home share.
    """
    kind = await asyncio.to_thread(resolve_executor, settings)
    if kind == "slurm":
        system = await asyncio.to_thread(
            import_slurm_system, settings.local_system, "local", SlurmCommands()
        )
        await kb.put_system(system)
        return {system.name: SlurmExecutor(system=system, output_dir=work_dir)}
    catalog = await kb.get_catalog()
    if kind == "tapis":
        name = settings.tapis_system or ""
        known = catalog.system(name) if name in catalog.names() else None
        return {name: open_executor(settings.model_copy(update={"executor": "tapis"}), known)}
    # One cluster per system, every one from the journal all processes share.
    simulated = settings.model_copy(update={"executor": "simulated"})
    return {system.name: open_executor(simulated, system) for system in catalog.systems}


def center_config(
    settings: Settings, agents: tuple[AgentName, ...], *, embedded: bool
) -> CenterConfig:
    from agents.center import CenterConfig, RetentionPolicy
    from agents.optimization import OptimizationConfig
    from agents.ordering import OrderingConfig
    from agents.rescheduler import ReschedulePolicy
    from agents.scheduler import SchedulerConfig

    home = settings.home.expanduser()
    return CenterConfig(
        agents=agents,
        home=home,
        embedded=embedded,
        approval=settings.approval,
        chain=chain_config(settings),
        scheduler=SchedulerConfig(
            checkpoint_overhead_s=settings.checkpoint_overhead_s,
            poll_interval_s=settings.poll_interval_s,
            work_dir=home / "jobs",
            policy=ReschedulePolicy(extend_in_place=settings.extend_walltime),
            ordering=OrderingConfig(starve_h=settings.starve_h) if settings.order_queue else None,
        ),
        optimization=OptimizationConfig(
            planning=PlanningConfig(checkpoint_overhead_s=settings.checkpoint_overhead_s),
            rates=DollarRates(
                usd_per_su=settings.usd_per_su,
                usd_per_core_hour=settings.usd_per_core_hour,
                usd_per_gpu_hour=settings.usd_per_gpu_hour,
            ),
        ),
        retention=RetentionPolicy(
            keep_days=settings.retention_days, interval_s=settings.retention_interval_s
        ),
    )


@contextlib.asynccontextmanager
async def running_center(
    settings: Settings,
    agents: tuple[AgentName, ...],
    *,
    config: CenterConfig | None = None,
    observe: Any = None,
) -> AsyncIterator[Center]:
    """The knowledge base, executors, bus and agents the settings describe, started;
    ``observe`` (``CenterMetrics.observe``) hears how each consumed event ended."""
    from agents.center import Center, open_bus

    embedded = not settings.kafka_bootstrap
    planner = goal_planner(settings)
    async with knowledge_base(settings) as kb:
        config = config or center_config(settings, agents, embedded=embedded)
        executors = await build_executors(settings, kb, config.home / "jobs")
        bus = open_bus(settings.kafka_bootstrap, client_id="rightsize-" + "-".join(agents))
        async with Center(
            bus, kb, executors, config, goal_planner=planner, observe=observe
        ) as center:
            yield center


async def _run(
    settings: Settings,
    agents: tuple[AgentName, ...],
    duration_s: float | None,
    options: ObserveOptions | None = None,
) -> list[dict[str, Any]]:
    from agents.metrics import CenterMetrics
    from rightsize.observability.serve import ObserveOptions, observing

    options = options or ObserveOptions()
    metrics = CenterMetrics(timeout_s=options.timeout_s)
    observe = metrics.observe if options.wanted else None
    async with (
        running_center(settings, agents, observe=observe) as center,
        observing(center, metrics, options) as ports,
    ):
        urls = {}
        for what, port in ports.items():
            host = options.status_host if what == "status" else options.metrics_host
            urls[what] = f"http://{host}:{port}/"
            print(f"rightsize center: {what} on {urls[what]}", file=sys.stderr, flush=True)
        record = _ports_record(settings)
        if urls:  # `rightsize center status` finds this center by it
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"pid": os.getpid(), **urls}))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, center.stop)
        mode = "center (Kafka)" if settings.kafka_bootstrap else "embedded"
        systems = ", ".join(sorted({f"{n}: {e.backend}" for n, e in center.executors.items()})[:6])
        backends = {e.backend for e in center.executors.values()}
        print(
            f"rightsize center: {mode}; agents {', '.join(center.names)}; executors {systems}",
            file=sys.stderr,
            flush=True,
        )
        if settings.executor == "auto" and "simulated" in backends:
            print(f"rightsize center: WARNING: {AUTO_FELL_BACK}", file=sys.stderr, flush=True)
        if duration_s is not None:
            loop.call_later(duration_s, center.stop)
        try:
            await center.wait()
        finally:
            if urls:
                with contextlib.suppress(OSError):
                    record.unlink()
    return [h.model_dump(mode="json") for h in center.health()]  # after a clean stop


def _ports_record(settings: Settings) -> Path:
    """Where a running center writes the URLs it serves (status, metrics)."""
    return settings.home.expanduser() / "center-ports.json"


def running_status_url(settings: Settings) -> str | None:
    """The status URL of the center running from this home, by its own record; None
    when none records one (or the process that did is gone)."""
    try:
        record = json.loads(_ports_record(settings).read_text())
        os.kill(int(record["pid"]), 0)  # still running?
        url = record.get("status")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


def _agents(names: list[str] | None, settings: Settings) -> tuple[AgentName, ...]:
    if not names:
        return AGENT_NAMES
    for name in names:
        if name not in AGENT_NAMES:
            raise InvalidInputError(
                f"no agent {name!r}; the agents are {', '.join(AGENT_NAMES)}",
                field="--agent",
                value=name,
            )
    if not settings.kafka_bootstrap and set(names) != set(AGENT_NAMES):
        raise InvalidInputError(
            "one agent per process needs a shared bus: set RIGHTSIZE_KAFKA_BOOTSTRAP (without "
            "it every agent runs in this process: leave out --agent)",
            field="--agent",
            value=",".join(names),
        )
    return tuple(n for n in AGENT_NAMES if n in names)


_AGENT_HELP = f"Run only this agent ({', '.join(AGENT_NAMES)}); repeatable"


@app.command("run")
def run_command(
    agent: list[str] | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    duration_s: float | None = typer.Option(
        None, "--duration-s", min=0, help="Stop after this many seconds (default: until SIGTERM)"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print each agent's health as JSON at the end."
    ),
    status_port: int | None = typer.Option(
        None, "--status-port", min=0, max=65535, help="Serve the status page on this port (8780)"
    ),
    status_host: str = typer.Option(
        "127.0.0.1", "--status-host", help="Beyond loopback, requests need an MCP bearer token"
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", min=0, max=65535, help="Serve Prometheus /metrics on this port"
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Beyond loopback, scrapes need an MCP bearer token"
    ),
    staff: list[str] | None = typer.Option(
        None, "--status-staff", help="A user whose token sees every user's plans; repeatable"
    ),
) -> None:
    """Run the agents until SIGTERM/Ctrl-C (or --duration-s)."""
    settings = Settings()
    try:
        agents = _agents(agent, settings)
        from rightsize.observability.serve import ObserveOptions

        options = ObserveOptions.of(
            settings,
            status_port=status_port,
            status_host=status_host,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            staff=tuple(staff or ()),
        )
        health = asyncio.run(_run(settings, agents, duration_s, options))
    except RightsizeError as error:
        fail(error, as_json)
    if as_json:
        sys.stdout.write(json.dumps({"agents": health}, indent=2) + "\n")


@app.command("status")
def status_command(
    url: str | None = typer.Option(
        None,
        "--url",
        help="The center's status server (default: the one the center running from this "
        "home recorded, else http://127.0.0.1:8780)",
    ),
    token: str | None = typer.Option(
        None, "--token", envvar="RIGHTSIZE_STATUS_TOKEN", help="MCP bearer token, beyond loopback"
    ),
    as_json: bool = typer.Option(False, "--json", help="The picture as JSON."),
) -> None:
    """Agents, plans in flight, failures, re-scheduling, estimators, simulations.

    Asks the running center's status server; when none answers, reads the knowledge base
    (plans, jobs, estimators; not the agents' health or recent events)."""
    from rightsize.observability.terminal import load_status, render_status
    from rightsize.output import console, emit

    settings = Settings()
    tried = url or running_status_url(settings) or "http://127.0.0.1:8780"
    try:
        snapshot = load_status(settings, tried, token)
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        render_status(snapshot, console)
        if not snapshot.parts_up.get("center", True):
            console.print(
                f"no status server answered at {tried} (start one with `rightsize center "
                "run --status-port PORT`, or pass --url)",
                highlight=False,
            )

    emit(snapshot, as_json, render)
