"""One harness per executor backend, so one contract suite runs over all of them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from knowledge_base.records import JobState
from tests.cluster import TEST_SYSTEM
from tests.tools.actuators.tapis_server import FakeTapis
from tools.actuators.base import Executor
from tools.actuators.model import JobRequest, JobStatus, SimulatedWork
from tools.actuators.simulated import ManualClock, SimulatedCluster
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands
from tools.actuators.tapis import TapisCredentials, TapisExecutor


@dataclass
class Harness:
    """An executor plus how to let time pass for it."""

    executor: Executor
    step: Callable[[], Awaitable[None]]
    max_steps: int

    async def wait(self, job_id: str, until: Callable[[JobStatus], bool]) -> JobStatus:
        for _ in range(self.max_steps):
            status = await self.executor.status(job_id)
            if until(status):
                return status
            await self.step()
        raise AssertionError(f"job {job_id} did not get there in {self.max_steps} steps: {status}")

    async def finished(self, job_id: str) -> JobStatus:
        return await self.wait(job_id, lambda s: s.finished)

    async def running(self, job_id: str) -> JobStatus:
        return await self.wait(job_id, lambda s: s.state is JobState.RUNNING)


def quick_job(workdir: Path, **overrides: Any) -> JobRequest:
    fields: dict[str, Any] = dict(
        name="quick",
        partition="debug",
        command="echo hello from rightsize",
        memory_mb=100,
        walltime_s=60,
        working_dir=workdir,
        simulated=SimulatedWork(run_s=5, peak_memory_mb=50),
        environment={"TAPIS_TEST_RUN_POLLS": "1"},
    )
    fields.update(overrides)
    return JobRequest(**fields)


def long_job(workdir: Path) -> JobRequest:
    return quick_job(
        workdir,
        name="long",
        partition="batch",
        command="sleep 300",
        walltime_s=600,
        simulated=SimulatedWork(run_s=300),
        environment={"TAPIS_TEST_RUN_POLLS": "100000"},
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.fixture
def simulated() -> Harness:
    clock = ManualClock()
    cluster = SimulatedCluster(
        nodes=1, cores_per_node=2, memory_mb_per_node=20000, clock=clock, system=TEST_SYSTEM
    )

    async def step() -> None:
        clock.advance(1)

    return Harness(cluster, step, max_steps=1000)


@pytest.fixture(scope="session")
def tapis_server() -> Iterator[FakeTapis]:
    server = FakeTapis(queues={"debug": 1, "batch": 10}).start()
    yield server
    server.stop()


@pytest.fixture
async def tapis(tapis_server: FakeTapis) -> AsyncIterator[Harness]:
    executor = TapisExecutor(
        tapis_server.url,
        exec_system_id="testcluster",
        app_id="rightsize-run",
        app_version="1.0",
        credentials=TapisCredentials(username="testuser", password="secret"),
        system=TEST_SYSTEM,
    )

    async def step() -> None:
        await asyncio.sleep(0)  # each status call is one step of the fake tenant

    try:
        yield Harness(executor, step, max_steps=50)
    finally:
        await executor.close()


@pytest.fixture
def slurm(slurm_cluster: dict[str, str]) -> Harness:
    executor = SlurmExecutor(system=import_slurm_system("local", "lab", SlurmCommands()))

    async def step() -> None:
        await asyncio.sleep(1)

    assert os.environ.get("SLURM_CONF") or slurm_cluster
    # 6 min: a job may wait behind a 2-core job of the e2e lane beside (scripts/test.sh).
    return Harness(executor, step, max_steps=360)


@pytest.fixture(params=["simulated", "tapis", pytest.param("slurm", marks=pytest.mark.slurm)])
def harness(request: pytest.FixtureRequest) -> Harness:
    found: Harness = request.getfixturevalue(request.param)
    return found
