"""What every trace generator shares: its metadata, sampling a trace, writing it as SWF.

A generator (the Gaussian copula in :mod:`simulations.synth.copula`, the TVAE in
:mod:`simulations.synth.tvae`) only turns class labels into rows of
:data:`~simulations.synth.columns.MODEL_COLUMNS`. :func:`generate` does the rest the same
way for both: draw each row's class and user, ask the model for the rows, enforce the
constraints, and (by default) match the training trace's offered load.

Offered load is processor-seconds submitted per second of the trace, over the machine.
Rows drawn independently keep each column's distribution but not exactly the mean of
processors x run time, whose heavy tail depends on how big-and-long jobs co-occur; the
Gaussian copula under-represents them by a few percent even per class, and queueing
amplifies a few percent of load into tens of percent of slowdown. Matching load rescales
the gaps by one factor (reported as ``load_factor``) so the synthetic trace asks the
machine for what the real one did; ``match_load=False`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from simulations.synth.classes import ClassScheme, fit_classes
from simulations.synth.columns import (
    MODEL_COLUMNS,
    JobTable,
    Trace,
    model_matrix,
    table_from_model_matrix,
)
from simulations.synth.constraints import enforce
from simulations.synth.temporal import sessions
from tools.traces.swf import SWFHeader, SWFJob, write_swf

__all__ = [
    "ModelKind",
    "Sample",
    "SequenceTraceModel",
    "SynthMetadata",
    "TraceModel",
    "TrainingData",
    "generate",
    "match_offered_load",
    "offered_load",
    "peak_week_load",
    "swf_jobs",
    "thin_to_load",
    "training_data",
    "weekly_load_cv",
    "weekly_loads",
    "write_trace",
]

ModelKind = Literal["copula", "tvae", "sequence"]


class SynthMetadata(BaseModel):
    """What a fitted model remembers about its training trace, stored in the model file."""

    model_config = ConfigDict(extra="forbid")

    kind: ModelKind
    trace: str = Field(description="Name of the training trace")
    machine_procs: int = Field(ge=1)
    max_nodes: int | None = None
    computer: str | None = None
    unix_start_time_s: int | None = None
    time_zone_string: str | None = None
    first_submit_s: float = Field(
        default=0.0,
        ge=0,
        description="The training trace's first submission after UnixStartTime; sampled "
        "traces start there, so times of day line up",
    )
    training_jobs: int = Field(ge=1)
    offered_load: float = Field(gt=0, description="Processor-seconds asked per second / procs")
    statuses: list[int] = Field(min_length=1)
    columns: list[str] = Field(default_factory=lambda: list(MODEL_COLUMNS))
    classes: ClassScheme
    seed: int
    fit_seconds: float = Field(ge=0)
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)

    @classmethod
    def of_training(
        cls,
        trace: Trace,
        data: TrainingData,
        *,
        kind: ModelKind,
        seed: int,
        options: dict[str, float | int | str | bool],
        fit_seconds: float = 0.0,
    ) -> SynthMetadata:
        """What every generator records of the trace it was fitted on."""
        return cls(
            kind=kind,
            trace=trace.name,
            machine_procs=trace.machine_procs,
            max_nodes=trace.header.max_nodes,
            computer=trace.header.system_name,
            unix_start_time_s=trace.header.unix_start_time_s,
            time_zone_string=trace.header.time_zone_string,
            first_submit_s=trace.table.start_s,
            training_jobs=len(trace.table),
            offered_load=data.offered_load,
            statuses=data.statuses,
            classes=data.scheme,
            seed=seed,
            fit_seconds=fit_seconds,
            options=options,
        )


class TraceModel(Protocol):
    """A fitted generator: rows of MODEL_COLUMNS for given class labels."""

    metadata: SynthMetadata

    def sample_rows(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...

    def state(self) -> dict[str, Any]: ...


@runtime_checkable
class SequenceTraceModel(Protocol):
    """A generator that draws jobs in time order, classes included (no load matching)."""

    metadata: SynthMetadata

    def sample_sequence(
        self, n_jobs: int, rng: np.random.Generator, *, load: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class TrainingData:
    """A training trace reduced to what the generators fit on (rows, class labels)."""

    matrix: np.ndarray
    labels: np.ndarray
    scheme: ClassScheme
    statuses: list[int]
    offered_load: float


def offered_load(table: JobTable, machine_procs: int) -> float:
    """Processor-seconds asked for per second of the trace, as a share of the machine."""
    if len(table) < 2:
        return 0.0
    ran = np.minimum(table.run_s, table.requested_time_s).astype(np.float64)
    span = float(np.asarray(table.interarrival_s, dtype=np.float64)[1:].sum())
    return float((ran * table.procs).sum() / max(span, 1.0) / machine_procs)


_WEEK_S = 7 * 86_400


def weekly_loads(table: JobTable, machine_procs: int) -> np.ndarray:
    """Each calendar week's offered load (weeks from t=0), the last (partial) week included."""
    if len(table) == 0:
        return np.zeros(0)
    week = (table.submit_s // _WEEK_S).astype(np.int64)
    work = np.minimum(table.run_s, table.requested_time_s).astype(np.float64) * table.procs
    out: np.ndarray = np.bincount(week, weights=work) / (_WEEK_S * machine_procs)
    return out


def peak_week_load(table: JobTable, machine_procs: int) -> float:
    """The busiest calendar week's offered load (weeks from t=0; a trace shorter than a
    week counts as one)."""
    loads = weekly_loads(table, machine_procs)
    return float(loads.max()) if loads.size else 0.0


def weekly_load_cv(table: JobTable, machine_procs: int) -> float:
    """How much the offered load varies from week to week: the coefficient of variation
    over the trace's whole weeks (its last, partial week left out); 0 with fewer than two.
    Real users, who see the queue, keep it low (SDSC-SP2's first 20,000 jobs: 0.13)."""
    loads = weekly_loads(table, machine_procs)[:-1]
    if loads.size < 2 or loads.mean() <= 0:
        return 0.0
    return float(loads.std() / loads.mean())


def training_data(trace: Trace, *, min_class_jobs: int) -> TrainingData:
    scheme, labels = fit_classes(
        trace.table, machine_procs=trace.machine_procs, min_class_jobs=min_class_jobs
    )
    load = offered_load(trace.table, trace.machine_procs)
    if load <= 0:
        raise InvalidInputError(
            "the trace asks for no processor time over its span; a generator needs at "
            "least two jobs submitted at different times",
            source=trace.name,
            field="jobs",
            value=len(trace.table),
        )
    return TrainingData(
        matrix=model_matrix(trace.table),
        labels=labels,
        scheme=scheme,
        statuses=sorted({int(s) for s in trace.table.status}),
        offered_load=load,
    )


def match_offered_load(table: JobTable, *, target_load: float, machine_procs: int) -> float:
    """Rescale ``table``'s gaps in place to ``target_load``; returns the factor applied."""
    load = offered_load(table, machine_procs)
    if load <= 0 or target_load <= 0:
        return 1.0
    factor = load / target_load
    table.interarrival_s = np.asarray(table.interarrival_s, dtype=np.float64) * factor
    return factor


@dataclass
class Sample:
    """A generated trace: the constrained table, its seed and the load factor applied."""

    table: JobTable
    seed: int
    load_factor: float  # gap scale applied to match the training load; 1.0 = none
    kept_share: float = 1.0  # share of a sequence model's jobs kept by thinning to the load


_SEQUENCE_DENSITY = 1.25  # a sequence model draws this much more load, for thinning to take
_SEQUENCE_MARGIN = 1.3  # and this many more jobs, so that thinning leaves enough
_CAP = 1.1  # no trailing week offers more than this times the training trace's load
_CAP_WINDOW_S = _WEEK_S


def _thin_weeks_under_cap(
    table: JobTable, cap_load: float, machine_procs: int, rng: np.random.Generator
) -> np.ndarray:
    """Which jobs to keep so that no calendar week (from t=0) offers more than
    ``cap_load``: in a week over it, sessions are dropped at random, whatever their size,
    down to the cap on average. (Admitting jobs one by one while a trailing week has room
    kept small jobs and dropped big ones wherever a trace ran at the cap.)"""
    week = (table.submit_s // _CAP_WINDOW_S).astype(np.int64)
    work = np.minimum(table.run_s, table.requested_time_s).astype(np.float64) * table.procs
    load = np.bincount(week, weights=work) / (_CAP_WINDOW_S * machine_procs)
    share = np.minimum(1.0, cap_load / np.maximum(load, 1e-12))
    unit = _thinning_units(table)
    keep: np.ndarray = rng.random(int(unit.max()) + 1)[unit] < share[week]
    keep[0] = True
    return keep


def _keep_rows(table: JobTable, keep: np.ndarray) -> JobTable:
    submit = table.submit_s[keep]
    kept = table.take(np.flatnonzero(keep))
    kept.interarrival_s = np.diff(submit, prepend=submit[:1]).astype(np.float64)
    return kept


_UNIT_JOBS = 16  # a session longer than this is thinned in runs of this many jobs


def _thinning_units(table: JobTable) -> np.ndarray:
    """A unit number per job: its user's session, cut in runs of ``_UNIT_JOBS`` jobs (a
    trace without user ids is one user, and its bursts may be long)."""
    session = sessions(table)
    order = np.argsort(session, kind="stable")
    sorted_sessions = session[order]
    first = np.searchsorted(sorted_sessions, sorted_sessions, side="left")
    rank = np.empty(session.size, dtype=np.int64)
    rank[order] = np.arange(session.size) - first
    units = np.stack([session, rank // _UNIT_JOBS], axis=1)
    out: np.ndarray = np.unique(units, axis=0, return_inverse=True)[1].reshape(-1)
    return out


def thin_to_load(
    table: JobTable,
    *,
    target_load: float,
    machine_procs: int,
    n_jobs: int,
    rng: np.random.Generator,
    cap_load: float | None = None,
) -> tuple[JobTable, float]:
    """The first ``n_jobs`` of ``table`` after dropping jobs so that they offer
    ``target_load``; returns them and the share of jobs kept.

    For a sequence model, whose gaps carry the time of day: dropping jobs keeps every
    survivor's submit time, where rescaling gaps would slide the daily cycle. Two steps:
    users' sessions (:func:`~simulations.synth.temporal.sessions`, in runs of at most
    ``_UNIT_JOBS``) are dropped whole, at random, down to the target (dropping single
    jobs would cut every session short); then, in any calendar week still offering
    more than ``cap_load`` (default ``_CAP`` times the target), more sessions are
    dropped at random down to it (the model, not knowing the queue, can drift into
    overloaded weeks that real users, who see the queue, do not make). Both steps drop
    jobs whatever their size: the cap used to admit jobs one by one while the trailing
    week had room, which dropped big jobs rather than small ones wherever a trace ran at
    the cap.
    """
    cap = _CAP * target_load if cap_load is None else cap_load
    head = table.take(slice(0, int(np.ceil(n_jobs * _SEQUENCE_MARGIN))))
    load = offered_load(head, machine_procs)
    keep = np.ones(len(table), dtype=bool)
    if load > target_load > 0:
        unit = _thinning_units(table)
        keep = (rng.random(int(unit.max()) + 1) < target_load / load)[unit]
        keep[0] = True
    thinned = _keep_rows(table, keep)
    admitted = _thin_weeks_under_cap(thinned, cap, machine_procs, rng)
    capped = _keep_rows(thinned, admitted).take(slice(0, n_jobs))
    used = np.flatnonzero(keep)[np.flatnonzero(admitted)[: len(capped)]]
    return capped, float(used.size / (used[-1] + 1)) if used.size else 0.0


def generate(model: TraceModel, n_jobs: int, *, seed: int = 0, match_load: bool = True) -> Sample:
    """``n_jobs`` synthetic jobs from ``model``, constrained, in submit order.

    ``match_load`` makes the jobs offer the machine what the training trace did: rows drawn
    independently get their gaps rescaled by one factor; a sequence model
    (:class:`SequenceTraceModel`), whose gaps carry the time of day, draws
    ``_SEQUENCE_MARGIN`` times the jobs at ``_SEQUENCE_DENSITY`` times the training load
    (its operational clock sped up or slowed down, the daily cycle kept), then drops whole
    sessions at random down to the load instead (:func:`thin_to_load`); its real-time
    gaps are never rescaled, and ``load_factor`` stays 1.
    """
    if n_jobs < 1:
        raise InvalidInputError("ask for at least one job", field="jobs", value=n_jobs)
    meta = model.metadata
    rng = np.random.default_rng(seed)
    sequence = isinstance(model, SequenceTraceModel)
    if isinstance(model, SequenceTraceModel):
        drawn = int(np.ceil(n_jobs * _SEQUENCE_MARGIN)) if match_load else n_jobs
        load = meta.offered_load * _SEQUENCE_DENSITY if match_load else None
        rows, users = model.sample_sequence(drawn, rng, load=load)
    else:
        labels, users = meta.classes.sample(n_jobs, rng)
        rows = model.sample_rows(labels, rng)
    table = enforce(
        table_from_model_matrix(rows, users),
        machine_procs=meta.machine_procs,
        statuses=meta.statuses,
    )
    factor, kept = 1.0, 1.0
    if match_load and sequence:
        peak = float(meta.options.get("peak_week_load", 0.0))
        table, kept = thin_to_load(
            table,
            target_load=meta.offered_load,
            machine_procs=meta.machine_procs,
            n_jobs=n_jobs,
            rng=rng,
            cap_load=max(_CAP * meta.offered_load, peak),
        )
    if match_load and not sequence:
        factor = match_offered_load(
            table, target_load=meta.offered_load, machine_procs=meta.machine_procs
        )
        table = enforce(table, machine_procs=meta.machine_procs, statuses=meta.statuses)
    return Sample(table=table, seed=seed, load_factor=factor, kept_share=kept)


def swf_jobs(table: JobTable, *, start_s: float = 0.0) -> list[SWFJob]:
    """The (already constrained) table as SWF records, the first submitted at ``start_s``;
    what a generator does not model (wait, CPU time, memory, group, queue...) is unknown,
    -1, and allocated processors equal requested ones, as for a rigid job."""
    submit = np.rint(start_s + table.submit_s).astype(np.int64)
    return [
        SWFJob(
            job_id=index + 1,
            submit_time_s=int(submit[index]),
            wait_s=None,
            run_s=int(table.run_s[index]),
            allocated_procs=int(table.procs[index]),
            avg_cpu_time_s=None,
            used_memory_kb_per_proc=None,
            requested_procs=int(table.procs[index]),
            requested_time_s=int(table.requested_time_s[index]),
            requested_memory_kb_per_proc=None,
            status=int(table.status[index]),
            user_id=None if table.user[index] < 0 else int(table.user[index]),
            group_id=None,
            executable_id=None,
            queue_id=None,
            partition_id=None,
            preceding_job_id=None,
            think_time_s=None,
        )
        for index in range(len(table))
    ]


def write_trace(
    path: str | Path, sample: Sample, metadata: SynthMetadata, *, model_name: str = ""
) -> int:
    """Write ``sample`` as an SWF trace with a header; constraints enforced once more."""
    table = enforce(sample.table, machine_procs=metadata.machine_procs, statuses=metadata.statuses)
    jobs = swf_jobs(table, start_s=metadata.first_submit_s)
    note = (
        f"synthetic trace, not a real log: rightsize synth {metadata.kind} model "
        f"{model_name or ''} fitted on {metadata.trace}, seed {sample.seed}, "
        f"load factor {sample.load_factor:.4f}, kept share {sample.kept_share:.4f}"
    ).replace("  ", " ")
    header = SWFHeader(
        version="2.2",
        computer=f"synthetic ({metadata.computer or metadata.trace})",
        max_jobs=len(jobs),
        max_records=len(jobs),
        preemption="No",
        unix_start_time_s=metadata.unix_start_time_s,
        time_zone_string=metadata.time_zone_string,
        max_nodes=metadata.max_nodes,
        max_procs=metadata.machine_procs,
        fields={"Note": note},
    )
    return write_swf(path, header, jobs)
