"""Replay a trace's CPU efficiency online and score predictors (``history-bench --target
cpu-efficiency``).

Efficiency: CPU time used over run time x processors (SWF field 6 over field 4), capped
at 1 (:mod:`tools.estimators.history.cpu`). The replay is chronological, like the memory
one (:mod:`tools.estimators.history.replay_memory`): jobs are submitted in submit order, and
before each submission every job that ended strictly earlier is observed. Each predictor
answers at submit time from jobs that had ended by then:

- ``user_last``: the user's last efficiency, else the center's recent median;
- ``user_median``: the median of the user's last ten, else the center's recent median;
- ``model``: the CPU model's median, with its 0.1-0.9 interval.

Scored: jobs with a recorded efficiency that can be learned from, where every predictor
has a value. Mean absolute error, the model interval's coverage and width, and how well
"below 0.5" (the planner's cue to offer fewer cores) is foreseen.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from tools.estimators.history.cpu import (
    CpuLearner,
    CpuModel,
    cpu_efficiency,
    efficiency_outlier,
    predict_cpu,
)
from tools.estimators.history.features import FeatureState, HistoryJob
from tools.estimators.history.runtime import HistoryConfig
from tools.traces.swf import read_swf

__all__ = ["CpuBenchResult", "CpuPart", "CpuReplay", "cpu_bench", "replay_cpu"]

FloatArray = NDArray[np.float64]
LOW_EFFICIENCY = 0.5


@dataclass(frozen=True, slots=True)
class CpuReplay:
    """Per job, in submit order: the recorded efficiency and each prediction (NaN: none)."""

    jobs: list[HistoryJob]
    efficiency: FloatArray  # capped at 1; NaN where not scorable
    user_last: FloatArray
    user_median: FloatArray
    model_p50: FloatArray
    model_low: FloatArray
    model_high: FloatArray
    kept_out: dict[str, int]
    capped: int
    retrains: int


def _flush(
    model: CpuModel | None, rows: list[list[float]], indices: list[int], out: list[FloatArray]
) -> None:
    if not rows:
        return
    batch = predict_cpu(model, np.asarray(rows, dtype=np.float64))
    where = np.asarray(indices)
    for array, values in zip(out, (batch.p50, batch.low, batch.high), strict=True):
        array[where] = values
    rows.clear()
    indices.clear()


def replay_cpu(jobs: Iterable[HistoryJob], config: HistoryConfig | None = None) -> CpuReplay:
    """Replay ``jobs`` chronologically through a fresh CPU learner and the baselines."""
    config = config or HistoryConfig()
    ordered = sorted(jobs, key=lambda job: job.submit_time_s)
    n = len(ordered)
    state = FeatureState()
    learner = CpuLearner(config)
    efficiency, last, middle = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    model_out = [np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)]
    ending: list[tuple[float, int, HistoryJob]] = []
    rows: list[list[float]] = []
    indices: list[int] = []
    batch_model = learner.model
    retrains = 0
    for index, job in enumerate(ordered):
        while ending and ending[0][0] < job.submit_time_s:
            _, _, done = heapq.heappop(ending)
            learner.observe([], done)
            state.finished(done)
            if learner.model is not batch_model:
                _flush(batch_model, rows, indices, model_out)
                batch_model = learner.model
                retrains += 1
        if efficiency_outlier(job) is None:
            efficiency[index] = min(cpu_efficiency(job) or 0.0, 1.0)
        center = learner.state.center_median()
        user_last, user_median = learner.state.user_last_and_median(job)
        last[index] = center if math.isnan(user_last) else user_last
        middle[index] = center if math.isnan(user_median) else user_median
        row = state.row(job)
        if job.end_time_s is not None:
            state.submitted(job)
            rows.append(learner.submitted(row, job))
            heapq.heappush(ending, (job.end_time_s, index, job))
        else:
            rows.append(learner.row(row, job))
        indices.append(index)
    _flush(batch_model, rows, indices, model_out)
    return CpuReplay(
        jobs=ordered,
        efficiency=efficiency,
        user_last=last,
        user_median=middle,
        model_p50=model_out[0],
        model_low=model_out[1],
        model_high=model_out[2],
        kept_out=dict(learner.kept_out),
        capped=learner.capped,
        retrains=retrains,
    )


class CpuPart(BaseModel):
    """Every predictor's figures on one part of the trace."""

    model_config = ConfigDict(extra="forbid")

    first_job_index: int = Field(ge=0, description="Scored from this job (submit order) on")
    end_job_index: int | None = Field(default=None, description="... up to this one")
    jobs: int = Field(ge=0, description="Jobs scored: an efficiency and every prediction")
    mean_efficiency: float | None
    mae: dict[str, float] = Field(description="Mean absolute error of each predictor")
    interval_coverage: float | None = Field(
        default=None, description="Share of jobs within the model's [0.1, 0.9] interval"
    )
    interval_width: float | None = Field(default=None, description="Its mean width")
    low_predicted: int = Field(default=0, description="Jobs the model puts below 0.5")
    low_precision: float | None = Field(
        default=None, description="Of those, the share that did run below 0.5"
    )
    low_recall: float | None = Field(
        default=None, description="Of the jobs that ran below 0.5, the share foreseen"
    )


class CpuBenchResult(BaseModel):
    """What ``rightsize history-bench --target cpu-efficiency --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    target: str = "cpu-efficiency"
    jobs_read: int = Field(ge=0)
    jobs_with_efficiency: int = Field(ge=0)
    kept_out: dict[str, int] = Field(description="Recorded CPU times not learned from")
    capped_at_one: int = Field(ge=0, description="Efficiencies above 1 learned as 1")
    all_jobs: CpuPart
    tune: CpuPart = Field(description="The first half (submit order)")
    held_out: CpuPart = Field(description="The later half (submit order) only")
    retrains: int = Field(ge=0)
    seconds: float = Field(ge=0)
    notes: list[str] = Field(default_factory=list)


def _ratio(part: NDArray[np.bool_], whole: NDArray[np.bool_]) -> float | None:
    return float(part.sum() / whole.sum()) if whole.any() else None


def _part(result: CpuReplay, first: int, end: int | None = None) -> CpuPart:
    stop = len(result.jobs) if end is None else end
    actual = result.efficiency[first:stop]
    predictors = {
        "user_last": result.user_last[first:stop],
        "user_median": result.user_median[first:stop],
        "model": result.model_p50[first:stop],
    }
    has = ~np.isnan(actual)
    for values in predictors.values():
        has &= ~np.isnan(values)
    common = {"first_job_index": first, "end_job_index": end, "jobs": int(has.sum())}
    if not has.any():
        return CpuPart(**common, mean_efficiency=None, mae={})
    y = actual[has]
    low, high = result.model_low[first:stop][has], result.model_high[first:stop][has]
    flagged = predictors["model"][has] < LOW_EFFICIENCY
    ran_low = y < LOW_EFFICIENCY
    return CpuPart(
        **common,
        mean_efficiency=float(y.mean()),
        mae={name: float(np.abs(values[has] - y).mean()) for name, values in predictors.items()},
        interval_coverage=float(np.mean((low <= y) & (y <= high))),
        interval_width=float(np.mean(high - low)),
        low_predicted=int(flagged.sum()),
        low_precision=_ratio(flagged & ran_low, flagged),
        low_recall=_ratio(flagged & ran_low, ran_low),
    )


def cpu_bench(
    path: str | Path, *, limit: int | None = None, config: HistoryConfig | None = None
) -> CpuBenchResult:
    """Read a trace, replay its CPU efficiency and score the predictors.

    Raises :class:`InvalidInputError` when the trace records no CPU time (SWF field 6).
    """
    from tools.estimators.history.replay import history_job_from_swf

    started = time.perf_counter()
    header, swf_jobs, _ = read_swf(path, limit=limit)
    recorded = Counter(job.avg_cpu_time_s is not None for job in swf_jobs)
    if not recorded[True]:
        raise InvalidInputError(
            f"trace {Path(path).name} records no CPU time (SWF field 6 is -1 on all "
            f"{len(swf_jobs)} jobs): nothing to learn or score for --target cpu-efficiency",
            field="avg_cpu_time_s",
            value=-1,
        )
    result = replay_cpu((history_job_from_swf(job, header) for job in swf_jobs), config)
    notes = []
    if result.capped:
        notes.append(
            f"{result.capped} jobs recorded more CPU time than run time x processors; "
            "learned and scored as 1"
        )
    half = len(result.jobs) // 2
    return CpuBenchResult(
        trace=Path(path).name,
        jobs_read=len(swf_jobs),
        jobs_with_efficiency=int((~np.isnan(result.efficiency)).sum()),
        kept_out=result.kept_out,
        capped_at_one=result.capped,
        all_jobs=_part(result, 0),
        tune=_part(result, 0, half),
        held_out=_part(result, half),
        retrains=result.retrains,
        seconds=round(time.perf_counter() - started, 3),
        notes=notes,
    )
