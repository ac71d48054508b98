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
to slip while a job is past the bound: ``extension_blocked`` names the starved job that
an in-place extension on that system would delay, and the Scheduler then refuses the
extension as the batch system would (recorded, the job times out at its limit, the
Re-scheduler resubmits it). Without the running jobs' node counts the starved job's
reservation is not known here; its lower bound is the earliest kill time of a running
job, which an extension can only move later, so every extension is held while a job is
starved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agents.ordering import Ordering, OrderOutcome, order_round
from agents.rescheduler import submitted
from agents.scheduling.entries import segment_ended
from agents.scheduling.parts import SchedulerParts
from knowledge_base.records import PlanStatus

__all__ = ["QueueOrdering", "SystemOrder"]

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

    def extension_blocked(self, system: str, job_id: str) -> str | None:
        """The starved job an in-place extension of ``job_id`` on ``system`` would delay,
        or None when the extension may go ahead."""
        state = self._orders.get(system)
        if state is None:
            return None
        others = [starved for starved in state.starved if starved != job_id]
        return others[0] if others else None

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
