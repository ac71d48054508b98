"""Choosing the executor from settings: the embedded default and its fallbacks."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.seed import load_seed_catalog
from rightsize.settings import Settings
from rightsize.wiring import AUTO_FELL_BACK, open_executor, resolve_executor, slurm_answers
from tools.actuators.simulated import SimulatedCluster
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_commands import SlurmCommands
from tools.actuators.tapis import TapisExecutor


def test_no_slurm_on_the_path_means_it_does_not_answer() -> None:
    assert not slurm_answers(SlurmCommands(prefix=["/nonexistent/wrapper"]))


def test_embedded_auto_falls_back_to_the_simulated_cluster_and_warns_that_it_did(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sinfo anywhere
    with caplog.at_level(logging.INFO, logger="rightsize.wiring"):
        executor = open_executor(Settings(executor="auto", simulated_nodes=3))
    assert isinstance(executor, SimulatedCluster)
    assert executor.nodes == 3
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == [AUTO_FELL_BACK]
    assert "SIMULATED" in AUTO_FELL_BACK and "RIGHTSIZE_EXECUTOR=slurm" in AUTO_FELL_BACK


def test_a_center_on_a_shared_bus_must_name_its_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # what a SLURM hiccup at start looks like
    center = Settings(executor="auto", kafka_bootstrap="127.0.0.1:9092")
    with pytest.raises(InvalidInputError, match="must name its executor") as caught:
        open_executor(center)
    assert (caught.value.field, caught.value.value) == ("executor", "auto")
    named = center.model_copy(update={"executor": "simulated"})
    assert resolve_executor(named) == "simulated"  # chosen on purpose: no error


@pytest.mark.slurm
def test_auto_picks_the_local_slurm_when_it_answers(slurm_cluster: dict[str, str]) -> None:
    assert isinstance(open_executor(Settings(executor="auto")), SlurmExecutor)


async def test_tapis_needs_its_url_and_system_and_says_which() -> None:
    with pytest.raises(InvalidInputError, match="RIGHTSIZE_TAPIS_URL"):
        open_executor(Settings(executor="tapis"))
    executor = open_executor(
        Settings(executor="tapis", tapis_url="http://127.0.0.1:1", tapis_system="ls6")
    )
    assert isinstance(executor, TapisExecutor)
    await executor.close()


def test_the_embedded_simulated_cluster_runs_on_the_real_clock_with_the_catalogs_gpus(
    tmp_path: Path,
) -> None:
    """Its times are true ones (before, a 60x clock put them an hour ahead within a
    minute), and a catalog system's GPU partitions have GPU nodes."""
    settings = Settings(executor="simulated", home=tmp_path)
    pitzer = open_executor(settings, load_seed_catalog().system("pitzer"))
    assert isinstance(pitzer, SimulatedCluster)
    assert abs((pitzer.now() - datetime.now(UTC)).total_seconds()) < 5
    assert max(pool.gpus_per_node for pool in pitzer.pool_specs) == 4
    assert (tmp_path / "simulated-cluster.sqlite").exists()  # the journal processes share


def test_executors_open_from_a_registry() -> None:
    from rightsize.wiring import EXECUTORS

    assert set(EXECUTORS) == {"slurm", "tapis", "simulated"}
