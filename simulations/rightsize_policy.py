"""``--policy rightsize``: the backfilling Rightsize recommends to a center.

EASY (the head of the queue keeps its reservation; user requests stay the kill times)
with three changes, each measured on the shared traces (docs/simulations.md, "The
rightsize policy", and ``benchmarks/outcome.py``):

- **estimates for scheduling**: each job's estimate is a quantile of its run-time
  distribution as the history estimator predicts it (its candidates with their predicted
  coverage), not the candidate with the best accuracy;
- **corrections**: a running job that outlives its estimate gets the next estimate from
  its conditional distribution (the smallest run time past what it has run whose
  conditional coverage reaches ``correction_quantile``), not its request at once;
- **backfill order**: candidates that fit now are tried shortest estimate first (SJBF).

Nothing here changes when a job is killed: that stays the user's request.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulations.estimates import RuntimeDistributions
from simulations.replay import Schedule, replay
from simulations.workload import Workload

__all__ = ["RightsizePolicy", "replay_rightsize"]


class RightsizePolicy(BaseModel):
    """The recommended combination; the defaults were chosen leave-one-trace-out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimate_quantile: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="The estimate: the smallest candidate predicted to cover this share",
    )
    correction_quantile: float | None = Field(
        default=0.5,
        gt=0,
        le=1,
        description="After an outlived estimate: this conditional quantile of what is left "
        "(None: the request, as EASY++)",
    )
    order: Literal["fcfs", "sjbf", "saf"] = "sjbf"


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
        distribution=(
            None
            if chosen.correction_quantile is None
            else distributions.for_engine(chosen.correction_quantile)
        ),
        label="rightsize",
    )
