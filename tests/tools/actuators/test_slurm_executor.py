"""SLURM behaviour on the real local cluster: limits, TIMEOUT, OOM, injection, restarts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from knowledge_base.records import JobState
from tests.private_slurm import PrivateSlurm
from tests.tools.actuators.conftest import Harness, long_job, quick_job
from tools.actuators.model import (
    JobRequest,
    RequestRejected,
    SubmissionFailed,
    WalltimeNotExtended,
)
from tools.actuators.slurm import SlurmExecutor, parse_jobcomp, render_sbatch
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands

GOLDEN = Path(__file__).parent / "golden"


def test_rendered_batch_script_matches_its_golden_file() -> None:
    request = JobRequest(
        name="resnet50 bs64",
        partition="gpu-a100",
        nodes=2,
        tasks_per_node=4,
        cpus_per_task=8,
        gpus_per_node=3,
        memory_mb="200 GB",
        walltime_s="2 h",
        account="PAS1234",
        qos="normal",
        command="python train.py --epochs 50\n",
        environment={"OMP_NUM_THREADS": "8", "NOTE": "it's $HOME; rm -rf /"},
        plan_id="plan-42",
    )
    assert render_sbatch(request) == (GOLDEN / "gpu_job.sbatch").read_text()


def test_identifiers_that_are_not_plain_words_are_rejected_not_rendered() -> None:
    request = JobRequest(
        name="x", partition="debug --mem=1T", command="true", memory_mb=1, walltime_s=60
    )
    with pytest.raises(RequestRejected, match="partition must be a plain SLURM identifier"):
        render_sbatch(request)


def test_control_characters_in_names_are_refused_at_validation() -> None:
    with pytest.raises(ValueError, match="control characters"):
        JobRequest(
            name="ok\n#SBATCH --mem=1T",
            partition="debug",
            command="true",
            memory_mb=1,
            walltime_s=60,
        )


def test_jobcomp_values_with_spaces_are_read_whole() -> None:
    line = (
        "JobId=7 UserId=root(0) GroupId=root(0) Name=my job; rm JobState=TIMEOUT "
        "Partition=debug TimeLimit=1 StartTime=2026-01-01T00:00:00 "
        "EndTime=2026-01-01T00:02:05 NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=/tmp/a b "
        "ReservationName= Tres=cpu=1 Account= QOS= WcKey= Cluster=x "
        "SubmitTime=2026-01-01T00:00:00 EligibleTime=2026-01-01T00:00:00 "
        "DerivedExitCode=0:0 ExitCode=0:15"
    )
    record = parse_jobcomp(line)["7"]
    assert record["Name"] == "my job; rm"
    assert record["WorkDir"] == "/tmp/a b"
    assert record["ExitCode"] == "0:15"


@pytest.mark.slurm
async def test_job_past_its_walltime_is_recognized_as_timeout(
    slurm: Harness, workdir: Path
) -> None:
    """SLURM's controller checks limits about every 30 s: TIMEOUT lands 60-90 s late."""
    job_id = await slurm.executor.submit(
        quick_job(workdir, name="overstays", command="sleep 600", walltime_s=60)
    )
    status = await slurm.finished(job_id)
    assert status.state is JobState.TIMEOUT
    assert status.native_state == "TIMEOUT"


@pytest.mark.slurm
async def test_job_over_its_memory_is_recognized_as_out_of_memory(
    slurm: Harness, workdir: Path
) -> None:
    hog = f"{sys.executable} -c 'b = bytearray(700 * 1024 * 1024); import time; time.sleep(60)'"
    job_id = await slurm.executor.submit(
        quick_job(workdir, name="hog", partition="batch", command=hog, memory_mb=200)
    )
    status = await slurm.finished(job_id)
    assert status.native_state == "FAILED"  # what SLURM itself says
    assert status.state is JobState.OUT_OF_MEMORY
    assert status.signal == 9


@pytest.mark.slurm
async def test_a_plain_sigkill_is_failed_not_out_of_memory(slurm: Harness, workdir: Path) -> None:
    job_id = await slurm.executor.submit(quick_job(workdir, name="killed", command="kill -9 $$"))
    status = await slurm.finished(job_id)
    assert status.state is JobState.FAILED
    assert status.signal == 9


@pytest.mark.slurm
async def test_shell_metacharacters_in_name_and_directory_inject_nothing(
    slurm: Harness, tmp_path: Path
) -> None:
    canary = "rs-pwned-canary"
    workdir = tmp_path / f"dir $(touch {canary}) `touch {canary}`; touch {canary} &"
    workdir.mkdir()
    workdir.chmod(0o777)
    name = f'x"; touch {canary}; echo "$(touch {canary})'
    job_id = await slurm.executor.submit(quick_job(workdir, name=name, command="pwd"))
    status = await slurm.finished(job_id)
    assert status.state is JobState.COMPLETED
    assert status.name == name  # the name arrived as data, whole
    for place in (tmp_path, workdir, Path.cwd(), Path("/tmp"), Path.home()):
        assert not (place / canary).exists(), f"injected: {place / canary} exists"
    output = (workdir / f"rightsize-{job_id}.out").read_text()
    assert output.strip() == str(workdir)


@pytest.mark.slurm
async def test_unknown_partition_without_a_catalog_is_refused_by_slurm_not_retried(
    slurm: Harness, workdir: Path
) -> None:
    bare = SlurmExecutor()  # no catalog: only SLURM itself can say no
    with pytest.raises(SubmissionFailed, match="Invalid partition") as caught:
        await bare.submit(quick_job(workdir, partition="nosuch"))
    assert not caught.value.transient


@pytest.mark.slurm
async def test_controller_restart_mid_job_keeps_status_and_outcome(
    private_slurm: PrivateSlurm, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a private cluster: the other slurm tests run beside this one on the shared one."""
    monkeypatch.setenv("SLURM_CONF", str(private_slurm.conf))  # the client commands' cluster
    executor = SlurmExecutor(system=import_slurm_system("local", "lab", SlurmCommands()))

    async def step() -> None:
        await asyncio.sleep(1)

    slurm = Harness(executor, step, max_steps=240)
    job_id = await executor.submit(
        quick_job(workdir, name="survivor", partition="batch", command="sleep 15", walltime_s=120)
    )
    await slurm.running(job_id)
    private_slurm.stop_controller()
    try:
        with pytest.raises(SubmissionFailed) as caught:
            await executor.status(job_id)
        assert caught.value.transient  # a retry can help, and does below
    finally:
        private_slurm.start_controller()
    status = await slurm.finished(job_id)
    assert status.state is JobState.COMPLETED


@pytest.mark.slurm
async def test_long_job_is_cancelled_while_pending_behind_another(
    slurm: Harness, workdir: Path
) -> None:
    """The node has 2 cores: a 2-core job in front leaves a second one pending."""
    first = await slurm.executor.submit(long_job(workdir).model_copy(update={"tasks_per_node": 2}))
    second = await slurm.executor.submit(long_job(workdir))
    try:
        assert (await slurm.executor.status(second)).state is JobState.PENDING
        await slurm.executor.cancel(second)
        assert (await slurm.finished(second)).state is JobState.CANCELLED
    finally:
        await slurm.executor.cancel(first)


@pytest.mark.slurm
async def test_a_job_cancelled_while_pending_is_accounted_without_nodes(
    slurm: Harness, workdir: Path
) -> None:
    """The jobcomp log says NodeCnt=0 ProcCnt=0 for a job that never got nodes (read as
    unknown); sacct keeps what it asked for."""
    blocker = await slurm.executor.submit(
        long_job(workdir).model_copy(update={"tasks_per_node": 2})
    )
    waiting = await slurm.executor.submit(long_job(workdir))
    await slurm.executor.cancel(waiting)
    await slurm.executor.cancel(blocker)
    await slurm.finished(waiting)
    records = {}
    for _ in range(slurm.max_steps):  # slurmdbd records a job's end a moment later
        records = {r.job_id: r for r in await slurm.executor.finished_jobs()}
        if waiting in records:
            break
        await slurm.step()
    assert records[waiting].state is JobState.CANCELLED
    expected = 1 if records[waiting].source == "slurm sacct" else None
    assert records[waiting].requested_nodes == expected


def _failing_scontrol(stderr: str) -> SlurmCommands:
    """A runner whose every command prints ``stderr`` and exits 1, as scontrol does."""
    script = f"echo {stderr!r} >&2; exit 1"
    return SlurmCommands(prefix=["sh", "-c", script, "scontrol"])


async def test_extend_is_transient_when_the_controller_does_not_answer() -> None:
    executor = SlurmExecutor(
        commands=_failing_scontrol("slurm_update error: Unable to contact slurm controller")
    )
    with pytest.raises(WalltimeNotExtended, match="Unable to contact") as refused:
        await executor.extend_walltime("42", 600)
    assert refused.value.transient


async def test_extend_refused_for_rights_is_not_transient_and_names_the_minutes() -> None:
    executor = SlurmExecutor(
        commands=_failing_scontrol("slurm_update error: Access/permission denied")
    )
    with pytest.raises(WalltimeNotExtended, match="10 min.*permission denied") as refused:
        await executor.extend_walltime("42", 541)
    assert not refused.value.transient
