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
    "swf_jobs",
    "thin_to_load",
    "training_data",
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
        self, n_jobs: int, rng: np.random.Generator
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


_SEQUENCE_MARGIN = 1.25  # extra jobs a sequence model draws so that thinning leaves enough
_CAP = 1.1  # no trailing week offers more than this times the training trace's load
_CAP_WINDOW_S = 7 * 86_400


def _admit_under_cap(table: JobTable, cap_load: float, machine_procs: int) -> np.ndarray:
    """Which jobs to keep so that no trailing ``_CAP_WINDOW_S`` offers over ``cap_load``."""
    submit = table.submit_s
    work = np.minimum(table.run_s, table.requested_time_s).astype(np.float64) * table.procs
    cap = cap_load * machine_procs * _CAP_WINDOW_S
    keep = np.zeros(len(table), dtype=bool)
    window, oldest = 0.0, 0
    kept: list[int] = []
    for i in range(len(table)):
        while oldest < len(kept) and submit[kept[oldest]] <= submit[i] - _CAP_WINDOW_S:
            window -= work[kept[oldest]]
            oldest += 1
        if i == 0 or window + work[i] <= cap:
            keep[i] = True
            kept.append(i)
            window += work[i]
    return keep


def _keep_rows(table: JobTable, keep: np.ndarray) -> JobTable:
    submit = table.submit_s[keep]
    kept = table.take(np.flatnonzero(keep))
    kept.interarrival_s = np.diff(submit, prepend=submit[:1]).astype(np.float64)
    return kept


def thin_to_load(
    table: JobTable,
    *,
    target_load: float,
    machine_procs: int,
    n_jobs: int,
    rng: np.random.Generator,
) -> tuple[JobTable, float]:
    """The first ``n_jobs`` of ``table`` after dropping jobs so that they offer
    ``target_load``; returns them and the share of jobs kept.

    For a sequence model, whose gaps carry the time of day: dropping jobs keeps every
    survivor's submit time, where rescaling gaps would slide the daily cycle. Two steps:
    a job that would push the load of the trailing week over ``_CAP`` times the target
    is dropped (the model, not knowing the queue, drifts into overloaded weeks that real
    users, who see the queue, do not make), then jobs are dropped at random down to the
    target.
    """
    keep = _admit_under_cap(table, _CAP * target_load, machine_procs)
    capped = _keep_rows(table, keep)
    head = capped.take(slice(0, n_jobs))
    load = offered_load(head, machine_procs)
    if load <= target_load or load <= 0:
        used = np.flatnonzero(keep)[:n_jobs]
        return head, float(used.size / (used[-1] + 1))
    keep_share = target_load / load
    random_keep = rng.random(len(capped)) < keep_share
    random_keep[0] = True
    thinned = _keep_rows(capped, random_keep).take(slice(0, n_jobs))
    return thinned, float(np.mean(keep) * keep_share)


def generate(model: TraceModel, n_jobs: int, *, seed: int = 0, match_load: bool = True) -> Sample:
    """``n_jobs`` synthetic jobs from ``model``, constrained, in submit order.

    ``match_load`` makes the jobs offer the machine what the training trace did: rows drawn
    independently get their gaps rescaled by one factor; a sequence model
    (:class:`SequenceTraceModel`), whose gaps carry the time of day, draws
    ``_SEQUENCE_MARGIN`` times the jobs and drops some at random instead
    (:func:`thin_to_load`); its gaps are never rescaled (a sequence that offers too
    little load is left so, and ``load_factor`` stays 1).
    """
    if n_jobs < 1:
        raise InvalidInputError("ask for at least one job", field="jobs", value=n_jobs)
    meta = model.metadata
    rng = np.random.default_rng(seed)
    sequence = isinstance(model, SequenceTraceModel)
    if isinstance(model, SequenceTraceModel):
        drawn = int(np.ceil(n_jobs * _SEQUENCE_MARGIN)) if match_load else n_jobs
        rows, users = model.sample_sequence(drawn, rng)
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
        table, kept = thin_to_load(
            table,
            target_load=meta.offered_load,
            machine_procs=meta.machine_procs,
            n_jobs=n_jobs,
            rng=rng,
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
