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

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowledge_base.errors import InvalidInputError
from simulations.engine import EASY, simulate_arrays
from simulations.synth.classes import ClassScheme, fit_classes
from simulations.synth.clock import TraceClock
from simulations.synth.columns import (
    MODEL_COLUMNS,
    JobTable,
    Trace,
    model_matrix,
    table_from_model_matrix,
)
from simulations.synth.constraints import enforce
from simulations.synth.queue_state import found_backlog_s, machine_work_s
from simulations.synth.temporal import sessions
from tools.traces.swf import SWFHeader, SWFJob, write_swf

log = logging.getLogger(__name__)

__all__ = [
    "ModelKind",
    "Sample",
    "SequenceTraceModel",
    "SynthMetadata",
    "ThinningReport",
    "TraceModel",
    "TrainingData",
    "easy_queue_s",
    "easy_wait_s",
    "generate",
    "hour_of_day_shares",
    "match_offered_load",
    "mean_backlog_s",
    "offered_load",
    "peak_week_load",
    "short_backlog_ratio",
    "short_run",
    "short_wait_ratio",
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
    hour_of_day_shares: list[float] | None = Field(
        default=None,
        min_length=24,
        max_length=24,
        description="The training trace's share of submissions per local hour 0-23 (a "
        "sequence model's thinning keeps this profile); None in a file written before it "
        "was recorded (format 2), whose thinning keeps the drawn profile instead",
    )

    @field_validator("hour_of_day_shares")
    @classmethod
    def _shares(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (
            min(value) < 0 or not np.isfinite(value).all() or abs(sum(value) - 1.0) > 1e-3
        ):
            raise ValueError("24 non-negative shares summing to 1")
        return value

    @property
    def clock(self) -> TraceClock:
        """The training trace's clock: a sampled trace's t=0 is its first submission."""
        return TraceClock(
            epoch_s=int(self.unix_start_time_s or 0) + int(self.first_submit_s),
            zone_name=self.time_zone_string,
        )

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
            hour_of_day_shares=hour_of_day_shares(trace.table, trace.clock).tolist(),
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


def hour_of_day_shares(table: JobTable, clock: TraceClock) -> np.ndarray:
    """The share of ``table``'s submissions in each local hour of the day (24 numbers,
    what the fidelity check's hour-of-day profile counts); zeros for an empty table."""
    hour = clock.hour_and_weekday(table.submit_s)[0]
    counts = np.bincount(hour, minlength=24).astype(np.float64)
    out: np.ndarray = counts / max(counts.sum(), 1.0)
    return out


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


_SEQUENCE_DENSITY = 1.5  # a sequence model draws this much more load, for thinning to take
_SEQUENCE_MARGIN = 1.7  # and this many more jobs, so that thinning leaves enough
# Drawn again this much denser when the first draw's thinning was held back by the load
# (ThinningReport): LANL-CM5 seeds 1-2 then meet their load and queue (-3%, -19% EASY
# bsld instead of +30%, +67%). Not for every draw: a sped-up clock puts more gaps under
# the session gap, and sessions lengthen (Theta 7.4-8.0 jobs against 4.4 real).
_DENSE_DENSITY = 2.5
_DENSE_MARGIN = 2.8
_SHORT_DRAWS = 3  # draws again, each larger, while thinning leaves fewer jobs than asked


@dataclass
class ThinningReport:
    """What :func:`thin_to_load` found, for a caller that may draw again.

    ``held_back_by_load``: the survivors' queue is longer than asked, and a stronger
    admission came closer to it but left too little load (the draw has too few jobs
    arriving into an empty queue; a denser draw has more), or no admission tried left
    the load."""

    strength: float | None = None
    held_back_by_load: bool = False


_CAP = 1.1  # no trailing week offers more than this times the training trace's load
# A session is admitted less often while the fluid backlog of those admitted is long:
# share / (1 + backlog / this), in machine-seconds (see _admit_by_backlog). Chosen on
# SDSC-SP2 and HPC2N (first 20,000 jobs, seeds 0-2): 3 h gave HPC2N -37% to -10% EASY
# bsld, 8 h -10% to +17%; SDSC-SP2 moved little between them.
_BACKLOG_SCALE_S = 8 * 3600.0
_CAP_WINDOW_S = _WEEK_S


def _cap_weeks(
    table: JobTable,
    keep: np.ndarray,
    unit: np.ndarray,
    v: np.ndarray,
    cap_load: float,
    machine_procs: int,
) -> np.ndarray:
    """``keep`` less what makes a calendar week (from t=0) offer more than ``cap_load``:
    in a week over it, the kept units are dropped at random (``v``: one uniform per unit),
    whatever their size, down to the cap on average. (Admitting jobs one by one while a
    trailing week had room kept small jobs and dropped big ones wherever a trace ran at
    the cap.) The first job's unit stays: t=0 is the real one."""
    week = (table.submit_s // _CAP_WINDOW_S).astype(np.int64)
    work = np.minimum(table.run_s, table.requested_time_s).astype(np.float64) * table.procs
    load = np.bincount(week[keep], weights=work[keep], minlength=int(week.max()) + 1) / (
        _CAP_WINDOW_S * machine_procs
    )
    share = np.minimum(1.0, cap_load / np.maximum(load, 1e-12))
    capped: np.ndarray = keep & (v[unit] < share[week])
    capped[unit == unit[0]] = keep[0]
    return capped


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


def _admit_by_backlog(
    table: JobTable,
    unit: np.ndarray,
    u: np.ndarray,
    share: np.ndarray,
    backlog_scale_s: float,
    machine_procs: int,
    strength: float = 1.0,
    short_tilt: tuple[np.ndarray, float, float] | None = None,
) -> np.ndarray:
    """Sessions admitted in submit order, each at its first job with probability
    ``min(1, share[unit] * (1 + backlog / backlog_scale_s) ** -strength)`` (``strength``
    0: at random; above 0 fewer while the queue is long; below 0 more), the backlog
    being the fluid queue of the jobs admitted so far (machine-seconds, drained at the
    machine's rate); ``u``: one uniform per unit. Whether a session is admitted does not
    depend on its own jobs, so the survivors keep the mix of big and small jobs.

    ``short_tilt`` (which units are short-run, a tilt, its normalizer): those units'
    probability is further times ``(1 + backlog / backlog_scale_s) ** -tilt / normalizer``,
    as real users submit short jobs more when the machine is not backed up."""
    submit = table.submit_s.astype(np.float64)
    work = machine_work_s(table.run_s, table.requested_time_s, table.procs, machine_procs).tolist()
    short_unit, tilt, normalizer = (
        (short_tilt[0].tolist(), short_tilt[1], short_tilt[2])
        if short_tilt is not None
        else ([], 0.0, 1.0)
    )
    decided = np.zeros(u.size, dtype=np.int8)  # 0 undecided, 1 admitted, -1 dropped
    keep = np.zeros(submit.size, dtype=bool)
    backlog, now = 0.0, float(submit[0]) if submit.size else 0.0
    for i, (at, job_unit) in enumerate(zip(submit.tolist(), unit.tolist(), strict=True)):
        backlog = max(backlog - (at - now), 0.0)
        now = at
        if decided[job_unit] == 0:
            x = 1.0 + backlog / backlog_scale_s
            p = share[job_unit] * x**-strength
            if short_tilt is not None and short_unit[job_unit]:
                p *= x**-tilt / normalizer
            decided[job_unit] = 1 if u[job_unit] < p else -1
        if decided[job_unit] == 1:
            keep[i] = True
            backlog += work[i]
    return keep


def _admit_to_load(
    table: JobTable,
    *,
    target_load: float,
    machine_procs: int,
    n_jobs: int,
    unit: np.ndarray,
    u: np.ndarray,
    backlog_scale_s: float | None,
    hours: np.ndarray | None,
    strength: float = 1.0,
    hour_shares: np.ndarray | None = None,
    short_tilt: tuple[float, float] | None = None,
    cap: tuple[float, np.ndarray] | None = None,
) -> np.ndarray:
    """Which jobs are kept, whole units at a time, at the admission share (found by
    bisection) that leaves ``target_load`` in the first ``n_jobs`` kept: each unit with
    probability ``share`` (``u`` below it), or, given ``backlog_scale_s``, as
    :func:`_admit_by_backlog` decides; ``cap`` (a weekly load and one uniform per unit):
    then no calendar week over that load (:func:`_cap_weeks`), inside the bisection, so
    that the load found is the one left after the cap.

    ``hours`` (each job's local hour of day): sessions are then admitted as often at
    every hour of the day (per-hour factors from one first pass), or the busy hours, when the
    backlog is longest, would lose more than the night and the daily cycle flatten.
    ``hour_shares`` (24 shares, with ``hours``): the factors instead make the first
    ``n_jobs`` kept submit in those shares per hour (the training trace's profile; the
    drawn one may miss it by TV 0.03-0.07), from ``_HOUR_ROUNDS`` passes, each correcting
    the one before on the same uniforms (:class:`_HourStep`). ``short_tilt`` (tilt,
    normalizer): units whose first job is short-run (:func:`short_run`) are admitted with
    that tilt (:func:`_admit_by_backlog`). ``unit``: each job's unit (:func:`_thinning_units`)."""
    units = int(unit.max()) + 1
    first = np.zeros(units, dtype=np.int64)
    first[unit[::-1]] = np.arange(unit.size)[::-1]  # each unit's first job
    tilted = None if short_tilt is None else (short_run(table)[first], short_tilt[0], short_tilt[1])
    unit_hour = hours[first] if hours is not None else np.zeros(units, dtype=np.int64)
    factor = np.ones(units)
    rounds = 1 if hours is None else 2 if hour_shares is None else _HOUR_ROUNDS
    hour_step = _HourStep(hour_shares) if hour_shares is not None else None

    def admit(share: np.ndarray) -> np.ndarray:
        if backlog_scale_s is None:
            out: np.ndarray = (u < share)[unit]
        else:
            out = _admit_by_backlog(
                table, unit, u, share, backlog_scale_s, machine_procs, strength, tilted
            )
        out[unit == unit[0]] = True  # the first job's unit stays: t=0 is the real one
        return out if cap is None else _cap_weeks(table, out, unit, cap[1], cap[0], machine_procs)

    load = offered_load(table, machine_procs)
    keep = np.ones(len(table), dtype=bool)
    for round_ in range(rounds):
        low, high = 0.0, 4.0 * target_load / max(load, 1e-12) + 1.0
        for _ in range(13):
            share = 0.5 * (low + high)
            kept = _keep_rows(table, admit(share * factor)).take(slice(0, n_jobs))
            if offered_load(kept, machine_procs) > target_load:
                high = share
            else:
                low = share
        keep = admit(low * factor)
        if round_ + 1 < rounds and hours is not None and hour_step is not None:
            # Jobs kept per hour against the shares asked: each hour's units are admitted
            # more (or less) often in the next pass (:class:`_HourStep`).
            first_kept = np.flatnonzero(keep)[:n_jobs]
            kept_share = np.bincount(hours[first_kept], minlength=24) / max(first_kept.size, 1)
            factor *= hour_step.next(kept_share)[unit_hour]
        elif round_ + 1 < rounds:
            admitted = np.zeros(units, dtype=bool)
            admitted[unit[keep]] = True
            rate = np.bincount(unit_hour, weights=admitted, minlength=24) / np.maximum(
                np.bincount(unit_hour, minlength=24), 1
            )
            factor *= np.clip(admitted.mean() / np.maximum(rate, 1e-3), 0.5, 2.0)[unit_hour]
    return keep


def mean_backlog_s(table: JobTable, machine_procs: int) -> float:
    """The fluid backlog each job finds when submitted, on average, in machine-seconds: the
    machine drains ``machine_procs`` processor-seconds a second, each job adds what it runs
    (at most its request) on at most the machine's processors (:func:`_found_backlog_s`)."""
    found = _found_backlog_s(table, machine_procs)
    return float(found.sum()) / max(found.size, 1)


_SHORT_RUN_S = 60.0  # a job running (at most its request) under this is short-run


def short_run(table: JobTable) -> np.ndarray:
    """Which jobs are short-run: under ``_SHORT_RUN_S`` of run (at most the request)."""
    out: np.ndarray = np.minimum(table.run_s, table.requested_time_s) < _SHORT_RUN_S
    return out


def _found_backlog_s(table: JobTable, machine_procs: int) -> np.ndarray:
    """The fluid backlog each job finds when submitted, in machine-seconds, in job order."""
    return found_backlog_s(
        table.submit_s,
        machine_work_s(table.run_s, table.requested_time_s, table.procs, machine_procs),
    )


def short_backlog_ratio(table: JobTable, machine_procs: int) -> float | None:
    """The mean fluid backlog short-run jobs (:func:`short_run`) find when submitted
    over the one every job finds (HPC2N-2002: 0.77, its users submit short jobs when the
    machine is not backed up; the other traces 0.92-1.05), or None without short-run
    jobs or a backlog."""
    found = _found_backlog_s(table, machine_procs)
    short = short_run(table)
    if not short.any() or found.mean() <= 0:
        return None
    return float(found[short].mean() / found.mean())


def _easy_waits_s(table: JobTable, machine_procs: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Each job's wait in EASY backfilling with the requests as estimates (as the
    fidelity check replays a trace), its work in machine-seconds (what it runs, at most
    its request, on its processors over the machine's), and the span from the first
    submission to the last."""
    submit = np.rint(table.submit_s).astype(np.int64)
    request = np.maximum(table.requested_time_s.astype(np.int64), 1)
    run = table.run_s.astype(np.int64)
    procs = np.minimum(table.procs.astype(np.int64), machine_procs)
    start, _end, _killed, _reserved = simulate_arrays(
        submit_s=submit,
        run_s=run,
        req_s=request,
        procs=procs,
        est_s=request,
        user=np.maximum(table.user.astype(np.int64), 0),
        machine_procs=machine_procs,
        policy=EASY,
        last2=False,
    )
    work = np.minimum(run, request).astype(np.float64) * procs / machine_procs
    return (start - submit).astype(np.float64), work, float(submit[-1] - submit[0])


def easy_queue_s(table: JobTable, machine_procs: int) -> float:
    """The work waiting in an EASY queue, on average over the trace's span, in
    machine-seconds (:func:`_easy_waits_s`). The time integral of the waiting work is the
    sum over jobs of work x wait, so this is that sum over the span."""
    if len(table) < 2:
        return 0.0
    wait, work, span = _easy_waits_s(table, machine_procs)
    return float((work * wait).sum() / max(span, 1.0))


def easy_wait_s(table: JobTable, machine_procs: int) -> float:
    """The mean wait of the jobs in EASY (:func:`_easy_waits_s`), each job counting once:
    the queue as the jobs see it, where :func:`easy_queue_s` is the queue as the machine
    sees it (a wide job's wait counts for its width there)."""
    if len(table) < 2:
        return 0.0
    return float(_easy_waits_s(table, machine_procs)[0].mean())


def short_wait_ratio(table: JobTable, machine_procs: int) -> float | None:
    """The mean EASY wait of short-run jobs (:func:`short_run`) over every job's
    (:func:`easy_wait_s`): how much backfilling lets them through (SDSC-SP2 0.43,
    HPC2N-2002 0.47, ALCF-Theta 0.83); None without short-run jobs or a wait."""
    if len(table) < 2:
        return None
    wait = _easy_waits_s(table, machine_procs)[0]
    short = short_run(table)
    if not short.any() or wait.mean() <= 0:
        return None
    return float(wait[short].mean() / wait.mean())


_HOUR_ROUNDS = 3  # admission passes when the hour profile asked for is given
_HOUR_STEP_LIMIT = math.log(4.0)  # one pass moves an hour's admission at most 4x either way
_HOUR_GAIN_FLOOR = 0.2  # a secant step is at most 1 / this times the error


class _HourStep:
    """Per-hour admission factors that bring the survivors' hour-of-day profile to the
    shares asked, a pass at a time.

    The first pass multiplies each hour's admission by shares asked / shares kept. That
    is the whole correction when admission does not depend on the queue; when it does,
    admitting more at a busy hour lengthens that hour's backlog, which admits less, so a
    pass moves the profile only part of the way (LANL-CM5 whole, where the short queue
    it must keep asks for the strongest admission: 2 passes left hour TV 0.087, 5 passes
    0.048). Each later pass is a secant step in log space: the correction divided by
    the share of the last one that came through (its gain, one for all hours, fitted
    over them weighted by their shares, between ``_HOUR_GAIN_FLOOR`` and 1: a per-hour
    gain read noise as feedback in quiet hours and overshot, ALCF-Theta's hour TV 0.008
    -> 0.022)."""

    def __init__(self, shares: np.ndarray) -> None:
        self._weights = np.asarray(shares, dtype=np.float64)
        self._log_shares = np.log(np.maximum(self._weights, 1e-12))
        self._asked = self._weights > 0
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # (error, step) of the last

    def next(self, kept_share: np.ndarray) -> np.ndarray:
        """The factor each hour's admission is multiplied by in the next pass."""
        error = np.where(self._asked, self._log_shares - np.log(np.maximum(kept_share, 1e-3)), 0.0)
        step = error
        if self._last is not None:
            last_error, last_step = self._last
            moved = float(np.sum(self._weights * last_step**2))
            if moved > 1e-12:
                came = float(np.sum(self._weights * (last_error - error) * last_step))
                step = error / float(np.clip(came / moved, _HOUR_GAIN_FLOOR, 1.0))
        step = np.clip(step, -_HOUR_STEP_LIMIT, _HOUR_STEP_LIMIT)
        self._last = (error, step)
        out: np.ndarray = np.exp(step)
        return out


_STRENGTHS = (-2.0, 4.0)  # the range searched for the strength that gives the backlog
# searched further up to this when every step still left too long a queue (LANL-CM5,
# whose real EASY queue is 0.3 h: at 4 the admission barely sees an 8 h scale)
_MAX_STRENGTH = 16.0
_LOAD_TOLERANCE = 0.07  # survivors further than this from the target load: a strength not kept


_MAX_TILT = 4.0  # the most short-run sessions' admission is tilted, either way
_TILT_STEPS = 5


_ShortRatio = Callable[[JobTable, int], float | None]


@dataclass
class _StrengthFound:
    """What a search for the admission strength found: the closest admission tried, by
    (load missed, distance from the wait asked), its strength, whether its wait was too
    long, and the strengths tried that missed the load, with their distances."""

    keep: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    strength: float = 1.0
    closest: tuple[bool, float] = (True, math.inf)
    too_long: bool = False
    missed: list[tuple[float, float]] = field(default_factory=list)

    @property
    def held_back_by_load(self) -> bool:
        """The load held the admission back (:class:`ThinningReport`)."""
        return bool(self.closest[0]) or (
            self.too_long
            and any(x > self.strength and off < self.closest[1] for x, off in self.missed)
        )


def _tilt_short_sessions(
    table: JobTable,
    keep: np.ndarray,
    target: tuple[_ShortRatio, float, bool],
    backlog_scale_s: float,
    machine_procs: int,
    n_jobs: int,
    admit: Callable[[tuple[float, float]], np.ndarray],
) -> tuple[np.ndarray, tuple[float, float] | None]:
    """``keep``, or, when its first ``n_jobs`` survivors' short-run jobs fare otherwise
    than asked, the admission (``admit``, given a tilt and its normalizer) whose
    survivors' ratio is closest to the one asked, by bisection on the tilt.

    ``target`` (ratio, value, both ways): the survivors' ``ratio``
    (:func:`short_wait_ratio`, or :func:`short_backlog_ratio` for a model file from before
    it) is brought to ``value``: from above by a tilt in ``[0, _MAX_TILT]`` (short-run
    sessions admitted more while the queue is short), and, ``both ways``, from below by one
    in ``[-_MAX_TILT, 0]`` (more while it is long). The normalizer is the tilt's mean over
    the backlogs ``keep``'s survivors find, so short-run sessions are admitted about as
    often as before."""
    ratio_of, target_ratio, both_ways = target
    survivors = _keep_rows(table, keep).take(slice(0, n_jobs))
    ratio = ratio_of(survivors, machine_procs)
    if ratio is None or ratio == target_ratio or (ratio < target_ratio and not both_ways):
        return keep, None
    x = 1.0 + _found_backlog_s(survivors, machine_procs) / backlog_scale_s
    best: tuple[np.ndarray, tuple[float, float] | None] = (keep, None)
    closest = abs(ratio - target_ratio)
    low, high = (0.0, _MAX_TILT) if ratio > target_ratio else (-_MAX_TILT, 0.0)
    for _ in range(_TILT_STEPS):
        tilt = 0.5 * (low + high)
        given = (tilt, float(np.mean(x**-tilt)))
        tried = admit(given)
        found = ratio_of(_keep_rows(table, tried).take(slice(0, n_jobs)), machine_procs)
        if found is None:
            break
        if abs(found - target_ratio) < closest:
            closest, best = abs(found - target_ratio), (tried, given)
        if found > target_ratio:
            low = tilt
        else:
            high = tilt
    return best


def thin_to_load(
    table: JobTable,
    *,
    target_load: float,
    machine_procs: int,
    n_jobs: int,
    rng: np.random.Generator,
    cap_load: float | None = None,
    backlog_scale_s: float | None = None,
    hours: np.ndarray | None = None,
    backlog_target_s: float | None = None,
    easy_queue_target_s: float | None = None,
    easy_wait_target_s: float | None = None,
    hour_shares: np.ndarray | None = None,
    short_ratio_target: float | None = None,
    short_wait_target: float | None = None,
    report: ThinningReport | None = None,
) -> tuple[JobTable, float]:
    """The first ``n_jobs`` of ``table`` after dropping jobs so that they offer
    ``target_load``; returns them and the share of jobs kept.

    For a sequence model, whose gaps carry the time of day: dropping jobs keeps every
    survivor's submit time, where rescaling gaps would slide the daily cycle. Two steps:
    users' sessions (:func:`~simulations.synth.temporal.sessions`, in runs of at most
    ``_UNIT_JOBS``) are dropped whole down to the target (dropping single jobs would cut
    every session short): at random, or, given ``backlog_scale_s``, admitted less often
    while the fluid backlog of the sessions admitted so far is long
    (:func:`_admit_to_load`; ``hours`` keeps the admission even over the hours of the
    day, or, with ``hour_shares``, makes the survivors' hour-of-day profile those
    shares), as real users submit less when the machine is backed up, as strongly as makes
    the first ``n_jobs`` survivors' mean EASY wait (:func:`easy_wait_s`) the one asked
    (``easy_wait_target_s``), or else their EASY queue (:func:`easy_queue_s`,
    ``easy_queue_target_s``: model files from before the wait was recorded), or else their
    mean fluid backlog (``backlog_target_s``), or else at strength 1. Sessions starting
    with a short-run job are then admitted with a tilt (:func:`_tilt_short_sessions`)
    that brings the survivors' :func:`short_wait_ratio` to ``short_wait_target`` from
    either side, or, for an older model file, their :func:`short_backlog_ratio` down to
    ``short_ratio_target`` when it is above it; the strength is then searched again with
    that tilt, which moves the wait too. Every admission tried is then capped: in any
    calendar week offering more than ``cap_load`` (default ``_CAP`` times the target),
    more sessions are dropped at random down to it (:func:`_cap_weeks`), so the load and
    the queue the searches find are the ones left after the cap (capping after the
    searches left ALCF-Theta's draws at load 0.718-0.746 of 0.750, their deep weeks cut
    after the strength was chosen for them). Neither step looks at a session's own jobs,
    so both keep the mix of big and small ones.
    """
    if hour_shares is not None and (hours is None or np.shape(hour_shares) != (24,)):
        raise InvalidInputError(
            "hour_shares are 24 shares, one per local hour, and need each job's hour",
            field="hour_shares",
            value=np.shape(hour_shares),
        )
    for name, ratio in (
        ("short_backlog_ratio", short_ratio_target),
        ("short_wait_ratio", short_wait_target),
    ):
        if ratio is not None and not (math.isfinite(ratio) and ratio > 0):
            raise InvalidInputError(
                "must be a positive ratio (the model file's options)", field=name, value=ratio
            )
    if not len(table):
        return table, 0.0
    cap_load = _CAP * target_load if cap_load is None else cap_load
    head = table.take(slice(0, int(np.ceil(n_jobs * _SEQUENCE_MARGIN))))
    load = offered_load(head, machine_procs)
    unit = _thinning_units(table)
    u, v = rng.random((2, int(unit.max()) + 1))
    cap = (cap_load, v)
    keep = _cap_weeks(table, np.ones(len(table), dtype=bool), unit, v, cap_load, machine_procs)
    if load > target_load > 0:

        def admit(strength: float, short_tilt: tuple[float, float] | None = None) -> np.ndarray:
            return _admit_to_load(
                table,
                target_load=target_load,
                machine_procs=machine_procs,
                n_jobs=n_jobs,
                unit=unit,
                u=u,
                backlog_scale_s=backlog_scale_s,
                hours=hours,
                strength=strength,
                hour_shares=hour_shares,
                short_tilt=short_tilt,
                cap=cap,
            )

        statistic: Callable[[JobTable, int], float] = mean_backlog_s
        target = backlog_target_s
        if easy_wait_target_s is not None:
            statistic, target = easy_wait_s, easy_wait_target_s
        elif easy_queue_target_s is not None:
            statistic, target = easy_queue_s, easy_queue_target_s
        chosen = 1.0

        def search(goal: float, short_tilt: tuple[float, float] | None) -> _StrengthFound:
            # The strength whose survivors' wait (or, for an older file, queue) is the
            # one asked for.
            # The queue is not monotone in the strength everywhere, so the last step of
            # the bisection need not be the closest: the closest one tried is kept. Below
            # 0 the admission can run away (more admitted while the queue is long makes
            # it longer) and the load search jump past the target load (KTH-SP2 seed 2:
            # 0.42 of 0.71): a strength whose survivors miss the load is kept only if
            # every one tried did.
            found = _StrengthFound()
            low, high = _STRENGTHS
            bound, steps = high, 7
            while steps:
                # Thinning at random (0) is tried before any negative strength: below 0 the
                # admission can run away, leaving too little load and a short queue, and
                # the bisection then only went further down (ALCF-Theta with the work
                # calendar of docs/synthetic.md: 1 left 7.3 h of the 20.1 asked, -0.5 kept
                # 0.29 of the load and 1.7 h, and 0, which gave 20.3 h, was never tried).
                strength = 0.0 if low < 0.0 < high <= 1.0 else 0.5 * (low + high)
                tried = admit(strength, short_tilt)
                survivors = _keep_rows(table, tried).take(slice(0, n_jobs))
                load_off = abs(offered_load(survivors, machine_procs) / target_load - 1.0)
                value = statistic(survivors, machine_procs)
                rank = (load_off > _LOAD_TOLERANCE, abs(value - goal))
                if rank < found.closest:
                    found.closest, found.keep, found.strength = rank, tried, strength
                    found.too_long = value > goal
                if rank[0]:
                    found.missed.append((strength, rank[1]))
                if value > goal:
                    low = strength
                else:
                    high = strength
                steps -= 1
                if not steps and high == bound < _MAX_STRENGTH:
                    # Every step left too long a queue: search above the range (the
                    # strengths below it are unchanged, so are their results).
                    low, high = bound, min(4 * bound, _MAX_STRENGTH)
                    bound, steps = high, 7
            return found

        goal = target if backlog_scale_s is not None else None
        if goal is None:
            keep = admit(1.0)
        else:
            first = search(goal, None)
            keep, chosen = first.keep, first.strength
            if report is not None:
                report.held_back_by_load = first.held_back_by_load
        if report is not None:
            report.strength = chosen
        short: tuple[_ShortRatio, float, bool] | None = None
        if short_wait_target is not None:
            short = (short_wait_ratio, short_wait_target, True)
        elif short_ratio_target is not None:
            short = (short_backlog_ratio, short_ratio_target, False)
        if backlog_scale_s is not None and short is not None:
            keep, tilt = _tilt_short_sessions(
                table,
                keep,
                short,
                backlog_scale_s,
                machine_procs,
                n_jobs,
                lambda tilt: admit(chosen, tilt),
            )
            if goal is not None and tilt is not None:
                # The tilt moves the wait too (ALCF-Theta whole, fit seed 0: 12.7 h at the
                # strength found, 16.0 h once tilted, of 12.2 h asked: EASY bsld +31%):
                # the strength is searched again with the tilt.
                keep = search(goal, tilt).keep
    kept = _keep_rows(table, keep).take(slice(0, n_jobs))
    used = np.flatnonzero(keep)[: len(kept)]
    return kept, float(used.size / (used[-1] + 1)) if used.size else 0.0


def _recorded(meta: SynthMetadata, name: str) -> float | None:
    """A number the model recorded of its training trace (``mean_backlog_s``,
    ``easy_queue_s``, ``easy_wait_s``...), or None for a model fitted before it was
    recorded."""
    value = meta.options.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _draw_and_thin(
    model: SequenceTraceModel,
    n_jobs: int,
    rng: np.random.Generator,
    density: float,
    margin: float,
    report: ThinningReport | None,
) -> tuple[JobTable, float]:
    """``margin`` x ``n_jobs`` jobs drawn at ``density`` x the training load, constrained,
    and thinned to the load (:func:`thin_to_load`); the kept ones and their share."""
    meta = model.metadata
    rows, users = model.sample_sequence(
        int(np.ceil(n_jobs * margin)), rng, load=meta.offered_load * density
    )
    table = enforce(
        table_from_model_matrix(rows, users),
        machine_procs=meta.machine_procs,
        statuses=meta.statuses,
    )
    peak = float(meta.options.get("peak_week_load", 0.0))
    return thin_to_load(
        table,
        target_load=meta.offered_load,
        machine_procs=meta.machine_procs,
        n_jobs=n_jobs,
        rng=rng,
        cap_load=max(_CAP * meta.offered_load, peak),
        backlog_scale_s=_BACKLOG_SCALE_S,
        hours=meta.clock.hour_and_weekday(table.submit_s)[0],
        backlog_target_s=_recorded(meta, "mean_backlog_s"),
        easy_queue_target_s=_recorded(meta, "easy_queue_s"),
        easy_wait_target_s=_recorded(meta, "easy_wait_s"),
        short_ratio_target=_recorded(meta, "short_backlog_ratio"),
        short_wait_target=_recorded(meta, "short_wait_ratio"),
        hour_shares=None
        if meta.hour_of_day_shares is None
        else np.asarray(meta.hour_of_day_shares, dtype=np.float64),
        report=report,
    )


def generate(model: TraceModel, n_jobs: int, *, seed: int = 0, match_load: bool = True) -> Sample:
    """``n_jobs`` synthetic jobs from ``model``, constrained, in submit order.

    ``match_load`` makes the jobs offer the machine what the training trace did: rows drawn
    independently get their gaps rescaled by one factor; a sequence model
    (:class:`SequenceTraceModel`), whose gaps carry the time of day, draws
    ``_SEQUENCE_MARGIN`` times the jobs at ``_SEQUENCE_DENSITY`` times the training load
    (its operational clock sped up or slowed down, the daily cycle kept), then drops whole
    sessions down to the load instead, fewer while the backlog of those kept is short,
    more while it is long (:func:`thin_to_load`); its real-time gaps are never rescaled,
    and ``load_factor`` stays 1. When that thinning is held back by the load
    (:class:`ThinningReport`), the jobs are drawn again, ``_DENSE_MARGIN`` times as many
    at ``_DENSE_DENSITY`` times the load, and thinned the same way.
    """
    if n_jobs < 1:
        raise InvalidInputError("ask for at least one job", field="jobs", value=n_jobs)
    meta = model.metadata
    rng = np.random.default_rng(seed)
    sequence = isinstance(model, SequenceTraceModel)
    factor, kept = 1.0, 1.0
    if isinstance(model, SequenceTraceModel) and match_load:
        report = ThinningReport()
        density, margin = _SEQUENCE_DENSITY, _SEQUENCE_MARGIN
        table, kept = _draw_and_thin(model, n_jobs, rng, density, margin, report)
        if report.held_back_by_load:
            log.info(
                "thinning held back by the load (strength %s): drawing denser", report.strength
            )
            rng = np.random.default_rng([seed, 1])
            density, margin = _DENSE_DENSITY, _DENSE_MARGIN
            table, kept = _draw_and_thin(model, n_jobs, rng, density, margin, None)
        for attempt in range(_SHORT_DRAWS):
            if len(table) >= n_jobs:
                break
            # The thinning kept less than 1 / margin of the draw: draw that much more.
            margin *= 1.2 * n_jobs / max(len(table), 1)
            log.info("thinning kept %d of %d jobs: drawing %.1fx", len(table), n_jobs, margin)
            rng = np.random.default_rng([seed, 2 + attempt])
            table, kept = _draw_and_thin(model, n_jobs, rng, density, margin, None)
        if len(table) < n_jobs:
            raise InvalidInputError(
                f"thinning to the model's load kept {len(table)} of the jobs asked, "
                f"drawn again {_SHORT_DRAWS} times, each larger",
                field="jobs",
                value=n_jobs,
            )
    else:
        if isinstance(model, SequenceTraceModel):
            rows, users = model.sample_sequence(n_jobs, rng)
        else:
            labels, users = meta.classes.sample(n_jobs, rng)
            rows = model.sample_rows(labels, rng)
        table = enforce(
            table_from_model_matrix(rows, users),
            machine_procs=meta.machine_procs,
            statuses=meta.statuses,
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
