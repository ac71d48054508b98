"""What a trace asks of its machine: offered load, week by week, and the queue it makes.

These are the numbers a generator records of its training trace and aims its synthetic
traces at (:mod:`simulations.synth.thinning`): the offered load (processor-seconds
submitted per second of the trace, over the machine), its weekly spread, the fluid
backlog each job finds, and the waits of an EASY replay with the requests as estimates.
"""

from __future__ import annotations

import numpy as np

from simulations.engine import EASY, simulate_arrays
from simulations.synth.columns import JobTable
from simulations.synth.queue_state import found_backlog_s, machine_work_s

__all__ = [
    "WEEK_S",
    "backlogs_found_s",
    "easy_queue_s",
    "easy_wait_s",
    "easy_waits_s",
    "mean_backlog_s",
    "offered_load",
    "peak_week_load",
    "short_backlog_ratio",
    "short_run",
    "short_wait_ratio",
    "weekly_load_cv",
    "weekly_loads",
]


def offered_load(table: JobTable, machine_procs: int) -> float:
    """Processor-seconds asked for per second of the trace, as a share of the machine."""
    if len(table) < 2:
        return 0.0
    ran = np.minimum(table.run_s, table.requested_time_s).astype(np.float64)
    span = float(np.asarray(table.interarrival_s, dtype=np.float64)[1:].sum())
    return float((ran * table.procs).sum() / max(span, 1.0) / machine_procs)


WEEK_S = 7 * 86_400


def weekly_loads(table: JobTable, machine_procs: int) -> np.ndarray:
    """Each calendar week's offered load (weeks from t=0), the last (partial) week included."""
    if len(table) == 0:
        return np.zeros(0)
    week = (table.submit_s // WEEK_S).astype(np.int64)
    work = np.minimum(table.run_s, table.requested_time_s).astype(np.float64) * table.procs
    out: np.ndarray = np.bincount(week, weights=work) / (WEEK_S * machine_procs)
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


def mean_backlog_s(table: JobTable, machine_procs: int) -> float:
    """The fluid backlog each job finds when submitted, on average, in machine-seconds: the
    machine drains ``machine_procs`` processor-seconds a second, each job adds what it runs
    (at most its request) on at most the machine's processors (:func:`backlogs_found_s`)."""
    found = backlogs_found_s(table, machine_procs)
    return float(found.sum()) / max(found.size, 1)


_SHORT_RUN_S = 60.0  # a job running (at most its request) under this is short-run


def short_run(table: JobTable) -> np.ndarray:
    """Which jobs are short-run: under ``_SHORT_RUN_S`` of run (at most the request)."""
    out: np.ndarray = np.minimum(table.run_s, table.requested_time_s) < _SHORT_RUN_S
    return out


def backlogs_found_s(table: JobTable, machine_procs: int) -> np.ndarray:
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
    found = backlogs_found_s(table, machine_procs)
    short = short_run(table)
    if not short.any() or found.mean() <= 0:
        return None
    return float(found[short].mean() / found.mean())


def easy_waits_s(table: JobTable, machine_procs: int) -> tuple[np.ndarray, np.ndarray, float]:
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
    machine-seconds (:func:`easy_waits_s`). The time integral of the waiting work is the
    sum over jobs of work x wait, so this is that sum over the span."""
    if len(table) < 2:
        return 0.0
    wait, work, span = easy_waits_s(table, machine_procs)
    return float((work * wait).sum() / max(span, 1.0))


def easy_wait_s(table: JobTable, machine_procs: int) -> float:
    """The mean wait of the jobs in EASY (:func:`easy_waits_s`), each job counting once:
    the queue as the jobs see it, where :func:`easy_queue_s` is the queue as the machine
    sees it (a wide job's wait counts for its width there)."""
    if len(table) < 2:
        return 0.0
    return float(easy_waits_s(table, machine_procs)[0].mean())


def short_wait_ratio(
    table: JobTable, machine_procs: int, *, wait_s: np.ndarray | None = None
) -> float | None:
    """The mean EASY wait of short-run jobs (:func:`short_run`) over every job's
    (:func:`easy_wait_s`): how much backfilling lets them through (SDSC-SP2 0.43,
    HPC2N-2002 0.47, ALCF-Theta 0.83); None without short-run jobs or a wait. ``wait_s``:
    the table's EASY waits (:func:`easy_waits_s`) when the caller has replayed it already."""
    if len(table) < 2:
        return None
    wait = easy_waits_s(table, machine_procs)[0] if wait_s is None else wait_s
    short = short_run(table)
    if not short.any() or wait.mean() <= 0:
        return None
    return float(wait[short].mean() / wait.mean())
