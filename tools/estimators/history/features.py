"""What is known about a batch job when it is submitted, as one row of numbers.

:class:`HistoryJob` is the estimator's input: the request (user, group, application,
queue, partition, processors, time, memory) and, once the job has ended, its outcome.
:class:`FeatureState` is the center's history as seen at a moment: the recent finished
jobs of each user, of each user+application, user+request and user+processors, and of
each job shape (request and processors, across users: the only history a trace without
user ids has), plus what is in the system now. ``row(job)`` reads only the request fields
and that state, never the job's own outcome, so a row computed at submit time cannot see
the future.

Per-key summaries are recomputed when a job of that key finishes, not when one is
submitted, which keeps a row to a few dictionary lookups: replays run to 200,000 jobs.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import median

from knowledge_base.records import JobRecord, JobState

__all__ = [
    "FEATURE_NAMES",
    "FeatureState",
    "HistoryJob",
    "hit_limit",
]

_NAN = math.nan
# A run within a minute and within 1% of its request, or past it, ran into its time limit.
_LIMIT_FRACTION = 0.99
_LIMIT_SLACK_S = 60.0
_USER_K = 10  # finished jobs a user's summary looks back over
_KEY_K = 5  # the same for a user+application or user+request key
_GLOBAL_K = 100  # finished jobs the center-wide recent mean looks back over
_SECONDS_PER_DAY = 86400


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """One batch job as the history estimator sees it.

    The request fields are what the scheduler knows at submit time. ``run_s``,
    ``end_time_s``, ``state``, ``used_memory_kb_per_proc`` and ``used_cpu_s_per_proc``
    (CPU time used per processor: SLURM's TotalCPU over the cores) are the outcome: set them
    when passing a finished job to ``observe``; prediction never reads them.
    ``submit_time_s`` is any consistent clock in seconds (Unix time for live use);
    ``utc_offset_s`` turns it into local time for the time-of-day features.
    """

    job_id: str
    submit_time_s: float
    user: str | None = None
    group: str | None = None
    application: str | None = None
    queue: str | None = None
    partition: str | None = None
    procs: int | None = None
    requested_time_s: float | None = None
    requested_memory_kb_per_proc: float | None = None
    utc_offset_s: float = 0.0
    run_s: float | None = None
    end_time_s: float | None = None
    state: JobState | None = None
    used_memory_kb_per_proc: float | None = None
    used_cpu_s_per_proc: float | None = None  # CPU time per processor (SWF field 6)

    @classmethod
    def from_job_record(cls, record: JobRecord, utc_offset_s: float = 0.0) -> HistoryJob:
        """A knowledge-base job; its memory (MB for the whole job) goes to KB per processor."""
        procs = record.requested_cores
        per_proc = 1024.0 / procs if procs else None

        def per_proc_kb(mb: int | None) -> float | None:
            return None if mb is None or per_proc is None else mb * per_proc

        return cls(
            job_id=record.job_id,
            submit_time_s=record.submit_time.timestamp(),
            user=record.user,
            group=record.group,
            application=record.application,
            queue=None,
            partition=record.partition,
            procs=procs,
            requested_time_s=record.requested_walltime_s,
            requested_memory_kb_per_proc=per_proc_kb(record.requested_memory_mb),
            utc_offset_s=utc_offset_s,
            run_s=record.run_s,
            end_time_s=None if record.end_time is None else record.end_time.timestamp(),
            state=record.state,
            used_memory_kb_per_proc=per_proc_kb(record.used_memory_mb),
            used_cpu_s_per_proc=(
                None if record.used_cpu_s is None or not procs else record.used_cpu_s / procs
            ),
        )


def hit_limit(run_s: float, requested_time_s: float | None) -> bool:
    """Whether a job ran into its time limit (to within a minute and 1% of it, or past it)."""
    if requested_time_s is None or requested_time_s <= 0:
        return False
    return run_s >= max(requested_time_s * _LIMIT_FRACTION, requested_time_s - _LIMIT_SLACK_S)


def _log(value: float | None) -> float:
    return _NAN if value is None or value <= 0 else math.log(value)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else _NAN


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return _NAN
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


class _UserTrack:
    """A user's recent finished jobs (newest last) and the summary row they give."""

    __slots__ = (
        "fails",
        "hits",
        "last_requested_s",
        "log_mem",
        "log_mem_ratios",
        "log_ratios",
        "log_runs",
        "n",
        "runs",
        "summary",
    )

    def __init__(self) -> None:
        self.n = 0
        self.runs: deque[float] = deque(maxlen=_USER_K)
        self.log_runs: deque[float] = deque(maxlen=_USER_K)
        self.log_ratios: deque[float] = deque(maxlen=_USER_K)
        self.hits: deque[bool] = deque(maxlen=_USER_K)
        self.fails: deque[bool] = deque(maxlen=_USER_K)
        self.log_mem: deque[float] = deque(maxlen=_USER_K)
        self.log_mem_ratios: deque[float] = deque(maxlen=_USER_K)
        self.last_requested_s: float | None = None
        self.summary: list[float] = [_NAN] * len(_USER_NAMES)

    def add(self, job: HistoryJob, run_s: float) -> None:
        self.n += 1
        self.runs.append(run_s)
        log_run = math.log(max(run_s, 1.0))
        self.log_runs.append(log_run)
        requested = job.requested_time_s
        if requested is not None and requested > 0:
            self.log_ratios.append(log_run - math.log(requested))
        self.hits.append(hit_limit(run_s, requested))
        self.fails.append(job.state in (JobState.FAILED, JobState.CANCELLED))
        used = job.used_memory_kb_per_proc
        if used is not None and used > 0:
            self.log_mem.append(math.log(used))
            asked = job.requested_memory_kb_per_proc
            if asked is not None and asked > 0:
                self.log_mem_ratios.append(math.log(used / asked))
        self.last_requested_s = requested
        runs = list(self.runs)
        logs = list(self.log_runs)
        ratios = list(self.log_ratios)
        mem = list(self.log_mem)
        mem_ratios = list(self.log_mem_ratios)
        self.summary = [
            math.log1p(self.n),
            logs[-1],
            # EASY++: the mean of the last two run times, not of their logs.
            math.log(max(_mean(runs[-2:]), 1.0)),
            median(logs[-5:]),
            _mean(logs),
            _std(logs),
            max(logs),
            min(logs),
            ratios[-1] if ratios else _NAN,
            _mean(ratios[-5:]),
            max(ratios) if ratios else _NAN,
            _mean([float(h) for h in self.hits]),
            _mean([float(f) for f in self.fails]),
            mem[-1] if mem else _NAN,
            _mean(mem[-5:]),
            max(mem) if mem else _NAN,
            _mean(mem_ratios[-5:]),
        ]


_USER_NAMES = [
    "user_finished_log",
    "user_last_log_run",
    "user_last2_log_run",
    "user_median5_log_run",
    "user_mean10_log_run",
    "user_std10_log_run",
    "user_max10_log_run",
    "user_min10_log_run",
    "user_last_log_ratio",
    "user_mean5_log_ratio",
    "user_max10_log_ratio",
    "user_hit_limit_fraction",
    "user_failed_fraction",
    "user_last_log_mem",
    "user_mean5_log_mem",
    "user_max10_log_mem",
    "user_mean5_log_mem_ratio",
]


class _KeyTrack:
    """The recent finished jobs of a narrower key (user+application, user+request)."""

    __slots__ = ("log_mem", "log_runs", "n", "summary")

    def __init__(self) -> None:
        self.n = 0
        self.log_runs: deque[float] = deque(maxlen=_KEY_K)
        self.log_mem: deque[float] = deque(maxlen=_KEY_K)
        self.summary: list[float] = [_NAN] * 5

    def add(self, job: HistoryJob, run_s: float) -> None:
        self.n += 1
        self.log_runs.append(math.log(max(run_s, 1.0)))
        used = job.used_memory_kb_per_proc
        if used is not None and used > 0:
            self.log_mem.append(math.log(used))
        logs = list(self.log_runs)
        mem = list(self.log_mem)
        self.summary = [
            math.log1p(self.n),
            logs[-1],
            _mean(logs[-3:]),
            max(logs),
            mem[-1] if mem else _NAN,
        ]


def _key_names(prefix: str) -> list[str]:
    return [
        f"{prefix}_finished_log",
        f"{prefix}_last_log_run",
        f"{prefix}_mean3_log_run",
        f"{prefix}_max5_log_run",
        f"{prefix}_last_log_mem",
    ]


_EMPTY_KEY = [_NAN] * 5
_EMPTY_USER = [_NAN] * len(_USER_NAMES)

FEATURE_NAMES: tuple[str, ...] = (
    "log_requested_time",
    "log_procs",
    "log_requested_mem",
    "user_code",
    "group_code",
    "application_code",
    "queue_code",
    "partition_code",
    "hour_of_day",
    "day_of_week",
    *_USER_NAMES,
    *_key_names("user_app"),
    *_key_names("user_request"),
    *_key_names("user_procs"),
    *_key_names("shape"),
    "user_in_system",
    "log_since_user_submit",
    "same_request_as_last_submitted",
    "same_request_as_last_finished",
    "log_request_minus_user_last",
    "log_request_minus_user_request_last",
    "in_system",
    "log_procs_in_system",
    "center_recent_mean_log_run",
)
"""The row ``FeatureState.row`` returns, in order. Missing values are NaN."""


class FeatureState:
    """The center's history at the current moment, as features for the next submitted job.

    ``submitted(job)`` puts a job in the system (queue load, the user's last request);
    ``finished(job)`` takes it out and adds its outcome to the history. Both must come in
    time order for the rows to mean "what was known then".
    """

    def __init__(self) -> None:
        self._codes: dict[str, dict[str, int]] = {
            name: {} for name in ("user", "group", "application", "queue", "partition")
        }
        self._users: dict[str, _UserTrack] = {}
        self._user_apps: dict[tuple[str, str], _KeyTrack] = {}
        self._user_requests: dict[tuple[str, float], _KeyTrack] = {}
        self._user_procs: dict[tuple[str, int], _KeyTrack] = {}
        self._shapes: dict[tuple[float | None, int | None], _KeyTrack] = {}
        self._user_in_system: dict[str, int] = {}
        self._user_last_submit: dict[str, tuple[float, float | None]] = {}
        self._in_system: dict[str, int] = {}  # job id -> procs
        self._procs_in_system = 0
        self._recent: deque[float] = deque(maxlen=_GLOBAL_K)
        self._recent_sum = 0.0

    def _code(self, kind: str, value: str | None) -> float:
        if value is None:
            return _NAN
        codes = self._codes[kind]
        code = codes.get(value)
        if code is None:
            # Codes in order of first appearance: a number the trees can split on, stable
            # across retrains because it never changes once given.
            code = codes[value] = len(codes)
        return float(code)

    def row(self, job: HistoryJob) -> list[float]:
        """The features of ``job`` given the history so far (reads only its request)."""
        requested = job.requested_time_s
        log_requested = _log(requested)
        local_s = job.submit_time_s + job.utc_offset_s
        user = job.user
        track = self._users.get(user) if user is not None else None
        user_summary = track.summary if track is not None else _EMPTY_USER
        app_summary = _EMPTY_KEY
        request_summary = _EMPTY_KEY
        procs_summary = _EMPTY_KEY
        in_system_user = _NAN
        since_submit = _NAN
        same_submitted = _NAN
        same_finished = _NAN
        if user is not None:
            if job.application is not None:
                app_track = self._user_apps.get((user, job.application))
                if app_track is not None:
                    app_summary = app_track.summary
            if requested is not None:
                request_track = self._user_requests.get((user, requested))
                if request_track is not None:
                    request_summary = request_track.summary
            if job.procs is not None:
                procs_track = self._user_procs.get((user, job.procs))
                if procs_track is not None:
                    procs_summary = procs_track.summary
            in_system_user = float(self._user_in_system.get(user, 0))
            last = self._user_last_submit.get(user)
            if last is not None:
                since_submit = math.log1p(max(job.submit_time_s - last[0], 0.0))
                same_submitted = float(last[1] == requested)
            if track is not None:
                same_finished = float(track.last_requested_s == requested)
        recent = self._recent_sum / len(self._recent) if self._recent else _NAN
        shape = self._shapes.get((requested, job.procs))
        shape_summary = shape.summary if shape is not None else _EMPTY_KEY
        return [
            log_requested,
            _log(job.procs),
            _log(job.requested_memory_kb_per_proc),
            self._code("user", user),
            self._code("group", job.group),
            self._code("application", job.application),
            self._code("queue", job.queue),
            self._code("partition", job.partition),
            (local_s % _SECONDS_PER_DAY) / 3600.0,
            # 1970-01-01 was a Thursday; Monday is 0.
            float((int(local_s // _SECONDS_PER_DAY) + 3) % 7),
            *user_summary,
            *app_summary,
            *request_summary,
            *procs_summary,
            *shape_summary,
            in_system_user,
            since_submit,
            same_submitted,
            same_finished,
            log_requested - user_summary[1],
            log_requested - request_summary[1],
            float(len(self._in_system)),
            math.log1p(self._procs_in_system),
            recent,
        ]

    def submitted(self, job: HistoryJob) -> None:
        """``job`` entered the queue: it counts in the load until it finishes."""
        if job.job_id in self._in_system:
            return
        procs = job.procs or 0
        self._in_system[job.job_id] = procs
        self._procs_in_system += procs
        if job.user is not None:
            self._user_in_system[job.user] = self._user_in_system.get(job.user, 0) + 1
            self._user_last_submit[job.user] = (job.submit_time_s, job.requested_time_s)

    def finished(self, job: HistoryJob) -> None:
        """``job`` ended: it leaves the load and its outcome joins the history."""
        procs = self._in_system.pop(job.job_id, None)
        if procs is not None:
            self._procs_in_system -= procs
            if job.user is not None:
                self._user_in_system[job.user] -= 1
        if job.run_s is None:
            return
        run_s = float(job.run_s)
        log_run = math.log(max(run_s, 1.0))
        if len(self._recent) == self._recent.maxlen:
            self._recent_sum -= self._recent[0]
        self._recent.append(log_run)
        self._recent_sum += log_run
        if job.requested_time_s is not None or job.procs is not None:
            shape_key = (job.requested_time_s, job.procs)
            self._shapes.setdefault(shape_key, _KeyTrack()).add(job, run_s)
        user = job.user
        if user is None:
            return
        self._users.setdefault(user, _UserTrack()).add(job, run_s)
        if job.application is not None:
            self._user_apps.setdefault((user, job.application), _KeyTrack()).add(job, run_s)
        if job.requested_time_s is not None:
            key = (user, job.requested_time_s)
            self._user_requests.setdefault(key, _KeyTrack()).add(job, run_s)
        if job.procs is not None:
            self._user_procs.setdefault((user, job.procs), _KeyTrack()).add(job, run_s)
