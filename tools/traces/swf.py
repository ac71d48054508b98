"""Read and write batch job logs in the Standard Workload Format (SWF), one job at a time.

SWF is the Parallel Workloads Archive's format (Feitelson, Tsafrir and Krakov, JPDC 2014):
``;`` header lines (``; MaxProcs: 128``), then one job a line with 18 whitespace-separated
numbers, ``-1`` meaning unknown. Traces run to hundreds of thousands of lines, so the reader
streams: it parses the header on open and then yields :class:`SWFJob` records while it reads.

A bad line is a local error: the reader skips it, records why and on which line in its
:class:`ParseReport`, and goes on. Only input that cannot be a trace at all (a missing
file, a broken gzip member at the start, nothing but garbage where jobs should be) raises
:class:`~knowledge_base.errors.InvalidInputError`.

Times are whole seconds, as the format defines them, relative to the header's
``UnixStartTime``; memory is KB per processor, as the archive records it.
"""

from __future__ import annotations

import gzip
import io
import itertools
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import IntEnum, StrEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Self, TextIO

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord, JobState

__all__ = [
    "FIELD_COUNT",
    "ParseIssue",
    "ParseReport",
    "SWFHeader",
    "SWFJob",
    "SWFReader",
    "SWFStatus",
    "SWFWriter",
    "SkipReason",
    "parse_header",
    "read_swf",
    "write_swf",
]

FIELD_COUNT = 18
# How many job-shaped lines may fail before the first good one until we call the file
# "not SWF at all" rather than "an SWF trace with bad lines".
_MAX_LEADING_BAD_LINES = 100
_GZIP_MAGIC = b"\x1f\x8b"


class SWFStatus(IntEnum):
    """Field 11. 2-4 are the parts of a checkpointed job, which the archive logs apart."""

    FAILED = 0
    COMPLETED = 1
    PARTIAL = 2
    LAST_PARTIAL_COMPLETED = 3
    LAST_PARTIAL_FAILED = 4
    CANCELLED = 5


_STATE_MAP: dict[int, JobState] = {
    SWFStatus.FAILED: JobState.FAILED,
    SWFStatus.COMPLETED: JobState.COMPLETED,
    SWFStatus.PARTIAL: JobState.RUNNING,
    SWFStatus.LAST_PARTIAL_COMPLETED: JobState.COMPLETED,
    SWFStatus.LAST_PARTIAL_FAILED: JobState.FAILED,
    SWFStatus.CANCELLED: JobState.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class SWFJob:
    """One SWF line: the 18 fields in order, ``-1`` (unknown) read as ``None``.

    A frozen dataclass rather than a pydantic model: traces hold up to a few hundred
    thousand jobs and the reader validates each line itself.
    """

    job_id: int
    submit_time_s: int
    wait_s: int | None
    run_s: int | None
    allocated_procs: int | None
    avg_cpu_time_s: float | None
    used_memory_kb_per_proc: int | None
    requested_procs: int | None
    requested_time_s: int | None
    requested_memory_kb_per_proc: int | None
    status: int | None
    user_id: int | None
    group_id: int | None
    executable_id: int | None
    queue_id: int | None
    partition_id: int | None
    preceding_job_id: int | None
    think_time_s: int | None

    @property
    def procs(self) -> int | None:
        """Requested processors, else allocated ones (several archive logs record only those)."""
        return self.requested_procs if self.requested_procs is not None else self.allocated_procs

    @property
    def start_time_s(self) -> int | None:
        return None if self.wait_s is None else self.submit_time_s + self.wait_s

    @property
    def end_time_s(self) -> int | None:
        start = self.start_time_s
        return None if start is None or self.run_s is None else start + self.run_s

    @property
    def state(self) -> JobState:
        return (
            JobState.UNKNOWN
            if self.status is None
            else _STATE_MAP.get(self.status, JobState.UNKNOWN)
        )

    def to_fields(self) -> list[int | float]:
        """The 18 numbers as the format writes them, ``None`` back to ``-1``."""
        return [-1 if v is None else v for v in (getattr(self, f.name) for f in _FIELDS)]

    def to_job_record(
        self, header: SWFHeader | None = None, *, system: str | None = None, source: str = "swf"
    ) -> JobRecord:
        """This job as history remembers it in the knowledge base.

        Times become UTC datetimes through the header's ``UnixStartTime`` (0 when absent,
        which is right for traces such as ALCF-Theta that log absolute Unix times).
        Processors go to ``requested_cores``: SWF does not say whether a "processor" is a
        core or a node, and on the archive's machines it is nearly always a core. Memory
        goes from KB per processor to MB for the whole job.
        """
        epoch = datetime.fromtimestamp((header.unix_start_time_s if header else None) or 0, UTC)
        submit = epoch + timedelta(seconds=self.submit_time_s)
        start = None if self.start_time_s is None else epoch + timedelta(seconds=self.start_time_s)
        end = None if self.end_time_s is None else epoch + timedelta(seconds=self.end_time_s)
        procs = self.procs
        name = system or (header.system_name if header else None) or "swf"
        return JobRecord(
            job_id=str(self.job_id),
            system=name,
            partition=None if self.partition_id is None else str(self.partition_id),
            user=None if self.user_id is None else str(self.user_id),
            group=None if self.group_id is None else str(self.group_id),
            application=None if self.executable_id is None else str(self.executable_id),
            state=self.state,
            submit_time=submit,
            start_time=start,
            end_time=end,
            wait_s=self.wait_s,
            run_s=self.run_s,
            requested_cores=procs if procs else None,
            requested_memory_mb=_total_mb(self.requested_memory_kb_per_proc, procs),
            requested_walltime_s=self.requested_time_s,
            used_memory_mb=_total_mb(self.used_memory_kb_per_proc, procs),
            source=source,
        )


_FIELDS = fields(SWFJob)
_TIME_FIELDS = frozenset({"submit_time_s", "wait_s", "run_s", "requested_time_s", "think_time_s"})


def _total_mb(kb_per_proc: int | None, procs: int | None) -> int | None:
    if kb_per_proc is None or not procs:
        return None
    return round(kb_per_proc * procs / 1024)


class SkipReason(StrEnum):
    """Why a line was not turned into a job."""

    WRONG_FIELD_COUNT = "wrong_field_count"  # truncated or run-together line
    NOT_A_NUMBER = "not_a_number"  # corrupt field
    NEGATIVE_TIME = "negative_time"  # a time below -1 (or an unknown submit time)
    NEGATIVE_VALUE = "negative_value"  # a count or size below -1
    HEADER_DISAGREES = "header_disagrees"  # e.g. more processors than the header's MaxProcs
    TRUNCATED_FILE = "truncated_file"  # the compressed stream ends mid-way; reading stops


class ParseIssue(BaseModel):
    """One skipped line: where, why, and which field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    line_number: int = Field(ge=1, description="1-based, counting header lines")
    reason: SkipReason
    message: str
    field: str | None = None


class ParseReport(BaseModel):
    """What the reader did with a trace: lines read, jobs kept, lines skipped and why.

    ``by_reason`` counts every skipped line; ``issues`` keeps the first ``max_issues``
    of them with their line numbers, so a badly broken file cannot exhaust memory.
    """

    model_config = ConfigDict(extra="forbid")

    source: str = ""
    lines: int = 0
    header_lines: int = 0
    blank_lines: int = 0
    jobs: int = 0
    skipped: int = 0
    by_reason: dict[SkipReason, int] = Field(default_factory=dict)
    issues: list[ParseIssue] = Field(default_factory=list)
    max_issues: int = Field(default=1000, ge=0)

    def add(self, issue: ParseIssue) -> None:
        self.skipped += 1
        self.by_reason[issue.reason] = self.by_reason.get(issue.reason, 0) + 1
        if len(self.issues) < self.max_issues:
            self.issues.append(issue)


_KEY_VALUE = re.compile(r"^;\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s*(.*?)\s*$")
_LEADING_INT = re.compile(r"^[-+]?\d+")
_NAMED_ID = re.compile(r"^(-?\d+)\s+(.*?)\s*$")


class SWFHeader(BaseModel):
    """The ``;`` lines of a trace, the well-known keys typed, every line kept for round trips.

    ``lines`` holds the comment lines exactly as read (in file order, wherever they
    appeared); the writer writes them back verbatim. ``fields`` holds every ``Key: value``
    (the first value of a repeated key; ``Queue`` and ``Partition`` go to their maps).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str | None = None
    computer: str | None = None
    installation: str | None = None
    max_jobs: int | None = None
    max_records: int | None = None
    preemption: str | None = None
    unix_start_time_s: int | None = None
    time_zone_s: int | None = Field(default=None, description="Offset added to UTC for local")
    time_zone_string: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    max_nodes: int | None = None
    max_procs: int | None = None
    max_runtime_s: int | None = None
    max_memory_kb: int | None = None
    allow_overuse: bool | None = None
    max_queues: int | None = None
    max_partitions: int | None = None
    queues: dict[int, str] = Field(default_factory=dict)
    partitions: dict[int, str] = Field(default_factory=dict)
    fields: dict[str, str] = Field(default_factory=dict)
    lines: list[str] = Field(default_factory=list)

    @property
    def system_name(self) -> str | None:
        return self.computer or self.installation

    def render(self) -> list[str]:
        """Comment lines to write: the original ones, else ones built from the fields."""
        if self.lines:
            return list(self.lines)
        out = [f"; {key}: {value}" for key, value in self.fields.items()]
        known = {
            "Version": self.version,
            "Computer": self.computer,
            "Installation": self.installation,
            "MaxJobs": self.max_jobs,
            "MaxRecords": self.max_records,
            "Preemption": self.preemption,
            "UnixStartTime": self.unix_start_time_s,
            "TimeZone": self.time_zone_s,
            "TimeZoneString": self.time_zone_string,
            "StartTime": self.start_time,
            "EndTime": self.end_time,
            "MaxNodes": self.max_nodes,
            "MaxProcs": self.max_procs,
            "MaxRuntime": self.max_runtime_s,
            "MaxMemory": self.max_memory_kb,
            "AllowOveruse": None if self.allow_overuse is None else str(self.allow_overuse),
            "MaxQueues": self.max_queues,
            "MaxPartitions": self.max_partitions,
        }
        out += [
            f"; {key}: {value}"
            for key, value in known.items()
            if value is not None and key not in self.fields
        ]
        out += [f"; Queue: {number} {name}" for number, name in self.queues.items()]
        out += [f"; Partition: {number} {name}" for number, name in self.partitions.items()]
        return out


_INT_KEYS = {
    "MaxJobs": "max_jobs",
    "MaxRecords": "max_records",
    "UnixStartTime": "unix_start_time_s",
    "TimeZone": "time_zone_s",
    "MaxNodes": "max_nodes",
    "MaxProcs": "max_procs",
    "MaxRuntime": "max_runtime_s",
    "MaxMemory": "max_memory_kb",
    "MaxQueues": "max_queues",
    "MaxPartitions": "max_partitions",
}
_TEXT_KEYS = {
    "Version": "version",
    "Computer": "computer",
    "Installation": "installation",
    "Preemption": "preemption",
    "TimeZoneString": "time_zone_string",
    "StartTime": "start_time",
    "EndTime": "end_time",
}


def parse_header(lines: Iterable[str]) -> SWFHeader:
    """An :class:`SWFHeader` from comment lines (with or without their newlines).

    Numbers keep only their leading integer ("338 (batch partition; 512 total)" -> 338);
    a key whose value has no number stays in ``fields`` but not in the typed attribute.
    """
    kept: list[str] = []
    raw: dict[str, str] = {}
    typed: dict[str, object] = {}
    queues: dict[int, str] = {}
    partitions: dict[int, str] = {}
    for line in lines:
        text = line.rstrip("\r\n")
        kept.append(text)
        match = _KEY_VALUE.match(text)
        if match is None:
            continue
        key, value = match.group(1), match.group(2)
        if key in ("Queue", "Partition"):
            named = _NAMED_ID.match(value)
            if named is not None:
                target = queues if key == "Queue" else partitions
                target[int(named.group(1))] = named.group(2)
            continue
        if key in raw:
            continue
        raw[key] = value
        if key in _INT_KEYS:
            number = _LEADING_INT.match(value)
            if number is not None:
                typed[_INT_KEYS[key]] = int(number.group(0))
        elif key in _TEXT_KEYS:
            typed[_TEXT_KEYS[key]] = value
        elif key == "AllowOveruse":
            typed["allow_overuse"] = value.strip().lower() in ("true", "yes", "1")
    return SWFHeader.model_validate(
        {**typed, "queues": queues, "partitions": partitions, "fields": raw, "lines": kept}
    )


def _parse_line(tokens: list[str], header: SWFHeader, line_number: int) -> SWFJob | ParseIssue:
    """One job from its 18 tokens, or the issue that stops it."""
    if len(tokens) != FIELD_COUNT:
        return ParseIssue(
            line_number=line_number,
            reason=SkipReason.WRONG_FIELD_COUNT,
            message=f"expected {FIELD_COUNT} fields, got {len(tokens)}",
        )
    try:
        # The fast path every good line takes; anything odd goes to _diagnose.
        numbers: list[int | float] = [int(t) for t in tokens]
    except ValueError:
        try:
            numbers = [int(t) for t in tokens[:5]]
            numbers.append(float(tokens[5]))
            numbers.extend(int(t) for t in tokens[6:])
        except ValueError:
            numbers = []
    if not numbers or min(numbers) < -1 or numbers[0] == -1 or numbers[1] == -1:
        diagnosed = _diagnose(tokens, line_number)
        if isinstance(diagnosed, ParseIssue):
            return diagnosed
        job = diagnosed
    else:
        job = SWFJob(*(None if v == -1 else v for v in numbers))  # type: ignore[arg-type]
    disagreement = _header_disagreement(job, header)
    if disagreement is not None:
        field, message = disagreement
        return ParseIssue(
            line_number=line_number,
            reason=SkipReason.HEADER_DISAGREES,
            message=message,
            field=field,
        )
    return job


def _diagnose(tokens: list[str], line_number: int) -> SWFJob | ParseIssue:
    """The slow, field-by-field read that names the bad field (or salvages "12.0" ints)."""
    numbers: list[int | float] = []
    for index, (token, spec) in enumerate(zip(tokens, _FIELDS, strict=True)):
        try:
            number: int | float = float(token) if index == 5 else int(token)
        except ValueError:
            try:
                # Integer fields written as "12.0" (some converters do) are still integers.
                as_float = float(token)
            except ValueError:
                as_float = float("nan")
            if index == 5 or not as_float.is_integer():
                kind = "a number" if index == 5 else "an integer"
                return ParseIssue(
                    line_number=line_number,
                    reason=SkipReason.NOT_A_NUMBER,
                    message=f"field {index + 1} ({spec.name}) is not {kind}: {token!r}",
                    field=spec.name,
                )
            number = int(as_float)
        if number < -1 or (index <= 1 and number == -1):
            time_field = spec.name in _TIME_FIELDS
            what = (
                "a job needs an id and a submit time"
                if number == -1
                else ("only -1 (unknown) may be negative")
            )
            return ParseIssue(
                line_number=line_number,
                reason=SkipReason.NEGATIVE_TIME if time_field else SkipReason.NEGATIVE_VALUE,
                message=f"field {index + 1} ({spec.name}) is {token}; {what}",
                field=spec.name,
            )
        numbers.append(number)
    return SWFJob(*(None if v == -1 else v for v in numbers))  # type: ignore[arg-type]


def _header_disagreement(job: SWFJob, header: SWFHeader) -> tuple[str, str] | None:
    if header.max_procs is not None:
        for name in ("allocated_procs", "requested_procs"):
            procs = getattr(job, name)
            if procs is not None and procs > header.max_procs:
                return name, f"{name} {procs} > header MaxProcs {header.max_procs}"
    if header.max_runtime_s is not None and header.allow_overuse is False:
        for name in ("run_s", "requested_time_s"):
            seconds = getattr(job, name)
            if seconds is not None and seconds > header.max_runtime_s:
                return name, f"{name} {seconds} > header MaxRuntime {header.max_runtime_s}"
    if header.max_memory_kb is not None and header.allow_overuse is False:
        for name in ("used_memory_kb_per_proc", "requested_memory_kb_per_proc"):
            kb = getattr(job, name)
            if kb is not None and kb > header.max_memory_kb:
                return name, f"{name} {kb} > header MaxMemory {header.max_memory_kb}"
    return None


def _open_text(path: Path) -> TextIO:
    """The file as text, decompressing when it starts with the gzip magic (any suffix)."""
    source = str(path)
    if not path.exists():
        raise InvalidInputError("trace file not found", source=source, field="path", value=source)
    if not path.is_file():
        raise InvalidInputError("trace path is not a file", source=source, field="path")
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix == ".gz":
        raise InvalidInputError("file ends in .gz but is not gzip", source=source, field="path")
    return path.open("r", encoding="utf-8", errors="replace")


class SWFReader:
    """Streams one SWF trace: the header is parsed on open, jobs come from iteration.

    Use as a context manager (``with SWFReader(path) as reader: for job in reader``).
    ``check_header`` skips jobs the header contradicts (more processors than
    ``MaxProcs``; beyond ``MaxRuntime``/``MaxMemory`` when ``AllowOveruse`` is false);
    turn it off for traces whose header is known to be wrong. ``report`` is complete
    once iteration ends.
    """

    def __init__(self, path: str | Path, *, check_header: bool = True) -> None:
        self.path = Path(path)
        self.check_header = check_header
        self.report = ParseReport(source=str(self.path))
        self._file: TextIO = _open_text(self.path)
        self._line_number = 0
        self._pending: str | None = None
        self._iterated = False
        try:
            self.header = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def _read_line(self) -> str | None:
        try:
            line = self._file.readline()
        except (EOFError, OSError, zlib.error) as error:
            if self._line_number == 0:
                raise InvalidInputError(
                    f"cannot decompress: {error}", source=str(self.path), field="path"
                ) from error
            self.report.add(
                ParseIssue(
                    line_number=self._line_number + 1,
                    reason=SkipReason.TRUNCATED_FILE,
                    message=f"the compressed stream ends early ({error}); reading stopped",
                )
            )
            return None
        if not line:
            return None
        self._line_number += 1
        return line

    def _read_header(self) -> SWFHeader:
        comments: list[str] = []
        while (line := self._read_line()) is not None:
            stripped = line.strip()
            if not stripped:
                self.report.blank_lines += 1
                continue
            if stripped.startswith(";"):
                comments.append(line)
                continue
            self._pending = line
            break
        self.report.header_lines = len(comments)
        return parse_header(comments)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def __iter__(self) -> Iterator[SWFJob]:
        if self._iterated:
            raise RuntimeError("an SWFReader streams its file once; open a new one")
        self._iterated = True
        header = self.header if self.check_header else SWFHeader()
        report = self.report
        leading_bad = 0
        late_comments: list[str] = []
        # The first job line was read while looking for the end of the header.
        line = self._pending
        self._pending = None
        while line is not None:
            line_number = self._line_number
            tokens = line.split()
            if not tokens:
                report.blank_lines += 1
            elif tokens[0].startswith(";"):
                late_comments.append(line)
            else:
                parsed = _parse_line(tokens, header, line_number)
                if isinstance(parsed, SWFJob):
                    report.jobs += 1
                    yield parsed
                else:
                    report.add(parsed)
                    if report.jobs == 0:
                        leading_bad += 1
                        if leading_bad >= _MAX_LEADING_BAD_LINES:
                            raise InvalidInputError(
                                f"not an SWF trace: the first {leading_bad} job lines are all "
                                f"bad (first: line {report.issues[0].line_number}, "
                                f"{report.issues[0].message})",
                                source=str(self.path),
                            )
            line = self._read_line()
        report.lines = self._line_number
        if report.jobs == 0 and report.skipped > 0:
            raise InvalidInputError(
                f"no job line could be read ({report.skipped} bad)", source=str(self.path)
            )
        if late_comments:
            self.header = self.header.model_copy(
                update={
                    "lines": [
                        *self.header.lines,
                        *(c.rstrip("\r\n") for c in late_comments),
                    ]
                }
            )
            report.header_lines += len(late_comments)


def read_swf(
    path: str | Path, *, check_header: bool = True, limit: int | None = None
) -> tuple[SWFHeader, list[SWFJob], ParseReport]:
    """The trace in memory: header, jobs in file order (the first ``limit``; None: all),
    and the parse report (of the lines read)."""
    with SWFReader(path, check_header=check_header) as reader:
        jobs = list(itertools.islice(reader, limit))
        return reader.header, jobs, reader.report


def _format_number(value: int | float) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


class SWFWriter:
    """Writes a trace line by line; gzip when the path ends in ``.gz``.

    The header's comment lines go first (verbatim when it kept them), then one job a line.
    """

    def __init__(self, path: str | Path, header: SWFHeader | None = None) -> None:
        self.path = Path(path)
        # The writer owns the file for its lifetime; close() / __exit__ release it.
        raw: IO[bytes] | gzip.GzipFile = (
            gzip.open(self.path, "wb")  # noqa: SIM115
            if self.path.suffix == ".gz"
            else self.path.open("wb")
        )
        self._file = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        self.jobs = 0
        for line in (header or SWFHeader()).render():
            self._file.write(line + "\n")

    def write(self, job: SWFJob) -> None:
        self._file.write(" ".join(_format_number(v) for v in job.to_fields()) + "\n")
        self.jobs += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def write_swf(path: str | Path, header: SWFHeader | None, jobs: Iterable[SWFJob]) -> int:
    """Write ``jobs`` (any iterable, consumed once) under ``header``; returns how many."""
    with SWFWriter(path, header) as writer:
        for job in jobs:
            writer.write(job)
        return writer.jobs
