"""Fidelity that sees time: arrival cycles, burstiness, users' sessions, sequences.

Per-column distances cannot tell a trace from its rows shuffled. These can:

- **Arrival profiles**: the share of submissions in each local hour of day and day of
  week (:class:`~simulations.synth.clock.TraceClock`), compared by total-variation
  distance ``0.5 * sum |p_real - p_synthetic|`` (0 identical, 1 disjoint).
- **Autocorrelation**: of the log gaps (lags 1-10; bursts make consecutive gaps alike)
  and of the number of arrivals per hour (lags 1-48; the daily cycle shows at 24).
- **Sessions**: a user's jobs submitted less than ``session_gap_s`` (20 minutes, after
  Zakay and Feitelson's think-time sessions) after that user's previous job. Compared:
  jobs per session and the session's processor-seconds asked for, by KS distance; a
  trace without user ids is one user, so its sessions are bursts.
- **Sequence similarity** (after SDV's multi-sequence aggregate similarity): each
  session is a sequence; per sequence, the mean of each column (log sizes, requests,
  runs and gaps inside the session) and its length; the score is the mean over those of
  ``1 - KS`` between the real and the synthetic per-sequence values (1 is identical).
- **Work in time** (:class:`WorkProfile`, given the machine's processors): how the
  offered work varies from day to day, whether busy days bring smaller jobs, and the
  queue arrivals find. On every shared real trace the jobs find a fluid backlog at
  least as long as its time mean (1.04-1.41); a generator whose arrivals avoid the
  queue can match the queue's time mean and still make jobs wait too little (ALCF-Theta:
  0.61, EASY bsld -64%).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from simulations.synth.clock import TraceClock
from simulations.synth.columns import JobTable
from simulations.synth.queue_state import backlog_time_mean_s, found_backlog_s, machine_work_s

__all__ = [
    "SESSION_GAP_S",
    "TemporalFidelity",
    "TimeProfile",
    "WorkProfile",
    "autocorrelation",
    "compare_time",
    "sessions",
    "time_profile",
    "total_variation",
    "work_profile",
]

SESSION_GAP_S = 20 * 60
_GAP_LAGS = 10
_HOURLY_LAGS = 48
_DAY_S = 86_400.0


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Half the L1 distance between two histograms, each normalized to sum 1."""
    a = np.asarray(p, dtype=np.float64)
    b = np.asarray(q, dtype=np.float64)
    a = a / a.sum() if a.sum() > 0 else a
    b = b / b.sum() if b.sum() > 0 else b
    return float(0.5 * np.abs(a - b).sum())


def autocorrelation(values: np.ndarray, lags: int) -> np.ndarray:
    """Sample autocorrelation at lags 1..``lags`` (0 where the series is too short or flat)."""
    x = np.asarray(values, dtype=np.float64)
    out = np.zeros(lags)
    if x.size < 3:
        return out
    x = x - x.mean()
    var = float((x * x).sum())
    if var <= 0:
        return out
    for lag in range(1, min(lags, x.size - 1) + 1):
        out[lag - 1] = float((x[:-lag] * x[lag:]).sum()) / var
    return out


class TimeProfile(BaseModel):
    """One trace's arrivals in time: profiles, autocorrelations, sessions."""

    model_config = ConfigDict(extra="forbid")

    hour_of_day: list[float] = Field(description="Share of submissions per local hour 0-23")
    day_of_week: list[float] = Field(description="Share per weekday, Monday first")
    gap_autocorrelation: list[float] = Field(description="Of log1p gaps, lags 1..10")
    hourly_autocorrelation: list[float] = Field(description="Of arrivals per hour, lags 1..48")
    sessions: int
    mean_session_jobs: float


def sessions(table: JobTable, session_gap_s: float = SESSION_GAP_S) -> np.ndarray:
    """A session number per job: a user's job joins that user's open session when it
    comes less than ``session_gap_s`` after the user's previous job."""
    submit = table.submit_s
    user = np.asarray(table.user, dtype=np.int64)
    order = np.lexsort((submit, user))
    su, st = user[order], submit[order]
    new = np.ones(order.size, dtype=bool)
    if order.size > 1:
        new[1:] = (su[1:] != su[:-1]) | (np.diff(st) >= session_gap_s)
    ids = np.cumsum(new) - 1
    out = np.empty(order.size, dtype=np.int64)
    out[order] = ids
    return out


def _per_session(table: JobTable, session: np.ndarray) -> dict[str, np.ndarray]:
    """Per session: its length, processor-seconds, and column means (the sequences' view)."""
    count = np.bincount(session).astype(np.float64)
    keep = count > 0

    def mean(values: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.bincount(session, weights=values)[keep] / count[keep]
        return out

    work = table.procs.astype(np.float64) * np.asarray(table.requested_time_s, dtype=np.float64)
    # The gap to the previous job of the same session (0 for its first job).
    order = np.lexsort((table.submit_s, session))
    ss, st = session[order], table.submit_s[order]
    inner = np.zeros(order.size)
    if order.size > 1:
        same = ss[1:] == ss[:-1]
        inner[1:] = np.where(same, np.diff(st), 0.0)
    gaps = np.empty(order.size)
    gaps[order] = inner
    return {
        "jobs": count[keep],
        "processor_seconds": np.bincount(session, weights=work)[keep],
        "log_procs": mean(np.log1p(table.procs.astype(np.float64))),
        "log_request": mean(np.log1p(np.asarray(table.requested_time_s, dtype=np.float64))),
        "log_run": mean(np.log1p(np.asarray(table.run_s, dtype=np.float64))),
        "log_gap_in_session": mean(np.log1p(gaps)),
    }


def time_profile(table: JobTable, clock: TraceClock) -> TimeProfile:
    submit = table.submit_s
    hour, weekday = clock.hour_and_weekday(submit)
    gaps = np.asarray(table.interarrival_s, dtype=np.float64)[1:]
    per_hour = np.bincount(((submit - submit[0]) // 3600).astype(np.int64))
    session = sessions(table)
    hours = np.bincount(hour, minlength=24).astype(np.float64)
    days = np.bincount(weekday, minlength=7).astype(np.float64)
    return TimeProfile(
        hour_of_day=(hours / max(hours.sum(), 1)).round(5).tolist(),
        day_of_week=(days / max(days.sum(), 1)).round(5).tolist(),
        gap_autocorrelation=autocorrelation(np.log1p(np.maximum(gaps, 0)), _GAP_LAGS)
        .round(4)
        .tolist(),
        hourly_autocorrelation=autocorrelation(per_hour, _HOURLY_LAGS).round(4).tolist(),
        sessions=int(session.max() + 1) if session.size else 0,
        mean_session_jobs=float(len(table) / max(int(session.max() + 1), 1))
        if session.size
        else 0.0,
    )


class WorkProfile(BaseModel):
    """One trace's work in time, as a queue sees it: work is what a job ran (at most its
    request) on at most the machine's processors; days count from the first submission."""

    model_config = ConfigDict(extra="forbid")

    daily_work_cv: float = Field(
        description="Coefficient of variation of the work offered per day (empty days too)"
    )
    daily_jobs_work_correlation: float = Field(
        description="Over days with jobs: correlation of log jobs and log mean work per job "
        "(below 0: busy days bring smaller jobs)"
    )
    arrival_backlog_ratio: float = Field(
        description="Mean fluid backlog the jobs find when submitted over its time mean "
        "(below 1: arrivals avoid the queue; 0 without a backlog)"
    )


def work_profile(table: JobTable, machine_procs: int) -> WorkProfile:
    """:class:`WorkProfile` of ``table`` on a machine of ``machine_procs`` processors."""
    if len(table) < 2:
        return WorkProfile(
            daily_work_cv=0.0, daily_jobs_work_correlation=0.0, arrival_backlog_ratio=0.0
        )
    submit = np.asarray(table.submit_s, dtype=np.float64)
    work = machine_work_s(table.run_s, table.requested_time_s, table.procs, machine_procs)
    day = ((submit - submit[0]) // _DAY_S).astype(np.int64)
    jobs = np.bincount(day).astype(np.float64)
    per_day = np.bincount(day, weights=work)
    cv = float(per_day.std() / per_day.mean()) if per_day.mean() > 0 else 0.0
    busy = (jobs > 0) & (per_day > 0)
    correlation = 0.0
    if busy.sum() >= 3:
        x, y = np.log(jobs[busy]), np.log(per_day[busy] / jobs[busy])
        if x.std() > 0 and y.std() > 0:
            correlation = float(np.corrcoef(x, y)[0, 1])
    found = found_backlog_s(submit, work)
    time_mean = backlog_time_mean_s(submit, work, found)
    return WorkProfile(
        daily_work_cv=round(cv, 4),
        daily_jobs_work_correlation=round(correlation, 4),
        arrival_backlog_ratio=round(float(found.mean()) / time_mean, 4) if time_mean > 0 else 0.0,
    )


class TemporalFidelity(BaseModel):
    """Real against synthetic in time (what ``evaluate`` reports under ``temporal``)."""

    model_config = ConfigDict(extra="forbid")

    real: TimeProfile
    synthetic: TimeProfile
    hour_of_day_tv: float
    day_of_week_tv: float
    gap_autocorrelation_max_diff: float
    hourly_autocorrelation_max_diff: float
    session_jobs_ks: float
    session_processor_seconds_ks: float
    sequence_similarity: float = Field(description="Mean of 1 - KS over per-session aggregates")
    sequence_similarity_parts: dict[str, float]
    real_work: WorkProfile | None = Field(
        default=None, description="Given the machines' processors (compare_time)"
    )
    synthetic_work: WorkProfile | None = None


def compare_time(
    real: JobTable,
    real_clock: TraceClock,
    synthetic: JobTable,
    synthetic_clock: TraceClock,
    *,
    real_procs: int | None = None,
    synthetic_procs: int | None = None,
) -> TemporalFidelity:
    """Real against synthetic in time; given a trace's machine processors, its work in
    time (:class:`WorkProfile`) too."""
    a, b = time_profile(real, real_clock), time_profile(synthetic, synthetic_clock)
    ra = _per_session(real, sessions(real))
    sa = _per_session(synthetic, sessions(synthetic))
    parts = {name: 1.0 - float(stats.ks_2samp(ra[name], sa[name]).statistic) for name in ra}
    return TemporalFidelity(
        real=a,
        synthetic=b,
        hour_of_day_tv=total_variation(np.array(a.hour_of_day), np.array(b.hour_of_day)),
        day_of_week_tv=total_variation(np.array(a.day_of_week), np.array(b.day_of_week)),
        gap_autocorrelation_max_diff=float(
            np.abs(np.array(a.gap_autocorrelation) - np.array(b.gap_autocorrelation)).max()
        ),
        hourly_autocorrelation_max_diff=float(
            np.abs(np.array(a.hourly_autocorrelation) - np.array(b.hourly_autocorrelation)).max()
        ),
        session_jobs_ks=1.0 - parts["jobs"],
        session_processor_seconds_ks=1.0 - parts["processor_seconds"],
        sequence_similarity=float(np.mean(list(parts.values()))),
        sequence_similarity_parts={k: round(v, 4) for k, v in parts.items()},
        real_work=None if real_procs is None else work_profile(real, real_procs),
        synthetic_work=None
        if synthetic_procs is None
        else work_profile(synthetic, synthetic_procs),
    )
