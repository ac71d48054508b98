"""SLURM accounting into job history: sacct rows, the import, bad input, the real cluster."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord, JobState
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import JobQuery
from tests.conftest import REPO
from tools.actuators.sacct import DELIMITER, SACCT_FIELDS, parse_sacct
from tools.actuators.slurm import SlurmExecutor
from tools.actuators.slurm_commands import SlurmCommandError, SlurmCommands
from tools.actuators.slurm_history import import_slurm_history
from tools.planning.chain import EstimatorChain

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _row(job: str, **fields: object) -> str:
    values: dict[str, object] = {name: "" for name in SACCT_FIELDS}
    values.update(JobIDRaw=job)
    values.update(fields)
    return DELIMITER.join(str(values[name]) for name in SACCT_FIELDS)


def _job(index: int, *, run_s: int = 3000, state: str = "COMPLETED") -> list[str]:
    submit = int(T0.timestamp()) + index * 3600
    return [
        _row(
            str(index),
            JobName="lmp",
            State=state,
            Submit=submit,
            Start=submit + 60,
            End=submit + 60 + run_s,
            ExitCode="0:0",
            Partition="batch",
            User=f"user{index % 3}",
            Account="chem",
            NNodes=1,
            NCPUS=28,
            TimelimitRaw=240,
            ReqMem="4000M",
            Cluster="rightsize",
            WorkDir="/nonexistent",
        ),
        _row(f"{index}.batch", State=state, MaxRSS="1536000K"),
    ]


def test_a_job_and_its_steps_become_one_record_with_the_peak_memory() -> None:
    text = "\n".join(
        [
            *_job(7),
            _row("7.0", MaxRSS="2G"),
            _row("8", JobName="wide", State="CANCELLED by 0", Submit=1, ReqMem="1000Mc", NCPUS=4),
        ]
    )
    seven, eight = parse_sacct(text)
    record = seven.record("local", JobState.COMPLETED)
    assert (record.job_id, record.run_s, record.wait_s) == ("7", 3000, 60)
    assert record.used_memory_mb == 2048  # the largest step (2 GB beats 1.5 GB)
    assert (record.requested_memory_mb, record.requested_walltime_s) == (4000, 4 * 3600)
    assert (record.user, record.account, record.requested_cores) == ("user1", "chem", 28)
    assert eight.native_state == "CANCELLED"
    assert eight.requested_memory_mb == 4000  # 1000 MB per CPU x 4 CPUs on one node
    assert eight.start_time is None


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("7" + DELIMITER + "too few fields", "line 2"),
        (_row("7", Submit="yesterday"), "line 2.Submit"),
        (_row("7", ExitCode="boom"), "line 2.ExitCode"),
        (_row("7", ReqMem="lots"), "line 2.ReqMem"),
        (_row("job-7"), "line 2.JobIDRaw"),
    ],
)
def test_a_malformed_row_is_an_error_naming_its_line_and_field(row: str, field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_sacct("\n".join([_job(1)[0], row]))
    assert caught.value.field == field
    assert "line 2" in str(caught.value)


def _fake_sacct(tmp_path: Path, text: str) -> SlurmCommands:
    """A stand-in for sacct (a real one cannot make 1,100 jobs of history in a test):
    a program that prints ``text`` whatever it is asked."""
    out = tmp_path / "sacct.out"
    out.write_text(text)
    script = tmp_path / "fake_sacct.py"
    script.write_text(f"import sys; sys.stdout.write(open({str(out)!r}).read())\n")
    return SlurmCommands(prefix=[sys.executable, str(script)])


async def test_an_import_is_idempotent_and_the_history_estimator_trains_on_it(
    tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    text = "\n".join(line for i in range(1100) for line in _job(i, run_s=3000 + (i % 7) * 200))
    text += "\n" + _row("5000", JobName="queued", State="PENDING", Submit=1)  # not history
    commands = _fake_sacct(tmp_path, text)
    first = await import_slurm_history(sqlite_kb, commands, system="owens", batch_size=400)
    assert (first.listed, first.finished, first.added, first.already_known) == (
        1101,
        1100,
        1100,
        0,
    )
    assert first.batches == 3
    again = await import_slurm_history(sqlite_kb, commands, system="owens")
    assert (again.added, again.already_known) == (0, 1100)
    assert await sqlite_kb.count_jobs(JobQuery(system="owens")) == 1100
    chain = EstimatorChain(sqlite_kb)
    assert await chain.history("owens") is not None  # trained on the imported past


async def test_a_malformed_row_anywhere_writes_nothing(
    tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    lines = [line for i in range(50) for line in _job(i)]
    lines.insert(73, _row("999", End="not-a-time"))
    with pytest.raises(InvalidInputError, match=r"line 74: End"):
        await import_slurm_history(
            sqlite_kb, _fake_sacct(tmp_path, "\n".join(lines)), system="owens"
        )
    assert await sqlite_kb.count_jobs(JobQuery()) == 0


async def test_since_in_the_future_is_refused_naming_the_option(
    tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    future = datetime.now(UTC) + timedelta(days=2)
    with pytest.raises(InvalidInputError) as caught:
        await import_slurm_history(sqlite_kb, _fake_sacct(tmp_path, ""), system="x", since=future)
    assert caught.value.field == "--since"
    assert "future" in str(caught.value)


async def test_no_sacct_to_ask_is_an_error_that_names_sacct(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM client here
    with pytest.raises(SlurmCommandError, match="sacct not found"):
        await import_slurm_history(sqlite_kb, SlurmCommands(), system="local")
    assert await sqlite_kb.count_jobs(JobQuery()) == 0


# -- the real local SLURM, with slurmdbd -------------------------------------------------------


def _sacct_answers(env: dict[str, str]) -> bool:
    if shutil.which("sacct") is None:
        return False
    done = subprocess.run(
        ["sacct", "-n", "-X", "-S", "now"], capture_output=True, env=env, timeout=30, check=False
    )
    return done.returncode == 0


@pytest.fixture(scope="session")
def slurm_accounting(slurm_cluster: dict[str, str]) -> dict[str, str]:
    """The local SLURM with accounting: start.sh restarts one that runs without it."""
    env = dict(slurm_cluster)
    if not _sacct_answers(env) and os.geteuid() == 0:
        subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm" / "start.sh")],
            capture_output=True,
            timeout=600,
            check=False,
        )
    if not _sacct_answers(env):
        pytest.fail("sacct does not answer: start.sh should have brought up slurmdbd")
    return env


@pytest.mark.slurm
async def test_real_accounting_is_imported_once_and_read_by_the_executor(
    slurm_accounting: dict[str, str], tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    tmp_path.chmod(0o777)
    name = f"hist-{os.getpid()}-{time.monotonic_ns()}"
    ids = []
    for command in ("true", "exit 3"):
        done = subprocess.run(
            ["sbatch", "--parsable", "-p", "debug", "-t", "1", "--mem=100M", "-J", name,
             f"--chdir={tmp_path}", "--wrap", command],
            capture_output=True, text=True, env=slurm_accounting, check=True,
        )  # fmt: skip
        ids.append(done.stdout.strip().split(";")[0])
    executor = SlurmExecutor(accounting="auto")
    records = {}
    # Until both ended and accounting has them; bounded at 5 min, as they may wait behind
    # a 2-core job of the e2e lane that scripts/test.sh runs beside this one.
    for _ in range(600):
        records = {r.job_id: r for r in await executor.finished_jobs() if r.job_id in ids}
        if len(records) == 2:
            break
        await asyncio.sleep(0.5)
    assert {r.source for r in records.values()} == {"slurm sacct"}
    assert records[ids[0]].state is JobState.COMPLETED
    assert (records[ids[1]].state, records[ids[1]].exit_code) == (JobState.FAILED, 3)
    assert await executor.find_by_name(name) == ids[1]

    since = datetime.now(UTC) - timedelta(hours=1)
    first = await import_slurm_history(sqlite_kb, SlurmCommands(), system="local", since=since)
    known = await _history_ids(sqlite_kb)
    again = await import_slurm_history(sqlite_kb, SlurmCommands(), system="local", since=since)
    assert first.added >= 2
    assert again.already_known == first.added + first.already_known  # nothing imported twice
    # New the second time: only jobs of the slurm lane beside this one that ended meanwhile.
    assert again.added == len(await _history_ids(sqlite_kb) - known)
    imported = {j.job_id: j for j in await sqlite_kb.query_jobs(JobQuery(system="local"))}
    assert imported[ids[1]].exit_code == 3
    assert imported[ids[0]].requested_memory_mb == 100


@pytest.mark.slurm
async def test_real_jobs_that_hold_known_memory_are_imported_with_their_peaks(
    slurm_accounting: dict[str, str], tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    """Jobs touch 150 MB and 400 MB and hold them past two accounting samples (every 5 s,
    start.sh's JobAcctGatherFrequency); the import keeps each peak, its CPU time and tasks."""
    tmp_path.chmod(0o777)
    name = f"mem-{os.getpid()}-{time.monotonic_ns()}"
    hold = (
        "import sys, time; b = bytearray(int(sys.argv[1]) * 2**20); "
        "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(12)"
    )
    wanted_mb = {}
    since = datetime.now(UTC) - timedelta(minutes=5)
    for mb in (150, 400):
        done = subprocess.run(
            ["sbatch", "--parsable", "-p", "debug", "-t", "1", "--mem=800M", "-J", name,
             f"--chdir={tmp_path}", "--wrap", f"{sys.executable} -c '{hold}' {mb}"],
            capture_output=True, text=True, env=slurm_accounting, check=True,
        )  # fmt: skip
        wanted_mb[done.stdout.strip().split(";")[0]] = mb
    stored: dict[str, JobRecord] = {}
    # Until both ended and accounting has their steps; bounded at 5 min (they may queue
    # behind other lanes' jobs on the shared node).
    for _ in range(300):
        await import_slurm_history(sqlite_kb, SlurmCommands(), system="local", since=since)
        stored = {
            j.job_id: j
            for j in await sqlite_kb.query_jobs(JobQuery(system="local", limit=100_000))
            if j.job_id in wanted_mb
        }
        if len(stored) == 2:
            break
        await asyncio.sleep(1.0)
    assert len(stored) == 2, f"accounting never listed both jobs {sorted(wanted_mb)}"
    for job_id, mb in wanted_mb.items():
        record = stored[job_id]
        assert record.state is JobState.COMPLETED
        peak = record.used_memory_mb
        # The bytearray, plus the interpreter (about 10-30 MB), never the whole 800 MB asked.
        assert peak is not None and mb <= peak < mb + 120, (job_id, mb, peak)
        assert record.requested_memory_mb == 800
        assert record.used_cpu_s is not None
        assert record.requested_tasks == 1


@pytest.mark.slurm
async def test_the_cli_imports_slurm_history_as_json(
    slurm_accounting: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = {**slurm_accounting, "RIGHTSIZE_HOME": str(home)}
    command = [sys.executable, "-m", "rightsize", "history", "import", "slurm", "--json"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    known = await _history_ids_in(home / "rightsize.db")
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    counts = json.loads(first.stdout), json.loads(second.stdout)
    assert counts[1]["already_known"] == counts[0]["added"] + counts[0]["already_known"]
    # New the second time: only jobs of the slurm lane beside this one that ended meanwhile.
    now_known = await _history_ids_in(home / "rightsize.db")
    assert counts[1]["added"] == len(now_known - known)
    bad = subprocess.run(
        [*command, "--since", "2999-01-01"], capture_output=True, text=True, env=env, timeout=60
    )
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["field"] == "--since"


async def _history_ids(kb: SQLiteKnowledgeBase) -> set[str]:
    """The job ids in ``kb``'s history."""
    return {j.job_id for j in await kb.query_jobs(JobQuery(limit=1_000_000))}


async def _history_ids_in(path: Path) -> set[str]:
    """The job ids in the history of the SQLite knowledge base at ``path``."""
    kb = SQLiteKnowledgeBase(path)
    try:
        return await _history_ids(kb)
    finally:
        await kb.close()


def test_total_cpu_and_tasks_are_kept_and_a_job_without_max_rss_is_not_a_zero() -> None:
    text = "\n".join(
        [
            _row("5", JobName="mpi", State="COMPLETED", Submit=100, Start=160, End=760,
                 ExitCode="0:0", NNodes=2, NCPUS=8, ReqMem="2G", TotalCPU="1-01:02:03.5"),
            _row("5.batch", State="COMPLETED", MaxRSS="100M", NTasks=1, TotalCPU="00:01.000"),
            _row("5.0", State="COMPLETED", MaxRSS="700M", NTasks=8, TotalCPU="02:03"),
            _row("6", JobName="quiet", State="COMPLETED", Submit=100, Start=160, End=200,
                 ExitCode="0:0", NNodes=1, NCPUS=1),
            _row("6.batch", State="COMPLETED", TotalCPU="00:30.5", NTasks=1),
        ]
    )  # fmt: skip
    five, six = parse_sacct(text)
    record = five.record("local", JobState.COMPLETED)
    assert record.used_memory_mb == 700 and five.max_rss_reported
    assert record.used_cpu_s == pytest.approx(86400 + 3723.5)  # the allocation row's total
    assert (record.requested_tasks, record.requested_nodes, record.requested_cores) == (8, 2, 8)
    quiet = six.record("local", JobState.COMPLETED)
    assert quiet.used_memory_mb is None and not six.max_rss_reported
    assert quiet.used_cpu_s == pytest.approx(30.5)  # no total on the allocation: the steps'


def test_a_malformed_total_cpu_names_its_line_and_field() -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_sacct("\n".join([_job(1)[0], _row("1.batch", TotalCPU="ten minutes")]))
    assert caught.value.field == "line 2.TotalCPU"


async def test_an_import_names_the_finished_jobs_without_max_rss(
    tmp_path: Path, sqlite_kb: SQLiteKnowledgeBase
) -> None:
    rows = [*_job(1), _job(2)[0], *_job(3)]  # job 2 has no step, so no MaxRSS
    commands = _fake_sacct(tmp_path, "\n".join(rows) + "\n")
    result = await import_slurm_history(sqlite_kb, commands, system="local")
    assert (result.finished, result.without_max_rss, result.without_max_rss_ids) == (3, 1, ["2"])
    stored = {j.job_id: j for j in await sqlite_kb.query_jobs(JobQuery(system="local"))}
    assert stored["2"].used_memory_mb is None
    assert stored["1"].used_memory_mb == 1500
