"""Replaying a workload under a policy and an estimate: the simulator's one entry point."""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from knowledge_base.errors import InvalidInputError
from simulations.engine import (
    ARRIVAL,
    CONSERVATIVE,
    EASY,
    EXPANSION,
    FCFS,
    NO_BOUND,
    SHORTEST,
    SMALLEST_AREA,
    Distribution,
    simulate_arrays,
    warm_up,
)
from simulations.metrics import SimulationResult, summarize
from simulations.workload import Workload

__all__ = ["ORACLE_ESTIMATES", "Estimate", "Order", "Policy", "Schedule", "replay"]

Policy = Literal["fcfs", "easy", "conservative"]
Estimate = Literal["user", "last2", "model", "exact"]
Order = Literal["fcfs", "sjbf", "saf", "xf"]
_POLICIES = {"fcfs": FCFS, "easy": EASY, "conservative": CONSERVATIVE}
_ORDERS = {"fcfs": ARRIVAL, "sjbf": SHORTEST, "saf": SMALLEST_AREA, "xf": EXPANSION}
ORACLE_ESTIMATES = frozenset({"exact"})
"""Estimates that know what no scheduler can (every job's run time): bounds, not policies."""


class Schedule:
    """A replay's per-job outcome next to its summary."""

    def __init__(
        self,
        workload: Workload,
        start_s: np.ndarray,
        end_s: np.ndarray,
        killed: np.ndarray,
        reservation_s: np.ndarray,
        result: SimulationResult,
    ) -> None:
        self.workload = workload
        self.start_s = start_s
        self.end_s = end_s
        self.killed = killed
        self.reservation_s = reservation_s
        self.result = result

    @property
    def wait_s(self) -> np.ndarray:
        wait: np.ndarray = self.start_s - self.workload.submit_s
        return wait


def replay(
    workload: Workload,
    *,
    policy: Policy = "easy",
    estimate: Estimate = "user",
    model_estimates_s: np.ndarray | None = None,
    order: Order = "fcfs",
    distribution: Distribution | None = None,
    label: str | None = None,
    queue_order: Order = "fcfs",
    starve_s: int | None = None,
    age_s: float | None = None,
) -> Schedule:
    """Simulate ``workload``; ``model`` needs one estimate per job (e.g. history p50).

    ``order`` is the order EASY tries backfill candidates in: ``fcfs`` (queue order),
    ``sjbf`` (shortest estimate first, as EASY++), ``saf`` (smallest estimate x processors
    first), ``xf`` (largest predicted expansion factor (wait + estimate) / estimate first).
    ``queue_order`` orders the queue itself by the same keys, which decides the head that
    holds EASY's reservation; a job waiting longer than ``starve_s`` goes first, in arrival
    order, and as head is protected: candidates must end before its reservation by their
    requests. ``age_s`` adds wait / ``age_s`` to the ``xf`` key (a long job ages as if
    its estimate were at most ``age_s``). ``distribution`` corrects an outlived estimate
    from the job's conditional run-time distribution (else it is raised to the request).
    ``exact`` estimates are the run times themselves (capped at the request): an oracle,
    a bound for the others.
    ``label`` names the policy in the result (e.g. ``rightsize``)."""
    if policy not in _POLICIES:
        raise InvalidInputError(
            f"unknown policy; use one of {sorted(_POLICIES)}", field="policy", value=policy
        )
    if order not in _ORDERS:
        raise InvalidInputError(
            f"unknown backfill order; use one of {sorted(_ORDERS)}", field="order", value=order
        )
    if queue_order not in _ORDERS:
        raise InvalidInputError(
            f"unknown queue order; use one of {sorted(_ORDERS)}",
            field="queue_order",
            value=queue_order,
        )
    if estimate == "model":
        if model_estimates_s is None or model_estimates_s.shape != workload.submit_s.shape:
            raise InvalidInputError(
                "the model estimate needs one prediction per job",
                field="estimate",
                value=estimate,
            )
        est = np.minimum(np.maximum(model_estimates_s.astype(np.int64), 1), workload.req_s)
    elif estimate in ("user", "last2"):
        est = workload.req_s.copy()
    elif estimate == "exact":
        est = np.minimum(workload.run_s, workload.req_s)
    else:
        raise InvalidInputError(
            "unknown estimate; use user, last2, model or exact", field="estimate", value=estimate
        )
    warm_up()
    began = time.perf_counter()
    began_cpu = time.process_time()
    start, end, killed, reservation = simulate_arrays(
        submit_s=workload.submit_s,
        run_s=workload.run_s,
        req_s=workload.req_s,
        procs=workload.procs,
        est_s=est,
        user=workload.user,
        machine_procs=workload.machine_procs,
        policy=_POLICIES[policy],
        last2=estimate == "last2",
        order=_ORDERS[order],
        distribution=distribution,
        queue_order=_ORDERS[queue_order],
        starve_s=NO_BOUND if starve_s is None else starve_s,
        age_s=age_s,
    )
    seconds = time.perf_counter() - began
    cpu_seconds = time.process_time() - began_cpu
    figures = summarize(
        submit_s=workload.submit_s,
        start_s=start,
        end_s=end,
        procs=workload.procs,
        killed=killed,
        machine_procs=workload.machine_procs,
    )
    result = SimulationResult(
        jobs=workload.jobs,
        dropped=sum(workload.dropped.values()),
        seconds=seconds,
        jobs_per_s=workload.jobs / seconds if seconds > 0 else float("inf"),
        cpu_seconds=cpu_seconds,
        policy=label or policy,
        estimate=estimate,
        order=order,
        queue_order=queue_order,
        corrected=distribution is not None,
        oracle=estimate in ORACLE_ESTIMATES,
        trace=workload.name,
        machine_procs=workload.machine_procs,
        dropped_by_reason=dict(workload.dropped),
        **figures,
    )
    return Schedule(workload, start, end, killed, reservation, result)
