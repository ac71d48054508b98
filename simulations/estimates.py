"""Per-job run-time estimates from the history estimator, for ``--estimate model`` and
``--policy rightsize``.

The history estimator is replayed over the trace's own timeline (a job is learned from
once it ended in the original log), online: each job's estimate uses only jobs that had
finished before it was submitted. Two things come out per job:

- its p50 (the candidate with the best expected accuracy), which drives ``--estimate
  model``'s reservations, capped at the request and raised to it if a job outlives it;
- its run-time distribution (:func:`tools.estimators.history.estimator.runtime_distribution`:
  the candidates with their predicted coverage), from which the ``rightsize`` policy takes
  a quantile as its estimate and, when a job outlives it, the next estimate from the
  conditional distribution.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.engine import Distribution
from simulations.workload import Workload
from tools.estimators.history.estimator import (
    HistoryEstimator,
    QuantileModel,
    distribution_quantile,
    predict_rows,
    runtime_distribution,
)
from tools.estimators.history.features import HistoryJob
from tools.estimators.history.replay import history_job_from_swf
from tools.traces.swf import SWFReader

__all__ = ["RuntimeDistributions", "history_distributions", "model_estimates"]


@dataclass(frozen=True)
class RuntimeDistributions:
    """One row per job of a workload (submit order): the history estimator's view of it."""

    p50_s: np.ndarray  # the best expected accuracy (``--estimate model``)
    values_s: np.ndarray  # n x K run times, ascending, capped at the request
    coverage: np.ndarray  # n x K predicted P(run <= value), non-decreasing

    def quantile_s(self, alpha: float) -> np.ndarray:
        """Each job's smallest run time predicted to cover at least ``alpha`` (the
        request where none does)."""
        if not 0.0 < alpha <= 1.0:
            raise InvalidInputError("a quantile lies in (0, 1]", field="quantile", value=alpha)
        picked: np.ndarray = distribution_quantile(self.values_s, self.coverage, alpha)
        return picked

    def for_engine(self, alpha: float) -> Distribution:
        """As the simulator's corrections read it, picking the conditional ``alpha``."""
        if not 0.0 < alpha <= 1.0:
            raise InvalidInputError(
                "a conditional quantile lies in (0, 1]", field="correction_quantile", value=alpha
            )
        return self.values_s, self.coverage, alpha


def _replay_history(trace: str | Path) -> dict[str, tuple[float, np.ndarray, np.ndarray]]:
    """Every job of the trace by id: (p50 s, run times, coverage), predicted online."""
    with SWFReader(trace) as reader:
        header = reader.header
        jobs = sorted(
            (history_job_from_swf(job, header) for job in reader),
            key=lambda job: job.submit_time_s,
        )
    estimator = HistoryEstimator()
    out: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
    pending: list[tuple[HistoryJob, list[float]]] = []
    batch_model: QuantileModel | None = estimator.model

    def flush(model: QuantileModel | None) -> None:
        if not pending:
            return
        rows = np.asarray([row for _, row in pending], dtype=np.float64)
        p50 = predict_rows(model, rows).runtime_p50_s
        values, coverage = runtime_distribution(model, rows)
        for k, (job, _) in enumerate(pending):
            out[job.job_id] = (float(p50[k]), values[k], coverage[k])
        pending.clear()

    ending: list[tuple[float, int, HistoryJob]] = []
    for index, job in enumerate(jobs):
        while ending and ending[0][0] < job.submit_time_s:
            estimator.observe(heapq.heappop(ending)[2])
            if estimator.model is not batch_model:
                flush(batch_model)  # rows made under the snapshot they were made for
                batch_model = estimator.model
        if job.end_time_s is not None and job.run_s is not None:
            pending.append((job, estimator.submit_row(job)))
            heapq.heappush(ending, (job.end_time_s, index, job))
        else:
            # A job that never ends in the trace must not count in the load forever.
            pending.append((job, estimator.state.row(job)))
    flush(batch_model)
    return out


def history_distributions(trace: str | Path, workload: Workload) -> RuntimeDistributions:
    """The history estimator's p50 and run-time distribution for every job of ``workload``
    (the request, certain, for a job it has none for)."""
    by_id = _replay_history(trace)
    n = workload.jobs
    width = max((len(v[1]) for v in by_id.values()), default=1) + 1
    values = np.empty((n, width), dtype=np.int64)
    coverage = np.empty((n, width), dtype=np.float64)
    p50 = np.empty(n, dtype=np.int64)
    for k, (job_id, req) in enumerate(zip(workload.job_ids, workload.req_s, strict=True)):
        known = by_id.get(str(job_id))
        if known is None:
            p50[k] = req
            values[k] = req
            coverage[k] = 1.0
            continue
        point, run_s, cover = known
        p50[k] = min(max(round(point), 1), req)
        # Capped at the request (the kill time); the request itself closes every row.
        row = np.minimum(np.maximum(np.round(run_s), 1), req).astype(np.int64)
        values[k, : len(row)] = row
        coverage[k, : len(row)] = cover
        values[k, len(row) :] = req
        coverage[k, len(row) :] = 1.0
    return RuntimeDistributions(p50_s=p50, values_s=values, coverage=coverage)


def model_estimates(trace: str | Path, workload: Workload) -> np.ndarray:
    """The history estimator's p50 for every job of ``workload`` (the request where none)."""
    return history_distributions(trace, workload).p50_s
