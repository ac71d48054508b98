"""Job traces as tables for the synthetic-trace generators, and the columns they model.

A trace becomes one row per replayable job (the rows the simulator replays: a run time,
a request and 1..machine processors), in submit order, with the six columns seed 003
models: the gap since the previous submission, processors, requested time, run time,
status and user.

The generators do not model run time itself. They model the share of its request a job
used, ``run_fraction = min(run, request) / request`` (1.0 for a job killed at its limit),
so that "run time <= requested time" holds by construction and the killed jobs stay a
point mass at the limit rather than a smear around it. :data:`MODEL_COLUMNS` is that
space; :func:`model_matrix` and :func:`table_from_model_matrix` go to it and back, and
:data:`TRANSFORMS` are the monotone transforms (log) under which continuous columns are
smoothed or normalized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock
from simulations.workload import machine_size, replayable
from tools.traces.swf import SWFHeader, SWFJob, SWFReader

__all__ = [
    "COLUMNS",
    "COLUMN_KINDS",
    "MODEL_COLUMNS",
    "TRANSFORMS",
    "JobTable",
    "Trace",
    "model_matrix",
    "read_trace",
    "size_edges",
    "table_from_jobs",
    "table_from_model_matrix",
    "transform_forward",
    "transform_inverse",
]

COLUMNS = ("interarrival_s", "procs", "requested_time_s", "run_s", "status", "user")
"""The columns of a trace table, as the fidelity report compares them."""

MODEL_COLUMNS = ("interarrival_s", "procs", "requested_time_s", "run_fraction", "status")
"""The columns the generators model (user comes from the class a row is drawn for)."""

ColumnKind = Literal["continuous", "discrete", "categorical"]
COLUMN_KINDS: dict[str, ColumnKind] = {
    "interarrival_s": "continuous",
    "procs": "discrete",
    "requested_time_s": "continuous",
    "run_fraction": "continuous",
    "status": "categorical",
}

Transform = Literal["log1p", "log", "identity"]
TRANSFORMS: dict[str, Transform] = {
    # Gaps, sizes and requests span five or six orders of magnitude: log is where they
    # look like mixtures of a few bumps rather than one spike and a tail.
    "interarrival_s": "log1p",
    "procs": "log1p",
    "requested_time_s": "log1p",
    # (0, 1] -> (-inf, 0]; the killed jobs sit exactly at 0.
    "run_fraction": "log",
    "status": "identity",
}


def transform_forward(kind: Transform, values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if kind == "log1p":
        out: np.ndarray = np.log1p(np.maximum(x, 0.0))
    elif kind == "log":
        out = np.log(np.clip(x, 1e-12, None))
    else:
        out = x.copy()
    return out


def transform_inverse(kind: Transform, values: np.ndarray) -> np.ndarray:
    y = np.asarray(values, dtype=np.float64)
    if kind == "log1p":
        # Bounded so that a wild sample cannot overflow; constraints clip it later.
        out: np.ndarray = np.expm1(np.clip(y, 0.0, 40.0))
    elif kind == "log":
        out = np.exp(np.clip(y, -40.0, 0.0))
    else:
        out = y.copy()
    return out


@dataclass
class JobTable:
    """One row per job in submit order; ``interarrival_s[0]`` is ignored (first job at 0).

    ``start_s`` is when the first job was submitted, in the source trace's own seconds
    (from its header's ``UnixStartTime``), so that times of day can be recovered.
    """

    interarrival_s: np.ndarray
    procs: np.ndarray
    requested_time_s: np.ndarray
    run_s: np.ndarray
    status: np.ndarray
    user: np.ndarray
    start_s: float = 0.0

    def __len__(self) -> int:
        return int(self.procs.size)

    @property
    def submit_s(self) -> np.ndarray:
        """Submit times from the gaps, the first job at 0."""
        gaps = np.asarray(self.interarrival_s, dtype=np.float64).copy()
        if gaps.size:
            gaps[0] = 0.0
        submit: np.ndarray = np.cumsum(gaps)
        return submit

    def column(self, name: str) -> np.ndarray:
        if name not in COLUMNS:
            raise InvalidInputError(f"unknown column; use one of {COLUMNS}", field="column")
        values: np.ndarray = getattr(self, name)
        return values

    def take(self, rows: np.ndarray | slice) -> JobTable:
        """The given rows; the first one taken becomes t=0 (``start_s`` moves with it)."""
        first = np.arange(len(self))[rows]
        start = self.start_s + (float(self.submit_s[first[0]]) if first.size else 0.0)
        taken = {name: np.asarray(getattr(self, name))[rows] for name in COLUMNS}
        return JobTable(**taken, start_s=start)


@dataclass
class Trace:
    """A trace read for fitting or evaluation: its table, machine, header and drops."""

    name: str
    table: JobTable
    machine_procs: int
    header: SWFHeader
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def clock(self) -> TraceClock:
        """Where the first job sits in real time, and the site's zone."""
        return TraceClock(
            epoch_s=int(self.header.unix_start_time_s or 0) + int(self.table.start_s),
            zone_name=self.header.time_zone_string,
        )


def table_from_jobs(jobs: Iterable[SWFJob], *, machine_procs: int) -> tuple[JobTable, Counter[str]]:
    """The replayable jobs as a table (the simulator's rules), the rest counted by reason."""
    rows: list[tuple[int, int, int, int, int, int, int]] = []
    dropped: Counter[str] = Counter()
    for job in jobs:
        checked = replayable(job, machine_procs)
        if isinstance(checked, str):
            dropped[checked] += 1
            continue
        run_s, req_s, size = checked
        status = -1 if job.status is None else job.status
        user = -1 if job.user_id is None else job.user_id
        rows.append((job.submit_time_s, job.job_id, size, req_s, run_s, status, user))
    rows.sort(key=lambda r: (r[0], r[1]))
    data = np.array(rows, dtype=np.int64).reshape(-1, 7)
    submit = data[:, 0]
    gaps = np.diff(submit, prepend=submit[:1]).astype(np.float64)
    table = JobTable(
        interarrival_s=gaps,
        procs=data[:, 2].copy(),
        requested_time_s=data[:, 3].copy(),
        run_s=data[:, 4].copy(),
        status=data[:, 5].copy(),
        user=data[:, 6].copy(),
        start_s=float(submit[0]) if submit.size else 0.0,
    )
    return table, dropped


def read_trace(path: str | Path, *, procs: int | None = None) -> Trace:
    """A whole SWF trace as a :class:`Trace`; the machine from the header unless given."""
    with SWFReader(path) as reader:
        header = reader.header
        machine = machine_size(reader, procs)
        table, dropped = table_from_jobs(reader, machine_procs=machine)
    if len(table) == 0:
        raise InvalidInputError(
            f"no replayable job (dropped: {dict(dropped)})", source=str(path), field="jobs"
        )
    return Trace(
        name=Path(path).name, table=table, machine_procs=machine, header=header, dropped=dropped
    )


def model_matrix(table: JobTable) -> np.ndarray:
    """Rows in :data:`MODEL_COLUMNS` order, as float64."""
    request = np.maximum(table.requested_time_s.astype(np.float64), 1.0)
    fraction = np.minimum(table.run_s.astype(np.float64), request) / request
    return np.column_stack(
        [
            table.interarrival_s.astype(np.float64),
            table.procs.astype(np.float64),
            request,
            fraction,
            table.status.astype(np.float64),
        ]
    )


def table_from_model_matrix(matrix: np.ndarray, users: np.ndarray) -> JobTable:
    """A (not yet constrained) table from model rows: run time = fraction x request."""
    if matrix.ndim != 2 or matrix.shape[1] != len(MODEL_COLUMNS):
        raise InvalidInputError(
            f"model rows need {len(MODEL_COLUMNS)} columns {MODEL_COLUMNS}",
            field="matrix",
            value=matrix.shape,
        )
    request = matrix[:, 2]
    return JobTable(
        interarrival_s=matrix[:, 0].copy(),
        procs=matrix[:, 1].copy(),
        requested_time_s=request.copy(),
        run_s=matrix[:, 3] * request,
        status=matrix[:, 4].copy(),
        user=np.asarray(users).copy(),
    )


def size_edges(machine_procs: int) -> list[int]:
    """Job-size class boundaries: 1, 2-4, 5-16, 17-64, ... (factors of 4) up to the machine.

    Size classes split each user's jobs so that the copula's joint of size and run time
    holds per class: big-and-long jobs carry a machine's load, and one Gaussian copula
    per user alone under-represents them (offered load 10-15% low on SDSC-SP2).
    """
    edges = []
    power = 1
    while power + 1 <= machine_procs:
        edges.append(power + 1)
        power *= 4
    return edges
