"""SLURM accounting through ``sacct``: the command line to ask, and its rows as jobs.

Where a cluster runs ``slurmdbd`` (``AccountingStorageType=accounting_storage/slurmdbd``)
``sacct`` knows every job that ever ran, with its request, outcome and the memory its
steps used. Rightsize asks in a form every release prints the same way: fixed fields,
a delimiter no job name holds (the unit separator), and times as epoch seconds
(``SLURM_TIME_FORMAT=%s``), so no time zone is guessed. One job is an allocation row
(``JobIDRaw`` = ``123``) followed by its steps (``123.batch``, ``123.0``); the steps
give the peak memory (``MaxRSS``: the largest resident set of any one task of the step,
the largest over steps kept) and the task layout (``NTasks``: the most tasks of any step);
``TotalCPU`` (user + system CPU time of every step) comes from the allocation row, else
the sum of the steps'. A job none of whose steps reported ``MaxRSS`` (accounting not
gathering, a job killed before the first sample) keeps ``used_memory_mb`` None and
``max_rss_reported`` False, so an import can name it rather than store a zero.

``parse_sacct`` is pure and strict: a row that does not parse is an error naming its
line, field and value, so an import validates everything before it writes anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord, JobState

__all__ = [
    "SACCT_ENV",
    "SACCT_FIELDS",
    "SacctJob",
    "parse_sacct",
    "sacct_command",
]

SACCT_FIELDS = (
    "JobIDRaw",
    "JobName",
    "State",
    "Submit",
    "Start",
    "End",
    "ExitCode",
    "Partition",
    "User",
    "Account",
    "NNodes",
    "NCPUS",
    "TimelimitRaw",
    "ReqMem",
    "MaxRSS",
    "Cluster",
    "WorkDir",
    "TotalCPU",
    "NTasks",
)
DELIMITER = "\x1f"
SACCT_ENV = {"SLURM_TIME_FORMAT": "%s"}
"""Times as epoch seconds: what ``parse_sacct`` reads."""

EPOCH_START = "1970-01-01T00:00:00"
_JOB_ID = re.compile(r"^(\d+)(?:\.(.+))?$")  # array/het ids (12_3, 12+1) are not ours
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)([nc]?)$", re.IGNORECASE)
_MB_PER = {
    "": 1 / 1024 / 1024,
    "K": 1 / 1024,
    "M": 1.0,
    "G": 1024.0,
    "T": 1024.0**2,
    "P": 1024.0**3,
}


@dataclass(frozen=True)
class SacctJob:
    """One job as accounting knows it, its steps folded in."""

    job_id: str
    name: str
    native_state: str
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    exit_code: int | None
    signal: int | None
    partition: str | None
    user: str | None
    account: str | None
    nodes: int | None
    cpus: int | None
    time_limit_s: int | None
    requested_memory_mb: int | None  # per node
    used_memory_mb: int | None  # the largest MaxRSS of its steps
    cluster: str | None
    work_dir: str | None
    used_cpu_s: float | None = None  # TotalCPU
    tasks: int | None = None  # the most tasks of any step (NTasks)
    max_rss_reported: bool = False  # some step reported a MaxRSS

    def record(self, system: str, state: JobState, *, source: str = "sacct") -> JobRecord:
        """The job as history keeps it (``state``: the native state, OOM told apart)."""
        submit = self.submit_time or self.start_time or self.end_time
        if submit is None:
            raise InvalidInputError(
                "no submit, start or end time", source=source, field="Submit", value=self.job_id
            )
        return JobRecord(
            job_id=self.job_id,
            system=system,
            partition=self.partition,
            user=self.user,
            account=self.account,
            application=self.name or None,
            state=state,
            submit_time=submit,
            start_time=self.start_time,
            end_time=self.end_time,
            wait_s=_seconds(submit, self.start_time),
            run_s=_seconds(self.start_time, self.end_time),
            requested_nodes=self.nodes or None,
            requested_cores=self.cpus or None,
            requested_memory_mb=self.requested_memory_mb,
            requested_walltime_s=self.time_limit_s,
            used_memory_mb=self.used_memory_mb,
            used_cpu_s=self.used_cpu_s,
            requested_tasks=self.tasks or None,
            exit_code=self.exit_code,
            source=source,
        )


def _seconds(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, int((end - start).total_seconds()))


def sacct_command(
    *,
    since: datetime | None = None,
    cluster: str | None = None,
    job_ids: Sequence[str] = (),
    name: str | None = None,
) -> list[str]:
    """The ``sacct`` argv: every user's jobs, all steps, ``SACCT_FIELDS`` in order.

    Without ``job_ids`` sacct lists only today's jobs unless given a start time, so the
    start is ``since`` or the epoch."""
    args = [
        "sacct",
        "--allusers",
        "--parsable2",
        "--noheader",
        f"--delimiter={DELIMITER}",
        f"--format={','.join(SACCT_FIELDS)}",
    ]
    if job_ids:
        args.append(f"--jobs={','.join(job_ids)}")
    else:
        start = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if since else EPOCH_START
        args.append(f"--starttime={start}")
    if name is not None:
        args.append(f"--name={name}")
    if cluster is not None:
        args.append(f"--clusters={cluster}")
    return args


def parse_sacct(text: str, *, source: str = "sacct") -> list[SacctJob]:
    """Jobs from ``sacct_command``'s output, in the order listed; steps fold into their job."""
    jobs: dict[str, SacctJob] = {}
    with_total: set[str] = set()  # jobs whose allocation row gave TotalCPU
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        values = line.split(DELIMITER)
        if len(values) != len(SACCT_FIELDS):
            raise InvalidInputError(
                f"line {number}: expected {len(SACCT_FIELDS)} fields "
                f"({','.join(SACCT_FIELDS)}), got {len(values)}",
                source=source,
                field=f"line {number}",
                value=line[:200],
            )
        row = dict(zip(SACCT_FIELDS, values, strict=True))
        found = _JOB_ID.match(row["JobIDRaw"])
        if found is None:
            raise InvalidInputError(
                f"line {number}: JobIDRaw is not a job or step id",
                source=source,
                field=f"line {number}.JobIDRaw",
                value=row["JobIDRaw"],
            )
        job_id, step = found.group(1), found.group(2)
        where = f"line {number}"
        if step is None:
            jobs[job_id] = _allocation(job_id, row, where, source)
            if jobs[job_id].used_cpu_s is not None:
                with_total.add(job_id)
            continue
        used = _memory_mb(row["MaxRSS"], where, "MaxRSS", source)
        owner = jobs.get(job_id)
        if owner is None:
            continue
        tasks = _int(row["NTasks"], where, "NTasks", source)
        if tasks is not None:
            owner = replace(owner, tasks=max(tasks, owner.tasks or 0))
        if used is not None:
            peak = max(used, owner.used_memory_mb or 0)
            owner = replace(owner, used_memory_mb=peak, max_rss_reported=True)
        cpu = _cpu_s(row["TotalCPU"], where, source)
        if cpu is not None and owner.job_id not in with_total:
            owner = replace(owner, used_cpu_s=(owner.used_cpu_s or 0.0) + cpu)
        jobs[job_id] = owner
    return list(jobs.values())


def _allocation(job_id: str, row: dict[str, str], where: str, source: str) -> SacctJob:
    code, signal = _exit_code(row["ExitCode"], where, source)
    nodes = _int(row["NNodes"], where, "NNodes", source)
    cpus = _int(row["NCPUS"], where, "NCPUS", source)
    limit_min = _int(row["TimelimitRaw"], where, "TimelimitRaw", source)
    memory = _memory_mb(row["ReqMem"], where, "ReqMem", source, cpus=cpus, nodes=nodes)
    return SacctJob(
        job_id=job_id,
        name=row["JobName"],
        native_state=(row["State"].split() or ["UNKNOWN"])[0].upper(),
        submit_time=_time(row["Submit"], where, "Submit", source),
        start_time=_time(row["Start"], where, "Start", source),
        end_time=_time(row["End"], where, "End", source),
        exit_code=code,
        signal=signal,
        partition=row["Partition"] or None,
        user=row["User"] or None,
        account=row["Account"] or None,
        nodes=nodes,
        cpus=cpus,
        time_limit_s=limit_min * 60 if limit_min else None,
        requested_memory_mb=memory,
        used_memory_mb=None,
        cluster=row["Cluster"] or None,
        work_dir=row["WorkDir"] or None,
        used_cpu_s=_cpu_s(row["TotalCPU"], where, source),
        tasks=_int(row["NTasks"], where, "NTasks", source),
    )


def _bad(where: str, field: str, value: str, source: str, why: str) -> InvalidInputError:
    return InvalidInputError(
        f"{where}: {field} {why}, got {value!r}",
        source=source,
        field=f"{where}.{field}",
        value=value,
    )


def _time(value: str, where: str, field: str, source: str) -> datetime | None:
    if value in ("", "Unknown", "None", "0"):
        return None
    if not value.isdigit():
        raise _bad(where, field, value, source, "is not epoch seconds (SLURM_TIME_FORMAT=%s)")
    return datetime.fromtimestamp(int(value), UTC)


def _int(value: str, where: str, field: str, source: str) -> int | None:
    if value in ("", "UNLIMITED", "Partition_Limit", "INVALID"):
        return None
    if not value.isdigit():
        raise _bad(where, field, value, source, "is not a whole number")
    return int(value)


def _exit_code(value: str, where: str, source: str) -> tuple[int | None, int | None]:
    if not value:
        return None, None
    code, _, signal = value.partition(":")
    if not code.isdigit() or (signal and not signal.isdigit()):
        raise _bad(where, "ExitCode", value, source, "is not CODE:SIGNAL")
    return int(code), (int(signal) or None) if signal else None


def _memory_mb(
    value: str,
    where: str,
    field: str,
    source: str,
    *,
    cpus: int | None = None,
    nodes: int | None = None,
) -> int | None:
    """MB per node from sacct's memory (``4000M``, ``1.5G``, ``512Kn``; ``c``: per CPU)."""
    if value in ("", "0", "0n", "0c"):
        return None
    found = _MEMORY.match(value)
    if found is None:
        raise _bad(where, field, value, source, "is not a memory size (e.g. 4000M)")
    mb = float(found.group(1)) * _MB_PER[found.group(2).upper()]
    if found.group(3).lower() == "c" and cpus:
        mb *= cpus / max(nodes or 1, 1)
    return max(1, round(mb))


_CPU_TIME = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def _cpu_s(value: str, where: str, source: str) -> float | None:
    """Seconds from sacct's ``TotalCPU`` ([DD-[HH:]]MM:SS[.mmm]); None where empty."""
    if value in ("", "INVALID"):
        return None
    found = _CPU_TIME.match(value)
    if found is None:
        raise _bad(where, "TotalCPU", value, source, "is not [DD-[HH:]]MM:SS[.mmm]")
    days, hours, minutes, seconds = found.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
