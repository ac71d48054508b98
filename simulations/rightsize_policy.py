"""``--policy rightsize``: the backfilling Rightsize recommends to a center.

EASY (the head of the queue keeps its reservation; user requests stay the kill times)
with five changes, each measured on the shared traces (docs/simulations.md, "The
rightsize policy", and ``benchmarks/outcome.py``, settings chosen leave-one-trace-out):

- **the queue's order**: the queue runs largest predicted expansion factor first,
  (wait + estimate) / max(estimate, 10 s), the bounded slowdown the job would have if it
  started now; the first job is the head that holds EASY's reservation. Short jobs go
  ahead of long ones (what bsld rewards), and a job's factor grows as it waits, so
  long jobs age toward the head instead of starving as under shortest-first. This is the
  lever: better estimates with EASY-SJBF alone cannot reach the targets (even perfect run
  times reach only -28 % bsld vs EASY-user on HPC2N);
- **backfill order**: the candidates that fit now are tried in the same order;
- **estimates for scheduling**: each job's estimate is a low quantile (0.3) of its
  run-time distribution as the history estimator predicts it (its candidates with their
  predicted coverage), not the candidate with the best accuracy;
- **corrections**: a running job that outlives its estimate has it raised to its request,
  as EASY++ does (the conditional correction, ``correction_quantile``, is implemented and
  was never chosen);
- **the wait bound** (``starve_long_requests``, 0.5 of the trace's long request, its
  99th percentile; or ``starve_h`` in hours): the oldest job that has waited longer
  goes first (the others past the bound keep their place in the order) and as head
  holds a reservation taken from the running jobs' requests, which backfills must
  respect by their requests. So a job that passes the bound B starts within
  B + (k + 1) x R_max (k older jobs still waiting, R_max the longest request), whatever
  the estimates (docs/simulations.md, "The tail"). The setting is the one that keeps
  p99 and longest wait no worse than EASY++'s on every shared trace.

Nothing here changes when a job is killed: that stays the user's request.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulations.estimates import RuntimeDistributions
from simulations.replay import Schedule, replay
from simulations.workload import Workload

__all__ = ["RightsizePolicy", "long_request_s", "replay_rightsize"]


class RightsizePolicy(BaseModel):
    """The recommended combination: the settings ``benchmarks/outcome.py`` chooses on the
    shared traces (docs/simulations.md gives each leave-one-trace-out fold's choice)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimate_quantile: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="The estimate: the smallest candidate predicted to cover this share",
    )
    correction_quantile: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="After an outlived estimate: this conditional quantile of what is left "
        "(None: the request, as EASY++)",
    )
    order: Literal["fcfs", "sjbf", "saf", "xf"] = Field(
        default="xf", description="The order EASY tries backfill candidates in"
    )
    queue_order: Literal["fcfs", "sjbf", "saf", "xf"] = Field(
        default="xf",
        description="The queue's order: which job is the head and holds the reservation",
    )
    starve_h: float | None = Field(
        default=None,
        gt=0,
        description="The oldest job waiting longer goes first and, as head, is "
        "protected from under-estimated backfills (None: no bound)",
    )
    starve_long_requests: float | None = Field(
        default=0.5,
        gt=0,
        description="The starvation bound as a multiple of the long request: the 99th "
        "percentile of the trace's requests, the time limit long jobs ask for (at a "
        "center: the partition's limit); the shipped bound (None: starve_h's)",
    )
    age_h: float | None = Field(
        default=None,
        gt=0,
        description="The xf key grows by wait / age_h besides: a long job ages as if its "
        "estimate were at most age_h (None: plain xf)",
    )

    @model_validator(mode="after")
    def _one_bound(self) -> RightsizePolicy:
        if self.starve_h is not None and self.starve_long_requests is not None:
            raise ValueError(
                "starve_h and starve_long_requests are two ways to give one bound: "
                f"got starve_h={self.starve_h} and starve_long_requests="
                f"{self.starve_long_requests}; set the other to None"
            )
        return self

    def starve_s(self, workload: Workload) -> int | None:
        """The bound in seconds on ``workload`` (None: no bound)."""
        if self.starve_long_requests is not None:
            return round(self.starve_long_requests * long_request_s(workload))
        return None if self.starve_h is None else round(self.starve_h * 3600)


def long_request_s(workload: Workload) -> float:
    """The 99th percentile of the requests: the limit long jobs ask for. Not the
    longest: one HPC2N-2002 job asked for 2,400 h, where 99 % ask for at most 120 h."""
    return float(np.percentile(workload.req_s, 99))


def replay_rightsize(
    workload: Workload,
    distributions: RuntimeDistributions,
    policy: RightsizePolicy | None = None,
) -> Schedule:
    """Replay ``workload`` under the rightsize policy (EASY, kills at the requests)."""
    chosen = policy or RightsizePolicy()
    return replay(
        workload,
        policy="easy",
        estimate="model",
        model_estimates_s=distributions.quantile_s(chosen.estimate_quantile),
        order=chosen.order,
        queue_order=chosen.queue_order,
        starve_s=chosen.starve_s(workload),
        age_s=None if chosen.age_h is None else chosen.age_h * 3600,
        distribution=(
            None
            if chosen.correction_quantile is None
            else distributions.for_engine(chosen.correction_quantile)
        ),
        label="rightsize",
    )
