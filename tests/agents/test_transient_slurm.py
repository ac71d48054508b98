"""A SLURM controller outage through the real runtime: retried, never dead-lettered.

The runtime retries a handler's error when ``knowledge_base.errors.is_transient`` says
so, and that reads the error instance's ``transient`` (an ``ActuatorError`` decides it
per failure). Here the failure is real: a private single-node SLURM (started by
``scripts/slurm/start.sh`` in its own state directory, on its own ports, so the shared
test cluster is never stopped: tests/private_slurm.py) has its ``slurmctld`` stopped
while the Scheduler is asked to submit a plan; ``sbatch`` cannot reach the controller.
The event must be retried with backoff and the job submitted once the controller is back.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from agents.events import DeadLettered, JobSubmitted, PlanApproved
from agents.runtime import AgentRunner, RunnerSettings
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.errors import RightsizeError, StorageError, is_transient
from knowledge_base.workload import GenericJob, WorkloadSpec
from tests.agents.harness import MiniCenter, make_plan, until
from tests.cluster import TEST_SYSTEM
from tests.private_slurm import PrivateSlurm
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
