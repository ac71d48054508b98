"""A SLURM controller outage through the real runtime: retried, never dead-lettered.

The runtime retries a handler's error when ``knowledge_base.errors.is_transient`` says
so, and that reads the error instance's ``transient`` (an ``ActuatorError`` decides it
per failure). Here the failure is real: a private single-node SLURM (started by
``scripts/slurm/start.sh`` in its own state directory, on its own ports, so the shared
test cluster is never stopped) has its ``slurmctld`` stopped while the Scheduler is
asked to submit a plan; ``sbatch`` cannot reach the controller. The event must be
retried with backoff and the job submitted once the controller is back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.events import DeadLettered, JobSubmitted, PlanApproved
from agents.runtime import AgentRunner, RunnerSettings
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.errors import RightsizeError, StorageError, is_transient
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, make_plan, until
from tests.cluster import TEST_SYSTEM
from tests.conftest import REPO, missing_service
from tools.actuators.model import ActuatorError, RequestRejected, SubmissionFailed
from tools.actuators.slurm import SlurmExecutor


def test_the_instance_decides_whether_an_error_is_transient() -> None:
    assert is_transient(SubmissionFailed("controller down", transient=True))
    assert not is_transient(SubmissionFailed("invalid partition"))
    assert not is_transient(RequestRejected("too much memory", field="memory_mb", value=1))
    assert is_transient(StorageError("database is locked"))  # the class's default
    assert not is_transient(StorageError("UNIQUE constraint failed", transient=False))
    assert is_transient(RightsizeError("anything", transient=True))
    assert not is_transient(ValueError("outside the tree"))
    assert not is_transient(ActuatorError("no flag given"))


@dataclass
class PrivateSlurm:
    """A single-node SLURM of this test module's own; its controller can be stopped."""

    state_dir: Path
    conf: Path

    def _pid(self, daemon: str) -> int | None:
        path = self.state_dir / f"{daemon}.pid"  # removed by a daemon that exits cleanly
        return int(path.read_text().strip()) if path.exists() else None

    def controller_running(self) -> bool:
        pid = self._pid("slurmctld")
        return pid is not None and _alive(pid)

    def stop_controller(self) -> None:
        pid = self._pid("slurmctld")
        assert pid is not None, "the private slurmctld is not running"
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid)

    def start_controller(self) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run(["slurmctld", "-f", str(self.conf)], env=env, check=True, timeout=30)
        for _ in range(120):  # up to ~30 s: a restarted controller recovers its state first
            ping = subprocess.run(
                ["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=10
            )
            if ping.returncode == 0 and "UP" in ping.stdout:
                return
            time.sleep(0.25)
        raise AssertionError(f"slurmctld did not come back: {ping.stdout} {ping.stderr}")


def _wait_gone(pid: int) -> None:
    for _ in range(120):
        if not _alive(pid):
            return
        time.sleep(0.25)
    raise AssertionError(f"slurmctld (pid {pid}) did not stop in 30 s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def private_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSlurm]:
    if os.geteuid() != 0 or not Path("/usr/sbin/slurmctld").exists():
        missing_service("a private SLURM needs root and slurm-wlm (scripts/slurm/start.sh)")
    state_dir = tmp_path_factory.mktemp("slurm-outage")
    env = {
        **os.environ,
        "RIGHTSIZE_SLURM_DIR": str(state_dir),
        "RIGHTSIZE_SLURMCTLD_PORT": str(_free_port()),
        "RIGHTSIZE_SLURMD_PORT": str(_free_port()),
        "RIGHTSIZE_SLURM_ACCOUNTING": "0",  # the controller is what fails here
    }
    script = REPO / "scripts" / "slurm"
    started = subprocess.run(
        ["bash", str(script / "start.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if started.returncode != 0:
        missing_service(f"could not start a private SLURM: {started.stderr[-2000:]}")
    try:
        yield PrivateSlurm(state_dir, state_dir / "slurm.conf")
    finally:
        subprocess.run(["bash", str(script / "stop.sh")], env=env, capture_output=True, timeout=120)


@pytest.mark.slurm
async def test_a_stopped_slurmctld_is_retried_not_dead_lettered_and_submits_when_back(
    tmp_path: Path, private_slurm: PrivateSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(private_slurm.conf))  # the client commands' cluster
    workdir = tmp_path / "jobs"
    workdir.mkdir()
    workdir.chmod(0o777)
    spec = WorkloadSpec(
        name="outage",
        user="root",
        workload=GenericJob(application="true", nodes=1, cores=1, walltime_s=30),
    )
    plan = make_plan("plan-outage", spec, memory_mb=100, walltime_s=60)
    # Backoff long enough that the restarted controller answers the second attempt.
    settings = RunnerSettings(
        poll_timeout_s=0.05, flush_interval_s=0.0, backoff_initial_s=2.0, max_attempts=6
    )
    private_slurm.stop_controller()
    try:
        async with MiniCenter(tmp_path) as center:
            scheduler = Scheduler(
                center.kb,
                {TEST_SYSTEM.name: SlurmExecutor(system=TEST_SYSTEM, output_dir=workdir)},
                center.bus,
                SchedulerConfig(work_dir=workdir),
            )
            async with AgentRunner(scheduler, center.bus, center.kb, settings) as runner:
                await center.publish(PlanApproved(plan=plan), plan.id)

                async def retried() -> bool:
                    dead = await center.recorder.of(DeadLettered)
                    assert not dead, f"dead-lettered instead of retried: {dead[0].error}"
                    return runner.health().retries >= 1

                async def tick() -> None:
                    await center.recorder.drain()
                    await asyncio.sleep(0.25)

                # sbatch gives up on an absent controller after ~9 s
                await until(retried, tick, steps=240, what="a retry of the submission")
                private_slurm.start_controller()

                async def submitted() -> list[JobSubmitted]:
                    found: list[JobSubmitted] = await center.recorder.of(JobSubmitted)
                    return found

                [event] = await until(submitted, tick, steps=240, what="the job submitted")
                health = runner.health()
                dead_letters = await center.recorder.of(DeadLettered)
            stored = await center.kb.get_plan(plan.id)
    finally:
        if not private_slurm.controller_running():
            private_slurm.start_controller()
    assert not dead_letters
    assert health.events_failed == 0 and health.retries >= 1
    assert [s.job_id for s in stored.segments if s.job_id] == [event.job_id]
    squeue = subprocess.run(
        ["scontrol", "show", "job", event.job_id], capture_output=True, text=True, check=False
    )
    assert f"JobId={event.job_id}" in squeue.stdout  # the controller really has it


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is gone


@pytest.mark.slurm
async def test_job_states_asked_while_slurmctld_is_down_are_a_transient_error_not_no_jobs(
    private_slurm: PrivateSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SLURM 22.05's squeue --json exits 0 with an empty job list (and an "errors" entry)
    when the controller does not answer; read as "no jobs", every watched job looked gone
    and the monitor forgot it (the soak lost a plan so)."""
    monkeypatch.setenv("SLURM_CONF", str(private_slurm.conf))
    executor = SlurmExecutor(system=TEST_SYSTEM)
    private_slurm.stop_controller()
    try:
        with pytest.raises(SubmissionFailed, match="squeue --json reported errors") as raised:
            await executor.statuses(["1"])
        assert is_transient(raised.value)
    finally:
        private_slurm.start_controller()
    assert await executor.statuses(["999999"]) == {}  # answered: really no such job
