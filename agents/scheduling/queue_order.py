"""Giving the batch system the rightsize order (agents/ordering.py), poll after poll.

After each monitor poll of a system whose executor can set priorities
(``Executor.priority_setter()``: SLURM's ``scontrol update Priority``), at most every
``SchedulerConfig.order_interval_s``: ``order_round`` ranks that system's pending jobs
(jobs past the starvation bound first, then the largest predicted expansion factor) with
each Rightsize job's predicted walltime (its ledger entry's ``walltime_s``; a job
Rightsize did not plan is ordered by its own time limit) and sets their priorities.

What goes wrong is logged and never raised: no operator rights gives one warning (the
round stops at the first refusal, ``apply_order``), then the system is left alone for
``order_retry_s`` (the center keeps its own order); a controller that does not answer
is retried at the next round.

The guarantee (docs/simulations.md, "The tail") needs the running jobs' kill times not
to slip past a starved job's reservation: before an in-place extension on a system where
a job is past the bound, ``extension_blocked`` reads the queue and computes the starved
job's reservation as EASY does with exact upper bounds (``reservation``: the earliest
time enough nodes of its pool are free if every running job ends at its limit), with the
running job's limit as it is and as the extension would make it. An extension that moves
the reservation later is refused as the batch system would refuse it (recorded, the job
is killed at its limit, the Re-scheduler resubmits it); one that does not (the job's
nodes are not the ones the starved job waits for, or are freed in time anyway) goes
ahead. Where the reservation cannot be known (a running job without a start or a limit,
no node counts, the queue unreadable) the extension is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agents.ordering import Ordering, OrderOutcome, order_round
from agents.rescheduler import submitted
from agents.scheduling.entries import segment_ended
from agents.scheduling.parts import SchedulerParts
from knowledge_base.errors import RightsizeError
from knowledge_base.records import JobState, PlanStatus
from tools.actuators.state import ClusterState

__all__ = ["QueueOrdering", "SystemOrder", "reservation"]

log = logging.getLogger("agents.scheduler")


@dataclass
class SystemOrder:
    """One system's last order round: when, what it ranked, and why it stopped."""

    at: datetime | None = None
    ordering: Ordering | None = None
    outcome: OrderOutcome | None = None
    refused_at: datetime | None = None  # the last "rights" refusal: wait order_retry_s
    starved: list[str] = field(default_factory=list)


class QueueOrdering(SchedulerParts):
    """Sets the rightsize order on every system that takes priorities."""

    _orders: dict[str, SystemOrder]

    async def order_queue(self, system: str) -> OrderOutcome | None:
        """One round on ``system`` when it is due; None when nothing was tried (no
        ordering configured, the executor takes no priorities, not due yet)."""
        config = self.config.ordering
        executor = self.executors.get(system)
        if config is None or executor is None:
            return None
        setter = executor.priority_setter()
        if setter is None:
            return None
        state = self._orders.setdefault(system, SystemOrder())
        now = executor.now()
        if state.at is not None and now - state.at < timedelta(
            seconds=self.config.order_interval_s
        ):
            return None
        retry = timedelta(seconds=self.config.order_retry_s)
        if state.refused_at is not None and now - state.refused_at < retry:
            return None
        state.at = now
        estimates = await self._predicted_walltimes(system)
        ordering, outcome = await order_round(executor, setter, estimates, config)
        state.ordering, state.outcome = ordering, outcome
        if ordering is not None:
            state.starved = ordering.starved
        if outcome.stopped == "rights":
            state.starved = []  # the center's own order runs: nothing to protect here
            if state.refused_at is None:  # the warning with SLURM's answer is apply_order's
                log.info(
                    "%s: no rights to set priorities; the center keeps its own order, "
                    "tried again in %.0f s (docs/simulations.md: operator rights)",
                    system,
                    self.config.order_retry_s,
                )
            state.refused_at = now
            return outcome
        state.refused_at = None
        if ordering is not None and (outcome.set or outcome.stopped):
            log.info(
                "%s: rightsize order set on %d of %d pending jobs%s%s",
                system,
                len(outcome.set),
                len(ordering.jobs),
                f"; starved: {', '.join(ordering.starved)}" if ordering.starved else "",
                f"; stopped ({outcome.stopped})" if outcome.stopped else "",
            )
        return outcome

    async def extension_blocked(self, system: str, job_id: str, new_limit_s: int) -> str | None:
        """Why raising ``job_id``'s limit on ``system`` to ``new_limit_s`` would delay a
        starved job's reservation; None when it may go ahead."""
        state = self._orders.get(system)
        starved = [] if state is None else [s for s in state.starved if s != job_id]
        executor = self.executors.get(system)
        if not starved or executor is None:
            return None
        try:
            cluster = await executor.cluster_state()
        except RightsizeError as exc:
            return (
                f"job {starved[0]} waited past the starvation bound and its reservation "
                f"could not be checked (the queue did not answer: {exc})"
            )
        for waiting in starved:
            if not any(e.job_id == waiting and e.state is JobState.PENDING for e in cluster.jobs):
                continue  # started or gone: nothing to protect
            before = reservation(cluster, waiting)
            after = reservation(cluster, waiting, extended=(job_id, new_limit_s))
            if before is None or after is None:
                return (
                    f"job {waiting} waited past the starvation bound and its reservation "
                    "is not known (a running job without a start or a limit, or no node "
                    "counts)"
                )
            if after > before:
                return (
                    f"job {waiting} waited past the starvation bound; the extension would "
                    f"move its reservation from {before:%Y-%m-%d %H:%M:%S} to "
                    f"{after:%Y-%m-%d %H:%M:%S}"
                )
        return None

    async def _predicted_walltimes(self, system: str) -> dict[str, float]:
        """job id -> the predicted walltime Rightsize submitted it with, for every job of
        ``system`` its ledgers hold as in flight (the queue says which are pending)."""
        found: dict[str, float] = {}
        for status in (PlanStatus.APPROVED, PlanStatus.SUBMITTED, PlanStatus.RUNNING):
            for plan in await self.kb.list_plans(status=status):
                if plan.option is None or plan.option.system != system:
                    continue
                for segment in submitted(plan):
                    if segment.job_id and not segment_ended(segment):
                        found[segment.job_id] = float(segment.limit_s)
        return found


def reservation(
    cluster: ClusterState, job_id: str, *, extended: tuple[str, int] | None = None
) -> datetime | None:
    """When pending ``job_id`` can start at the latest if every running job of its pool
    ends at its limit (``extended``: one running job's limit as (job id, seconds) instead
    of its own): the earliest time enough nodes are free, EASY's reservation with exact
    upper bounds. None when it cannot be known (a running job without a start or a
    limit, no node count) or never comes (the job needs more nodes than the pool has)."""
    job = next((e for e in cluster.jobs if e.job_id == job_id), None)
    if job is None:
        return None
    pools = [p for p in cluster.pools if job.partition in p.partitions] or cluster.pools
    if not pools or any(p.total_nodes is None for p in pools):
        return None
    partitions = {name for pool in pools for name in pool.partitions}
    free = sum(pool.total_nodes or 0 for pool in pools)
    ends: list[tuple[datetime, int]] = []
    for entry in cluster.jobs:
        if entry.state is not JobState.RUNNING or entry.partition not in partitions:
            continue
        limit = entry.time_limit_s
        if extended is not None and entry.job_id == extended[0]:
            limit = extended[1]
        if entry.start_time is None or not limit:
            return None
        free -= entry.nodes
        ends.append((entry.start_time + timedelta(seconds=limit), entry.nodes))
    if free >= job.nodes:
        return cluster.taken_at
    for end, nodes in sorted(ends):
        free += nodes
        if free >= job.nodes:
            return max(end, cluster.taken_at)
    return None
