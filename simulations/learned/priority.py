"""A learned scheduling priority: a small network scores queued jobs, EASY backfills.

After RLScheduler (Zhang et al., SC 2020), whose policy network scores every queued job
from what a scheduler sees (how long it has waited, its request, its size, whether it
fits now) and runs the best one. Here the scores order the queue at every event; the
first job in that order is the head, started if it fits, otherwise given an EASY
reservation; the others backfill in score order as in EASY (a later job may start now
if it ends before the head's reservation by its request, or fits in the processors
spare then). With all weights zero every score ties and the order is arrival order:
plain EASY, which is where training starts.

The event loop is compiled with numba and reuses the simulator's EASY helpers
(:mod:`simulations.engine`); estimates are the users' requests.
"""

# numba types the helpers when it compiles them; mypy cannot follow its dispatch.
# mypy: disable-error-code="arg-type,return-value,assignment,no-any-return"

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
from numba import njit
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulations.engine import _easy_shadow, _start_job
from simulations.metrics import bounded_slowdown

__all__ = ["FEATURES", "PriorityPolicy", "mean_bsld", "simulate_priority"]

FEATURES = ("log_wait", "log_request", "log_procs", "fits_now")
_INF = np.int64(2**62)


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

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        v = np.asarray(self.weights, dtype=np.float64)
        d, h = len(FEATURES), self.hidden
        w1 = v[: d * h].reshape(d, h)
        b1 = v[d * h : d * h + h]
        w2 = v[d * h + h : d * h + 2 * h]
        return w1, b1, w2, float(v[-1])


@njit(cache=True)
def _order_queue(
    queue: Any,
    t: int,
    free: int,
    machine: int,
    submit: Any,
    req: Any,
    procs: Any,
    w1: Any,
    b1: Any,
    w2: Any,
    b2: float,
) -> None:
    n = len(queue)
    scores = np.empty(n, dtype=np.float64)
    x = np.empty(4, dtype=np.float64)
    scale = np.log1p(machine)
    for k in range(n):
        j = queue[k]
        x[0] = np.log1p(t - submit[j]) / 10.0
        x[1] = np.log1p(req[j]) / 12.0
        x[2] = np.log1p(procs[j]) / scale
        x[3] = 1.0 if procs[j] <= free else 0.0
        score = b2
        for h in range(w1.shape[1]):
            a = b1[h]
            for f in range(4):
                a += x[f] * w1[f, h]
            score += np.tanh(a) * w2[h]
        scores[k] = score
    # Stable: equal scores keep arrival order, so zero weights are plain EASY.
    order = np.argsort(scores, kind="mergesort")
    ordered = np.empty(n, dtype=np.int64)
    for k in range(n):
        ordered[k] = queue[order[k]]
    for k in range(n):
        queue[k] = ordered[k]


@njit(cache=True)
def _simulate(
    submit: Any,
    run: Any,
    req: Any,
    procs: Any,
    machine: int,
    w1: Any,
    b1: Any,
    w2: Any,
    b2: float,
    learned: bool,
) -> tuple[Any, Any]:
    n = submit.shape[0]
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    killed = np.zeros(n, dtype=np.bool_)
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    running = [np.int64(0)]
    running.pop()
    queue = [np.int64(0)]
    queue.pop()
    free = machine
    arrived = 0
    while arrived < n or len(queue) > 0 or len(heap) > 0:
        t = _INF
        if len(heap) > 0:
            t = heap[0][0]
        if arrived < n and submit[arrived] < t:
            t = submit[arrived]
        while len(heap) > 0 and heap[0][0] <= t:
            _, j = heapq.heappop(heap)
            free += procs[j]
            for k in range(len(running)):
                if running[k] == j:
                    running.pop(k)
                    break
        while arrived < n and submit[arrived] <= t:
            queue.append(arrived)
            arrived += 1
        if len(queue) == 0:
            continue
        if learned and len(queue) > 1:
            _order_queue(queue, t, free, machine, submit, req, procs, w1, b1, w2, b2)
        while len(queue) > 0 and procs[queue[0]] <= free:
            j = queue.pop(0)
            _start_job(j, t, run, req, start, end, killed, heap, running)
            free -= procs[j]
        if len(queue) == 0:
            continue
        head = queue[0]
        shadow, extra = _easy_shadow(t, procs[head], free, running, start, req, req, procs)
        idx = 1
        while idx < len(queue) and free > 0:
            j = queue[idx]
            if procs[j] <= free:
                if t + req[j] <= shadow:
                    _start_job(j, t, run, req, start, end, killed, heap, running)
                    free -= procs[j]
                    queue.pop(idx)
                    continue
                if procs[j] <= extra:
                    _start_job(j, t, run, req, start, end, killed, heap, running)
                    free -= procs[j]
                    extra -= procs[j]
                    queue.pop(idx)
                    continue
            idx += 1
    return start, end


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
    hidden = policy.hidden if policy is not None else 1
    if policy is None:
        w1, b1, w2, b2 = np.zeros((4, hidden)), np.zeros(hidden), np.zeros(hidden), 0.0
    else:
        w1, b1, w2, b2 = policy.arrays()
    result: tuple[np.ndarray, np.ndarray] = _simulate(
        submit_s.astype(np.int64),
        run_s.astype(np.int64),
        req_s.astype(np.int64),
        procs.astype(np.int64),
        int(machine_procs),
        np.ascontiguousarray(w1, dtype=np.float64),
        b1.astype(np.float64),
        w2.astype(np.float64),
        float(b2),
        policy is not None,
    )
    return result


def mean_bsld(
    *,
    submit_s: np.ndarray,
    run_s: np.ndarray,
    req_s: np.ndarray,
    procs: np.ndarray,
    machine_procs: int,
    policy: PriorityPolicy | None,
) -> float:
    start, end = simulate_priority(
        submit_s=submit_s,
        run_s=run_s,
        req_s=req_s,
        procs=procs,
        machine_procs=machine_procs,
        policy=policy,
    )
    return float(
        bounded_slowdown((start - submit_s).astype(float), (end - start).astype(float)).mean()
    )
