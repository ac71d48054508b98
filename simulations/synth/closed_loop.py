"""Users who wait for a short-run job to end before submitting their next one.

A real user whose job fails in its first minute usually sees it fail and submits the
next (mended) job after it ended: in the EASY replay of HPC2N-2002, 59% of the jobs a
user submits within the hour after a short-run job come after that job's end, against
38% in a sequence model's draw, which does not know when jobs start. The drawn short-run
jobs then wait too long (HPC2N fits 0-2: their share of the EASY wait 0.57-0.67 after
the thinning's tilt, real 0.37) and the EASY bsld misses by +19% to +58%. On the other
shared traces the gap is smaller (SDSC-SP2 0.49 real / 0.43 drawn, KTH-SP2 0.52 / 0.50,
CTC-SP2 0.34 / 0.20, LANL-CM5 0.74 / 0.68); ALCF-Theta's log has no user ids, so no
pairs, and nothing is moved.

:func:`after_short_share` measures that share on a trace; a sequence model records its
training trace's, and :func:`wait_for_short_runs` moves a drawn trace's jobs until it has
it: the thinning (:mod:`simulations.synth.thinning`) applies it to every admission it
tries, so the strength and tilt it searches are judged on the moved jobs.
"""

from __future__ import annotations

import math

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import JobTable
from simulations.synth.load import easy_waits_s, short_run

__all__ = ["STRETCH_S", "after_short_share", "wait_for_short_runs"]

# A user's next job counts as following a job when submitted within this of it (one
# working stretch; a job submitted a day later was not waiting for the first one's end).
STRETCH_S = 3600.0


def _stretch_pairs(table: JobTable) -> tuple[np.ndarray, np.ndarray]:
    """Each job and the same user's next one, when submitted within ``STRETCH_S`` of it,
    in (user, submit) order: two index arrays. Jobs without a user id (below 0) pair with
    nothing."""
    submit = table.submit_s
    order = np.lexsort((np.arange(len(table)), submit, table.user))
    first, second = order[:-1], order[1:]
    same = (table.user[first] == table.user[second]) & (table.user[first] >= 0)
    near = submit[second] - submit[first] < STRETCH_S
    pair = same & near
    return first[pair], second[pair]


def _easy_ends_s(
    table: JobTable, machine_procs: int, wait_s: np.ndarray | None = None
) -> np.ndarray:
    """When each job ends in an EASY replay with the requests as estimates (as the
    fidelity check replays a trace), on the table's submit clock; ``wait_s``: that
    replay's waits, when the caller has them."""
    wait = easy_waits_s(table, machine_procs)[0] if wait_s is None else wait_s
    ran = np.minimum(table.run_s, table.requested_time_s).astype(np.float64)
    out: np.ndarray = table.submit_s + wait + ran
    return out


def after_short_share(
    table: JobTable, machine_procs: int, *, wait_s: np.ndarray | None = None
) -> float | None:
    """Of the jobs a user submits within ``STRETCH_S`` after a short-run job of theirs
    (:func:`~simulations.synth.load.short_run`), the share submitted at or after that job
    ended in EASY; None when there are no such pairs. ``wait_s``: the table's EASY waits
    (:func:`~simulations.synth.load.easy_waits_s`) when the caller has replayed it."""
    first, second = _stretch_pairs(table)
    short = short_run(table)[first]
    if not short.any():
        return None
    end = _easy_ends_s(table, machine_procs, wait_s)
    after = table.submit_s[second[short]] >= end[first[short]]
    return float(after.mean())


def wait_for_short_runs(
    table: JobTable, machine_procs: int, share: float, u: np.ndarray
) -> JobTable:
    """``table`` with jobs moved later until about ``share`` of the jobs following a
    short-run job (:func:`after_short_share`) come after its end.

    Each job following a short-run job before it ended is moved to that end with the
    probability that brings the share from the table's own to ``share`` (``u``: one
    uniform per job, so that the same jobs move whichever survivors a search tries), and
    the user's later jobs in the same stretch move with it, so their gaps are kept.
    Nothing moves earlier, so the first job stays at t=0; the ends are the EASY replay's
    of the table as it stands, in up to ``_PASSES`` passes (a job moved changes the
    schedule), each stopping when the share is within ``_CLOSE_ENOUGH`` of the one asked.
    A share the table already has, or no short-run pairs, leaves it as it is."""
    if not (math.isfinite(share) and 0.0 <= share <= 1.0):
        raise InvalidInputError(
            "a share between 0 and 1 (the model file's options)",
            field="after_short_share",
            value=share,
        )
    if np.shape(u) != (len(table),):
        raise InvalidInputError(
            "one uniform per job", field="u", value=f"{np.shape(u)} for {len(table)} jobs"
        )
    for _ in range(_PASSES):
        moved = _move_once(table, machine_procs, share, u)
        if moved is None:
            break
        table, order = moved
        u = u[order]  # each job keeps its uniform
    return table


# Passes of moving: a job moved changes the schedule, and a short-run job that itself
# followed one moves by more or less than the jobs it precedes (a synthetic trace whose
# mean EASY wait is 6.8 h: 0.16 -> 0.25 of 0.46 asked in one pass).
_PASSES = 4
_CLOSE_ENOUGH = 0.01  # a share this close to the one asked is not moved again


def _move_once(
    table: JobTable, machine_procs: int, share: float, u: np.ndarray
) -> tuple[JobTable, np.ndarray] | None:
    """One pass of :func:`wait_for_short_runs` on the table's EASY replay: the moved
    table and where its rows came from, or None when nothing moves (no short-run pairs,
    or the share is already close to the one asked)."""
    first, second = _stretch_pairs(table)
    short = short_run(table)[first]
    if not short.any():
        return None
    submit = table.submit_s
    end = _easy_ends_s(table, machine_procs)
    before = short & (submit[second] < end[first])
    drawn = 1.0 - float(before[short].mean())
    if drawn >= share - _CLOSE_ENOUGH:
        return None
    probability = (share - drawn) / (1.0 - drawn)
    moved = before & (u[second] < probability)
    extra = np.where(moved, end[first] - submit[second], 0.0)
    # A stretch is a chain of pairs, each one's second job the next one's first; a job
    # moves by what its own pair and the pairs before it in its chain moved.
    chain_start = np.ones(first.size, dtype=bool)
    chain_start[1:] = first[1:] != second[:-1]
    total = np.cumsum(extra)
    before_chain = np.maximum.accumulate(np.where(chain_start, total - extra, 0.0))
    delay = np.zeros(len(table))
    delay[second] = total - before_chain
    if not delay.any():
        return None
    moved_submit = submit + delay
    order = np.argsort(moved_submit, kind="stable")
    out = table.take(order)
    out.interarrival_s = np.diff(moved_submit[order], prepend=moved_submit[order[0]])
    return out, order
