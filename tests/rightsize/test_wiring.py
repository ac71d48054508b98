"""Choosing the executor from settings: the embedded default and its fallbacks."""

from __future__ import annotations

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.importers.slurm import SlurmCommands
from rightsize.settings import Settings
from rightsize.wiring import open_executor, slurm_answers
from tools.actuators.simulated import SimulatedCluster
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.tapis import TapisExecutor


def test_no_slurm_on_the_path_means_it_does_not_answer() -> None:
    assert not slurm_answers(SlurmCommands(prefix=["/nonexistent/wrapper"]))


def test_auto_falls_back_to_the_simulated_cluster_without_slurm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sinfo anywhere
    executor = open_executor(Settings(executor="auto", simulated_nodes=3))
    assert isinstance(executor, SimulatedCluster)
    assert executor.nodes == 3


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
