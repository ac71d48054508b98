"""The rightsize order on a real SLURM: priorities set, jobs started in that order.

Runs on a private single-node SLURM (tests/private_slurm.py: its own state directory and
ports, priority/basic, sched/backfill), so other tests' jobs on the shared cluster
cannot start in between and its controller can be stopped. A blocker job fills the
node; the jobs queued behind it each need the whole node, so they start one at a time,
by priority, and each writes its name to a file when it starts.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from agents.ordering import OrderingConfig, PendingJob, apply_order, decide_order, order_round
from tests.private_slurm import PrivateSlurm
from tools.actuators.ordering import PriorityNotSet, SlurmPriorities
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_commands import SlurmCommands

pytestmark = pytest.mark.slurm


def _sbatch(workdir: Path, name: str, seconds: int) -> str:
    command = f"echo {name} >> {workdir / 'started'}; sleep {seconds}"
    out = subprocess.run(
        [
            *("sbatch", "--parsable", "--exclusive", "-p", "debug", "-t", "1", "-J", name),
            *("-o", "/dev/null", "--chdir", str(workdir), "--wrap", command),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def _priority(job_id: str) -> int:
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%Q"], capture_output=True, text=True, timeout=30
    )
    return int(out.stdout.strip())


def _submitted(job_id: str) -> datetime:
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%V"], capture_output=True, text=True, timeout=30
    )
    return datetime.fromisoformat(out.stdout.strip()).astimezone()


def _started(workdir: Path, expected: int, timeout_s: float = 120) -> list[str]:
    path = workdir / "started"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        names = path.read_text().split() if path.exists() else []
        if len(names) >= expected:
            return names
        time.sleep(0.5)
    raise AssertionError(f"only {names} started in {timeout_s:.0f} s")


@pytest.fixture
def cluster(private_slurm: PrivateSlurm, monkeypatch: pytest.MonkeyPatch) -> PrivateSlurm:
    monkeypatch.setenv("SLURM_CONF", str(private_slurm.conf))
    if not private_slurm.controller_running():
        private_slurm.start_controller()
    return private_slurm


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    path.mkdir()
    path.chmod(0o777)
    return path


async def test_slurm_starts_queued_jobs_in_the_policys_order_and_a_starved_job_first(
    cluster: PrivateSlurm, workdir: Path
) -> None:
    blocker = _sbatch(workdir, "blocker", 12)
    _started(workdir, 1)
    # The oldest job has a long prediction: by its factor it would go last.
    old = _sbatch(workdir, "old", 1)
    await asyncio.sleep(6)
    ids = {name: _sbatch(workdir, name, 1) for name in ("long", "mid", "short")}
    ids["old"] = old
    predicted = {"old": 50_000.0, "long": 3000.0, "mid": 300.0, "short": 20.0}
    jobs = [
        PendingJob(job_id=ids[name], submit_time=_submitted(ids[name]), estimate_s=predicted[name])
        for name in ids
    ]
    now = max(job.submit_time for job in jobs) + timedelta(seconds=2)
    setter = SlurmPriorities()
    by_factor = decide_order(jobs, now, OrderingConfig(starve_h=None, base_priority=1000))
    names = {job_id: name for name, job_id in ids.items()}
    assert [names[j.job_id] for j in by_factor.jobs] == ["short", "mid", "long", "old"]
    outcome = await apply_order(by_factor, setter)
    assert outcome.set == [j.job_id for j in by_factor.jobs] and outcome.stopped is None
    assert _priority(ids["short"]) > _priority(ids["mid"]) > _priority(ids["long"])
    assert _priority(ids["long"]) > _priority(ids["old"])
    # Past a 5 s bound the old job is starved: it goes first, the rest keep their order.
    bounded = decide_order(jobs, now, OrderingConfig(starve_h=5 / 3600, base_priority=1000))
    assert [names[j.job_id] for j in bounded.jobs] == ["old", "short", "mid", "long"]
    assert (await apply_order(bounded, setter)).set == [j.job_id for j in bounded.jobs]
    assert _started(workdir, 5) == ["blocker", "old", "short", "mid", "long"]
    assert blocker


async def test_a_job_that_left_the_queue_is_skipped_and_the_rest_still_ordered(
    cluster: PrivateSlurm, workdir: Path
) -> None:
    blocker = _sbatch(workdir, "blocker", 20)
    gone, kept = _sbatch(workdir, "gone", 1), _sbatch(workdir, "kept", 1)
    subprocess.run(["scancel", gone], check=True, timeout=30)
    try:
        jobs = [
            PendingJob(job_id=gone, submit_time=_submitted(kept), estimate_s=10),
            PendingJob(job_id=kept, submit_time=_submitted(kept), estimate_s=600),
        ]
        ordering = decide_order(jobs, datetime.now().astimezone(), OrderingConfig(base_priority=77))
        outcome = await apply_order(ordering, SlurmPriorities())
        assert outcome.vanished == [gone]
        assert outcome.set == [kept] and outcome.stopped is None
        assert _priority(kept) == 77
    finally:
        subprocess.run(["scancel", kept, blocker], timeout=30)


async def test_no_operator_rights_stops_the_round_and_leaves_slurms_order(
    cluster: PrivateSlurm, workdir: Path
) -> None:
    blocker = _sbatch(workdir, "blocker", 20)
    first, second = _sbatch(workdir, "first", 1), _sbatch(workdir, "second", 1)
    readable = Path(tempfile.gettempdir()) / "missing"
    try:
        before = (_priority(first), _priority(second))
        jobs = [
            PendingJob(job_id=job_id, submit_time=_submitted(job_id), estimate_s=s)
            for job_id, s in ((first, 600), (second, 10))
        ]
        ordering = decide_order(jobs, datetime.now().astimezone())
        # The same scontrol, run as an unprivileged user: SLURM refuses it. (The test
        # session's state directory is private to root, so nobody reads a copy of the
        # configuration from a readable one.)
        readable = Path(tempfile.mkdtemp(prefix="rightsize-ordering-"))
        readable.chmod(0o755)
        conf = readable / "slurm.conf"
        shutil.copy(cluster.conf, conf)
        conf.chmod(0o644)
        as_nobody = ["runuser", "-u", "nobody", "--", "env", f"SLURM_CONF={conf}"]
        nobody = SlurmPriorities(SlurmCommands(prefix=as_nobody))
        with pytest.raises(PriorityNotSet) as refused:
            await nobody.set_priority(second, 5)
        assert refused.value.reason == "rights", str(refused.value)
        assert not refused.value.transient
        outcome = await apply_order(ordering, nobody)
        assert outcome.stopped == "rights" and outcome.set == []
        assert outcome.failed == {second: "rights"}  # the first update; nothing after it
        assert (_priority(first), _priority(second)) == before
    finally:
        subprocess.run(["scancel", first, second, blocker], timeout=30)
        shutil.rmtree(readable, ignore_errors=True)


async def test_a_stopped_controller_is_retried_then_the_round_stops(
    cluster: PrivateSlurm, workdir: Path
) -> None:
    job_id = _sbatch(workdir, "lonely", 1)
    submitted = _submitted(job_id)
    cluster.stop_controller()
    try:
        setter = SlurmPriorities(SlurmCommands(timeout_s=10))
        with pytest.raises(PriorityNotSet) as down:
            await setter.set_priority(job_id, 5)
        assert down.value.reason == "down", str(down.value)
        assert down.value.transient
        config = OrderingConfig(attempts=2, retry_delay_s=0.1)
        ordering = decide_order(
            [PendingJob(job_id=job_id, submit_time=submitted, estimate_s=60)],
            datetime.now().astimezone(),
            config,
        )
        outcome = await apply_order(ordering, setter, config)
        assert outcome.stopped == "down" and outcome.failed == {job_id: "down"}
    finally:
        cluster.start_controller()
        subprocess.run(["scancel", job_id], timeout=30)


async def test_an_id_slurm_cannot_take_is_refused_before_any_call() -> None:
    setter = SlurmPriorities(SlurmCommands(prefix=["/nonexistent/scontrol-wrapper"]))
    for job_id, priority in (("12;rm", 5), ("12", 0), ("12", 2**32)):
        with pytest.raises(PriorityNotSet) as bad:
            await setter.set_priority(job_id, priority)
        assert bad.value.reason == "invalid"


async def test_a_round_reads_the_queue_ranks_it_and_sets_it_or_says_slurm_is_down(
    cluster: PrivateSlurm, workdir: Path
) -> None:
    blocker = _sbatch(workdir, "blocker", 20)
    slow, quick = _sbatch(workdir, "slow", 1), _sbatch(workdir, "quick", 1)
    try:
        executor = SlurmExecutor(output_dir=workdir)
        # quick is predicted short: it goes first although it came second
        ordering, outcome = await order_round(
            executor, SlurmPriorities(), {slow: 3000.0, quick: 20.0}, OrderingConfig()
        )
        assert ordering is not None
        mine = [j.job_id for j in ordering.jobs if j.job_id in (slow, quick)]
        assert mine == [quick, slow]
        assert {slow, quick} <= set(outcome.set) and outcome.stopped is None
        assert _priority(quick) > _priority(slow)
        cluster.stop_controller()
        try:
            down = SlurmExecutor(output_dir=workdir, commands=SlurmCommands(timeout_s=10))
            ordering, outcome = await order_round(down, SlurmPriorities(), {})
            assert ordering is None and outcome.stopped == "down" and outcome.set == []
        finally:
            cluster.start_controller()
    finally:
        subprocess.run(["scancel", slow, quick, blocker], timeout=30)
