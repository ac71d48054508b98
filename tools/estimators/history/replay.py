"""Replay a trace through the history estimator and the baselines, and score them.

The replay is chronological and event-driven: jobs are submitted in submit-time order, and
before each submission every job that ended strictly earlier is observed (end = submit +
wait + run). Every predictor sees the same events, so none knows a run time before the
job has ended. Between two retrains the model is fixed, so the rows submitted under it
are predicted in one batch when it is replaced: the same numbers as predicting one by
one, in a fraction of the time.

Scored jobs are those with a run time > 0 and a requested time > 0 (the user's request
must exist to be a predictor). Memory has a replay of its own
(:mod:`tools.estimators.history.replay_memory`, ``history-bench --target memory``).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from tools.estimators.history.baselines import LastTwo, user_request
from tools.estimators.history.estimator import (
    HistoryConfig,
    HistoryEstimator,
    PredictionBatch,
    QuantileModel,
    predict_rows,
)
from tools.estimators.history.features import HistoryJob
from tools.estimators.history.metrics import PredictorScore, score
from tools.traces.swf import SWFHeader, SWFJob, read_swf

__all__ = [
    "BenchResult",
    "ReplayResult",
    "history_bench",
    "history_job_from_swf",
    "replay",
]

FloatArray = NDArray[np.float64]


def history_job_from_swf(job: SWFJob, header: SWFHeader | None = None) -> HistoryJob:
    """An SWF job as the estimator's input: ids become strings, -1 unknowns stay None."""

    def text(value: int | None) -> str | None:
        return None if value is None else str(value)

    end = job.end_time_s
    return HistoryJob(
        job_id=str(job.job_id),
        submit_time_s=float(job.submit_time_s),
        user=text(job.user_id),
        group=text(job.group_id),
        application=text(job.executable_id),
        queue=text(job.queue_id),
        partition=text(job.partition_id),
        procs=job.procs,
        requested_time_s=None if job.requested_time_s is None else float(job.requested_time_s),
        requested_memory_kb_per_proc=(
            None
            if job.requested_memory_kb_per_proc is None
            else float(job.requested_memory_kb_per_proc)
        ),
        # Local time for time-of-day features: the trace's epoch plus its zone offset.
        utc_offset_s=float(
            ((header.unix_start_time_s or 0) + (header.time_zone_s or 0)) if header else 0
        ),
        run_s=None if job.run_s is None else float(job.run_s),
        end_time_s=None if end is None else float(end),
        state=job.state,
        used_memory_kb_per_proc=(
            None if job.used_memory_kb_per_proc is None else float(job.used_memory_kb_per_proc)
        ),
        used_cpu_s_per_proc=None if job.avg_cpu_time_s is None else float(job.avg_cpu_time_s),
    )


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Every job's predictions, in submit order (NaN where a predictor had nothing)."""

    jobs: list[HistoryJob]
    user_request_s: FloatArray
    last2_s: FloatArray
    last2_submit_order_s: FloatArray
    model: PredictionBatch
    memory_enabled: bool
    retrains: int  # new trees
    recalibrations: int  # the same trees with the safe weight re-chosen


def _flush(
    model: QuantileModel | None,
    rows: list[list[float]],
    indices: list[int],
    out: dict[str, FloatArray],
) -> None:
    if not rows:
        return
    batch = predict_rows(model, np.asarray(rows, dtype=np.float64))
    where = np.asarray(indices)
    out["estimate"][where] = batch.runtime_estimate_s
    out["p50"][where] = batch.runtime_p50_s
    out["safe"][where] = batch.runtime_safe_s
    out["mem_p50"][where] = batch.memory_p50_kb_per_proc
    out["mem_safe"][where] = batch.memory_safe_kb_per_proc
    rows.clear()
    indices.clear()


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def replay(jobs: Iterable[HistoryJob], config: HistoryConfig | None = None) -> ReplayResult:
    """Replay ``jobs`` chronologically through a fresh estimator and the baselines."""
    ordered = sorted(jobs, key=lambda job: job.submit_time_s)  # stable: ties keep file order
    n = len(ordered)
    # The run-time replay scores run time only: the CPU model would cost retrains for nothing.
    estimator = HistoryEstimator(
        (config or HistoryConfig()).model_copy(update={"cpu_efficiency": False})
    )
    last2 = LastTwo()
    out = {name: np.full(n, np.nan) for name in ("estimate", "p50", "safe", "mem_p50", "mem_safe")}
    requested = np.full(n, np.nan)
    easy = np.full(n, np.nan)
    easy_submit_order = np.full(n, np.nan)
    # The published last-2 figures take a user's previous two *submitted* jobs, whose run
    # times may still be unknown at submit time; kept only to reproduce those figures.
    submitted_runs: dict[str, deque[float]] = {}
    ending: list[tuple[float, int, HistoryJob]] = []
    rows: list[list[float]] = []
    indices: list[int] = []
    batch_model = estimator.model
    retrains = 0
    recalibrations = 0
    for index, job in enumerate(ordered):
        while ending and ending[0][0] < job.submit_time_s:
            _, _, done = heapq.heappop(ending)
            estimator.observe(done)
            last2.observe(done)
            current = estimator.model
            if current is not batch_model:
                _flush(batch_model, rows, indices, out)
                if (
                    batch_model is not None
                    and current is not None
                    and current.version == batch_model.version
                ):
                    recalibrations += 1
                else:
                    retrains += 1
                batch_model = current
        requested[index] = _or_nan(user_request(job))
        easy[index] = _or_nan(last2.predict(job))
        if job.user is not None:
            previous = submitted_runs.get(job.user)
            if previous is not None and len(previous) == 2 and job.requested_time_s:
                easy_submit_order[index] = min(sum(previous) / 2.0, job.requested_time_s)
            if job.run_s is not None:
                submitted_runs.setdefault(job.user, deque(maxlen=2)).append(job.run_s)
        if math.isnan(easy_submit_order[index]):
            easy_submit_order[index] = requested[index]
        if job.end_time_s is not None and job.run_s is not None:
            rows.append(estimator.submit_row(job))
            heapq.heappush(ending, (job.end_time_s, index, job))
        else:
            # A job that never ends in the trace must not count in the load forever.
            rows.append(estimator.state.row(job))
        indices.append(index)
    _flush(batch_model, rows, indices, out)
    return ReplayResult(
        jobs=ordered,
        user_request_s=requested,
        last2_s=easy,
        last2_submit_order_s=easy_submit_order,
        model=PredictionBatch(
            out["estimate"], out["p50"], out["safe"], out["mem_p50"], out["mem_safe"]
        ),
        memory_enabled=estimator.memory_enabled,
        retrains=retrains,
        recalibrations=recalibrations,
    )


class BenchResult(BaseModel):
    """What ``rightsize history-bench --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    jobs: int = Field(ge=0, description="Jobs scored: run time > 0 and a requested time")
    seconds: float = Field(ge=0, description="Wall time: read, replay, score")
    predictors: dict[str, PredictorScore]
    jobs_read: int = Field(ge=0)
    lines_skipped: int = Field(ge=0)
    skipped_by_reason: dict[str, int] = Field(default_factory=dict)
    retrains: int = Field(ge=0, description="Models trained (new trees)")
    recalibrations: int = Field(
        ge=0, description="Safe weights re-chosen between retrains (same trees)"
    )
    notes: list[str] = Field(default_factory=list)


def _column(jobs: list[HistoryJob], name: str) -> FloatArray:
    return np.array([_or_nan(getattr(job, name)) for job in jobs], dtype=np.float64)


def history_bench(
    path: str | Path, *, limit: int | None = None, config: HistoryConfig | None = None
) -> BenchResult:
    """Read a trace, replay it, and score every predictor (the ``history-bench`` command)."""
    started = time.perf_counter()
    header, swf_jobs, report = read_swf(path, limit=limit)
    result = replay((history_job_from_swf(job, header) for job in swf_jobs), config)
    run = _column(result.jobs, "run_s")
    scored = (run > 0) & (result.user_request_s > 0)
    notes: list[str] = []
    predictors: dict[str, PredictorScore] = {}
    if scored.any():
        actual = run[scored]

        def floor(values: FloatArray) -> FloatArray:
            return np.maximum(values[scored], 1.0)

        model = result.model
        predictors = {
            "user_request": score(floor(result.user_request_s), actual),
            "last2": score(floor(result.last2_s), actual),
            "model_p50": score(floor(model.runtime_p50_s), actual),
            "model_estimate": score(floor(model.runtime_estimate_s), actual),
            "model_safe": score(floor(model.runtime_safe_s), actual),
            "model_safe_at_request": score(
                floor(np.minimum(model.runtime_safe_s, result.user_request_s)), actual
            ),
            "last2_submit_order": score(floor(result.last2_submit_order_s), actual),
        }
    else:
        notes.append("no job has both a run time > 0 and a requested time: nothing scored")
    if not any(job.user for job in result.jobs):
        notes.append("the trace has no user ids: per-user history (and last-2) cannot help")
    return BenchResult(
        trace=Path(path).name,
        jobs=int(scored.sum()),
        seconds=round(time.perf_counter() - started, 3),
        predictors=predictors,
        jobs_read=len(swf_jobs),
        lines_skipped=report.skipped,
        skipped_by_reason={str(reason): count for reason, count in report.by_reason.items()},
        retrains=result.retrains,
        recalibrations=result.recalibrations,
        notes=notes,
    )
