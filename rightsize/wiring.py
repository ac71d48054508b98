"""Opening the knowledge base the settings name, seeded on first use."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from knowledge_base.catalog import System
from knowledge_base.errors import InvalidInputError
from knowledge_base.open import open_knowledge_base
from knowledge_base.records import EstimatorRecord
from knowledge_base.seed import load_seed_catalog
from knowledge_base.store import KnowledgeBase
from rightsize.settings import Settings
from tools.actuators.base import Executor
from tools.actuators.simulated import SimulatedCluster, WallClock
from tools.actuators.simulated_journal import SqliteJournal
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_catalog import controller_answers
from tools.actuators.slurm_commands import SlurmCommands

if TYPE_CHECKING:  # the estimator chain loads when a front end plans
    from tools.planning.chain import ChainConfig, PromotedEstimator

__all__ = [
    "AUTO_FELL_BACK",
    "EXECUTORS",
    "ExecutorKind",
    "chain_config",
    "knowledge_base",
    "open_executor",
    "open_simulated",
    "promoted_loader",
    "register_executor",
    "resolve_executor",
    "slurm_answers",
]

ExecutorKind = Literal["slurm", "tapis", "simulated"]

AUTO_FELL_BACK = (
    "executor auto: no SLURM controller answered `sinfo`, so jobs go to the SIMULATED "
    "cluster and never run on a real batch system; set RIGHTSIZE_EXECUTOR=slurm (or tapis) "
    "to require one, or RIGHTSIZE_EXECUTOR=simulated to choose it on purpose"
)

log = logging.getLogger(__name__)


@asynccontextmanager
async def knowledge_base(settings: Settings) -> AsyncIterator[KnowledgeBase]:
    """The configured knowledge base; an empty catalog gets the seeded one first."""
    kb = open_knowledge_base(settings.knowledge_base_url())
    try:
        catalog = await kb.get_catalog()
        if not catalog.systems:
            seed = load_seed_catalog()
            await kb.put_catalog(seed)
            log.info("seeded the catalog with %d systems", len(seed.systems))
        yield kb
    finally:
        await kb.close()


def promoted_loader(record: EstimatorRecord) -> PromotedEstimator:
    """Model Promotion's registry record as an estimator, for the estimator chain of the
    CLI and the MCP server (the agents load it the same way); the loader's code loads
    only when a promoted estimator exists."""
    from tools.estimators.promoted.runtime import promoted_runtime_estimator

    return promoted_runtime_estimator(record)


def chain_config(settings: Settings) -> ChainConfig:
    """The estimator chain's settings: where trained models and calibrations live."""
    from tools.planning.chain import ChainConfig

    return ChainConfig(
        home=settings.home.expanduser(),
        cpu_opcost_dir=settings.cpu_opcost,
        dnn_models_dir=settings.dnn_models,
        gpu_traces=settings.gpu_trace_folders(),
    )


def slurm_answers(commands: SlurmCommands | None = None) -> bool:
    """Whether a SLURM controller answers this machine's client commands (asked by the
    actuator: ``tools.actuators.slurm_catalog.controller_answers``)."""
    return controller_answers(commands)


def resolve_executor(settings: Settings, commands: SlurmCommands | None = None) -> ExecutorKind:
    """The executor kind the settings name; what ``auto`` stands for, said out loud.

    A center (agents on a shared Kafka bus) must name its executor: ``auto`` there is an
    error, because a SLURM controller that hiccups at start would otherwise make the
    center "run" jobs on the simulated cluster that never run anywhere. The embedded
    default may still choose, and a fall-back to the simulated cluster is a WARNING.
    """
    kind = settings.executor
    if kind != "auto":
        return kind
    if settings.kafka_bootstrap:
        raise InvalidInputError(
            "a center run (RIGHTSIZE_KAFKA_BOOTSTRAP is set) must name its executor: set "
            "RIGHTSIZE_EXECUTOR to slurm, tapis or simulated",
            field="executor",
            value=kind,
        )
    if slurm_answers(commands):
        log.info("executor auto: the local SLURM answers; jobs go to it")
        return "slurm"
    log.warning(AUTO_FELL_BACK)
    return "simulated"


def _slurm(settings: Settings, system: System | None) -> Executor:
    return SlurmExecutor(system=system)


def _tapis(settings: Settings, system: System | None) -> Executor:
    if not settings.tapis_url or not settings.tapis_system:
        raise InvalidInputError(
            "the tapis executor needs RIGHTSIZE_TAPIS_URL and RIGHTSIZE_TAPIS_SYSTEM",
            field="executor",
            value="tapis",
        )
    # httpx (the Tapis client) costs ~0.2 s of start-up: loaded only for Tapis.
    from tools.actuators.tapis import TapisCredentials, TapisExecutor

    return TapisExecutor(
        settings.tapis_url,
        exec_system_id=settings.tapis_system,
        app_id=settings.tapis_app_id,
        app_version=settings.tapis_app_version,
        credentials=TapisCredentials(
            settings.tapis_token,
            username=settings.tapis_username,
            password=settings.tapis_password,
        ),
        system=system,
    )


def _simulated(settings: Settings, system: System | None) -> Executor:
    return open_simulated(settings, system)


ExecutorFactory = Callable[[Settings, System | None], Executor]

EXECUTORS: dict[str, ExecutorFactory] = {
    "slurm": _slurm,
    "tapis": _tapis,
    "simulated": _simulated,
}
"""Each executor kind the settings may name, and how it opens (``register_executor``
adds one: a new batch system is a new entry, not another branch)."""


def register_executor(kind: str, factory: ExecutorFactory) -> None:
    EXECUTORS[kind] = factory


def open_executor(settings: Settings, system: System | None = None) -> Executor:
    """The executor the settings name (``auto``: see ``resolve_executor``)."""
    kind = resolve_executor(settings)
    return EXECUTORS[kind](settings, system)


def simulated_journal_path(settings: Settings) -> Path:
    """The simulated cluster every process of this home shares (the CLI, the MCP server,
    ``rightsize center run``): its journal of submissions, and so its job ids."""
    return settings.home.expanduser() / "simulated-cluster.sqlite"


def open_simulated(settings: Settings, system: System | None = None) -> SimulatedCluster:
    """The shared simulated cluster: ``system``'s node types and partitions (the
    catalog's), or, without a system, the settings' one pool of identical nodes."""
    journal = SqliteJournal(simulated_journal_path(settings))
    clock = WallClock(speedup=settings.simulated_speedup, origin=journal.origin(datetime.now(UTC)))
    if system is not None:
        return SimulatedCluster.of_system(
            system, clock=clock, journal=journal, default_nodes=settings.simulated_nodes
        )
    return SimulatedCluster(
        nodes=settings.simulated_nodes,
        cores_per_node=settings.simulated_cores_per_node,
        memory_mb_per_node=settings.simulated_memory_mb_per_node,
        clock=clock,
        journal=journal,
    )
