"""Replay a trace's memory online and score memory requests (``history-bench --target memory``).

The replay is chronological, like the run-time one (:mod:`tools.estimators.history.replay`): jobs
are submitted in submit order, and before each submission every job that ended strictly
earlier is observed. Each predictor makes a request per processor at submit time from
jobs that had ended by then:

- the user's own request (SWF field 10), where the trace has one;
- last-three-max x k: k times the largest use of the user's last three ended jobs, else
  the job's request, else the center's recent median use; at k = 1, 1.5 and 2, and at
  the k that, with the answers known, gives the same OOM rate as the model (``tuned``:
  the baseline the target compares against; it cannot be run live);
- the model's request (:mod:`tools.estimators.history.memory`).

A job is scored when it has a recorded use (SWF field 7) that is a memory
(:func:`memory_outlier`: zero, negative and absurd values are kept out and counted).
OOM rate: the share of scored jobs whose request is below their use. Waste: memory held
idle, sum(max(request - use, 0)) / sum(use), per processor as the trace records it.
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from tools.estimators.history.features import FeatureState, HistoryJob
from tools.estimators.history.memory import (
    MemoryLearner,
    MemoryModel,
    memory_outlier,
    predict_memory,
)
from tools.estimators.history.runtime import HistoryConfig
from tools.traces.swf import read_swf

__all__ = [
    "MemoryBenchResult",
    "MemoryReplay",
    "MemoryScore",
    "memory_bench",
    "replay_memory",
    "score_requests",
    "tuned_factor",
]

FloatArray = NDArray[np.float64]
LAST_THREE_FACTORS = (1.0, 1.5, 2.0)


@dataclass(frozen=True, slots=True)
class MemoryReplay:
    """Per job, in submit order: use and each request (KB per processor; NaN: none)."""

    jobs: list[HistoryJob]
    used_kb: FloatArray  # NaN where the use is not scorable
    user_request_kb: FloatArray
    last_three_base_kb: FloatArray  # last-three-max at k = 1, with its fallbacks
    model_request_kb: FloatArray
    model_p50_kb: FloatArray
    kept_out: dict[str, int]
    echoed: bool
    retrains: int
    recalibrations: int


class _LastThree:
    """The largest of each user's last three ended uses, and the center's recent median."""

    def __init__(self) -> None:
        self._users: dict[str, deque[float]] = {}
        self._center: deque[float] = deque(maxlen=200)

    def base(self, job: HistoryJob) -> float:
        recent = self._users.get(job.user) if job.user is not None else None
        if recent:
            return max(recent)
        asked = job.requested_memory_kb_per_proc
        if asked is not None and asked > 0 and memory_outlier(asked) is None:
            return asked
        return float(np.median(self._center)) if self._center else math.nan

    def observe(self, job: HistoryJob, used_kb: float) -> None:
        self._center.append(used_kb)
        if job.user is not None:
            self._users.setdefault(job.user, deque(maxlen=3)).append(used_kb)


def _flush(
    model: MemoryModel | None,
    rows: list[list[float]],
    offsets: list[float],
    indices: list[int],
    request: FloatArray,
    p50: FloatArray,
) -> None:
    if not rows:
        return
    batch = predict_memory(model, np.asarray(rows, dtype=np.float64), np.asarray(offsets))
    where = np.asarray(indices)
    request[where] = batch.request_kb
    p50[where] = batch.p50_kb
    rows.clear()
    offsets.clear()
    indices.clear()


def replay_memory(jobs: Iterable[HistoryJob], config: HistoryConfig | None = None) -> MemoryReplay:
    """Replay ``jobs`` chronologically through a fresh memory learner and the baselines."""
    config = config or HistoryConfig()
    ordered = sorted(jobs, key=lambda job: job.submit_time_s)
    n = len(ordered)
    state = FeatureState()
    learner = MemoryLearner(config)
    last_three = _LastThree()
    used = np.full(n, np.nan)
    asked = np.full(n, np.nan)
    base = np.full(n, np.nan)
    request = np.full(n, np.nan)
    p50 = np.full(n, np.nan)
    ending: list[tuple[float, int, HistoryJob]] = []
    rows: list[list[float]] = []
    offsets: list[float] = []
    indices: list[int] = []
    batch_model = learner.model
    retrains = recalibrations = 0
    for index, job in enumerate(ordered):
        while ending and ending[0][0] < job.submit_time_s:
            _, _, done = heapq.heappop(ending)
            learner.observe([], done)
            state.finished(done)
            if memory_outlier(done.used_memory_kb_per_proc) is None:
                last_three.observe(done, float(done.used_memory_kb_per_proc or 0.0))
            current = learner.model
            if current is not batch_model:
                _flush(batch_model, rows, offsets, indices, request, p50)
                same = batch_model is not None and current is not None
                if same and current.version == batch_model.version:  # type: ignore[union-attr]
                    recalibrations += 1
                else:
                    retrains += 1
                batch_model = current
        value = job.used_memory_kb_per_proc
        if memory_outlier(value) is None:
            used[index] = value
        requested = job.requested_memory_kb_per_proc
        if requested is not None and memory_outlier(requested) is None:
            asked[index] = requested
        base[index] = last_three.base(job)
        row = state.row(job)
        if job.end_time_s is not None:
            state.submitted(job)
            rows.append(learner.submitted(row, job))
            heapq.heappush(ending, (job.end_time_s, index, job))
        else:
            rows.append(learner.row(row, job))  # never ends here: never learned from
        offsets.append(learner.offset(job.user))
        indices.append(index)
    _flush(batch_model, rows, offsets, indices, request, p50)
    return MemoryReplay(
        jobs=ordered,
        used_kb=used,
        user_request_kb=asked,
        last_three_base_kb=base,
        model_request_kb=request,
        model_p50_kb=p50,
        kept_out=dict(learner.kept_out),
        echoed=learner.echoes_request,
        retrains=retrains,
        recalibrations=recalibrations,
    )


class MemoryScore(BaseModel):
    """One request rule over a set of jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs: int = Field(ge=0, description="Jobs scored (a use, and a request from this rule)")
    oom_rate: float = Field(ge=0, le=1, description="Share with request < use")
    waste: float = Field(ge=0, description="sum(max(request - use, 0)) / sum(use)")
    factor: float | None = Field(default=None, description="k, for last-three-max")


def score_requests(
    request_kb: FloatArray, used_kb: FloatArray, factor: float | None = None
) -> MemoryScore | None:
    """OOM rate and waste of ``request_kb`` where both it and ``used_kb`` exist."""
    has = ~np.isnan(request_kb) & ~np.isnan(used_kb)
    if not has.any():
        return None
    r, u = request_kb[has], used_kb[has]
    return MemoryScore(
        jobs=int(has.sum()),
        oom_rate=float(np.mean(r < u)),
        waste=float(np.maximum(r - u, 0.0).sum() / u.sum()),
        factor=factor,
    )


def tuned_factor(base_kb: FloatArray, used_kb: FloatArray, oom_rate: float) -> float:
    """The k for which k x ``base_kb`` leaves ``oom_rate`` of jobs short, answers known."""
    has = ~np.isnan(base_kb) & ~np.isnan(used_kb) & (base_kb > 0)
    needed = used_kb[has] / base_kb[has]  # OOM iff k < needed
    if needed.size == 0:
        return math.nan
    return float(np.quantile(needed, 1.0 - oom_rate, method="higher"))


class MemoryPart(BaseModel):
    """Every rule's figures on one part of the trace (all jobs, or the held-out part)."""

    model_config = ConfigDict(extra="forbid")

    first_job_index: int = Field(ge=0, description="Scored from this job (submit order) on")
    end_job_index: int | None = Field(default=None, description="... up to this one")
    predictors: dict[str, MemoryScore]
    model_waste_vs_tuned: float | None = Field(
        default=None, description="Model waste / tuned last-three-max waste (target <= 0.7)"
    )


class MemoryBenchResult(BaseModel):
    """What ``rightsize history-bench --target memory --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    target: str = "memory"
    target_oom_rate: float
    jobs_read: int = Field(ge=0)
    jobs_scored: int = Field(ge=0, description="Jobs with a recorded use that is memory")
    kept_out: dict[str, int] = Field(description="Recorded uses not learned from, by reason")
    all_jobs: MemoryPart
    tune: MemoryPart = Field(description="The first half (submit order): settings chosen here")
    held_out: MemoryPart = Field(description="The later half (submit order) only")
    retrains: int = Field(ge=0)
    recalibrations: int = Field(ge=0)
    seconds: float = Field(ge=0)
    notes: list[str] = Field(default_factory=list)


def _part(result: MemoryReplay, first: int, end: int | None = None) -> MemoryPart:
    used = result.used_kb.copy()
    used[:first] = np.nan
    if end is not None:
        used[end:] = np.nan
    predictors: dict[str, MemoryScore] = {}
    user = score_requests(result.user_request_kb, used)
    if user is not None:
        predictors["user_request"] = user
    for k in LAST_THREE_FACTORS:
        found = score_requests(k * result.last_three_base_kb, used, k)
        if found is not None:
            predictors[f"last3_max_x{k:g}"] = found
    model = score_requests(result.model_request_kb, used)
    ratio = None
    if model is not None:
        k = tuned_factor(result.last_three_base_kb, used, model.oom_rate)
        tuned = score_requests(k * result.last_three_base_kb, used, k)
        if tuned is not None:
            predictors["last3_max_tuned"] = tuned
            ratio = model.waste / tuned.waste if tuned.waste > 0 else None
        predictors["model"] = model
    return MemoryPart(
        first_job_index=first,
        end_job_index=end,
        predictors=predictors,
        model_waste_vs_tuned=ratio,
    )


def _write_csv(path: Path, result: MemoryReplay) -> None:
    """One row per job with a recorded use; written whole or not at all."""
    temporary = path.with_name(path.name + ".part")
    with temporary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job_id", "submit_s", "used_kb", "request_kb"])
        for job, used, request in zip(
            result.jobs, result.used_kb, result.model_request_kb, strict=True
        ):
            if not math.isnan(used):
                writer.writerow(
                    [job.job_id, f"{job.submit_time_s:.0f}", f"{used:.0f}", f"{request:.0f}"]
                )
    os.replace(temporary, path)


def memory_bench(
    path: str | Path,
    *,
    limit: int | None = None,
    config: HistoryConfig | None = None,
    predictions_out: Path | None = None,
) -> MemoryBenchResult:
    """Read a trace, replay its memory, score every rule (``history-bench --target memory``).

    Raises :class:`InvalidInputError` when the trace records no memory use (SWF field 7).
    """
    from tools.estimators.history.replay import history_job_from_swf

    started = time.perf_counter()
    config = config or HistoryConfig()
    header, swf_jobs, _ = read_swf(path, limit=limit)
    recorded = Counter(
        "recorded" if job.used_memory_kb_per_proc is not None else "none" for job in swf_jobs
    )
    if not recorded["recorded"]:
        raise InvalidInputError(
            f"trace {Path(path).name} records no used memory (SWF field 7 is -1 on all "
            f"{len(swf_jobs)} jobs): nothing to learn or score for --target memory",
            field="used_memory_kb_per_proc",
            value=-1,
        )
    result = replay_memory((history_job_from_swf(job, header) for job in swf_jobs), config)
    scored = int((~np.isnan(result.used_kb)).sum())
    notes: list[str] = []
    if result.echoed:
        notes.append(
            "the recorded use equals the request on most jobs: the trace copied the request "
            "into field 7, so these figures are not evidence of use"
        )
    if not np.isfinite(result.user_request_kb).any():
        notes.append("the trace records no memory request (SWF field 10): no user_request row")
    if predictions_out is not None:
        _write_csv(predictions_out, result)
    return MemoryBenchResult(
        trace=Path(path).name,
        target_oom_rate=config.target_oom_rate,
        jobs_read=len(swf_jobs),
        jobs_scored=scored,
        kept_out=result.kept_out,
        all_jobs=_part(result, 0),
        tune=_part(result, 0, len(result.jobs) // 2),
        held_out=_part(result, len(result.jobs) // 2),
        retrains=result.retrains,
        recalibrations=result.recalibrations,
        seconds=round(time.perf_counter() - started, 3),
        notes=notes,
    )
