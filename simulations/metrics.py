"""What a replay measured: waits, bounded slowdown, utilization, kills."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BSLD_FLOOR_S", "SimulationResult", "bounded_slowdown", "summarize"]

BSLD_FLOOR_S = 10
"""bsld = max(1, (wait + run) / max(run, 10 s)): short jobs do not dominate the mean."""


class SimulationResult(BaseModel):
    """One replay's figures; the JSON keys other programs read are the first eight."""

    model_config = ConfigDict(extra="forbid")

    jobs: int
    dropped: int
    mean_wait_s: float
    mean_bsld: float
    utilization: float = Field(description="Processor-seconds used / available until makespan")
    killed: int = Field(description="Jobs killed at their walltime request")
    seconds: float = Field(description="Wall time of the replay itself")
    jobs_per_s: float
    policy: str
    estimate: str
    order: str = Field(default="fcfs", description="EASY's backfill order")
    queue_order: str = Field(
        default="fcfs", description="The queue's order (which job is the head)"
    )
    cpu_seconds: float = Field(default=0.0, description="CPU (process) time of the replay itself")
    corrected: bool = Field(
        default=False, description="Outlived estimates corrected from a distribution"
    )
    oracle: bool = Field(default=False, description="The estimate knew every run time: a bound")
    trace: str
    machine_procs: int
    p50_wait_s: float
    p90_wait_s: float
    p99_wait_s: float
    max_wait_s: float = 0.0
    max_bsld: float
    p99_bsld: float = 0.0
    makespan_s: int
    resubmissions: int = 0
    dropped_by_reason: dict[str, int] = Field(default_factory=dict)


def bounded_slowdown(wait_s: np.ndarray, run_s: np.ndarray) -> np.ndarray:
    bsld: np.ndarray = np.maximum(1.0, (wait_s + run_s) / np.maximum(run_s, BSLD_FLOOR_S))
    return bsld


def summarize(
    *,
    submit_s: np.ndarray,
    start_s: np.ndarray,
    end_s: np.ndarray,
    procs: np.ndarray,
    killed: np.ndarray,
    machine_procs: int,
) -> dict[str, float | int]:
    """The headline figures from one schedule (run time = what the job really ran)."""
    wait = (start_s - submit_s).astype(np.float64)
    ran = (end_s - start_s).astype(np.float64)
    bsld = bounded_slowdown(wait, ran)
    first, last = int(submit_s.min()), int(end_s.max())
    makespan = max(1, last - first)
    return {
        "mean_wait_s": float(wait.mean()),
        "p50_wait_s": float(np.percentile(wait, 50)),
        "p90_wait_s": float(np.percentile(wait, 90)),
        "p99_wait_s": float(np.percentile(wait, 99)),
        "max_wait_s": float(wait.max()),
        "mean_bsld": float(bsld.mean()),
        "p99_bsld": float(np.percentile(bsld, 99)),
        "max_bsld": float(bsld.max()),
        "utilization": float((ran * procs).sum() / (machine_procs * makespan)),
        "makespan_s": makespan,
        "killed": int(killed.sum()),
    }
