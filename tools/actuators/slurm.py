"""SLURM through its command line: sbatch, squeue, scancel, and sacct or the jobcomp file.

Every call goes through one ``SlurmCommands`` runner (timeouts, no shell). The batch
script carries only resource directives; the job's name, working directory and output
path travel as separate argv entries, so no user text is ever parsed by a shell or can
add a directive line.

Job status and history come from ``sacct`` where the cluster keeps accounting in
slurmdbd (``tools.actuators.sacct``), else from the jobcomp file (``JobCompType=
jobcomp/filetxt``); squeue answers for queued jobs and those that ended within MinJobAge.

SLURM reports an out-of-memory kill under ``jobacct_gather`` + ``OverMemoryKill`` as
FAILED with signal 9, the same as any SIGKILL. The difference is in the job's output:
slurmstepd writes "exceeded memory limit (USED > LIMIT)". ``status`` reads that line to
tell OUT_OF_MEMORY from FAILED.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from knowledge_base.catalog import System
from knowledge_base.records import JobRecord, JobState
from tools.actuators.base import Executor
from tools.actuators.model import (
    ActuatorError,
    JobNotFound,
    JobRequest,
    JobStatus,
    QueueEntry,
    RequestRejected,
    SubmissionFailed,
    WalltimeNotExtended,
)
from tools.actuators.ordering import PrioritySetter, SlurmPriorities
from tools.actuators.sacct import SACCT_ENV, SacctJob, parse_sacct, sacct_command
from tools.actuators.slurm_commands import SlurmCommandError, SlurmCommands
from tools.actuators.state import NodePool

__all__ = [
    "SLURM_STATES",
    "SlurmExecutor",
    "parse_jobcomp",
    "parse_sinfo_pools",
    "render_sbatch",
    "slurm_state",
]

SLURM_STATES: Mapping[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SUSPENDED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "DEADLINE": JobState.TIMEOUT,
    "TIMEOUT": JobState.TIMEOUT,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "CANCELLED": JobState.CANCELLED,
    "PREEMPTED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "SPECIAL_EXIT": JobState.FAILED,
}
"""Native SLURM job states -> Rightsize's JobState (``CANCELLED by 0`` is CANCELLED)."""

_IDENTIFIER = re.compile(r"^[A-Za-z0-9._+-]+$")
_NOT_A_WORD = re.compile(r"[^A-Za-z0-9._+-]")  # a job name's directive: one plain word
_OOM_LINE = re.compile(r"exceeded (?:job )?memory limit", re.IGNORECASE)
_OUTPUT_NAME = "rightsize-%j.out"
_OUTPUTS_KEPT = 4096  # output paths remembered for output_tail (oldest forgotten first)


def render_sbatch(request: JobRequest) -> str:
    """The batch script for ``request``: resource directives, environment, then the command.

    The job's name is in the script (as a plain word) and, exactly, in ``SlurmExecutor``'s
    argv with the working directory and output, which win. Identifiers in directives
    must be plain words. With ``ntasks``, srun starts exactly that many ranks even when
    they do not fill the last node; with ``memory_per_cpu_mb``, memory is per core.
    """
    for field in ("partition", "account", "qos"):
        value = getattr(request, field)
        if value is not None and not _IDENTIFIER.match(value):
            raise RequestRejected(
                f"{field} must be a plain SLURM identifier (letters, digits, . _ + -), "
                f"got {value!r}",
                field=field,
                value=value,
            )
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={_NOT_A_WORD.sub('_', request.name)}",
        f"#SBATCH --partition={request.partition}",
        f"#SBATCH --nodes={request.nodes}",
    ]
    if request.ntasks is not None:
        lines.append(f"#SBATCH --ntasks={request.ntasks}")
    lines += [
        f"#SBATCH --ntasks-per-node={request.tasks_per_node}",
        f"#SBATCH --cpus-per-task={request.cpus_per_task}",
    ]
    if request.memory_per_cpu_mb is not None:  # --mem and --mem-per-cpu exclude each other
        lines.append(f"#SBATCH --mem-per-cpu={request.memory_per_cpu_mb}M")
    else:
        lines.append(f"#SBATCH --mem={request.memory_mb}M")
    lines.append(f"#SBATCH --time={request.walltime_minutes}")
    if request.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={request.gpus_per_node}")
    if request.account:
        lines.append(f"#SBATCH --account={request.account}")
    if request.qos:
        lines.append(f"#SBATCH --qos={request.qos}")
    lines.append("")
    if request.plan_id:
        lines.append(f"export RIGHTSIZE_PLAN_ID={shlex.quote(request.plan_id)}")
    for name, value in sorted(request.environment.items()):
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(request.command.rstrip("\n"))
    return "\n".join(lines) + "\n"


def slurm_state(native: str, signal: int | None, output: Path | None) -> JobState:
    """The JobState of a native SLURM state; a SIGKILLed job whose output says it went
    over its memory is OUT_OF_MEMORY (see the module docstring)."""
    state = SLURM_STATES.get(native, JobState.UNKNOWN)
    if state in (JobState.FAILED, JobState.CANCELLED) and signal == 9 and output is not None:
        try:
            text = output.read_text(encoding="utf-8", errors="replace")[-20000:]
        except OSError:
            return state
        if _OOM_LINE.search(text):
            return JobState.OUT_OF_MEMORY
    return state


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, dict):  # 23.02+: {"set", "infinite", "number"}
        value = value.get("number") if value.get("set") else None
    if not value:
        return None
    return datetime.fromtimestamp(int(value), UTC)


def _wait_status(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from squeue's wait status (22.05) or its 23.02+ object."""
    if isinstance(value, dict):
        signal = (value.get("signal") or {}).get("id")
        code = value.get("return_code")
        code = code.get("number") if isinstance(code, dict) else code
        return (int(code) if code is not None else None, int(signal) if signal else None)
    if value is None:
        return None, None
    status = int(value)
    return (status >> 8) & 0xFF, (status & 0x7F) or None


def _native_state(value: Any) -> str:
    if isinstance(value, list):  # 23.02+: ["FAILED"], 22.05: "FAILED"
        value = value[0] if value else "UNKNOWN"
    return str(value).split()[0].upper()


_JOBCOMP_KEYS = [
    "JobId",
    "UserId",
    "GroupId",
    "Name",
    "JobState",
    "Partition",
    "TimeLimit",
    "StartTime",
    "EndTime",
    "NodeList",
    "NodeCnt",
    "ProcCnt",
    "WorkDir",
    "ReservationName",
    "Tres",
    "Account",
    "QOS",
    "WcKey",
    "Cluster",
    "SubmitTime",
    "EligibleTime",
    "DerivedExitCode",
    "ExitCode",
]
# Values may hold spaces (job names, directories): a field runs until the next known key.
_JOBCOMP_FIELD = re.compile(
    rf"(?:^|(?<= ))({'|'.join(_JOBCOMP_KEYS)})=(.*?)(?= (?:{'|'.join(_JOBCOMP_KEYS)})=| ?$)"
)


def parse_jobcomp(text: str) -> dict[str, dict[str, str]]:
    """jobcomp/filetxt records by job id; a reused id keeps its latest record."""
    records: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(_JOBCOMP_FIELD.findall(line.rstrip()))
        if "JobId" in fields:
            records[fields["JobId"]] = fields
    return records


def _jobcomp_time(value: str | None) -> datetime | None:
    if not value or value in ("Unknown", "None"):
        return None
    # filetxt writes the controller's local time without a zone; these hosts run UTC.
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def parse_sinfo_pools(text: str) -> list[NodePool]:
    """Node pools from ``sinfo --json``: partitions that share the same nodes are one
    pool, with its node count and how many of its nodes are idle."""
    try:
        nodes = json.loads(text).get("nodes", [])
    except (json.JSONDecodeError, AttributeError) as exc:
        raise SubmissionFailed(f"sinfo --json printed no JSON: {text[:200]!r}") from exc
    members: dict[str, set[str]] = {}
    for node in nodes:
        for partition in node.get("partitions") or []:
            members.setdefault(str(partition), set()).add(str(node.get("name")))
    pools: dict[frozenset[str], list[str]] = {}
    for partition, names in members.items():
        pools.setdefault(frozenset(names), []).append(partition)
    state_of = {str(n.get("name")): _node_state(n.get("state")) for n in nodes}
    return [
        NodePool(
            name="+".join(sorted(partitions)),
            partitions=sorted(partitions),
            total_nodes=len(names),
            idle_nodes=sum(1 for name in names if state_of.get(name) == "idle"),
        )
        for names, partitions in pools.items()
    ]


def _node_state(value: object) -> str:
    if isinstance(value, list):  # 23.02+: ["IDLE"]; 22.05: "idle"
        value = value[0] if value else ""
    return str(value).lower()


def _tail(path: Path, max_bytes: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - max_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""  # not written yet (pending job) or not readable from here


class SlurmExecutor(Executor):
    """The SLURM cluster this machine's client commands talk to."""

    backend = "slurm"

    def __init__(
        self,
        system: System | None = None,
        commands: SlurmCommands | None = None,
        jobcomp_path: Path | None = None,
        output_dir: Path | None = None,
        accounting: Literal["auto", "sacct", "jobcomp"] = "auto",
    ) -> None:
        super().__init__(system)
        self.commands = commands or SlurmCommands()
        self._jobcomp_path = jobcomp_path
        self.output_dir = output_dir or Path.cwd()
        self.accounting = accounting
        self._outputs: dict[str, Path] = {}
        self._config_text: str | None = None
        self._sacct_on: bool | None = None

    async def _run(self, args: list[str], stdin: str | None = None) -> str:
        try:
            return await asyncio.to_thread(self.commands.run, args, stdin)
        except SlurmCommandError as exc:
            raise SubmissionFailed(str(exc), transient=exc.transient) from exc

    # -- submit -----------------------------------------------------------------------

    async def _submit(self, request: JobRequest) -> str:
        script = render_sbatch(request)
        workdir = request.working_dir or self.output_dir
        args = [
            "sbatch",
            "--parsable",
            f"--job-name={request.name}",
            f"--chdir={workdir}",
            f"--output={workdir / _OUTPUT_NAME}",
        ]
        out = await self._run(args, stdin=script)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SubmissionFailed(f"sbatch printed no job id: {out!r}")
        return job_id

    # -- status -----------------------------------------------------------------------

    async def _squeue(self) -> list[dict[str, Any]]:
        text = await self._run(["squeue", "--all", "--json"])
        try:
            answer = json.loads(text)
            jobs: list[dict[str, Any]] = answer.get("jobs", [])
        except (json.JSONDecodeError, AttributeError) as exc:
            raise SubmissionFailed(f"squeue --json printed no JSON: {text[:200]!r}") from exc
        if answer.get("errors"):
            # 22.05 exits 0 with no jobs and an "errors" list when slurmctld does not
            # answer: "no jobs" would read as "every watched job is gone".
            raise SubmissionFailed(
                f"squeue --json reported errors: {json.dumps(answer['errors'])[:300]}",
                transient=True,
            )
        return jobs

    async def status(self, job_id: str) -> JobStatus:
        found = await self.statuses([job_id])
        if job_id not in found:
            raise JobNotFound(
                f"SLURM knows no job {job_id!r} (not queued, not in {self._accounting_name()})"
            )
        return found[job_id]

    async def statuses(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """One ``squeue`` for every job asked about; accounting for those it no longer
        lists (they ended more than MinJobAge ago)."""
        wanted = list(dict.fromkeys(job_ids))
        if not wanted:
            return {}
        asked = set(wanted)
        found: dict[str, JobStatus] = {}
        # 22.05 ignores --jobs together with --json, so filter here.
        for job in await self._squeue():
            job_id = str(job.get("job_id"))
            if job_id in asked:
                found[job_id] = self._status_from_squeue(job)
        missing = [job_id for job_id in wanted if job_id not in found]
        if missing:
            found.update(await self._ended(missing))
        return found

    async def find_by_name(self, name: str) -> str | None:
        queued = [int(j["job_id"]) for j in await self._squeue() if j.get("name") == name]
        if queued:
            return str(max(queued))
        if await self._uses_sacct():
            ended = [int(j.job_id) for j in await self._sacct(name=name) if j.name == name]
        else:
            records = (await self._jobcomp()).values()
            ended = [int(r["JobId"]) for r in records if r.get("Name") == name]
        return str(max(ended)) if ended else None

    async def _node_pools(self) -> list[NodePool]:
        return parse_sinfo_pools(await self._run(["sinfo", "--json"]))

    async def _ended(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """Jobs squeue no longer lists: from sacct where accounting runs, else jobcomp."""
        if await self._uses_sacct():
            asked = [job_id for job_id in job_ids if job_id.isdigit()]  # SLURM ids only
            if not asked:
                return {}
            return {
                job.job_id: self._status_from_sacct(job)
                for job in await self._sacct(job_ids=asked)
                if job.job_id in asked
            }
        records = await self._jobcomp()
        return {
            job_id: self._status_from_jobcomp(records[job_id])
            for job_id in job_ids
            if job_id in records
        }

    def _accounting_name(self) -> str:
        return "accounting (sacct)" if self._sacct_on else "the jobcomp log"

    async def _uses_sacct(self) -> bool:
        """Whether job history comes from sacct: ``accounting="sacct"``, or ``"auto"`` on
        a cluster whose controller stores accounting in slurmdbd (and no jobcomp file
        was named)."""
        if self._sacct_on is None:
            if self.accounting == "auto" and self._jobcomp_path is None:
                config = await self._config()
                kind = re.search(r"^AccountingStorageType\s*=\s*(\S+)", config, re.MULTILINE)
                self._sacct_on = kind is not None and "slurmdbd" in kind.group(1)
            else:
                self._sacct_on = self.accounting == "sacct"
        return self._sacct_on

    async def _sacct(
        self, *, job_ids: Sequence[str] = (), name: str | None = None, since: datetime | None = None
    ) -> list[SacctJob]:
        args = sacct_command(job_ids=job_ids, name=name, since=since)
        try:
            text = await asyncio.to_thread(self.commands.run, args, None, SACCT_ENV)
        except SlurmCommandError as exc:
            raise SubmissionFailed(str(exc), transient=exc.transient) from exc
        return parse_sacct(text)

    def _status_from_sacct(self, job: SacctJob) -> JobStatus:
        output = (
            Path(job.work_dir) / _OUTPUT_NAME.replace("%j", job.job_id) if job.work_dir else None
        )
        self._remember_output(job.job_id, output)
        return JobStatus(
            job_id=job.job_id,
            state=self._state(job.native_state, job.signal, output),
            native_state=job.native_state,
            name=job.name or None,
            partition=job.partition,
            exit_code=job.exit_code,
            signal=job.signal,
            submit_time=job.submit_time,
            start_time=job.start_time,
            end_time=job.end_time,
        )

    def _remember_output(self, job_id: str, path: Path | None) -> None:
        """Where the job writes, from the last look at it: ``output_tail`` reads it
        without asking SLURM again (one ``squeue`` per monitor poll, not two per job)."""
        if path is None:
            return
        self._outputs.pop(job_id, None)
        self._outputs[job_id] = path
        while len(self._outputs) > _OUTPUTS_KEPT:
            del self._outputs[next(iter(self._outputs))]

    def _status_from_squeue(self, job: dict[str, Any]) -> JobStatus:
        native = _native_state(job.get("job_state"))
        code, signal = _wait_status(job.get("exit_code"))
        output = str(job.get("standard_output") or "").replace("%j", str(job["job_id"]))
        self._remember_output(str(job["job_id"]), Path(output) if output else None)
        return JobStatus(
            job_id=str(job["job_id"]),
            state=self._state(native, signal, Path(output) if output else None),
            native_state=native,
            name=job.get("name"),
            partition=job.get("partition"),
            exit_code=code,
            signal=signal,
            reason=str(job.get("state_reason") or ""),
            submit_time=_epoch(job.get("submit_time")),
            start_time=_epoch(job.get("start_time")),
            end_time=_epoch(job.get("end_time")) if native not in ("PENDING", "RUNNING") else None,
        )

    def _status_from_jobcomp(self, record: dict[str, str]) -> JobStatus:
        native = record.get("JobState", "UNKNOWN").upper()
        code_text, _, signal_text = record.get("ExitCode", "").partition(":")
        signal = int(signal_text) if signal_text.isdigit() and int(signal_text) else None
        output = Path(record.get("WorkDir", "/")) / _OUTPUT_NAME.replace("%j", record["JobId"])
        self._remember_output(record["JobId"], output)
        return JobStatus(
            job_id=record["JobId"],
            state=self._state(native, signal, output),
            native_state=native,
            name=record.get("Name"),
            partition=record.get("Partition"),
            exit_code=int(code_text) if code_text.isdigit() else None,
            signal=signal,
            submit_time=_jobcomp_time(record.get("SubmitTime")),
            start_time=_jobcomp_time(record.get("StartTime")),
            end_time=_jobcomp_time(record.get("EndTime")),
        )

    @staticmethod
    def _state(native: str, signal: int | None, output: Path | None) -> JobState:
        return slurm_state(native, signal, output)

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        path = self._outputs.get(job_id)
        if path is None:
            await self.status(job_id)  # JobNotFound for unknown ids
            path = self._outputs.get(job_id)
        return await asyncio.to_thread(_tail, path, max_bytes) if path is not None else ""

    # -- cancel, queue, accounting -------------------------------------------------------

    async def cancel(self, job_id: str) -> None:
        status = await self.status(job_id)  # JobNotFound for unknown ids
        if status.finished:
            return
        await self._run(["scancel", job_id])

    async def extend_walltime(self, job_id: str, new_limit_s: int) -> None:
        """``scontrol update JobId=ID TimeLimit=MINUTES`` (rounded up to a minute).

        Raising a limit needs SLURM operator rights (``AdminLevel=Operator`` or the
        SlurmUser); the partition's MaxTime caps it. A refusal is WalltimeNotExtended,
        transient only when the controller did not answer."""
        if not job_id.isdigit():
            raise WalltimeNotExtended(f"{job_id!r} is not a SLURM job id")
        if new_limit_s < 1:
            raise WalltimeNotExtended(f"new_limit_s must be positive, got {new_limit_s}")
        minutes = -(-int(new_limit_s) // 60)
        try:
            await asyncio.to_thread(
                self.commands.run, ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes}"]
            )
        except SlurmCommandError as exc:
            raise WalltimeNotExtended(
                f"SLURM did not extend job {job_id} to {minutes} min: {exc}",
                transient=exc.transient,
            ) from exc

    def priority_setter(self) -> PrioritySetter:
        """``scontrol update JobId=ID Priority=N`` through this executor's commands."""
        return SlurmPriorities(self.commands)

    async def queue(self) -> list[QueueEntry]:
        entries = []
        for job in await self._squeue():
            state = SLURM_STATES.get(_native_state(job.get("job_state")), JobState.UNKNOWN)
            if state not in (JobState.PENDING, JobState.RUNNING):
                continue  # finished jobs linger in squeue for MinJobAge
            limit = job.get("time_limit")
            limit = limit.get("number") if isinstance(limit, dict) else limit
            entries.append(
                QueueEntry(
                    job_id=str(job["job_id"]),
                    state=state,
                    partition=job.get("partition"),
                    user=job.get("user_name"),
                    nodes=int(job.get("node_count") or 1),
                    cpus=int(job.get("cpus") or 1),
                    time_limit_s=int(limit) * 60 if limit else None,
                    submit_time=_epoch(job.get("submit_time")),
                    start_time=_epoch(job.get("start_time")) if state is JobState.RUNNING else None,
                )
            )
        return entries

    async def finished_jobs(self, since: datetime | None = None) -> list[JobRecord]:
        system = self.system.name if self.system is not None else "slurm"
        if await self._uses_sacct():
            return [
                job.record(system, status.state, source="slurm sacct")
                for job in await self._sacct(since=since)
                if (status := self._status_from_sacct(job)).finished
                and status.end_time is not None
                and (since is None or status.end_time >= since)
            ]
        records = []
        for record in (await self._jobcomp()).values():
            status = self._status_from_jobcomp(record)
            if status.end_time is None or (since is not None and status.end_time < since):
                continue
            records.append(
                status.to_record(
                    system,
                    "slurm jobcomp",
                    user=record.get("UserId", "").split("(")[0] or None,
                    account=record.get("Account") or None,
                    # A job cancelled while pending never had nodes: SLURM logs 0.
                    requested_nodes=int(record.get("NodeCnt") or 0) or None,
                    requested_cores=int(record.get("ProcCnt") or 0) or None,
                    requested_walltime_s=int(record.get("TimeLimit") or 0) * 60 or None,
                )
            )
        return sorted(records, key=lambda r: (r.submit_time, int(r.job_id)))

    async def _jobcomp(self) -> dict[str, dict[str, str]]:
        path = self._jobcomp_path or await self._find_jobcomp()
        if path is None:
            return {}
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ActuatorError(f"cannot read the jobcomp file {path}: {exc}") from exc
        return parse_jobcomp(text)

    async def _config(self) -> str:
        """``scontrol show config``, asked once: where accounting and jobcomp live."""
        if self._config_text is None:
            self._config_text = await self._run(["scontrol", "show", "config"])
        return self._config_text

    async def _find_jobcomp(self) -> Path | None:
        config = await self._config()
        kind = re.search(r"^JobCompType\s*=\s*(\S+)", config, re.MULTILINE)
        where = re.search(r"^JobCompLoc\s*=\s*(\S+)", config, re.MULTILINE)
        if kind is None or "filetxt" not in kind.group(1) or where is None:
            return None
        self._jobcomp_path = Path(where.group(1))
        return self._jobcomp_path
