"""Thinning a sequence model's draw down to its training trace's load, keeping time.

A sequence model's gaps carry the time of day, so its draw is made denser than the
training trace and then thinned: whole sessions are dropped, never gaps rescaled, so
every survivor keeps its submit time. Sessions are admitted less often while the backlog
of those admitted is long, as real users submit less when the machine is backed up, as
strongly as makes the survivors' EASY wait the training trace's (:func:`thin_to_load`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.synth.closed_loop import wait_for_short_runs
from simulations.synth.columns import JobTable
from simulations.synth.load import (
    WEEK_S,
    backlogs_found_s,
    easy_queue_s,
    easy_wait_s,
    mean_backlog_s,
    offered_load,
    short_backlog_ratio,
    short_run,
    short_wait_ratio,
)
from simulations.synth.queue_state import machine_work_s
from simulations.synth.temporal import sessions

__all__ = ["BACKLOG_SCALE_S", "CAP", "SEQUENCE_MARGIN", "ThinningReport", "thin_to_load"]

log = logging.getLogger(__name__)


@dataclass
class ThinningReport:
    """What :func:`thin_to_load` found, for a caller that may draw again.

    ``strength``: the admission strength of the jobs kept (the one searched again after
    the short-run tilt, when there was one). ``held_back_by_load``, from the first
    search: the survivors' queue is longer than asked, and a stronger admission came
    closer to it but left too little load (the draw has too few jobs arriving into an
    empty queue; a denser draw has more), or no admission tried left the load.
    ``short_ratio`` and ``short_target``: the survivors' short-run wait ratio (the one the
    tilt brings to the target from either side, :func:`_tilt_short_sessions`) and the
    target; None when none was asked (or, for the ratio, the survivors have none)."""

    strength: float | None = None
    held_back_by_load: bool = False
    short_ratio: float | None = None
    short_target: float | None = None

    @property
    def short_miss(self) -> float:
        """How far the survivors' short-run ratio is from the one asked, relative: 0 when
        none was asked, infinite when the survivors have no ratio (no short-run jobs, or
        no wait)."""
        if not self.short_target:
            return 0.0
        if self.short_ratio is None:
            return math.inf
        return abs(self.short_ratio / self.short_target - 1.0)


CAP = 1.1  # no trailing week offers more than this times the training trace's load
# A session is admitted less often while the fluid backlog of those admitted is long:
# share / (1 + backlog / this), in machine-seconds (see _admit_by_backlog). Chosen on
# SDSC-SP2 and HPC2N (first 20,000 jobs, seeds 0-2): 3 h gave HPC2N -37% to -10% EASY
# bsld, 8 h -10% to +17%; SDSC-SP2 moved little between them.
BACKLOG_SCALE_S = 8 * 3600.0
_CAP_WINDOW_S = WEEK_S


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


# A sequence model's draw holds this many times the jobs asked (the generator's usual
# margin), and its load is judged over that many of its first jobs.
SEQUENCE_MARGIN = 1.7
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
    keep: np.ndarray,
    target: tuple[_ShortRatio, float, bool],
    backlog_scale_s: float,
    machine_procs: int,
    survivors_of: Callable[[np.ndarray], JobTable],
    admit: Callable[[tuple[float, float]], np.ndarray],
) -> tuple[np.ndarray, tuple[float, float] | None]:
    """``keep``, or, when its survivors' (``survivors_of``) short-run jobs fare otherwise
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
    survivors = survivors_of(keep)
    ratio = ratio_of(survivors, machine_procs)
    if ratio is None or ratio == target_ratio or (ratio < target_ratio and not both_ways):
        return keep, None
    x = 1.0 + backlogs_found_s(survivors, machine_procs) / backlog_scale_s
    best: tuple[np.ndarray, tuple[float, float] | None] = (keep, None)
    closest = abs(ratio - target_ratio)
    low, high = (0.0, _MAX_TILT) if ratio > target_ratio else (-_MAX_TILT, 0.0)
    for _ in range(_TILT_STEPS):
        tilt = 0.5 * (low + high)
        given = (tilt, float(np.mean(x**-tilt)))
        tried = admit(given)
        found = ratio_of(survivors_of(tried), machine_procs)
        if found is None:
            break
        if abs(found - target_ratio) < closest:
            closest, best = abs(found - target_ratio), (tried, given)
        if found > target_ratio:
            low = tilt
        else:
            high = tilt
    return best


_Statistic = Callable[[JobTable, int], float]


def _survivors(
    table: JobTable,
    keep: np.ndarray,
    n_jobs: int,
    machine_procs: int,
    loop: tuple[float, np.ndarray] | None,
) -> JobTable:
    kept = _keep_rows(table, keep).take(slice(0, n_jobs))
    if loop is None:
        return kept
    share, u = loop
    return wait_for_short_runs(kept, machine_procs, share, u[np.flatnonzero(keep)[:n_jobs]])


@dataclass
class _Admission:
    """One draw's thinning: its jobs, their units (:func:`_thinning_units`) and uniforms,
    and what is asked of the survivors (the first ``n_jobs`` kept). :meth:`admit` keeps
    the jobs at an admission strength and short-run tilt (:func:`_admit_to_load`, at the
    target load, capped), :meth:`search` finds the strength that gives a wait, and
    :meth:`thin` does the whole of :func:`thin_to_load`'s admission."""

    table: JobTable
    target_load: float
    machine_procs: int
    n_jobs: int
    unit: np.ndarray
    u: np.ndarray
    cap: tuple[float, np.ndarray]
    backlog_scale_s: float | None
    hours: np.ndarray | None
    hour_shares: np.ndarray | None
    loop: tuple[float, np.ndarray] | None = None

    def admit(self, strength: float, short_tilt: tuple[float, float] | None = None) -> np.ndarray:
        return _admit_to_load(
            self.table,
            target_load=self.target_load,
            machine_procs=self.machine_procs,
            n_jobs=self.n_jobs,
            unit=self.unit,
            u=self.u,
            backlog_scale_s=self.backlog_scale_s,
            hours=self.hours,
            strength=strength,
            hour_shares=self.hour_shares,
            short_tilt=short_tilt,
            cap=self.cap,
        )

    def survivors(self, keep: np.ndarray) -> JobTable:
        """The first ``n_jobs`` jobs kept, each following a short-run job moved after
        its end as often as ``loop`` (a share, one uniform per drawn job) asks
        (:func:`~simulations.synth.closed_loop.wait_for_short_runs`)."""
        return _survivors(self.table, keep, self.n_jobs, self.machine_procs, self.loop)

    def thin(
        self,
        wait: tuple[_Statistic, float] | None,
        short: tuple[_ShortRatio, float, bool] | None,
        report: ThinningReport | None,
    ) -> np.ndarray:
        """The jobs kept: at the strength whose survivors' ``wait`` (a statistic, the
        value asked) is closest to the one asked (strength 1 without a backlog scale or
        a wait), then tilted for ``short`` (:func:`_tilt_short_sessions`), the strength
        then searched again with the tilt, which moves the wait too (ALCF-Theta whole,
        fit seed 0: 12.7 h at the strength found, 16.0 h once tilted, of 12.2 h asked:
        EASY bsld +31%)."""
        if self.backlog_scale_s is None or wait is None:
            keep, strength = self.admit(1.0), 1.0
        else:
            found = self.search(wait, None)
            keep, strength = found.keep, found.strength
            if report is not None:
                report.held_back_by_load = found.held_back_by_load
        self._log("strength searched", keep, strength, None, wait, short)
        if self.backlog_scale_s is not None and short is not None:
            chosen = strength
            keep, tilt = _tilt_short_sessions(
                keep,
                short,
                self.backlog_scale_s,
                self.machine_procs,
                self.survivors,
                lambda tilt: self.admit(chosen, tilt),
            )
            self._log("short-run sessions tilted", keep, strength, tilt, wait, short)
            if wait is not None and tilt is not None:
                found = self.search(wait, tilt)
                keep, strength = found.keep, found.strength
                self._log("strength searched again", keep, strength, tilt, wait, short)
        if report is not None:
            report.strength = strength
            if short is not None and short[2]:  # an older file's one-way ratio: not judged
                report.short_ratio = short[0](self.survivors(keep), self.machine_procs)
                report.short_target = short[1]
        return keep

    def _log(
        self,
        step: str,
        keep: np.ndarray,
        strength: float,
        tilt: tuple[float, float] | None,
        wait: tuple[_Statistic, float] | None,
        short: tuple[_ShortRatio, float, bool] | None,
    ) -> None:
        """At debug level: the survivors' wait and short-run ratio against those asked."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        survivors = self.survivors(keep)
        found = [
            f"{asked[0](survivors, self.machine_procs)} of {asked[1]}"
            for asked in (wait, short)
            if asked is not None
        ]
        log.debug(
            "%s: strength %.3g, tilt %s, load %.3f: %s",
            step,
            strength,
            None if tilt is None else round(tilt[0], 3),
            offered_load(survivors, self.machine_procs),
            "; ".join(found),
        )

    def search(
        self, wait: tuple[_Statistic, float], short_tilt: tuple[float, float] | None
    ) -> _StrengthFound:
        """The strength whose survivors' wait (``wait``: the statistic, the value asked;
        for an older file, the queue) is the one asked for.

        The queue is not monotone in the strength everywhere, so the last step of the
        bisection need not be the closest: the closest one tried is kept. Below 0 the
        admission can run away (more admitted while the queue is long makes it longer)
        and the load search jump past the target load (KTH-SP2 seed 2: 0.42 of 0.71): a
        strength whose survivors miss the load is kept only if every one tried did."""
        statistic, goal = wait
        found = _StrengthFound()
        low, high = _STRENGTHS
        bound, steps = high, 7
        while steps:
            # Thinning at random (0) is tried before any negative strength: below 0 the
            # admission can run away, leaving too little load and a short queue, and the
            # bisection then only went further down (ALCF-Theta with the work calendar
            # of docs/synthetic.md: 1 left 7.3 h of the 20.1 asked, -0.5 kept 0.29 of the
            # load and 1.7 h, and 0, which gave 20.3 h, was never tried).
            strength = 0.0 if low < 0.0 < high <= 1.0 else 0.5 * (low + high)
            tried = self.admit(strength, short_tilt)
            survivors = self.survivors(tried)
            load_off = abs(offered_load(survivors, self.machine_procs) / self.target_load - 1.0)
            value = statistic(survivors, self.machine_procs)
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
    after_short_target: float | None = None,
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
    calendar week offering more than ``cap_load`` (default ``CAP`` times the target),
    more sessions are dropped at random down to it (:func:`_cap_weeks`), so the load and
    the queue the searches find are the ones left after the cap (capping after the
    searches left ALCF-Theta's draws at load 0.718-0.746 of 0.750, their deep weeks cut
    after the strength was chosen for them). Neither step looks at a session's own jobs,
    so both keep the mix of big and small ones.

    ``after_short_target``: every admission's survivors are first moved so that that
    share of the jobs a user submits within the hour after a short-run job come after
    its end (:func:`~simulations.synth.closed_loop.wait_for_short_runs`), and the
    searches judge the moved jobs: moving them after the searches left HPC2N's EASY wait
    at 2.2 h of the 3.0 h asked.
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
    if after_short_target is not None and not (
        math.isfinite(after_short_target) and 0.0 <= after_short_target <= 1.0
    ):
        raise InvalidInputError(
            "must be a share between 0 and 1 (the model file's options)",
            field="after_short_share",
            value=after_short_target,
        )
    if not len(table):
        return table, 0.0
    cap_load = CAP * target_load if cap_load is None else cap_load
    head = table.take(slice(0, int(np.ceil(n_jobs * SEQUENCE_MARGIN))))
    unit = _thinning_units(table)
    u, v = rng.random((2, int(unit.max()) + 1))
    loop = None if after_short_target is None else (after_short_target, rng.random(len(table)))
    keep = _cap_weeks(table, np.ones(len(table), dtype=bool), unit, v, cap_load, machine_procs)
    if offered_load(head, machine_procs) > target_load > 0:
        admission = _Admission(
            table=table,
            target_load=target_load,
            machine_procs=machine_procs,
            n_jobs=n_jobs,
            unit=unit,
            u=u,
            cap=(cap_load, v),
            backlog_scale_s=backlog_scale_s,
            hours=hours,
            hour_shares=hour_shares,
            loop=loop,
        )
        wait = None
        if easy_wait_target_s is not None:
            wait = (easy_wait_s, easy_wait_target_s)
        elif easy_queue_target_s is not None:
            wait = (easy_queue_s, easy_queue_target_s)
        elif backlog_target_s is not None:
            wait = (mean_backlog_s, backlog_target_s)
        short: tuple[_ShortRatio, float, bool] | None = None
        if short_wait_target is not None:
            short = (short_wait_ratio, short_wait_target, True)
        elif short_ratio_target is not None:
            short = (short_backlog_ratio, short_ratio_target, False)
        keep = admission.thin(wait, short, report)
    kept = _survivors(table, keep, n_jobs, machine_procs, loop)
    used = np.flatnonzero(keep)[: len(kept)]
    return kept, float(used.size / (used[-1] + 1)) if used.size else 0.0
