"""Per-job run-time estimates from the history estimator, for ``--estimate model``.

The history estimator is replayed over the trace's own timeline (a job is learned from
once it ended in the original log), online: each job's estimate uses only jobs that had
finished before it was submitted. Its p50 then drives the simulator's reservations,
capped at the request, and raised to the request if a job outlives it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulations.workload import Workload
from tools.estimators.replay import history_job_from_swf, replay
from tools.traces.swf import SWFReader

__all__ = ["model_estimates"]


def model_estimates(trace: str | Path, workload: Workload) -> np.ndarray:
    """The history estimator's p50 for every job of ``workload`` (the request where none)."""
    with SWFReader(trace) as reader:
        header = reader.header
        result = replay(history_job_from_swf(job, header) for job in reader)
    by_id = {
        job.job_id: p50 for job, p50 in zip(result.jobs, result.model.runtime_p50_s, strict=True)
    }
    estimates = np.array(
        [by_id.get(str(job_id), np.nan) for job_id in workload.job_ids], dtype=np.float64
    )
    missing = np.isnan(estimates)
    estimates[missing] = workload.req_s[missing]
    return np.round(estimates).astype(np.int64)
