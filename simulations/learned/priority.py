"""A learned scheduling priority: a small network scores queued jobs, EASY backfills.

After RLScheduler (Zhang et al., SC 2020), whose policy network scores every queued job
from what a scheduler sees (how long it has waited, its request, its size, whether it
fits now) and runs the best one. Here the scores order the queue at every event; the
first job in that order is the head, started if it fits, otherwise given an EASY
reservation; the others backfill in score order as in EASY (a later job may start now
if it ends before the head's reservation by its request, or fits in the processors
spare then). With all weights zero every score ties and the order is arrival order:
plain EASY, which is where training starts.

The scheduling is the simulator's own compiled EASY loop (:mod:`simulations.engine`), given
the policy's weights as its queue scorer; estimates are the users' requests.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulations.engine import EASY, SCORE_FEATURES, Scorer, simulate_arrays

__all__ = ["FEATURES", "PriorityPolicy", "simulate_priority"]

FEATURES = SCORE_FEATURES


class PriorityPolicy(BaseModel):
    """A 4 -> hidden (tanh) -> 1 scorer; the lowest score runs first."""

    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(ge=1)
    weights: list[float]

    @model_validator(mode="after")
    def _size_matches(self) -> PriorityPolicy:
        if len(self.weights) != self.size(self.hidden):
            raise ValueError(f"a {self.hidden}-unit policy has {self.size(self.hidden)} weights")
        return self

    @staticmethod
    def size(hidden: int) -> int:
        return len(FEATURES) * hidden + hidden + hidden + 1

    @classmethod
    def from_vector(cls, vector: np.ndarray, hidden: int) -> PriorityPolicy:
        return cls(hidden=hidden, weights=[float(v) for v in vector])

    def arrays(self) -> Scorer:
        v = np.asarray(self.weights, dtype=np.float64)
        d, h = len(FEATURES), self.hidden
        w1 = v[: d * h].reshape(d, h)
        b1 = v[d * h : d * h + h]
        w2 = v[d * h + h : d * h + 2 * h]
        return w1, b1, w2, float(v[-1])


def simulate_priority(
    *,
    submit_s: np.ndarray,
    run_s: np.ndarray,
    req_s: np.ndarray,
    procs: np.ndarray,
    machine_procs: int,
    policy: PriorityPolicy | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) per job; ``policy=None`` is plain EASY (arrival order)."""
    start, end, _, _ = simulate_arrays(
        submit_s=submit_s,
        run_s=run_s,
        req_s=req_s,
        procs=procs,
        est_s=req_s,
        user=np.full(submit_s.shape, -1, dtype=np.int64),
        machine_procs=machine_procs,
        policy=EASY,
        last2=False,
        scorer=None if policy is None else policy.arrays(),
    )
    return start, end
